package io.lockbroker;

/** The session ended and could not be resumed within the retry budget: its holds are lost and the call could not be completed. */
public class SessionLostException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    public SessionLostException(String message) {
        super("SESSION", message, null);
    }

    public SessionLostException(String message, Throwable cause) {
        super("SESSION", message, cause);
    }
}
