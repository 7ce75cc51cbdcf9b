package io.lockbroker;

import java.time.Duration;
import java.util.List;

/**
 * One hold of a key, from {@link LockClient#acquire} or {@link LockClient#lockAsync}: close it to
 * release it (try-with-resources), from any thread.
 *
 * <pre>{@code
 * try (Hold hold = client.acquire("orders:42", Duration.ofSeconds(5))) {
 *     write(hold.token());
 * }
 * }</pre>
 *
 * <p>A hold can be lost (Redis lost the key, the session could not be resumed): {@link #isHeld()}
 * turns false, listeners ({@link #onLost}) are told, and {@link #close()} throws
 * {@link LockLostException} (and sends nothing: the key may be another client's by then). A hold keeps
 * its client from being closed by the client's cleaner while you refer to it.
 */
public final class Hold implements AutoCloseable {
    @SuppressWarnings("unused") // keeps the client reachable while the hold is
    private final LockClient client;
    private final Locks locks;
    private final Grant grant;
    private final Object owner;
    private final List<LostListener> listeners;
    private boolean closed; // guarded by this

    Hold(LockClient client, Locks locks, Grant grant, Object owner, List<LostListener> listeners) {
        this.client = client;
        this.locks = locks;
        this.grant = grant;
        this.owner = owner;
        this.listeners = listeners;
    }

    public String key() {
        return grant.key;
    }

    public LockSpec spec() {
        return grant.spec;
    }

    /** The hold's fencing token: send it with every write to the resource the key protects. */
    public long token() {
        return grant.token;
    }

    /** Whether the hold is held now: not released, and not lost. */
    public boolean isHeld() {
        synchronized (this) {
            if (closed) {
                return false;
            }
        }
        return locks.hold(grant.key) == grant && !grant.lost();
    }

    /** Adds a listener told if this hold is lost (on the client's callback thread). */
    public Hold onLost(LostListener l) {
        listeners.add(l);
        return this;
    }

    /** Sets the key's TTL in Redis now (and for later renewals); returns the TTL the broker set. */
    public Duration renew(Duration ttl) {
        return Duration.ofMillis(locks.renew(grant.key, Wire.checkMs("ttl", ttl.toMillis())));
    }

    /** Replaces the value of this exclusive hold (same token). Protocol 1.2 {@code PROCLAIM}. */
    public void proclaim(String value) {
        locks.proclaim(grant.key, value);
    }

    /**
     * Releases the hold, keeping the key taken on the broker for linger more (nobody may take it
     * meanwhile). Protocol 1.1 {@code RELEASE ... LINGER}. Throws LockLostException if it was lost,
     * IllegalStateException if it was released already.
     */
    public void release(Duration linger) {
        long ms = Wire.checkMs("linger", linger.toMillis());
        synchronized (this) {
            if (closed) {
                throw new IllegalStateException("the hold of " + grant.key + " was released already");
            }
            closed = true;
        }
        locks.unlock(grant.key, ms, owner);
    }

    /** Releases the hold ({@code RELEASE}); a second close does nothing. Throws LockLostException if it was lost. */
    @Override
    public void close() {
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
        }
        locks.unlock(grant.key, 0, owner);
    }

    @Override
    public String toString() {
        return "Hold[" + grant.key + " " + grant.spec + " token " + grant.token + (isHeld() ? " held" : "") + "]";
    }
}
