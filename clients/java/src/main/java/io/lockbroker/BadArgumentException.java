package io.lockbroker;

/** {@code ERR BADARG}: wrong arguments, or a key of another kind (a lock asked as a semaphore, an exclusive take of a key held shared). */
public class BadArgumentException extends BrokerErrorException {
    private static final long serialVersionUID = 1L;

    public BadArgumentException(String text) {
        super("BADARG", text);
    }
}
