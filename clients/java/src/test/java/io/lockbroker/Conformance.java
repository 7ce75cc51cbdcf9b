package io.lockbroker;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.Callable;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * The conformance runner: replays tests/conformance/*.txt (the grammar is that folder's README.md)
 * through this library, with the shared helper (servers.py, through {@link Servers}) for servers and
 * faults. {@code java io.lockbroker.Conformance <dir or files...>}: prints one line per transcript
 * (pass, or fail with the line and what happened instead) and exits 1 if any failed.
 *
 * <p>Each action runs on a thread of its own; a successful lock's thread stays the hold's home, where
 * its unlock, renew and proclaim run (a Java lock is unlocked by the thread that locked it).
 */
public final class Conformance {
    private static final long STEP_MS = 10_000;
    private static final Pattern VAR = Pattern.compile("\\$\\w+");
    private static final List<String> OWN_WORDS = List.of("client", "await", "cancel", "assert", "repeat");

    /** A failed step: the runner's report says why. */
    static class Failure extends Exception {
        private static final long serialVersionUID = 1L;

        Failure(String why) {
            super(why);
        }
    }

    /** What a call came to, as outcome words ("held 17", "busy", "error DENIED", "exclusive 17 value=x"). */
    record Result(List<String> words, long ms) {
        @Override
        public String toString() {
            return String.join(" ", words);
        }
    }

    /** One client object of a transcript. */
    static final class Client {
        final LockClient lib;
        final Map<String, ExecutorService> homes = new ConcurrentHashMap<>();
        final Map<String, BrokerLock> locks = new ConcurrentHashMap<>();
        final Map<String, List<Long>> lost;
        final List<String> events;
        final Map<String, KeyWatch> watches = new ConcurrentHashMap<>();
        final Map<String, KeyWatch> leaders = new ConcurrentHashMap<>();
        final Map<String, LeaderLatch> latches = new ConcurrentHashMap<>();

        Client(LockClient lib, Map<String, List<Long>> lost, List<String> events) {
            this.lib = lib;
            this.lost = lost;
            this.events = events;
        }
    }

    private final Servers servers;
    private final Map<String, Client> clients = new HashMap<>();
    private final Map<String, Long> vars = new HashMap<>();
    private final Map<String, Future<Result>> pending = new HashMap<>();
    private final Map<String, Interruptible> cancels = new HashMap<>();
    private final List<ExecutorService> threads = new ArrayList<>();

    private Conformance(Servers servers) {
        this.servers = servers;
    }

    public static void main(String[] args) throws Exception {
        List<Path> files = new ArrayList<>();
        for (String a : args) {
            Path p = Path.of(a);
            if (Files.isDirectory(p)) {
                try (Stream<Path> s = Files.list(p)) {
                    files.addAll(s.filter(f -> f.toString().endsWith(".txt")).sorted().collect(Collectors.toList()));
                }
            } else {
                files.add(p);
            }
        }
        int failed = 0;
        long t0 = System.nanoTime();
        try (Servers servers = new Servers()) {
            for (Path f : files) {
                Conformance run = new Conformance(servers);
                long t = System.nanoTime();
                String verdict = run.transcript(f);
                System.out.printf("%-24s %s (%.1f s)%n", f.getFileName(), verdict, (System.nanoTime() - t) / 1e9);
                if (!verdict.equals("pass")) {
                    failed++;
                }
            }
        }
        System.out.printf("%d transcripts, %d passed, %d failed (%.1f s)%n", files.size(),
                files.size() - failed, failed, (System.nanoTime() - t0) / 1e9);
        System.exit(failed == 0 ? 0 : 1);
    }

    // ------------------------------------------------------------------ a transcript

    private String transcript(Path file) throws IOException {
        servers.reset();
        List<String> lines = Files.readAllLines(file);
        try {
            for (int i = 0; i < lines.size(); i++) {
                String line = lines.get(i).strip();
                if (line.isEmpty() || line.startsWith("#")) {
                    continue;
                }
                try {
                    for (String step : expand(line)) {
                        step(step);
                    }
                } catch (Failure | RuntimeException e) {
                    return "fail at line " + (i + 1) + ": " + line + "\n    " + e.getMessage();
                }
            }
            return "pass";
        } finally {
            cleanup();
        }
    }

    private static List<String> expand(String line) throws Failure {
        if (!line.startsWith("repeat ")) {
            return List.of(line);
        }
        String[] w = line.split("\\s+", 3);
        Matcher m = Pattern.compile("(\\d+)\\.\\.(\\d+)").matcher(w[1]);
        if (w.length < 3 || !m.matches()) {
            throw new Failure("repeat <a>..<b> <step>");
        }
        List<String> out = new ArrayList<>();
        for (int i = Integer.parseInt(m.group(1)); i <= Integer.parseInt(m.group(2)); i++) {
            out.add(w[2].replace("{i}", String.valueOf(i)));
        }
        return out;
    }

    private void cleanup() {
        for (Future<Result> f : pending.values()) {
            f.cancel(true);
        }
        for (Client c : clients.values()) {
            for (LeaderLatch l : c.latches.values()) {
                l.close();
            }
            try {
                c.lib.close();
            } catch (RuntimeException e) {
                // closed already
            }
            for (ExecutorService e : c.homes.values()) {
                e.shutdownNow();
            }
        }
        for (ExecutorService e : threads) {
            e.shutdownNow();
        }
    }

    // ------------------------------------------------------------------ steps

    private void step(String line) throws Failure, IOException {
        String[] parts = line.split("\\s+->\\s*", 2);
        List<String> words = List.of(parts[0].trim().split("\\s+"));
        List<String> expect = parts.length > 1 ? List.of(parts[1].trim().split("\\s+")) : null;
        String first = words.get(0);
        if (first.equals("client")) {
            client(words, expect);
        } else if (first.equals("await")) {
            check(await(words.get(1)), expect);
        } else if (first.equals("cancel")) {
            Future<Result> f = pending.get(words.get(1));
            if (f == null) {
                throw new Failure("no async call " + words.get(1));
            }
            cancels.remove(words.get(1)).cancel();
            check(await(words.get(1)), expect);
        } else if (first.equals("assert")) {
            assertion(words);
        } else if (clients.containsKey(first) && !OWN_WORDS.contains(first)) {
            Client c = clients.get(first);
            if (words.get(1).equals("expect")) {
                expectation(c, words.subList(2, words.size()));
            } else {
                action(c, words.subList(1, words.size()), expect);
            }
        } else {
            try {
                servers.step(line);
            } catch (IOException e) {
                throw new Failure(e.getMessage());
            }
        }
    }

    private static Map<String, String> options(List<String> words, int from) {
        Map<String, String> o = new LinkedHashMap<>();
        for (String w : words.subList(Math.min(from, words.size()), words.size())) {
            int eq = w.indexOf('=');
            o.put(eq < 0 ? w : w.substring(0, eq), eq < 0 ? "" : w.substring(eq + 1));
        }
        return o;
    }

    private void client(List<String> words, List<String> expect) throws Failure, IOException {
        String name = words.get(1);
        Map<String, String> o = options(words, 3);
        boolean tls = o.containsKey("tls");
        List<String> addrs = new ArrayList<>();
        String ca = null;
        for (String b : words.get(2).split(",")) {
            Servers.Broker info = servers.info(b);
            addrs.add(tls ? info.tlsAddress() : info.address());
            ca = info.ca;
        }
        LockClient.Builder bld = LockClient.builder().addresses(addrs);
        if (tls) {
            bld.tls(Path.of(ca));
        }
        if (o.containsKey("auth")) {
            bld.authToken(o.get("auth"));
        }
        if (o.containsKey("grace")) {
            bld.grace(Duration.ofMillis(Long.parseLong(o.get("grace"))));
        }
        if (o.containsKey("ping")) {
            Duration d = Duration.ofMillis(Long.parseLong(o.get("ping")));
            bld.pingInterval(d).pingTimeout(d);
        }
        if (o.containsKey("name")) {
            bld.name(o.get("name"));
        }
        Map<String, List<Long>> lost = new ConcurrentHashMap<>();
        List<String> events = new ArrayList<>();
        bld.onLost((k, t, e) -> lost.computeIfAbsent(k, x -> new java.util.concurrent.CopyOnWriteArrayList<>()).add(t));
        bld.sessionListener(new SessionListener() {
            @Override
            public void resumed(String address, String clientId, List<String> keys) {
                synchronized (events) {
                    events.add("resumed");
                    events.notifyAll();
                }
            }

            @Override
            public void newSession(String address, String clientId, Throwable cause) {
                synchronized (events) {
                    events.add("new_session");
                    events.notifyAll();
                }
            }
        });
        Result r;
        long t0 = System.nanoTime();
        try {
            clients.put(name, new Client(bld.connect(), lost, events));
            r = new Result(List.of("ok"), ms(t0));
        } catch (RuntimeException e) {
            r = new Result(error(e), ms(t0));
        }
        check(r, expect == null ? List.of("ok") : expect);
    }

    /**
     * An async call whose cancel interrupts the thread running it, the way an application cancels a
     * lock(). (Future.cancel(true) interrupts too, but then the Future only ever says "cancelled":
     * the call's own outcome, which the transcript checks, is lost.) An interrupt never outlives
     * the call: the home thread goes on to run the hold's unlock.
     */
    static final class Interruptible implements Callable<Result> {
        private final Callable<Result> call;
        private Thread runner; // guarded by this
        private boolean cancelled; // guarded by this

        Interruptible(Callable<Result> call) {
            this.call = call;
        }

        @Override
        public Result call() throws Exception {
            synchronized (this) {
                runner = Thread.currentThread();
                if (cancelled) {
                    runner.interrupt();
                }
            }
            try {
                return call.call();
            } finally {
                synchronized (this) {
                    runner = null;
                    Thread.interrupted();
                }
            }
        }

        synchronized void cancel() {
            cancelled = true;
            if (runner != null) {
                runner.interrupt();
            }
        }
    }

    private static long ms(long t0) {
        return (System.nanoTime() - t0) / 1_000_000;
    }

    // ------------------------------------------------------------------ actions

    private void action(Client c, List<String> words, List<String> expect) throws Failure {
        String verb = words.get(0);
        Map<String, String> o = options(words, verb.equals("proclaim") || verb.equals("check")
                || verb.equals("elect") ? 3 : 2);
        String async = o.remove("async");
        String key = words.size() > 1 ? words.get(1) : null;
        Callable<Result> call = callFor(c, verb, words, o);
        ExecutorService home = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "conformance " + verb + " " + key);
            t.setDaemon(true);
            return t;
        });
        boolean holdsHome = verb.equals("lock");
        boolean usesHome = verb.equals("unlock") || verb.equals("renew") || verb.equals("proclaim");
        ExecutorService exec = home;
        if (usesHome && c.homes.containsKey(key)) {
            home.shutdown();
            exec = c.homes.get(key);
        } else {
            threads.add(home);
        }
        Future<Result> f;
        if (async != null) {
            Interruptible ic = new Interruptible(call);
            f = exec.submit(ic);
            cancels.put(async, ic);
            pending.put(async, f);
            if (holdsHome) {
                pendingHomes.put(async, new Object[] {c, key, home});
            }
            return;
        }
        f = exec.submit(call);
        if (expect == null) {
            throw new Failure("a step without async= needs -> <outcome>");
        }
        Result r = get(f);
        settleHome(c, verb, key, home, r);
        check(r, expect);
    }

    private final Map<String, Object[]> pendingHomes = new HashMap<>();

    /** A lock that held makes its thread the hold's home; an unlock ends the home. */
    private static void settleHome(Client c, String verb, String key, ExecutorService home, Result r) {
        if (verb.equals("lock") && r.words.get(0).equals("held")) {
            c.homes.put(key, home);
        } else if (verb.equals("unlock")) {
            ExecutorService h = c.homes.remove(key);
            if (h != null) {
                h.shutdown();
            }
        }
    }

    private Result await(String name) throws Failure {
        Future<Result> f = pending.remove(name);
        if (f == null) {
            throw new Failure("no async call " + name);
        }
        Result r = get(f);
        Object[] h = pendingHomes.remove(name);
        if (h != null) {
            settleHome((Client) h[0], "lock", (String) h[1], (ExecutorService) h[2], r);
        }
        return r;
    }

    private static Result get(Future<Result> f) throws Failure {
        try {
            return f.get(STEP_MS, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            f.cancel(true);
            throw new Failure("the call did not end within " + STEP_MS + " ms");
        } catch (java.util.concurrent.CancellationException e) {
            throw new Failure("the call was cancelled before it ran");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new Failure("interrupted");
        } catch (ExecutionException e) {
            throw new Failure("the call failed: " + e.getCause());
        }
    }

    /** The library call an action makes, as a Callable that answers outcome words. */
    private Callable<Result> callFor(Client c, String verb, List<String> words, Map<String, String> o)
            throws Failure {
        String key = words.size() > 1 ? words.get(1) : null;
        switch (verb) {
            case "lock":
                return timed(() -> lock(c, key, o));
            case "unlock":
                return timed(() -> {
                    BrokerLock l = c.locks.get(key);
                    if (l == null) {
                        l = c.lib.lock(key);
                    }
                    if (o.containsKey("linger")) {
                        l.unlock(Duration.ofMillis(Long.parseLong(o.get("linger"))));
                    } else {
                        l.unlock();
                    }
                    return List.of("ok");
                });
            case "renew":
                return timed(() -> {
                    BrokerLock l = c.locks.getOrDefault(key, c.lib.lock(key));
                    if (o.containsKey("ttl")) {
                        l.renew(Duration.ofMillis(Long.parseLong(o.get("ttl"))));
                    } else {
                        l.renew();
                    }
                    return List.of("ok");
                });
            case "proclaim":
                return timed(() -> {
                    c.locks.getOrDefault(key, c.lib.lock(key)).proclaim(words.get(2));
                    return List.of("ok");
                });
            case "owner":
                return timed(() -> state(c.lib.owner(key)));
            case "check": {
                long tok = value(words.get(2));
                return timed(() -> {
                    TokenCheck t = c.lib.check(key, tok);
                    return List.of(t.toString().split(" "));
                });
            }
            case "watch":
                return timed(() -> {
                    c.watches.put(key, c.lib.watch(key, null));
                    return List.of("ok");
                });
            case "unwatch":
                return timed(() -> {
                    KeyWatch w = c.watches.remove(key);
                    if (w != null) {
                        w.close();
                    }
                    return List.of("ok");
                });
            case "elect":
                return timed(() -> elect(c, key, words.get(2), o));
            case "resign":
                return timed(() -> {
                    LeaderLatch l = c.latches.remove(key);
                    if (l != null) {
                        l.close();
                    }
                    return List.of("ok");
                });
            case "close":
                return timed(() -> {
                    for (LeaderLatch l : c.latches.values()) {
                        l.close();
                    }
                    c.lib.close();
                    return List.of("ok");
                });
            case "exit":
                // the app ends without close(): what the JVM's shutdown hook does, for this client only
                return timed(() -> {
                    Exits.run(List.of(c.lib.core()));
                    return List.of("ok");
                });
            default:
                throw new Failure("unknown action " + verb);
        }
    }

    interface Body {
        List<String> run() throws Exception;
    }

    private static Callable<Result> timed(Body b) {
        return () -> {
            long t0 = System.nanoTime();
            List<String> words;
            try {
                words = b.run();
            } catch (InterruptedException e) {
                words = List.of("cancelled");
            } catch (RuntimeException e) {
                words = error(e);
            }
            return new Result(words, ms(t0));
        };
    }

    private static List<String> error(RuntimeException e) {
        if (e instanceof ClosedException) {
            return List.of("error", "USAGE");
        }
        if (e instanceof LockBrokerException) {
            return List.of("error", ((LockBrokerException) e).code());
        }
        if (e instanceof IllegalStateException || e instanceof IllegalMonitorStateException
                || e instanceof IllegalArgumentException) {
            return List.of("error", "USAGE");
        }
        return List.of("error", e.toString());
    }

    private List<String> lock(Client c, String key, Map<String, String> o) throws InterruptedException {
        LockSpec spec = o.containsKey("shared") ? LockSpec.shared()
                : o.containsKey("limit") ? LockSpec.permits(Integer.parseInt(o.get("limit"))) : LockSpec.exclusive();
        if (o.containsKey("ttl")) {
            spec = spec.ttl(Duration.ofMillis(Long.parseLong(o.get("ttl"))));
        }
        if (o.containsKey("value")) {
            try {
                spec = spec.value(o.get("value"));
            } catch (IllegalArgumentException e) {
                return List.of("error", "BADARG");       // the library refuses what the broker would
            }
        }
        BrokerLock l = c.lib.lock(key, spec);
        long wait = Long.parseLong(o.getOrDefault("wait", "0"));
        boolean got = wait > 0 ? l.tryLock(wait, TimeUnit.MILLISECONDS) : l.tryLock();
        if (!got) {
            return List.of(wait > 0 ? "timeout" : "busy");
        }
        c.locks.put(key, l);
        return List.of("held", String.valueOf(l.token()));
    }

    private List<String> elect(Client c, String key, String value, Map<String, String> o)
            throws InterruptedException {
        LeaderLatch latch = c.lib.leaderLatch(key, value).start();
        c.latches.put(key, latch);
        long wait = Long.parseLong(o.getOrDefault("wait", String.valueOf(Long.MAX_VALUE / 4)));
        try {
            if (!latch.await(wait, TimeUnit.MILLISECONDS)) {
                latch.close();
                c.latches.remove(key, latch);
                return List.of("timeout");
            }
        } catch (InterruptedException e) {
            latch.close();
            c.latches.remove(key, latch);
            throw e;
        }
        return List.of("held", String.valueOf(latch.token()));
    }

    private static List<String> state(KeyState s) {
        if (s instanceof KeyState.Exclusive) {
            KeyState.Exclusive x = (KeyState.Exclusive) s;
            return List.of("exclusive", String.valueOf(x.token()), "value=" + x.value().orElse("-"));
        }
        return List.of(s.toString().split(" "));
    }

    // ------------------------------------------------------------------ expectations

    private void expectation(Client c, List<String> w) throws Failure {
        String what = w.get(0);
        Map<String, String> o = new HashMap<>();
        List<String> pos = new ArrayList<>();
        for (String x : w.subList(1, w.size())) {
            if (x.startsWith("within=") || x.startsWith("for=")) {
                o.put(x.substring(0, x.indexOf('=')), x.substring(x.indexOf('=') + 1));
            } else {
                pos.add(x);
            }
        }
        long within = Long.parseLong(o.getOrDefault("within", "5000"));
        Deadline d = Deadline.inMs(within);
        String key = pos.isEmpty() ? null : pos.get(0);
        switch (what) {
            case "lost": {
                Map<String, List<Long>> lost = c.lost;
                while (!lost.containsKey(key) || lost.get(key).isEmpty()) {
                    if (d.passed()) {
                        throw new Failure("no loss of " + key + " reported within " + within + " ms");
                    }
                    sleep(20);
                }
                lost.get(key).clear();
                return;
            }
            case "held": {
                BrokerLock l = c.locks.get(key);
                if (l == null || !l.isHeld()) {
                    throw new Failure(key + " is not held");
                }
                if (pos.size() > 1) {
                    match(pos.get(1), String.valueOf(l.token()));
                }
                Deadline hold = Deadline.inMs(Long.parseLong(o.getOrDefault("for", "0")));
                while (!hold.passed()) {
                    if (!l.isHeld()) {
                        throw new Failure(key + " was reported lost");
                    }
                    sleep(20);
                }
                return;
            }
            case "watch": {
                KeyWatch wt = c.watches.get(key);
                if (wt == null) {
                    throw new Failure("no watch of " + key);
                }
                awaitState(() -> wt.state(), pos.subList(1, pos.size()), d, within);
                return;
            }
            case "leader": {
                KeyWatch wt = c.leaders.computeIfAbsent(key, k -> c.lib.watch(k, null));
                String want = pos.get(1);
                while (true) {
                    KeyState s = wt.state();
                    Optional<Leader> l = s == null ? null : Leader.of(s);
                    if (l != null && (want.equals("-") ? l.isEmpty()
                            : l.isPresent() && want.equals(l.get().value().orElse("-")))) {
                        return;
                    }
                    if (d.passed()) {
                        throw new Failure("the leader of " + key + " is " + (s == null ? "unknown" : s) + ", not "
                                + want + " after " + within + " ms");
                    }
                    sleep(20);
                }
            }
            case "event": {
                List<String> events = c.events;
                synchronized (events) {
                    while (!events.remove(key)) {
                        if (d.passed()) {
                            throw new Failure("no event " + key + " within " + within + " ms (saw " + events + ")");
                        }
                        try {
                            events.wait(Math.max(1, d.msLeft()));
                        } catch (InterruptedException e) {
                            throw new Failure("interrupted");
                        }
                    }
                }
                return;
            }
            default:
                throw new Failure("unknown expectation " + what);
        }
    }

    interface StateSource {
        KeyState get();
    }

    private void awaitState(StateSource src, List<String> want, Deadline d, long within) throws Failure {
        Failure last = null;
        while (true) {
            KeyState s = src.get();
            if (s != null) {
                try {
                    matchState(want, state(s));
                    return;
                } catch (Failure f) {
                    last = f;
                }
            }
            if (d.passed()) {
                throw new Failure("the watch shows " + s + " after " + within + " ms"
                        + (last == null ? "" : ": " + last.getMessage()));
            }
            sleep(20);
        }
    }

    private static void sleep(long ms) throws Failure {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            throw new Failure("interrupted");
        }
    }

    // ------------------------------------------------------------------ outcomes

    private void check(Result r, List<String> expect) throws Failure {
        if (expect == null) {
            return;
        }
        List<String> want = new ArrayList<>(expect);
        String after = null;
        if (!want.isEmpty() && want.get(want.size() - 1).startsWith("after=")) {
            after = want.remove(want.size() - 1).substring(6);
        }
        List<String> got = r.words;
        String kind = want.get(0);
        if (List.of("free", "exclusive", "shared", "semaphore").contains(kind)) {
            matchState(want, got);
        } else {
            if (!got.get(0).equals(kind) || got.size() < want.size()) {
                throw new Failure("expected " + String.join(" ", expect) + ", got " + r);
            }
            for (int i = 1; i < want.size(); i++) {
                match(want.get(i), got.get(i));
            }
        }
        if (after != null) {
            String[] b = after.split("\\.\\.");
            if (r.ms < Long.parseLong(b[0]) || r.ms > Long.parseLong(b[1])) {
                throw new Failure("the call took " + r.ms + " ms, not " + after);
            }
        }
    }

    /** A state outcome: kind, then optional token, optional value=; parts left out are not checked. */
    private void matchState(List<String> want, List<String> got) throws Failure {
        if (!got.get(0).equals(want.get(0))) {
            throw new Failure("expected " + String.join(" ", want) + ", got " + String.join(" ", got));
        }
        int g = 1;
        for (String w : want.subList(1, want.size())) {
            if (w.startsWith("value=")) {
                String v = got.stream().filter(x -> x.startsWith("value=")).findFirst().orElse("value=?");
                if (!v.equals(w)) {
                    throw new Failure("expected " + w + ", got " + v);
                }
            } else {
                if (g >= got.size()) {
                    throw new Failure("expected " + String.join(" ", want) + ", got " + String.join(" ", got));
                }
                match(w, got.get(g++));
            }
        }
    }

    /** A word of an outcome: a $variable binds or compares; anything else compares. */
    private void match(String want, String got) throws Failure {
        if (VAR.matcher(want).matches()) {
            long v;
            try {
                v = Long.parseLong(got);
            } catch (NumberFormatException e) {
                throw new Failure("expected a token for " + want + ", got " + got);
            }
            Long bound = vars.putIfAbsent(want, v);
            if (bound != null && bound != v) {
                throw new Failure(want + " is " + bound + ", got " + v);
            }
        } else if (!want.equals(got)) {
            throw new Failure("expected " + want + ", got " + got);
        }
    }

    private long value(String word) throws Failure {
        if (VAR.matcher(word).matches()) {
            Long v = vars.get(word);
            if (v == null) {
                throw new Failure(word + " is not bound");
            }
            return v;
        }
        return Long.parseLong(word);
    }

    private void assertion(List<String> w) throws Failure {
        long a = value(w.get(1));
        long b = value(w.get(3));
        boolean ok;
        switch (w.get(2)) {
            case "<":
                ok = a < b;
                break;
            case "=":
                ok = a == b;
                break;
            case "!=":
                ok = a != b;
                break;
            default:
                throw new Failure("assert op: < = !=");
        }
        if (!ok) {
            throw new Failure(a + " " + w.get(2) + " " + b + " is false");
        }
    }
}
