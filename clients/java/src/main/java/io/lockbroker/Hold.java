package io.lockbroker;

/**
 * The broker's hold on one key for this client: its token, the lock object that took it (whose
 * listeners hear of its loss), and whether it was lost or is being released. A client holds a key
 * at most once on the broker; reentrancy is counted locally ({@link KeyEntry}).
 */
final class Hold {
    final String key;
    final LockSpec spec;
    final long token;
    final BrokerLock by;
    private boolean lost;
    private boolean releasing;
    private LockLostException lostCause;

    Hold(String key, LockSpec spec, long token, BrokerLock by) {
        this.key = key;
        this.spec = spec;
        this.token = token;
        this.by = by;
    }

    /** Marks the hold lost unless it is lost or being released already; true if this call did it. */
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

    /** Starts the release; false if the hold was lost first. */
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

    @Override
    public String toString() {
        return key + " token " + token;
    }
}
