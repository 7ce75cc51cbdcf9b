package io.lockbroker;

import java.io.BufferedInputStream;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One TCP (or TLS) connection to a broker: requests written in order, pipelined, each with a handler
 * for its reply; one reader thread that hands every {@code EVENT} line to the listener and every other
 * line to the oldest request's handler. Handlers and the listener run on the reader thread, in line
 * order, before the next line is read: they must not block (no request may wait for a reply there).
 *
 * <p>Liveness: {@link #tick} (called by the client's timer) declares the connection dead when the
 * oldest request has had no reply within the reply timeout (plus its own wait, for a blocking 1.1
 * ACQUIRE); once the connection serves a session, it also sends {@code PING} after the ping interval
 * without a byte from the broker, and declares the connection dead when nothing at all comes within
 * the ping timeout after it. Only that silence counts: a reply still arriving, however long, keeps
 * the connection alive, and no PING goes out behind a blocking 1.1 ACQUIRE (its answer would wait).
 * A dead or failed connection is closed once: every request still waiting gets
 * {@link Handler#failed}, then the listener's {@code closed}.
 */
final class Connection {
    /** Receives one request's reply, or its failure when the connection ends first. */
    interface Handler {
        void reply(Reply r);

        void failed(ConnectionLostException e);
    }

    /** Receives events and the end of the connection. */
    interface Listener {
        void event(Connection c, Event e);

        void closed(Connection c, Throwable cause);
    }

    /** A handler that ignores the reply: for PING and best-effort requests. */
    static final Handler IGNORE = new Handler() {
        @Override
        public void reply(Reply r) {
        }

        @Override
        public void failed(ConnectionLostException e) {
        }
    };

    private static final int MAX_LINE = 65536;

    private static final class Pending {
        final String line;
        final Handler handler;
        final long deadline;
        final boolean blocks;

        Pending(String line, Handler handler, long deadline, boolean blocks) {
            this.line = line;
            this.handler = handler;
            this.deadline = deadline;
            this.blocks = blocks;
        }
    }

    final String address;
    /** The broker's version, from HELLO (set before the connection is used by callers). */
    volatile String version = "";
    /** A broker older than 1.2, allowed for tests: waits are blocking ACQUIREs. */
    volatile boolean legacy;
    /** The number of the session it carries ({@link Session#epoch()}), set when it becomes current. */
    volatile long epoch;

    private final Socket socket;
    private final Socket base;
    private final InputStream in;
    private final OutputStream out;
    /** The handshake's reply deadline until {@link #serving}, then the client's reply timeout. */
    private volatile long replyTimeoutNanos;
    private final long pingIntervalNanos;
    private final long pingTimeoutNanos;
    private final ReentrantLock writeLock = new ReentrantLock();
    private final Object closeLock = new Object();
    private final ConcurrentLinkedQueue<Pending> pending = new ConcurrentLinkedQueue<>();
    /** Blocking 1.1 ACQUIREs outstanding: a PING's answer would wait behind them. */
    private final AtomicInteger blocking = new AtomicInteger();
    private long lastDeadline;
    /** When bytes last came from the broker (System.nanoTime), whether or not they ended a line. */
    private volatile long lastRead = System.nanoTime();
    /** Set by {@link #serving}: the idle PING runs from then on. */
    private volatile boolean pinging;
    /** When the outstanding idle PING was due (the timer's own; 0: none outstanding). */
    private long pingAt;
    private volatile boolean closing;
    private volatile boolean closed;
    private volatile Throwable closeCause;
    private volatile Listener listener;

    /**
     * socket: the one read and written (an SSLSocket over base for TLS); base: the TCP socket, closed
     * to end the connection at once from any thread. handshakeMs: the reply deadline until
     * {@link #serving} (a broker that accepts connections but answers nothing is passed over soon).
     */
    Connection(String address, Socket socket, Socket base, long handshakeMs, long pingIntervalMs,
            long pingTimeoutMs) throws IOException {
        this.address = address;
        this.socket = socket;
        this.base = base;
        this.in = new BufferedInputStream(new FilterInputStream(socket.getInputStream()) {
            @Override
            public int read() throws IOException {
                int b = super.read();
                if (b >= 0) {
                    lastRead = System.nanoTime();
                }
                return b;
            }

            @Override
            public int read(byte[] b, int off, int len) throws IOException {
                int n = super.read(b, off, len);
                if (n > 0) {
                    lastRead = System.nanoTime();
                }
                return n;
            }
        }, 16384);
        this.out = socket.getOutputStream();
        this.replyTimeoutNanos = TimeUnit.MILLISECONDS.toNanos(handshakeMs);
        this.pingIntervalNanos = TimeUnit.MILLISECONDS.toNanos(pingIntervalMs);
        this.pingTimeoutNanos = TimeUnit.MILLISECONDS.toNanos(pingTimeoutMs);
    }

    /**
     * The handshake is over: requests sent from now on have replyTimeoutMs for their reply, and the
     * idle PING runs.
     */
    void serving(long replyTimeoutMs) {
        replyTimeoutNanos = TimeUnit.MILLISECONDS.toNanos(replyTimeoutMs);
        pinging = true;
    }

    /** Starts the reader thread; events and the end go to listener from then on. */
    void start(Listener l, String threadName) {
        this.listener = l;
        Thread t = new Thread(this::readLoop, threadName);
        t.setDaemon(true);
        t.start();
    }

    boolean closed() {
        return closing;
    }

    Throwable closeCause() {
        return closeCause;
    }

    /**
     * Writes a request; its reply (or failure) goes to h. blockMs: how long the broker may hold the
     * reply back on purpose (a blocking ACQUIRE's WAIT), added to the reply deadline of it and of every
     * request behind it. Never throws: a failed write closes the connection and fails h.
     *
     * <p>A request is queued and written under the write lock, and the connection is marked closed
     * under it too: a request either went out (or may have: it counts as sent) before the close,
     * and the close fails it with every other, before the listener hears of the close; or it is
     * refused as never sent.
     */
    void send(String line, Handler h, long blockMs) {
        writeLock.lock();
        sendLocked(line, h, blockMs);
    }

    /**
     * The timer's PING: sent only if no other thread is writing (one stuck in a write to a broker
     * that stopped reading must not stop the timer too). False if it was not sent.
     */
    private boolean trySend(String line, Handler h) {
        if (!writeLock.tryLock()) {
            return false;
        }
        sendLocked(line, h, 0);
        return true;
    }

    /** send()'s body: called with the write lock held, returns with it released. */
    private void sendLocked(String line, Handler h, long blockMs) {
        byte[] bytes = (line + "\n").getBytes(StandardCharsets.US_ASCII);
        IOException failure = null;
        try {
            if (closed) {
                failure = NOT_SENT;
            } else {
                long now = System.nanoTime();
                long dl = now + replyTimeoutNanos + TimeUnit.MILLISECONDS.toNanos(Math.max(0, blockMs));
                if (!pending.isEmpty() && lastDeadline - dl > 0) {
                    dl = lastDeadline;
                }
                lastDeadline = dl;
                pending.add(new Pending(line, h, dl, blockMs > 0));
                if (blockMs > 0) {
                    blocking.incrementAndGet();
                }
                try {
                    out.write(bytes);
                    out.flush();
                } catch (IOException e) {
                    failure = e;
                }
            }
        } finally {
            writeLock.unlock();
        }
        if (failure == NOT_SENT) {
            h.failed(new ConnectionLostException("connection to " + address + " ended before " + Wire.shown(line), closeCause,
                    false));
        } else if (failure != null) {
            close(failure);
        }
    }

    private static final IOException NOT_SENT = new IOException("not sent");

    /** Sends a request and waits for its reply (for set-up and for threads of the caller). */
    Reply call(String line) {
        Call c = new Call();
        send(line, c, 0);
        return c.get();
    }

    /** A handler that a thread waits on. */
    static final class Call implements Handler {
        private Reply reply;
        private ConnectionLostException error;
        private boolean done;

        @Override
        public synchronized void reply(Reply r) {
            reply = r;
            done = true;
            notifyAll();
        }

        @Override
        public synchronized void failed(ConnectionLostException e) {
            error = e;
            done = true;
            notifyAll();
        }

        /**
         * Waits for the reply, uninterruptibly (the connection's reply deadline bounds it; an
         * interrupt is kept for the caller).
         */
        synchronized Reply get() {
            boolean interrupted = false;
            while (!done) {
                try {
                    wait();
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
            if (error != null) {
                throw error;
            }
            return reply;
        }
    }

    /**
     * The timer's call (one thread): declares the connection dead when its oldest request is overdue,
     * or when nothing came from the broker within the ping timeout after an idle PING was due; sends
     * that PING after the ping interval without a byte from the broker.
     */
    void tick() {
        if (closing) {
            return;
        }
        long now = System.nanoTime();
        Pending head = pending.peek();
        if (head != null && now - head.deadline > 0) {
            close(new IOException("no reply from " + address + " within "
                    + TimeUnit.NANOSECONDS.toMillis(replyTimeoutNanos) + " ms to " + Wire.shown(head.line)));
            return;
        }
        if (!pinging) {
            return;
        }
        long last = lastRead;
        if (pingAt != 0) {
            if (last - pingAt < 0) {
                if (now - pingAt >= pingTimeoutNanos) {
                    close(new IOException("no reply from " + address + " to PING within "
                            + TimeUnit.NANOSECONDS.toMillis(pingTimeoutNanos) + " ms"));
                }
                return;
            }
            pingAt = 0;                 // something came: the broker lives
        }
        if (now - last >= pingIntervalNanos && blocking.get() == 0) {
            // due even when it cannot be written now: a writer stuck for want of a reader is
            // silence too, and ends the connection the same way
            pingAt = now;
            trySend("PING", IGNORE);
        }
    }

    /**
     * Ends the connection at once (no QUIT); idempotent. Every request outstanding has been failed
     * when it returns, whichever thread closed first (the reader tells the listener only then, so
     * that a recovery sees every wait in its final state).
     */
    void close(Throwable cause) {
        synchronized (closeLock) {
            if (closing) {
                return;
            }
            closing = true;
            closeCause = cause;
            try {
                base.close();           // a writer stuck in write() gets out, and frees the write lock
            } catch (IOException e) {
                // closing anyway
            }
            writeLock.lock();
            try {
                closed = true;
            } finally {
                writeLock.unlock();
            }
            failPending();
        }
    }

    /** QUIT, a short wait for its OK, then close: the broker releases the session's holds. */
    void quit(long waitMs) {
        if (closing) {
            return;
        }
        Call c = new Call();
        send("QUIT", c, 0);
        synchronized (c) {
            long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(waitMs);
            while (!c.done) {
                long left = end - System.nanoTime();
                if (left <= 0) {
                    break;
                }
                try {
                    TimeUnit.NANOSECONDS.timedWait(c, left);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    break;
                }
            }
        }
        try {
            socket.close();
        } catch (IOException e) {
            // closing anyway
        }
        close(new IOException("client closed"));
    }

    private void failPending() {
        Pending p;
        while ((p = pending.poll()) != null) {
            try {
                p.handler.failed(new ConnectionLostException("connection to " + address + " ended before the reply to "
                        + Wire.shown(p.line), closeCause, true));
            } catch (RuntimeException e) {
                // a handler's bug must not stop the others
            }
        }
    }

    private void readLoop() {
        Throwable cause = null;
        byte[] buf = new byte[MAX_LINE];
        try {
            while (!closing) {
                String line = readLine(buf);
                if (line == null) {
                    throw new IOException("broker " + address + " closed the connection");
                }
                if (line.isEmpty()) {
                    continue;
                }
                if (Wire.isEvent(line)) {
                    Listener l = listener;
                    if (l != null) {
                        l.event(this, Wire.event(line));
                    }
                    continue;
                }
                Pending p = pending.poll();
                if (p == null) {
                    throw new ProtocolErrorException("a reply with no request outstanding: " + line);
                }
                if (p.blocks) {
                    blocking.decrementAndGet();
                }
                Reply r;
                try {
                    r = Wire.reply(line, Wire.shown(p.line));
                } catch (ProtocolErrorException e) {
                    p.handler.failed(new ConnectionLostException("connection to " + address + " ended: " + e.getMessage(),
                            e, true));
                    throw e;
                }
                try {
                    p.handler.reply(r);
                } catch (RuntimeException e) {
                    // a handler's bug must not stop the reader
                }
            }
        } catch (IOException | RuntimeException e) {
            cause = e;
        }
        close(closeCause != null ? closeCause : cause);
        Listener l = listener;
        if (l != null) {
            l.closed(this, closeCause);
        }
    }

    /** One line without its CR LF, or null at the end of input. */
    private String readLine(byte[] buf) throws IOException {
        int n = 0;
        while (true) {
            int b = in.read();
            if (b < 0) {
                if (n == 0) {
                    return null;
                }
                throw new IOException("connection ended inside a line");
            }
            if (b == '\n') {
                if (n > 0 && buf[n - 1] == '\r') {
                    n--;
                }
                return new String(buf, 0, n, StandardCharsets.US_ASCII);
            }
            if (n == buf.length) {
                throw new ProtocolErrorException("a line from " + address + " longer than " + MAX_LINE + " bytes");
            }
            buf[n++] = (byte) b;
        }
    }

    @Override
    public String toString() {
        return "connection to " + address;
    }
}
