package io.lockbroker;

/**
 * The connection a request went out on ended before its reply came. Internal: callers retry on the
 * resumed session, or turn it into what their call promises; a user sees it only from a call that
 * cannot be retried safely.
 */
final class ConnectionLostException extends LockBrokerException {
    private static final long serialVersionUID = 2L;

    /** Whether the request was written before the connection ended (the broker may have run it). */
    final boolean sent;

    ConnectionLostException(String message, Throwable cause, boolean sent) {
        super("CONNECTION", message, Origin.cause(cause));
        this.sent = sent;
    }
}
