package io.lockbroker;

/** {@code ERR BADCMD}: the broker does not know the verb: it is older than this library needs (a word of a later protocol). Not retried: the library fails the call, and a leader latch its listeners. */
public class BadCommandException extends BrokerErrorException {
    private static final long serialVersionUID = 2L;

    BadCommandException(String message, String text, Origin o) {
        super("BADCMD", message, text, o);
    }
}
