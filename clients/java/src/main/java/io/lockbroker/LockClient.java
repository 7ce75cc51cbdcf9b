package io.lockbroker;

import java.lang.ref.Cleaner;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Consumer;
import javax.net.ssl.SSLContext;

/**
 * A client of lockbroker: one session with the brokers, over one connection at a time, shared by
 * every thread of the process that uses it. Requests of all threads are pipelined on it; waits do
 * not hold the session up (protocol 1.2 {@code ASYNC}), so any number of threads wait at once.
 *
 * <pre>{@code
 * try (LockClient client = LockClient.connect("127.0.0.1:7711");
 *      Hold hold = client.acquire("orders:42", Duration.ofSeconds(5))) {
 *     write(hold.token());
 * }
 * }</pre>
 *
 * <p>How a session ends, and what happens to its holds: {@link #close()} ends it at once
 * ({@code QUIT}: the broker frees every hold); so does a normal end of the JVM (a shutdown hook), and
 * the client object becoming unreachable (a {@link Cleaner}: keep a reference to the client, or to a
 * lock, hold or watch of it, while you use it). A process that dies without either (SIGKILL, a crash)
 * leaves its holds to the grace: the session is a grace session (5 s by default), which the broker
 * keeps for that long after the connection drops so that the client can resume it with
 * {@code RESUME} on the same broker or another of its list, holds and tokens unchanged. Brokers older
 * than protocol 1.2 are refused at connect ({@link BrokerVersionException}).
 */
public final class LockClient implements AutoCloseable {
    /** The broker's default address. */
    public static final String DEFAULT_ADDRESS = "127.0.0.1:7711";
    /** The default grace: how long a crashed app's holds stay taken (and a dropped connection may resume). */
    public static final Duration DEFAULT_GRACE = Duration.ofSeconds(5);
    /**
     * The default idle time before a PING, and the default wait for anything from the broker after it:
     * a broker whose host vanished (no FIN, no RST) is found within their sum, 4 s, soon enough to
     * resume a {@link #DEFAULT_GRACE} session on another broker while the broker-side record lives
     * (the grace plus two of the broker's touch periods after its last touch: 6.7 s at the least).
     */
    public static final Duration DEFAULT_PING_INTERVAL = Duration.ofSeconds(2);
    /** See {@link #DEFAULT_PING_INTERVAL}. */
    public static final Duration DEFAULT_PING_TIMEOUT = Duration.ofSeconds(2);

    private static final Cleaner CLEANER = Cleaner.create();

    private final Core core;
    private final Cleaner.Cleanable cleanable;

    private LockClient(Options o) {
        Core c = new Core(o);
        this.core = c;
        this.cleanable = CLEANER.register(this, c::close);
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
        return new BrokerLock(this, core.locks, key, LockSpec.exclusive());
    }

    /** A lock on key as spec says: exclusive, shared or a permit, with a TTL or a value. */
    public BrokerLock lock(String key, LockSpec spec) {
        return new BrokerLock(this, core.locks, key, spec);
    }

    /**
     * Takes key exclusive, waiting up to wait for it (zero: one try), and returns the hold: close it
     * (try-with-resources) to release it, from any thread. Throws LockTimeoutException if the wait
     * ran out. The hold is its own owner in this client: it waits for every other holder of the key
     * here, the calling thread's {@link BrokerLock}s included.
     */
    public Hold acquire(String key, Duration wait) throws InterruptedException {
        return acquire(key, LockSpec.exclusive(), wait);
    }

    /** {@link #acquire(String, Duration)} as spec says: exclusive, shared or a permit. */
    public Hold acquire(String key, LockSpec spec, Duration wait) throws InterruptedException {
        Wire.checkKey(key);
        long ms = Wire.checkMs("wait", wait.toMillis());
        Object owner = new Object();
        List<LostListener> listeners = new CopyOnWriteArrayList<>();
        Grant g = core.locks.lock(key, spec, listeners, owner, Deadline.inMs(ms), ms == 0, true);
        if (g == null) {
            throw new LockTimeoutException(key, ms);
        }
        return new Hold(this, core.locks, g, owner, listeners);
    }

    /**
     * Takes key exclusive without blocking the caller: the future completes with the hold once the
     * broker grants it ({@code ACQUIRE ... ASYNC}), or exceptionally with LockTimeoutException when
     * wait runs out (zero: one try), or with the error that ended the wait. {@code cancel(true)} (or
     * {@code cancel(false)}: the same) withdraws the wait with {@code CANCEL}; a grant that raced the
     * cancel is released. While it waits, it waits on a daemon thread of its own.
     */
    public CompletableFuture<Hold> lockAsync(String key, Duration wait) {
        return lockAsync(key, LockSpec.exclusive(), wait);
    }

    /** {@link #lockAsync(String, Duration)} as spec says: exclusive, shared or a permit. */
    public CompletableFuture<Hold> lockAsync(String key, LockSpec spec, Duration wait) {
        Wire.checkKey(key);
        Wire.checkMs("wait", wait.toMillis());
        return AsyncTake.start(key, () -> acquire(key, spec, wait));
    }

    // ------------------------------------------------------------------ reads

    /** Who holds key now, on any broker (with the holder's value: protocol 1.2 {@code OWNER ... VALUE}). */
    public KeyState owner(String key) {
        Connection c = core.session.current();
        return Wire.owner(core.session.call(Wire.owner(key, !c.legacy)));
    }

    /** Whether token's hold on key is alive in Redis now ({@code CHECK}, protocol 1.2). */
    public TokenCheck check(String key, long token) {
        return Wire.check(core.session.call(Wire.check(key, token)));
    }

    /** The keys this session holds, as the broker knows them ({@code HELD}). */
    public List<String> held() {
        return Wire.keyList(core.session.call("HELD"));
    }

    /** The client's counters now: waits, holds, losses, resumes, reconnects ({@link Counters}). */
    public Counters counters() {
        return core.tally.snapshot();
    }

    // ------------------------------------------------------------------ watches and leaders

    /**
     * Watches key: listener (may be null) gets its state now and at every change, on the client's
     * callback thread. Protocol 1.2 {@code WATCH}.
     */
    public KeyWatch watch(String key, Consumer<KeyState> listener) {
        return watch(key, listener, null);
    }

    /**
     * {@link #watch(String, Consumer)}, and onFailure (may be null) hears it if the broker ends the
     * watch later (it refuses WATCH on a new session: {@link KeyWatch#failure()}). A broker that
     * refuses it now makes this throw (BadCommandException from a broker without WATCH).
     */
    public KeyWatch watch(String key, Consumer<KeyState> listener, Consumer<LockBrokerException> onFailure) {
        return new KeyWatch(this, core.watches.watch(key, listener, onFailure));
    }

    /** A candidate for leader of key, with value (its address) for the others to read; call start(). */
    public LeaderLatch leaderLatch(String key, String value) {
        return new LeaderLatch(this, key, value);
    }

    /** Watches who leads key: listener gets the leader (empty: nobody) now and at every change. */
    public KeyWatch watchLeader(String key, Consumer<Optional<Leader>> listener) {
        return watchLeader(key, listener, null);
    }

    /** {@link #watchLeader(String, Consumer)}, and onFailure as for {@link #watch(String, Consumer, Consumer)}. */
    public KeyWatch watchLeader(String key, Consumer<Optional<Leader>> listener,
            Consumer<LockBrokerException> onFailure) {
        return watch(key, listener == null ? null : s -> listener.accept(Leader.of(s)), onFailure);
    }

    // ------------------------------------------------------------------ the session

    /** The session's client-id (it changes only when a new session replaces a lost one). */
    public String clientId() {
        return core.session.clientId();
    }

    /** The version of the broker the client is connected to now. */
    public String brokerVersion() {
        return core.session.current().version;
    }

    /**
     * Ends the session with QUIT (the broker frees every hold at once) and stops the client's
     * threads. Threads waiting in it get ClosedException; calls after it throw ClosedException.
     */
    @Override
    public void close() {
        cleanable.clean();
    }

    /** The client's inside (for the conformance runner's exit step: what the exit hook does). */
    Core core() {
        return core;
    }

    /** Settings for a client; {@link #connect()} makes it. */
    public static final class Builder {
        private List<String> addresses = List.of(DEFAULT_ADDRESS);
        private String name;
        private long graceMs = DEFAULT_GRACE.toMillis();
        private String authToken;
        private SSLContext tls;
        private int connectTimeoutMs = 3000;
        private long replyTimeoutMs = 10_000;
        private long pingIntervalMs = DEFAULT_PING_INTERVAL.toMillis();
        private long pingTimeoutMs = DEFAULT_PING_TIMEOUT.toMillis();
        private long resumeBudgetMs = -1;
        private boolean allowOldBroker = "1".equals(System.getenv("LOCKBROKER_ALLOW_OLD"));
        private LostListener lostListener;
        private SessionListener sessionListener;
        private Consumer<CounterEvent> counterListener;

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
         * (default 5 s; the broker caps it at its max_grace_ms). It is also how long the holds of a
         * process that died without closing (SIGKILL, a crash) stay taken. Ride out a longer outage,
         * such as a lone broker's restart, with a longer one: {@code grace(Duration.ofSeconds(60))}.
         * Zero: no grace, a dropped connection loses every hold.
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
         * How long a request's reply may take before the connection is declared dead and the session
         * resumed elsewhere (default 10 s). A silent broker is found sooner by the idle PING
         * ({@link #pingInterval}, {@link #pingTimeout}).
         */
        public Builder replyTimeout(Duration t) {
            this.replyTimeoutMs = Math.max(1, t.toMillis());
            return this;
        }

        /**
         * How long the client may go without a byte from the broker before it sends PING (default
         * 2 s).
         */
        public Builder pingInterval(Duration t) {
            this.pingIntervalMs = Math.max(1, t.toMillis());
            return this;
        }

        /**
         * How long after that PING the client waits for anything from the broker before it declares
         * the connection dead and resumes the session elsewhere (default 2 s). Only silence counts: a
         * reply still arriving keeps the connection, and so does a blocking wait of a 1.1 broker. The
         * two defaults find a broker whose host vanished within 4 s, while the default grace's session
         * can still be resumed.
         */
        public Builder pingTimeout(Duration t) {
            this.pingTimeoutMs = Math.max(1, t.toMillis());
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

        /** Told of each event that moves the client's {@link Counters}, on the client's callback thread. */
        public Builder onCounter(Consumer<CounterEvent> hook) {
            this.counterListener = hook;
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
                    replyTimeoutMs, pingIntervalMs, pingTimeoutMs, budget, allowOldBroker, lostListener, sessionListener,
                    counterListener));
        }
    }
}
