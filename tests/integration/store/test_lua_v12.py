"""
test_lua_v12.py - the scripts behind protocol 1.2's CHECK, VALUE and WATCH,
run straight against a real redis-server: no broker.

check.lua answers whether a token's hold is alive; value.lua keeps an
exclusive holder's value beside its lock ("<token> <text>", shown only
while that token holds the key); watch.lua marks a key watched and reads
its holders with the value; while the mark exists, a script that changes
the key says "held <name>" on the release channel (holders.lua, changed).
"""

import os
import time
import unittest

from harness import Redis
from test_lua_multi import (BROKER, DELAY, FENCE, P, RELEASED, SCRIPTS,
                            WANTED, Subscriber, expand, lk)

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


if __name__ == "__main__":
    unittest.main()
