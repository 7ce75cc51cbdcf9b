package io.lockbroker;

import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Map;

/**
 * A key's local lock in one client, in front of the broker: threads of the process take turns on the
 * key (first come, first served), because the broker's session is reentrant and would let a second
 * thread in; the owning thread re-enters without asking the broker. It also keeps the broker hold
 * while one is held.
 *
 * <p>A hold reported lost stops keeping the key from the client's other threads at once (the
 * broker holds nothing for it any more): the owner becomes an orphan, whose next unlocks throw the
 * loss, one per lock it still counted. The entry lives while some thread holds it, waits for it or is
 * its orphan ({@code refs}, changed only inside the client's map operations).
 */
final class KeyEntry {
    /** What an unlock by the current thread must do. */
    enum Unlock { NOT_OWNER, INNER, LAST, ORPHAN }

    /** An unlock's verdict; cause: the loss an ORPHAN unlock throws. */
    record Verdict(Unlock kind, LockLostException cause) {
    }

    final String key;
    int refs;
    private Thread owner;
    private int count;
    private Hold hold;
    private final ArrayDeque<Thread> queue = new ArrayDeque<>();
    private final Map<Thread, Integer> orphans = new HashMap<>();
    private final Map<Thread, LockLostException> orphanCauses = new HashMap<>();

    KeyEntry(String key) {
        this.key = key;
    }

    /**
     * Takes the key locally for the current thread (again, if it owns it): once (only if free and
     * nobody queues), or waiting in line until d. False: not taken.
     */
    synchronized boolean acquire(Deadline d, boolean once, boolean interruptible) throws InterruptedException {
        Thread me = Thread.currentThread();
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
                me.interrupt();
            }
        }
    }

    /** How many times the current thread holds it (0: not the owner). */
    synchronized int count() {
        return owner == Thread.currentThread() ? count : 0;
    }

    synchronized Hold hold() {
        return hold;
    }

    synchronized boolean ownedByCurrentThread() {
        return owner == Thread.currentThread();
    }

    /** The broker granted the owner its hold; a hold lost already frees the key at once. */
    void setHold(Hold h) {
        synchronized (this) {
            hold = h;
        }
        if (h.lost()) {
            lost(h);
        }
    }

    /** Undoes the current thread's last acquire when the broker did not grant it. */
    synchronized void undo() {
        if (owner == Thread.currentThread() && --count == 0) {
            free();
        }
    }

    /**
     * Unlock by the current thread: INNER (a reentrant level, counted down), LAST (the caller
     * releases the hold, then calls {@link #released()}), ORPHAN (its hold was lost: throw the
     * verdict's cause), NOT_OWNER.
     */
    synchronized Verdict unlock() {
        Thread me = Thread.currentThread();
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
    synchronized void lost(Hold h) {
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
