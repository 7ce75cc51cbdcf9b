package io.lockbroker;

/** {@code ERR TOOLONG}: a request line over the broker's {@code max_line}; the broker closed the connection. */
public class LineTooLongException extends BrokerErrorException {
    private static final long serialVersionUID = 2L;

    LineTooLongException(String message, String text, Origin o) {
        super("TOOLONG", message, text, o);
    }
}
