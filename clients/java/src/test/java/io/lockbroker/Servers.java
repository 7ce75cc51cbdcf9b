package io.lockbroker;

import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * Real servers for the integration tests: one redis-server and named lockbrokerds on free ports of
 * 127.0.0.1, in a temp dir, with the steps of the conformance helper's vocabulary (broker options
 * {@code tls}, {@code auth=}, {@code app=name:token:patterns}, {@code option=value}; kill, stop,
 * restart; redis del, overwrite, restart). Every process is started under {@code setpriv
 * --pdeathsig KILL} (it dies with the test JVM) and stopped by pid in {@link #close()}.
 *
 * <p>The broker is $LOCKBROKERD, else build/lockbrokerd of the repository (../../ from clients/java).
 */
final class Servers implements AutoCloseable {
    static final Path REPO = Path.of(System.getProperty("user.dir")).resolve("../..").normalize();
    static final String BROKER = System.getenv().getOrDefault("LOCKBROKERD",
            REPO.resolve("build/lockbrokerd").toString());
    static final String REDIS = System.getenv().getOrDefault("REDIS_SERVER", "redis-server");

    /** A broker this fixture started. */
    static final class Broker {
        final String name;
        final List<String> argv;
        final int port;
        final int tlsPort;
        final String auth;
        Process proc;

        Broker(String name, List<String> argv, int port, int tlsPort, String auth) {
            this.name = name;
            this.argv = argv;
            this.port = port;
            this.tlsPort = tlsPort;
            this.auth = auth;
        }

        String address() {
            return "127.0.0.1:" + port;
        }

        String tlsAddress() {
            return "127.0.0.1:" + tlsPort;
        }
    }

    final Path dir;
    final String prefix = "lbj" + UUID.randomUUID().toString().replace("-", "").substring(0, 12);
    private final Map<String, Broker> brokers = new LinkedHashMap<>();
    private Process redis;
    private int redisPort;
    private boolean certs;

    Servers() throws IOException {
        dir = Files.createTempDirectory("lbj-servers-");
    }

    // ------------------------------------------------------------------ brokers

    /** Starts broker name (and Redis with the first one); opts as the conformance helper's. */
    Broker broker(String name, String... opts) throws IOException, InterruptedException {
        if (redis == null) {
            startRedis();
        }
        int port = freePort();
        int tlsPort = 0;
        String auth = null;
        List<String> argv = new ArrayList<>(List.of(BROKER, "-b", "127.0.0.1", "-p", String.valueOf(port),
                "-r", "127.0.0.1:" + redisPort, "--prefix", prefix, "-v"));
        StringBuilder acl = new StringBuilder();
        for (String o : opts) {
            if (o.equals("tls")) {
                makeCerts();
                tlsPort = freePort();
                argv.addAll(List.of("--tls_port", String.valueOf(tlsPort), "--tls_cert_file",
                        dir.resolve("server.crt").toString(), "--tls_key_file", dir.resolve("server.key").toString()));
            } else if (o.equals("tls-clients")) {
                makeCerts();
                argv.addAll(List.of("--tls_ca_cert_file", dir.resolve("ca.crt").toString(), "--tls_auth_clients",
                        "yes"));
            } else if (o.startsWith("auth=")) {
                auth = o.substring(5);
                argv.addAll(List.of("--auth_token", auth));
            } else if (o.startsWith("app=")) {
                String[] p = o.substring(4).split(":", 3);
                acl.append("app ").append(p[0]).append(" token-sha256 ").append(sha256(p[1])).append(" keys ")
                        .append(p[2]).append('\n');
                if (auth == null) {
                    auth = p[1];
                }
            } else {
                int eq = o.indexOf('=');
                argv.addAll(List.of("--" + o.substring(0, eq), o.substring(eq + 1)));
            }
        }
        if (acl.length() > 0) {
            Path f = dir.resolve(name + ".acl");
            Files.writeString(f, acl);
            argv.addAll(List.of("--acl_file", f.toString()));
        }
        Broker b = new Broker(name, argv, port, tlsPort, auth);
        brokers.put(name, b);
        spawn(b);
        return b;
    }

    Broker get(String name) {
        return brokers.get(name);
    }

    private void spawn(Broker b) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>(List.of("setpriv", "--pdeathsig", "KILL", "--"));
        cmd.addAll(b.argv);
        b.proc = new ProcessBuilder(cmd).redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(dir.resolve(b.name + ".log").toFile())).start();
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (System.nanoTime() < end) {
            if (!b.proc.isAlive()) {
                throw new IOException("broker " + b.name + " exited: " + log(b.name));
            }
            if (ready(b)) {
                return;
            }
            Thread.sleep(20);
        }
        throw new IOException("broker " + b.name + " not ready: " + log(b.name));
    }

    private static boolean ready(Broker b) {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress("127.0.0.1", b.port), 500);
            s.setSoTimeout(1000);
            String req = (b.auth != null ? "AUTH " + b.auth + "\n" : "") + "STATS\n";
            s.getOutputStream().write(req.getBytes(StandardCharsets.US_ASCII));
            String out = readLines(s.getInputStream(), b.auth != null ? 2 : 1);
            return out.contains(" redis=up");
        } catch (IOException e) {
            return false;
        }
    }

    String log(String name) {
        try {
            return Files.readString(dir.resolve(name + ".log"));
        } catch (IOException e) {
            return "";
        }
    }

    /** kill -9: the broker's locks stay in Redis until their TTL. */
    void kill(String name) throws InterruptedException {
        Broker b = brokers.get(name);
        b.proc.destroyForcibly();
        b.proc.waitFor(10, TimeUnit.SECONDS);
    }

    /** SIGTERM and wait: grace sessions' locks stay for a RESUME. */
    void stop(String name) throws InterruptedException {
        Broker b = brokers.get(name);
        b.proc.destroy();
        if (!b.proc.waitFor(10, TimeUnit.SECONDS)) {
            b.proc.destroyForcibly();
        }
    }

    /** Stops it if it runs, then starts it again on the same ports. */
    void restart(String name) throws IOException, InterruptedException {
        Broker b = brokers.get(name);
        if (b.proc.isAlive()) {
            stop(name);
        }
        spawn(b);
    }

    void signal(String name, String sig) throws IOException, InterruptedException {
        new ProcessBuilder("kill", "-" + sig, String.valueOf(brokers.get(name).proc.pid())).start().waitFor();
    }

    // ------------------------------------------------------------------ Redis

    private void startRedis() throws IOException, InterruptedException {
        startRedis(freePort());
    }

    private void startRedis(int port) throws IOException, InterruptedException {
        redisPort = port;
        Path rdir = Files.createDirectories(dir.resolve("redis"));
        redis = new ProcessBuilder("setpriv", "--pdeathsig", "KILL", "--", REDIS, "--port", String.valueOf(redisPort),
                "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir",
                rdir.toString(), "--loglevel", "warning").redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(dir.resolve("redis.log").toFile())).start();
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (System.nanoTime() < end) {
            try {
                if (redis("PING").equals("+PONG")) {
                    return;
                }
            } catch (IOException e) {
                Thread.sleep(20);
            }
        }
        throw new IOException("redis-server did not start: " + Files.readString(dir.resolve("redis.log")));
    }

    /** One Redis command; its reply's first line (RESP). */
    String redis(String... args) throws IOException {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress("127.0.0.1", redisPort), 1000);
            s.setSoTimeout(5000);
            StringBuilder b = new StringBuilder("*").append(args.length).append("\r\n");
            for (String a : args) {
                b.append('$').append(a.getBytes(StandardCharsets.UTF_8).length).append("\r\n").append(a).append("\r\n");
            }
            s.getOutputStream().write(b.toString().getBytes(StandardCharsets.UTF_8));
            return readLines(s.getInputStream(), 1);
        }
    }

    /** Deletes lock key in Redis: its holder loses it. */
    void redisDel(String key) throws IOException {
        redis("DEL", prefix + ":lock:" + key);
    }

    /** Sets lock key to another owner's value: taken by someone else. */
    void redisOverwrite(String key) throws IOException {
        redis("SET", prefix + ":lock:" + key, "00000000-0000-4000-8000-000000000000:1", "PX", "30000");
    }

    /** kill -9 Redis and start it again on the same port, empty. */
    void redisRestart() throws IOException, InterruptedException {
        redis.destroyForcibly();
        redis.waitFor(10, TimeUnit.SECONDS);
        int port = redisPort;
        startRedis(port);
    }

    String redisGet(String key) throws IOException {
        return redis("GET", prefix + ":lock:" + key);
    }

    // ------------------------------------------------------------------ certificates

    Path ca() {
        return dir.resolve("ca.crt");
    }

    Path file(String name) {
        return dir.resolve(name);
    }

    /** A CA, a server certificate for localhost and 127.0.0.1, a client certificate (CN app-one). */
    private void makeCerts() throws IOException, InterruptedException {
        if (certs) {
            return;
        }
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "ca.key");
        openssl("req", "-x509", "-new", "-key", "ca.key", "-days", "2", "-subj", "/CN=lbj-test-ca", "-out", "ca.crt");
        cert("server", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n", 1001);
        cert("client", "app-one", "extendedKeyUsage=clientAuth\n", 2001);
        certs = true;
    }

    private void cert(String name, String cn, String ext, int serial) throws IOException, InterruptedException {
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", name + ".key");
        openssl("req", "-new", "-key", name + ".key", "-subj", "/CN=" + cn, "-out", name + ".csr");
        Files.writeString(dir.resolve(name + ".ext"), ext);
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-set_serial",
                String.valueOf(serial), "-days", "2", "-extfile", name + ".ext", "-out", name + ".crt");
    }

    private void openssl(String... args) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>(List.of("openssl"));
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (p.waitFor() != 0) {
            throw new IOException("openssl " + String.join(" ", args) + ": " + out);
        }
    }

    // ------------------------------------------------------------------ helpers

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getByName("127.0.0.1"))) {
            return s.getLocalPort();
        }
    }

    private static String readLines(InputStream in, int n) throws IOException {
        StringBuilder b = new StringBuilder();
        int lines = 0;
        while (lines < n) {
            int c = in.read();
            if (c < 0) {
                break;
            }
            if (c == '\n') {
                lines++;
                if (lines < n) {
                    b.append('\n');
                }
            } else if (c != '\r') {
                b.append((char) c);
            }
        }
        return b.toString();
    }

    private static String sha256(String s) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256")
                    .digest(s.getBytes(StandardCharsets.UTF_8)));
        } catch (NoSuchAlgorithmException e) {
            throw new AssertionError(e);
        }
    }

    /** Stops everything by pid, removes the temp dir; a sanitizer report in a broker log fails. */
    @Override
    public void close() throws IOException, InterruptedException {
        for (Broker b : brokers.values()) {
            if (b.proc != null && b.proc.isAlive()) {
                b.proc.destroy();
                if (!b.proc.waitFor(5, TimeUnit.SECONDS)) {
                    b.proc.destroyForcibly();
                    b.proc.waitFor(5, TimeUnit.SECONDS);
                }
            }
        }
        if (redis != null) {
            redis.destroyForcibly();
            redis.waitFor(5, TimeUnit.SECONDS);
        }
        try (Stream<Path> s = Files.walk(dir)) {
            s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
    }
}
