package io.lockbroker;

/**
 * Base of every error this library throws for a broker's answer or a session's fate. Its message says
 * what happened to which key, for people ({@code orders:42: the lock was lost (token 1795805345549156)});
 * the rest is in fields: {@link #code()}, a stable word to branch on (a broker error code such as
 * {@code LOST}, or one of the library's: {@code TIMEOUT}, {@code SESSION}, {@code PROTOCOL},
 * {@code CLOSED}, {@code CONNECT}, {@code VERSION}), {@link #key()}, {@link #reply()} (the broker's
 * line that said so) and {@link #request()} (the request it answered). Each kind has its own
 * subclass; the README's error table maps them to the wire.
 *
 * <p>Misuse of a {@link java.util.concurrent.locks.Lock} (an unlock by a thread that does not hold
 * it) throws the JDK's {@link IllegalMonitorStateException}, and an argument the library refuses
 * before sending anything (a key with a blank) {@link IllegalArgumentException}.
 */
public abstract class LockBrokerException extends RuntimeException {
    private static final long serialVersionUID = 2L;

    /**
     * Where an error came from: the key it concerns, the broker's line, the request line (secrets
     * left out) and the cause; each may be null.
     */
    record Origin(String key, String reply, String request, Throwable cause) {
        static final Origin NONE = new Origin(null, null, null, null);

        static Origin cause(Throwable cause) {
            return new Origin(null, null, null, cause);
        }

        static Origin key(String key) {
            return new Origin(key, null, null, null);
        }

        /** "key: " before a message about the key, or nothing. */
        String prefix() {
            return key == null ? "" : key + ": ";
        }
    }

    private final String code;
    private final String key;
    private final String reply;
    private final String request;

    LockBrokerException(String code, String message, Origin o) {
        super(message, o.cause());
        this.code = code;
        this.key = o.key();
        this.reply = o.reply();
        this.request = o.request();
    }

    /** The word that says what happened; the message is for people and may change. */
    public String code() {
        return code;
    }

    /** The key the error concerns, or null (a session's or connection's error). */
    public String key() {
        return key;
    }

    /**
     * The broker's line that told it ({@code ERR DENIED app billing may not use this key},
     * {@code EVENT LOST orders:42 1795805345549156}), or null when the library found it itself.
     */
    public String reply() {
        return reply;
    }

    /** The request the broker answered ({@code ACQUIRE orders:42 WAIT 5000 ASYNC}), or null. */
    public String request() {
        return request;
    }
}
