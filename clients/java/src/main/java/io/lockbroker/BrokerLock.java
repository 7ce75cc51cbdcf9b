package io.lockbroker;

import java.time.Duration;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;

/**
 * A {@link Lock} on one broker key for one {@link LockClient}. Reentrant per thread, as
 * {@link java.util.concurrent.locks.ReentrantLock} is: the thread that holds it may lock it again, and
 * must unlock it as many times; other threads of the same client wait their turn locally (the
 * broker sees one hold), and threads of other clients (other sessions, other processes) wait on the
 * broker. Every lock object of a client on the same key shares that state.
 *
 * <p>{@link #tryLock(long, TimeUnit)} never waits past its time: the broker's wait is withdrawn
 * ({@code CANCEL}) at the deadline or on an interrupt. Each hold has a fencing {@link #token()}: pass
 * it to the resource you write to. A hold can be lost (Redis lost the key, the session could not be
 * resumed): {@link #isHeld()} turns false, listeners ({@link #onLost}) are told, and the next
 * {@link #unlock()} throws {@link LockLostException}.
 *
 * <p>Errors are unchecked {@link LockBrokerException}s ({@link DeniedException},
 * {@link UnavailableException}, ...); {@link #newCondition()} is not supported. A lock object keeps
 * its client from being closed by the client's cleaner while you refer to it.
 */
public final class BrokerLock implements Lock {
    @SuppressWarnings("unused") // keeps the client reachable while the lock object is
    private final LockClient client;
    private final Locks locks;
    private final String key;
    private final LockSpec spec;
    private final CopyOnWriteArrayList<LostListener> listeners = new CopyOnWriteArrayList<>();

    BrokerLock(LockClient client, Locks locks, String key, LockSpec spec) {
        this.client = client;
        this.locks = locks;
        this.key = Wire.checkKey(key);
        this.spec = spec;
    }

    public String key() {
        return key;
    }

    public LockSpec spec() {
        return spec;
    }

    /** Waits as long as it takes (asking the broker again each minute); interrupts are kept, not obeyed. */
    @Override
    public void lock() {
        try {
            take(Deadline.NEVER, false, false);
        } catch (InterruptedException e) {
            throw new AssertionError("an uninterruptible lock was interrupted", e);
        }
    }

    @Override
    public void lockInterruptibly() throws InterruptedException {
        if (Thread.interrupted()) {
            throw new InterruptedException();
        }
        take(Deadline.NEVER, false, true);
    }

    /** One try, no waiting: false if another session (or another thread of this client) has it. */
    @Override
    public boolean tryLock() {
        try {
            return take(Deadline.inMs(0), true, false);
        } catch (InterruptedException e) {
            throw new AssertionError("an uninterruptible lock was interrupted", e);
        }
    }

    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        if (Thread.interrupted()) {
            throw new InterruptedException();
        }
        return take(Deadline.in(time, unit), false, true);
    }

    /** The current thread takes the key: see Locks.lock. */
    private boolean take(Deadline d, boolean once, boolean interruptible) throws InterruptedException {
        return locks.lock(key, spec, listeners, Thread.currentThread(), d, once, interruptible) != null;
    }

    /**
     * Unlocks; the thread's last unlock releases the key on the broker. Throws
     * IllegalMonitorStateException if the current thread does not hold it, and LockLostException (after
     * unlocking) if the hold was lost.
     */
    @Override
    public void unlock() {
        locks.unlock(key, 0, Thread.currentThread());
    }

    /**
     * Unlocks, and if this releases the key, keeps it taken on the broker for linger more (nobody
     * may take it meanwhile): a job that finished early still does not run again elsewhere within
     * that time. Protocol 1.1 {@code RELEASE ... LINGER}.
     */
    public void unlock(Duration linger) {
        locks.unlock(key, Wire.checkMs("linger", linger.toMillis()), Thread.currentThread());
    }

    /** Not supported: a broker lock has no condition variables. */
    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException("a broker lock has no conditions");
    }

    /** The fencing token of this client's hold; NotHeldException if it does not hold the key. */
    public long token() {
        Grant h = locks.hold(key);
        if (h == null) {
            throw BrokerErrorException.of("NOTHELD", "this client does not hold the key",
                    LockBrokerException.Origin.key(key));
        }
        return h.token;
    }

    /** Whether this client holds the key now (some thread of it), and the hold was not lost. */
    public boolean isHeld() {
        Grant h = locks.hold(key);
        return h != null && !h.lost();
    }

    /** Whether the current thread holds the key, and the hold was not lost. */
    public boolean isHeldByCurrentThread() {
        return locks.heldBy(key, Thread.currentThread()) && isHeld();
    }

    /** Sets the key's TTL in Redis now (and for later renewals); returns the TTL the broker set. */
    public Duration renew(Duration ttl) {
        return Duration.ofMillis(locks.renew(key, Wire.checkMs("ttl", ttl.toMillis())));
    }

    /** Renews the key in Redis with its current TTL; returns it. */
    public Duration renew() {
        return Duration.ofMillis(locks.renew(key, -1));
    }

    /** Replaces the value of this client's exclusive hold (same token). Protocol 1.2 {@code PROCLAIM}. */
    public void proclaim(String value) {
        locks.proclaim(key, value);
    }

    /** Adds a listener told when a hold taken through this lock object is lost. */
    public BrokerLock onLost(LostListener l) {
        listeners.add(l);
        return this;
    }

    @Override
    public String toString() {
        return "BrokerLock[" + key + " " + spec + (isHeld() ? " held" : "") + "]";
    }
}
