package io.lockbroker;

/**
 * A hold is gone: the broker said {@code ERR LOST} or {@code EVENT LOST}, or the session that held it
 * ended (it could not be resumed after a dropped connection, it had no grace, or the client was
 * closed). Stop using the protected resource: another client may hold the key already. The message
 * says which key and hold ({@code orders:42: the lock was lost (token 1795805345549156)}) and, after a
 * colon, how the library learnt it. {@link #code()} is {@code LOST}.
 */
public class LockLostException extends BrokerErrorException {
    private static final long serialVersionUID = 2L;
    private final long token;

    LockLostException(String message, String text, long token, Origin o) {
        super("LOST", message, text, o);
        this.token = token;
    }

    /** The fencing token of the hold that was lost (0 when the broker's answer did not say). */
    public long token() {
        return token;
    }

    /** The loss of key's hold with token, learnt as why says (null: the broker's own word). */
    static LockLostException of(String key, long token, String why, String reply, String request, Throwable cause) {
        return new LockLostException(key + ": the lock was lost (token " + token + ")" + (why == null ? "" : ": " + why),
                why == null ? "" : why, token, new Origin(key, reply, request, cause));
    }
}
