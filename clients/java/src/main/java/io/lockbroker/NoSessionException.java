package io.lockbroker;

/** {@code ERR NOSESSION}: the grace session to resume no longer exists. */
public class NoSessionException extends BrokerErrorException {
    private static final long serialVersionUID = 1L;

    public NoSessionException(String text) {
        super("NOSESSION", text);
    }
}
