"""
test_multi.py - ACQUIRE ALL (protocol 1.2): exclusive holds of several
keys, granted together or none, with RELEASE ALL and CANCEL ALL.

  - all or nothing: one key held elsewhere answers BUSY and leaves the
    others free in Redis; with WAIT it is granted once the last key is
    free, a token per key, each above the key's earlier tokens;
  - ASYNC: EVENT GRANTED ALL <n> <key> <token>..., EVENT TIMEOUT ALL ...,
    CANCEL ALL; RELEASE ALL answers each key's holds left, or the first
    failure naming its key after the others were released;
  - no deadlock: {a,b} against {b,a} 10,000 times on two brokers;
  - 20 sessions on 2 brokers taking random 3-key sets of 6 keys for 10 s,
    checked against a fenced resource: never two holders of a key, every
    request answered within its WAIT, sessions of both brokers served;
  - patience: a set waiting behind single requests that keep one of its
    keys busy is granted within a few seconds;
  - a key named ALL works as in version 1; bad input gets ERR BADARG and
    the session goes on; the keys count toward max_locks_per_session.
"""

import random
import re
import threading
import time
import unittest

import harness
from harness import BrokerTestCase, wait_until


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


def tokens(reply, n):
    m = re.fullmatch(r"OK" + r" ([0-9]+)" * n, reply)
    if m is None:
        raise AssertionError("expected OK and %d tokens, got %r" % (n, reply))
    return [int(x) for x in m.groups()]


class TestAll(BrokerTestCase):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_broker()
        self.b2 = self.start_broker()

    def held(self, key):
        return self.redis.cli("GET", self.lock_key(key))

    def test_all_or_nothing_then_granted_when_the_last_is_free(self):
        a = self.connect(self.b1)
        o = self.connect(self.b2)
        to = self.assertToken(o.req("ACQUIRE y"))
        self.assertEqual(a.req("ACQUIRE ALL 3 x y z"), "BUSY")
        self.assertIsNone(self.held("x"))
        self.assertIsNone(self.held("z"))
        self.assertEqual(a.req("HELD"), "OK 0")
        a.send("ACQUIRE ALL 3 x y z WAIT 5000")
        time.sleep(0.3)
        self.assertIsNone(self.held("x"))      # it waits holding nothing
        t0 = time.monotonic()
        self.assertEqual(o.req("RELEASE y"), "OK 0")
        ts = tokens(a.readline(3.0), 3)
        self.assertLess(time.monotonic() - t0, 0.5)
        self.assertGreater(ts[1], to)
        cid = a.req("HELLO").split()[1]
        for k, t in zip("xyz", ts):
            self.assertEqual(self.held(k), "%s:%d" % (cid, t))
        self.assertEqual(a.req("RELEASE ALL 3 x y z"), "OK 0 0 0")
        for k in "xyz":
            self.assertIsNone(self.held(k))

    def test_async_cancel_and_release_all(self):
        a = self.connect(self.b1)
        o = self.connect(self.b2)
        self.assertToken(o.req("ACQUIRE q"))
        self.assertEqual(a.req("ACQUIRE ALL 2 p q WAIT 5000 ASYNC"),
                         "OK QUEUED")
        self.assertEqual(a.req("PING"), "OK PONG")
        self.assertEqual(o.req("RELEASE q"), "OK 0")
        m = re.fullmatch(r"EVENT GRANTED ALL 2 p ([0-9]+) q ([0-9]+)",
                         a.readline(3.0))
        self.assertIsNotNone(m)
        self.assertToken(o.req("ACQUIRE r"))
        self.assertEqual(a.req("ACQUIRE ALL 2 r s WAIT 200 ASYNC"),
                         "OK QUEUED")
        self.assertEqual(a.readline(3.0), "EVENT TIMEOUT ALL 2 r s")
        self.assertEqual(a.req("ACQUIRE ALL 2 r s WAIT 5000 ASYNC"),
                         "OK QUEUED")
        self.assertEqual(a.req("CANCEL ALL 2 r s"), "OK 1")
        self.assertEqual(a.req("CANCEL ALL 2 r s"), "OK 0")
        self.assertEqual(o.req("RELEASE r"), "OK 0")
        self.assertTrue(a.no_reply(0.3))
        self.assertIsNone(self.held("s"))
        # reentrant holds count: RELEASE ALL answers each key's holds left
        self.assertToken(a.req("ACQUIRE p"))
        self.assertEqual(a.req("RELEASE ALL 2 p q"), "OK 1 0")
        self.assertEqual(a.req("RELEASE ALL 2 p nope"),
                         "ERR NOTHELD nope: this session does not hold "
                         "the key")
        self.assertIsNone(self.held("p"))

    def test_bad_input_and_limits(self):
        a = self.connect(self.b1)
        for line in ("ACQUIRE ALL 2 k k", "ACQUIRE ALL 2 k",
                     "ACQUIRE ALL 2 k1 k2 SHARED", "ACQUIRE ALL 2 k1 k2 "
                     "LIMIT 3", "ACQUIRE ALL 2 k1 k2 VALUE v",
                     "ACQUIRE ALL 2 k1 k2 DELAY 10", "ACQUIRE ALL 2 a b c",
                     "ACQUIRE ALL 65 " + " ".join("k%d" % i
                                                  for i in range(65)),
                     "RELEASE ALL 2 a b LINGER 10", "CANCEL ALL 2 a"):
            self.assertErr(a.req(line), "BADARG")
        # 64 keys: the most
        ts = tokens(a.req("ACQUIRE ALL 64 " + " ".join(
            "m%d" % i for i in range(64))), 64)
        self.assertEqual(ts, sorted(ts))
        self.assertEqual(a.req("RELEASE ALL 64 " + " ".join(
            "m%d" % i for i in range(64))), "OK" + " 0" * 64)
        # a key named ALL is a key
        t = self.assertToken(a.req("ACQUIRE ALL WAIT 10"))
        self.assertEqual(a.req("OWNER ALL").split()[3], str(t))
        self.assertEqual(a.req("RELEASE ALL"), "OK 0")
        # a key held already
        self.assertToken(a.req("ACQUIRE h"))
        self.assertErr(a.req("ACQUIRE ALL 2 h i"), "BADARG")
        self.assertEqual(a.req("PING"), "OK PONG")
        b = self.start_broker("--max_locks_per_session", "3")
        c = self.connect(b)
        self.assertToken(c.req("ACQUIRE one"))
        self.assertErr(c.req("ACQUIRE ALL 3 x y z"), "LIMIT")
        tokens(c.req("ACQUIRE ALL 2 x y"), 2)

    def test_opposite_orders_never_deadlock(self):
        a = self.connect(self.b1)
        b = self.connect(self.b2)
        errors = []
        n = 10000

        def run(c, line, rel):
            for _ in range(n // 2):
                r = c.req(line, timeout=10.0)
                if not r.startswith("OK "):
                    errors.append(r)
                    return
                if c.req(rel) != "OK 0 0":
                    errors.append("release")
                    return
        t0 = time.monotonic()
        ts = [threading.Thread(target=run, args=(
                  a, "ACQUIRE ALL 2 a b WAIT 10000", "RELEASE ALL 2 a b")),
              threading.Thread(target=run, args=(
                  b, "ACQUIRE ALL 2 b a WAIT 10000", "RELEASE ALL 2 b a"))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        took = time.monotonic() - t0
        self.assertEqual(errors, [])
        self.assertLess(took, 60)
        print("\nfigure: {a,b} against {b,a}: %d grants in %.1f s"
              % (n, took))

    def test_random_sets_with_a_fenced_resource(self):
        keys = ["r%d" % i for i in range(6)]
        lock = threading.Lock()
        holder = {}                  # key -> session holding it now
        last = {k: 0 for k in keys}  # key -> highest token seen
        errors, grants = [], {1: 0, 2: 0}
        stop = time.monotonic() + 10.0

        def session(broker, which, seed):
            rnd = random.Random(seed)
            c = broker.client(timeout=20.0)
            try:
                while time.monotonic() < stop:
                    ks = rnd.sample(keys, 3)
                    t0 = time.monotonic()
                    r = c.req("ACQUIRE ALL 3 %s WAIT 3000" % " ".join(ks),
                              timeout=10.0)
                    if time.monotonic() - t0 > 3.0 + 3.0:
                        errors.append("answered late: %.1f s"
                                      % (time.monotonic() - t0))
                    if r == "BUSY":
                        continue
                    try:
                        ts = tokens(r, 3)
                    except AssertionError as e:
                        errors.append(str(e))
                        return
                    with lock:
                        for k, t in zip(ks, ts):
                            if k in holder:
                                errors.append("two holders of " + k)
                            if t <= last[k]:
                                errors.append("token went back on " + k)
                            holder[k] = seed
                            last[k] = t
                        grants[which] += 1
                    time.sleep(rnd.uniform(0, 0.005))
                    with lock:
                        for k in ks:
                            holder.pop(k, None)
                    if c.req("RELEASE ALL 3 %s" % " ".join(ks)) != \
                            "OK 0 0 0":
                        errors.append("release")
            finally:
                c.close()
        ts = [threading.Thread(target=session, args=(
            self.b1 if i % 2 else self.b2, 1 if i % 2 else 2, i))
            for i in range(20)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(40)
        self.assertEqual(errors, [])
        total = grants[1] + grants[2]
        self.assertGreater(total, 100)          # >= 10 grants a second
        self.assertGreater(grants[1], 0)
        self.assertGreater(grants[2], 0)
        print("\nfigure: 20 sessions, random 3 of 6 keys, 10 s: %d grants "
              "(%d / %d per broker)" % (total, grants[1], grants[2]))

    def test_patience_against_single_requests(self):
        m = self.connect(self.b1)
        stop = threading.Event()
        n = [0]

        def hammer(seed):
            c = self.b1.client()
            try:
                while not stop.is_set():
                    if c.req("ACQUIRE hot WAIT 5000").startswith("OK "):
                        n[0] += 1
                        time.sleep(0.002)
                        c.req("RELEASE hot")
            finally:
                c.close()
        ts = [threading.Thread(target=hammer, args=(i,)) for i in range(3)]
        for t in ts:
            t.start()
        try:
            time.sleep(0.3)
            t0 = time.monotonic()
            r = m.req("ACQUIRE ALL 2 hot cold WAIT 8000", timeout=10.0)
            took = time.monotonic() - t0
        finally:
            stop.set()
            for t in ts:
                t.join(10)
        tokens(r, 2)
        self.assertLess(took, 4.0)
        print("\nfigure: a set behind 3 sessions hammering one of its keys "
              "granted after %.2f s (%d single grants meanwhile)"
              % (took, n[0]))


if __name__ == "__main__":
    unittest.main()
