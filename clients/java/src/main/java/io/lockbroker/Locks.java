package io.lockbroker;

import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;

/**
 * The client's holds and waits, and the rules that keep them true to the broker's:
 *
 * <ul>
 * <li>taking a key: the local per-key lock first (owners take turns: the threads of
 * {@link BrokerLock}s, the callers of {@code lockAsync} and {@code acquire}; the same owner re-enters
 * without asking the broker), then one {@code ACQUIRE ... ASYNC} whose WAIT never outlives the
 * caller's deadline: at the deadline, or on an interrupt, the wait is withdrawn with {@code CANCEL}
 * (a grant that raced the cancel is kept at the deadline, given back on an interrupt);</li>
 * <li>routing: {@code EVENT LOST} to the hold with that token, outcome events to the key's wait;</li>
 * <li>reconciling after the connection was lost: a resumed session's key list against the holds
 * and waits known here (a hold it lacks is lost; a key it has that nobody here knew of is released,
 * or handed to the wait that was asking for it), and everything lost when no resume was possible.</li>
 * </ul>
 *
 * <p>A hold is lost for good the moment the library knows the broker session that held it is gone,
 * and an unlock of it then throws {@link LockLostException}, whatever its path: the broker's word,
 * the session ended with a connection that had no grace, a RESUME refused, the retry budget spent, or
 * the session gone while the unlock's RELEASE was on its way. Losses are logged and counted.
 */
final class Locks implements Wait.Sink {
    /** A wait with no deadline asks the broker in chunks of this much, asking again on TIMEOUT. */
    static final long CHUNK_MS = 60_000;

    private enum Stop { NONE, DEADLINE, INTERRUPT }

    private final Session session;
    private final Options o;
    private final Executor callbacks;
    private final Executor chores;
    private final Tally tally;
    private final ConcurrentHashMap<String, KeyEntry> entries = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<String, Grant> holds = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<String, Wait> waits = new ConcurrentHashMap<>();

    Locks(Session session, Options o, Executor callbacks, Executor chores, Tally tally) {
        this.session = session;
        this.o = o;
        this.callbacks = callbacks;
        this.chores = chores;
        this.tally = tally;
    }

    // ------------------------------------------------------------------ local entries

    private KeyEntry enter(String key) {
        return entries.compute(key, (k, e) -> {
            KeyEntry x = e == null ? new KeyEntry(k) : e;
            x.refs++;
            return x;
        });
    }

    private void leave(KeyEntry e) {
        entries.computeIfPresent(e.key, (k, x) -> x != e || --x.refs > 0 ? x : null);
    }

    /** The live hold on key, or null. */
    Grant hold(String key) {
        KeyEntry e = entries.get(key);
        return e == null ? null : e.hold();
    }

    boolean heldBy(String key, Object owner) {
        KeyEntry e = entries.get(key);
        return e != null && e.ownedBy(owner);
    }

    // ------------------------------------------------------------------ taking

    /**
     * Takes key as spec says for owner (a thread, or the caller of lockAsync or acquire), on the
     * calling thread: once (one try, no waiting anywhere), or until d; interruptible or not (an
     * interrupt is then kept for the caller). listeners are told if the hold is lost. The grant, or
     * null: not granted in time. Every take but an owner's re-entry is counted as a wait.
     */
    Grant lock(String key, LockSpec spec, List<LostListener> listeners, Object owner, Deadline d, boolean once,
            boolean interruptible) throws InterruptedException {
        long t0 = System.nanoTime();
        KeyEntry e = enter(key);
        boolean locked = false;
        boolean done = false;
        boolean reentry = false;
        try {
            locked = e.acquire(owner, d, once, interruptible);
            if (!locked) {
                return null;
            }
            if (e.count(owner) > 1) {
                reentry = true;
                Grant h = reenter(e, spec);
                done = true;
                return h;
            }
            Grant h = take(key, spec, listeners, d, once, interruptible);
            if (h == null) {
                return null;
            }
            done = true;
            e.setHold(h);
            return h;
        } finally {
            if (!done) {
                if (locked) {
                    e.undo(owner);
                }
                leave(e);
            }
            if (!reentry) {
                tally.waited(key, t0);
            }
        }
    }

    /** An owner takes a key it holds: counted here; the broker is not asked. */
    private static Grant reenter(KeyEntry e, LockSpec spec) {
        Grant h = e.hold();
        if (h == null) {
            throw new IllegalStateException("this thread's hold on " + e.key + " is gone");
        }
        LockSpec.Kind held = h.spec.kind();
        boolean same = held == spec.kind() && h.spec.limit() == spec.limit();
        if (!same && !(held == LockSpec.Kind.EXCLUSIVE && spec.kind() == LockSpec.Kind.SHARED)) {
            throw new IllegalStateException("this thread holds " + e.key + " " + h.spec.kind()
                    + " and cannot take it " + spec.kind() + " as well (no upgrade: unlock it first)");
        }
        return h;
    }

    /** The broker's part of a take: a grant, or null (busy, timed out, or the deadline passed). */
    private Grant take(String key, LockSpec spec, List<LostListener> listeners, Deadline d, boolean once,
            boolean interruptible) throws InterruptedException {
        boolean[] keep = {false};
        try {
            while (true) {
                if (!settleAbandoned(key, d, interruptible)) {
                    return null;
                }
                Connection c = session.current(d, interruptible);
                if (c == null) {
                    return null;
                }
                long waitMs = once || d.passed() ? 0 : Math.min(d.msLeft(), CHUNK_MS);
                String line = Wire.acquire(key, spec, waitMs > 0 ? waitMs : -1, !c.legacy);
                Wait w = new Wait(key, spec, listeners, line, this);
                waits.put(key, w);
                c.send(line, w, c.legacy ? waitMs : 0);
                Stop stop = follow(w, d, interruptible, keep);
                Wait.State s = w.state();
                if (s != Wait.State.DONE && s != Wait.State.RETRY) {
                    return stopped(stop);
                }
                waits.remove(key, w);
                if (s == Wait.State.RETRY) {
                    if (stop != Stop.NONE || (d.passed() && !once)) {
                        return stopped(stop);
                    }
                    continue;
                }
                switch (w.outcome()) {
                    case GRANTED:
                        Grant h = w.hold();
                        if (stop == Stop.INTERRUPT) {
                            giveBack(h);
                            throw new InterruptedException();
                        }
                        return h;
                    case BUSY:
                    case TIMEOUT:
                        // (BUSY after a WAIT: a blocking 1.1 wait that ran out)
                        if (stop != Stop.NONE || once || waitMs == 0 || d.passed()) {
                            return stopped(stop);
                        }
                        continue;
                    case CANCELLED:
                        return stopped(stop);
                    default:
                        throw w.error();
                }
            }
        } finally {
            if (keep[0]) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private static Grant stopped(Stop stop) throws InterruptedException {
        if (stop == Stop.INTERRUPT) {
            throw new InterruptedException();
        }
        return null;
    }

    /**
     * Follows a wait until it ends (DONE, RETRY) or the caller stops following it: at the deadline or
     * on an interrupt it is withdrawn with CANCEL (the answer or an outcome ends it); when it cannot
     * be (no connection now), it is abandoned to the recovery. Returns why the caller stopped.
     */
    private Stop follow(Wait w, Deadline d, boolean interruptible, boolean[] keep) {
        Stop stop = Stop.NONE;
        while (true) {
            if (stop == Stop.NONE && !d.never() && d.passed()) {
                stop = Stop.DEADLINE;
            }
            try {
                long ms = stop != Stop.NONE || d.never() ? 0 : Math.max(1, d.msLeft());
                if (!w.await(stop != Stop.NONE, ms)) {
                    continue;
                }
            } catch (InterruptedException ie) {
                if (interruptible) {
                    if (stop == Stop.NONE) {
                        stop = Stop.INTERRUPT;
                    }
                } else {
                    keep[0] = true;
                }
                continue;
            }
            Wait.State s = w.state();
            if (s == Wait.State.DONE || s == Wait.State.RETRY) {
                return stop;
            }
            Connection c = session.currentNow();
            if (c != null && !c.legacy && w.rearmCancel()) {
                continue;
            }
            if (c != null && !c.legacy && w.claimCancel()) {
                c.send(Wire.cancel(w.key), cancelHandler(w), 0);
                continue;
            }
            if (w.abandon()) {
                if (session.currentNow() != null) {
                    chores.execute(() -> cancelAbandoned(w));
                }
                return stop;
            }
        }
    }

    private static Connection.Handler cancelHandler(Wait w) {
        return new Connection.Handler() {
            @Override
            public void reply(Reply r) {
                if (r.is("1")) {
                    w.withdrawn();
                } else if (r.is("0")) {
                    w.nothingQueued(false);
                } else {
                    w.finish(Wait.Outcome.FAILED, 0, r.failure());
                }
            }

            @Override
            public void failed(ConnectionLostException e) {
                w.cancelLost();
            }
        };
    }

    /**
     * Before a new wait for key: an abandoned wait for it must be settled first (the broker allows
     * one wait per key and session). False if d passed meanwhile.
     */
    private boolean settleAbandoned(String key, Deadline d, boolean interruptible) throws InterruptedException {
        while (true) {
            Wait old = waits.get(key);
            if (old == null) {
                return true;
            }
            if (!old.abandoned()) {
                // a wait that ended but whose caller has not removed it yet cannot be: the local lock
                // is held by this thread; a stray one is dropped
                waits.remove(key, old);
                continue;
            }
            synchronized (old) {
                if (waits.get(key) != old) {
                    continue;
                }
                if (d.passed()) {
                    return false;
                }
                try {
                    old.wait(d.never() ? 200 : Math.max(1, Math.min(200, d.msLeft())));
                } catch (InterruptedException e) {
                    if (interruptible) {
                        throw e;
                    }
                    Thread.currentThread().interrupt();
                    return false;
                }
            }
        }
    }

    /** CANCEL for an abandoned wait (chores thread): its answer settles the wait. */
    private void cancelAbandoned(Wait w) {
        Connection c = session.currentNow();
        Wait.State s = w.state();
        if (c == null || s == Wait.State.DONE || s == Wait.State.RETRY) {
            return;
        }
        if (c.legacy) {
            w.retry();
            return;
        }
        try {
            cancelHandler(w).reply(c.call(Wire.cancel(w.key)));
        } catch (ConnectionLostException e) {
            // the next ready() tries again
        }
    }

    @Override
    public Grant granted(Wait w, long token) {
        Grant h = new Grant(w.key, w.spec, token, w.listeners, session.epoch());
        holds.put(w.key, h);
        return h;
    }

    @Override
    public void settled(Wait w) {
        waits.remove(w.key, w);
        synchronized (w) {
            w.notifyAll();
        }
        if (w.outcome() == Wait.Outcome.GRANTED) {
            Grant h = w.hold();
            chores.execute(() -> giveBack(h));
        }
    }

    /** Releases a grant nobody will use (it raced a cancel), ignoring what the broker says. */
    private void giveBack(Grant h) {
        holds.remove(h.key, h);
        if (!h.startRelease()) {
            return;         // lost already: the broker holds nothing for it
        }
        try {
            session.call(Wire.release(h.key, 0));
        } catch (RuntimeException e) {
            // nothing more to do: the session, if it lives, still frees it when it ends
        }
    }

    // ------------------------------------------------------------------ holding

    /**
     * Unlocks key for owner: the last unlock releases the broker's grant. A lost hold (the owner is
     * its orphan, or the session ended before the RELEASE was confirmed) throws its
     * LockLostException, once per lock it counted, and sends nothing once the loss is known: the key
     * may be another client's by now.
     */
    void unlock(String key, long lingerMs, Object owner) {
        KeyEntry e = entries.get(key);
        KeyEntry.Verdict v = e == null ? new KeyEntry.Verdict(KeyEntry.Unlock.NOT_OWNER, null) : e.unlock(owner);
        switch (v.kind()) {
            case NOT_OWNER:
                throw new IllegalMonitorStateException(owner instanceof Thread
                        ? "the current thread does not hold " + key : "the hold of " + key + " was released already");
            case INNER:
                leave(e);
                return;
            case ORPHAN:
                leave(e);
                throw v.cause();
            default:
                break;
        }
        Grant h = e.hold();
        try {
            release(h, lingerMs);
        } finally {
            e.released();
            leave(e);
        }
    }

    /**
     * RELEASE of a grant whose release started (it cannot be reported lost any more by the broker's
     * events: the RELEASE's answer says it). If the session that held it is gone meanwhile, or the
     * broker no longer knows it, the hold was lost before the release: LockLostException.
     */
    private void release(Grant h, long lingerMs) {
        if (h == null) {
            return;
        }
        try {
            boolean again = false;
            while (true) {
                Connection c = null;
                if (session.epoch() == h.epoch) {
                    try {
                        c = session.current();
                    } catch (BrokerUnreachableException ex) {
                        if (session.epoch() == h.epoch) {
                            throw ex;
                        }
                    }
                }
                if (c == null || c.epoch != h.epoch) {
                    throw lostInRelease(h, "the session ended before the release was confirmed", null);
                }
                Reply r;
                try {
                    r = c.call(Wire.release(h.key, lingerMs));
                } catch (ConnectionLostException ex) {
                    again = true;
                    continue;
                }
                if (r.ok()) {
                    return;
                }
                switch (r.code()) {
                    case "UNAVAILABLE":
                        // the broker frees the key as soon as Redis answers; it is not ours any more
                        return;
                    case "NOTHELD":
                        if (again) {
                            return;         // the resumed session ran the first RELEASE already
                        }
                        throw lostInRelease(h, "the broker no longer knew the hold", r);
                    case "LOST":
                        throw lostInRelease(h, null, r);
                    default:
                        throw r.error();
                }
            }
        } finally {
            holds.remove(h.key, h);
            holdEnded(h);
        }
    }

    /** The loss a release found (why: null for the broker's own word, r): counted and logged. */
    private LockLostException lostInRelease(Grant h, String why, Reply r) {
        LockLostException e = LockLostException.of(h.key, h.token, why, r == null ? null : r.line,
                r == null ? null : r.request, null);
        tally.lost(h.key);
        Session.LOG.log(System.Logger.Level.WARNING, e.getMessage());
        return e;
    }

    /** A grant ended (released, lost, the client closed): counted once as a hold. */
    private void holdEnded(Grant h) {
        if (h.end()) {
            tally.held(h.key, h.grantedNanos);
        }
    }

    /** The live grant on key (for renew and proclaim), or why there is none. */
    private Grant mine(String key) {
        Grant h = hold(key);
        if (h == null) {
            throw BrokerErrorException.of("NOTHELD", "this client does not hold the key", LockBrokerException.Origin.key(key));
        }
        if (h.lost()) {
            throw h.lostCause();
        }
        return h;
    }

    long renew(String key, long ttlMs) {
        Grant h = mine(key);
        Reply r = session.call(Wire.renew(key, ttlMs));
        if (r.ok() && r.words.length == 1) {
            return Wire.count(r.words[0]);
        }
        throw heldError(h, r);
    }

    void proclaim(String key, String value) {
        Grant h = mine(key);
        if (h.spec.kind() != LockSpec.Kind.EXCLUSIVE) {
            throw BrokerErrorException.of("NOTHELD", "a " + h.spec.kind().toString().toLowerCase()
                    + " hold has no value (only an exclusive hold has one)", LockBrokerException.Origin.key(key));
        }
        Reply r = session.call(Wire.proclaim(key, value));
        if (!r.is()) {
            throw heldError(h, r);
        }
    }

    /** What a request on a held key throws for its reply; a LOST answer marks the grant lost. */
    private RuntimeException heldError(Grant h, Reply r) {
        if (h.lost()) {
            return h.lostCause();
        }
        if (r.code().equals("LOST")) {
            LockLostException e = LockLostException.of(h.key, h.token, null, r.line, r.request, null);
            lost(h, e);
            return e;
        }
        return r.failure();
    }

    private void lost(Grant h, LockLostException cause) {
        if (!h.markLost(cause)) {
            return;
        }
        holds.remove(h.key, h);
        KeyEntry e = entries.get(h.key);
        if (e != null) {
            e.lost(h);
        }
        tally.lost(h.key);
        holdEnded(h);
        Session.LOG.log(System.Logger.Level.WARNING, cause.getMessage());
        List<LostListener> ls = h.listeners;
        LostListener all = o.lostListener;
        callbacks.execute(() -> {
            for (LostListener l : ls) {
                call(l, h, cause);
            }
            if (all != null) {
                call(all, h, cause);
            }
        });
    }

    private static void call(LostListener l, Grant h, LockLostException cause) {
        try {
            l.lost(h.key, h.token, cause);
        } catch (RuntimeException e) {
            // a listener's failure is its own
        }
    }

    // ------------------------------------------------------------------ events

    /** LOST and the outcome events of waits (reader thread). True if it was one of those. */
    boolean event(Event e) {
        switch (e.type) {
            case "LOST": {
                Grant h = holds.get(e.key);
                if (h != null && (e.args.length == 0 || Wire.token(e.args[0]) == h.token)) {
                    lost(h, LockLostException.of(h.key, h.token, null, e.line, null, null));
                }
                return true;
            }
            case "GRANTED":
            case "TIMEOUT":
            case "FAILED":
            case "QUEUED": {
                Wait w = waits.get(e.key);
                if (w != null) {
                    w.event(e);
                } else if (e.type.equals("GRANTED")) {
                    String key = e.key;
                    chores.execute(() -> releaseStray(key));
                }
                return true;
            }
            default:
                return false;
        }
    }

    /** A grant nobody here waits for any more: give it back unless it became a hold meanwhile. */
    private void releaseStray(String key) {
        if (holds.containsKey(key) || waits.containsKey(key)) {
            return;
        }
        try {
            session.call(Wire.release(key, 0));
        } catch (RuntimeException e) {
            // best effort
        }
    }

    // ------------------------------------------------------------------ after a lost connection

    /** RESUME answered with keys, on c (not current yet). */
    void resumed(Connection c, List<String> keys) {
        Set<String> listed = new HashSet<>(keys);
        for (Grant h : holds.values()) {
            if (!listed.contains(h.key) && !h.releasing()) {
                lost(h, h.loss("the resumed session no longer held it", null));
            }
        }
        for (Wait w : waits.values()) {
            Wait.State s = w.state();
            if (s == Wait.State.DONE || s == Wait.State.RETRY) {
                continue;
            }
            if (listed.remove(w.key)) {
                // granted while its answer was on the lost connection
                if (w.abandoned()) {
                    c.call(Wire.release(w.key, 0));
                } else {
                    adopt(c, w);
                }
            } else if (s == Wait.State.UNKNOWN && !w.abandoned()) {
                if (c.legacy) {
                    w.retry();
                } else {
                    Reply r = c.call(Wire.cancel(w.key));
                    if (r.is("0")) {
                        w.nothingQueued(true);
                    } else {
                        w.retry();
                    }
                }
            }
        }
        for (String key : listed) {
            Grant h = holds.get(key);
            if (h == null) {
                // held by the session, known to nobody here (its OK was lost): give it back
                c.call(Wire.release(key, 0));
            }
        }
    }

    /** A wait whose grant the session got without telling: learn its token, keep one hold. */
    private void adopt(Connection c, Wait w) {
        Reply a = c.call(Wire.acquire(w.key, w.spec, -1, false));
        c.call(Wire.release(w.key, 0));
        if (a.ok() && a.words.length == 1) {
            w.finish(Wait.Outcome.GRANTED, Wire.token(a.words[0]), null);
        } else {
            w.retry();
        }
    }

    /** The session ended with its connection (it had no grace): every hold is lost now. */
    void ended(LockBrokerException why) {
        for (Grant h : holds.values()) {
            lost(h, h.loss("the connection dropped and the session had no grace", why));
        }
    }

    /** A new session took the place of one that could not be resumed. */
    void replaced(Throwable why) {
        for (Grant h : holds.values()) {
            lost(h, h.loss("the session ended and could not be resumed"
                    + (why == null ? "" : " (" + why.getMessage() + ")"), why));
        }
        for (Wait w : waits.values()) {
            w.retry();
        }
    }

    /** No session, and none within the budget. */
    void down(LockBrokerException why) {
        for (Grant h : holds.values()) {
            lost(h, h.loss("no broker could be reached to resume the session", why));
        }
        for (Wait w : waits.values()) {
            w.finish(Wait.Outcome.FAILED, 0, new SessionLostException(why.getMessage(), why.getCause()));
        }
    }

    /** The session serves again: abandoned waits can be cancelled now. */
    void ready() {
        for (Wait w : waits.values()) {
            if (w.abandoned()) {
                chores.execute(() -> cancelAbandoned(w));
            }
        }
    }

    /** The client closed: waits end with ClosedException; holds are gone with the session. */
    void closed() {
        ClosedException e = new ClosedException();
        for (Wait w : waits.values()) {
            w.finish(Wait.Outcome.FAILED, 0, e);
        }
        for (Grant h : holds.values()) {
            if (h.markLost(h.loss("the client was closed", e))) {
                holds.remove(h.key, h);
                holdEnded(h);
            }
        }
    }
}
