"""
test_lean.py - the lean exclusive batch and releases published only to
listeners (issue 36), through real brokers on a real redis-server.

Exclusive ACQUIREs without VALUE or ALL, and the RELEASEs of holds without
a value, go to Redis as one call of the lean function (FCALL lean_<hash>;
the batch script with "@lean" first on a Redis without functions): one
MGET of every read, one TIME and one counter write for all its grants,
SET NX PX per grant, one DEL; any call that needs more runs its own
script's body in that call and answers exactly as alone.  A release
publishes only where a listen mark (a waiter elsewhere), a watch mark, or
<prefix>:listenall (a broker that sets no marks shares the prefix) says
someone listens.

Each test checks that the lean function served the call (MONITOR shows
which functions ran and the commands each ran, INFO commandstats how many
PUBLISHes), and that the answer is what it always was: so each fails on a
broker without the feature.  A request read in one loop turn with others
is made by stopping the broker (SIGSTOP) while each session writes its
line, as test_batch.py does.
"""

import os
import re
import threading
import time
import unittest

import harness
import test_batch
from harness import (REPO, Broker, module_redis_start, module_redis_stop,
                     wait_until)
from test_lua_multi import generated

BASELINE = os.path.join(REPO, "build", "bench", "base-27629bd", "build",
                        "lockbrokerd")
NO_FUNCTIONS = ("--rename-command", "FUNCTION", "")


def setUpModule():
    module_redis_start()


def tearDownModule():
    module_redis_stop()


def lib_hash():
    return generated()["library.name"].rsplit("_", 1)[1]


def lean_fn():
    return "lean_" + lib_hash()


class Monitor(test_batch.Monitor):
    """MONITOR from now until stop(): the commands clients sent, each
    with the commands its script ran, as [(argv, [argv of each])]."""

    def stop(self):
        out = []
        for src, args in self.lines():
            if src != "lua":
                out.append((args, []))
            elif out:
                out[-1][1].append(args)
        return out


def leans(calls):
    """The lean calls among MONITOR's: (their words, their commands)."""
    return [(a, ran) for a, ran in calls
            if a[:2] == ["FCALL", lean_fn()] or
            (a[0] in ("EVAL", "EVALSHA") and "@lean" in a)]


def lean_keys(words):
    """The lock keys a lean call names (the released, the acquired)."""
    nkeys = int(words[2])
    return [k for k in words[3:3 + nkeys] if ":lock:" in k]


def commandstats(redis):
    out = {}
    for line in redis.cli("INFO", "commandstats").splitlines():
        m = re.match(r"cmdstat_(\S+):calls=(\d+)", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


class LeanCase(test_batch.BatchCase):
    """burst(): lines read in one loop turn (test_batch.py)."""

    EXTRA = ()              # the Redis's options (none: the shared one)

    def setUp(self):
        super().setUp()
        if self.EXTRA:
            self.redis = self.start_redis(*self.EXTRA)

    def broker(self, *extra, quiet=True, **kw):
        """A broker whose announce was answered: its lean calls go.
        quiet: and no <prefix>:listenall (another broker's announce may
        have seen this one subscribed before it announced itself: every
        release is published until the next announce, a second later)."""
        b = self.start_broker(*extra, redis=self.redis, **kw)
        n = len(getattr(self, "_brokers", []))
        self._brokers = getattr(self, "_brokers", []) + [b]
        wait_until(lambda: self.redis.cli("ZCARD", "%s:brokers"
                                          % self.prefix) > n, 3.0,
                   what="the broker's announcement")
        if quiet:
            wait_until(lambda: not self.redis.cli(
                "EXISTS", "%s:listenall" % self.prefix), 4.0,
                what="no listenall")
        time.sleep(0.05)    # its answer reaches the broker
        return b

    def session(self, b):
        c = self.connect(b)
        c.cid = c.hello()
        return c

    def key(self, name):
        return self.lock_key(name)

    def assertLean(self, calls, name, what):
        """Some lean call named lock key name; returns those calls."""
        got = [(a, ran) for a, ran in leans(calls)
               if self.key(name) in lean_keys(a)]
        self.assertTrue(got, "%s: no lean call named %s in %s"
                        % (what, name, [a[:2] for a, _ in calls]))
        return got


# ------------------------------------------------------------ the path --

class TestLeanBatch(LeanCase):

    def test_pairs_run_b_plus_4_commands(self):
        """8 acquires in one turn: one lean call of MGET, TIME, the
        counter's SET and 8 SET NX PX; their 8 releases: MGET and one
        DEL.  No GET, PTTL or PUBLISH; tokens base+1..base+8."""
        b = self.broker()
        cs = [self.session(b) for _ in range(8)]
        mon = Monitor(self.redis)
        replies = self.burst(b, cs, ["ACQUIRE p%d" % i for i in range(8)])
        toks = [self.assertToken(r) for r in replies]
        self.assertEqual(self.burst(b, cs, ["RELEASE p%d" % i
                                            for i in range(8)]),
                         ["OK 0"] * 8)
        calls = mon.stop()
        lean = leans(calls)
        self.assertEqual(len(lean), len(calls), [a[:2] for a, _ in calls])
        ran = [c[0] for _, r in lean for c in r]
        self.assertNotIn("GET", ran)
        self.assertNotIn("PTTL", ran)
        self.assertNotIn("PUBLISH", ran)
        # per call: B + 4 (acquires: MGET TIME SET SETs; releases: MGET DEL)
        for words, r in lean:
            a, rel = int(words[3 + int(words[2]) + 1]), int(
                words[3 + int(words[2]) + 2])
            want = (["MGET"] + (["TIME", "SET"] + ["SET"] * a if a else []) +
                    (["DEL"] if rel else []))
            self.assertEqual([c[0] for c in r], want, r)
        self.assertEqual(ran.count("SET"), 8 + sum(
            1 for w, _ in lean if w[3 + int(w[2]) + 1] != "0"))
        # tokens of one call follow each other (none set aside)
        self.assertEqual(len(set(toks)), 8)
        for i in range(8):
            self.assertEqual(self.redis.cli("EXISTS", self.key("p%d" % i)), 0)

    def test_a_key_held_answers_as_alone(self):
        """The key exists (another's, the caller's own remnant, a shared
        lock): SET NX fails and acquire.lua's body answers, in the same
        lean call as the grants beside it."""
        b = self.broker()
        x, own, y, free = (self.session(b) for _ in range(4))
        # held by a session of another broker, a remnant of own's (a
        # release lost with a master), a semaphore of 3 permits
        self.redis.cli("SET", self.key("held"), "someone:3", "PX", 30000)
        self.redis.cli("SET", self.key("mine"), "%s:5" % own.cid,
                       "PX", 30000)
        self.redis.cli("ZADD", self.key("sem"), -3, "#",
                       int(time.time() * 1000) + 30000, "someone:4")
        mon = Monitor(self.redis)
        replies = self.burst(b, [x, own, y, free],
                             ["ACQUIRE held", "ACQUIRE mine",
                              "ACQUIRE sem", "ACQUIRE fresh"])
        calls = mon.stop()
        self.assertEqual(replies[0], "BUSY")
        tok = self.assertToken(replies[1])     # a remnant: taken anew
        self.assertGreater(tok, 5)
        self.assertEqual(self.redis.cli("GET", self.key("mine")),
                         "%s:%d" % (own.cid, tok))
        self.assertErr(replies[2], "BADARG")    # a semaphore
        self.assertToken(replies[3])
        for k in ("held", "mine", "sem", "fresh"):
            self.assertLean(calls, k, "ACQUIRE " + k)
        # the full body ran for the three (its GET), not for "fresh"
        gets = [c[1] for _, r in leans(calls) for c in r if c[0] == "GET"]
        self.assertEqual(sorted(gets), sorted(
            self.key(k) for k in ("held", "mine", "sem")))

    def test_a_value_that_differs_is_not_deleted(self):
        """The key is no longer the releaser's (expired and taken, lost
        in a failover): release.lua's body answers, the key stays."""
        b = self.broker()
        c = self.session(b)
        self.assertToken(c.req("ACQUIRE gone"))
        self.redis.cli("SET", self.key("gone"), "someone:7", "PX", 30000)
        mon = Monitor(self.redis)
        self.assertErr(c.req("RELEASE gone"), "LOST")
        calls = mon.stop()
        self.assertLean(calls, "gone", "RELEASE")
        self.assertEqual(self.redis.cli("GET", self.key("gone")),
                         "someone:7")
        self.assertNotIn(["DEL", self.key("gone")],
                         [c for _, r in calls for c in r])

    def test_failover_lock_delay_is_kept(self):
        """<prefix>:lockdelay runs: no free key is granted until it ends
        (one try: ERR UNAVAILABLE; WAIT: granted when it ends)."""
        b = self.broker()
        c, d = self.session(b), self.session(b)
        self.redis.cli("SET", "%s:lockdelay" % self.prefix, "x", "PX", 700)
        mon = Monitor(self.redis)
        self.assertErr(c.req("ACQUIRE dk"), "UNAVAILABLE")
        t0 = time.monotonic()
        self.assertToken(d.req("ACQUIRE dk2 WAIT 3000", timeout=5.0))
        self.assertGreater(time.monotonic() - t0, 0.4)
        calls = mon.stop()
        self.assertLean(calls, "dk", "ACQUIRE in the delay")
        self.assertIsNone(self.redis.cli("GET", self.key("dk")))

    def test_a_watched_key_tells_its_watchers(self):
        """A key watched on another broker: its grant is told ("held"),
        its release published, each at once; the other keys of the same
        call publish nothing."""
        b1, b2 = self.broker(), self.broker()
        w = self.session(b2)
        w.send("WATCH wk")
        self.assertEqual(w.readline(), "OK")
        self.assertEqual(w.readline(), "EVENT FREE wk")
        cs = [self.session(b1) for _ in range(3)]
        self.redis.cli("CONFIG", "RESETSTAT")
        mon = Monitor(self.redis)
        replies = self.burst(b1, cs, ["ACQUIRE wk", "ACQUIRE n1",
                                      "ACQUIRE n2"])
        tok = self.assertToken(replies[0])
        self.assertRegex(w.readline(timeout=1.0),
                         r"\AEVENT HOLDER wk %s %d -\Z" % (cs[0].cid, tok))
        self.assertEqual(self.burst(b1, cs, ["RELEASE wk", "RELEASE n1",
                                             "RELEASE n2"]), ["OK 0"] * 3)
        self.assertEqual(w.readline(timeout=1.0), "EVENT FREE wk")
        calls = mon.stop()
        self.assertLean(calls, "wk", "ACQUIRE and RELEASE of a watched key")
        pubs = [c for _, r in calls for c in r if c[0] == "PUBLISH"]
        self.assertEqual(sorted(p[2] for p in pubs), ["held wk", "wk"],
                         pubs)

    def test_a_key_twice_in_one_turn(self):
        """A release and an acquire of one key read in one turn (and
        keys around them): every answer right, no lean call names a key
        twice (its reads come before its writes)."""
        b = self.broker()
        n = 6
        holders = [self.session(b) for _ in range(n)]
        takers = [self.session(b) for _ in range(n)]
        for i, h in enumerate(holders):
            self.assertToken(h.req("ACQUIRE t%d" % i))
        mon = Monitor(self.redis)
        lines = []
        clients = []
        for i in range(n):
            clients += [holders[i], takers[i]]
            lines += ["RELEASE t%d" % i, "ACQUIRE t%d WAIT 3000" % i]
        replies = self.burst(b, clients, lines)
        calls = mon.stop()
        for i in range(n):
            self.assertEqual(replies[2 * i], "OK 0")
            tok = self.assertToken(replies[2 * i + 1])
            self.assertEqual(self.redis.cli("GET", self.key("t%d" % i)),
                             "%s:%d" % (takers[i].cid, tok))
        self.assertTrue(leans(calls))
        for words, _ in leans(calls):
            ks = lean_keys(words)
            self.assertEqual(len(ks), len(set(ks)), words)

    def test_function_flush_mid_batch(self):
        """FUNCTION FLUSH again and again under load: each lean call that
        finds its function gone goes again whole as EVAL ("@lean"), before
        any later call about its keys; every request is answered, every
        key is held by whom it says, tokens rise per key."""
        b = self.broker()
        stop = threading.Event()
        errors = []
        last = {}

        def worker(i):
            c = b.client(timeout=5.0)
            try:
                while not stop.is_set():
                    k = "f%d" % i
                    r = c.req("ACQUIRE %s" % k)
                    m = re.fullmatch(r"OK ([0-9]+)", r)
                    if not m:
                        errors.append(r)
                        continue
                    tok = int(m.group(1))
                    if tok <= last.get(k, 0):
                        errors.append("token went back on %s" % k)
                    last[k] = tok
                    r = c.req("RELEASE %s" % k)
                    if r != "OK 0":
                        errors.append(r)
            finally:
                c.close()

        threads = [threading.Thread(target=worker, args=(i,))
                   for i in range(12)]
        for t in threads:
            t.start()
        try:
            for _ in range(20):
                time.sleep(0.05)
                self.redis.cli("FUNCTION", "FLUSH")
        finally:
            stop.set()
            for t in threads:
                t.join(10.0)
        self.assertEqual(errors, [])
        self.assertGreater(len(last), 0)
        self.assertRegex(b.log(), r"function %s not in Redis \S+: sent as "
                         r"EVAL" % lean_fn())
        # and the lean function is called again once loaded
        c = self.session(b)
        mon = Monitor(self.redis)
        self.assertToken(c.req("ACQUIRE after"))
        self.assertEqual(c.req("RELEASE after"), "OK 0")
        calls = mon.stop()
        self.assertEqual([a[:2] for a, _ in calls],
                         [["FCALL", lean_fn()]] * 2)


class TestLeanUnderMaxmemory(LeanCase):
    """maxmemory with noeviction: Redis refuses the lean function whole
    (it may write); its releases go again at once in the release-only
    batch (allow-oom), its acquires answer as a refused write."""

    EXTRA = ("--save", "")

    def full(self):
        """A broker, 4 keys held by 4 of its 5 sessions, then Redis full;
        the 4 released in one turn: (broker, sessions, MONITOR's calls)."""
        b = self.broker()
        self.addCleanup(lambda: self.redis.cli("CONFIG", "SET",
                                               "maxmemory", "0"))
        cs = [self.session(b) for _ in range(5)]
        for i, c in enumerate(cs[:4]):
            self.assertToken(c.req("ACQUIRE m%d" % i))
        self.redis.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
        self.redis.cli("CONFIG", "SET", "maxmemory", "1")
        self.redis.cli("CONFIG", "RESETSTAT")
        mon = Monitor(self.redis)
        replies = self.burst(b, cs[:4], ["RELEASE m%d" % i
                                         for i in range(4)])
        calls = mon.stop()
        self.assertEqual(replies, ["OK 0"] * 4)
        for i in range(4):
            self.assertEqual(self.redis.cli("EXISTS", self.key("m%d" % i)),
                             0)
        # an acquire: refused, as any write
        self.assertErr(cs[4].req("ACQUIRE m9"), "UNAVAILABLE")
        self.assertEqual(self.redis.cli("EXISTS", self.key("m9")), 0)
        return b, cs, calls

    def test_releases_go_again_acquires_refused(self):
        b, cs, calls = self.full()
        # the lean call was refused before it ran (MONITOR does not show
        # it; commandstats counts it), then the releases went as frees
        self.assertGreaterEqual(self.rejected_fcalls(), 1)
        frees = [a for a, _ in calls
                 if a[:2] == ["FCALL", "batch_free_" + lib_hash()]]
        self.assertTrue(frees, [a[:2] for a, _ in calls])
        self.assertEqual(sorted(w for f in frees for w in f
                                if ":lock:" in w),
                         [self.key("m%d" % i) for i in range(4)])

    def rejected_fcalls(self):
        for line in self.redis.cli("INFO", "commandstats").splitlines():
            m = re.match(r"cmdstat_fcall:.*rejected_calls=(\d+)", line)
            if m:
                return int(m.group(1))
        return 0


class TestLeanUnderMaxmemoryEvalsha(TestLeanUnderMaxmemory):
    """The same without functions: the batch script with "@lean" runs,
    its counter write is refused (OOM) and its acquires answer that,
    while its releases delete."""

    EXTRA = ("--save", "") + NO_FUNCTIONS

    def test_releases_go_again_acquires_refused(self):
        b, cs, calls = self.full()
        # the releases ran in the lean call (its DEL); the acquire too
        self.assertLean(calls, "m0", "the releases")
        dels = [c for _, ran in leans(calls) for c in ran if c[0] == "DEL"]
        self.assertEqual(sorted(k for d in dels for k in d[1:]),
                         [self.key("m%d" % i) for i in range(4)])


# ------------------------------------------------------ who listens --

class TestListeners(LeanCase):
    """Two brokers on one Redis and prefix."""

    def pubs(self):
        return commandstats(self.redis).get("publish", 0)

    def test_nobody_listens_nothing_published(self):
        b1, b2 = self.broker(), self.broker()
        c = self.session(b1)
        self.redis.cli("CONFIG", "RESETSTAT")
        for i in range(20):
            self.assertToken(c.req("ACQUIRE q%d" % i))
            self.assertEqual(c.req("RELEASE q%d" % i), "OK 0")
        self.assertEqual(self.pubs(), 0)
        self.assertEqual(self.redis.cli("EXISTS", "%s:listen" % self.prefix),
                         0)
        del b2

    def test_remote_waiters_are_woken_at_once(self):
        """A waiter on the other broker (exclusive, shared, ACQUIRE ALL)
        set the key's listen mark where it found it held: the release
        publishes, the waiter is granted at once; the mark stays until
        its PTTL (a waiter whose attempt was in flight when the message
        came hears the next release)."""
        b1, b2 = self.broker(), self.broker()
        h = self.session(b1)
        for k in ("x", "s", "m"):
            self.assertToken(h.req("ACQUIRE %s" % k))
        w1, w2, w3 = (self.session(b2) for _ in range(3))
        w1.send("ACQUIRE x WAIT 8000")
        w2.send("ACQUIRE s SHARED WAIT 8000")
        w3.send("ACQUIRE ALL 2 m m2 WAIT 8000")
        wait_until(lambda: all(self.redis.cli(
            "EXISTS", "%s:listen:%s" % (self.prefix, k)) for k in
            ("x", "s", "m")), 3.0, what="the waiters' listen marks")
        self.assertGreater(self.redis.cli("PTTL", "%s:listen"
                                          % self.prefix), 0)
        self.redis.cli("CONFIG", "RESETSTAT")
        for w, k, pat in ((w1, "x", r"\AOK [0-9]+\Z"),
                          (w2, "s", r"\AOK [0-9]+\Z"),
                          (w3, "m", r"\AOK [0-9]+ [0-9]+\Z")):
            self.assertEqual(h.req("RELEASE %s" % k), "OK 0")
            t0 = time.monotonic()
            self.assertRegex(w.readline(timeout=2.0), pat)
            # at once: a pub/sub wake, not the retry at the holder's TTL
            self.assertLess(time.monotonic() - t0, 0.5, k)
            self.assertLessEqual(self.redis.cli(
                "PTTL", "%s:listen:%s" % (self.prefix, k)), 31000, k)
        self.assertEqual(self.pubs(), 3)

    def test_lost_listen_mark_waiter_gets_the_key_at_the_ttl(self):
        """The mark is lost (a failover, deleted): the release publishes
        nothing, and the waiter still gets the key when the holder's PTTL
        it was told runs out (its retry), as when a message was lost."""
        b1, b2 = self.broker(), self.broker()
        h, w = self.session(b1), self.session(b2)
        self.assertToken(h.req("ACQUIRE lost TTL 1500"))
        t_try = time.monotonic()
        w.send("ACQUIRE lost WAIT 10000")
        wait_until(lambda: self.redis.cli("EXISTS", "%s:listen:lost"
                                          % self.prefix), 2.0,
                   what="the waiter's mark")
        self.redis.cli("DEL", "%s:listen:lost" % self.prefix,
                       "%s:listen" % self.prefix)
        time.sleep(0.2)
        self.redis.cli("CONFIG", "RESETSTAT")
        self.assertEqual(h.req("RELEASE lost"), "OK 0")
        t_rel = time.monotonic()
        self.assertToken(w.readline(timeout=5.0))
        took = time.monotonic() - t_rel
        self.assertEqual(self.pubs(), 0)
        # not woken by a message (at once) but by its retry, at the PTTL
        # its try was told (1500 ms from the try, here ~1.3 s after the
        # release), never later than the holder's TTL
        self.assertGreater(took, 0.5)
        self.assertLess(time.monotonic() - t_try, 1.5 + 1.0)

    def test_resume_marks_the_keys_it_moves(self):
        """A RESUME on another broker takes the holds over: each key gets
        its listen mark, so the release there is published and the
        broker the session left hears of it."""
        b1, b2 = self.broker(), self.broker()
        c = self.connect(b1)
        m = re.fullmatch(r"OK (\S+) lockbroker/\S+ (\S+)",
                         c.req("HELLO GRACE 5000"))
        self.assertIsNotNone(m, "HELLO GRACE")
        cid, secret = m.group(1), m.group(2)
        self.assertToken(c.req("ACQUIRE rk"))
        c.close()
        r = self.connect(b2)
        self.assertTrue(r.req("RESUME %s %s" % (cid, secret))
                        .startswith("OK"))
        self.assertGreater(self.redis.cli("PTTL", "%s:listen:rk"
                                          % self.prefix), 0)
        other = self.session(b2)
        self.assertToken(other.req("ACQUIRE unmarked"))
        self.redis.cli("CONFIG", "RESETSTAT")
        self.assertEqual(other.req("RELEASE unmarked"), "OK 0")
        self.assertEqual(self.pubs(), 0)
        self.assertEqual(r.req("RELEASE rk"), "OK 0")
        self.assertEqual(self.pubs(), 1)


# --------------------------------------------------- mixed versions --

class OldBroker(Broker):
    """The broker of 27629bd (make build/bench/base-27629bd/build/
    lockbrokerd): it sets no listen marks and announces nothing."""

    def _spawn(self):
        saved = harness.BROKER_BIN
        harness.BROKER_BIN = BASELINE
        try:
            super()._spawn()
        finally:
            harness.BROKER_BIN = saved


class TestMixedVersions(LeanCase):
    """A broker before listen marks beside one with them (a rolling
    upgrade): while it is there every release is published; once it is
    gone, only where marks say."""

    def setUp(self):
        super().setUp()
        # make integration builds it (MIXED_BIN): missing is a failure,
        # never a skip
        self.assertTrue(os.access(BASELINE, os.X_OK),
                        "no baseline broker %s (make build/bench/base-"
                        "27629bd/build/lockbrokerd)" % BASELINE)

    def test_an_older_broker_hears_every_release(self):
        old = OldBroker(self.redis.addr, self.prefix)
        self.addCleanup(old.close)
        new = self.broker(quiet=False)
        wait_until(lambda: self.redis.cli("EXISTS", "%s:listenall"
                                          % self.prefix), 3.0,
                   what="listenall while the older broker is there")
        # a waiter on the older broker, the holder on the newer one
        h, w = self.session(new), old.client()
        self.addCleanup(w.close)
        self.assertToken(h.req("ACQUIRE mix TTL 20000"))
        w.send("ACQUIRE mix WAIT 8000")
        time.sleep(0.3)
        self.assertEqual(h.req("RELEASE mix"), "OK 0")
        t0 = time.monotonic()
        self.assertRegex(w.readline(timeout=5.0), r"\AOK [0-9]+\Z")
        self.assertLess(time.monotonic() - t0, 0.5)
        # and the other way round: the older broker publishes anyway
        h2 = self.session(new)
        h2.send("ACQUIRE mix WAIT 8000")
        time.sleep(0.3)
        self.assertEqual(w.req("RELEASE mix"), "OK 0")
        t0 = time.monotonic()
        self.assertToken(h2.readline(timeout=5.0))
        self.assertLess(time.monotonic() - t0, 0.5)
        self.assertEqual(h2.req("RELEASE mix"), "OK 0")
        # the older broker goes: releases publish only to marks again
        w.close()
        old.stop()
        wait_until(lambda: not self.redis.cli("EXISTS", "%s:listenall"
                                              % self.prefix), 5.0,
                   what="listenall gone with the older broker")
        self.redis.cli("CONFIG", "RESETSTAT")
        self.assertToken(h.req("ACQUIRE alone"))
        self.assertEqual(h.req("RELEASE alone"), "OK 0")
        self.assertEqual(commandstats(self.redis).get("publish", 0), 0)


if __name__ == "__main__":
    unittest.main()
