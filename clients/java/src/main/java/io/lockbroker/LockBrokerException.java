package io.lockbroker;

/**
 * Base of every error this library throws for a broker's answer or a session's fate. {@link #code()}
 * is a stable word to branch on: a broker error code ({@code BADARG}, {@code LOST}, ...) or one of the
 * library's ({@code CONNECT}, {@code VERSION}, {@code SESSION}, {@code PROTOCOL}).
 * Misuse (a closed client, unlock by a thread that does not hold the lock) throws the JDK's own
 * {@link IllegalStateException} or {@link IllegalMonitorStateException} instead.
 */
public abstract class LockBrokerException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final String code;

    protected LockBrokerException(String code, String message, Throwable cause) {
        super(message, cause);
        this.code = code;
    }

    /** The word that says what happened; the message is for people and may change. */
    public String code() {
        return code;
    }
}
