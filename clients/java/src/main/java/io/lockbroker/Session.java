package io.lockbroker;

import java.io.IOException;
import java.net.Socket;
import java.util.List;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;

/**
 * The client's session with the brokers: one connection at a time, and what happens when it ends.
 *
 * <p>States: READY (a connection serves calls), RECOVERING (it ended: a thread resumes the grace
 * session with {@code RESUME} on the same broker first, then the others, with backoff, within the
 * retry budget; callers wait), DOWN (the budget ran out: holds were reported lost and waits failed;
 * the thread keeps trying to start a new session, and a caller wakes it for one more round), CLOSED.
 *
 * <p>A connection is set up in full (AUTH, HELLO or RESUME, EVENTS ON, then the owner's
 * reconciliation on it) before it becomes the current one, so callers never see a half-made session.
 * Events from a connection being set up already reach the owner (a RESUME is followed by the outcome
 * events of waits).
 *
 * <p>The session's {@link #epoch()} counts the broker sessions this client has had: it goes up the
 * moment the library knows the session that held its holds is gone (a dropped connection without a
 * grace, a RESUME refused, the budget spent), so a hold granted in an earlier epoch is known lost.
 * Connects, drops, resumes and new sessions are logged ({@code System.Logger} "io.lockbroker").
 */
final class Session implements Connection.Listener {
    /** What the session tells the client above it. Calls come from the reader or recovery thread. */
    interface Owner {
        /** The session is gone with its connection (it had no grace): every hold is lost (reader thread). */
        void ended(LockBrokerException why);

        /** An EVENT line (reader thread: must not block). */
        void event(Event e);

        /** After RESUME answered OK with keys, on the connection c that is not current yet. */
        void resumed(Connection c, List<String> keys);

        /** A new session replaced a lost one (c: its connection, not current yet). */
        void replaced(Connection c, Throwable why);

        /** The retry budget ran out: no session now. */
        void down(LockBrokerException why);

        /** A resumed or new session serves calls again (recovery thread, after it was installed). */
        void ready();
    }

    enum State { READY, RECOVERING, DOWN, CLOSED }

    private static final long BACKOFF_FIRST_MS = 50;
    private static final long BACKOFF_MAX_MS = 1000;
    private static final long BACKOFF_DOWN_MS = 2000;
    static final System.Logger LOG = System.getLogger("io.lockbroker");

    private final Options o;
    private final Owner owner;
    private final Executor callbacks;
    private final Tally tally;
    private final Object mu = new Object();
    private State state = State.DOWN;
    private Connection conn;
    private Connection setup;
    private String clientId;
    private String secret;
    private int next;
    private Throwable lastError;
    private long rounds;
    private Thread recovery;
    private long epoch;

    Session(Options o, Owner owner, Executor callbacks, Tally tally) {
        this.o = o;
        this.owner = owner;
        this.callbacks = callbacks;
        this.tally = tally;
    }

    // ------------------------------------------------------------------ for callers

    /** Connects to the first broker that answers and starts a session, or throws why none did. */
    void open() {
        LockBrokerException last = null;
        for (int i = 0; i < o.addresses.size(); i++) {
            String addr = o.addresses.get(i);
            try {
                Connection c = dial(addr);
                try {
                    Wire.Hello h = start(c);
                    synchronized (mu) {
                        next = i;
                        install(c);
                    }
                    LOG.log(System.Logger.Level.DEBUG, "connected to {0}: session {1} (lockbroker/{2}, grace {3} ms)",
                            addr, h.clientId(), h.version(), Long.toString(h.secret() == null ? 0 : o.graceMs));
                    hook(l -> l.connected(addr, h.clientId()));
                    return;
                } catch (RuntimeException e) {
                    c.close(e);
                    throw e;
                }
            } catch (BrokerErrorException e) {
                if (!e.code().equals("UNAVAILABLE")) {
                    throw e;
                }
                last = new BrokerUnreachableException("broker " + addr + " cannot serve: " + e.getMessage(), e);
            } catch (BrokerVersionException e) {
                last = e;
            } catch (IOException | LockBrokerException e) {
                if (!(last instanceof BrokerVersionException)) {
                    last = new BrokerUnreachableException("cannot reach broker " + addr + ": " + e.getMessage(), e);
                }
            }
        }
        throw last;
    }

    /**
     * The current connection once the session is READY; null if d passes first while it recovers.
     * While DOWN, wakes the recovery thread and waits for one more round of attempts; throws
     * BrokerUnreachableException if it failed. Throws ClosedException once closed.
     * Interruptible: an interrupt throws InterruptedException; otherwise it is kept for the caller.
     */
    Connection current(Deadline d, boolean interruptible) throws InterruptedException {
        boolean interrupted = false;
        try {
            synchronized (mu) {
                long round = -1;
                while (true) {
                    switch (state) {
                        case READY:
                            return conn;
                        case CLOSED:
                            throw new ClosedException();
                        case DOWN:
                            if (round < 0 && !d.passed()) {
                                round = rounds;
                                if (recovery != null) {
                                    recovery.interrupt();
                                }
                            } else if (round < 0 || rounds > round) {
                                throw new BrokerUnreachableException("no broker could be reached: "
                                        + (lastError == null ? "" : lastError.getMessage()), lastError);
                            }
                            break;
                        default:
                            break;
                    }
                    if (d.passed()) {
                        return null;
                    }
                    try {
                        mu.wait(d.never() ? 0 : Math.max(1, d.msLeft()));
                    } catch (InterruptedException e) {
                        if (interruptible) {
                            throw e;
                        }
                        interrupted = true;
                    }
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** The current connection if the session is READY now, else null. */
    Connection currentNow() {
        synchronized (mu) {
            return state == State.READY ? conn : null;
        }
    }

    /** current(NEVER), uninterruptibly: for calls bounded by the retry budget rather than a deadline. */
    Connection current() {
        try {
            return current(Deadline.NEVER, false);
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    /**
     * A request whose reply the caller waits for, sent again on the resumed session if the
     * connection ends first: for requests that may run twice (reads, PROCLAIM, RENEW, WATCH).
     */
    Reply call(String line) {
        while (true) {
            Connection c = current();
            try {
                return c.call(line);
            } catch (ConnectionLostException e) {
                // the session recovers: send it again there
            }
        }
    }

    String clientId() {
        synchronized (mu) {
            return clientId;
        }
    }

    /** The number of the broker session now (see the class comment). */
    long epoch() {
        synchronized (mu) {
            return epoch;
        }
    }

    State state() {
        synchronized (mu) {
            return state;
        }
    }

    /** The timer's tick: liveness of the current connection and of one being set up. */
    void tick() {
        Connection c;
        Connection s;
        synchronized (mu) {
            c = conn;
            s = setup;
        }
        if (c != null) {
            c.tick();
        }
        if (s != null) {
            s.tick();
        }
    }

    /** QUIT and stop: the broker frees the session's holds at once. */
    void close() {
        Connection c;
        Thread r;
        synchronized (mu) {
            if (state == State.CLOSED) {
                return;
            }
            state = State.CLOSED;
            c = conn;
            r = recovery;
            mu.notifyAll();
        }
        if (r != null) {
            r.interrupt();
        }
        if (c != null) {
            c.quit(1000);
        }
        Connection s;
        synchronized (mu) {
            s = setup;
        }
        if (s != null) {
            s.close(new IOException("client closed"));
        }
    }

    // ------------------------------------------------------------------ connection events

    @Override
    public void event(Connection c, Event e) {
        owner.event(e);
    }

    @Override
    public void closed(Connection c, Throwable cause) {
        boolean noGrace;
        synchronized (mu) {
            if (c != conn || state != State.READY) {
                return;
            }
            state = State.RECOVERING;
            lastError = cause;
            noGrace = secret == null;
            if (noGrace) {
                epoch++;
            }
        }
        String why = cause == null ? "closed" : cause.getMessage();
        if (noGrace) {
            // no grace: the broker ended the session with the connection, and its holds with it
            LOG.log(System.Logger.Level.WARNING, "connection to {0} lost ({1}); the session had no grace: its holds "
                    + "are lost; starting a new session", c.address, why);
            owner.ended(new SessionLostException("the connection to " + c.address + " dropped and the session had "
                    + "no grace", cause));
        } else {
            LOG.log(System.Logger.Level.WARNING, "connection to {0} lost ({1}); resuming the session", c.address, why);
        }
        synchronized (mu) {
            if (state == State.RECOVERING && recovery == null) {
                startRecovery(cause);
            }
        }
        hook(l -> l.disconnected(c.address, cause));
    }

    // ------------------------------------------------------------------ set-up

    /** A connection with AUTH done, its reader running; no session words sent yet. */
    private Connection dial(String addr) throws IOException {
        Socket[] s = Transport.open(addr, o.tls, o.connectTimeoutMs);
        Connection c = new Connection(addr, s[0], s[1], o.handshakeTimeoutMs(), o.pingIntervalMs, o.pingTimeoutMs);
        synchronized (mu) {
            setup = c;
        }
        c.start(this, "lockbroker-reader " + addr);
        if (o.authToken != null) {
            Reply r = c.call(Wire.auth(o.authToken));
            if (!r.ok()) {
                LockBrokerException e = r.failure();
                c.close(e);
                throw e;
            }
        }
        return c;
    }

    /** HELLO (with GRACE) and EVENTS ON on c: a new session. */
    private Wire.Hello start(Connection c) {
        Reply r = c.call(Wire.hello(o.name, o.graceMs));
        if (r.code().equals("BADARG") && o.graceMs > 0) {
            // a broker with max_grace_ms 0 has no grace sessions: a session without one still serves
            r = c.call(Wire.hello(o.name, 0));
        }
        Wire.Hello h = Wire.hello(r);
        version(c, h);
        expectOk(c, "EVENTS ON");
        c.serving(o.replyTimeoutMs);
        synchronized (mu) {
            clientId = h.clientId();
            secret = h.secret();
        }
        return h;
    }

    private void version(Connection c, Wire.Hello h) {
        boolean recent = Wire.atLeast(h.version(), 1, 2);
        if (!recent && !o.allowOldBroker) {
            throw new BrokerVersionException("broker " + c.address + " speaks lockbroker/" + h.version()
                    + "; this library needs protocol 1.2 or later");
        }
        c.version = h.version();
        c.legacy = !recent;
    }

    private static void expectOk(Connection c, String line) {
        Reply r = c.call(line);
        if (!r.ok()) {
            throw r.failure();
        }
    }

    /** Makes c the current connection (caller holds mu). */
    private void install(Connection c) {
        c.epoch = epoch;
        conn = c;
        if (setup == c) {
            setup = null;
        }
        state = State.READY;
        lastError = null;
        mu.notifyAll();
    }

    // ------------------------------------------------------------------ recovery

    private void startRecovery(Throwable cause) {
        Thread t = new Thread(() -> recover(cause), "lockbroker-recovery");
        t.setDaemon(true);
        recovery = t;
        t.start();
    }

    /**
     * Resumes the session, or starts a new one, on some broker: rounds over the addresses (from the
     * one after the broker in use: that one may be dead, or stopped and still accepting connections)
     * with backoff, until it works, the budget runs out (DOWN, then on with fresh
     * sessions only), or the client closes.
     */
    private void recover(Throwable cause) {
        long budgetEnd = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(o.resumeBudgetMs);
        long backoff = BACKOFF_FIRST_MS;
        Throwable last = cause;
        int n = o.addresses.size();
        while (true) {
            int first;
            synchronized (mu) {
                if (state == State.CLOSED) {
                    return;
                }
                first = (next + 1) % n;     // the one in use may be dead, or stopped
            }
            for (int k = 0; k < n; k++) {
                int i = (first + k) % n;
                try {
                    if (attempt(o.addresses.get(i), i, last)) {
                        return;
                    }
                } catch (IOException | LockBrokerException e) {
                    last = e;
                }
                synchronized (mu) {
                    if (state == State.CLOSED) {
                        return;
                    }
                }
            }
            boolean wentDown = false;
            synchronized (mu) {
                lastError = last;
                rounds++;
                if (state == State.RECOVERING && System.nanoTime() - budgetEnd >= 0) {
                    state = State.DOWN;
                    secret = null;
                    epoch++;
                    wentDown = true;
                }
                mu.notifyAll();
            }
            if (wentDown) {
                SessionLostException why = new SessionLostException(
                        "the session could not be resumed within " + o.resumeBudgetMs + " ms: "
                                + (last == null ? "" : last.getMessage()), last);
                LOG.log(System.Logger.Level.ERROR, "no broker could be reached within {0} ms ({1}): the session "
                        + "and its holds are lost; trying on", Long.toString(o.resumeBudgetMs), last == null ? "" : last.getMessage());
                owner.down(why);
                hook(l -> l.down(why));
                backoff = BACKOFF_DOWN_MS;
            }
            try {
                Thread.sleep(backoff);
            } catch (InterruptedException e) {
                // woken by a caller (one more round now) or by close
            }
            backoff = Math.min(backoff * 2, state() == State.DOWN ? BACKOFF_DOWN_MS : BACKOFF_MAX_MS);
        }
    }

    /** One try on one broker: true once a session serves again. */
    private boolean attempt(String addr, int index, Throwable cause) throws IOException {
        Connection c = dial(addr);
        try {
            String id;
            String sec;
            synchronized (mu) {
                id = clientId;
                sec = secret;
            }
            if (sec != null) {
                version(c, Wire.hello(c.call("HELLO")));
                c.send("EVENTS ON", Connection.IGNORE, 0);
                Reply r = c.call(Wire.resume(id, sec));
                if (r.ok()) {
                    List<String> keys = Wire.keyList(r);
                    expectOk(c, "EVENTS ON");
                    c.serving(o.replyTimeoutMs);
                    owner.resumed(c, keys);
                    if (!take(c, index)) {
                        c.quit(500);
                        return true;
                    }
                    tally.reconnected(true);
                    LOG.log(System.Logger.Level.INFO, "session {0} resumed on {1}, holding {2} keys", id, addr,
                            Integer.toString(keys.size()));
                    owner.ready();
                    hook(l -> l.resumed(addr, id, keys));
                    return true;
                }
                if (r.code().equals("UNAVAILABLE")) {
                    throw r.error();
                }
                cause = r.error();
            }
            Wire.Hello h = start(c);
            synchronized (mu) {
                epoch++;
            }
            owner.replaced(c, cause);
            if (!take(c, index)) {
                c.quit(500);
                return true;
            }
            tally.reconnected(false);
            LOG.log(System.Logger.Level.WARNING, "session {0} could not be resumed ({1}): new session {2} on {3}, "
                    + "the old one''s holds are lost", id, cause == null ? "no grace" : cause.getMessage(),
                    h.clientId(), addr);
            owner.ready();
            Throwable why = cause;
            hook(l -> l.newSession(addr, h.clientId(), why));
            return true;
        } catch (RuntimeException e) {
            c.close(e);
            throw e;
        }
    }

    /** Makes c current unless the client closed meanwhile (false: the caller QUITs c). */
    private boolean take(Connection c, int index) {
        synchronized (mu) {
            if (state == State.CLOSED) {
                return false;
            }
            next = index;
            recovery = null;
            install(c);
            return true;
        }
    }

    private void hook(java.util.function.Consumer<SessionListener> call) {
        SessionListener l = o.sessionListener;
        if (l != null) {
            callbacks.execute(() -> call.accept(l));
        }
    }
}
