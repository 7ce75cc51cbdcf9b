package io.lockbroker;

import java.util.concurrent.CompletableFuture;

/**
 * The thread behind a {@link LockClient#lockAsync} future: it runs the take (a blocking
 * {@link LockClient#acquire}) and completes the future; a cancel of the future interrupts it while it
 * runs, which withdraws the broker's wait ({@code CANCEL}) and gives back a grant that raced it. A
 * hold granted after the future was cancelled is released at once.
 */
final class AsyncTake {
    /** The take: acquire's, on this thread. */
    interface Body {
        Hold run() throws InterruptedException;
    }

    private final CompletableFuture<Hold> future = new CompletableFuture<>();
    private Thread runner; // guarded by this: interrupted on cancel while it runs

    private AsyncTake() {
    }

    static CompletableFuture<Hold> start(String key, Body body) {
        AsyncTake t = new AsyncTake();
        t.future.whenComplete((h, e) -> {
            if (t.future.isCancelled()) {
                t.interrupt();
            }
        });
        Thread th = new Thread(() -> t.run(body), "lockbroker-lockAsync " + key);
        th.setDaemon(true);
        synchronized (t) {
            t.runner = th;
        }
        th.start();
        return t.future;
    }

    private void run(Body body) {
        try {
            if (future.isCancelled()) {
                return;
            }
            Hold h = body.run();
            if (!future.complete(h)) {
                synchronized (this) {
                    runner = null;
                }
                Thread.interrupted();
                try {
                    h.close();          // cancelled meanwhile: nobody will use it
                } catch (LockBrokerException e) {
                    // lost already, or the client closed: nothing is held either way
                }
            }
        } catch (InterruptedException e) {
            future.cancel(false);
        } catch (RuntimeException e) {
            future.completeExceptionally(e);
        } finally {
            synchronized (this) {
                runner = null;
            }
        }
    }

    private synchronized void interrupt() {
        if (runner != null) {
            runner.interrupt();
        }
    }
}
