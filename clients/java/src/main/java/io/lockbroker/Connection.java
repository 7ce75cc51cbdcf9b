package io.lockbroker;

import java.io.BufferedInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;

/**
 * One TCP (or TLS) connection to a broker: requests written in order, pipelined, each with a handler
 * for its reply; one reader thread that hands every {@code EVENT} line to the listener and every other
 * line to the oldest request's handler. Handlers and the listener run on the reader thread, in line
 * order, before the next line is read: they must not block (no request may wait for a reply there).
 *
 * <p>Liveness: {@link #tick} (called by the client's timer) sends an idle {@code PING} and declares
 * the connection dead when the oldest request has had no reply within the reply timeout (plus its own
 * wait, for a blocking 1.1 ACQUIRE). A dead or failed connection is closed once: every request still
 * waiting gets {@link Handler#failed}, then the listener's {@code closed}.
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

        Pending(String line, Handler handler, long deadline) {
            this.line = line;
            this.handler = handler;
            this.deadline = deadline;
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
    private final long replyTimeoutNanos;
    private final long pingIntervalNanos;
    private final Object writeLock = new Object();
    private final Object closeLock = new Object();
    private final ConcurrentLinkedQueue<Pending> pending = new ConcurrentLinkedQueue<>();
    private long lastDeadline;
    private volatile long lastActivity = System.nanoTime();
    private volatile boolean closing;
    private volatile boolean closed;
    private volatile Throwable closeCause;
    private volatile Listener listener;

    /**
     * socket: the one read and written (an SSLSocket over base for TLS); base: the TCP socket, closed
     * to end the connection at once from any thread.
     */
    Connection(String address, Socket socket, Socket base, long replyTimeoutMs, long pingIntervalMs)
            throws IOException {
        this.address = address;
        this.socket = socket;
        this.base = base;
        this.in = new BufferedInputStream(socket.getInputStream(), 16384);
        this.out = socket.getOutputStream();
        this.replyTimeoutNanos = TimeUnit.MILLISECONDS.toNanos(replyTimeoutMs);
        this.pingIntervalNanos = TimeUnit.MILLISECONDS.toNanos(pingIntervalMs);
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
        byte[] bytes = (line + "\n").getBytes(StandardCharsets.US_ASCII);
        IOException failure = null;
        synchronized (writeLock) {
            if (closed) {
                failure = NOT_SENT;
            } else {
                long now = System.nanoTime();
                long dl = now + replyTimeoutNanos + TimeUnit.MILLISECONDS.toNanos(Math.max(0, blockMs));
                if (!pending.isEmpty() && lastDeadline - dl > 0) {
                    dl = lastDeadline;
                }
                lastDeadline = dl;
                pending.add(new Pending(line, h, dl));
                try {
                    out.write(bytes);
                    out.flush();
                    lastActivity = now;
                } catch (IOException e) {
                    failure = e;
                }
            }
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
     * The timer's call: declares the connection dead when its oldest request is overdue, and sends a
     * PING when nothing went either way for the ping interval.
     */
    void tick() {
        if (closing) {
            return;
        }
        long now = System.nanoTime();
        Pending head = pending.peek();
        if (head != null) {
            if (now - head.deadline > 0) {
                close(new IOException("no reply from " + address + " within "
                        + TimeUnit.NANOSECONDS.toMillis(replyTimeoutNanos) + " ms to " + Wire.shown(head.line)));
            }
        } else if (now - lastActivity >= pingIntervalNanos) {
            send("PING", IGNORE, 0);
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
            synchronized (writeLock) {
                closed = true;
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
                lastActivity = System.nanoTime();
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
