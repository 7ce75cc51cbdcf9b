package io.lockbroker;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * An in-process line server for UNIT tests of the library's codec, routing and session state machine
 * (never a stand-in for the broker in integration tests): each received line goes to a script, which
 * answers what the test needs, events included, and may drop the connection. The common set-up lines
 * (HELLO, EVENTS, PING, QUIT) have default answers; a version other than 1.2.0 can be set.
 */
final class FakeBroker implements AutoCloseable {
    /** Answers one line; return false to fall back to the defaults. */
    interface Script {
        boolean line(Conn c, String line) throws IOException;
    }

    /** One accepted connection. */
    final class Conn {
        final int index;
        private final Socket s;
        private final OutputStream out;

        Conn(int index, Socket s) throws IOException {
            this.index = index;
            this.s = s;
            this.out = s.getOutputStream();
        }

        synchronized void send(String... lines) throws IOException {
            for (String l : lines) {
                out.write((l + "\r\n").getBytes(StandardCharsets.US_ASCII));
            }
            out.flush();
        }

        /** Bytes as they are (a piece of a line). */
        synchronized void sendRaw(String text) throws IOException {
            out.write(text.getBytes(StandardCharsets.US_ASCII));
            out.flush();
        }

        void drop() {
            try {
                s.close();
            } catch (IOException e) {
                // gone
            }
        }
    }

    final BlockingQueue<String> received = new LinkedBlockingQueue<>();
    final List<Conn> conns = new CopyOnWriteArrayList<>();
    volatile String version = "1.2.0";
    volatile String clientId = "3f2b8c1e-6d4a-4b7e-9a51-0c2d9e8f7a10";
    volatile String secret = "9f0c3e1a7b2d4c5e8f6a1b3c5d7e9f01";
    private final ServerSocket ss;
    private final Script script;
    private volatile boolean refusing;

    FakeBroker(Script script) throws IOException {
        this.script = script;
        this.ss = new ServerSocket(0, 50, InetAddress.getByName("127.0.0.1"));
        Thread t = new Thread(this::accept, "fake-broker");
        t.setDaemon(true);
        t.start();
    }

    String address() {
        return "127.0.0.1:" + ss.getLocalPort();
    }

    /** The next line the server received (as "conn-index line"), waiting up to 5 s. */
    String next() throws InterruptedException {
        String l = received.poll(5, TimeUnit.SECONDS);
        if (l == null) {
            throw new AssertionError("the fake broker received nothing more");
        }
        return l;
    }

    /** Skips received lines until one starts with prefix (within 5 s); returns it. */
    String awaitLine(String prefix) throws InterruptedException {
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (System.nanoTime() < end) {
            String l = received.poll(100, TimeUnit.MILLISECONDS);
            if (l != null && l.substring(l.indexOf(' ') + 1).startsWith(prefix)) {
                return l.substring(l.indexOf(' ') + 1);
            }
        }
        throw new AssertionError("the fake broker never received " + prefix);
    }

    private void accept() {
        try {
            while (true) {
                Socket s = ss.accept();
                if (refusing) {
                    s.close();
                    continue;
                }
                Conn c = new Conn(conns.size(), s);
                conns.add(c);
                Thread t = new Thread(() -> serve(c), "fake-broker-conn");
                t.setDaemon(true);
                t.start();
            }
        } catch (IOException e) {
            // closed
        }
    }

    private void serve(Conn c) {
        try (BufferedReader in = new BufferedReader(new InputStreamReader(c.s.getInputStream(),
                StandardCharsets.US_ASCII))) {
            String line;
            while ((line = in.readLine()) != null) {
                received.add(c.index + " " + line);
                if (script != null && script.line(c, line)) {
                    continue;
                }
                defaults(c, line);
            }
        } catch (IOException e) {
            // dropped
        }
    }

    private void defaults(Conn c, String line) throws IOException {
        String[] w = line.split(" ");
        switch (w[0]) {
            case "HELLO":
                boolean grace = line.contains(" GRACE ");
                c.send("OK " + clientId + " lockbroker/" + version + (grace ? " " + secret : ""));
                break;
            case "EVENTS":
            case "AUTH":
                c.send("OK");
                break;
            case "PING":
                c.send("OK PONG");
                break;
            case "QUIT":
                c.send("OK");
                c.drop();
                break;
            case "RELEASE":
                c.send("OK 0");
                break;
            default:
                c.send("ERR BADCMD unknown command");
        }
    }

    /**
     * A broker that is gone for good, while the port stays this fake's: every connection is dropped,
     * and a new one is closed at once (no other process can take the port and answer instead, as
     * one could after close(): a broker or a Redis of another test run on this machine).
     */
    void refuse() {
        refusing = true;
        for (Conn c : conns) {
            c.drop();
        }
    }

    @Override
    public void close() throws IOException {
        ss.close();
        for (Conn c : conns) {
            c.drop();
        }
    }
}
