"""
test_v12_value.py - ACQUIRE ... VALUE (protocol 1.2): the value a holder
shows beside its lock, written by the grant's own script call.

  - OWNER ... VALUE on another broker never shows a new holder without
    its value, through plain grants, hand-offs in one script call, early
    hand-offs and ASYNC grants, with candidates on two brokers;
  - a reentrant ACQUIRE ... VALUE replaces the value and answers the same
    token once Redis has it (without VALUE it answers at once, value
    unchanged);
  - the value is deleted with the hold, in the call that frees the key
    (RELEASE, QUIT, the session's end): the value key is gone at once;
  - RESUME carries the value, on the same broker and on another: it is
    still shown after the lock's first TTL, kept fresh by the broker that
    renews the hold now;
  - bad input (too long, with SHARED or LIMIT, missing, a byte outside
    0x21..0x7e, given twice): ERR BADARG and the session goes on.
"""

import re
import threading
import time
import unittest

import harness
from harness import BrokerTestCase, UUID_RE, wait_until


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class ValueCase(BrokerTestCase):
    def owner_value(self, c, key):
        r = c.req("OWNER %s VALUE" % key)
        if r == "OK -":
            return None
        m = re.fullmatch(r"OK (%s|\?) (-?[0-9]+) ([0-9]+) (\S+)" % UUID_RE, r)
        self.assertIsNotNone(m, r)
        return m.group(1), int(m.group(3)), m.group(4)

    def value_key(self, key):
        return "%s:value:%s" % (self.prefix, key)


class TestValue(ValueCase):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_broker()
        self.b2 = self.start_broker()

    def test_bad_input(self):
        c = self.connect(self.b1)
        for line in ("ACQUIRE k VALUE " + "v" * 257,
                     "ACQUIRE k SHARED VALUE x", "ACQUIRE k VALUE x LIMIT 3",
                     "ACQUIRE k VALUE", "ACQUIRE k VALUE a\x01b",
                     "ACQUIRE k VALUE caf\xe9", "ACQUIRE k VALUE a VALUE b"):
            self.assertErr(c.req(line), "BADARG")
        self.assertEqual(c.req("PING"), "OK PONG")
        self.assertEqual(c.req("HELD"), "OK 0")
        # 256 bytes, any option order
        t = self.assertToken(c.req("ACQUIRE k VALUE %s WAIT 10 TTL 5000"
                                   % ("v" * 256)))
        self.assertEqual(self.owner_value(c, "k")[1:], (t, "v" * 256))

    def test_reentrant_value_replaces_and_answers_the_token(self):
        c = self.connect(self.b1)
        q = self.connect(self.b2)
        t = self.assertToken(c.req("ACQUIRE k VALUE one"))
        self.assertEqual(c.req("ACQUIRE k VALUE two"), "OK %d" % t)
        self.assertEqual(self.owner_value(q, "k")[1:], (t, "two"))
        self.assertEqual(c.req("ACQUIRE k"), "OK %d" % t)
        self.assertEqual(self.owner_value(q, "k")[1:], (t, "two"))
        # three holds now: two releases keep it, the third frees it
        self.assertEqual(c.req("RELEASE k"), "OK 2")
        self.assertEqual(c.req("RELEASE k"), "OK 1")
        self.assertEqual(self.owner_value(q, "k")[1:], (t, "two"))
        self.assertEqual(c.req("RELEASE k"), "OK 0")
        self.assertIsNone(self.owner_value(q, "k"))

    def test_value_goes_with_the_hold(self):
        for end in ("RELEASE", "QUIT", "close", "reset"):
            c = self.connect(self.b1)
            self.assertToken(c.req("ACQUIRE k VALUE gone-by-" + end))
            self.assertEqual(self.redis.cli("EXISTS", self.value_key("k")),
                             1)
            if end == "RELEASE":
                self.assertEqual(c.req("RELEASE k"), "OK 0")
            elif end == "QUIT":
                self.assertEqual(c.req("QUIT"), "OK")
            elif end == "close":
                c.close()
            else:
                c.reset()
            wait_until(lambda: self.redis.cli(
                "EXISTS", self.lock_key("k")) == 0, 2.0, what="freed")
            self.assertEqual(self.redis.cli("EXISTS", self.value_key("k")),
                             0, end)

    def test_async_grant_and_handoff_write_the_waiters_value(self):
        a = self.connect(self.b1)
        w = self.connect(self.b1)
        q = self.connect(self.b2)
        ta = self.assertToken(a.req("ACQUIRE k VALUE first"))
        self.assertEqual(w.req("ACQUIRE k WAIT 5000 VALUE second ASYNC"),
                         "OK QUEUED")
        self.assertEqual(a.req("RELEASE k"), "OK 0")
        m = re.fullmatch(r"EVENT GRANTED k ([0-9]+)", w.readline(3.0))
        self.assertIsNotNone(m)
        tw = int(m.group(1))
        self.assertGreater(tw, ta)
        self.assertEqual(self.owner_value(q, "k")[1:], (tw, "second"))

    def test_no_reader_sees_a_new_holder_without_its_value(self):
        """Candidates on two brokers take the key in turn, each with its
        own value; a reader asks OWNER ... VALUE as fast as it can."""
        cands = []
        for i in range(6):
            c = self.connect(self.b1 if i % 2 == 0 else self.b2)
            cid = c.req("HELLO").split()[1]
            cands.append((c, cid, "host-%d" % i))
        stop = threading.Event()
        seen, bad = [], []

        def reader():
            r = self.b2.client()
            try:
                while not stop.is_set():
                    v = self.owner_value(r, "lead")
                    if v is None:
                        continue
                    seen.append(v)
                    cid, _, val = v
                    want = {c[1]: c[2] for c in cands}.get(cid)
                    if val != want:
                        bad.append(v)
            finally:
                r.close()

        def candidate(c, value, rounds):
            for _ in range(rounds):
                r = c.req("ACQUIRE lead WAIT 10000 TTL 3000 VALUE %s"
                          % value, timeout=15.0)
                if not r.startswith("OK "):
                    bad.append(("acquire", r))
                    return
                if c.req("RELEASE lead") != "OK 0":
                    bad.append(("release", value))
                    return
        th = threading.Thread(target=reader)
        th.start()
        try:
            ts = [threading.Thread(target=candidate, args=(c, v, 40))
                  for c, _, v in cands]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        finally:
            stop.set()
            th.join()
        self.assertEqual(bad, [])
        self.assertGreater(len(seen), 50)
        stats = self.b1.client()
        try:
            early = harness.parse_stats(stats.req("STATS"))
        finally:
            stats.close()
        print("\nfigure: %d OWNER reads, every holder with its value; b1 "
              "hand-offs %s (early %s)" % (len(seen), early["handoffs"],
                                           early["early_handoffs"]))


class TestResume(ValueCase):
    def test_resume_carries_the_value_here_and_elsewhere(self):
        b1 = self.start_broker()
        b2 = self.start_broker()
        q = self.connect(b2)
        c = self.connect(b1)
        r = c.req("HELLO GRACE 10000")
        m = re.fullmatch(r"OK (%s) lockbroker/\S+ (\S+)" % UUID_RE, r)
        cid, secret = m.group(1), m.group(2)
        t = self.assertToken(c.req("ACQUIRE k TTL 1000 VALUE kept"))
        for broker in (b1, b2):
            c.reset()
            c = self.connect(broker)
            self.assertTrue(c.req("RESUME %s %s" % (cid, secret))
                            .startswith("OK "))
            self.assertEqual(c.req("HELD"), "OK 1 k")
            # past the TTL the resumed hold's renewals keep the value
            time.sleep(1.6)
            self.assertEqual(self.owner_value(q, "k")[1:], (t, "kept"))
        self.assertEqual(c.req("RELEASE k"), "OK 0")
        self.assertIsNone(self.owner_value(q, "k"))


if __name__ == "__main__":
    unittest.main()
