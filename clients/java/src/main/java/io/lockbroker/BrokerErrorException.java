package io.lockbroker;

/**
 * The broker answered {@code ERR <CODE> <text>} (or a wait ended with {@code EVENT FAILED <key> <CODE>}).
 * Each code has its own subclass; {@link #text()} is the broker's text, and the message is the key
 * with that text ({@code reports:daily: app billing may not use this key}).
 */
public class BrokerErrorException extends LockBrokerException {
    private static final long serialVersionUID = 2L;
    private final String text;

    BrokerErrorException(String code, String message, String text, Origin o) {
        super(code, message, o);
        this.text = text;
    }

    /** The broker's text after the code (for people: branch on {@link #code()}). */
    public String text() {
        return text;
    }

    /**
     * The exception for an error code, with the broker's text, about o's key: the message is the key
     * and the text (a phrase of the library's when the text is empty). Unknown codes keep their word.
     */
    static BrokerErrorException of(String code, String text, Origin o) {
        String what = text.isEmpty() ? phrase(code) : text;
        String m = o.prefix() + what;
        switch (code) {
            case "BADCMD": return new BadCommandException(commandMessage(o, what), text, o);
            case "BADARG": return new BadArgumentException(m, text, o);
            case "TOOLONG": return new LineTooLongException(m, text, o);
            case "NOAUTH": return new NotAuthenticatedException(m, text, o);
            case "NOTHELD": return new NotHeldException(m, text, o);
            case "LOST": return new LockLostException(o.prefix() + "the lock was lost", text, 0, o);
            case "UNAVAILABLE": return new UnavailableException(m, text, o);
            case "LIMIT": return new LimitExceededException(m, text, o);
            case "NOSESSION": return new NoSessionException(m, text, o);
            case "DENIED": return new DeniedException(m, text, o);
            default: return new BrokerErrorException(code, o.prefix() + code + " " + text, text, o);
        }
    }

    /** BADCMD names the verb the broker lacks: the library needs a newer broker. */
    private static String commandMessage(Origin o, String what) {
        String req = o.request();
        String verb = req == null ? "a request" : req.split(" ", 2)[0];
        return "the broker does not know " + verb + " (" + what + "): it speaks an older protocol than this library needs";
    }

    private static String phrase(String code) {
        switch (code) {
            case "NOTHELD": return "this session does not hold the key";
            case "UNAVAILABLE": return "the broker cannot reach Redis now";
            case "LIMIT": return "a broker limit was reached";
            case "DENIED": return "this app may not use the key";
            case "NOAUTH": return "the broker wants AUTH with a token it accepts";
            default: return "refused by the broker";
        }
    }
}
