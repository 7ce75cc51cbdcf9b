package io.lockbroker;

/** {@code ERR NOTHELD}: the session does not hold the key. */
public class NotHeldException extends BrokerErrorException {
    private static final long serialVersionUID = 1L;

    public NotHeldException(String text) {
        super("NOTHELD", text);
    }
}
