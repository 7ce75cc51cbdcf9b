package io.lockbroker;

import java.time.Duration;
import java.util.function.Predicate;

/**
 * A watch of one key ({@link LockClient#watch}): the broker sends the key's state at once, then every
 * change, from whichever broker made it. The listener is called on the client's callback thread, in
 * order; {@link #state()} is the latest state. The watch lives through resumes and new sessions (the
 * library watches again) until {@link #close()} or the client's. A watch keeps its client from being
 * closed by the client's cleaner while you refer to it.
 */
public final class KeyWatch implements AutoCloseable {
    @SuppressWarnings("unused") // keeps the client reachable while the watch is
    private final LockClient client;
    private final WatchFeed feed;

    KeyWatch(LockClient client, WatchFeed feed) {
        this.client = client;
        this.feed = feed;
    }

    public String key() {
        return feed.key();
    }

    /** The latest state the broker sent, or null before the first. */
    public KeyState state() {
        return feed.state();
    }

    /**
     * Waits until the latest state satisfies p (checked now and at each change); returns it, or null
     * if timeout passed first (or the watch was closed). Throws the broker's error if the broker ended
     * the watch ({@link #failure()}).
     */
    public KeyState await(Predicate<KeyState> p, Duration timeout) throws InterruptedException {
        return feed.await(p, timeout);
    }

    /**
     * Why the broker ended this watch, or null: a new session (after a session was lost) watches every
     * key again, and a broker may refuse one (one without {@code WATCH}: BadCommandException;
     * {@code ERR LIMIT}, {@code ERR DENIED}). The watch is over then; it is not asked again.
     */
    public LockBrokerException failure() {
        return feed.failure();
    }

    /** Stops the watch (UNWATCH once no watch of this client is left on the key). */
    @Override
    public void close() {
        feed.close();
    }

    @Override
    public String toString() {
        return "watch of " + key() + ": " + state();
    }
}
