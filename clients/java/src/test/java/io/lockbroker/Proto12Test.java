package io.lockbroker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The library's protocol 1.2 behaviours against real brokers (through the shared helper): many waits
 * over one session with a cancel, VALUE, OWNER ... VALUE, CHECK, WATCH, leader election, a wait that
 * carries on across a resume. They need a broker that speaks 1.2 and fail on an older one (each
 * says so first).
 */
@Tag("proto12")
@Timeout(value = 60, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class Proto12Test extends BrokerTests {
    /** A client that refuses a broker older than 1.2, whatever LOCKBROKER_ALLOW_OLD says. */
    @Override
    LockClient client(String... addresses) {
        return track(LockClient.builder().addresses(addresses).allowOldBroker(false).connect());
    }

    @Test
    void hundredWaitsOverOneClientOneCancelledMidway() throws Exception {
        LockClient holder = client(b1.address());
        LockClient waiter = client(b1.address());
        String base = key("q");
        List<BrokerLock> held = new ArrayList<>();
        for (int i = 0; i < 100; i++) {
            BrokerLock l = holder.lock(base + i);
            assertTrue(l.tryLock());
            held.add(l);
        }
        CountDownLatch started = new CountDownLatch(100);
        List<Thread> threads = new ArrayList<>();
        List<AtomicReference<Object>> got = new ArrayList<>();
        for (int i = 0; i < 100; i++) {
            AtomicReference<Object> r = new AtomicReference<>();
            got.add(r);
            BrokerLock l = waiter.lock(base + i);
            Thread t = new Thread(() -> {
                started.countDown();
                try {
                    r.set(l.tryLock(30, TimeUnit.SECONDS) ? (Object) l.token() : "timeout");
                    if (l.isHeldByCurrentThread()) {
                        l.unlock();
                    }
                } catch (Throwable e) {
                    r.set(e);
                }
            });
            t.start();
            threads.add(t);
        }
        started.await();
        Thread.sleep(500);
        long t0 = System.nanoTime();
        assertEquals(List.of(), waiter.held(), "the session answers while 100 waits are queued");
        assertTrue((System.nanoTime() - t0) / 1_000_000 < 2000);
        threads.get(50).interrupt();
        threads.get(50).join(5000);
        assertInstanceOf(InterruptedException.class, got.get(50).get());
        for (BrokerLock l : held) {
            l.unlock();
        }
        for (Thread t : threads) {
            t.join(20_000);
        }
        for (int i = 0; i < 100; i++) {
            if (i != 50) {
                assertInstanceOf(Long.class, got.get(i).get(), "wait " + i);
            }
        }
        LockClient third = client(b2.address());
        assertTrue(third.lock(base + 50).tryLock(), "the cancelled wait was withdrawn, not granted");
    }

    // ------------------------------------------------------------------ lockAsync and Hold (issue 34)

    @Test
    void lockAsyncCompletesWithAHoldThatCloseReleases() throws Exception {
        LockClient a = client(b1.address());
        LockClient b = client(b2.address());
        String k = key("async");
        try (Hold h = a.lockAsync(k, Duration.ofSeconds(5)).get(5, TimeUnit.SECONDS)) {
            assertTrue(h.isHeld());
            assertEquals(h.token(), ((KeyState.Exclusive) b.owner(k)).token());
        }
        assertInstanceOf(KeyState.Free.class, b.owner(k), "closed: released");
        BrokerLock lb = b.lock(k);
        lb.lock();
        CompletableFuture<Hold> f = a.lockAsync(k, Duration.ofSeconds(10));
        Thread.sleep(300);
        assertFalse(f.isDone(), "it waits while b holds the key");
        long tb = lb.token();
        lb.unlock();
        Hold h = f.get(5, TimeUnit.SECONDS);
        assertTrue(h.token() > tb, "granted after b's hold");
        assertEquals(List.of(k), a.held());
        h.close();
        h.close();                                   // a second close does nothing
        assertFalse(h.isHeld());
        assertEquals(List.of(), a.held());
    }

    /** k held by a client of b2, through the lock returned. */
    BrokerLock heldOnB2(String k) {
        BrokerLock l = client(b2.address()).lock(k);
        l.lock();
        return l;
    }

    @Test
    void lockAsyncCompletesWithLockTimeoutWhenTheWaitRunsOut() throws Exception {
        LockClient a = client(b1.address());
        String k = key("async-timeout");
        BrokerLock lb = heldOnB2(k);
        long t0 = System.nanoTime();
        CompletableFuture<Hold> f = a.lockAsync(k, Duration.ofMillis(400));
        ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(5, TimeUnit.SECONDS));
        long ms = (System.nanoTime() - t0) / 1_000_000;
        LockTimeoutException t = assertInstanceOf(LockTimeoutException.class, e.getCause());
        assertEquals(k, t.key());
        assertEquals("TIMEOUT", t.code());
        assertTrue(ms >= 350 && ms < 3000, "timed out after " + ms + " ms");
        assertEquals(lb.token(), ((KeyState.Exclusive) a.owner(k)).token(), "still b's");
        assertThrows(LockTimeoutException.class, () -> a.acquire(k, Duration.ZERO), "one try: busy");
    }

    @Test
    void cancelOfLockAsyncWithdrawsTheWait() throws Exception {
        LockClient a = client(b1.address());
        String k = key("async-cancel");
        BrokerLock lb = heldOnB2(k);
        CompletableFuture<Hold> f = a.lockAsync(k, Duration.ofSeconds(30));
        Thread.sleep(300);
        assertTrue(f.cancel(true));
        assertTrue(f.isCancelled());
        Thread.sleep(300);                           // the CANCEL's way to the broker
        lb.unlock();
        LockClient c = client(b2.address());
        assertTrue(c.lock(k).tryLock(3, TimeUnit.SECONDS), "withdrawn: the key went to the next one, not to a");
        assertEquals(List.of(), a.held());
    }

    @Test
    void valueOwnerAndCheck() throws Exception {
        needs("VALUE", "CHECK");
        LockClient a = client(b1.address());
        LockClient b = client(b2.address());
        String k = key("svc");
        BrokerLock l = a.lock(k, LockSpec.exclusive().value("10.0.0.7:8080"));
        assertTrue(l.tryLock());
        long t = l.token();
        assertEquals(new KeyState.Exclusive(a.clientId(), t, Optional.of("10.0.0.7:8080"), -1),
                withoutTtl(b.owner(k)));
        assertEquals(new TokenCheck(true, OptionalLong.empty()), b.check(k, t));
        l.proclaim("10.0.0.7:9090");
        assertEquals(Optional.of("10.0.0.7:9090"), ((KeyState.Exclusive) b.owner(k)).value());
        l.unlock();
        assertEquals(new TokenCheck(false, OptionalLong.empty()), b.check(k, t));
        BrokerLock l2 = b.lock(k);
        assertTrue(l2.tryLock());
        assertEquals(new TokenCheck(false, OptionalLong.of(l2.token())), a.check(k, t));
        assertEquals(Optional.empty(), ((KeyState.Exclusive) a.owner(k)).value());
        assertThrows(NotHeldException.class, () -> l.proclaim("x"), "not held any more");
        l2.unlock();
    }

    static KeyState withoutTtl(KeyState s) {
        if (s instanceof KeyState.Exclusive) {
            KeyState.Exclusive x = (KeyState.Exclusive) s;
            return new KeyState.Exclusive(x.clientId(), x.token(), x.value(), -1);
        }
        return s;
    }

    @Test
    void watchSeesEveryChangeFromAnyBroker() throws Exception {
        needs("WATCH", "VALUE");
        LockClient a = client(b1.address());
        LockClient w = client(b2.address());
        String k = key("jobs");
        BlockingQueue<KeyState> seen = new ArrayBlockingQueue<>(20);
        KeyWatch watch = w.watch(k, seen::add);
        assertEquals(new KeyState.Free(), seen.poll(5, TimeUnit.SECONDS));
        BrokerLock l = a.lock(k, LockSpec.exclusive().value("host-a"));
        assertTrue(l.tryLock());
        KeyState s = seen.poll(5, TimeUnit.SECONDS);
        assertEquals(new KeyState.Exclusive(a.clientId(), l.token(), Optional.of("host-a"), -1), s);
        l.unlock();
        assertEquals(new KeyState.Free(), seen.poll(5, TimeUnit.SECONDS));
        BrokerLock r = a.lock(k, LockSpec.shared());
        assertTrue(r.tryLock());
        assertNotNull(watch.await(x -> x.equals(new KeyState.Shared(1)), Duration.ofSeconds(5)));
        r.unlock();
        watch.close();
        seen.clear();
        assertTrue(r.tryLock());
        assertEquals(null, seen.poll(500, TimeUnit.MILLISECONDS), "no events after close");
        r.unlock();
    }

    @Test
    void leaderElection() throws Exception {
        needs("WATCH", "VALUE");
        LockClient c1 = client(b1.address());
        LockClient c2 = client(b2.address());
        LockClient obs = client(b1.address());
        String k = key("leader");
        KeyWatch who = obs.watchLeader(k, null);
        assertNotNull(who.await(s -> Leader.of(s).isEmpty(), Duration.ofSeconds(5)));
        LeaderLatch l1 = c1.leaderLatch(k, "10.0.0.1:80").start();
        assertTrue(l1.await(5, TimeUnit.SECONDS));
        long t1 = l1.token();
        assertNotNull(who.await(s -> Leader.of(s).flatMap(Leader::value).equals(Optional.of("10.0.0.1:80")),
                Duration.ofSeconds(5)));
        BlockingQueue<Long> elected = new ArrayBlockingQueue<>(2);
        LeaderLatch l2 = c2.leaderLatch(k, "10.0.0.2:80").addListener(new LeaderListener() {
            @Override
            public void isLeader(long token) {
                elected.add(token);
            }

            @Override
            public void notLeader() {
            }
        }).start();
        assertFalse(l2.await(300, TimeUnit.MILLISECONDS));
        l1.close();
        assertFalse(l1.hasLeadership());
        Long t2 = elected.poll(5, TimeUnit.SECONDS);
        assertNotNull(t2);
        assertTrue(t2 > t1);
        assertNotNull(who.await(s -> Leader.of(s).flatMap(Leader::value).equals(Optional.of("10.0.0.2:80")),
                Duration.ofSeconds(5)));
        l2.close();
        assertNotNull(who.await(s -> Leader.of(s).isEmpty(), Duration.ofSeconds(5)));
    }

    @Test
    void aWaitCarriesOnAcrossAResumeOnAnotherBroker() throws Exception {
        try (Servers s = new Servers()) {
            Servers.Broker x1 = s.broker("x1");
            Servers.Broker x2 = s.broker("x2");
            BlockingQueue<String> events = new ArrayBlockingQueue<>(4);
            try (LockClient c = LockClient.builder().addresses(x1.address(), x2.address()).allowOldBroker(false)
                    .grace(Duration.ofSeconds(10)).sessionListener(new SessionListener() {
                        @Override
                        public void resumed(String address, String clientId, List<String> keys) {
                            events.add("resumed");
                        }
                    }).connect();
                    LockClient other = LockClient.builder().addresses(x2.address()).allowOldBroker(false).connect()) {
                BrokerLock held = other.lock("k");
                assertTrue(held.tryLock());
                AtomicReference<Object> got = new AtomicReference<>();
                BrokerLock l = c.lock("k");
                Thread t = new Thread(() -> {
                    try {
                        got.set(l.tryLock(9, TimeUnit.SECONDS) ? (Object) l.token() : "timeout");
                    } catch (Throwable e) {
                        got.set(e);
                    }
                });
                t.start();
                Thread.sleep(300);
                s.kill("x1");
                assertEquals("resumed", events.poll(8, TimeUnit.SECONDS));
                held.unlock();
                t.join(9000);
                assertInstanceOf(Long.class, got.get());
                assertTrue(l.isHeld());
            }
        }
    }
}
