"""
test_notices.py - notices to a holder (protocol 1.2): EVENTS ON WANTED
and ACQUIRE ... DELAY.

  - WANTED: a holder that asked hears "EVENT WANTED <key> <waiters>
    <oldest-ms>" when a waiter queues, within one loop turn on its own
    broker and one pub/sub hop from another; the count covers waiters of
    every broker (blocking, ASYNC, ACQUIRE ALL); at most one a second per
    key; none once the queue is empty, and none for EVENTS ON alone;
  - DELAY: a holder whose session ends without QUIT (killed connection,
    reset) keeps the key taken for the delay, OWNER showing it; the next
    waiter, on either broker, is granted after the delay and within 200 ms
    of its end; RELEASE and QUIT free it at once; a DELAY above
    max_delay_ms, with SHARED or with ALL is ERR BADARG.
"""

import re
import threading
import time
import unittest

import harness
from harness import BrokerTestCase, NoReply


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


WANTED_RE = r"EVENT WANTED (\S+) ([0-9]+) ([0-9]+)"


def wanted(line):
    m = re.fullmatch(WANTED_RE, line)
    if m is None:
        raise AssertionError("expected EVENT WANTED, got %r" % line)
    return m.group(1), int(m.group(2)), int(m.group(3))


class TestWanted(BrokerTestCase):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_broker()
        self.b2 = self.start_broker()

    def holder(self, key, broker=None):
        h = self.connect(broker or self.b1)
        self.assertEqual(h.req("EVENTS ON WANTED"), "OK")
        self.assertToken(h.req("ACQUIRE " + key))
        return h

    def test_local_waiter_is_noticed_at_once(self):
        h = self.holder("w1")
        w = self.connect(self.b1)
        w.send("ACQUIRE w1 WAIT 5000")
        t0 = time.monotonic()
        key, n, age = wanted(h.readline(2))
        ms = (time.monotonic() - t0) * 1000
        print("\nfigure: local EVENT WANTED %.1f ms after the ACQUIRE" % ms)
        self.assertEqual((key, n), ("w1", 1))
        self.assertLess(age, 200)
        self.assertLess(ms, 50, "a local waiter is news within a loop turn")
        self.assertEqual(h.req("RELEASE w1"), "OK 0")
        self.assertToken(w.readline())

    def test_remote_waiter_is_noticed_within_a_hop(self):
        h = self.holder("w2")
        w = self.connect(self.b2)
        w.send("ACQUIRE w2 WAIT 5000")
        t0 = time.monotonic()
        key, n, age = wanted(h.readline(2))
        ms = (time.monotonic() - t0) * 1000
        print("\nfigure: EVENT WANTED from another broker %.1f ms after "
              "the ACQUIRE" % ms)
        self.assertEqual((key, n), ("w2", 1))
        self.assertLess(ms, 100)
        self.assertEqual(h.req("RELEASE w2"), "OK 0")
        self.assertToken(w.readline())

    def test_counts_every_broker_and_oldest_wait(self):
        h = self.holder("w3")
        first = self.connect(self.b2)
        first.send("ACQUIRE w3 WAIT 20000")
        self.assertEqual(wanted(h.readline(2))[1], 1)
        time.sleep(0.6)
        more = [self.connect(self.b1), self.connect(self.b2),
                self.connect(self.b2)]
        more[0].send("ACQUIRE w3 WAIT 20000")
        self.assertEqual(more[1].req("ACQUIRE w3 WAIT 20000 ASYNC"),
                         "OK QUEUED")
        more[2].send("ACQUIRE ALL 2 w3 w3b WAIT 20000")
        # the next notice is a second after the first, and counts all 4
        # (two brokers; blocking, ASYNC and ALL waits); the oldest has
        # waited about 1 s by then
        deadline = time.monotonic() + 4
        n = age = 0
        while time.monotonic() < deadline and n < 4:
            _, n, age = wanted(h.readline(3))
        self.assertEqual(n, 4)
        self.assertGreater(age, 800)
        self.assertLess(age, 1600)

    def test_at_most_one_a_second_and_none_after_the_queue_empties(self):
        h = self.holder("w4")
        waiters = []
        times = []

        def read():
            # the holder's lines as they come, timed on arrival
            while True:
                try:
                    line = h.readline(1.4 if times else 2)
                except NoReply:
                    return
                wanted(line)
                times.append(time.monotonic())

        reader = threading.Thread(target=read)
        reader.start()
        for i in range(6):
            c = self.connect(self.b1 if i % 2 else self.b2)
            c.send("ACQUIRE w4 WAIT 1500")
            waiters.append(c)
            time.sleep(0.1)
        reader.join(10)
        # 6 arrivals in 0.6 s: the first notice at once, one more about a
        # second later, then nothing once their waits ran out (1.5 s)
        self.assertGreaterEqual(len(times), 2)
        for a, b in zip(times, times[1:]):
            self.assertGreaterEqual(b - a, 0.95)
        for c in waiters:
            self.assertEqual(c.readline(3), "BUSY")
        self.assertTrue(h.no_reply(1.5), "no notice once nobody waits")
        self.assertEqual(h.req("PING"), "OK PONG")

    def test_queue_emptied_before_the_next_turn_gets_no_notice(self):
        h = self.holder("w5")
        w = self.connect(self.b2)
        w.send("ACQUIRE w5 WAIT 300")
        wanted(h.readline(2))
        self.assertEqual(w.readline(2), "BUSY")
        # a second waiter inside the same second would be owed a notice
        # at its end; gone before then, it is not told
        w2 = self.connect(self.b1)
        w2.send("ACQUIRE w5 WAIT 200")
        self.assertEqual(w2.readline(2), "BUSY")
        self.assertTrue(h.no_reply(1.2))

    def test_plain_events_on_gets_no_notice(self):
        h = self.connect(self.b1)
        self.assertEqual(h.req("EVENTS ON"), "OK")
        self.assertToken(h.req("ACQUIRE w6"))
        w = self.connect(self.b1)
        w.send("ACQUIRE w6 WAIT 3000")
        self.assertTrue(h.no_reply(0.5))
        # turned on while holding: the waiter already queued is told
        self.assertEqual(h.req("EVENTS ON WANTED"), "OK")
        self.assertEqual(wanted(h.readline(2))[:2], ("w6", 1))
        self.assertEqual(h.req("EVENTS OFF"), "OK")
        w2 = self.connect(self.b2)
        w2.send("ACQUIRE w6 WAIT 3000")
        self.assertTrue(h.no_reply(1.5))

    def test_holder_granted_with_waiters_is_told(self):
        first = self.connect(self.b1)
        self.assertToken(first.req("ACQUIRE w7"))
        h = self.connect(self.b2)
        self.assertEqual(h.req("EVENTS ON WANTED"), "OK")
        h.send("ACQUIRE w7 WAIT 5000")
        time.sleep(0.1)
        w = self.connect(self.b2)      # behind h in b2's FIFO
        w.send("ACQUIRE w7 WAIT 5000")
        time.sleep(0.3)
        self.assertEqual(first.req("RELEASE w7"), "OK 0")
        self.assertToken(h.readline(2))
        key, n, _ = wanted(h.readline(2))
        self.assertEqual((key, n), ("w7", 1))


class TestDelay(BrokerTestCase):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_broker("--max_delay_ms", "5000")
        self.b2 = self.start_broker()

    def test_killed_holder_keeps_the_key_for_the_delay(self):
        for how, broker in (("close", "b1"), ("reset", "b2")):
            with self.subTest(how=how, waiter_on=broker):
                key = "d-" + how
                h = self.connect(self.b1)
                cid = h.hello()
                t1 = self.assertToken(h.req("ACQUIRE %s DELAY 800" % key))
                w = self.connect(getattr(self, broker))
                w.send("ACQUIRE %s WAIT 5000" % key)
                time.sleep(0.1)
                t0 = time.monotonic()
                if how == "reset":
                    h.reset()
                else:
                    h.close()
                time.sleep(0.2)
                o = self.connect(self.b2)
                owner = o.req("OWNER " + key)
                self.assertTrue(owner.startswith("OK %s " % cid), owner)
                self.assertEqual(o.req("ACQUIRE " + key), "BUSY")
                t2 = self.assertToken(w.readline(3))
                ms = (time.monotonic() - t0) * 1000
                print("\nfigure: DELAY 800, %s on b1, waiter on %s: "
                      "granted %.0f ms after the end" % (how, broker, ms))
                self.assertGreater(t2, t1)
                self.assertGreaterEqual(ms, 780)
                self.assertLess(ms, 800 + 200 + 100)

    def test_release_and_quit_free_at_once(self):
        h = self.connect(self.b1)
        self.assertToken(h.req("ACQUIRE d-rel DELAY 3000"))
        w = self.connect(self.b2)
        w.send("ACQUIRE d-rel WAIT 5000")
        time.sleep(0.1)
        t0 = time.monotonic()
        self.assertEqual(h.req("RELEASE d-rel"), "OK 0")
        self.assertToken(w.readline(2))
        self.assertLess((time.monotonic() - t0) * 1000, 300)
        q = self.connect(self.b1)
        self.assertToken(q.req("ACQUIRE d-quit DELAY 3000"))
        w2 = self.connect(self.b1)
        w2.send("ACQUIRE d-quit WAIT 5000")
        time.sleep(0.1)
        t0 = time.monotonic()
        self.assertEqual(q.req("QUIT"), "OK")
        self.assertToken(w2.readline(2))
        self.assertLess((time.monotonic() - t0) * 1000, 300)

    def test_kill_and_free_release_at_once(self):
        # an admin's KILL of a connected session and of a detached grace
        # session, and a FREE, end holds taken with DELAY at once
        admin = self.connect(self.b2)   # loopback: admin_local
        for how in ("kill", "kill-detached", "free"):
            with self.subTest(how=how):
                key = "d-" + how
                h = self.connect(self.b1)
                if how == "kill-detached":
                    m = re.match(r"OK (\S+) ", h.req("HELLO GRACE 5000"))
                    cid = m.group(1)
                else:
                    cid = h.hello()
                self.assertToken(h.req("ACQUIRE %s DELAY 3000" % key))
                w = self.connect(self.b2)
                w.send("ACQUIRE %s WAIT 5000" % key)
                time.sleep(0.1)
                if how == "kill-detached":
                    h.reset()
                    time.sleep(0.2)
                t0 = time.monotonic()
                if how == "free":
                    self.assertEqual(admin.req("FREE " + key), "OK 1")
                else:
                    self.assertEqual(admin.req("KILL " + cid), "OK 1")
                self.assertToken(w.readline(2))
                self.assertLess((time.monotonic() - t0) * 1000, 500)

    def test_broker_shutdown_frees_at_once(self):
        b3 = self.start_broker()
        h = self.connect(b3)
        self.assertToken(h.req("ACQUIRE d-stop DELAY 3000"))
        w = self.connect(self.b2)
        w.send("ACQUIRE d-stop WAIT 5000")
        time.sleep(0.1)
        t0 = time.monotonic()
        b3.stop()
        self.assertToken(w.readline(2))
        self.assertLess((time.monotonic() - t0) * 1000, 1000)

    def test_without_delay_a_killed_holder_frees_at_once(self):
        h = self.connect(self.b1)
        self.assertToken(h.req("ACQUIRE d-none"))
        w = self.connect(self.b1)
        w.send("ACQUIRE d-none WAIT 5000")
        time.sleep(0.1)
        t0 = time.monotonic()
        h.reset()
        self.assertToken(w.readline(2))
        self.assertLess((time.monotonic() - t0) * 1000, 300)

    def test_reentrant_delay_and_bad_input(self):
        h = self.connect(self.b1)
        self.assertErr(h.req("ACQUIRE d-bad DELAY 5001"), "BADARG")
        self.assertErr(h.req("ACQUIRE d-bad SHARED DELAY 10"), "BADARG")
        self.assertErr(h.req("ACQUIRE ALL 2 d-a d-b DELAY 10"), "BADARG")
        self.assertErr(h.req("ACQUIRE d-bad DELAY -1"), "BADARG")
        self.assertErr(h.req("ACQUIRE d-bad DELAY 10 DELAY 10"), "BADARG")
        self.assertEqual(h.req("PING"), "OK PONG")
        # a reentrant ACQUIRE sets the hold's delay
        self.assertToken(h.req("ACQUIRE d-re"))
        self.assertToken(h.req("ACQUIRE d-re DELAY 600"))
        w = self.connect(self.b2)
        w.send("ACQUIRE d-re WAIT 5000")
        time.sleep(0.1)
        t0 = time.monotonic()
        h.close()
        self.assertToken(w.readline(3))
        self.assertGreaterEqual((time.monotonic() - t0) * 1000, 580)

    def test_grace_session_whose_grace_runs_out(self):
        h = self.connect(self.b1)
        self.assertRegex(h.req("HELLO GRACE 300"), r"\AOK ")
        self.assertToken(h.req("ACQUIRE d-grace DELAY 700"))
        w = self.connect(self.b2)
        w.send("ACQUIRE d-grace WAIT 5000")
        time.sleep(0.1)
        t0 = time.monotonic()
        h.reset()
        self.assertToken(w.readline(4))
        ms = (time.monotonic() - t0) * 1000
        # the grace (300 ms) and then the delay (700 ms)
        self.assertGreaterEqual(ms, 950)
        self.assertLess(ms, 300 + 700 + 400)


if __name__ == "__main__":
    unittest.main()
