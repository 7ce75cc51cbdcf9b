package io.lockbroker;

/** {@code ERR LIMIT} (or {@code EVENT FAILED <key> LIMIT}): a broker limit was reached (keys held or waits per session, sessions, watches); nothing changed. */
public class LimitExceededException extends BrokerErrorException {
    private static final long serialVersionUID = 2L;

    LimitExceededException(String message, String text, Origin o) {
        super("LIMIT", message, text, o);
    }
}
