package io.lockbroker;

import java.util.List;

/**
 * The broker's grant of one key to this client: its token, the session it was granted in (its
 * {@link Session#epoch()}), the listeners told if it is lost, and whether it was lost or is being
 * released. A client holds a key at most once on the broker; reentrancy is counted locally
 * ({@link KeyEntry}). Internal: users see it through a {@link BrokerLock} or a {@link Hold}, and nothing
 * here refers to those (a client nobody refers to any more is closed by its cleaner).
 */
final class Grant {
    final String key;
    final LockSpec spec;
    final long token;
    final List<LostListener> listeners;
    final long epoch;
    final long grantedNanos = System.nanoTime();
    private boolean lost;
    private boolean releasing;
    private boolean ended;
    private LockLostException lostCause;

    Grant(String key, LockSpec spec, long token, List<LostListener> listeners, long epoch) {
        this.key = key;
        this.spec = spec;
        this.token = token;
        this.listeners = listeners;
        this.epoch = epoch;
    }

    /** Marks the grant lost unless it is lost or being released already; true if this call did it. */
    synchronized boolean markLost(LockLostException cause) {
        if (lost || releasing) {
            return false;
        }
        lost = true;
        lostCause = cause;
        return true;
    }

    synchronized boolean lost() {
        return lost;
    }

    synchronized LockLostException lostCause() {
        return lostCause;
    }

    /** Starts the release; false if the grant was lost first. */
    synchronized boolean startRelease() {
        if (lost) {
            return false;
        }
        releasing = true;
        return true;
    }

    synchronized boolean releasing() {
        return releasing;
    }

    /** True once: the first call after the grant ended (released, lost, closed) counts it. */
    synchronized boolean end() {
        if (ended) {
            return false;
        }
        ended = true;
        return true;
    }

    /** The loss of this grant, learnt as why says. */
    LockLostException loss(String why, Throwable cause) {
        return LockLostException.of(key, token, why, null, null, cause);
    }

    @Override
    public String toString() {
        return key + " token " + token;
    }
}
