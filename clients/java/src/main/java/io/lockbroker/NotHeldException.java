package io.lockbroker;

/** {@code ERR NOTHELD}: the session does not hold the key; also what a call on a hold this client does not have throws (renew, proclaim, token) before sending anything. */
public class NotHeldException extends BrokerErrorException {
    private static final long serialVersionUID = 2L;

    NotHeldException(String message, String text, Origin o) {
        super("NOTHELD", message, text, o);
    }
}
