package io.lockbroker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The client's counters, their hook, and its log (issue 34), after one scripted run against real
 * brokers: a hold, a wait that times out, a re-entry, a hold lost in Redis, and a resume on the second
 * broker after the first is killed.
 */
@Timeout(value = 60, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class CountersTest {
    /** What a scripted run left: the counters, the hook's events, the log's records (level message). */
    record Run(Counters counters, List<CounterEvent> events, List<String> log) {
    }

    /** The library's log, read through java.util.logging (System.Logger's default backend). */
    static final class Records extends Handler {
        final List<String> lines = Collections.synchronizedList(new ArrayList<>());

        @Override
        public void publish(LogRecord r) {
            String m = r.getMessage();
            if (r.getParameters() != null) {
                m = java.text.MessageFormat.format(m, r.getParameters());
            }
            lines.add(r.getLevel() + " " + m);
        }

        @Override
        public void flush() {
        }

        @Override
        public void close() {
        }
    }

    static Run scriptedRun() throws Exception {
        Logger jul = Logger.getLogger("io.lockbroker");
        Records records = new Records();
        Level was = jul.getLevel();
        jul.setLevel(Level.ALL);
        jul.addHandler(records);
        List<CounterEvent> events = Collections.synchronizedList(new ArrayList<>());
        try (Servers s = new Servers()) {
            Servers.Broker x1 = s.broker("x1");
            Servers.Broker x2 = s.broker("x2");
            BlockingQueue<String> told = new ArrayBlockingQueue<>(8);
            try (LockClient c = LockClient.builder().addresses(x1.address(), x2.address())
                    .grace(Duration.ofSeconds(10)).replyTimeout(Duration.ofSeconds(2)).onCounter(events::add)
                    .onLost((k, t, e) -> told.add("lost " + k))
                    .sessionListener(new SessionListener() {
                        @Override
                        public void resumed(String address, String clientId, List<String> keys) {
                            told.add("resumed");
                        }
                    }).connect();
                    LockClient other = LockClient.connect(x2.address())) {
                BrokerLock a = c.lock("a");
                a.lock();                                     // wait 1
                a.lock();                                     // a re-entry: no wait
                Thread.sleep(200);
                a.unlock();
                a.unlock();                                   // hold 1, of 200 ms or more
                other.lock("b").lock();
                assertFalse(c.lock("b").tryLock(300, TimeUnit.MILLISECONDS)); // wait 2, of 300 ms or more
                BrokerLock l = c.lock("l", LockSpec.exclusive().ttl(Duration.ofMillis(900))); // renewed every 300 ms
                l.lock();                                     // wait 3
                s.redisDel("l");
                assertEquals("lost l", told.poll(10, TimeUnit.SECONDS)); // loss 1, hold 2
                BrokerLock r = c.lock("r");
                r.lock();                                     // wait 4
                s.kill("x1");
                assertEquals("resumed", told.poll(10, TimeUnit.SECONDS)); // resume 1, reconnect 1
                r.unlock();                                   // hold 3
                Thread.sleep(200);                            // the hook's events on their thread
                return new Run(c.counters(), new ArrayList<>(events), new ArrayList<>(records.lines));
            }
        } finally {
            jul.removeHandler(records);
            jul.setLevel(was);
        }
    }

    @Test
    void countersAndTheirHookAfterAScriptedRun() throws Exception {
        Run run = scriptedRun();
        Counters n = run.counters();
        assertEquals(4, n.waits());
        assertEquals(3, n.holds());
        assertEquals(1, n.losses());
        assertEquals(1, n.resumes());
        assertEquals(1, n.reconnects());
        assertTrue(n.waitSecondsTotal() >= 0.3 && n.waitSecondsTotal() < 5, "wait s " + n.waitSecondsTotal());
        assertTrue(n.holdSecondsTotal() >= 0.2 && n.holdSecondsTotal() < 30, "hold s " + n.holdSecondsTotal());
        String seen = run.events().stream().map(e -> e.name() + (e.key() == null ? "" : " " + e.key()))
                .collect(Collectors.joining(", "));
        assertEquals("waits a, holds a, waits b, waits l, losses l, holds l, waits r, reconnects, resumes, holds r",
                seen);
        double waits = run.events().stream().filter(e -> e.name().equals("waits"))
                .mapToDouble(CounterEvent::seconds).sum();
        assertEquals(n.waitSecondsTotal(), waits, 1e-9, "the hook's seconds add up to the total");
    }

    @Test
    void theLogTellsConnectsLossesAndResumes() throws Exception {
        List<String> log = scriptedRun().log();
        String all = String.join("\n", log);
        assertTrue(log.stream().anyMatch(l -> l.startsWith("FINE connected to 127.0.0.1:")), all);
        assertTrue(log.stream().anyMatch(l -> l.matches("WARNING l: the lock was lost \\(token \\d+\\)")), all);
        assertTrue(log.stream().anyMatch(l -> l.startsWith("WARNING connection to 127.0.0.1:")
                && l.endsWith("resuming the session")), all);
        assertTrue(log.stream().anyMatch(l -> l.matches("INFO session \\S+ resumed on 127.0.0.1:\\d+, holding 1 keys")),
                all);
    }
}
