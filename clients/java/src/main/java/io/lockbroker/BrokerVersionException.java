package io.lockbroker;

/** The broker speaks a protocol older than 1.2, which this library needs ({@code HELLO} told its version). */
public class BrokerVersionException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    public BrokerVersionException(String message) {
        super("VERSION", message, null);
    }

    public BrokerVersionException(String message, Throwable cause) {
        super("VERSION", message, cause);
    }
}
