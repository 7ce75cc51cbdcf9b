package io.lockbroker;

/** A wait ran out before the key was granted (the {@code EVENT TIMEOUT} outcome), for calls that cannot answer {@code false}. */
public class LockTimeoutException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    public LockTimeoutException(String message) {
        super("TIMEOUT", message, null);
    }

    public LockTimeoutException(String message, Throwable cause) {
        super("TIMEOUT", message, cause);
    }
}
