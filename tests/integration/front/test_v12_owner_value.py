"""
test_v12_owner_value.py - OWNER <key> VALUE (protocol 1.2): an exclusive
holder's client-id, TTL left, token and value ("-": none), read from
Redis (any broker).

VALUE and PROCLAIM, which write the value, are not in this broker yet:
these tests write the value key as value.lua does ("<token> <text>" at
<prefix>:value:<key>) and check what OWNER ... VALUE reads of it:

  - the holder's value is shown, on its broker and on another;
  - a value left by an older hold (another token) is never shown: "-";
  - no value key: "-"; bytes a broker would not write: "-";
  - a shared lock, a semaphore and a free key answer as plain OWNER;
  - plain OWNER keeps its v1 reply; bad input is ERR BADARG.
"""

import re
import unittest

import harness
from harness import BrokerTestCase, UUID_RE


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class TestOwnerValue(BrokerTestCase):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_broker()
        self.b2 = self.start_broker()
        self.h = self.connect(self.b1)
        self.q = self.connect(self.b2)

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


if __name__ == "__main__":
    unittest.main()
