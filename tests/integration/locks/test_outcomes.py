"""
test_outcomes.py - one outcome per wait, and limits on every path to a
new hold (protocol 1.2's ASYNC waits with grace sessions and RESUME).

  TestOneOutcome
    - a grace session's wait told EVENT FAILED ... UNAVAILABLE while Redis
      was frozen is gone from its record once Redis is back: a RESUME (on
      this broker or another) tells it nothing more and grants it nothing,
      even when its key is free by then;
    - a wait whose deadline passed while the connection was down gets
      exactly EVENT TIMEOUT at the RESUME, and nothing is held, though its
      key was freed before the RESUME.
  TestLockLimit (max_locks_per_session binds every path)
    - ASYNC waits granted while the session is at its limit end EVENT
      FAILED <key> LIMIT, and their keys go to the next waiter;
    - a blocking ACQUIRE whose turn comes after ASYNC grants filled the
      session's quota answers ERR LIMIT, and the key goes on;
    - a local release's hand-off skips a waiter at its limit (EVENT FAILED
      LIMIT) for the next one, on this broker and from another.
  TestWaitLimit (max_waiters_per_session counts queued waits only)
    - at the bound, an ASYNC ACQUIRE that would not queue is answered as
      any ACQUIRE (OK for a free key, the same token when reentrant, BUSY
      without WAIT); only one that would queue answers ERR LIMIT, and
      queues nothing.
"""

import re
import time
import unittest

import harness
from harness import BrokerTestCase, UUID_RE, wait_until

TOKEN = r"[0-9]+"


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class Case(BrokerTestCase):
    def grace(self, broker, ms=10000):
        c = self.connect(broker)
        r = c.req("HELLO GRACE %d" % ms)
        m = re.fullmatch(r"OK (%s) lockbroker/\S+ (\S+)" % UUID_RE, r)
        self.assertIsNotNone(m, r)
        return c, m.group(1), m.group(2)

    def resume(self, broker, cid, secret):
        c = self.connect(broker)
        r = c.req("RESUME %s %s" % (cid, secret))
        self.assertTrue(r.startswith("OK "), r)
        return c

    def holder(self, key, redis=None):
        return (redis or self.redis).cli("GET", self.lock_key(key))


class TestOneOutcome(Case):
    def failed_while_frozen(self, resume_on_other):
        r = self.start_redis()
        b1 = self.start_broker("--redis_timeout_ms", "300", redis=r)
        b2 = self.start_broker("--redis_timeout_ms", "300", redis=r)
        other = self.connect(b2)
        self.assertToken(other.req("ACQUIRE k"))
        s, cid, secret = self.grace(b1)
        self.assertEqual(s.req("ACQUIRE k WAIT 1000 ASYNC"), "OK QUEUED")
        r.pause()
        try:
            # a request in flight makes b1 find Redis frozen before the
            # wait's deadline (redis_timeout_ms): FAILED ... UNAVAILABLE
            # then; either way its one outcome comes while Redis is away,
            # and so does the record write that removes the wait
            probe = self.connect(b1)
            probe.send("OWNER probe")
            self.assertIn(s.readline(3.0), ("EVENT FAILED k UNAVAILABLE",
                                            "EVENT TIMEOUT k"))
        finally:
            time.sleep(0.3)
            r.resume()
        for b in (b1, b2):
            wait_until(lambda: harness.parse_stats(
                b.client().req("STATS")).get("redis") == "up", 5.0,
                what="broker back on Redis")
        time.sleep(0.5)         # its record writes, sent again, land
        self.assertEqual(other.req("RELEASE k"), "OK 0")
        s.reset()
        s = self.resume(b2 if resume_on_other else b1, cid, secret)
        self.assertTrue(s.no_reply(0.6), "a second outcome: %r" % s.buf)
        self.assertEqual(s.req("HELD"), "OK 0")
        self.assertIsNone(self.holder("k", r))

    def test_failed_wait_is_not_told_again_after_resume_here(self):
        self.failed_while_frozen(False)

    def test_failed_wait_is_not_told_again_after_resume_elsewhere(self):
        self.failed_while_frozen(True)

    def test_wait_past_its_deadline_times_out_at_resume(self):
        b1 = self.start_broker()
        b2 = self.start_broker()
        other = self.connect(b2)
        self.assertToken(other.req("ACQUIRE late"))
        s, cid, secret = self.grace(b1)
        t0 = time.monotonic()
        self.assertEqual(s.req("ACQUIRE late WAIT 500 ASYNC"), "OK QUEUED")
        s.reset()
        time.sleep(max(0, 1.0 - (time.monotonic() - t0)))
        self.assertEqual(other.req("RELEASE late"), "OK 0")
        time.sleep(max(0, 1.5 - (time.monotonic() - t0)))
        for broker in (b1,):
            s = self.resume(broker, cid, secret)
            self.assertEqual(s.readline(2.0), "EVENT TIMEOUT late")
            self.assertTrue(s.no_reply(0.3))
            self.assertEqual(s.req("HELD"), "OK 0")
            self.assertIsNone(self.holder("late"))


class TestLockLimit(Case):
    def test_async_grants_stop_at_the_limit(self):
        b = self.start_broker("--max_locks_per_session", "3")
        b2 = self.start_broker()        # no such limit there
        s = self.connect(b)
        other = self.connect(b2)
        # behind s on its broker, two sessions for two keys each: they get
        # what s may not take
        nxt = [self.connect(b), self.connect(b)]
        for k in ("h1", "h2"):
            self.assertToken(s.req("ACQUIRE " + k))
        keys = ["w%d" % i for i in range(5)]
        for k in keys:
            self.assertToken(other.req("ACQUIRE " + k))
        for k in keys:
            self.assertEqual(s.req("ACQUIRE %s WAIT 10000 ASYNC" % k),
                             "OK QUEUED")
        for i, k in enumerate(keys[1:]):
            self.assertEqual(nxt[i // 2].req("ACQUIRE %s WAIT 10000 ASYNC"
                                             % k), "OK QUEUED")
        self.assertEqual(other.req("RELEASE w0"), "OK 0")
        self.assertRegex(s.readline(3.0), r"\AEVENT GRANTED w0 %s\Z" % TOKEN)
        for k in keys[1:]:
            self.assertEqual(other.req("RELEASE " + k), "OK 0")
        events = sorted(s.readline(3.0) for _ in keys[1:])
        self.assertEqual(events, ["EVENT FAILED %s LIMIT" % k
                                  for k in keys[1:]])
        self.assertEqual(len(s.req("HELD").split()), 2 + 3)
        # the four went to the next waiters
        for i, c in enumerate(nxt):
            got = sorted(c.readline(3.0).split()[2] for _ in range(2))
            self.assertEqual(got, keys[1 + 2 * i:3 + 2 * i])
        self.assertTrue(s.no_reply(0.2))

    def test_blocking_acquire_after_async_grants_filled_the_quota(self):
        b = self.start_broker("--max_locks_per_session", "3")
        s = self.connect(b)
        other = self.connect(b)
        nxt = self.connect(b)
        for k in ("h1", "h2"):
            self.assertToken(s.req("ACQUIRE " + k))
        self.assertToken(other.req("ACQUIRE x"))
        self.assertToken(other.req("ACQUIRE y"))
        self.assertEqual(s.req("ACQUIRE x WAIT 10000 ASYNC"), "OK QUEUED")
        s.send("ACQUIRE y WAIT 10000")
        time.sleep(0.1)
        nxt.send("ACQUIRE y WAIT 10000")
        time.sleep(0.1)
        self.assertEqual(other.req("RELEASE x"), "OK 0")
        self.assertRegex(s.readline(3.0), r"\AEVENT GRANTED x %s\Z" % TOKEN)
        self.assertEqual(other.req("RELEASE y"), "OK 0")
        self.assertErr(s.readline(3.0), "LIMIT")
        self.assertToken(nxt.readline(3.0))

    def test_handoff_skips_a_waiter_at_its_limit(self):
        for remote in (False, True):
            b1 = self.start_broker("--max_locks_per_session", "3")
            b2 = self.start_broker("--max_locks_per_session", "3")
            s = self.connect(b1)
            h = self.connect(b1)
            t = self.connect(b2 if remote else b1)
            other = self.connect(b2)
            for k in ("h1", "h2"):
                self.assertToken(s.req("ACQUIRE " + k))
            self.assertToken(h.req("ACQUIRE k TTL 30000"))
            self.assertToken(other.req("ACQUIRE x"))
            self.assertEqual(s.req("ACQUIRE k WAIT 10000 ASYNC"),
                             "OK QUEUED")
            t.send("ACQUIRE k WAIT 10000")
            time.sleep(0.1)
            # s fills its quota with x while it waits for k
            self.assertEqual(s.req("ACQUIRE x WAIT 10000 ASYNC"),
                             "OK QUEUED")
            self.assertEqual(other.req("RELEASE x"), "OK 0")
            self.assertRegex(s.readline(3.0),
                             r"\AEVENT GRANTED x %s\Z" % TOKEN)
            self.assertEqual(h.req("RELEASE k"), "OK 0")
            self.assertEqual(s.readline(3.0), "EVENT FAILED k LIMIT")
            self.assertToken(t.readline(3.0))
            self.assertEqual(s.req("HELD").split()[:2], ["OK", "3"])
            self.redis.cli("FLUSHALL")


class TestWaitLimit(Case):
    def test_only_a_request_that_would_queue_is_refused(self):
        b = self.start_broker("--max_waiters_per_session", "2")
        s = self.connect(b)
        other = self.connect(b)
        for k in ("p", "q", "busy"):
            self.assertToken(other.req("ACQUIRE " + k))
        t = self.assertToken(s.req("ACQUIRE mine"))
        self.assertEqual(s.req("ACQUIRE p WAIT 10000 ASYNC"), "OK QUEUED")
        self.assertEqual(s.req("ACQUIRE q WAIT 10000 ASYNC"), "OK QUEUED")
        # at the bound: what would not queue is answered as usual
        self.assertToken(s.req("ACQUIRE free WAIT 10000 ASYNC"))
        self.assertEqual(s.req("ACQUIRE mine WAIT 10000 ASYNC"), "OK %d" % t)
        self.assertEqual(s.req("ACQUIRE busy ASYNC"), "BUSY")
        self.assertErr(s.req("ACQUIRE busy WAIT 10000 ASYNC"), "LIMIT")
        self.assertEqual(s.req("PING"), "OK PONG")
        # and queued nothing: busy's release goes to nobody
        self.assertEqual(other.req("RELEASE busy"), "OK 0")
        self.assertTrue(s.no_reply(0.3))
        self.assertIsNone(self.holder("busy"))
        self.assertEqual(self.stats(s)["waiters"], "2")


if __name__ == "__main__":
    unittest.main()
