"""
test_check.py - CHECK <key> <token> (protocol 1.2): is that token's hold
alive in Redis now?  What a resource that keeps no highest-token table
asks.  Real Redis, real brokers; any session may ask, on any broker.
"""

import re
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

    def test_current_then_stale_once_lost_and_taken(self):
        holder = self.connect(self.b1)
        asker = self.connect(self.b2)          # another broker, no hold
        t = self.assertToken(holder.req("ACQUIRE res TTL 60000"))
        self.assertEqual(asker.req("CHECK res %d" % t), "OK CURRENT")
        self.assertEqual(asker.req("CHECK res %d" % (t - 1)),
                         "OK STALE %d" % t)
        # the key is lost (gone from Redis) and another takes it
        self.redis.cli("DEL", self.lock_key("res"))
        thief = self.connect(self.b2)
        t2 = self.assertToken(thief.req("ACQUIRE res"))
        self.assertGreater(t2, t)
        self.assertEqual(asker.req("CHECK res %d" % t), "OK STALE %d" % t2)
        self.assertEqual(holder.req("CHECK res %d" % t2), "OK CURRENT")
        self.assertEqual(thief.req("RELEASE res"), "OK 0")
        self.assertEqual(asker.req("CHECK res %d" % t2), "OK STALE -")
        self.assertEqual(asker.req("CHECK never %d" % t), "OK STALE -")

    def test_shared_and_permits(self):
        a, b = self.connect(self.b1), self.connect(self.b2)
        asker = self.connect(self.b1)
        ta = self.assertToken(a.req("ACQUIRE cat SHARED"))
        tb = self.assertToken(b.req("ACQUIRE cat SHARED"))
        self.assertEqual(asker.req("CHECK cat %d" % ta), "OK CURRENT")
        self.assertEqual(asker.req("CHECK cat %d" % tb), "OK CURRENT")
        self.assertEqual(b.req("RELEASE cat"), "OK 0")
        # the newest live token is the one still held
        self.assertEqual(asker.req("CHECK cat %d" % tb), "OK STALE %d" % ta)
        pa = self.assertToken(a.req("ACQUIRE quota LIMIT 2"))
        pb = self.assertToken(b.req("ACQUIRE quota LIMIT 2"))
        for p in (pa, pb):
            self.assertEqual(asker.req("CHECK quota %d" % p), "OK CURRENT")
        self.assertEqual(a.req("RELEASE quota"), "OK 0")
        self.assertEqual(asker.req("CHECK quota %d" % pa),
                         "OK STALE %d" % pb)

    def test_a_lingering_release_is_not_current(self):
        """RELEASE ... LINGER ends the hold (the session no longer holds
        the key; nobody can take it for the linger): its token is not
        current, and no hold is alive (STALE -).  A write carrying it
        after the release is refused."""
        holder = self.connect(self.b1)
        asker = self.connect(self.b2)
        t = self.assertToken(holder.req("ACQUIRE job"))
        self.assertEqual(holder.req("RELEASE job LINGER 2000"), "OK 0")
        self.assertErr(holder.req("RENEW job"), "NOTHELD")
        self.assertRegex(asker.req("OWNER job"),
                         r"\AOK %s [0-9]+ %d\Z" % (harness.UUID_RE, t))
        self.assertEqual(asker.req("CHECK job %d" % t), "OK STALE -")
        self.assertEqual(holder.req("CHECK job %d" % t), "OK STALE -")
        # shared: the lingering read is no live holder either
        a, b = self.connect(self.b1), self.connect(self.b2)
        ta = self.assertToken(a.req("ACQUIRE cat SHARED"))
        tb = self.assertToken(b.req("ACQUIRE cat SHARED"))
        self.assertEqual(b.req("RELEASE cat LINGER 2000"), "OK 0")
        self.assertEqual(asker.req("CHECK cat %d" % tb), "OK STALE %d" % ta)
        self.assertEqual(a.req("RELEASE cat LINGER 2000"), "OK 0")
        self.assertEqual(asker.req("CHECK cat %d" % ta), "OK STALE -")

    def test_bad_input_answers_err_and_the_session_goes_on(self):
        c = self.connect(self.b1)
        for line in ("CHECK", "CHECK k", "CHECK k 0", "CHECK k -3",
                     "CHECK k x1", "CHECK k 9007199254740992",
                     "CHECK k 1 2"):
            self.assertErr(c.req(line), "BADARG")
        self.assertEqual(c.req("CHECK k 9007199254740991"), "OK STALE -")
        self.assertEqual(c.req("PING"), "OK PONG")

    def test_owner_value_of_a_hold_without_one(self):
        """OWNER ... VALUE answers its 1.2 form, "-" for a hold with no
        value; plain OWNER keeps its v1 reply."""
        c = self.connect(self.b1)
        self.assertEqual(c.req("OWNER v VALUE"), "OK -")
        t = self.assertToken(c.req("ACQUIRE v"))
        m = re.fullmatch(r"OK (\S+) ([0-9]+) ([0-9]+) -",
                         c.req("OWNER v VALUE"))
        self.assertIsNotNone(m)
        self.assertEqual(int(m.group(3)), t)
        self.assertRegex(c.req("OWNER v"), r"\AOK \S+ [0-9]+ %d\Z" % t)
        self.assertEqual(c.req("PING"), "OK PONG")


if __name__ == "__main__":
    unittest.main()
