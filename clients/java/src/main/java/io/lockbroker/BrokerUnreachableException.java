package io.lockbroker;

/**
 * No broker of the client's list could be reached (connect, TLS handshake or {@code HELLO} failed);
 * {@link #getCause()} says why for the last one tried. {@link #code()} is {@code CONNECT}.
 */
public class BrokerUnreachableException extends LockBrokerException {
    private static final long serialVersionUID = 2L;

    BrokerUnreachableException(String message, Throwable cause) {
        super("CONNECT", message, Origin.cause(cause));
    }
}
