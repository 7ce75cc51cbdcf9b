package io.lockbroker;

/** {@code ERR LIMIT} (or {@code EVENT FAILED <key> LIMIT}): a broker limit was reached (keys or waits per session, sessions). */
public class LimitException extends BrokerErrorException {
    private static final long serialVersionUID = 1L;

    public LimitException(String text) {
        super("LIMIT", text);
    }
}
