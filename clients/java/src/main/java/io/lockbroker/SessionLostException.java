package io.lockbroker;

/**
 * The session ended and could not be resumed within the retry budget: its holds are lost and the call
 * could not be completed. {@link #getCause()} says why the last attempt failed. {@link #code()} is
 * {@code SESSION}.
 */
public class SessionLostException extends LockBrokerException {
    private static final long serialVersionUID = 2L;

    SessionLostException(String message, Throwable cause) {
        super("SESSION", message, Origin.cause(cause));
    }
}
