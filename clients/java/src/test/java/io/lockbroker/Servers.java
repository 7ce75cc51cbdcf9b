package io.lockbroker;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Real servers for the tests, through the shared conformance helper (tests/conformance/servers.py,
 * JSON lines on its stdin/stdout): it starts Redis and named brokers on free ports of 127.0.0.1,
 * performs fault steps, and stops everything by pid (also when this JVM dies: its input ends, and its
 * children carry PR_SET_PDEATHSIG). One helper process per Servers object.
 *
 * <p>The broker is $LOCKBROKERD, else build/lockbrokerd of the repository (../../ from clients/java).
 */
final class Servers implements AutoCloseable {
    static final Path REPO = Path.of(System.getProperty("user.dir")).resolve("../..").normalize();
    static final String BROKER = System.getenv().getOrDefault("LOCKBROKERD",
            REPO.resolve("build/lockbrokerd").toString());
    static final Path HELPER = REPO.resolve("tests/conformance/servers.py");
    private static final Pattern FIELD = Pattern.compile("\"(\\w+)\": (\"[^\"]*\"|-?\\d+|true|false)");

    /** A broker the helper started, as it describes it. */
    static final class Broker {
        final String name;
        final int port;
        final int tlsPort;
        final String ca;
        final String version;

        Broker(Map<String, String> info) {
            name = info.get("name");
            port = Integer.parseInt(info.get("port"));
            tlsPort = Integer.parseInt(info.get("tls_port"));
            ca = info.get("ca");
            version = info.get("version");
        }

        String address() {
            return "127.0.0.1:" + port;
        }

        String tlsAddress() {
            return "127.0.0.1:" + tlsPort;
        }
    }

    private final Process proc;
    private final OutputStream to;
    private final BufferedReader from;
    private String prefix;
    private int redisPort;

    Servers() throws IOException {
        proc = new ProcessBuilder("python3", HELPER.toString(), "--broker", BROKER)
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        to = proc.getOutputStream();
        from = new BufferedReader(new InputStreamReader(proc.getInputStream(), StandardCharsets.UTF_8));
        Map<String, String> ready = read();
        if (!"true".equals(ready.get("ready"))) {
            throw new IOException("the helper did not start: " + ready);
        }
    }

    // ------------------------------------------------------------------ the helper's requests

    /** One request; its reply's fields (strings unquoted). Throws if the helper says ok false. */
    synchronized Map<String, String> request(String json) throws IOException {
        to.write((json + "\n").getBytes(StandardCharsets.UTF_8));
        to.flush();
        Map<String, String> r = read();
        if (!"true".equals(r.get("ok"))) {
            throw new IOException("helper: " + json + " -> " + r.getOrDefault("error", r.toString()));
        }
        return r;
    }

    private Map<String, String> read() throws IOException {
        String line = from.readLine();
        if (line == null) {
            throw new IOException("the helper exited");
        }
        Map<String, String> m = new HashMap<>();
        Matcher x = FIELD.matcher(line);
        while (x.find()) {
            String v = x.group(2);
            m.put(x.group(1), v.startsWith("\"") ? v.substring(1, v.length() - 1) : v);
        }
        return m;
    }

    /** A server step of the transcripts' grammar ("kill b1", "redis del k", ...); throws if it failed. */
    void step(String line) throws IOException {
        request("{\"op\": \"step\", \"line\": \"" + line.replace("\\", "\\\\").replace("\"", "\\\"") + "\"}");
    }

    /** Forgets the last servers: the next broker starts a fresh Redis and prefix. */
    void reset() throws IOException {
        request("{\"op\": \"reset\"}");
        prefix = null;
    }

    Broker info(String name) throws IOException {
        return new Broker(request("{\"op\": \"broker\", \"name\": \"" + name + "\"}"));
    }

    // ------------------------------------------------------------------ brokers and faults

    /** Starts broker name (and Redis with the first one); opts as in the transcripts' broker step. */
    Broker broker(String name, String... opts) throws IOException {
        step("broker " + name + (opts.length == 0 ? "" : " " + String.join(" ", opts)));
        return info(name);
    }

    void kill(String name) throws IOException {
        step("kill " + name);
    }

    void stop(String name) throws IOException {
        step("stop " + name);
    }

    void pause(String name) throws IOException {
        step("pause " + name);
    }

    void resume(String name) throws IOException {
        step("resume " + name);
    }

    void redisDel(String key) throws IOException {
        step("redis del " + key);
    }

    // ------------------------------------------------------------------ Redis, read directly

    private void redisInfo() throws IOException {
        if (prefix == null) {
            Map<String, String> r = request("{\"op\": \"redis\"}");
            prefix = r.get("prefix");
            redisPort = Integer.parseInt(r.get("port"));
        }
    }

    String prefix() throws IOException {
        redisInfo();
        return prefix;
    }

    /** One Redis command; its reply's first line (RESP). */
    String redis(String... args) throws IOException {
        redisInfo();
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress("127.0.0.1", redisPort), 1000);
            s.setSoTimeout(5000);
            StringBuilder b = new StringBuilder("*").append(args.length).append("\r\n");
            for (String a : args) {
                b.append('$').append(a.getBytes(StandardCharsets.UTF_8).length).append("\r\n").append(a).append("\r\n");
            }
            s.getOutputStream().write(b.toString().getBytes(StandardCharsets.UTF_8));
            return firstLine(s.getInputStream());
        }
    }

    private static String firstLine(InputStream in) throws IOException {
        StringBuilder b = new StringBuilder();
        for (int c = in.read(); c >= 0 && c != '\n'; c = in.read()) {
            if (c != '\r') {
                b.append((char) c);
            }
        }
        return b.toString();
    }

    // ------------------------------------------------------------------ certificates

    /**
     * A client certificate with CN cn, signed by the helper's test CA (its key sits beside ca.crt),
     * in the CA's folder: {cert, key} paths.
     */
    Path[] clientCertificate(Broker b, String cn) throws IOException, InterruptedException {
        Path dir = Path.of(b.ca).getParent();
        String n = "client-" + cn;
        openssl(dir, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", n + ".key");
        openssl(dir, "req", "-new", "-key", n + ".key", "-subj", "/CN=" + cn, "-out", n + ".csr");
        java.nio.file.Files.writeString(dir.resolve(n + ".ext"), "extendedKeyUsage=clientAuth\n");
        openssl(dir, "x509", "-req", "-in", n + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-set_serial", "77",
                "-days", "2", "-extfile", n + ".ext", "-out", n + ".crt");
        return new Path[] {dir.resolve(n + ".crt"), dir.resolve(n + ".key")};
    }

    private static void openssl(Path dir, String... args) throws IOException, InterruptedException {
        String[] cmd = new String[args.length + 1];
        cmd[0] = "openssl";
        System.arraycopy(args, 0, cmd, 1, args.length);
        Process p = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (p.waitFor() != 0) {
            throw new IOException("openssl " + String.join(" ", args) + ": " + out);
        }
    }

    /** Stops everything (the helper's quit), then the helper. */
    @Override
    public void close() throws IOException {
        try {
            request("{\"op\": \"quit\"}");
        } catch (IOException e) {
            // it is going anyway
        }
        to.close();
        try {
            if (!proc.waitFor(20, TimeUnit.SECONDS)) {
                proc.destroy();
                proc.waitFor(5, TimeUnit.SECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
