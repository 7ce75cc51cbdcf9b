package io.lockbroker;

/** {@code ERR DENIED}: the key is outside the patterns of the app this client authenticated as. */
public class DeniedException extends BrokerErrorException {
    private static final long serialVersionUID = 1L;

    public DeniedException(String text) {
        super("DENIED", text);
    }
}
