package io.lockbroker;

/** {@code ERR NOSESSION}: the grace session to resume no longer exists (the cause of a {@link LockLostException} when a session could not be resumed). */
public class NoSessionException extends BrokerErrorException {
    private static final long serialVersionUID = 2L;

    NoSessionException(String message, String text, Origin o) {
        super("NOSESSION", message, text, o);
    }
}
