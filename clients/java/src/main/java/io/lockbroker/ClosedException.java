package io.lockbroker;

/**
 * The client was closed: no call can be made on it any more, and threads that were waiting in it
 * get this. {@link #code()} is {@code CLOSED}.
 */
public class ClosedException extends LockBrokerException {
    private static final long serialVersionUID = 2L;

    ClosedException() {
        super("CLOSED", "the client is closed", Origin.NONE);
    }
}
