package io.lockbroker;

/** {@code ERR NOAUTH}: the broker wants {@code AUTH} with a token it accepts. */
public class NotAuthenticatedException extends BrokerErrorException {
    private static final long serialVersionUID = 1L;

    public NotAuthenticatedException(String text) {
        super("NOAUTH", text);
    }
}
