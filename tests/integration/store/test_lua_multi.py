"""
test_lua_multi.py - the Lua scripts on shared locks and semaphores (issue
13), run straight against a real redis-server: no broker.

A shared lock or a semaphore is a sorted set under the lock key's own name
(scripts/lib/holders.lua): "#" scored 0 (shared) or -n (n permits), one
member "<owner>:<token>" per holder scored by its expiry in ms.  Each
script is loaded from scripts/ with "-- @include" expanded as
scripts/embed.sh does, and called with EVALSHA in single mode (3 KEYS for
the grant scripts), so every test reads as the calls a broker would make
and what Redis holds after them.  TestLuaMultiLibrary runs every test
again on the function library embed.sh makes of the same scripts (FUNCTION
LOAD, then FCALL <script>_<hash>): what a broker calls on Redis 7.
"""

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

from harness import REPO, Redis, RedisError, _RespReader, _resp_encode

SCRIPTS = os.path.join(REPO, "scripts")
MAX_TOKEN = 9007199254740991    # 2^53 - 1: the counter's last token

P = "lm"                        # key prefix
FENCE = P + ":fence"
DELAY = P + ":lockdelay"
WANTED = P + ":wanted"
RELEASED = P + ":released"
WRITERS = P + ":writers:"
BROKER = "b" * 36

_redis = None


def setUpModule():
    global _redis
    _redis = Redis()


def tearDownModule():
    global _redis
    if _redis is not None:
        _redis.close()
        _redis = None


def expand(name):
    """A script's text as scripts/embed.sh compiles it: each line
    "-- @include NAME" replaced by scripts/lib/NAME verbatim, every other
    line written with a newline."""
    with open(os.path.join(SCRIPTS, name)) as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out = []
    for line in lines:
        if line.startswith("-- @include "):
            with open(os.path.join(SCRIPTS, "lib",
                                   line[len("-- @include "):])) as lib:
                out.append(lib.read())
        else:
            out.append(line + "\n")
    return "".join(out)


_gen = {}


def generated():
    """What the build embeds, made by scripts/embed.sh in a temp dir (in
    the Makefile's sorted order): {"batch": the batch script's text,
    "library": the function library's, "library.name": its name, and per
    script name + ".sha" (its SHA1 as a script) and name + ".fn" (its
    function in the library)}, batch included."""
    if not _gen:
        d = tempfile.mkdtemp(prefix="lbt-embed-")
        try:
            files = sorted(os.path.join(SCRIPTS, f)
                           for f in os.listdir(SCRIPTS) if f.endswith(".lua"))
            subprocess.run(["sh", os.path.join(SCRIPTS, "embed.sh"), d] +
                           files, check=True)
            for name in ("batch", "library"):
                with open(os.path.join(d, name + ".lua")) as f:
                    _gen[name] = f.read()
            with open(os.path.join(d, "scripts.c")) as f:
                c = f.read()
        finally:
            shutil.rmtree(d, ignore_errors=True)
        # each entry ends with its SHA1 and function:
        # { "name", "text"..., "sha", "name_hash" }
        for name, sha, fn in re.findall(
                r'\{ "([a-z_]+)",.*?, "([0-9a-f]{40})", "([a-z_0-9]+)" \}',
                c, re.S):
            _gen[name + ".sha"] = sha
            _gen[name + ".fn"] = fn
        _gen["library.name"] = re.match(r"#!lua name=(\S+)",
                                        _gen["library"]).group(1)
    return _gen


def lk(name):
    return P + ":lock:" + name


def load_library(redis):
    """The function library embed.sh makes, loaded into redis as a
    broker's handshake loads it (one loaded before is kept); returns
    {script name: its function's name}, for FCALL."""
    gen = generated()
    try:
        redis.cli("FUNCTION", "LOAD", gen["library"])
    except RedisError as e:
        if "already exists" not in str(e):
            raise
    return {f[:-4]: gen[f[:-4] + ".fn"]
            for f in os.listdir(SCRIPTS) if f.endswith(".lua")}


class Subscriber:
    """One connection SUBSCRIBEd to a channel; next() is its next message
    (None if none arrives in time)."""

    def __init__(self, port, channel):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=2)
        self.sock.sendall(_resp_encode(["SUBSCRIBE", channel]))
        self.reader = _RespReader(self.sock)
        self.reader.reply()     # the subscribe confirmation

    def next(self, timeout=0.5):
        self.sock.settimeout(timeout)
        try:
            msg = self.reader.reply()
        except socket.timeout:
            return None
        return msg[2]

    def close(self):
        self.sock.close()


class TestLuaMulti(unittest.TestCase):
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

    # -- calls, as store.c makes them (single mode) --

    def r(self, *args):
        return _redis.cli(*args)

    def ev(self, script, keys, args):
        return self.r("EVALSHA", self.sha[script], len(keys), *keys, *args)

    def sacq(self, key, owner, kind, ttl=10000, wait=0, seen=0,
             broker=BROKER, full=False):
        """sacquire.lua; a refusal answers its code and ms only (its
        third element, the writers seen, with full)."""
        r = self.ev("sacquire", [lk(key), FENCE, DELAY, WRITERS + key],
                    [owner, ttl, WANTED, broker + " " + key, wait, kind,
                     seen])
        return r if full or r[0] != 0 else r[:2]

    def wmark(self, key, owner, op="wait", arg=3000, broker="w" * 36):
        return self.ev("wmark", [WRITERS + key],
                       [op, owner, broker, arg, WANTED, key, RELEASED])

    def acq(self, key, owner, ttl=10000, wait=0):
        return self.ev("acquire", [lk(key), FENCE, DELAY],
                       [owner, ttl, WANTED, BROKER + " " + key, wait])

    def rel(self, key, value):
        return self.ev("release", [lk(key)], [value, RELEASED, key])

    def renew(self, items, reassert=False):
        """items: (key, value, ttl_arg) with ttl_arg "<ttl>" or
        "<ttl>:<kind>"."""
        keys = [lk(k) for k, _, _ in items]
        args = [v for _, v, _ in items] + [t for _, _, t in items]
        if reassert:
            return self.ev("reassert", keys + [DELAY], args)
        return self.ev("renew", keys, args)

    def owner(self, key):
        return self.ev("owner", [lk(key)], [])

    def subscribe(self, channel):
        s = Subscriber(_redis.port, channel)
        self.subs.append(s)
        return s

    # -- what Redis holds --

    def holders(self, key):
        """{member: score} of a set's holders ("#" left out)."""
        flat = self.r("ZRANGE", lk(key), 0, -1, "WITHSCORES")
        return {flat[i]: float(flat[i + 1]) for i in range(0, len(flat), 2)
                if flat[i] != "#"}

    def kind_score(self, key):
        return self.r("ZSCORE", lk(key), "#")

    def granted(self, reply):
        self.assertEqual(reply[0], 1, reply)
        self.assertGreater(reply[1], 0)
        return reply[1]

    def now_ms(self):
        t = self.r("TIME")
        return int(t[0]) * 1000 + int(t[1]) // 1000

    def now_us(self):
        t = self.r("TIME")
        return int(t[0]) * 1000000 + int(t[1])

    # -- shared locks --

    def test_shared_holders_coexist_and_exclusive_waits_for_the_last(self):
        t1 = self.granted(self.sacq("k", "A", 0, ttl=5000))
        t2 = self.granted(self.sacq("k", "B", 0, ttl=9000))
        self.assertGreater(t2, t1)
        self.assertEqual(set(self.holders("k")),
                         {"A:%d" % t1, "B:%d" % t2})
        self.assertEqual(self.kind_score("k"), "0")
        wanted = self.subscribe(WANTED)
        code, pttl = self.acq("k", "C", wait=1)
        self.assertEqual(code, 0)
        self.assertTrue(8000 < pttl <= 9000, pttl)     # the last reader's
        self.assertEqual(wanted.next(), BROKER + " k")
        self.assertEqual(self.acq("k", "C", wait=0)[0], 0)
        self.assertIsNone(wanted.next(0.1))            # no wait: no news
        self.assertEqual(self.r("TYPE", lk("k")), "zset")

    def test_exclusive_holder_keeps_readers_out(self):
        self.granted(self.acq("k", "A", ttl=7000))
        wanted = self.subscribe(WANTED)
        code, pttl = self.sacq("k", "B", 0, wait=1)
        self.assertEqual(code, 0)
        self.assertTrue(6000 < pttl <= 7000, pttl)
        self.assertEqual(wanted.next(), BROKER + " k")
        self.assertEqual(self.sacq("k", "B", 2), [3, 0])
        self.assertEqual(self.r("TYPE", lk("k")), "string")

    # -- semaphores --

    def test_semaphore_never_grants_past_its_permits(self):
        toks = [self.granted(self.sacq("s", o, 3, ttl=4000))
                for o in "ABC"]
        self.assertEqual(self.kind_score("s"), "-3")
        wanted = self.subscribe(WANTED)
        code, ms = self.sacq("s", "D", 3, ttl=4000, wait=1)
        self.assertEqual(code, 0)
        self.assertTrue(0 < ms <= 4000, ms)            # the soonest holder
        self.assertEqual(wanted.next(), BROKER + " s")
        self.assertEqual(len(self.holders("s")), 3)
        released = self.subscribe(RELEASED)
        self.assertEqual(self.rel("s", "B:%d" % toks[1]), 1)
        self.assertEqual(released.next(), "s")
        self.assertEqual(self.rel("s", "B:%d" % toks[1]), 0)
        self.granted(self.sacq("s", "D", 3))
        self.assertEqual(self.sacq("s", "E", 3)[0], 0)
        self.assertEqual(len(self.holders("s")), 3)

    def test_busy_semaphore_answers_the_soonest_expiry(self):
        self.granted(self.sacq("s", "A", 2, ttl=9000))
        self.granted(self.sacq("s", "B", 2, ttl=3000))
        code, ms = self.sacq("s", "C", 2)
        self.assertEqual(code, 0)
        self.assertTrue(2000 < ms <= 3000, ms)

    def test_expired_holder_is_pruned_and_its_permit_reused(self):
        ta = self.granted(self.sacq("s", "A", 1, ttl=60))
        self.assertEqual(self.sacq("s", "B", 1)[0], 0)
        time.sleep(0.1)
        tb = self.granted(self.sacq("s", "B", 1))
        self.assertEqual(set(self.holders("s")), {"B:%d" % tb})
        self.assertEqual(self.rel("s", "A:%d" % ta), 0)

    def test_expired_but_present_holder_is_not_released(self):
        past = self.now_ms() - 10
        self.r("ZADD", lk("s"), -2, "#", past, "A:1", past + 60000, "B:2")
        released = self.subscribe(RELEASED)
        self.assertEqual(self.rel("s", "A:1"), 0)
        self.assertIsNone(released.next(0.1))
        self.assertEqual(set(self.holders("s")), {"B:2"})

    def test_key_expiry_follows_the_last_holder(self):
        ta = self.granted(self.sacq("s", "A", 5, ttl=10000))
        pttl = self.r("PTTL", lk("s"))
        self.assertTrue(9000 < pttl <= 10000, pttl)
        tb = self.granted(self.sacq("s", "B", 5, ttl=30000))
        pttl = self.r("PTTL", lk("s"))
        self.assertTrue(29000 < pttl <= 30000, pttl)
        self.assertEqual(self.rel("s", "B:%d" % tb), 1)
        pttl = self.r("PTTL", lk("s"))
        self.assertTrue(9000 < pttl <= 10000, pttl)    # back to A's
        self.assertEqual(self.rel("s", "A:%d" % ta), 1)
        self.assertEqual(self.r("EXISTS", lk("s")), 0)  # none left: gone

    def test_a_dead_brokers_holders_vanish_with_the_key(self):
        self.granted(self.sacq("s", "A", 2, ttl=50))
        self.granted(self.sacq("s", "B", 2, ttl=80))
        time.sleep(0.15)
        self.assertEqual(self.r("EXISTS", lk("s")), 0)

    # -- kinds --

    def test_another_kind_is_refused_both_ways_and_nothing_written(self):
        ts = self.granted(self.sacq("sh", "A", 0))
        self.assertEqual(self.sacq("sh", "B", 2), [3, 0])
        self.granted(self.sacq("sem", "A", 2))
        self.assertEqual(self.sacq("sem", "B", 0), [3, 2])
        self.assertEqual(self.sacq("sem", "B", 3), [3, 2])
        self.assertEqual(self.acq("sem", "B"), [3, 2])
        self.granted(self.acq("ex", "A"))
        fence = self.r("GET", FENCE)
        self.assertEqual(self.sacq("ex", "B", 4), [3, 0])
        self.assertEqual(self.sacq("sem", "B", 3), [3, 2])
        self.assertEqual(set(self.holders("sh")), {"A:%d" % ts})
        self.assertEqual(len(self.holders("sem")), 1)
        self.assertEqual(self.kind_score("sem"), "-2")
        self.assertEqual(self.r("GET", FENCE), fence)  # no token spent

    def test_a_free_set_takes_any_kind(self):
        t = self.granted(self.sacq("k", "A", 2))
        self.assertEqual(self.rel("k", "A:%d" % t), 1)
        self.granted(self.sacq("k", "B", 0))
        self.assertEqual(self.kind_score("k"), "0")

    def test_own_remnant_is_replaced_not_counted_twice(self):
        t1 = self.granted(self.sacq("s", "A", 2))
        tb = self.granted(self.sacq("s", "B", 2))
        t2 = self.granted(self.sacq("s", "A", 2))     # A's reply was lost
        self.assertGreater(t2, t1)
        self.assertEqual(set(self.holders("s")),
                         {"A:%d" % t2, "B:%d" % tb})
        self.assertEqual(self.sacq("s", "C", 2)[0], 0)

    def test_exclusive_acquire_takes_a_set_left_by_its_own_remnant(self):
        t1 = self.granted(self.sacq("k", "A", 0))
        t2 = self.granted(self.acq("k", "A"))
        self.assertGreater(t2, t1)
        self.assertEqual(self.r("GET", lk("k")), "A:%d" % t2)
        # a set with another's holder stays a shared lock
        t3 = self.granted(self.sacq("j", "B", 0))
        self.assertEqual(self.acq("j", "A")[0], 0)
        self.assertEqual(set(self.holders("j")), {"B:%d" % t3})

    # -- the lock delay (a new master tenure) --

    def test_lock_delay_refuses_permits_and_readers(self):
        self.granted(self.sacq("sh", "A", 0))
        self.granted(self.sacq("sem", "A", 3))
        self.r("SET", DELAY, "x", "PX", 5000)
        code, d = self.sacq("sem", "B", 3)
        self.assertEqual(code, 2)
        self.assertTrue(4000 < d <= 5000, d)
        self.assertEqual(self.sacq("new", "B", 3)[0], 2)
        self.assertEqual(self.sacq("new", "B", 0)[0], 2)
        self.assertEqual(self.r("EXISTS", lk("new")), 0)
        # Not even beside readers: the set may be a lagging replica's and
        # the key a writer's, reclaimed during the delay (review of 13).
        self.assertEqual(self.sacq("sh", "B", 0)[0], 2)
        self.assertEqual(len(self.holders("sem")), 1)
        self.assertEqual(len(self.holders("sh")), 1)

    def test_counter_exhausted_grants_nothing(self):
        self.r("SET", FENCE, MAX_TOKEN)
        self.assertEqual(self.sacq("s", "A", 2), [-1, 0])
        self.assertEqual(self.r("EXISTS", lk("s")), 0)
        self.assertEqual(self.r("GET", FENCE), str(MAX_TOKEN))

    # -- renew and reassert --

    def test_mixed_renew_batch_answers_each_key(self):
        te = self.granted(self.acq("ex", "A", ttl=1000))
        ts = self.granted(self.sacq("sh", "A", 0, ttl=1000))
        tp = self.granted(self.sacq("sem", "A", 2, ttl=1000))
        self.granted(self.sacq("gone", "B", 0, ttl=1000))
        self.r("HSET", lk("hash"), "f", "v")
        items = [("ex", "A:%d" % te, "20000"),
                 ("sh", "A:%d" % ts, "20000:0"),
                 ("sem", "A:%d" % tp, "20000:2"),
                 ("gone", "A:999", "20000:0"),     # another's set
                 ("hash", "A:1", "20000"),         # foreign type
                 ("none", "A:2", "20000:2"),       # absent
                 ("sh", "A:%d" % te, "20000")]     # a set, asked exclusive
        # gone or absent: 0; a foreign type, or a set asked exclusive: 3
        self.assertEqual(self.renew(items), [1, 1, 1, 0, 3, 0, 3])
        now = self.now_ms()
        for key in ("ex", "sh", "sem"):
            pttl = self.r("PTTL", lk(key))
            self.assertTrue(19000 < pttl <= 20000, (key, pttl))
        score = self.holders("sem")["A:%d" % tp]
        self.assertTrue(now + 19000 < score <= now + 20000, score - now)
        self.assertLess(self.r("PTTL", lk("gone")), 1001)

    def test_renew_of_an_expired_holder_is_lost(self):
        t = self.granted(self.sacq("s", "A", 2, ttl=50))
        self.granted(self.sacq("s", "B", 2, ttl=5000))
        time.sleep(0.1)
        self.assertEqual(self.renew([("s", "A:%d" % t, "5000:2")]), [0])
        self.assertEqual(len(self.holders("s")), 1)

    def test_reassert_adds_back_during_a_lock_delay(self):
        ts = self.granted(self.sacq("sh", "B", 0))
        self.granted(self.acq("ex", "B"))
        self.granted(self.sacq("sem", "B", 3))
        full = [self.granted(self.sacq("full", o, 1)) for o in "B"]
        items = [("gone", "A:11", "8000:2"),       # absent: made again
                 ("sh", "A:12", "8000:0"),         # same kind: added
                 ("sem", "A:13", "8000:2"),        # another n: lost
                 ("ex", "A:14", "8000:0"),         # held exclusive: lost
                 ("sh", "B:%d" % ts, "8000:0"),    # still there: renewed
                 ("full", "A:15", "8000:1"),       # no permit left: lost
                 ("absent", "A:16", "8000")]       # exclusive, absent
        # no delay: no add; another kind, or held exclusive: 3 (taken)
        self.assertEqual(self.renew(items, reassert=True),
                         [0, 0, 3, 3, 1, 0, 0])
        self.r("SET", DELAY, "x", "PX", 5000)
        self.assertEqual(self.renew(items, reassert=True),
                         [2, 2, 3, 3, 1, 0, 2])
        self.assertEqual(self.kind_score("gone"), "-2")
        self.assertEqual(set(self.holders("gone")), {"A:11"})
        pttl = self.r("PTTL", lk("gone"))
        self.assertTrue(7000 < pttl <= 8000, pttl)
        self.assertEqual(set(self.holders("sh")), {"A:12", "B:%d" % ts})
        self.assertEqual(self.kind_score("sem"), "-3")
        self.assertEqual(set(self.holders("full")), {"B:%d" % full[0]})
        self.assertEqual(self.r("GET", lk("absent")), "A:16")
        self.assertEqual(self.renew(items, reassert=True),
                         [1, 1, 3, 3, 1, 0, 1])

    # -- forget, owner --

    def test_forget_removes_every_holder_of_the_owner(self):
        now = self.now_ms()
        self.r("ZADD", lk("s"), -3, "#", now + 9000, "A:1",
               now + 9000, "A/2:2", now + 9000, "A:3", now + 5000, "B:4")
        released = self.subscribe(RELEASED)
        fg = ("forget", [lk("s")])
        self.assertEqual(self.ev(*fg, ["C", RELEASED, "s"]), 0)
        self.assertEqual(self.ev(*fg, ["A", RELEASED, "s"]), 1)
        self.assertEqual(released.next(), "s")
        self.assertEqual(set(self.holders("s")), {"A/2:2", "B:4"})
        pttl = self.r("PTTL", lk("s"))
        self.assertTrue(8000 < pttl <= 9000, pttl)
        self.assertEqual(self.ev(*fg, ["B", RELEASED, "s"]), 1)
        self.assertEqual(self.ev(*fg, ["A/2", RELEASED, "s"]), 1)
        self.assertEqual(self.r("EXISTS", lk("s")), 0)
        self.granted(self.acq("ex", "A"))
        self.assertEqual(self.ev("forget", [lk("ex")],
                                 ["A", RELEASED, "ex"]), 1)
        self.assertEqual(self.r("EXISTS", lk("ex")), 0)

    def test_owner_shapes(self):
        self.assertEqual(self.owner("free"), [])
        t = self.granted(self.acq("ex", "A", ttl=5000))
        v, pttl = self.owner("ex")
        self.assertEqual(v, "A:%d" % t)
        self.assertTrue(4000 < pttl <= 5000)
        self.r("HSET", lk("hash"), "f", "v")
        self.assertEqual(self.owner("hash"), ["?", -1])
        self.granted(self.sacq("sh", "B", 0, ttl=7000))
        r = self.owner("sh")
        self.assertEqual(r[:2], [0, 1])
        self.assertTrue(r[2].startswith("B:"))
        self.assertTrue(6000 < r[3] <= 7000, r)
        # expired holders are neither counted nor shown; all expired: free
        past = self.now_ms() - 5
        self.r("ZADD", lk("old"), 0, "#", past, "C:1")
        self.assertEqual(self.owner("old"), [])

    def test_owner_shows_16_soonest_of_many(self):
        for i in range(20):
            self.granted(self.sacq("s", "o%02d" % i, 50,
                                   ttl=30000 - 1000 * i))
        r = self.owner("s")
        self.assertEqual(r[:2], [50, 20])
        shown = r[2:]
        self.assertEqual(len(shown), 32)
        names = [shown[i].split(":")[0] for i in range(0, 32, 2)]
        self.assertEqual(names, ["o%02d" % i for i in range(19, 3, -1)])
        pttls = shown[1::2]
        self.assertEqual(pttls, sorted(pttls))
        self.assertTrue(10000 < pttls[0] <= 11000, pttls[0])

    # -- handoff, linger, takeover --

    def handoff(self, key, value, nxt, ttl=6000):
        return self.ev("handoff", [lk(key), FENCE],
                       [value, nxt, ttl, RELEASED, key])

    def test_handoff_passes_a_permit(self):
        ta = self.granted(self.sacq("s", "A", 1, ttl=2000))
        released = self.subscribe(RELEASED)
        tb = self.granted(self.handoff("s", "A:%d" % ta, "B", ttl=6000))
        self.assertGreater(tb, ta)
        self.assertIsNone(released.next(0.1))        # not free: no news
        self.assertEqual(set(self.holders("s")), {"B:%d" % tb})
        self.assertEqual(self.kind_score("s"), "-1")
        pttl = self.r("PTTL", lk("s"))
        self.assertTrue(5000 < pttl <= 6000, pttl)
        self.assertEqual(self.handoff("s", "A:%d" % ta, "C"), [0, 0])
        self.assertEqual(set(self.holders("s")), {"B:%d" % tb})
        self.r("SET", FENCE, MAX_TOKEN)
        self.assertEqual(self.handoff("s", "B:%d" % tb, "C"), [-1, 0])
        self.assertEqual(released.next(), "s")
        self.assertEqual(self.r("EXISTS", lk("s")), 0)

    def test_handoff_of_an_exclusive_lock_still_works(self):
        ta = self.granted(self.acq("ex", "A"))
        tb = self.granted(self.handoff("ex", "A:%d" % ta, "B"))
        self.assertEqual(self.r("GET", lk("ex")), "B:%d" % tb)

    def test_linger_keeps_the_permit_taken_a_while(self):
        ta = self.granted(self.sacq("s", "A", 1, ttl=20000))
        released = self.subscribe(RELEASED)
        lg = ("linger", [lk("s")])
        self.assertEqual(self.ev(*lg, ["A:%d" % ta, 150, RELEASED, "s"]), 1)
        self.assertEqual(released.next(), "s")
        self.assertEqual(set(self.holders("s")), {"A/linger:%d" % ta})
        pttl = self.r("PTTL", lk("s"))
        self.assertTrue(0 < pttl <= 150, pttl)
        self.assertEqual(self.ev(*lg, ["A:%d" % ta, 150, RELEASED, "s"]), 0)
        self.assertEqual(self.sacq("s", "B", 1)[0], 0)
        self.assertEqual(self.renew([("s", "A:%d" % ta, "9000:1")]), [0])
        time.sleep(0.2)
        self.granted(self.sacq("s", "B", 1))

    def test_takeover_moves_a_holder_to_the_new_generation(self):
        cid = "c" * 36
        now = self.now_ms()
        self.r("ZADD", lk("s"), 0, "#", now + 3000, cid + ":5",
               now + 4000, "other:6", now + 5000, cid + "x:7")
        tk = ("takeover", [lk("s")])
        self.assertEqual(self.ev(*tk, [cid, 2, 9000]), [1, 5])
        self.assertEqual(set(self.holders("s")),
                         {cid + "/2:5", "other:6", cid + "x:7"})
        pttl = self.r("PTTL", lk("s"))
        self.assertTrue(8000 < pttl <= 9000, pttl)
        self.assertEqual(self.ev(*tk, [cid, 2, 9000]), [0, 0])
        self.assertEqual(self.ev(*tk, [cid, 3, 9000]), [1, 5])
        self.assertIn(cid + "/3:5", self.holders("s"))
        # the replaced connection's renew and release fail now
        self.assertEqual(self.renew([("s", cid + "/2:5", "9000:0")]), [0])
        self.assertEqual(self.rel("s", cid + ":5"), 0)

    def test_no_script_errors_on_a_foreign_type(self):
        self.r("HSET", lk("h"), "f", "v")
        self.assertEqual(self.rel("h", "A:1"), 3)      # held, by no one
        self.assertEqual(self.handoff("h", "A:1", "B"), [0, 3])
        self.assertEqual(self.ev("linger", [lk("h")],
                                 ["A:1", 100, RELEASED, "h"]), 0)
        self.assertEqual(self.ev("takeover", [lk("h")], ["A", 2, 100]),
                         [0, 0])
        self.assertEqual(self.ev("forget", [lk("h")],
                                 ["A", RELEASED, "h"]), 0)
        self.assertEqual(self.acq("h", "A")[0], 0)
        self.assertEqual(self.sacq("h", "A", 0)[0], 0)
        self.assertEqual(self.sacq("h", "A", 2), [3, 0])


    # -- tokens set aside and pass.lua (issue 14) --

    def pass_(self, key, prev, value, ttl=9000):
        return self.ev("pass", [lk(key)], [prev, value, ttl])

    def test_grants_set_tokens_aside(self):
        code, t, more = self.ev("acquire", [lk("x"), FENCE, DELAY],
                                ["A", 10000, WANTED, BROKER + " x", 0, 32])
        self.assertEqual((code, more), (1, 32))
        self.assertEqual(int(self.r("GET", FENCE)), t + 32)
        _, ty, more = self.acq("y", "A")
        self.assertEqual(more, 0)                       # none asked
        self.assertGreaterEqual(ty, t + 33)             # past those
        self.assertEqual(int(self.r("GET", FENCE)), ty)
        code, t2, more = self.ev("handoff", [lk("y"), FENCE],
                                 ["A:%d" % ty, "B", 6000, RELEASED,
                                  "y", 8])
        self.assertEqual((code, more), (1, 8))
        self.assertGreater(t2, ty)
        self.assertEqual(int(self.r("GET", FENCE)), t2 + 8)
        # a permit's handoff sets none aside (no early hand-off of sets)
        tp = self.granted(self.sacq("s", "A", 2))
        self.assertEqual(self.ev("handoff", [lk("s"), FENCE],
                                 ["A:%d" % tp, "B", 6000, RELEASED, "s",
                                  8])[2], 0)
        # at most 32, and near 2^53-1 fewer, never past it
        self.assertEqual(self.ev("acquire", [lk("w"), FENCE, DELAY],
                                 ["A", 10000, WANTED, BROKER + " w", 0,
                                  1000])[2], 32)
        self.r("SET", FENCE, MAX_TOKEN - 3)
        self.assertEqual(self.ev("acquire", [lk("z"), FENCE, DELAY],
                                 ["A", 10000, WANTED, BROKER + " z", 0,
                                  32]), [1, MAX_TOKEN - 2, 2])
        self.assertEqual(self.r("GET", FENCE), str(MAX_TOKEN))

    def test_pass_moves_the_key_only_from_the_exact_value(self):
        t = self.ev("acquire", [lk("c"), FENCE, DELAY],
                    ["A", 2000, WANTED, BROKER + " c", 0, 8])[1]
        a, b, c = "A:%d" % t, "B:%d" % (t + 1), "C:%d" % (t + 2)
        self.assertEqual(self.pass_("c", a, b), 1)
        self.assertEqual(self.r("GET", lk("c")), b)
        pttl = self.r("PTTL", lk("c"))
        self.assertTrue(8000 < pttl <= 9000, pttl)
        # run again after a lost reply: a no-op that sets the TTL again
        self.r("PEXPIRE", lk("c"), 100)
        self.assertEqual(self.pass_("c", a, b), 1)
        self.assertGreater(self.r("PTTL", lk("c")), 8000)
        self.assertEqual(self.pass_("c", b, c), 1)
        # a later call run first (reordered): the earlier one finds
        # neither its old nor its new value (another's: 3) and writes
        # nothing
        self.assertEqual(self.pass_("c", a, b), 3)
        self.assertEqual(self.r("GET", lk("c")), c)
        # the same token under another owner (takeover.lua's resumed
        # session, "<id>/<gen>:<token>") is not this broker's any more
        self.r("SET", lk("c"), "C/2:%d" % (t + 2), "PX", 5000)
        self.assertEqual(self.pass_("c", c, "D:%d" % (t + 3)), 3)
        self.assertEqual(self.r("GET", lk("c")), "C/2:%d" % (t + 2))
        # gone (0), another's or a foreign type (3): lost, nothing written
        self.r("DEL", lk("c"))
        self.assertEqual(self.pass_("c", c, "D:%d" % (t + 3)), 0)
        self.assertEqual(self.r("EXISTS", lk("c")), 0)
        self.granted(self.acq("c", "Z"))
        self.assertEqual(self.pass_("c", c, "D:%d" % (t + 3)), 3)
        self.r("DEL", lk("c"))
        self.r("HSET", lk("c"), "f", "v")
        self.assertEqual(self.pass_("c", c, "D:%d" % (t + 3)), 3)
        self.assertEqual(self.r("TYPE", lk("c")), "hash")

    # -- tokens follow the clock --

    def test_tokens_follow_the_clock(self):
        # a counter far behind the clock (a failover lost its writes, or
        # the other side of a split brain): the next token is the clock
        self.r("SET", FENCE, 5)
        before = self.now_us()
        _, t, _ = self.acq("a", "A")
        after = self.now_us()
        self.assertTrue(before <= t <= after + 1, (before, t, after))
        self.assertEqual(int(self.r("GET", FENCE)), t)
        # every kind of grant: shared, a permit, a handoff
        self.r("SET", FENCE, 7)
        self.assertGreaterEqual(self.granted(self.sacq("s", "A", 0)),
                                before)
        self.r("SET", FENCE, 7)
        self.assertGreaterEqual(self.granted(self.sacq("p", "A", 2)),
                                before)
        self.r("SET", FENCE, 7)
        code, t2, _ = self.handoff("a", "A:%d" % t, "B")
        self.assertEqual(code, 1)
        self.assertGreaterEqual(t2, before)
        # a counter ahead of the clock (tokens set aside in a burst):
        # one more than the counter, which never goes back
        ahead = self.now_us() + 10 ** 9
        self.r("SET", FENCE, ahead)
        self.assertEqual(self.acq("b", "A")[1], ahead + 1)
        self.assertEqual(int(self.r("GET", FENCE)), ahead + 1)

    def test_renew_and_release_say_gone_or_taken(self):
        t = self.granted(self.acq("k", "A", ttl=5000))
        self.r("SET", lk("k"), "B:%d" % (t + 1))
        self.assertEqual(self.renew([("k", "A:%d" % t, "5000")]), [3])
        self.assertEqual(self.rel("k", "A:%d" % t), 3)
        self.r("DEL", lk("k"))
        self.assertEqual(self.renew([("k", "A:%d" % t, "5000")]), [0])
        self.assertEqual(self.rel("k", "A:%d" % t), 0)

    # -- writer marks (issue 23): readers do not overtake a writer --

    def test_reader_does_not_overtake_a_writer_it_came_after(self):
        wanted = self.subscribe(WANTED)
        stamp = self.wmark("d", "W")
        self.assertEqual(wanted.next(), "w" * 36 + "!%d d" % stamp)
        self.assertEqual(self.wmark("d", "W"), stamp)  # a refresh
        self.assertIsNone(wanted.next(0.1))            # (not announced)
        # free, but a writer of another broker waits: a reader arriving
        # now (-1), or knowing of it (its stamp), waits; one that came
        # before it (0, or an earlier stamp) does not
        code, ms, w = self.sacq("d", "A", 0, seen=-1, full=True)
        self.assertEqual((code, w), (0, stamp))
        self.assertTrue(2500 < ms <= 3000, ms)
        self.assertEqual(self.sacq("d", "A", 0, seen=stamp)[0], 0)
        self.granted(self.sacq("d", "B", 0, seen=stamp - 1))
        self.granted(self.sacq("d", "C", 0, seen=0))
        # nor joining readers; the writer's own broker orders its own
        self.assertEqual(self.sacq("d", "A", 0, seen=-1)[0], 0)
        self.granted(self.sacq("d", "E", 0, seen=-1, broker="w" * 36))
        # permits have no writers to wait for
        self.wmark("s", "W")
        self.granted(self.sacq("s", "A", 2, seen=-1))
        # the writer leaves: granted (no wake), or gave up (wake)
        released = self.subscribe(RELEASED)
        self.assertEqual(self.wmark("d", "W", "leave", 0), 1)
        self.assertIsNone(released.next(0.1))
        self.granted(self.sacq("d", "A", 0, seen=-1))
        self.wmark("d", "W2")
        self.assertEqual(self.wmark("d", "W2", "leave", 1), 1)
        self.assertEqual(released.next(), "d")
        self.assertEqual(self.wmark("d", "W2", "leave", 1), 0)

    def test_a_writer_mark_not_refreshed_ends(self):
        stamp = self.wmark("d", "W", arg=150)
        self.assertEqual(self.sacq("d", "A", 0, seen=-1)[0], 0)
        time.sleep(0.2)
        self.granted(self.sacq("d", "A", 0, seen=stamp))
        self.assertEqual(self.r("EXISTS", WRITERS + "d"), 0)
        # a mark made again after it ended is a new arrival
        self.assertGreater(self.wmark("d", "W"), stamp)
        # a marks key of a foreign type fails nothing
        self.r("DEL", WRITERS + "e")
        self.r("SET", WRITERS + "e", "x")
        self.granted(self.sacq("e", "A", 0, seen=-1))


class TestLuaMultiLibrary(TestLuaMulti):
    """Every test above, each call an FCALL of the script's function in the
    library (loaded as a broker's handshake loads it), instead of EVALSHA
    of the script."""

    @classmethod
    def setUpClass(cls):
        cls.fn = load_library(_redis)

    def ev(self, script, keys, args):
        return self.r("FCALL", self.fn[script], len(keys), *keys, *args)

    def test_every_script_is_a_function_of_the_library(self):
        gen = generated()
        libs = {lib[1]: lib for lib in self.r("FUNCTION", "LIST")}
        self.assertIn(gen["library.name"], libs)
        names = {f[1] for f in libs[gen["library.name"]][5]}
        h = gen["library.name"].rsplit("_", 1)[1]
        # and the batches of releases and of reads (scripts/embed.sh),
        # and the lean exclusive batch (scripts/batch/lean.lua)
        self.assertEqual(names, set(self.fn.values()) | {
            gen["batch.fn"], "batch_free_" + h, "batch_read_" + h,
            "lean_" + h})
        self.assertRegex(h, r"\A[0-9a-f]{16}\Z")
        self.assertTrue(all(n.endswith("_" + h) for n in names), names)


if __name__ == "__main__":
    unittest.main()
