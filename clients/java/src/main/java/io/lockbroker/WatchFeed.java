package io.lockbroker;

import java.time.Duration;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.Predicate;

/**
 * What a {@link KeyWatch} is inside the client: its latest state, its listener, and the monitor its
 * awaits wait on. The client's watches refer to this, never to the KeyWatch handed to the user.
 */
final class WatchFeed {
    private final Watches owner;
    private final String key;
    private final Consumer<KeyState> listener;
    private final Consumer<LockBrokerException> onFailure;
    private KeyState latest;
    private boolean closed;
    private LockBrokerException failure;

    WatchFeed(Watches owner, String key, Consumer<KeyState> listener, Consumer<LockBrokerException> onFailure) {
        this.owner = owner;
        this.key = key;
        this.listener = listener;
        this.onFailure = onFailure;
    }

    String key() {
        return key;
    }

    /** The latest state the broker sent, or null before the first. */
    synchronized KeyState state() {
        return latest;
    }

    /** Why the broker ended the watch (it refused WATCH on a new session), or null. */
    synchronized LockBrokerException failure() {
        return failure;
    }

    /**
     * Waits until the latest state satisfies p (checked now and at each change); returns it, or null
     * if timeout passed first (or the watch was closed). Throws the failure if the broker ended it.
     */
    KeyState await(Predicate<KeyState> p, Duration timeout) throws InterruptedException {
        Deadline d = Deadline.in(timeout.toNanos(), TimeUnit.NANOSECONDS);
        synchronized (this) {
            while (latest == null || !p.test(latest)) {
                if (failure != null) {
                    throw failure;
                }
                if (d.passed() || closed) {
                    return null;
                }
                wait(Math.max(1, d.msLeft()));
            }
            return latest;
        }
    }

    /** Stops the watch (UNWATCH once no watch of this client is left on the key). */
    void close() {
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
            notifyAll();
        }
        owner.unwatch(this);
    }

    void update(KeyState s, Executor callbacks) {
        synchronized (this) {
            if (closed) {
                return;
            }
            latest = s;
            notifyAll();
        }
        post(callbacks, listener, s);
    }

    /** Calls l with x on the client's callback thread, if there is an l; l's failure is its own. */
    private static <T> void post(Executor callbacks, Consumer<T> l, T x) {
        if (l != null) {
            callbacks.execute(() -> {
                try {
                    l.accept(x);
                } catch (RuntimeException e) {
                    // the listener's failure is its own
                }
            });
        }
    }

    /** The client closed: awaits return, the listener hears nothing more. */
    void end() {
        synchronized (this) {
            closed = true;
            notifyAll();
        }
    }

    /** The broker ended the watch with why: awaits throw it, onFailure hears it (once). */
    void fail(LockBrokerException why, Executor callbacks) {
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
            failure = why;
            notifyAll();
        }
        post(callbacks, onFailure, why);
    }
}
