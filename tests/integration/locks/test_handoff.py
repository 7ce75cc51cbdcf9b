"""
test_handoff.py - handoff of a released lock to the next local waiter (one
script call: release and grant), and fairness between brokers: a broker
whose local clients keep handing a key around must still let a waiter on
another broker in (the "wanted" announcement, HANDOFF_FAIR / WANTED_MS /
YIELD_MS in daemon/locks/handoff.c), and must not yield when nobody else
wants it.
"""

import os
import re
import threading
import time
import unittest

import harness
from harness import UUID_RE, BrokerTestCase, ms_since, wait_until


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class Turns:
    """Clients taking turns on one key, recording each hold as seen from
    the client: (start = OK received, end = RELEASE about to be sent,
    token, who).  A client-side interval lies inside the real hold, so two
    that overlap mean two holders at once."""

    def __init__(self):
        self.mu = threading.Lock()
        self.holds = []
        self.errors = []
        self.stop = threading.Event()
        self.rounds = {}

    def hold_once(self, c, who, key, wait_ms, hold_s=0.001):
        """ACQUIRE key WAIT wait_ms, hold, RELEASE.  Returns the ms the
        ACQUIRE took, or None if it answered BUSY."""
        t0 = time.monotonic()
        r = c.req("ACQUIRE %s WAIT %d" % (key, wait_ms),
                  timeout=wait_ms / 1000.0 + 5)
        start = time.monotonic()
        if r == "BUSY":
            return None
        m = re.fullmatch(r"OK ([0-9]+)", r)
        if not m:
            raise AssertionError("%s: ACQUIRE answered %r" % (who, r))
        time.sleep(hold_s)
        end = time.monotonic()
        with self.mu:
            self.holds.append((start, end, int(m.group(1)), who))
            self.rounds[who] = self.rounds.get(who, 0) + 1
        r = c.req("RELEASE " + key)
        if r != "OK 0":
            raise AssertionError("%s: RELEASE answered %r" % (who, r))
        return (start - t0) * 1000.0

    def loop(self, c, who, key, max_s):
        """hold_once until stop is set or max_s has passed."""
        deadline = time.monotonic() + max_s
        try:
            while not self.stop.is_set() and time.monotonic() < deadline:
                if self.hold_once(c, who, key, 5000) is None:
                    raise AssertionError("%s: BUSY after WAIT 5000" % who)
        except Exception as e:      # reported by the main thread
            self.errors.append(repr(e))

    def check(self, tc):
        tc.assertEqual(self.errors, [])
        holds = sorted(self.holds)
        for (s1, e1, t1, w1), (s2, e2, t2, w2) in zip(holds, holds[1:]):
            tc.assertLessEqual(e1, s2, "holds overlap: %s token %d "
                               "[%.6f, %.6f] and %s token %d [%.6f, %.6f]"
                               % (w1, t1, s1, e1, w2, t2, s2, e2))
            tc.assertLess(t1, t2, "tokens not rising in grant order")


def run_threads(targets):
    ts = [threading.Thread(target=f, args=a) for f, a in targets]
    for t in ts:
        t.start()
    return ts


class TestHandoff(BrokerTestCase):
    def test_release_hands_over_to_local_waiter(self):
        x = self.start_broker()
        a, b, obs = self.connect(x), self.connect(x), self.connect(x)
        bid = b.hello()
        before = self.stats(obs)
        ta = self.assertToken(a.req("ACQUIRE k"))
        b.send("ACQUIRE k WAIT 5000")
        wait_until(lambda: self.stats(obs)["waiters"] == "1", 2.0,
                   what="waiters=1")
        self.assertEqual(a.req("RELEASE k"), "OK 0")
        tb = self.assertToken(b.readline())
        self.assertGreater(tb, ta)
        after = self.stats(obs)
        self.assertEqual(int(after["handoffs"]), int(before["handoffs"]) + 1)
        self.assertEqual(int(after["releases"]), int(before["releases"]) + 1)
        self.assertEqual(after["fair_yields"], before["fair_yields"])
        self.assertEqual((after["locks_held"], after["waiters"]), ("1", "0"))
        r = obs.req("OWNER k")
        m = re.fullmatch(r"OK (%s) ([0-9]+) ([0-9]+)" % UUID_RE, r)
        self.assertIsNotNone(m, r)
        self.assertEqual((m.group(1), int(m.group(3))), (bid, tb))
        self.assertEqual(self.redis.cli("GET", self.lock_key("k")),
                         "%s:%d" % (bid, tb))
        self.assertEqual(b.req("HELD"), "OK 1 k")
        self.assertEqual(a.req("HELD"), "OK 0")
        self.assertEqual(b.req("RELEASE k"), "OK 0")
        self.assertEqual(obs.req("OWNER k"), "OK -")

    def test_handoff_chain_in_fifo_order(self):
        # Each release hands over to the oldest waiter, with a new token.
        x = self.start_broker()
        obs = self.connect(x)
        cs = [self.connect(x) for _ in range(4)]
        toks = [self.assertToken(cs[0].req("ACQUIRE q"))]
        for i, c in enumerate(cs[1:]):
            c.send("ACQUIRE q WAIT 5000")
            wait_until(lambda: self.stats(obs)["waiters"] == str(i + 1), 2.0,
                       what="waiters=%d" % (i + 1))
        for prev, nxt in zip(cs, cs[1:]):
            self.assertEqual(prev.req("RELEASE q"), "OK 0")
            toks.append(self.assertToken(nxt.readline()))
        self.assertEqual(cs[-1].req("RELEASE q"), "OK 0")
        self.assertEqual(toks, sorted(set(toks)))
        self.assertEqual(self.stats(obs)["handoffs"], "3")


class TestFairness(BrokerTestCase):
    def test_remote_waiter_gets_in_despite_local_handoffs(self):
        x = self.start_broker()
        y = self.start_broker()
        obs = self.connect(x)
        turns = Turns()
        locals_ = [self.connect(x, timeout=10) for _ in range(3)]
        ts = run_threads([(turns.loop, (c, "x%d" % i, "k", 3.0))
                          for i, c in enumerate(locals_)])
        try:
            time.sleep(0.2)
            handoffs0 = int(self.stats(obs)["handoffs"])
            remote = self.connect(y, timeout=10)
            got = {}

            def remote_try():
                try:
                    got["ms"] = turns.hold_once(remote, "y", "k", 3000)
                except Exception as e:
                    turns.errors.append(repr(e))

            rt = run_threads([(remote_try, ())])[0]
            rt.join(10)
            # Let the locals go on a little after the remote turn.
            time.sleep(0.1)
        finally:
            turns.stop.set()
            for t in ts:
                t.join(15)
        turns.check(self)
        self.assertGreater(int(self.stats(obs)["handoffs"]), handoffs0,
                           "the local clients were not handing over: the "
                           "test did not contend")
        ms = got.get("ms")
        self.assertIsNotNone(ms, "the waiter on the other broker got BUSY "
                             "after WAIT 3000: starved by local handoffs "
                             "(rounds %s)" % turns.rounds)
        self.assertLess(ms, 1000, "the remote waiter waited %.0f ms" % ms)
        st = self.stats(obs)
        self.assertGreaterEqual(int(st["fair_yields"]), 1, st)
        for who in ("x0", "x1", "x2"):
            self.assertGreater(turns.rounds.get(who, 0), 0, turns.rounds)

    # Regression: locks_store_wanted() once kept the "wanted" news only
    # when a local session held the key; landing while this broker's own
    # acquire attempt was in flight it was dropped, and the remote waiter
    # got BUSY after its whole WAIT while the key was handed over locally.
    def test_wanted_during_local_attempt_is_kept(self):
        r = self.start_redis()
        x = self.start_broker(redis=r)
        y = self.start_broker(redis=r)
        obs = self.connect(x)
        for rnd in range(4):
            key = "w%d" % rnd
            turns = Turns()
            ls = [self.connect(x, timeout=10) for _ in range(3)]
            w = self.connect(y, timeout=10)
            # With Redis stopped, X's attempt for ls[0] is sent first, then
            # Y's (which fails in Redis after X's grant, and announces the
            # waiter); ls[1] and ls[2] queue on X.  Resumed, X reads its
            # grant and the announcement at about the same time.
            r.pause()
            try:
                ls[0].send("ACQUIRE %s WAIT 5000" % key)
                time.sleep(0.03)
                t0 = time.monotonic()
                w.send("ACQUIRE %s WAIT 3000" % key)
                time.sleep(0.03)
                ls[1].send("ACQUIRE %s WAIT 5000" % key)
                ls[2].send("ACQUIRE %s WAIT 5000" % key)
                time.sleep(0.02)
            finally:
                r.resume()

            def loop(c, who):
                try:
                    rep = c.readline(6)
                    if not rep.startswith("OK "):
                        raise AssertionError("%s: ACQUIRE answered %r"
                                             % (who, rep))
                    time.sleep(0.001)
                    if c.req("RELEASE " + key) != "OK 0":
                        raise AssertionError("%s: RELEASE failed" % who)
                    while not turns.stop.is_set():
                        turns.hold_once(c, who, key, 5000)
                except Exception as e:
                    turns.errors.append(repr(e))

            ts = run_threads([(loop, (c, "x%d" % i))
                              for i, c in enumerate(ls)])
            try:
                rep = w.readline(6)
                ms = ms_since(t0)
                if rep.startswith("OK "):
                    self.assertEqual(w.req("RELEASE " + key), "OK 0")
            finally:
                turns.stop.set()
                for t in ts:
                    t.join(15)
            self.assertEqual(turns.errors, [])
            self.assertTrue(rep.startswith("OK ") and ms < 1000,
                            "round %d: the remote waiter got %r after "
                            "%.0f ms while the key was handed over %s "
                            "times on X (%s)" % (rnd, rep, ms,
                                                 sum(turns.rounds.values()),
                                                 self.stats(obs)))

    def test_no_yield_without_remote_waiter(self):
        x = self.start_broker()
        y = self.start_broker()     # idle broker on the same prefix
        obs = self.connect(x)
        yobs = self.connect(y)
        turns = Turns()
        cs = [self.connect(x, timeout=10) for _ in range(3)]
        ts = run_threads([(turns.loop, (c, "x%d" % i, "k", 1.0))
                          for i, c in enumerate(cs)])
        for t in ts:
            t.join(15)
        turns.check(self)
        st = self.stats(obs)
        self.assertEqual(st["fair_yields"], "0", st)
        self.assertGreater(int(st["handoffs"]), 0, st)
        self.assertEqual((st["locks_held"], st["waiters"]), ("0", "0"))
        self.assertEqual(self.stats(yobs)["fair_yields"], "0")
        self.assertEqual(yobs.req("OWNER k"), "OK -")


if __name__ == "__main__":
    unittest.main()
