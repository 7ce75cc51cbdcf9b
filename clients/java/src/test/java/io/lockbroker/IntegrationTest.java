package io.lockbroker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The library against real brokers and a real Redis (the {@link Servers} fixture): the per-language
 * list of issue 27 for the protocol 1.1 behaviours. They run against a broker of any version (the
 * Makefile sets LOCKBROKER_ALLOW_OLD=1, so a 1.1 broker serves with blocking waits); the 1.2
 * behaviours are in {@link Proto12Test}.
 */
@Timeout(value = 60, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class IntegrationTest extends BrokerTests {
    // ------------------------------------------------------------------ take, renew, release

    @Test
    void takeRenewPastTheTtlRelease() throws Exception {
        LockClient c = client();
        LockClient other = client();
        String k = key("orders");
        BrokerLock lock = c.lock(k, LockSpec.exclusive().ttl(Duration.ofMillis(600)));
        assertTrue(lock.tryLock(2, TimeUnit.SECONDS));
        long token = lock.token();
        assertTrue(token > 0);
        Thread.sleep(1500);                         // 2.5 TTLs: the broker renews while the session lives
        assertTrue(lock.isHeld());
        KeyState s = other.owner(k);
        assertInstanceOf(KeyState.Exclusive.class, s);
        assertEquals(token, ((KeyState.Exclusive) s).token());
        assertEquals(c.clientId(), ((KeyState.Exclusive) s).clientId());
        assertFalse(other.lock(k).tryLock(), "another client must not get a held key");
        assertEquals(Duration.ofMillis(5000), lock.renew(Duration.ofMillis(5000)));
        long pttl = Long.parseLong(servers.redis("PTTL", servers.prefix() + ":lock:" + k).substring(1));
        assertTrue(pttl > 3000, "RENEW set the TTL in Redis: " + pttl);
        lock.unlock();
        assertFalse(lock.isHeld());
        assertInstanceOf(KeyState.Free.class, other.owner(k));
        assertThrows(IllegalMonitorStateException.class, lock::unlock);
    }

    @Test
    void reentrantPerThreadWithOneBrokerHold() throws Exception {
        LockClient c = client();
        String k = key("reent");
        BrokerLock lock = c.lock(k);
        lock.lock();
        long t = lock.token();
        lock.lock();
        assertEquals(t, lock.token());
        assertEquals(List.of(k), c.held());
        lock.unlock();
        assertTrue(lock.isHeld(), "still held once");
        assertEquals(List.of(k), c.held());
        lock.unlock();
        assertEquals(List.of(), c.held());
    }

    @Test
    void unlockFromAnotherThreadIsRefused() throws Exception {
        LockClient c = client();
        BrokerLock lock = c.lock(key("owner"));
        lock.lock();
        AtomicReference<Throwable> err = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                lock.unlock();
            } catch (Throwable e) {
                err.set(e);
            }
        });
        t.start();
        t.join();
        assertInstanceOf(IllegalMonitorStateException.class, err.get());
        assertTrue(lock.isHeld());
        lock.unlock();
        assertThrows(UnsupportedOperationException.class, lock::newCondition);
    }

    // ------------------------------------------------------------------ threads of one client

    /** Runs n threads of body at once and fails with the first error. */
    static void together(int n, Body body) throws Exception {
        CountDownLatch go = new CountDownLatch(1);
        List<Thread> ts = new ArrayList<>();
        AtomicReference<Throwable> err = new AtomicReference<>();
        for (int i = 0; i < n; i++) {
            int id = i;
            Thread t = new Thread(() -> {
                try {
                    go.await();
                    body.run(id);
                } catch (Throwable e) {
                    err.compareAndSet(null, e);
                }
            });
            t.start();
            ts.add(t);
        }
        go.countDown();
        for (Thread t : ts) {
            t.join(50_000);
            if (t.isAlive()) {
                fail("a thread did not finish");
            }
        }
        if (err.get() != null) {
            throw new AssertionError(err.get());
        }
    }

    interface Body {
        void run(int id) throws Exception;
    }

    @Test
    void twoThreadsOfOneClientNeverOverlap() throws Exception {
        LockClient c = client();
        String k = key("pair");
        AtomicInteger inside = new AtomicInteger();
        AtomicInteger rounds = new AtomicInteger();
        together(2, id -> {
            BrokerLock lock = c.lock(k);
            for (int i = 0; i < 150; i++) {
                lock.lock();
                try {
                    assertEquals(1, inside.incrementAndGet(), "two threads inside at once");
                    rounds.incrementAndGet();
                    Thread.yield();
                    inside.decrementAndGet();
                } finally {
                    lock.unlock();
                }
            }
        });
        assertEquals(300, rounds.get());
    }

    @Test
    void fiftyHoldersInOneProcessOnOneKeyNeverOverlap() throws Exception {
        LockClient c1 = client();
        LockClient c2 = client();
        String k = key("fifty");
        AtomicInteger inside = new AtomicInteger();
        List<Long> tokens = Collections.synchronizedList(new ArrayList<>());
        together(50, id -> {
            BrokerLock lock = (id % 2 == 0 ? c1 : c2).lock(k);
            for (int i = 0; i < 6; i++) {
                assertTrue(lock.tryLock(40, TimeUnit.SECONDS));
                try {
                    assertEquals(1, inside.incrementAndGet(), "two holders inside at once");
                    tokens.add(lock.token());
                    inside.decrementAndGet();
                } finally {
                    lock.unlock();
                }
            }
        });
        assertEquals(300, tokens.size());
        for (int i = 1; i < tokens.size(); i++) {
            // within one client a thread may take the same broker hold's token again only by reentrancy,
            // which these threads never do: every grant is a new one, later than the last
            assertTrue(tokens.get(i) > tokens.get(i - 1), "tokens rise grant by grant: " + tokens);
        }
    }

    // ------------------------------------------------------------------ waits and deadlines

    @Test
    void waitEndsAtTheCallersDeadlineAndGetsAFreedKey() throws Exception {
        LockClient a = client();
        LockClient b = client();
        String k = key("wait");
        BrokerLock la = a.lock(k);
        la.lock();
        BrokerLock lb = b.lock(k);
        long t0 = System.nanoTime();
        assertFalse(lb.tryLock(400, TimeUnit.MILLISECONDS));
        long ms = (System.nanoTime() - t0) / 1_000_000;
        assertTrue(ms >= 350 && ms < 3000, "the wait lasted " + ms + " ms");
        assertFalse(lb.tryLock(), "one try: busy");
        t0 = System.nanoTime();
        Thread waiter = new Thread(() -> {
            try {
                assertTrue(lb.tryLock(10, TimeUnit.SECONDS));
                lb.unlock();
            } catch (InterruptedException e) {
                throw new AssertionError(e);
            }
        });
        waiter.start();
        Thread.sleep(300);
        la.unlock();
        waiter.join(10_000);
        ms = (System.nanoTime() - t0) / 1_000_000;
        assertFalse(waiter.isAlive());
        assertTrue(ms < 5000, "granted soon after the release, not at the deadline: " + ms + " ms");
    }

    // ------------------------------------------------------------------ shared and limit

    @Test
    void sharedAndLimitWithSeveralHolders() throws Exception {
        String k = key("catalog");
        List<BrokerLock> readers = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            BrokerLock r = client().lock(k, LockSpec.shared());
            assertTrue(r.tryLock(2, TimeUnit.SECONDS), "reader " + i);
            readers.add(r);
        }
        LockClient w = client();
        assertFalse(w.lock(k).tryLock(), "a writer waits for the readers");
        assertEquals(new KeyState.Shared(3), w.owner(k));
        for (BrokerLock r : readers) {
            r.unlock();
        }
        assertTrue(w.lock(k).tryLock(2, TimeUnit.SECONDS));

        String q = key("quota");
        BrokerLock p1 = client().lock(q, LockSpec.permits(2));
        BrokerLock p2 = client().lock(q, LockSpec.permits(2));
        BrokerLock p3 = client().lock(q, LockSpec.permits(2));
        assertTrue(p1.tryLock(2, TimeUnit.SECONDS));
        assertTrue(p2.tryLock(2, TimeUnit.SECONDS));
        assertNotEquals(p1.token(), p2.token());
        assertFalse(p3.tryLock(300, TimeUnit.MILLISECONDS), "two permits only");
        assertEquals(new KeyState.Semaphore(2, 2), w.owner(q));
        assertThrows(BadArgumentException.class, () -> client().lock(q, LockSpec.permits(3)).tryLock());
        p1.unlock();
        assertTrue(p3.tryLock(2, TimeUnit.SECONDS));
    }

    @Test
    void lingerKeepsTheKeyTakenAfterUnlock() throws Exception {
        LockClient a = client();
        LockClient b = client();
        String k = key("nightly");
        BrokerLock la = a.lock(k);
        la.lock();
        la.unlock(Duration.ofMillis(800));
        assertFalse(la.isHeld());
        assertFalse(b.lock(k).tryLock(), "nobody takes it while it lingers");
        assertTrue(b.lock(k).tryLock(5, TimeUnit.SECONDS));
    }

    // ------------------------------------------------------------------ lost holds

    @Test
    void lostEventReachesTheRightHoldWhileOtherRequestsAreInFlight() throws Exception {
        BlockingQueue<String> told = new ArrayBlockingQueue<>(10);
        LockClient c = LockClient.builder().addresses(b1.address())
                .onLost((key, token, cause) -> told.add(key + " " + token)).connect();
        clients.add(c);
        String k1 = key("keep");
        String k2 = key("lose");
        BrokerLock l1 = c.lock(k1, LockSpec.exclusive().ttl(Duration.ofMillis(900)));
        BrokerLock l2 = c.lock(k2, LockSpec.exclusive().ttl(Duration.ofMillis(900)));
        BlockingQueue<String> mine = new ArrayBlockingQueue<>(10);
        l2.onLost((key, token, cause) -> mine.add(key));
        l1.lock();
        l2.lock();
        long t2 = l2.token();
        AtomicInteger busy = new AtomicInteger();
        Thread noise = new Thread(() -> {
            while (!Thread.currentThread().isInterrupted()) {
                try {
                    c.owner(k1);
                    c.held();
                    busy.incrementAndGet();
                } catch (ClosedException e) {
                    return;
                }
            }
        });
        noise.start();
        servers.redisDel(k2);
        String got = told.poll(10, TimeUnit.SECONDS);
        noise.interrupt();
        noise.join();
        assertEquals(k2 + " " + t2, got);
        assertEquals(k2, mine.poll(1, TimeUnit.SECONDS));
        assertTrue(busy.get() > 0);
        assertFalse(l2.isHeld());
        assertTrue(l1.isHeld());
        LockLostException e = assertThrows(LockLostException.class, l2::unlock);
        assertEquals(k2 + ": the lock was lost (token " + t2 + ")", e.getMessage());
        assertEquals(k2, e.key());
        assertEquals(t2, e.token());
        assertEquals("EVENT LOST " + k2 + " " + t2, e.reply());
        assertFalse(l2.isHeldByCurrentThread());
        l1.unlock();
        assertTrue(told.isEmpty(), "only the deleted key was lost: " + told);
        assertTrue(l2.tryLock(2, TimeUnit.SECONDS), "the key can be taken again");
        assertTrue(l2.token() > t2);
        l2.unlock();
    }

    // ------------------------------------------------------------------ auth and TLS

    @Test
    void authAndDenied() throws Exception {
        try (Servers s = new Servers()) {
            Servers.Broker b = s.broker("acl", "app=alpha:tok-alpha-1:alpha:*,common:*");
            assertThrows(NotAuthenticatedException.class,
                    () -> LockClient.builder().addresses(b.address()).authToken("wrong").connect());
            assertThrows(NotAuthenticatedException.class, () -> LockClient.connect(b.address()));
            try (LockClient c = LockClient.builder().addresses(b.address()).authToken("tok-alpha-1").connect()) {
                BrokerLock ok = c.lock("alpha:1");
                assertTrue(ok.tryLock(1, TimeUnit.SECONDS));
                DeniedException e = assertThrows(DeniedException.class,
                        () -> c.lock("beta:1").tryLock(1, TimeUnit.SECONDS));
                assertEquals("DENIED", e.code());
                assertThrows(DeniedException.class, () -> c.owner("beta:1"));
                assertFalse(c.lock("beta:1").isHeld());
                ok.unlock();
            }
        }
    }

    @Test
    void tlsWithATestCa() throws Exception {
        try (Servers s = new Servers()) {
            Servers.Broker b = s.broker("tls", "tls");
            try (LockClient c = LockClient.builder().addresses(b.tlsAddress()).tls(Path.of(b.ca)).connect()) {
                BrokerLock l = c.lock("tls:1");
                assertTrue(l.tryLock(1, TimeUnit.SECONDS));
                assertEquals(List.of("tls:1"), c.held());
                l.unlock();
            }
            // the same port without trusting the test CA: the handshake fails
            BrokerUnreachableException e = assertThrows(BrokerUnreachableException.class,
                    () -> LockClient.builder().addresses(b.tlsAddress()).connectTimeout(Duration.ofSeconds(2))
                            .connect());
            assertEquals("CONNECT", e.code());
        }
    }

    @Test
    void tlsWithAClientCertificateNamingAnApp() throws Exception {
        try (Servers s = new Servers()) {
            Servers.Broker t0 = s.broker("t0", "tls");           // makes the helper's test CA
            Servers.Broker b = s.broker("mtls", "tls", "tls_ca_cert_file=" + t0.ca, "tls_auth_clients=yes",
                    "app=app-one:tok-one-1:one:*");
            Path[] cert = s.clientCertificate(b, "app-one");
            try (LockClient c = LockClient.builder().addresses(b.tlsAddress())
                    .tls(Path.of(b.ca), cert[0], cert[1]).connect()) {
                assertTrue(c.lock("one:1").tryLock(1, TimeUnit.SECONDS), "the certificate's CN is the app");
                assertThrows(DeniedException.class, () -> c.lock("two:1").tryLock());
            }
        }
    }

    // ------------------------------------------------------------------ failures of the broker

    @Test
    void killedBrokerResumedOnASecondBrokerWithHoldsAndTokens() throws Exception {
        try (Servers s = new Servers()) {
            Servers.Broker x1 = s.broker("x1");
            Servers.Broker x2 = s.broker("x2");
            BlockingQueue<String> events = new ArrayBlockingQueue<>(10);
            BlockingQueue<String> lost = new ArrayBlockingQueue<>(10);
            try (LockClient c = LockClient.builder().addresses(x1.address(), x2.address())
                    .grace(Duration.ofSeconds(20)).replyTimeout(Duration.ofSeconds(2))
                    .onLost((k, t, e) -> lost.add(k))
                    .sessionListener(new SessionListener() {
                        @Override
                        public void resumed(String address, String clientId, List<String> keys) {
                            events.add("resumed " + address + " " + keys.size());
                        }
                    }).connect();
                    LockClient watcher = LockClient.connect(x2.address())) {
                String id = c.clientId();
                BrokerLock l1 = c.lock("jobs:1");
                BrokerLock l2 = c.lock("jobs:2", LockSpec.shared());
                l1.lock();
                l2.lock();
                long t1 = l1.token();
                long t2 = l2.token();
                s.kill("x1");
                assertEquals("resumed " + x2.address() + " 2", events.poll(15, TimeUnit.SECONDS));
                assertEquals(id, c.clientId());
                assertTrue(l1.isHeld());
                assertEquals(t1, l1.token());
                assertEquals(t2, l2.token());
                KeyState st = watcher.owner("jobs:1");
                assertEquals(t1, ((KeyState.Exclusive) st).token(), "the same hold, on the second broker");
                assertFalse(watcher.lock("jobs:1").tryLock());
                assertTrue(c.held().containsAll(List.of("jobs:1", "jobs:2")));
                l1.unlock();
                l2.unlock();
                assertTrue(watcher.lock("jobs:1").tryLock(2, TimeUnit.SECONDS));
                assertTrue(lost.isEmpty(), "nothing lost: " + lost);
            }
        }
    }

    @Test
    void withoutGraceADroppedConnectionLosesTheHoldsAndANewSessionServes() throws Exception {
        try (Servers s = new Servers()) {
            Servers.Broker x1 = s.broker("y1");
            Servers.Broker x2 = s.broker("y2");
            BlockingQueue<String> events = new ArrayBlockingQueue<>(10);
            try (LockClient c = LockClient.builder().addresses(x1.address(), x2.address()).grace(Duration.ZERO)
                    .sessionListener(new SessionListener() {
                        @Override
                        public void newSession(String address, String clientId, Throwable cause) {
                            events.add("new " + address);
                        }
                    }).connect()) {
                String id = c.clientId();
                BrokerLock l = c.lock("jobs:9");
                BlockingQueue<String> lost = new ArrayBlockingQueue<>(10);
                l.onLost((k, t, e) -> lost.add(k));
                l.lock();
                s.stop("y1");                       // SIGTERM frees a plain session's locks
                assertEquals("new " + x2.address(), events.poll(15, TimeUnit.SECONDS));
                assertEquals("jobs:9", lost.poll(5, TimeUnit.SECONDS));
                assertNotEquals(id, c.clientId());
                assertFalse(l.isHeld());
                LockLostException e = assertThrows(LockLostException.class, l::unlock);
                assertEquals("LOST", e.code());
                assertTrue(l.tryLock(1, TimeUnit.SECONDS), "the new session serves");
                l.unlock();
            }
        }
    }

    /**
     * Issue 34: a hold lost with its session throws LockLostException from unlock, whichever comes
     * first: the unlock (its RELEASE meets the dead connection) or the news of the loss. Without a
     * grace the loss is known the moment the connection drops; with one, when the retry budget runs
     * out. Never IllegalStateException, nor a wait for the budget when there is no grace.
     */
    private static void unlockAfterTheBrokerIsKilled(Duration grace) throws Exception {
        try (Servers s = new Servers()) {
            Servers.Broker x = s.broker("k0");
            BlockingQueue<String> lost = new ArrayBlockingQueue<>(4);
            LockClient.Builder b = LockClient.builder().addresses(x.address()).grace(grace)
                    .onLost((k, t, e) -> lost.add(k));
            if (!grace.isZero()) {
                b.resumeBudget(grace);      // without a grace the budget (10 s) must not matter
            }
            try (LockClient c = b.connect()) {
                BrokerLock racing = c.lock("jobs:racing");
                BrokerLock told = c.lock("jobs:told");
                racing.lock();
                told.lock();
                long tr = racing.token();
                s.kill("k0");
                long t0 = System.nanoTime();
                LockLostException e = assertThrows(LockLostException.class, racing::unlock);
                assertTrue(e.getMessage().startsWith("jobs:racing: the lock was lost (token " + tr + "): "),
                        e.getMessage());
                assertEquals("jobs:told", lost.poll(grace.toMillis() + 5000, TimeUnit.MILLISECONDS));
                assertThrows(LockLostException.class, told::unlock);
                long ms = (System.nanoTime() - t0) / 1_000_000;
                assertTrue(ms < grace.toMillis() + 3000, "told after " + ms + " ms");
                assertThrows(IllegalMonitorStateException.class, told::unlock, "once per lock it counted");
            }
        }
    }

    @Test
    void withoutGraceUnlockOfAHoldLostWithItsBrokerThrowsLockLost() throws Exception {
        unlockAfterTheBrokerIsKilled(Duration.ZERO);
    }

    @Test
    void withGraceUnlockOfAHoldLostWhenTheBudgetRanOutThrowsLockLost() throws Exception {
        unlockAfterTheBrokerIsKilled(Duration.ofMillis(1500));
    }

    @Test
    void deadConnectionFoundByTheIdlePing() throws Exception {
        try (Servers s = new Servers()) {
            Servers.Broker x1 = s.broker("z1");
            Servers.Broker x2 = s.broker("z2");
            BlockingQueue<String> events = new ArrayBlockingQueue<>(10);
            try (LockClient c = LockClient.builder().addresses(x1.address(), x2.address())
                    .pingInterval(Duration.ofMillis(300)).pingTimeout(Duration.ofMillis(1500))
                    .sessionListener(new SessionListener() {
                        @Override
                        public void disconnected(String address, Throwable cause) {
                            events.add("down " + address);
                        }

                        @Override
                        public void resumed(String address, String clientId, List<String> keys) {
                            events.add("resumed " + address);
                        }
                    }).connect()) {
                BrokerLock l = c.lock("ping:1", LockSpec.exclusive().ttl(Duration.ofSeconds(30)));
                l.lock();
                long t = l.token();
                s.pause("z1");                           // keeps its sockets, answers nothing
                try {
                    assertEquals("down " + x1.address(), events.poll(5, TimeUnit.SECONDS));
                    assertEquals("resumed " + x2.address(), events.poll(10, TimeUnit.SECONDS));
                    assertEquals(t, l.token());
                    assertTrue(l.isHeld());
                } finally {
                    s.resume("z1");
                }
                l.unlock();
            }
        }
    }

    @Test
    void versionBelowOneTwoIsRefusedUnlessAllowed() throws Exception {
        LockClient c = client();
        if (Wire.atLeast(c.brokerVersion(), 1, 2)) {
            return;          // a 1.2 broker: the refusal is tested against a fake one (SessionTest)
        }
        BrokerVersionException e = assertThrows(BrokerVersionException.class,
                () -> LockClient.builder().addresses(b1.address()).allowOldBroker(false).connect());
        assertEquals("VERSION", e.code());
    }

    @Test
    void registryGivesOneLockPerKey() throws Exception {
        BrokerLockRegistry r = new BrokerLockRegistry(client());
        String k = key("reg");
        assertTrue(r.obtain(k) == r.obtain(new StringBuilder(k)));
        java.util.concurrent.locks.Lock l = r.obtain(k);
        l.lock();
        r.renewLock(k, Duration.ofSeconds(40));
        r.expireUnusedOlderThan(-1);
        assertTrue(r.obtain(k) == l, "a held lock is kept");
        l.unlock();
        r.expireUnusedOlderThan(-1);
        assertFalse(r.obtain(k) == l);
    }

    @Test
    void closedClientRefusesUse() throws Exception {
        LockClient c = LockClient.connect(b1.address());
        BrokerLock l = c.lock(key("closed"));
        l.lock();
        c.close();
        assertThrows(ClosedException.class, () -> c.lock("x").tryLock());
        assertFalse(l.isHeld());
    }
}
