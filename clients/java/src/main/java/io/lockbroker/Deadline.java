package io.lockbroker;

import java.util.concurrent.TimeUnit;

/**
 * A point in time on the monotonic clock ({@link System#nanoTime}), or never. A caller's deadline
 * travels with its call so that no wait, local or on the broker, outlives it.
 */
final class Deadline {
    static final Deadline NEVER = new Deadline(0, true);

    private final long at;
    private final boolean never;

    private Deadline(long at, boolean never) {
        this.at = at;
        this.never = never;
    }

    static Deadline in(long amount, TimeUnit unit) {
        long nanos = unit.toNanos(Math.max(0, amount));
        if (nanos >= Long.MAX_VALUE / 4) {
            return NEVER;
        }
        return new Deadline(System.nanoTime() + nanos, false);
    }

    static Deadline inMs(long ms) {
        return in(ms, TimeUnit.MILLISECONDS);
    }

    boolean never() {
        return never;
    }

    /** Nanoseconds left, 0 when passed; Long.MAX_VALUE for never. */
    long nanosLeft() {
        if (never) {
            return Long.MAX_VALUE;
        }
        return Math.max(0, at - System.nanoTime());
    }

    /** Milliseconds left, rounded up (a wait of 0.3 ms asks the broker for 1 ms, not a one-try). */
    long msLeft() {
        if (never) {
            return Long.MAX_VALUE;
        }
        long n = nanosLeft();
        return n == 0 ? 0 : (n + 999_999) / 1_000_000;
    }

    boolean passed() {
        return !never && nanosLeft() == 0;
    }

    /** The earlier of the two. */
    Deadline min(Deadline o) {
        if (never) {
            return o;
        }
        if (o.never) {
            return this;
        }
        return at - o.at <= 0 ? this : o;
    }

    @Override
    public String toString() {
        return never ? "never" : msLeft() + " ms left";
    }
}
