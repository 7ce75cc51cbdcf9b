package io.lockbroker;

import java.time.Duration;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.Predicate;

/**
 * A watch of one key ({@link LockClient#watch}): the broker sends the key's state at once, then every
 * change, from whichever broker made it. The listener is called on the client's callback thread, in
 * order; {@link #state()} is the latest state. The watch lives through resumes and new sessions (the
 * library watches again) until {@link #close()}.
 */
public final class KeyWatch implements AutoCloseable {
    private final Watches owner;
    private final String key;
    private final Consumer<KeyState> listener;
    private KeyState latest;
    private boolean closed;

    KeyWatch(Watches owner, String key, Consumer<KeyState> listener) {
        this.owner = owner;
        this.key = key;
        this.listener = listener;
    }

    public String key() {
        return key;
    }

    /** The latest state the broker sent, or null before the first. */
    public synchronized KeyState state() {
        return latest;
    }

    /**
     * Waits until the latest state satisfies p (checked now and at each change); returns it, or null
     * if timeout passed first.
     */
    public KeyState await(Predicate<KeyState> p, Duration timeout) throws InterruptedException {
        Deadline d = Deadline.in(timeout.toNanos(), TimeUnit.NANOSECONDS);
        synchronized (this) {
            while (latest == null || !p.test(latest)) {
                if (d.passed() || closed) {
                    return null;
                }
                wait(Math.max(1, d.msLeft()));
            }
            return latest;
        }
    }

    /** Stops the watch (UNWATCH once no watch of this client is left on the key). */
    @Override
    public void close() {
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
        if (listener != null) {
            callbacks.execute(() -> {
                try {
                    listener.accept(s);
                } catch (RuntimeException e) {
                    // the listener's failure is its own
                }
            });
        }
    }

    @Override
    public String toString() {
        return "watch of " + key + ": " + state();
    }
}
