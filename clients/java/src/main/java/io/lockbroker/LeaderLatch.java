package io.lockbroker;

import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

/**
 * Leader election on one key, in the shape of Curator's LeaderLatch: {@link #start()} runs for
 * leader on a thread of its own, {@link #await} waits until this candidate leads, {@link
 * #hasLeadership()} says whether it does, {@link #close()} resigns. The candidate holds the key
 * exclusive with its value (e.g. its address) while it leads; it waits for the key with
 * {@code ACQUIRE <key> WAIT 60000 ASYNC VALUE <value>}, asking again on each TIMEOUT, and runs again
 * when it loses the key. Everyone else learns the leader with {@link LockClient#watchLeader}.
 *
 * <p>Errors: one that trying again may mend (the broker cannot reach Redis, a limit, no broker
 * reachable, the hold lost) is kept in {@link #lastError()} and the candidate runs again, with
 * backoff up to 2 s. Any other (a broker that refuses {@code VALUE}, a key this app may not use, a
 * wrong token) stops the latch: its listeners hear {@link LeaderListener#failed}, {@link #await}
 * throws it, {@link #failure()} keeps it. A latch never asks again what the broker refused.
 */
public final class LeaderLatch implements AutoCloseable {
    private final String key;
    private final BrokerLock lock;
    private final CopyOnWriteArrayList<LeaderListener> listeners = new CopyOnWriteArrayList<>();
    private final Object mu = new Object();
    private Thread runner;
    private boolean started;
    private boolean closed;
    private boolean leader;
    private boolean lost;
    private long token;
    private LockBrokerException failure;
    private volatile RuntimeException lastError;

    LeaderLatch(LockClient client, String key, String value) {
        this.key = key;
        this.lock = client.lock(key, LockSpec.exclusive().value(value));
        lock.onLost((k, t, cause) -> {
            synchronized (mu) {
                lost = true;
                mu.notifyAll();
            }
        });
    }

    public String key() {
        return key;
    }

    public LeaderLatch addListener(LeaderListener l) {
        listeners.add(l);
        return this;
    }

    /** Starts running for leader (once). */
    public LeaderLatch start() {
        synchronized (mu) {
            if (started) {
                throw new IllegalStateException("the latch for " + key + " was started already");
            }
            if (closed) {
                throw new IllegalStateException("the latch for " + key + " is closed");
            }
            started = true;
            runner = new Thread(this::run, "lockbroker-leader " + key);
            runner.setDaemon(true);
            runner.start();
        }
        return this;
    }

    /**
     * Waits until this candidate leads; false if the time ran out (or the latch closed) first. Throws
     * the error that stopped the latch, if one did ({@link #failure()}).
     */
    public boolean await(long time, TimeUnit unit) throws InterruptedException {
        Deadline d = Deadline.in(time, unit);
        synchronized (mu) {
            while (!leader) {
                if (failure != null) {
                    throw failure;
                }
                if (closed || d.passed()) {
                    return false;
                }
                mu.wait(d.never() ? 0 : Math.max(1, d.msLeft()));
            }
            return true;
        }
    }

    /** Waits until this candidate leads, or throws IllegalStateException if the latch closes first. */
    public void await() throws InterruptedException {
        if (!await(Long.MAX_VALUE, TimeUnit.NANOSECONDS)) {
            throw new IllegalStateException("the latch for " + key + " closed before it led");
        }
    }

    public boolean hasLeadership() {
        synchronized (mu) {
            return leader;
        }
    }

    /** The fencing token of the current leadership; IllegalStateException if it does not lead. */
    public long token() {
        synchronized (mu) {
            if (!leader) {
                throw new IllegalStateException("not the leader of " + key);
            }
            return token;
        }
    }

    /** The last error the candidate met while running, or null. */
    public RuntimeException lastError() {
        return lastError;
    }

    /** The error that stopped the latch (one trying again cannot mend), or null. */
    public LockBrokerException failure() {
        synchronized (mu) {
            return failure;
        }
    }

    /** Resigns: stops running, and releases the key if it leads. Waits for that (up to 5 s). */
    @Override
    public void close() {
        Thread t;
        synchronized (mu) {
            if (closed) {
                return;
            }
            closed = true;
            t = runner;
            mu.notifyAll();
        }
        if (t != null && t != Thread.currentThread()) {
            t.interrupt();
            try {
                t.join(5000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private void run() {
        long backoff = 100;
        while (true) {
            synchronized (mu) {
                if (closed) {
                    return;
                }
                lost = false;
            }
            try {
                lock.lockInterruptibly();
            } catch (InterruptedException e) {
                continue;
            } catch (ClosedException e) {
                return;
            } catch (LockBrokerException e) {
                lastError = e;
                if (!retryable(e)) {
                    fail(e);
                    return;
                }
                if (!sleep(backoff)) {
                    continue;
                }
                backoff = Math.min(backoff * 2, 2000);
                continue;
            }
            backoff = 100;
            lead();
            try {
                Thread.interrupted();
                lock.unlock();
            } catch (RuntimeException e) {
                // lost, or the client closed: the key is not ours either way
            }
        }
    }

    /** Leads until closed or lost, telling the listeners. */
    private void lead() {
        long tok = lock.token();
        synchronized (mu) {
            leader = !lost;
            token = tok;
            mu.notifyAll();
        }
        tell(l -> l.isLeader(tok));
        synchronized (mu) {
            while (!closed && !lost) {
                try {
                    mu.wait();
                } catch (InterruptedException e) {
                    // closed, or spurious: the loop decides
                }
            }
            leader = false;
            mu.notifyAll();
        }
        tell(LeaderListener::notLeader);
    }

    /** Tells every listener, in order; a listener's failure is its own. */
    private void tell(java.util.function.Consumer<LeaderListener> call) {
        for (LeaderListener l : listeners) {
            try {
                call.accept(l);
            } catch (RuntimeException e) {
                // the listener's failure is its own
            }
        }
    }

    /** Whether asking again later may work: what the broker says of its codes (PROTOCOL.md). */
    private static boolean retryable(LockBrokerException e) {
        switch (e.code()) {
            case "UNAVAILABLE":     // Redis unreachable: retry later, with backoff
            case "LIMIT":           // release something, or retry later
            case "LOST":            // the hold went: run again
            case "SESSION":         // the session could not be resumed: a new one takes over
            case "CONNECT":         // no broker now: the client keeps trying
                return true;
            default:                // BADCMD, BADARG, DENIED, NOAUTH, VERSION, PROTOCOL, ...
                return false;
        }
    }

    /** Stops the latch for a refusal that asking again cannot mend, and says so. */
    private void fail(LockBrokerException e) {
        synchronized (mu) {
            failure = e;
            mu.notifyAll();
        }
        tell(l -> l.failed(e));
    }

    private boolean sleep(long ms) {
        synchronized (mu) {
            if (closed) {
                return false;
            }
            try {
                mu.wait(ms);
            } catch (InterruptedException e) {
                return false;
            }
            return !closed;
        }
    }
}
