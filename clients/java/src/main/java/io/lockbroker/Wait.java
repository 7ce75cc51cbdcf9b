package io.lockbroker;

import java.util.List;

/**
 * One ACQUIRE on its way: sent, then (1.2) queued on the broker until one outcome event, or answered
 * at once. Its state changes on the reader thread (reply, events), on the recovery thread
 * (reconciliation after a resume) and on the caller's thread (cancel, abandon); all under its
 * monitor, which the caller waits on.
 *
 * <pre>
 * SENT --OK token/BUSY/ERR--> DONE        SENT --OK QUEUED--> QUEUED --EVENT outcome--> DONE
 * SENT --connection lost--> UNKNOWN --(resume: EVENT QUEUED | outcome | adopted | CANCEL)--> ...
 * any --(new session, or CANCEL told nothing was queued)--> RETRY: the caller sends it again
 * </pre>
 *
 * A caller that gives up while it cannot cancel (no connection) marks the wait abandoned and leaves
 * it to the recovery: a grant that comes later for it is released at once.
 */
final class Wait implements Connection.Handler {
    enum State { SENT, QUEUED, UNKNOWN, DONE, RETRY }

    enum Outcome { GRANTED, BUSY, TIMEOUT, CANCELLED, FAILED }

    /** Told on the thread that completes a wait with a grant, before anything else can happen. */
    interface Sink {
        /** A grant: make the hold now (a LOST event may follow at once). */
        Grant granted(Wait w, long token);

        /** An abandoned wait got its outcome: release a grant, forget the wait. */
        void settled(Wait w);
    }

    final String key;
    final LockSpec spec;
    /** Told if the grant is lost: the lock object's listeners. */
    final List<LostListener> listeners;
    /** The ACQUIRE line, as errors show it. */
    final String request;
    private final Sink sink;
    private State state = State.SENT;
    private Outcome outcome;
    private long token;
    private Grant hold;
    private RuntimeException error;
    private boolean abandoned;
    private boolean cancelSent;
    private boolean cancelLost;

    Wait(String key, LockSpec spec, List<LostListener> listeners, String request, Sink sink) {
        this.key = key;
        this.spec = spec;
        this.listeners = listeners;
        this.request = request;
        this.sink = sink;
    }

    // ------------------------------------------------------------------ the ACQUIRE's reply

    @Override
    public void reply(Reply r) {
        synchronized (this) {
            if (state != State.SENT) {
                return;
            }
            if (r.is("QUEUED")) {
                state = State.QUEUED;
                notifyAll();
                return;
            }
        }
        if (r.ok() && r.words.length == 1) {
            finish(Outcome.GRANTED, Wire.token(r.words[0]), null);
        } else if (r.kind == Reply.Kind.BUSY) {
            finish(Outcome.BUSY, 0, null);
        } else if (r.kind == Reply.Kind.ERR) {
            finish(Outcome.FAILED, 0, r.error());
        } else {
            finish(Outcome.FAILED, 0, r.unexpected());
        }
    }

    /** The connection ended before the reply: UNKNOWN if the ACQUIRE went out, else send it again. */
    @Override
    public void failed(ConnectionLostException e) {
        synchronized (this) {
            if (state != State.SENT) {
                return;
            }
            if (e.sent) {
                state = State.UNKNOWN;
                notifyAll();
                return;
            }
        }
        retry();
    }

    // ------------------------------------------------------------------ events and reconciliation

    /** An outcome or QUEUED event for this key. */
    void event(Event e) {
        switch (e.type) {
            case "QUEUED":
                synchronized (this) {
                    if (state == State.UNKNOWN || state == State.SENT) {
                        state = State.QUEUED;
                        notifyAll();
                    }
                }
                return;
            case "GRANTED":
                if (e.args.length == 1) {
                    finish(Outcome.GRANTED, Wire.token(e.args[0]), null);
                    return;
                }
                break;
            case "TIMEOUT":
                finish(Outcome.TIMEOUT, 0, null);
                return;
            case "FAILED":
                if (e.args.length == 1) {
                    finish(Outcome.FAILED, 0, BrokerErrorException.of(e.args[0], "",
                            new LockBrokerException.Origin(key, e.line, request, null)));
                    return;
                }
                break;
            default:
                break;
        }
        throw new ProtocolErrorException("unreadable event: " + e.line,
                new LockBrokerException.Origin(key, e.line, request, null));
    }

    /**
     * Ends the wait with an outcome, once: a grant becomes a hold at once (sink), and an abandoned
     * wait is handed back to the sink to be cleaned up. False if it had ended already.
     */
    boolean finish(Outcome o, long tok, RuntimeException err) {
        boolean wasAbandoned;
        synchronized (this) {
            if (state == State.DONE) {
                return false;
            }
            if (o == Outcome.GRANTED) {
                hold = sink.granted(this, tok);
            }
            state = State.DONE;
            outcome = o;
            token = tok;
            error = err;
            wasAbandoned = abandoned;
            notifyAll();
        }
        if (wasAbandoned) {
            sink.settled(this);
        }
        return true;
    }

    /** The caller should send its ACQUIRE again (a new session; nothing was queued). */
    void retry() {
        boolean wasAbandoned;
        synchronized (this) {
            if (state == State.DONE || state == State.RETRY) {
                return;
            }
            state = State.RETRY;
            wasAbandoned = abandoned;
            notifyAll();
        }
        if (wasAbandoned) {
            sink.settled(this);
        }
    }

    synchronized State state() {
        return state;
    }

    synchronized Outcome outcome() {
        return outcome;
    }

    synchronized long token() {
        return token;
    }

    /** The hold a grant made. */
    synchronized Grant hold() {
        return hold;
    }

    synchronized RuntimeException error() {
        return error;
    }

    synchronized boolean abandoned() {
        return abandoned;
    }

    // ------------------------------------------------------------------ the caller's side

    /**
     * Marks the wait abandoned by its caller unless it ended; true if it is abandoned now (the
     * recovery or a late outcome finishes it).
     */
    synchronized boolean abandon() {
        if (state == State.DONE || state == State.RETRY) {
            return false;
        }
        abandoned = true;
        return true;
    }

    /** True once: the caller may send CANCEL for this wait now. */
    synchronized boolean claimCancel() {
        if (cancelSent || state != State.QUEUED) {
            return false;
        }
        cancelSent = true;
        return true;
    }

    /** The CANCEL's connection ended before its answer: the caller may abandon. */
    synchronized void cancelLost() {
        cancelLost = true;
        notifyAll();
    }

    /**
     * After a lost CANCEL, on a session that serves again: the caller may send CANCEL once more
     * (true), instead of abandoning.
     */
    synchronized boolean rearmCancel() {
        if (!cancelLost) {
            return false;
        }
        cancelLost = false;
        cancelSent = false;
        return true;
    }

    /** CANCEL answered {@code OK 1}: withdrawn, no outcome will come. */
    void withdrawn() {
        finish(Outcome.CANCELLED, 0, null);
    }

    /**
     * CANCEL answered {@code OK 0}: nothing is queued; an outcome, if any, came before. A wait that got
     * none was not queued at all (a reconciliation's CANCEL of a wait whose ACQUIRE was lost).
     */
    void nothingQueued(boolean sendAgain) {
        if (sendAgain) {
            retry();
        } else {
            finish(Outcome.CANCELLED, 0, null);
        }
    }

    /**
     * Waits until the wait needs the caller: it ended (DONE, RETRY), or the caller has a reason to
     * act (giveUp) and can (a QUEUED wait not cancelled yet, an UNKNOWN one, a lost CANCEL).
     * Returns false when ms ran out first (0: no limit).
     */
    synchronized boolean await(boolean giveUp, long ms) throws InterruptedException {
        long end = System.nanoTime() + ms * 1_000_000L;
        while (true) {
            if (state == State.DONE || state == State.RETRY) {
                return true;
            }
            if (giveUp && ((state == State.QUEUED && !cancelSent) || state == State.UNKNOWN || cancelLost)) {
                return true;
            }
            if (ms == 0) {
                wait();
            } else {
                long left = end - System.nanoTime();
                if (left <= 0) {
                    return false;
                }
                wait(Math.max(1, left / 1_000_000L));
            }
        }
    }

    @Override
    public String toString() {
        return "wait for " + key + " (" + state + ")";
    }
}
