package io.lockbroker;

/**
 * The broker sent a line this library cannot read (or one that does not answer the request), a bug on
 * one side; the connection is closed. {@link #reply()} is the line, {@link #request()} the request.
 */
public class ProtocolErrorException extends LockBrokerException {
    private static final long serialVersionUID = 2L;

    ProtocolErrorException(String message) {
        super("PROTOCOL", message, Origin.NONE);
    }

    ProtocolErrorException(String message, Origin o) {
        super("PROTOCOL", message, o);
    }
}
