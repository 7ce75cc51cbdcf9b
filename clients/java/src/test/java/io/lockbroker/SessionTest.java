package io.lockbroker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The session core against a scripted in-process server (unit tests: no broker): reply and event
 * routing, ASYNC waits and their cancel races, the version check, liveness, and the reconnect and
 * RESUME reconciliation. Each test's script plays exactly the broker lines PROTO12.md promises.
 */
@Timeout(value = 30, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class SessionTest {
    final List<AutoCloseable> closing = new ArrayList<>();

    @AfterEach
    void close() throws Exception {
        for (int i = closing.size() - 1; i >= 0; i--) {
            closing.get(i).close();
        }
    }

    FakeBroker fake(FakeBroker.Script s) throws Exception {
        FakeBroker f = new FakeBroker(s);
        closing.add(f);
        return f;
    }

    LockClient client(LockClient.Builder b) {
        LockClient c = b.connect();
        closing.add(c);
        return c;
    }

    /** A listener that tells q of each dropped connection ("down <why>"). */
    static SessionListener downs(BlockingQueue<String> q) {
        return new SessionListener() {
            @Override
            public void disconnected(String address, Throwable cause) {
                q.add("down " + cause.getMessage());
            }
        };
    }

    /** A fake broker's script sleeping (its thread holds the connection's later lines back). */
    static void sleep(long ms) throws IOException {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            throw new IOException(e);
        }
    }

    static String arg(String line, int i) {
        return line.split(" ")[i];
    }

    // ------------------------------------------------------------------ version

    @Test
    void brokerOlderThanOneTwoIsRefusedAtConnect() throws Exception {
        FakeBroker f = fake(null);
        f.version = "1.1.0";
        BrokerVersionException e = assertThrows(BrokerVersionException.class,
                () -> LockClient.builder().addresses(f.address()).allowOldBroker(false).connect());
        assertEquals("VERSION", e.code());
        assertTrue(e.getMessage().contains("1.1.0"));
        f.version = "1.3.7";
        LockClient c = client(LockClient.builder().addresses(f.address()).allowOldBroker(false));
        assertEquals("1.3.7", c.brokerVersion());
    }

    @Test
    void aBrokerWithoutGraceSessionsStillServes() throws Exception {
        FakeBroker f = fake((c, line) -> {
            if (line.contains(" GRACE ")) {
                c.send("ERR BADARG max_grace_ms is 0: no grace sessions here");
                return true;
            }
            return false;
        });
        LockClient c = client(LockClient.builder().addresses(f.address()));
        assertEquals(f.clientId, c.clientId());
        assertEquals("HELLO GRACE 5000", f.awaitLine("HELLO"), "the default grace");
        assertEquals("HELLO", f.awaitLine("HELLO"));
    }

    @Test
    void noBrokerReachable() throws Exception {
        int port;
        try (java.net.ServerSocket s = new java.net.ServerSocket(0)) {
            port = s.getLocalPort();
        }
        BrokerUnreachableException e = assertThrows(BrokerUnreachableException.class,
                () -> LockClient.connect("127.0.0.1:" + port));
        assertEquals("CONNECT", e.code());
    }

    // ------------------------------------------------------------------ routing

    @Test
    void pipelinedRepliesGoToTheirCallersAndEventsToTheirHolds() throws Exception {
        AtomicInteger n = new AtomicInteger();
        FakeBroker f = fake((c, line) -> {
            if (line.startsWith("OWNER ")) {
                String key = arg(line, 1);
                if (n.incrementAndGet() % 7 == 0) {
                    c.send("EVENT LOST x 1");          // an event between two replies, for a key nobody holds
                }
                c.send("OK cid 100 " + key.substring(1));
                return true;
            }
            if (line.startsWith("ACQUIRE ")) {
                c.send("OK " + (arg(line, 1).equals("k1") ? "11" : "22"));
                return true;
            }
            return false;
        });
        LockClient c = client(LockClient.builder().addresses(f.address()));
        AtomicReference<Throwable> err = new AtomicReference<>();
        List<Thread> ts = new ArrayList<>();
        for (int t = 0; t < 16; t++) {
            Thread th = new Thread(() -> {
                try {
                    for (int i = 1; i <= 40; i++) {
                        long want = (long) (Math.random() * 1000) + 1;
                        KeyState s = c.owner("k" + want);
                        assertEquals(want, ((KeyState.Exclusive) s).token());
                    }
                } catch (Throwable e) {
                    err.set(e);
                }
            });
            th.start();
            ts.add(th);
        }
        for (Thread t : ts) {
            t.join();
        }
        if (err.get() != null) {
            throw new AssertionError(err.get());
        }
        BlockingQueue<String> lost = new ArrayBlockingQueue<>(4);
        BrokerLock k1 = c.lock("k1").onLost((k, t, e) -> lost.add(k + " " + t));
        BrokerLock k2 = c.lock("k2").onLost((k, t, e) -> lost.add(k + " " + t));
        assertTrue(k1.tryLock());
        assertTrue(k2.tryLock());
        FakeBroker.Conn conn = f.conns.get(0);
        conn.send("EVENT LOST k2 99");                 // an older token: not this hold
        conn.send("EVENT LOST k2 22");
        assertEquals("k2 22", lost.poll(5, TimeUnit.SECONDS));
        assertFalse(k2.isHeld());
        assertTrue(k1.isHeld());
        assertThrows(LockLostException.class, k2::unlock);
        assertTrue(f.received.stream().noneMatch(l -> l.endsWith("RELEASE k2")), "a lost hold's unlock sends nothing");
        k1.unlock();
        assertEquals("RELEASE k1", f.awaitLine("RELEASE"));
        assertTrue(lost.isEmpty());
    }

    // ------------------------------------------------------------------ ASYNC waits

    /** A script whose ACQUIREs queue; CANCEL answers as cancelAnswer says. */
    static FakeBroker.Script queueing(Map<String, String> cancelAnswer) {
        return (c, line) -> {
            if (line.startsWith("ACQUIRE ")) {
                c.send("OK QUEUED");
                return true;
            }
            if (line.startsWith("CANCEL ")) {
                String a = cancelAnswer.getOrDefault(arg(line, 1), "OK 1");
                c.send(a.split("\\|"));
                return true;
            }
            return false;
        };
    }

    @Test
    void waitIsCancelledAtTheCallersDeadline() throws Exception {
        FakeBroker f = fake(queueing(Map.of()));
        LockClient c = client(LockClient.builder().addresses(f.address()));
        long t0 = System.nanoTime();
        assertFalse(c.lock("k").tryLock(300, TimeUnit.MILLISECONDS));
        long ms = (System.nanoTime() - t0) / 1_000_000;
        assertTrue(ms >= 290 && ms < 2000, "returned after " + ms + " ms");
        String acq = f.awaitLine("ACQUIRE");
        assertTrue(acq.matches("ACQUIRE k WAIT (\\d+) ASYNC") && Integer.parseInt(arg(acq, 3)) <= 300, acq);
        assertEquals("CANCEL k", f.awaitLine("CANCEL"));
    }

    @Test
    void aGrantRacingTheDeadlineCancelIsKept() throws Exception {
        FakeBroker f = fake(queueing(Map.of("k", "EVENT GRANTED k 77|OK 0")));
        LockClient c = client(LockClient.builder().addresses(f.address()));
        BrokerLock l = c.lock("k");
        assertTrue(l.tryLock(200, TimeUnit.MILLISECONDS), "granted before the cancel: it is ours");
        assertEquals(77, l.token());
        l.unlock();
        assertEquals("RELEASE k", f.awaitLine("RELEASE"));
    }

    @Test
    void anInterruptCancelsTheWaitAndGivesBackARacingGrant() throws Exception {
        FakeBroker f = fake(queueing(Map.of("a", "OK 1", "b", "EVENT GRANTED b 5|OK 0")));
        LockClient c = client(LockClient.builder().addresses(f.address()));
        for (String key : new String[] {"a", "b"}) {
            AtomicReference<Throwable> got = new AtomicReference<>();
            Thread t = new Thread(() -> {
                try {
                    c.lock(key).lockInterruptibly();
                } catch (Throwable e) {
                    got.set(e);
                }
            });
            t.start();
            f.awaitLine("ACQUIRE " + key);
            t.interrupt();
            t.join(5000);
            assertInstanceOf(InterruptedException.class, got.get(), key);
            assertEquals("CANCEL " + key, f.awaitLine("CANCEL"));
            assertFalse(c.lock(key).isHeld());
        }
        assertEquals("RELEASE b", f.awaitLine("RELEASE"), "the grant that raced the interrupt is given back");
    }

    @Test
    void cancelOfLockAsyncGivesBackAGrantThatRacedIt() throws Exception {
        FakeBroker f = fake(queueing(Map.of("r", "EVENT GRANTED r 5|OK 0")));
        LockClient c = client(LockClient.builder().addresses(f.address()));
        java.util.concurrent.CompletableFuture<Hold> h = c.lockAsync("r", Duration.ofSeconds(30));
        assertTrue(f.awaitLine("ACQUIRE r").matches("ACQUIRE r WAIT \\d+ ASYNC"));
        assertTrue(h.cancel(true));
        assertEquals("CANCEL r", f.awaitLine("CANCEL"));
        assertEquals("RELEASE r", f.awaitLine("RELEASE"), "the grant that raced the cancel is given back");
        assertFalse(c.lock("r").isHeld());
    }

    @Test
    void aWaitWithoutDeadlineAsksAgainOnTimeout() throws Exception {
        AtomicInteger asks = new AtomicInteger();
        FakeBroker f = fake((c, line) -> {
            if (line.startsWith("ACQUIRE ")) {
                c.send("OK QUEUED");
                c.send(asks.incrementAndGet() < 3 ? "EVENT TIMEOUT k" : "EVENT GRANTED k 9");
                return true;
            }
            return false;
        });
        LockClient c = client(LockClient.builder().addresses(f.address()));
        BrokerLock l = c.lock("k");
        l.lock();
        assertEquals(9, l.token());
        assertEquals(3, asks.get());
        assertEquals("ACQUIRE k WAIT 60000 ASYNC", f.awaitLine("ACQUIRE"));
    }

    @Test
    void aFailedWaitThrowsItsCodesException() throws Exception {
        FakeBroker f = fake((c, line) -> {
            if (line.startsWith("ACQUIRE ")) {
                c.send("OK QUEUED", "EVENT FAILED " + arg(line, 1) + (arg(line, 1).equals("u") ? " UNAVAILABLE"
                        : " LIMIT"));
                return true;
            }
            return false;
        });
        LockClient c = client(LockClient.builder().addresses(f.address()));
        assertThrows(UnavailableException.class, () -> c.lock("u").tryLock(5, TimeUnit.SECONDS));
        assertThrows(LimitExceededException.class, () -> c.lock("l").lock());
        assertFalse(c.lock("u").isHeld());
    }

    @Test
    void threadsOfOneClientTakeTurnsBeforeTheBroker() throws Exception {
        AtomicInteger held = new AtomicInteger();
        AtomicInteger worst = new AtomicInteger();
        AtomicInteger token = new AtomicInteger(100);
        FakeBroker f = fake((c, line) -> {
            if (line.startsWith("ACQUIRE ")) {
                worst.accumulateAndGet(held.incrementAndGet(), Math::max);
                c.send("OK " + token.incrementAndGet());
                return true;
            }
            if (line.startsWith("RELEASE ")) {
                held.decrementAndGet();
                c.send("OK 0");
                return true;
            }
            return false;
        });
        LockClient c = client(LockClient.builder().addresses(f.address()));
        List<Thread> ts = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            Thread t = new Thread(() -> {
                BrokerLock l = c.lock("k");
                for (int j = 0; j < 25; j++) {
                    l.lock();
                    l.lock();
                    l.unlock();
                    l.unlock();
                }
            });
            t.start();
            ts.add(t);
        }
        for (Thread t : ts) {
            t.join();
        }
        assertEquals(1, worst.get(), "the broker never saw two holds of the key from one client");
        assertEquals(200, token.get() - 100, "one ACQUIRE per outer lock: reentrancy stays local");
    }

    // ------------------------------------------------------------------ a broker that refuses a word

    @Test
    void aLeaderLatchStopsAtARefusedValueAndSaysSo() throws Exception {
        FakeBroker f = fake((c, line) -> {
            if (line.startsWith("ACQUIRE ")) {
                c.send("ERR BADARG VALUE is not supported by this broker yet");
                return true;
            }
            return false;
        });
        LockClient c = client(LockClient.builder().addresses(f.address()));
        BlockingQueue<LockBrokerException> failed = new ArrayBlockingQueue<>(2);
        LeaderLatch latch = c.leaderLatch("lead", "10.0.0.1:80").addListener(new LeaderListener() {
            @Override
            public void isLeader(long token) {
            }

            @Override
            public void notLeader() {
            }

            @Override
            public void failed(LockBrokerException cause) {
                failed.add(cause);
            }
        }).start();
        BadArgumentException e = assertThrows(BadArgumentException.class, () -> latch.await(5, TimeUnit.SECONDS));
        assertEquals("lead: VALUE is not supported by this broker yet", e.getMessage());
        assertEquals(e, failed.poll(5, TimeUnit.SECONDS), "its listeners hear it too");
        assertEquals(e, latch.failure());
        assertFalse(latch.hasLeadership());
        Thread.sleep(500);
        assertEquals(1, f.received.stream().filter(l -> l.contains("ACQUIRE lead")).count(), "never asked again");
        assertTrue(failed.isEmpty());
    }

    @Test
    void aLeaderLatchRunsAgainAfterAnErrorThatMayPass() throws Exception {
        AtomicInteger asks = new AtomicInteger();
        FakeBroker f = fake((c, line) -> {
            if (line.startsWith("ACQUIRE ")) {
                c.send(asks.incrementAndGet() == 1 ? "ERR UNAVAILABLE Redis is unreachable" : "OK 7");
                return true;
            }
            return false;
        });
        LockClient c = client(LockClient.builder().addresses(f.address()));
        LeaderLatch latch = c.leaderLatch("lead", "10.0.0.1:80").start();
        assertTrue(latch.await(5, TimeUnit.SECONDS));
        assertEquals(7, latch.token());
        assertInstanceOf(UnavailableException.class, latch.lastError());
        assertEquals(null, latch.failure());
        latch.close();
    }

    @Test
    void aWatchTheBrokerRefusesFailsAndSoDoesOneRefusedOnANewSession() throws Exception {
        FakeBroker f = fake((c, line) -> {
            if (line.equals("WATCH w") && c.index == 0) {
                c.send("OK", "EVENT FREE w");
                return true;
            }
            if (line.startsWith("RESUME ")) {
                c.send("ERR NOSESSION the session expired");
                return true;
            }
            return false;                    // WATCH elsewhere: ERR BADCMD unknown command
        });
        LockClient c = client(LockClient.builder().addresses(f.address()));
        BlockingQueue<LockBrokerException> failed = new ArrayBlockingQueue<>(2);
        KeyWatch w = c.watch("w", null, failed::add);
        assertNotNull(w.await(s -> s instanceof KeyState.Free, Duration.ofSeconds(5)));
        BadCommandException now = assertThrows(BadCommandException.class, () -> c.watch("x", null));
        assertTrue(now.getMessage().startsWith("the broker does not know WATCH"), now.getMessage());
        f.conns.get(0).drop();               // the session cannot be resumed: a new one watches again
        LockBrokerException later = failed.poll(5, TimeUnit.SECONDS);
        assertInstanceOf(BadCommandException.class, later);
        assertEquals(later, w.failure());
        assertThrows(BadCommandException.class, () -> w.await(s -> false, Duration.ofSeconds(1)));
    }

    // ------------------------------------------------------------------ liveness

    @Test
    void anUnansweredPingEndsTheConnectionAndTheSessionIsResumed() throws Exception {
        AtomicInteger pings = new AtomicInteger();
        BlockingQueue<String> hook = new ArrayBlockingQueue<>(10);
        FakeBroker f = fake((c, line) -> {
            if (line.equals("PING") && c.index == 0) {
                return pings.incrementAndGet() > 1;     // the first PING answered, then silence
            }
            if (line.startsWith("RESUME ")) {
                c.send("OK 0");
                return true;
            }
            return false;
        });
        client(LockClient.builder().addresses(f.address()).pingInterval(Duration.ofMillis(100))
                .pingTimeout(Duration.ofMillis(300)).sessionListener(new SessionListener() {
                    @Override
                    public void disconnected(String address, Throwable cause) {
                        hook.add("down");
                    }

                    @Override
                    public void resumed(String address, String clientId, List<String> keys) {
                        hook.add("resumed");
                    }
                }));
        assertEquals("down", hook.poll(5, TimeUnit.SECONDS));
        assertEquals("resumed", hook.poll(5, TimeUnit.SECONDS));
        assertTrue(pings.get() >= 2);
        assertEquals("RESUME " + f.clientId + " " + f.secret, f.awaitLine("RESUME"));
    }

    @Test
    void aBlockingWaitOfAnOldBrokerIsNoSilence() throws Exception {
        BlockingQueue<String> hook = new ArrayBlockingQueue<>(10);
        FakeBroker f = fake((c, line) -> {
            if (!line.startsWith("ACQUIRE k WAIT ")) {
                return false;
            }
            sleep(800);                                 // a 1.1 broker holds every reply back meanwhile
            c.send("OK 5");
            return true;
        });
        f.version = "1.1.0";
        LockClient c = client(LockClient.builder().addresses(f.address()).allowOldBroker(true)
                .pingInterval(Duration.ofMillis(100)).pingTimeout(Duration.ofMillis(200))
                .sessionListener(downs(hook)));
        try (Hold h = c.acquire("k", Duration.ofSeconds(3))) {
            assertEquals(5, h.token());
        }
        assertNull(hook.poll(100, TimeUnit.MILLISECONDS), "the connection was declared dead");
    }

    @Test
    void aRequestLeftUnansweredDoesNotHoldThePingBack() throws Exception {
        BlockingQueue<String> hook = new ArrayBlockingQueue<>(10);
        FakeBroker f = fake((c, line) -> c.index == 0 && (line.equals("HELD") || line.equals("PING")));
        LockClient c = client(LockClient.builder().addresses(f.address()).pingInterval(Duration.ofMillis(100))
                .pingTimeout(Duration.ofMillis(300)).sessionListener(downs(hook)));
        Thread t = new Thread(() -> {
            try {
                c.held();               // asked as the broker froze: answered by nobody
            } catch (RuntimeException e) {
                // the connection's end
            }
        });
        t.setDaemon(true);
        long t0 = System.nanoTime();
        t.start();
        String down = hook.poll(5, TimeUnit.SECONDS);
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertNotNull(down);
        assertTrue(down.contains("PING"), down);
        assertTrue(ms < 2000, "found after " + ms + " ms, not the PING's 0.4 s (the reply timeout is 10 s)");
    }

    @Test
    void aReplyStillArrivingIsNoSilence() throws Exception {
        BlockingQueue<String> hook = new ArrayBlockingQueue<>(10);
        FakeBroker f = fake((c, line) -> {
            if (!line.equals("HELD")) {
                return false;
            }
            sleep(250);                                 // the client's PING goes out meanwhile
            String reply = "OK 3 orders:1 orders:2 orders:3\r\n";
            for (int i = 0; i < reply.length(); i += 3) {         // then the answer, over 1.5 s
                c.sendRaw(reply.substring(i, Math.min(reply.length(), i + 3)));
                sleep(50);
            }
            return true;                                // the PING is answered after it, in order
        });
        LockClient c = client(LockClient.builder().addresses(f.address()).pingInterval(Duration.ofMillis(100))
                .pingTimeout(Duration.ofMillis(300)).sessionListener(downs(hook)));
        assertEquals(List.of("orders:1", "orders:2", "orders:3"), c.held());
        assertEquals("PING", f.awaitLine("PING"));        // sent while the answer was arriving
        assertNull(hook.poll(300, TimeUnit.MILLISECONDS), "the connection was declared dead");
    }

    // ------------------------------------------------------------------ resume

    @Test
    void resumeReportsMissingHoldsLostAndReleasesUnknownKeys() throws Exception {
        FakeBroker f = fake((c, line) -> {
            if (line.startsWith("ACQUIRE ")) {
                c.send("OK " + (arg(line, 1).equals("a") ? 1 : 2));
                return true;
            }
            if (line.startsWith("RESUME ")) {
                c.send("OK 2 a c");          // b is gone; c is a grant whose OK was lost
                return true;
            }
            return false;
        });
        BlockingQueue<String> lost = new ArrayBlockingQueue<>(4);
        LockClient c = client(LockClient.builder().addresses(f.address()).onLost((k, t, e) -> lost.add(k)));
        BrokerLock a = c.lock("a");
        BrokerLock b = c.lock("b");
        a.lock();
        b.lock();
        f.conns.get(0).drop();
        assertEquals("b", lost.poll(5, TimeUnit.SECONDS));
        assertEquals("RELEASE c", f.awaitLine("RELEASE"));
        assertTrue(a.isHeld());
        assertEquals(1, a.token());
        assertFalse(b.isHeld());
        assertTrue(lost.isEmpty());
        a.unlock();
    }

    @Test
    void aQueuedWaitCarriesOnAcrossAResume() throws Exception {
        FakeBroker f = fake((c, line) -> {
            if (line.startsWith("ACQUIRE ")) {
                c.send("OK QUEUED");
                return true;
            }
            if (line.startsWith("RESUME ")) {
                c.send("OK 0", "EVENT QUEUED w");
                return true;
            }
            return false;
        });
        LockClient c = client(LockClient.builder().addresses(f.address()));
        AtomicReference<Object> got = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                BrokerLock l = c.lock("w");
                got.set(l.tryLock(10, TimeUnit.SECONDS) ? l.token() : "timeout");
            } catch (Throwable e) {
                got.set(e);
            }
        });
        t.start();
        f.awaitLine("ACQUIRE w");
        f.conns.get(0).drop();
        f.awaitLine("RESUME");
        Thread.sleep(200);
        f.conns.get(1).send("EVENT GRANTED w 31");
        t.join(5000);
        assertEquals(31L, got.get());
        assertTrue(f.received.stream().noneMatch(l -> l.contains("CANCEL")), "a queued wait is not cancelled");
    }

    @Test
    void aGrantWhoseAnswerWasLostIsAdoptedAfterTheResume() throws Exception {
        FakeBroker f = fake((c, line) -> {
            if (line.startsWith("ACQUIRE x") && c.index == 0) {
                c.drop();                    // the grant happened; its answer is lost
                return true;
            }
            if (line.equals("ACQUIRE x")) {
                c.send("OK 55");              // reentrant: the same token
                return true;
            }
            if (line.startsWith("RELEASE x")) {
                c.send("OK 1");
                return true;
            }
            if (line.startsWith("RESUME ")) {
                c.send("OK 1 x");
                return true;
            }
            return false;
        });
        LockClient c = client(LockClient.builder().addresses(f.address()));
        BrokerLock l = c.lock("x");
        assertTrue(l.tryLock(5, TimeUnit.SECONDS));
        assertEquals(55, l.token());
        assertEquals("ACQUIRE x WAIT 5000 ASYNC", f.awaitLine("ACQUIRE").replaceAll("WAIT \\d+", "WAIT 5000"));
        assertEquals("ACQUIRE x", f.awaitLine("ACQUIRE"));
        assertEquals("RELEASE x", f.awaitLine("RELEASE"));
    }

    @Test
    void anUnknownWaitIsCancelledAndAskedAgainAfterTheResume() throws Exception {
        AtomicInteger acquires = new AtomicInteger();
        FakeBroker f = fake((c, line) -> {
            if (line.startsWith("ACQUIRE ")) {
                if (acquires.incrementAndGet() == 1) {
                    c.drop();                 // its answer is lost: queued or not, nobody knows
                } else {
                    c.send("OK 8");
                }
                return true;
            }
            if (line.startsWith("RESUME ")) {
                c.send("OK 0");
                return true;
            }
            if (line.startsWith("CANCEL ")) {
                c.send("OK 1");
                return true;
            }
            return false;
        });
        LockClient c = client(LockClient.builder().addresses(f.address()));
        BrokerLock l = c.lock("u");
        assertTrue(l.tryLock(5, TimeUnit.SECONDS));
        assertEquals(8, l.token());
        assertEquals("CANCEL u", f.awaitLine("CANCEL"));
        assertEquals(2, acquires.get());
    }

    @Test
    void noSessionMeansANewSessionAndEveryHoldLost() throws Exception {
        FakeBroker f = fake((c, line) -> {
            if (line.startsWith("ACQUIRE ")) {
                c.send("OK 3");
                return true;
            }
            if (line.startsWith("RESUME ")) {
                c.send("ERR NOSESSION the session expired");
                return true;
            }
            return false;
        });
        BlockingQueue<String> hook = new ArrayBlockingQueue<>(4);
        BlockingQueue<LockLostException> lost = new ArrayBlockingQueue<>(4);
        LockClient c = client(LockClient.builder().addresses(f.address()).onLost((k, t, e) -> lost.add(e))
                .sessionListener(new SessionListener() {
                    @Override
                    public void newSession(String address, String clientId, Throwable cause) {
                        hook.add(cause.getClass().getSimpleName());
                    }
                }));
        BrokerLock l = c.lock("n");
        l.lock();
        f.conns.get(0).drop();
        assertEquals("NoSessionException", hook.poll(5, TimeUnit.SECONDS));
        LockLostException e = lost.poll(5, TimeUnit.SECONDS);
        assertNotNull(e);
        assertInstanceOf(NoSessionException.class, e.getCause());
        assertThrows(LockLostException.class, l::unlock);
        assertTrue(l.tryLock(), "the new session serves");
    }

    @Test
    void theRetryBudgetEndsWithSessionLost() throws Exception {
        BlockingQueue<String> down = new ArrayBlockingQueue<>(4);
        FakeBroker f = fake((c, line) -> {
            if (line.startsWith("ACQUIRE ")) {
                c.send("OK QUEUED");
                return true;
            }
            return false;
        });
        LockClient c = client(LockClient.builder().addresses(f.address()).resumeBudget(Duration.ofMillis(300))
                .sessionListener(new SessionListener() {
                    @Override
                    public void down(Throwable cause) {
                        down.add("down");
                    }
                }));
        AtomicReference<Throwable> got = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                c.lock("w").lock();
            } catch (Throwable e) {
                got.set(e);
            }
        });
        t.start();
        f.awaitLine("ACQUIRE w");
        // the broker is gone for good; its port stays the fake's (issue 33: with f.close(), a broker
        // of another run on this machine took the free port and served the new session, so lock()
        // was granted there, or a process that accepted without answering held it up)
        f.refuse();
        t.join(10_000);
        if (t.isAlive() || got.get() == null) {
            fail("lock() " + (t.isAlive() ? "still blocked after 10 s at " + java.util.Arrays.toString(t.getStackTrace())
                    : "returned normally: isHeld=" + c.lock("w").isHeld()));
        }
        assertInstanceOf(SessionLostException.class, got.get());
        assertEquals("SESSION", ((LockBrokerException) got.get()).code());
        assertEquals("down", down.poll(5, TimeUnit.SECONDS));
        assertThrows(BrokerUnreachableException.class, () -> c.lock("z").tryLock());
    }
}
