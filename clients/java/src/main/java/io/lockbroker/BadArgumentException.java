package io.lockbroker;

/** {@code ERR BADARG}: the broker refused the arguments, or the key is of another kind (a lock asked as a semaphore, an exclusive take of a key held shared); the text says which. */
public class BadArgumentException extends BrokerErrorException {
    private static final long serialVersionUID = 2L;

    BadArgumentException(String message, String text, Origin o) {
        super("BADARG", message, text, o);
    }
}
