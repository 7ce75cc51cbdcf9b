"""
test_v12_owner_value.py - OWNER <key> VALUE (protocol 1.2): an exclusive
holder's client-id, TTL left, token and value ("-": none), read from
Redis (any broker).

TestOwnerValue writes the value key as value.lua does ("<token> <text>"
at <prefix>:value:<key>) and checks what OWNER ... VALUE reads of it:

  - the holder's value is shown, on its broker and on another;
  - a value left by an older hold (another token) is never shown: "-";
  - no value key: "-"; bytes a broker would not write: "-";
  - a shared lock, a semaphore and a free key answer as plain OWNER;
  - plain OWNER keeps its v1 reply; bad input is ERR BADARG.

TestProclaim: PROCLAIM <key> <text>, the holder's way to set it:
  - PROCLAIM by the holder: OK; OWNER ... VALUE on another broker shows it;
    a second PROCLAIM replaces it (same token, no new hold);
  - renewals keep the value alive past the lock's TTL;
  - a session that does not hold the key (or holds it shared): ERR NOTHELD;
    the key lost in Redis: ERR LOST; bad text: ERR BADARG; the session goes
    on each time;
  - after RELEASE the value is gone with the hold.
"""

import re
import time
import unittest

import harness
from harness import BrokerTestCase, UUID_RE


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class TwoBrokers(BrokerTestCase):
    """A holder's session h on one broker, another session q on a
    second."""
    def setUp(self):
        super().setUp()
        self.b1 = self.start_broker()
        self.b2 = self.start_broker()
        self.h = self.connect(self.b1)
        self.q = self.connect(self.b2)


class TestOwnerValue(TwoBrokers):
    def value_key(self, key):
        return "%s:value:%s" % (self.prefix, key)

    def owner_value(self, c, key):
        r = c.req("OWNER %s VALUE" % key)
        m = re.fullmatch(r"OK (%s|\?) ([0-9]+) ([0-9]+) (\S+)" % UUID_RE, r)
        self.assertIsNotNone(m, r)
        return m.group(1), int(m.group(3)), m.group(4)

    def test_holder_value_shown_on_any_broker(self):
        t = self.assertToken(self.h.req("ACQUIRE leader TTL 30000"))
        self.redis.cli("SET", self.value_key("leader"),
                       "%d 10.0.0.7:8080" % t, "PX", "30000")
        cid = self.h.req("OWNER leader").split()[1]
        for c in (self.h, self.q):
            who, tok, val = self.owner_value(c, "leader")
            self.assertEqual((tok, val), (t, "10.0.0.7:8080"))
        self.assertEqual(self.owner_value(self.h, "leader")[0], cid)
        # plain OWNER: the v1 reply, no value
        self.assertRegex(self.q.req("OWNER leader"),
                         r"\AOK %s [0-9]+ %d\Z" % (UUID_RE, t))

    def test_value_of_another_token_or_none_is_dash(self):
        t = self.assertToken(self.h.req("ACQUIRE leader TTL 30000"))
        self.assertEqual(self.owner_value(self.q, "leader")[1:], (t, "-"))
        self.redis.cli("SET", self.value_key("leader"),
                       "%d 10.0.0.1:1" % (t - 1))
        self.assertEqual(self.owner_value(self.q, "leader")[1:], (t, "-"))
        self.redis.cli("SET", self.value_key("leader"), "%d bad value" % t)
        self.assertEqual(self.owner_value(self.q, "leader")[1:],
                         (t, "-"))
        self.redis.cli("SET", self.value_key("leader"), "%d " % t + "x" * 300)
        self.assertEqual(self.owner_value(self.q, "leader")[1:], (t, "-"))

    def test_other_kinds_and_free_answer_as_plain_owner(self):
        self.assertEqual(self.q.req("OWNER nobody VALUE"), "OK -")
        self.assertToken(self.h.req("ACQUIRE s SHARED"))
        self.assertToken(self.h.req("ACQUIRE m LIMIT 2"))
        for key in ("s", "m"):
            self.redis.cli("SET", self.value_key(key), "1 x")
            plain = self.q.req("OWNER " + key)
            self.assertRegex(plain, r"\AOK (SHARED|SEMAPHORE) ")
            self.assertEqual(self.q.req("OWNER %s VALUE" % key)
                             .split()[:3], plain.split()[:3])

    def test_bad_input(self):
        for line in ("OWNER k VALUE x", "OWNER k VALU", "OWNER VALUE"):
            r = self.q.req(line)
            if line == "OWNER VALUE":
                # a key named VALUE: plain OWNER
                self.assertEqual(r, "OK -")
            else:
                self.assertErr(r, "BADARG")
        self.assertEqual(self.q.req("PING"), "OK PONG")



class TestProclaim(TwoBrokers):
    def value_shown(self, key):
        return self.q.req("OWNER %s VALUE" % key).split()[-1]

    def test_proclaim_then_replace(self):
        t = self.assertToken(self.h.req("ACQUIRE leader"))
        self.assertEqual(self.value_shown("leader"), "-")
        self.assertEqual(self.h.req("PROCLAIM leader 10.0.0.7:8080"), "OK")
        self.assertEqual(self.q.req("OWNER leader VALUE").split()[3:],
                         [str(t), "10.0.0.7:8080"])
        self.assertEqual(self.h.req("PROCLAIM leader 10.0.0.8:9090"), "OK")
        self.assertEqual(self.value_shown("leader"), "10.0.0.8:9090")
        self.assertEqual(self.h.req("HELD"), "OK 1 leader")
        self.assertEqual(self.h.req("RELEASE leader"), "OK 0")
        self.assertEqual(self.q.req("OWNER leader VALUE"), "OK -")
        # the next holder does not inherit it (the value names its token)
        self.assertToken(self.q.req("ACQUIRE leader"))
        self.assertEqual(self.value_shown("leader"), "-")

    def test_renewals_keep_the_value(self):
        self.assertToken(self.h.req("ACQUIRE leader TTL 1500"))
        self.assertEqual(self.h.req("PROCLAIM leader a:1"), "OK")
        time.sleep(3.2)         # two TTLs: only renewals keep it
        self.assertEqual(self.value_shown("leader"), "a:1")
        self.assertEqual(self.h.req("RENEW leader TTL 1500"), "OK 1500")
        self.assertEqual(self.value_shown("leader"), "a:1")

    def test_not_held_lost_and_bad_input(self):
        self.assertErr(self.q.req("PROCLAIM leader x"), "NOTHELD")
        self.assertToken(self.h.req("ACQUIRE leader TTL 30000"))
        self.assertErr(self.q.req("PROCLAIM leader x"), "NOTHELD")
        self.assertToken(self.h.req("ACQUIRE s SHARED"))
        self.assertErr(self.h.req("PROCLAIM s x"), "NOTHELD")
        for line in ("PROCLAIM leader", "PROCLAIM leader " + "x" * 257,
                     "PROCLAIM leader a b", "PROCLAIM"):
            self.assertErr(self.h.req(line), "BADARG")
        self.assertEqual(self.value_shown("leader"), "-")
        self.redis.cli("DEL", self.lock_key("leader"))
        self.assertErr(self.h.req("PROCLAIM leader x"), "LOST")
        self.assertEqual(self.h.req("HELD"), "OK 1 s")
        self.assertEqual(self.h.req("PING"), "OK PONG")


if __name__ == "__main__":
    unittest.main()
