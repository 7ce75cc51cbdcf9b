package io.lockbroker;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * What one client object reaches against a broker set up as {@code make bench} sets up its broker
 * (one Redis, {@code --prefix bench --log_level warn}): lock+unlock pairs per second from one
 * thread on one key, then from several threads on their own keys over the same client (pipelined).
 * A measurement, not a test: {@code make -C clients/java bench [BENCH_SECONDS=5]}.
 */
public final class Bench {
    private Bench() {
    }

    public static void main(String[] args) throws Exception {
        double seconds = Double.parseDouble(System.getenv().getOrDefault("BENCH_SECONDS", "5"));
        Path dir = Files.createTempDirectory("lbj-bench-");
        List<Process> procs = new ArrayList<>();
        try {
            int redisPort = port();
            procs.add(start(dir, "redis", "redis-server", "--port", String.valueOf(redisPort), "--bind", "127.0.0.1",
                    "--save", "", "--appendonly", "no", "--dir", dir.toString()));
            waitPort(redisPort);
            int brokerPort = port();
            procs.add(start(dir, "broker", Servers.BROKER, "-b", "127.0.0.1", "-p", String.valueOf(brokerPort), "-r",
                    "127.0.0.1:" + redisPort, "--prefix", "bench", "--log_level", "warn"));
            waitPort(brokerPort);
            Thread.sleep(300);
            try (LockClient c = LockClient.connect("127.0.0.1:" + brokerPort)) {
                System.out.println("broker lockbroker/" + c.brokerVersion() + (Wire.atLeast(c.brokerVersion(), 1, 2)
                        ? " (ACQUIRE ... ASYNC)" : " (older than 1.2: blocking ACQUIRE, LOCKBROKER_ALLOW_OLD=1)"));
                run(c, 1, 0.5, "warm-up");
                for (int round = 0; round < 3; round++) {
                    run(c, 1, seconds, "1 thread, one key");
                    lbbench(brokerPort, seconds);
                }
                for (int threads : new int[] {4, 16}) {
                    run(c, threads, seconds, threads + " threads, own keys");
                }
            }
        } finally {
            for (Process p : procs) {
                p.destroy();
                p.waitFor(5, TimeUnit.SECONDS);
                p.destroyForcibly();
            }
            try (var s = Files.walk(dir)) {
                s.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            }
        }
    }

    private static void run(LockClient c, int threads, double seconds, String what) throws InterruptedException {
        AtomicLong pairs = new AtomicLong();
        long end = System.nanoTime() + (long) (seconds * 1e9);
        List<Thread> ts = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            BrokerLock l = c.lock("bench:" + i);
            Thread t = new Thread(() -> {
                long n = 0;
                while (System.nanoTime() < end) {
                    l.lock();
                    l.unlock();
                    n++;
                }
                pairs.addAndGet(n);
            });
            ts.add(t);
        }
        long t0 = System.nanoTime();
        for (Thread t : ts) {
            t.start();
        }
        for (Thread t : ts) {
            t.join();
        }
        double s = (System.nanoTime() - t0) / 1e9;
        System.out.printf("%-28s %8.0f pairs/s (%d pairs in %.1f s)%n", what, pairs.get() / s, pairs.get(), s);
    }

    /**
     * The C benchmark's one-connection pairs against the same broker, for comparison under the same
     * load (when build/lbbench exists: make -C ../.. build/lbbench).
     */
    private static void lbbench(int port, double seconds) throws IOException, InterruptedException {
        Path tool = Servers.REPO.resolve("build/lbbench");
        if (!Files.isExecutable(tool)) {
            return;
        }
        Process p = new ProcessBuilder(tool.toString(), "pairs", "--broker", "127.0.0.1:" + port, "--conns", "1",
                "--seconds", String.valueOf(seconds)).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        p.waitFor();
        java.util.regex.Matcher m = java.util.regex.Pattern.compile(" rate=(\\S+)").matcher(out);
        System.out.printf("%-28s %8s pairs/s%n", "lbbench pairs --conns 1", m.find() ? m.group(1) : out.strip());
    }

    private static Process start(Path dir, String name, String... argv) throws IOException {
        List<String> cmd = new ArrayList<>(List.of("setpriv", "--pdeathsig", "KILL", "--"));
        cmd.addAll(List.of(argv));
        return new ProcessBuilder(cmd).redirectErrorStream(true)
                .redirectOutput(dir.resolve(name + ".log").toFile()).start();
    }

    private static int port() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    private static void waitPort(int port) throws InterruptedException, IOException {
        for (int i = 0; i < 250; i++) {
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", port), 200);
                return;
            } catch (IOException e) {
                Thread.sleep(20);
            }
        }
        throw new IOException("nothing listens on " + port);
    }
}
