"""
test_v12_check.py - CHECK <key> <token> (protocol 1.2): is a fencing
token's hold alive in Redis now, whichever broker holds it?

  - An exclusive holder's token is CURRENT, on its broker and on another;
    any other token is STALE with the holder's token; a free key is
    STALE -.
  - After the key was lost (deleted in Redis) and taken by a session on
    another broker, the old token reads STALE <new token> and the new one
    CURRENT.
  - Shared locks and semaphores: every live holder's token is CURRENT;
    a released one is STALE with the newest live token.
  - Bad tokens (0, 2^53, not a number, missing) are ERR BADARG and the
    session goes on; an access list's key globs apply (ERR DENIED).
"""

import hashlib
import os
import shutil
import tempfile
import unittest

import harness
from harness import BrokerTestCase


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class TestCheck(BrokerTestCase):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_broker()
        self.b2 = self.start_broker()
        self.c1 = self.connect(self.b1)
        self.c2 = self.connect(self.b2)
        self.q = self.connect(self.b2)      # holds nothing: any session

    def test_exclusive_current_and_stale(self):
        self.assertEqual(self.q.req("CHECK k 1"), "OK STALE -")
        t = self.assertToken(self.c1.req("ACQUIRE k TTL 30000"))
        for c in (self.c1, self.q):
            self.assertEqual(c.req("CHECK k %d" % t), "OK CURRENT")
            self.assertEqual(c.req("CHECK k %d" % (t + 1)), "OK STALE %d" % t)
        self.assertEqual(self.c1.req("RELEASE k"), "OK 0")
        self.assertEqual(self.q.req("CHECK k %d" % t), "OK STALE -")

    def test_lost_and_taken_by_another_reads_stale(self):
        t1 = self.assertToken(self.c1.req("ACQUIRE k TTL 30000"))
        self.redis.cli("DEL", self.lock_key("k"))
        t2 = self.assertToken(self.c2.req("ACQUIRE k TTL 30000"))
        self.assertNotEqual(t1, t2)
        self.assertEqual(self.q.req("CHECK k %d" % t1), "OK STALE %d" % t2)
        self.assertEqual(self.c1.req("CHECK k %d" % t1), "OK STALE %d" % t2)
        self.assertEqual(self.q.req("CHECK k %d" % t2), "OK CURRENT")

    def test_shared_and_permits(self):
        for key, opt in (("s", "SHARED"), ("m", "LIMIT 3")):
            ta = self.assertToken(self.c1.req("ACQUIRE %s %s" % (key, opt)))
            tb = self.assertToken(self.c2.req("ACQUIRE %s %s" % (key, opt)))
            for t in (ta, tb):
                self.assertEqual(self.q.req("CHECK %s %d" % (key, t)),
                                 "OK CURRENT")
            self.assertEqual(self.c2.req("RELEASE " + key), "OK 0")
            self.assertEqual(self.q.req("CHECK %s %d" % (key, tb)),
                             "OK STALE %d" % ta)
            self.assertEqual(self.q.req("CHECK %s %d" % (key, ta)),
                             "OK CURRENT")
            self.assertEqual(self.c1.req("RELEASE " + key), "OK 0")
            self.assertEqual(self.q.req("CHECK %s %d" % (key, ta)),
                             "OK STALE -")

    def test_bad_input_is_badarg_and_session_goes_on(self):
        t = self.assertToken(self.c1.req("ACQUIRE k"))
        for line in ("CHECK k", "CHECK", "CHECK k 0", "CHECK k -1",
                     "CHECK k 9007199254740992", "CHECK k x1", "CHECK k 1 2"):
            self.assertErr(self.c1.req(line), "BADARG")
        self.assertEqual(self.c1.req("PING"), "OK PONG")
        self.assertEqual(self.c1.req("CHECK k %d" % t), "OK CURRENT")
        self.assertEqual(self.c1.req("HELD"), "OK 1 k")

    def test_foreign_value_is_stale_dash(self):
        self.redis.cli("SET", self.lock_key("f"), "not a broker's value")
        self.assertEqual(self.q.req("CHECK f 1"), "OK STALE -")


class TestCheckAcl(BrokerTestCase):
    def test_key_globs_apply(self):
        tok = "alpha-" + "1" * 40
        d = tempfile.mkdtemp(prefix="lbt-chk-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "acl")
        with open(path, "w") as f:
            f.write("app alpha token-sha256 %s keys alpha:*\n"
                    % hashlib.sha256(tok.encode()).hexdigest())
        b = self.start_broker("--acl_file", path, auth=tok)
        c = self.connect(b)
        self.assertEqual(c.req("AUTH " + tok), "OK")
        self.assertErr(c.req("CHECK beta:1 1"), "DENIED")
        self.assertEqual(c.req("CHECK alpha:1 1"), "OK STALE -")


if __name__ == "__main__":
    unittest.main()
