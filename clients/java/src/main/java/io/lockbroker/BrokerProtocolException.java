package io.lockbroker;

/** The broker sent a line this library cannot read: a bug on one side; the connection is closed. */
public class BrokerProtocolException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    public BrokerProtocolException(String message) {
        super("PROTOCOL", message, null);
    }

    public BrokerProtocolException(String message, Throwable cause) {
        super("PROTOCOL", message, cause);
    }
}
