package io.lockbroker;

/**
 * A hold is gone: the broker said {@code ERR LOST} or {@code EVENT LOST}, or the session that held it
 * ended (it could not be resumed after a dropped connection, or the client was closed). Stop using the
 * protected resource: another client may hold the key already. {@link #code()} is {@code LOST}.
 */
public class LockLostException extends BrokerErrorException {
    private static final long serialVersionUID = 1L;

    public LockLostException(String text) {
        super("LOST", text);
    }

    LockLostException(String text, Throwable cause) {
        super("LOST", text, cause);
    }
}
