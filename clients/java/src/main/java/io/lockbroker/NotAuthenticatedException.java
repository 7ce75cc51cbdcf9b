package io.lockbroker;

/** {@code ERR NOAUTH}: the broker wants {@code AUTH} with a token it accepts (none was given, or a wrong one). */
public class NotAuthenticatedException extends BrokerErrorException {
    private static final long serialVersionUID = 2L;

    NotAuthenticatedException(String message, String text, Origin o) {
        super("NOAUTH", message, text, o);
    }
}
