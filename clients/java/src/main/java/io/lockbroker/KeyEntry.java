package io.lockbroker;

import java.util.concurrent.locks.ReentrantLock;

/**
 * A key's local state in one client: the local lock that makes threads of the process take turns
 * in front of the broker (the broker's session is reentrant and would let a second thread in), and
 * the broker hold while one is held. The entry lives while some thread holds or waits for the key
 * ({@code refs}, changed only inside the client's map operations).
 */
final class KeyEntry {
    final String key;
    /** Fair: threads of one client get the key in the order they asked for it. */
    final ReentrantLock local = new ReentrantLock(true);
    int refs;
    volatile Hold hold;

    KeyEntry(String key) {
        this.key = key;
    }
}
