package io.lockbroker;

/** No broker of the client's list could be reached (connect, TLS handshake or {@code HELLO} failed); {@link #getCause()} says why for the last one tried. */
public class BrokerUnreachableException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    public BrokerUnreachableException(String message) {
        super("CONNECT", message, null);
    }

    public BrokerUnreachableException(String message, Throwable cause) {
        super("CONNECT", message, cause);
    }
}
