"""
test_async.py - waits that do not block the session (protocol 1.2:
ACQUIRE ... WAIT <ms> ASYNC, CANCEL, EVENT GRANTED/TIMEOUT/FAILED).

Real Redis, real brokers, plain sockets.  A session that holds one key
queues for others and goes on; a cancel that races a grant either loses
(OK 1, nothing held) or wins (EVENT GRANTED, then OK 0, held): never a
hold nobody has, never two outcomes.
"""

import re
import time
import unittest

import harness
from harness import BrokerTestCase, wait_until

TOKEN = r"[0-9]+"


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class TestAsync(BrokerTestCase):

    def setUp(self):
        super().setUp()
        self.b = self.start_broker()

    def owner_of(self, key):
        """The raw lock value in Redis, or None when free."""
        return self.redis.cli("GET", self.lock_key(key))

    def test_waits_for_two_keys_while_holding_a_third(self):
        s = self.connect(self.b)
        other = self.connect(self.b)
        ta = self.assertToken(s.req("ACQUIRE a"))
        other.req("ACQUIRE b")
        tc_other = self.assertToken(other.req("ACQUIRE c"))
        self.assertEqual(s.req("ACQUIRE b WAIT 10000 ASYNC"), "OK QUEUED")
        self.assertEqual(s.req("ACQUIRE c WAIT 10000 ASYNC"), "OK QUEUED")
        # the session goes on at once
        r, ms = s.timed_req("PING")
        self.assertEqual(r, "OK PONG")
        self.assertLess(ms, 50)
        self.assertEqual(s.req("HELD"), "OK 1 a")  # queued keys are not held
        self.assertEqual(self.stats(s)["waiters"], "2")
        self.assertEqual(s.req("CANCEL b"), "OK 1")
        self.assertEqual(s.req("CANCEL b"), "OK 0")
        self.assertEqual(other.req("RELEASE c"), "OK 0")
        m = re.fullmatch(r"EVENT GRANTED c (%s)" % TOKEN, s.readline())
        self.assertIsNotNone(m)
        self.assertGreater(int(m.group(1)), tc_other)
        self.assertEqual(s.req("HELD"), "OK 2 a c")
        # b's release goes to nobody here: the wait was withdrawn
        self.assertEqual(other.req("RELEASE b"), "OK 0")
        self.assertTrue(s.no_reply(0.2))
        self.assertIsNone(self.owner_of("b"))
        self.assertEqual(s.req("RELEASE a"), "OK 0")
        self.assertEqual(s.req("RELEASE c"), "OK 0")
        self.assertGreater(ta, 0)

    def test_first_answers(self):
        s = self.connect(self.b)
        other = self.connect(self.b)
        # free: granted at once, as a plain ACQUIRE
        t = self.assertToken(s.req("ACQUIRE k WAIT 1000 ASYNC"))
        # held by this session: reentrant, at once
        self.assertEqual(s.req("ACQUIRE k WAIT 1000 ASYNC"), "OK %d" % t)
        other.req("ACQUIRE x")
        # WAIT absent or 0: BUSY
        self.assertEqual(s.req("ACQUIRE x ASYNC"), "BUSY")
        self.assertEqual(s.req("ACQUIRE x WAIT 0 ASYNC"), "BUSY")
        self.assertEqual(s.req("ACQUIRE x WAIT 5000 ASYNC"), "OK QUEUED")
        self.assertErr(s.req("ACQUIRE x WAIT 5000 ASYNC"), "BADARG")
        self.assertErr(s.req("ACQUIRE x WAIT 5000"), "BADARG")
        self.assertEqual(s.req("CANCEL nothing"), "OK 0")
        # kinds: a shared wait behind an exclusive holder, a permit
        # behind the only one
        self.assertToken(other.req("ACQUIRE sh"))
        self.assertToken(other.req("ACQUIRE sem LIMIT 1"))
        self.assertEqual(s.req("ACQUIRE sh SHARED WAIT 5000 ASYNC"),
                         "OK QUEUED")
        self.assertEqual(s.req("ACQUIRE sem LIMIT 1 WAIT 5000 ASYNC"),
                         "OK QUEUED")
        self.assertEqual(other.req("RELEASE sh"), "OK 0")
        self.assertRegex(s.readline(), r"\AEVENT GRANTED sh %s\Z" % TOKEN)
        self.assertEqual(other.req("RELEASE sem"), "OK 0")
        self.assertRegex(s.readline(), r"\AEVENT GRANTED sem %s\Z" % TOKEN)
        self.assertEqual(sorted(s.req("HELD").split()),
                         sorted("OK 3 k sem sh".split()))

    def test_timeout_and_limit(self):
        b = self.start_broker("--max_waiters_per_session", "3")
        s = self.connect(b)
        other = self.connect(b)
        for k in ("p", "q", "r", "t"):
            self.assertToken(other.req("ACQUIRE " + k))
        t0 = time.monotonic()
        self.assertEqual(s.req("ACQUIRE p WAIT 200 ASYNC"), "OK QUEUED")
        self.assertEqual(s.req("ACQUIRE q WAIT 10000 ASYNC"), "OK QUEUED")
        self.assertEqual(s.req("ACQUIRE r WAIT 10000 ASYNC"), "OK QUEUED")
        self.assertErr(s.req("ACQUIRE t WAIT 10000 ASYNC"), "LIMIT")
        self.assertEqual(s.req("PING"), "OK PONG")   # the session goes on
        self.assertEqual(s.readline(timeout=3.0), "EVENT TIMEOUT p")
        self.assertGreaterEqual(time.monotonic() - t0, 0.19)
        # a slot came free
        self.assertEqual(s.req("ACQUIRE t WAIT 10000 ASYNC"), "OK QUEUED")
        self.assertEqual(other.req("RELEASE t"), "OK 0")
        self.assertRegex(s.readline(), r"\AEVENT GRANTED t %s\Z" % TOKEN)

    def test_quit_drops_waits_silently(self):
        s = self.connect(self.b)
        other = self.connect(self.b)
        other.req("ACQUIRE k")
        self.assertEqual(s.req("ACQUIRE k WAIT 10000 ASYNC"), "OK QUEUED")
        self.assertEqual(s.req("QUIT"), "OK")
        self.assertTrue(s.wait_closed())
        self.assertEqual(other.req("RELEASE k"), "OK 0")
        wait_until(lambda: self.owner_of("k") is None, 2.0,
                   what="k free: nobody waits for it")
        self.assertEqual(self.stats(other)["waiters"], "0")

    def race_cancels(self, holder_broker, waiter_broker, rounds):
        h = self.connect(holder_broker)
        s = self.connect(waiter_broker)
        won = lost = 0
        for i in range(rounds):
            key = "race%d" % (i % 7)
            self.assertToken(h.req("ACQUIRE " + key))
            self.assertEqual(s.req("ACQUIRE %s WAIT 10000 ASYNC" % key),
                             "OK QUEUED")
            # release and cancel as close together as two sockets allow
            h.send("RELEASE " + key)
            s.send("CANCEL " + key)
            self.assertEqual(h.readline(), "OK 0")
            first = s.readline()
            if first == "OK 1":
                lost += 1
                # (a second outcome would be the next line read: the next
                # round's reply checks fail on it)
                # given back: free, or being released (never kept)
                wait_until(lambda: self.owner_of(key) is None, 2.0,
                           what="%s free after a withdrawn wait (round %d)"
                           % (key, i))
            else:
                self.assertRegex(first, r"\AEVENT GRANTED %s %s\Z"
                                 % (key, TOKEN))
                self.assertEqual(s.readline(), "OK 0")
                won += 1
                self.assertEqual(s.req("RELEASE " + key), "OK 0")
        self.assertEqual(s.req("HELD"), "OK 0")
        self.assertEqual(s.req("PING"), "OK PONG")
        return won, lost

    def test_cancel_racing_grant_same_broker(self):
        won, lost = self.race_cancels(self.b, self.b, 500)
        print("\nfigure: cancel vs grant, one broker: %d granted first, "
              "%d withdrawn" % (won, lost))

    def test_cancel_racing_grant_two_brokers(self):
        b2 = self.start_broker()
        won, lost = self.race_cancels(self.b, b2, 500)
        print("\nfigure: cancel vs grant, two brokers: %d granted first, "
              "%d withdrawn" % (won, lost))

    def test_grace_grant_told_after_its_record(self):
        """A grace session's EVENT GRANTED comes once the record lists the
        key: a RESUME elsewhere right after it gives the key back."""
        b2 = self.start_broker()
        s = self.connect(self.b)
        other = self.connect(self.b)
        hello = s.req("HELLO 1 GRACE 30000")
        m = re.fullmatch(r"OK (\S+) lockbroker/\S+ (\S+)", hello)
        self.assertIsNotNone(m, hello)
        cid, secret = m.group(1), m.group(2)
        other.req("ACQUIRE g")
        self.assertEqual(s.req("ACQUIRE g WAIT 10000 ASYNC"), "OK QUEUED")
        self.assertEqual(other.req("RELEASE g"), "OK 0")
        tok = int(re.fullmatch(r"EVENT GRANTED g (%s)" % TOKEN,
                               s.readline()).group(1))
        s.close()                 # dropped, not QUIT: detached
        n = self.connect(b2)
        r = n.req("RESUME %s %s" % (cid, secret))
        self.assertEqual(r, "OK 1 g")
        self.assertEqual(n.req("ACQUIRE g"), "OK %d" % tok)
        self.assertEqual(n.req("QUIT"), "OK")

    def grace_session(self, broker):
        s = self.connect(broker)
        m = re.fullmatch(r"OK (\S+) lockbroker/\S+ (\S+)",
                         s.req("HELLO 1 GRACE 30000"))
        self.assertIsNotNone(m)
        return s, m.group(1), m.group(2)

    def events_until(self, c, n, timeout=5.0):
        return sorted(c.readline(timeout=timeout) for _ in range(n))

    def resume_carries_waits(self, b_old, b_new):
        s, cid, secret = self.grace_session(b_old)
        o = self.connect(b_old)
        self.assertToken(s.req("ACQUIRE a"))
        for k in ("b", "c", "d"):
            self.assertToken(o.req("ACQUIRE " + k))
        self.assertEqual(s.req("ACQUIRE b WAIT 20000 ASYNC"), "OK QUEUED")
        self.assertEqual(s.req("ACQUIRE c WAIT 700 ASYNC"), "OK QUEUED")
        self.assertEqual(s.req("ACQUIRE d SHARED WAIT 20000 ASYNC"),
                         "OK QUEUED")
        self.assertEqual(s.req("PING"), "OK PONG")
        s.close()                       # dropped: detached
        wait_until(lambda: self.stats(o)["detached"] == "1", 3.0,
                   what="the session detached")
        # while detached its waits are not granted: b goes to nobody
        self.assertEqual(o.req("RELEASE b"), "OK 0")
        time.sleep(0.9)                 # c's deadline passes meanwhile
        self.assertIsNone(self.owner_of("b"))
        n = self.connect(b_new)
        self.assertEqual(n.req("RESUME %s %s" % (cid, secret)), "OK 1 a")
        ev = self.events_until(n, 3)
        self.assertEqual(ev[1:], ["EVENT QUEUED d", "EVENT TIMEOUT c"])
        tb = int(re.fullmatch(r"EVENT GRANTED b (%s)" % TOKEN,
                              ev[0]).group(1))
        self.assertEqual(n.req("CANCEL c"), "OK 0")
        # d is still queued, with its kind: granted once o lets go
        self.assertEqual(o.req("RELEASE d"), "OK 0")
        self.assertRegex(n.readline(), r"\AEVENT GRANTED d %s\Z" % TOKEN)
        self.assertEqual(sorted(n.req("HELD").split()[2:]),
                         ["a", "b", "d"])
        self.assertEqual(n.req("ACQUIRE b"), "OK %d" % tb)
        # a wait that ended is out of the record: a second RESUME
        # finds no wait to queue again
        n.close()
        m = self.connect(b_old)
        self.assertEqual(sorted(m.req("RESUME %s %s" % (cid, secret))
                                .split()[2:]), ["a", "b", "d"])
        self.assertTrue(m.no_reply(0.3), m.buf)
        self.assertEqual(m.req("QUIT"), "OK")

    def test_resume_elsewhere_queues_the_waits_again(self):
        self.resume_carries_waits(self.b, self.start_broker())

    def test_resume_here_queues_the_waits_again(self):
        self.resume_carries_waits(self.b, self.b)


if __name__ == "__main__":
    unittest.main()
