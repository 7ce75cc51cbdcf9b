package io.lockbroker;

/** {@code ERR UNAVAILABLE} (or {@code EVENT FAILED <key> UNAVAILABLE}): the broker cannot reach Redis; nothing was granted. Retry later, with backoff. */
public class UnavailableException extends BrokerErrorException {
    private static final long serialVersionUID = 2L;

    UnavailableException(String message, String text, Origin o) {
        super("UNAVAILABLE", message, text, o);
    }
}
