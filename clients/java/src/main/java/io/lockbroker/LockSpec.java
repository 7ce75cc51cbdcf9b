package io.lockbroker;

import java.time.Duration;
import java.util.Objects;

/**
 * What a lock takes: an exclusive hold (the default), a shared (read) hold, or one of {@code n}
 * permits of a semaphore; with an optional TTL (how long the key outlives a dead broker; the broker
 * renews it while the session lives) and, for exclusive holds, a value others read with
 * {@link LockClient#owner} and {@link LockClient#watch} (an address, for leader election).
 * Immutable: each method returns a new spec.
 */
public final class LockSpec {
    /** The kind of hold. */
    public enum Kind { EXCLUSIVE, SHARED, PERMIT }

    private static final LockSpec EXCLUSIVE = new LockSpec(Kind.EXCLUSIVE, 0, -1, null);
    private static final LockSpec SHARED = new LockSpec(Kind.SHARED, 0, -1, null);

    private final Kind kind;
    private final int limit;
    private final long ttlMs;
    private final String value;

    private LockSpec(Kind kind, int limit, long ttlMs, String value) {
        this.kind = kind;
        this.limit = limit;
        this.ttlMs = ttlMs;
        this.value = value;
    }

    /** An exclusive hold: one session at a time. */
    public static LockSpec exclusive() {
        return EXCLUSIVE;
    }

    /** A shared (read) hold: any number of sessions at once, never beside an exclusive one. */
    public static LockSpec shared() {
        return SHARED;
    }

    /** One of {@code n} permits (1..1000000): at most n sessions hold the key at once. */
    public static LockSpec permits(int n) {
        if (n < 1 || n > 1_000_000) {
            throw new IllegalArgumentException("permits must be 1..1000000, not " + n);
        }
        return new LockSpec(Kind.PERMIT, n, -1, null);
    }

    /** The key's TTL in Redis (at least 1 ms; the broker raises it to its floor). */
    public LockSpec ttl(Duration ttl) {
        long ms = ttl.toMillis();
        if (ms < 1 || ms > Wire.MAX_MS) {
            throw new IllegalArgumentException("ttl must be 1.." + Wire.MAX_MS + " ms, not " + ms);
        }
        return new LockSpec(kind, limit, ms, value);
    }

    /**
     * A value kept beside an exclusive hold while it lives (1..256 printable ASCII characters, no
     * blanks), e.g. {@code 10.0.0.7:8080}. Protocol 1.2.
     */
    public LockSpec value(String value) {
        if (kind != Kind.EXCLUSIVE) {
            throw new IllegalArgumentException("a value goes with an exclusive hold only");
        }
        return new LockSpec(kind, limit, ttlMs, Wire.checkWord("value", value, Wire.MAX_VALUE));
    }

    public Kind kind() {
        return kind;
    }

    /** The number of permits (PERMIT), else 0. */
    public int limit() {
        return limit;
    }

    /** The TTL asked for in ms, or -1 for the broker's default. */
    public long ttlMs() {
        return ttlMs;
    }

    /** The value, or null. */
    public String value() {
        return value;
    }

    @Override
    public boolean equals(Object o) {
        if (!(o instanceof LockSpec)) {
            return false;
        }
        LockSpec s = (LockSpec) o;
        return kind == s.kind && limit == s.limit && ttlMs == s.ttlMs && Objects.equals(value, s.value);
    }

    @Override
    public int hashCode() {
        return Objects.hash(kind, limit, ttlMs, value);
    }

    @Override
    public String toString() {
        return kind + (kind == Kind.PERMIT ? "(" + limit + ")" : "") + (ttlMs >= 0 ? " ttl=" + ttlMs : "")
                + (value != null ? " value=" + value : "");
    }
}
