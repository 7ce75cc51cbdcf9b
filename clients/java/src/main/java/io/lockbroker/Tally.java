package io.lockbroker;

import java.util.concurrent.Executor;
import java.util.concurrent.atomic.DoubleAdder;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.Consumer;

/**
 * A client's counters ({@link Counters} says what each counts) and their hook, told each event on the
 * client's callback thread, in order.
 */
final class Tally {
    private final LongAdder waits = new LongAdder();
    private final DoubleAdder waitSeconds = new DoubleAdder();
    private final LongAdder holds = new LongAdder();
    private final DoubleAdder holdSeconds = new DoubleAdder();
    private final LongAdder losses = new LongAdder();
    private final LongAdder resumes = new LongAdder();
    private final LongAdder reconnects = new LongAdder();
    private final Consumer<CounterEvent> hook;
    private final Executor callbacks;

    Tally(Consumer<CounterEvent> hook, Executor callbacks) {
        this.hook = hook;
        this.callbacks = callbacks;
    }

    /** A take of key that began at startNanos (System.nanoTime) ended now. */
    void waited(String key, long startNanos) {
        double s = since(startNanos);
        waits.increment();
        waitSeconds.add(s);
        tell("waits", key, s);
    }

    /** A hold of key granted at grantedNanos ended now. */
    void held(String key, long grantedNanos) {
        double s = since(grantedNanos);
        holds.increment();
        holdSeconds.add(s);
        tell("holds", key, s);
    }

    void lost(String key) {
        losses.increment();
        tell("losses", key, 0);
    }

    /** A connection was made again after one dropped: resumed, or a new session. */
    void reconnected(boolean resumed) {
        reconnects.increment();
        tell("reconnects", null, 0);
        if (resumed) {
            resumes.increment();
            tell("resumes", null, 0);
        }
    }

    Counters snapshot() {
        return new Counters(waits.sum(), waitSeconds.sum(), holds.sum(), holdSeconds.sum(), losses.sum(),
                resumes.sum(), reconnects.sum());
    }

    private static double since(long nanos) {
        return Math.max(0, System.nanoTime() - nanos) / 1e9;
    }

    private void tell(String name, String key, double seconds) {
        if (hook == null) {
            return;
        }
        CounterEvent e = new CounterEvent(name, key, seconds);
        try {
            callbacks.execute(() -> {
                try {
                    hook.accept(e);
                } catch (RuntimeException x) {
                    // the hook's failure is its own
                }
            });
        } catch (java.util.concurrent.RejectedExecutionException x) {
            // the client closed: nobody listens any more
        }
    }
}
