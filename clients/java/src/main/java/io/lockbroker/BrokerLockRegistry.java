package io.lockbroker;

import java.time.Duration;
import java.util.Iterator;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Locks by key, in the shape of Spring Integration's {@code LockRegistry} (and its
 * {@code ExpirableLockRegistry} and {@code RenewableLockRegistry}), without depending on Spring:
 * {@link #obtain(Object)} gives the same {@link BrokerLock} for the same key ({@code String.valueOf}
 * of it). To use it as a Spring bean, adapt it with a method reference:
 *
 * <pre>{@code
 * @Bean LockRegistry lockRegistry(LockClient client) { return new BrokerLockRegistry(client)::obtain; }
 * }</pre>
 */
public final class BrokerLockRegistry {
    private static final class Entry {
        final BrokerLock lock;
        volatile long lastUsed = System.currentTimeMillis();

        Entry(BrokerLock lock) {
            this.lock = lock;
        }
    }

    private final LockClient client;
    private final LockSpec spec;
    private final Map<String, Entry> locks = new ConcurrentHashMap<>();

    /** Exclusive locks. */
    public BrokerLockRegistry(LockClient client) {
        this(client, LockSpec.exclusive());
    }

    /** Locks as spec says (a TTL, shared holds, ...). */
    public BrokerLockRegistry(LockClient client, LockSpec spec) {
        this.client = client;
        this.spec = spec;
    }

    /** The lock for lockKey (its String.valueOf is the broker key). */
    public BrokerLock obtain(Object lockKey) {
        String key = String.valueOf(lockKey);
        Entry e = locks.computeIfAbsent(key, k -> new Entry(client.lock(k, spec)));
        e.lastUsed = System.currentTimeMillis();
        return e.lock;
    }

    /** Forgets the lock objects not held and not obtained for ageMs (ExpirableLockRegistry's). */
    public void expireUnusedOlderThan(long ageMs) {
        long now = System.currentTimeMillis();
        for (Iterator<Entry> it = locks.values().iterator(); it.hasNext();) {
            Entry e = it.next();
            if (now - e.lastUsed > ageMs && !e.lock.isHeld()) {
                it.remove();
            }
        }
    }

    /** Renews the key's TTL in Redis (RenewableLockRegistry's); this client must hold it. */
    public void renewLock(Object lockKey) {
        obtain(lockKey).renew();
    }

    /** Renews it with a new TTL. */
    public void renewLock(Object lockKey, Duration ttl) {
        obtain(lockKey).renew(ttl);
    }
}
