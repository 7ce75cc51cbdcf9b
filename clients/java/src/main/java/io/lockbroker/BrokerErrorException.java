package io.lockbroker;

/**
 * The broker answered {@code ERR <CODE> <text>} (or a wait ended with {@code EVENT FAILED <key> <CODE>}).
 * Each code has its own subclass; {@link #of} picks it.
 */
public class BrokerErrorException extends LockBrokerException {
    private static final long serialVersionUID = 1L;
    private final String text;

    protected BrokerErrorException(String code, String text) {
        this(code, text, null);
    }

    protected BrokerErrorException(String code, String text, Throwable cause) {
        super(code, code + (text.isEmpty() ? "" : " " + text), cause);
        this.text = text;
    }

    /** The broker's text after the code (for people: branch on {@link #code()}). */
    public String text() {
        return text;
    }

    /** The exception for an error code, with the broker's text. Unknown codes keep their word. */
    public static BrokerErrorException of(String code, String text) {
        switch (code) {
            case "BADCMD": return new BadCommandException(text);
            case "BADARG": return new BadArgumentException(text);
            case "TOOLONG": return new LineTooLongException(text);
            case "NOAUTH": return new NotAuthenticatedException(text);
            case "NOTHELD": return new NotHeldException(text);
            case "LOST": return new LockLostException(text);
            case "UNAVAILABLE": return new UnavailableException(text);
            case "LIMIT": return new LimitException(text);
            case "NOSESSION": return new NoSessionException(text);
            case "DENIED": return new DeniedException(text);
            default: return new BrokerErrorException(code, text);
        }
    }
}
