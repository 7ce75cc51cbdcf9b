package io.lockbroker;

/**
 * A wait ran out before the key was granted ({@link LockClient#lockAsync}, {@link LockClient#acquire}):
 * another client held it all along. {@code tryLock} answers {@code false} instead, as a
 * {@link java.util.concurrent.locks.Lock} does. {@link #code()} is {@code TIMEOUT}.
 */
public class LockTimeoutException extends LockBrokerException {
    private static final long serialVersionUID = 2L;

    LockTimeoutException(String key, long waitMs) {
        super("TIMEOUT", key + ": not granted within " + waitMs + " ms (held by another client)", Origin.key(key));
    }
}
