"""
test_lua_grants.py - a release's remote grant (lib/holders.lua,
remote_grant) run straight against a real redis-server: no broker.

A release that frees a key someone on another broker waits for (a listen
mark, a record in <prefix>:rwait:<name>) grants it to the earliest record
in the same call, with a token from the counter, and publishes the grant
on that broker's channel.  The lean batch (batch/lean.lua) tells the grant
what it already knows: the counter's value as it read or wrote it, and
whether the key is watched; these tests hold the grant to the fencing-token
rules when it was told, and to the same answers as release.lua's, which
tells it nothing.  A subscriber stands for the waiting broker (PUBLISH
counts its receivers: a grant nobody hears is not made).
"""

import time
import unittest

from harness import module_redis_start, module_redis_stop
from test_lua_multi import Subscriber, generated, load_library

P = "lg"
BID = "c" * 36              # the waiting broker's id
RECORD_OWNER = "w" * 36     # the waiter's client id

_redis = None


def setUpModule():
    global _redis
    _redis = module_redis_start()


def tearDownModule():
    module_redis_stop()


def lean_fn():
    return "lean_" + generated()["library.name"].rsplit("_", 1)[1]


class TestRemoteGrant(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.fn = load_library(_redis)

    def setUp(self):
        r = _redis.cli
        r("FLUSHALL")
        now = int(time.time() * 1000)
        # the waiting broker, announced with remote grants, and heard
        r("ZADD", P + ":brokers", now + 60000, BID + " 1.2.0 marks,grants")
        self.sub = Subscriber(_redis.port, P + ":granted:" + BID)
        self.addCleanup(self.sub.close)
        self.watchers = Subscriber(_redis.port, P + ":released")
        self.addCleanup(self.watchers.close)

    def held_and_awaited(self, name, value, watched=False):
        """name held with value, and awaited by a record of BID's."""
        r = _redis.cli
        r("SET", P + ":lock:" + name, value, "PX", 30000)
        r("SET", P + ":listen", "1", "PX", 30000)
        r("SET", P + ":listen:" + name, "1", "PX", 30000)
        if watched:
            r("SET", P + ":watched:" + name, "1", "PX", 30000)
        r("ZADD", P + ":rwait:" + name, 1,
          "%s 7 30000 %s " % (BID, RECORD_OWNER))

    def lean(self, acquires, releases):
        """One lean call: acquires [(name, owner, reserve)], releases
        [(name, value)]; its answer."""
        keys = [P + ":fence", P + ":lockdelay", P + ":listen",
                P + ":listenall"]
        keys += [P + ":lock:" + n for n, _ in releases]
        keys += [P + ":lock:" + n for n, _, _ in acquires]
        args = ["@lean", len(acquires), len(releases), P + ":wanted",
                P + ":released", "a" * 36 + " "]
        for _, owner, reserve in acquires:
            args += [owner, 30000, 0, reserve]
        args += [v for _, v in releases]
        return _redis.cli("FCALL", lean_fn(), len(keys), *keys, *args)

    def granted(self):
        """The grant BID heard: (name, wait id, owner, token)."""
        msg = self.sub.next(2.0)
        self.assertIsNotNone(msg, "no grant published")
        name, wid, owner, token, _ms = msg.split(" ")
        return name, wid, owner, int(token)

    def test_grant_in_a_batch_that_took_tokens_is_above_them(self):
        # the batch's acquire takes its token and 32 more set aside; the
        # grant after it in the same call must come above all 33 (the
        # counter as the batch wrote it, not as it read it)
        _redis.cli("SET", P + ":fence", 1)
        self.held_and_awaited("g1", "h" * 36 + ":5")
        got = self.lean([("fresh", "o" * 36, 32)], [("g1", "h" * 36 + ":5")])
        self.assertEqual(got[1], 1)
        first, more = got[0][1], got[0][2]
        self.assertEqual(more, 32)
        name, wid, owner, token = self.granted()
        self.assertEqual((name, wid, owner), ("g1", "7", RECORD_OWNER))
        self.assertGreater(token, first + more)
        self.assertEqual(int(_redis.cli("GET", P + ":fence")), token)
        self.assertEqual(_redis.cli("GET", P + ":lock:g1"),
                         "%s:%d" % (RECORD_OWNER, token))

    def test_grant_above_a_counter_ahead_of_the_clock(self):
        # a counter far ahead (tokens of a master whose clock ran ahead):
        # the grant reads it, as the batch read it, and goes above it
        ahead = int(time.time() * 1e6) + 10 ** 12
        _redis.cli("SET", P + ":fence", ahead)
        self.held_and_awaited("g2", "h" * 36 + ":5")
        self.assertEqual(self.lean([], [("g2", "h" * 36 + ":5")]), [1])
        self.assertEqual(self.granted()[3], ahead + 1)
        self.assertEqual(int(_redis.cli("GET", P + ":fence")), ahead + 1)

    def test_two_grants_in_one_call_take_two_tokens(self):
        for n in ("g3", "g4"):
            self.held_and_awaited(n, "h" * 36 + ":5")
        got = self.lean([], [("g3", "h" * 36 + ":5"),
                             ("g4", "h" * 36 + ":5")])
        self.assertEqual(got, [1, 1])
        a, b = self.granted()[3], self.granted()[3]
        self.assertGreater(b, a)
        self.assertEqual(int(_redis.cli("GET", P + ":fence")), b)

    def test_watchers_hear_the_new_holder_when_watched(self):
        self.held_and_awaited("g5", "h" * 36 + ":5", watched=True)
        self.held_and_awaited("g6", "h" * 36 + ":5")
        self.assertEqual(self.lean([], [("g5", "h" * 36 + ":5"),
                                        ("g6", "h" * 36 + ":5")]), [1, 1])
        self.assertEqual(self.watchers.next(1.0), "held g5")
        self.assertIsNone(self.watchers.next(0.3))  # g6: nobody watches

    def test_release_script_grants_as_the_batch_does(self):
        # release.lua tells the grant nothing: it reads both itself
        ahead = int(time.time() * 1e6) + 10 ** 12
        _redis.cli("SET", P + ":fence", ahead)
        self.held_and_awaited("g7", "h" * 36 + ":5", watched=True)
        self.assertEqual(_redis.cli(
            "FCALL", self.fn["release"], 1, P + ":lock:g7", "h" * 36 + ":5",
            P + ":released", "g7"), 1)
        self.assertEqual(self.granted()[3], ahead + 1)
        self.assertEqual(self.watchers.next(1.0), "held g7")


if __name__ == "__main__":
    unittest.main()
