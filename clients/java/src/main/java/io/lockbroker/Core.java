package io.lockbroker;

import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * What a {@link LockClient} is made of: the session, its holds and waits, its watches, its counters,
 * and the threads that run them (all daemons). Nothing here refers to the {@code LockClient} the user
 * holds, nor to any other object handed to the user, so that a client nobody refers to any more
 * becomes unreachable while its threads run, and its cleaner can end the session.
 */
final class Core {
    final Options o;
    final Tally tally;
    final Session session;
    final Locks locks;
    final Watches watches;
    private final ExecutorService callbacks;
    private final ExecutorService chores;
    private final ScheduledExecutorService timer;
    private final AtomicBoolean closed = new AtomicBoolean();

    /** Connects (or throws why not) and starts the client's threads. */
    Core(Options o) {
        this.o = o;
        this.callbacks = Executors.newSingleThreadExecutor(daemon("lockbroker-callbacks"));
        this.chores = Executors.newSingleThreadExecutor(daemon("lockbroker-chores"));
        this.timer = Executors.newSingleThreadScheduledExecutor(daemon("lockbroker-timer"));
        this.tally = new Tally(o.counterListener, callbacks);
        this.session = new Session(o, new Owner(), callbacks, tally);
        this.locks = new Locks(session, o, callbacks, chores, tally);
        this.watches = new Watches(session, callbacks);
        try {
            session.open();
        } catch (RuntimeException e) {
            shutdown();
            throw e;
        }
        // a tenth of the shortest timer: a silent broker is found at most a tenth late
        long tick = Math.max(20, Math.min(250,
                Math.min(o.pingIntervalMs, Math.min(o.pingTimeoutMs, o.replyTimeoutMs)) / 10));
        timer.scheduleAtFixedRate(this::tick, tick, tick, TimeUnit.MILLISECONDS);
        Exits.add(this);
    }

    /**
     * Ends the session with QUIT (the broker frees every hold at once) and stops the threads; waits in
     * it end with ClosedException. Once, from whichever comes first: LockClient.close, its cleaner,
     * the exit hook.
     */
    void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        Exits.remove(this);
        session.close();
        locks.closed();
        watches.closed();
        shutdown();
    }

    private void shutdown() {
        timer.shutdownNow();
        chores.shutdown();
        callbacks.shutdown();
    }

    private void tick() {
        try {
            session.tick();
        } catch (RuntimeException e) {
            // the next tick tries again
        }
    }

    private static ThreadFactory daemon(String name) {
        return r -> {
            Thread t = new Thread(r, name);
            t.setDaemon(true);
            return t;
        };
    }

    /** What the session tells the client. */
    private final class Owner implements Session.Owner {
        @Override
        public void event(Event e) {
            if (!locks.event(e)) {
                watches.event(e);
            }
        }

        @Override
        public void ended(LockBrokerException why) {
            locks.ended(why);
        }

        @Override
        public void resumed(Connection c, List<String> keys) {
            locks.resumed(c, keys);
        }

        @Override
        public void replaced(Connection c, Throwable why) {
            locks.replaced(why);
            watches.rewatch(c);
        }

        @Override
        public void down(LockBrokerException why) {
            locks.down(why);
        }

        @Override
        public void ready() {
            locks.ready();
        }
    }
}
