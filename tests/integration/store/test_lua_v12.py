"""
test_lua_v12.py - the scripts behind protocol 1.2's CHECK, VALUE and WATCH,
run straight against a real redis-server: no broker.

check.lua answers whether a token's hold is alive (lib/holders.lua,
hold_alive), and setif.lua and delif.lua write or delete a data key only
when it is, in the same call; value.lua keeps an
exclusive holder's value beside its lock ("<token> <text>", shown only
while that token holds the key); watch.lua marks a key watched and reads
its holders with the value; while the mark exists, a script that changes
the key says "held <name>" on the release channel (holders.lua, changed).
TestLuaV12Library runs every test again as FCALLs of the function library
embed.sh makes (what a broker calls on Redis 7).
"""

import os
import time
import unittest

from harness import Redis
from test_lua_multi import (BROKER, DELAY, FENCE, P, RELEASED, SCRIPTS,
                            WANTED, Subscriber, expand, lk, load_library)

_redis = None


def setUpModule():
    global _redis
    _redis = Redis()


def tearDownModule():
    global _redis
    if _redis is not None:
        _redis.close()
        _redis = None


def vk(name):
    return P + ":value:" + name


def mark(name):
    return P + ":watched:" + name


class TestLuaV12(unittest.TestCase):
    sha = {}

    @classmethod
    def setUpClass(cls):
        for f in sorted(os.listdir(SCRIPTS)):
            if f.endswith(".lua"):
                cls.sha[f[:-4]] = _redis.cli("SCRIPT", "LOAD", expand(f))

    def setUp(self):
        _redis.cli("FLUSHALL")
        self.subs = []

    def tearDown(self):
        for s in self.subs:
            s.close()

    def ev(self, script, keys, args):
        return _redis.cli("EVALSHA", self.sha[script], len(keys), *keys,
                          *args)

    def acq(self, key, owner, ttl=10000):
        r = self.ev("acquire", [lk(key), FENCE, DELAY],
                    [owner, ttl, WANTED, BROKER + " " + key, 0])
        self.assertEqual(r[0], 1, r)
        return r[1]

    def sacq(self, key, owner, kind, ttl=10000):
        r = self.ev("sacquire", [lk(key), FENCE, DELAY],
                    [owner, ttl, WANTED, BROKER + " " + key, 0, kind])
        self.assertEqual(r[0], 1, r)
        return r[1]

    def check(self, key, token):
        return self.ev("check", [lk(key)], [str(token)])

    def value(self, key, holder, text):
        return self.ev("value", [lk(key), vk(key), mark(key)],
                       [holder, text, RELEASED, key])

    def watch(self, key, ttl=0):
        return self.ev("watch", [lk(key), vk(key), mark(key)], [ttl])

    def setif(self, key, token, data, value, ttl="0"):
        return self.ev("setif", [lk(key), data], [str(token), value, ttl])

    def delif(self, key, token, data):
        return self.ev("delif", [lk(key), data], [str(token)])

    def test_setif_writes_only_while_the_hold_is_alive(self):
        self.assertEqual(self.setif("f", 5, "d:f", "x"), 0)
        self.assertIsNone(_redis.cli("GET", "d:f"))
        t1 = self.acq("f", "c1")
        self.assertEqual(self.setif("f", t1, "d:f", "one"), 1)
        self.assertEqual(_redis.cli("GET", "d:f"), "one")
        self.assertEqual(_redis.cli("PTTL", "d:f"), -1)
        self.assertEqual(self.setif("f", t1 - 1, "d:f", "old"), 0)
        self.assertEqual(self.setif("f", t1, "d:f", "two", "5000"), 1)
        self.assertTrue(0 < _redis.cli("PTTL", "d:f") <= 5000)
        self.assertEqual(self.setif("f", t1, "d:f", "three", "keepttl"), 1)
        self.assertEqual(_redis.cli("GET", "d:f"), "three")
        self.assertTrue(0 < _redis.cli("PTTL", "d:f") <= 5000)
        self.assertEqual(self.setif("f", t1, "d:f", "four"), 1)
        self.assertEqual(_redis.cli("PTTL", "d:f"), -1)
        # the key lost (deleted) and taken by another: the old token
        # writes nothing, the new one does
        _redis.cli("DEL", lk("f"))
        t2 = self.acq("f", "c2")
        self.assertEqual(self.setif("f", t1, "d:f", "stale"), 0)
        self.assertEqual(_redis.cli("GET", "d:f"), "four")
        self.assertEqual(self.setif("f", t2, "d:f", "five"), 1)
        self.assertEqual(_redis.cli("GET", "d:f"), "five")
        # a resumed session's value ("<client-id>/<gen>:<token>")
        _redis.cli("SET", lk("f"), "c2/2:%d" % t2, "PX", 10000)
        self.assertEqual(self.setif("f", t2, "d:f", "six"), 1)

    def test_delif_deletes_only_while_the_hold_is_alive(self):
        t = self.acq("g", "c1")
        _redis.cli("SET", "d:g", "x")
        self.assertEqual(self.delif("g", t + 1, "d:g"), 0)
        self.assertEqual(_redis.cli("EXISTS", "d:g"), 1)
        self.assertEqual(self.delif("g", t, "d:g"), 1)
        self.assertEqual(_redis.cli("EXISTS", "d:g"), 0)
        self.assertEqual(self.delif("g", t, "d:g"), 1)     # absent: done
        self.ev("release", [lk("g")], ["c1:%d" % t, RELEASED, "g"])
        _redis.cli("SET", "d:g", "y")
        self.assertEqual(self.delif("g", t, "d:g"), 0)
        self.assertEqual(_redis.cli("GET", "d:g"), "y")

    def test_fenced_writes_of_shared_holders_permits_and_lingers(self):
        a = self.sacq("s", "c1", 0)
        b = self.sacq("s", "c2", 0)
        self.assertEqual(self.setif("s", a, "d:s", "a"), 1)
        self.assertEqual(self.setif("s", b, "d:s", "b"), 1)
        self.assertEqual(self.ev("linger", [lk("s")], ["c2:%d" % b, 5000,
                                                       RELEASED, "s"]), 1)
        self.assertEqual(self.setif("s", b, "d:s", "b2"), 0)
        self.assertEqual(self.delif("s", b, "d:s"), 0)
        self.assertEqual(_redis.cli("GET", "d:s"), "b")
        p = self.sacq("m", "c1", 2, ttl=100)
        q = self.sacq("m", "c2", 2)
        self.assertEqual(self.setif("m", p, "d:m", "p"), 1)
        time.sleep(0.15)                    # p's permit expired
        self.assertEqual(self.setif("m", p, "d:m", "p2"), 0)
        self.assertEqual(self.setif("m", q, "d:m", "q"), 1)
        self.assertEqual(_redis.cli("GET", "d:m"), "q")
        # an exclusive lingering release: no hold
        t = self.acq("x", "c1")
        self.assertEqual(self.ev("linger", [lk("x")], ["c1:%d" % t, 5000,
                                                       RELEASED, "x"]), 1)
        self.assertEqual(self.setif("x", t, "d:x", "v"), 0)
        self.assertIsNone(_redis.cli("GET", "d:x"))

    def test_check_exclusive_current_then_stale(self):
        self.assertEqual(self.check("k", 5), [0, -1])
        t1 = self.acq("k", "c1")
        self.assertEqual(self.check("k", t1), [1])
        self.assertEqual(self.check("k", t1 - 1), [0, t1])
        self.ev("release", [lk("k")], ["c1:%d" % t1, RELEASED, "k"])
        self.assertEqual(self.check("k", t1), [0, -1])
        t2 = self.acq("k", "c2")
        self.assertGreater(t2, t1)
        self.assertEqual(self.check("k", t1), [0, t2])

    def test_check_lingering_release_is_no_hold(self):
        t1 = self.acq("g", "c1")
        self.assertEqual(self.ev("linger", [lk("g")], ["c1:%d" % t1, 5000,
                                                       RELEASED, "g"]), 1)
        self.assertEqual(self.check("g", t1), [0, -1])
        a = self.sacq("h", "c1", 0)
        b = self.sacq("h", "c2", 0)
        self.assertEqual(self.ev("linger", [lk("h")], ["c2:%d" % b, 5000,
                                                       RELEASED, "h"]), 1)
        self.assertEqual(self.check("h", b), [0, a])
        self.assertEqual(self.check("h", a), [1])

    def test_check_shared_and_permits(self):
        a = self.sacq("s", "c1", 0)
        b = self.sacq("s", "c2", 0)
        self.assertEqual(self.check("s", a), [1])
        self.assertEqual(self.check("s", b), [1])
        self.assertEqual(self.check("s", 1), [0, max(a, b)])
        p = self.sacq("m", "c1", 2, ttl=100)
        q = self.sacq("m", "c2", 2)
        self.assertEqual(self.check("m", p), [1])
        time.sleep(0.15)                    # p's permit expired
        self.assertEqual(self.check("m", p), [0, q])
        self.assertEqual(self.check("m", q), [1])

    def test_value_belongs_to_its_token(self):
        t1 = self.acq("v", "c1")
        self.assertEqual(self.watch("v")[2], "")
        self.assertEqual(self.value("v", "c1:%d" % t1, "10.0.0.7:8080"), 1)
        got = self.watch("v")
        self.assertEqual((got[0], got[2]), ("c1:%d" % t1, "10.0.0.7:8080"))
        pttl = int(_redis.cli("PTTL", vk("v")))
        self.assertTrue(0 < pttl <= 10000, pttl)
        # not the holder: nothing written
        self.assertEqual(self.value("v", "c2:%d" % t1, "x"), 3)
        self.ev("release", [lk("v")], ["c1:%d" % t1, RELEASED, "v"])
        self.assertEqual(self.value("v", "c1:%d" % t1, "y"), 0)
        # the next holder does not show the last one's value
        t2 = self.acq("v", "c2")
        got = self.watch("v")
        self.assertEqual((got[0], got[2]), ("c2:%d" % t2, ""))

    def test_watch_mark_makes_changes_heard(self):
        sub = Subscriber(_redis.port, RELEASED)
        self.subs.append(sub)
        # unwatched: a grant says nothing
        t = self.acq("w", "c1")
        self.assertIsNone(sub.next(0.2))
        self.assertEqual(self.watch("w", 5000)[0], "c1:%d" % t)
        self.assertGreater(int(_redis.cli("PTTL", mark("w"))), 4000)
        self.assertEqual(self.value("w", "c1:%d" % t, "a"), 1)
        self.assertEqual(sub.next(), "held w")
        self.assertEqual(self.value("w", "c1:%d" % t, "a"), 1)
        self.assertIsNone(sub.next(0.2))    # same value: no news
        got = self.watch("w", 0)
        self.assertEqual((got[0], got[2]), ("c1:%d" % t, "a"))
        # (its TTL left, a ms apart from a second read's at a boundary)
        self.assertLessEqual(abs(got[1] - self.watch("w")[1]), 50)

    def test_owner_unchanged_by_the_value(self):
        t = self.acq("o", "c1")
        self.value("o", "c1:%d" % t, "v")
        r = self.ev("owner", [lk("o")], [])
        self.assertEqual(len(r), 2)
        self.assertEqual(r[0], "c1:%d" % t)
        self.assertEqual(_redis.cli("GET", lk("o")), "c1:%d" % t)


class TestLuaV12Library(TestLuaV12):
    """Every test above, each call an FCALL of the script's function in the
    library (loaded as a broker's handshake loads it), instead of EVALSHA
    of the script."""

    @classmethod
    def setUpClass(cls):
        cls.fn = load_library(_redis)

    def ev(self, script, keys, args):
        return _redis.cli("FCALL", self.fn[script], len(keys), *keys, *args)


if __name__ == "__main__":
    unittest.main()
