package io.lockbroker;

/**
 * The broker speaks a protocol older than 1.2, which this library needs ({@code HELLO} told its
 * version). {@link #code()} is {@code VERSION}.
 */
public class BrokerVersionException extends LockBrokerException {
    private static final long serialVersionUID = 2L;

    BrokerVersionException(String message) {
        super("VERSION", message, Origin.NONE);
    }
}
