package io.lockbroker;

import java.util.List;

/**
 * A hook for the session's life: connections, drops, resumes. Every method has an empty default;
 * calls come on the client's callback thread, in order. Use it to log or to count; a lost hold is
 * told separately ({@link LostListener}).
 */
public interface SessionListener {
    /** The client connected and started a session (at build time). */
    default void connected(String address, String clientId) {
    }

    /** The connection ended without the client closing it; the client resumes the session. */
    default void disconnected(String address, Throwable cause) {
    }

    /** The session was resumed on address; keys: what the broker says it still holds. */
    default void resumed(String address, String clientId, List<String> keys) {
    }

    /**
     * The session could not be resumed (no grace, it expired, the broker refused): a new session took
     * its place on address, and every hold of the old one was reported lost.
     */
    default void newSession(String address, String clientId, Throwable cause) {
    }

    /**
     * No broker could be reached within the retry budget: holds were reported lost and waiting calls
     * failed with {@link SessionLostException}. The client keeps trying to start a new session.
     */
    default void down(Throwable cause) {
    }
}
