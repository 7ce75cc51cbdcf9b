package io.lockbroker;

/** {@code ERR DENIED}: the key is outside the patterns of the app this client authenticated as; nothing changed. */
public class DeniedException extends BrokerErrorException {
    private static final long serialVersionUID = 2L;

    DeniedException(String message, String text, Origin o) {
        super("DENIED", message, text, o);
    }
}
