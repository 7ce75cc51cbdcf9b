package io.lockbroker;

import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Map;

/**
 * A key's local lock in one client, in front of the broker: its owners take turns on the key (first
 * come, first served), because the broker's session is reentrant and would let a second one in; the
 * owner re-enters without asking the broker. It also keeps the broker's grant while one is held. An
 * owner is a thread (a {@link BrokerLock} is taken and unlocked by one thread) or the caller of
 * {@link LockClient#lockAsync} or {@link LockClient#acquire} (a {@link Hold} may be closed by any
 * thread); a waiting owner waits on a thread of its own either way.
 *
 * <p>A hold reported lost stops keeping the key from the client's other threads at once (the
 * broker holds nothing for it any more): the owner becomes an orphan, whose next unlocks throw the
 * loss, one per lock it still counted. The entry lives while some thread holds it, waits for it or is
 * its orphan ({@code refs}, changed only inside the client's map operations).
 */
final class KeyEntry {
    /** What an unlock by an owner must do. */
    enum Unlock { NOT_OWNER, INNER, LAST, ORPHAN }

    /** An unlock's verdict; cause: the loss an ORPHAN unlock throws. */
    record Verdict(Unlock kind, LockLostException cause) {
    }

    final String key;
    int refs;
    private Object owner;
    private int count;
    private Grant hold;
    private final ArrayDeque<Object> queue = new ArrayDeque<>();
    private final Map<Object, Integer> orphans = new HashMap<>();
    private final Map<Object, LockLostException> orphanCauses = new HashMap<>();

    KeyEntry(String key) {
        this.key = key;
    }

    /**
     * Takes the key locally for owner me (again, if it owns it): once (only if free and
     * nobody queues), or waiting in line until d. False: not taken.
     */
    synchronized boolean acquire(Object me, Deadline d, boolean once, boolean interruptible)
            throws InterruptedException {
        if (owner == me) {
            count++;
            return true;
        }
        if (once) {
            if (owner != null || !queue.isEmpty()) {
                return false;
            }
            owner = me;
            count = 1;
            return true;
        }
        queue.add(me);
        boolean interrupted = false;
        try {
            while (owner != null || queue.peek() != me) {
                if (d.passed()) {
                    return false;
                }
                try {
                    wait(d.never() ? 0 : Math.max(1, d.msLeft()));
                } catch (InterruptedException e) {
                    if (interruptible) {
                        throw e;
                    }
                    interrupted = true;
                }
            }
            owner = me;
            count = 1;
            return true;
        } finally {
            queue.remove(me);
            notifyAll();
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** How many times owner me holds it (0: not the owner). */
    synchronized int count(Object me) {
        return owner == me ? count : 0;
    }

    synchronized Grant hold() {
        return hold;
    }

    synchronized boolean ownedBy(Object me) {
        return owner == me;
    }

    /** The broker granted the owner its hold; a hold lost already frees the key at once. */
    void setHold(Grant h) {
        synchronized (this) {
            hold = h;
        }
        if (h.lost()) {
            lost(h);
        }
    }

    /** Undoes me's last acquire when the broker did not grant it. */
    synchronized void undo(Object me) {
        if (owner == me && --count == 0) {
            free();
        }
    }

    /**
     * Unlock by owner me: INNER (a reentrant level, counted down), LAST (the caller
     * releases the hold, then calls {@link #released()}), ORPHAN (its hold was lost: throw the
     * verdict's cause), NOT_OWNER.
     */
    synchronized Verdict unlock(Object me) {
        if (owner == me) {
            if (count > 1) {
                count--;
                return new Verdict(Unlock.INNER, null);
            }
            if (hold != null && !hold.startRelease()) {
                // lost just now, before the loss reached this entry: the same as an orphan's unlock
                LockLostException cause = hold.lostCause();
                free();
                return new Verdict(Unlock.ORPHAN, cause);
            }
            return new Verdict(Unlock.LAST, null);
        }
        Integer n = orphans.get(me);
        if (n == null) {
            return new Verdict(Unlock.NOT_OWNER, null);
        }
        LockLostException cause = orphanCauses.get(me);
        if (n > 1) {
            orphans.put(me, n - 1);
        } else {
            orphans.remove(me);
            orphanCauses.remove(me);
        }
        return new Verdict(Unlock.ORPHAN, cause);
    }

    /** The LAST unlock's release is done: the key is free for the next thread. */
    synchronized void released() {
        free();
    }

    /** The hold was lost: its owner becomes an orphan, and the key is free for the others. */
    synchronized void lost(Grant h) {
        if (hold != h) {
            return;
        }
        if (owner != null) {
            orphans.merge(owner, count, Integer::sum);
            orphanCauses.put(owner, h.lostCause());
        }
        free();
    }

    private void free() {
        owner = null;
        count = 0;
        hold = null;
        notifyAll();
    }
}
