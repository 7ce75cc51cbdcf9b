package io.lockbroker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Lock;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The README's promises: its first code block runs as written (with the jar on the class path,
 * through the java launcher, as the README says) against a real broker, and the Spring bean line
 * adapts the registry to a LockRegistry-shaped functional interface.
 */
@Timeout(value = 60, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ReadmeTest {
    static final Path README = Path.of("README.md");
    static final Path JAR = Path.of("build/lockbroker-client-" + version() + ".jar");

    /** The library's version: pom.xml's (the project's first version element). */
    static String version() {
        try {
            java.util.regex.Matcher m = java.util.regex.Pattern.compile("\\n  <version>([^<]+)</version>")
                    .matcher(Files.readString(Path.of("pom.xml")));
            if (!m.find()) {
                throw new AssertionError("pom.xml has no version");
            }
            return m.group(1);
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    /** The README's first fenced code block, which must be Java. */
    static String firstJavaBlock() throws Exception {
        String text = Files.readString(README);
        int a = text.indexOf("```");
        assertEquals(a, text.indexOf("```java\n"), "the first code block is the Java example");
        int b = text.indexOf("```", a + 8);
        return text.substring(a + 8, b);
    }

    @Test
    void theParagraphBeforeTheExampleSaysWhenACrashedAppsLocksComeBack() throws Exception {
        String text = Files.readString(README);
        String before = text.substring(0, text.indexOf("```"));
        assertTrue(before.contains("**" + LockClient.DEFAULT_GRACE.toSeconds() + " seconds** by default"), before);
        assertTrue(before.contains(".grace(Duration.ofSeconds("), "how to set a larger grace");
        long found = LockClient.DEFAULT_PING_INTERVAL.plus(LockClient.DEFAULT_PING_TIMEOUT).toSeconds();
        assertTrue(before.replaceAll("\\s+", " ").contains("within " + found + " seconds when its host vanished"),
                "when a vanished broker is found: " + before);
    }

    @Test
    void theInstallSectionNamesThisVersion() throws Exception {
        String text = Files.readString(README);
        String install = text.substring(text.indexOf("## Install"), text.indexOf("## What you get"));
        assertTrue(install.contains("```xml\n<dependency>\n  <groupId>io.lockbroker</groupId>\n"
                + "  <artifactId>lockbroker-client</artifactId>\n  <version>" + version() + "</version>\n"), install);
        assertTrue(install.contains(JAR.getFileName().toString()), "the jar make builds");
        assertTrue(Files.isRegularFile(JAR) && Files.isRegularFile(Path.of("build/lockbroker-client-" + version()
                + "-sources.jar")), "make built both jars");
    }

    @Test
    void firstCodeBlockIsTenLinesOrSoAndRunsAsWritten() throws Exception {
        String code = firstJavaBlock();
        assertTrue(code.lines().count() <= 12, "a short example: " + code.lines().count() + " lines");
        assertTrue(code.contains("\"127.0.0.1:7711\""), "the default address");
        try (Servers s = new Servers()) {
            Servers.Broker b = s.broker("b1");
            Path dir = Files.createTempDirectory("lbj-readme-");
            // a relay on 127.0.0.1:7711 to the test's broker runs the example exactly as written; if
            // something else has that port, the example runs with the broker's address put in
            ServerSocket relay = relay(b.port);
            try {
                Files.writeString(dir.resolve("Example.java"),
                        relay != null ? code : code.replace("127.0.0.1:7711", b.address()));
                Process p = new ProcessBuilder("java", "-cp", JAR.toAbsolutePath().toString(), "Example.java")
                        .directory(dir.toFile()).redirectErrorStream(true).start();
                String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
                assertTrue(p.waitFor(30, TimeUnit.SECONDS));
                assertEquals(0, p.exitValue(), out);
                assertTrue(out.matches("held orders:42, token \\d+\\s*"), out);
            } finally {
                if (relay != null) {
                    relay.close();
                }
                for (Path f : List.of(dir.resolve("Example.java"), dir)) {
                    Files.deleteIfExists(f);
                }
            }
        }
    }

    /** Forwards 127.0.0.1:7711 to port, or null if 7711 is taken. */
    static ServerSocket relay(int port) {
        ServerSocket ss;
        try {
            ss = new ServerSocket(7711, 10, InetAddress.getByName("127.0.0.1"));
        } catch (IOException e) {
            return null;
        }
        Thread t = new Thread(() -> {
            try {
                while (true) {
                    Socket in = ss.accept();
                    Socket out = new Socket("127.0.0.1", port);
                    pump(in, out);
                    pump(out, in);
                }
            } catch (IOException e) {
                // closed
            }
        }, "readme-relay");
        t.setDaemon(true);
        t.start();
        return ss;
    }

    private static void pump(Socket from, Socket to) {
        Thread t = new Thread(() -> {
            try (from; to) {
                from.getInputStream().transferTo(to.getOutputStream());
            } catch (IOException e) {
                // one side ended
            }
        }, "readme-relay-pump");
        t.setDaemon(true);
        t.start();
    }

    /** Spring Integration's LockRegistry, as far as the bean needs it: a functional interface. */
    @FunctionalInterface
    interface LockRegistry {
        Lock obtain(Object lockKey);
    }

    @Test
    void theSpringBeanLineAdaptsTheRegistry() throws Exception {
        String text = Files.readString(README);
        String line = "@Bean LockRegistry lockRegistry(LockClient client) { return new BrokerLockRegistry(client)::obtain; }";
        assertTrue(text.contains(line));
        try (Servers s = new Servers()) {
            Servers.Broker b = s.broker("b1");
            try (LockClient client = LockClient.connect(b.address())) {
                LockRegistry r = lockRegistry(client);
                Lock l = r.obtain("spring:1");
                assertTrue(l.tryLock(1, TimeUnit.SECONDS));
                l.unlock();
            }
        }
    }

    /** The README's bean, without the annotation. */
    static LockRegistry lockRegistry(LockClient client) {
        return new BrokerLockRegistry(client)::obtain;
    }
}
