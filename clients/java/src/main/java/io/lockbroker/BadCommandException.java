package io.lockbroker;

/** {@code ERR BADCMD}: the broker does not know the verb (a broker older than this library expects). */
public class BadCommandException extends BrokerErrorException {
    private static final long serialVersionUID = 1L;

    public BadCommandException(String text) {
        super("BADCMD", text);
    }
}
