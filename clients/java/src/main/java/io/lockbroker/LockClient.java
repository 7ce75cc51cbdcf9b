package io.lockbroker;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import javax.net.ssl.SSLContext;

/**
 * A client of lockbroker: one session with the brokers, over one connection at a time, shared by
 * every thread of the process that uses it. Requests of all threads are pipelined on it; waits do
 * not hold the session up (protocol 1.2 {@code ASYNC}), so any number of threads wait at once.
 *
 * <pre>{@code
 * try (LockClient client = LockClient.connect("127.0.0.1:7711")) {
 *     Lock lock = client.lock("orders:42");
 *     if (lock.tryLock(5, TimeUnit.SECONDS)) {
 *         try { ... } finally { lock.unlock(); }
 *     }
 * }
 * }</pre>
 *
 * <p>The session is a grace session (30 s by default): when the connection drops, the client resumes
 * it with {@code RESUME} on the same broker or another of its list, and the holds carry on with the
 * same tokens; a hold the resumed session lacks is reported lost. Brokers older than protocol 1.2
 * are refused at connect ({@link BrokerVersionException}).
 */
public final class LockClient implements AutoCloseable {
    /** The broker's default address. */
    public static final String DEFAULT_ADDRESS = "127.0.0.1:7711";

    private final Options o;
    private final ExecutorService callbacks;
    private final ExecutorService chores;
    private final ScheduledExecutorService timer;
    private final Session session;
    private final Locks locks;
    private final Watches watches;

    private LockClient(Options o) {
        this.o = o;
        this.callbacks = Executors.newSingleThreadExecutor(daemon("lockbroker-callbacks"));
        this.chores = Executors.newSingleThreadExecutor(daemon("lockbroker-chores"));
        this.timer = Executors.newSingleThreadScheduledExecutor(daemon("lockbroker-timer"));
        this.session = new Session(o, new Owner(), callbacks);
        this.locks = new Locks(session, o, callbacks, chores);
        this.watches = new Watches(session, callbacks);
        try {
            session.open();
        } catch (RuntimeException e) {
            shutdown();
            throw e;
        }
        long tick = Math.max(20, Math.min(1000, Math.min(o.pingIntervalMs, o.replyTimeoutMs) / 4));
        timer.scheduleAtFixedRate(this::tick, tick, tick, TimeUnit.MILLISECONDS);
    }

    /** Connects with the default settings to the first of these brokers that answers (none: 127.0.0.1:7711). */
    public static LockClient connect(String... addresses) {
        Builder b = builder();
        if (addresses.length > 0) {
            b.addresses(addresses);
        }
        return b.connect();
    }

    public static Builder builder() {
        return new Builder();
    }

    // ------------------------------------------------------------------ locks

    /** An exclusive lock on key. */
    public BrokerLock lock(String key) {
        return new BrokerLock(locks, key, LockSpec.exclusive());
    }

    /** A lock on key as spec says: exclusive, shared or a permit, with a TTL or a value. */
    public BrokerLock lock(String key, LockSpec spec) {
        return new BrokerLock(locks, key, spec);
    }

    // ------------------------------------------------------------------ reads

    /** Who holds key now, on any broker (with the holder's value: protocol 1.2 {@code OWNER ... VALUE}). */
    public KeyState owner(String key) {
        Connection c = session.current();
        return Wire.owner(session.call(Wire.owner(key, !c.legacy)));
    }

    /** Whether token's hold on key is alive in Redis now ({@code CHECK}, protocol 1.2). */
    public TokenCheck check(String key, long token) {
        return Wire.check(session.call(Wire.check(key, token)));
    }

    /** The keys this session holds, as the broker knows them ({@code HELD}). */
    public List<String> held() {
        return Wire.keyList(session.call("HELD"), "HELD");
    }

    // ------------------------------------------------------------------ watches and leaders

    /**
     * Watches key: listener (may be null) gets its state now and at every change, on the client's
     * callback thread. Protocol 1.2 {@code WATCH}.
     */
    public KeyWatch watch(String key, Consumer<KeyState> listener) {
        return watches.watch(key, listener);
    }

    /** A candidate for leader of key, with value (its address) for the others to read; call start(). */
    public LeaderLatch leaderLatch(String key, String value) {
        return new LeaderLatch(this, key, value);
    }

    /** Watches who leads key: listener gets the leader (empty: nobody) now and at every change. */
    public KeyWatch watchLeader(String key, Consumer<Optional<Leader>> listener) {
        return watches.watch(key, listener == null ? null : s -> listener.accept(Leader.of(s)));
    }

    // ------------------------------------------------------------------ the session

    /** The session's client-id (it changes only when a new session replaces a lost one). */
    public String clientId() {
        return session.clientId();
    }

    /** The version of the broker the client is connected to now. */
    public String brokerVersion() {
        return session.current().version;
    }

    /**
     * Ends the session with QUIT (the broker frees every hold at once) and stops the client's
     * threads. Threads waiting in it get IllegalStateException.
     */
    @Override
    public void close() {
        session.close();
        locks.closed();
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

    /** Settings for a client; {@link #connect()} makes it. */
    public static final class Builder {
        private List<String> addresses = List.of(DEFAULT_ADDRESS);
        private String name;
        private long graceMs = 30_000;
        private String authToken;
        private SSLContext tls;
        private int connectTimeoutMs = 3000;
        private long replyTimeoutMs = 10_000;
        private long pingIntervalMs = 5000;
        private long resumeBudgetMs = -1;
        private boolean allowOldBroker = "1".equals(System.getenv("LOCKBROKER_ALLOW_OLD"));
        private LostListener lostListener;
        private SessionListener sessionListener;

        private Builder() {
        }

        /** The brokers (host:port), tried in order; the session resumes on any of them. */
        public Builder addresses(String... addresses) {
            return addresses(Arrays.asList(addresses));
        }

        public Builder addresses(List<String> addresses) {
            if (addresses.isEmpty()) {
                throw new IllegalArgumentException("at least one broker address");
            }
            for (String a : addresses) {
                Transport.parse(a);
            }
            this.addresses = new ArrayList<>(addresses);
            return this;
        }

        /** A name for the session (HELLO's; 1..64 printable characters, no blanks). */
        public Builder name(String name) {
            this.name = Wire.checkWord("name", name, Wire.MAX_NAME);
            return this;
        }

        /**
         * How long the broker keeps the session's holds after the connection drops, for a RESUME
         * (default 30 s; the broker caps it at its max_grace_ms). Zero: no grace, a dropped
         * connection loses every hold.
         */
        public Builder grace(Duration grace) {
            this.graceMs = Wire.checkMs("grace", grace.toMillis());
            return this;
        }

        /** The token to send with AUTH (the broker's auth_token, or an app's token of its acl_file). */
        public Builder authToken(String token) {
            this.authToken = Wire.checkWord("auth token", token, 4000);
            return this;
        }

        /** TLS to the brokers' TLS ports, trusting the CA certificates in caFile (PEM). */
        public Builder tls(Path caFile) {
            this.tls = Tls.context(caFile, null, null);
            return this;
        }

        /** TLS with a client certificate (PEM chain, PKCS#8 PEM key) for brokers that ask for one. */
        public Builder tls(Path caFile, Path certFile, Path keyFile) {
            this.tls = Tls.context(caFile, certFile, keyFile);
            return this;
        }

        /** TLS with a context of your own (trust store, client keys, protocols). */
        public Builder sslContext(SSLContext context) {
            this.tls = context;
            return this;
        }

        /** How long a connect and TLS handshake may take (default 3 s). */
        public Builder connectTimeout(Duration t) {
            this.connectTimeoutMs = (int) Math.min(Integer.MAX_VALUE, Math.max(1, t.toMillis()));
            return this;
        }

        /**
         * How long a reply may take before the connection is declared dead and the session resumed
         * elsewhere (default 10 s). It bounds the idle PING too.
         */
        public Builder replyTimeout(Duration t) {
            this.replyTimeoutMs = Math.max(1, t.toMillis());
            return this;
        }

        /** How long the connection may be idle before the client sends PING (default 5 s). */
        public Builder pingInterval(Duration t) {
            this.pingIntervalMs = Math.max(1, t.toMillis());
            return this;
        }

        /**
         * How long the client tries to resume the session after its connection dropped before it
         * gives up: holds lost, waits failed (default: the grace; 10 s without one).
         */
        public Builder resumeBudget(Duration t) {
            this.resumeBudgetMs = Math.max(0, t.toMillis());
            return this;
        }

        /** Told when any hold of the client is lost. */
        public Builder onLost(LostListener l) {
            this.lostListener = l;
            return this;
        }

        /** Told of connects, drops, resumes and new sessions. */
        public Builder sessionListener(SessionListener l) {
            this.sessionListener = l;
            return this;
        }

        /** Tests only: accept a broker older than 1.2 (waits become blocking ACQUIREs). */
        Builder allowOldBroker(boolean allow) {
            this.allowOldBroker = allow;
            return this;
        }

        /** Connects and starts the session; throws if no broker could be reached or none fits. */
        public LockClient connect() {
            long budget = resumeBudgetMs >= 0 ? resumeBudgetMs : graceMs > 0 ? graceMs : 10_000;
            return new LockClient(new Options(addresses, name, graceMs, authToken, tls, connectTimeoutMs,
                    replyTimeoutMs, pingIntervalMs, budget, allowOldBroker, lostListener, sessionListener));
        }
    }
}
