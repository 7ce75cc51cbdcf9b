package io.lockbroker;

/** {@code ERR UNAVAILABLE} (or {@code EVENT FAILED <key> UNAVAILABLE}): the broker cannot reach Redis; nothing was granted. Retry later. */
public class UnavailableException extends BrokerErrorException {
    private static final long serialVersionUID = 1L;

    public UnavailableException(String text) {
        super("UNAVAILABLE", text);
    }
}
