"""
test_functions.py - the broker's scripts as one Redis function library
(Redis 7): loaded by every command connection's handshake (FUNCTION LOAD,
never REPLACE), named lockbroker_<hash> with every function
<script>_<hash>, the hash being of the library's text; calls as FCALL.
A library emptied under the broker (FUNCTION FLUSH or DELETE, a Redis
restarted without persistence) is loaded again, and the calls that found
it gone are answered all the same.  A Redis without functions (FUNCTION
renamed away, as before Redis 7) gets the scripts by EVALSHA.

Calls are counted with INFO commandstats of a Redis of the test's own.
"""

import re
import sys
import threading
import time
import unittest

from test_lua_multi import generated  # noqa: E402 (embed.sh's output)
from harness import BrokerTestCase, RedisError, wait_until

# Another build's library: its own hash, every function answering an
# error, so a request that ran it fails.
OTHER = "0123456789abcdef"


def other_library():
    names = [k[:-3] for k in generated() if k.endswith(".fn")]
    return "#!lua name=lockbroker_%s\n" % OTHER + "".join(
        "redis.register_function('%s_%s', function() "
        "return redis.error_reply('ERR the other version ran') end)\n"
        % (n, OTHER) for n in names)


def libraries(redis):
    """{library name: [function names]} as FUNCTION LIST shows them."""
    return {lib[1]: sorted(f[1] for f in lib[5])
            for lib in redis.cli("FUNCTION", "LIST")}


def commandstats(redis):
    """{command: calls} from INFO commandstats."""
    out = {}
    for line in redis.cli("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            out[name] = int(rest.split(",")[0].split("=")[1])
    return out


class FunctionCase(BrokerTestCase):

    def setUp(self):
        super().setUp()
        self.own = self.start_redis()
        self.ours = generated()["library.name"]

    def pair(self, client, key):
        """ACQUIRE and RELEASE key; Redis holds it as client's between."""
        tok = self.assertToken(client.req("ACQUIRE %s" % key))
        self.assertEqual(self.own.cli("GET", self.lock_key(key)),
                         "%s:%d" % (client.cid, tok))
        self.assertEqual(client.req("RELEASE %s" % key), "OK 0")
        return tok

    def session(self, broker):
        c = self.connect(broker)
        c.cid = c.hello()
        return c


class TestLibrary(FunctionCase):

    def test_brokers_of_one_build_share_one_library(self):
        b1 = self.start_broker(redis=self.own)
        b2 = self.start_broker(redis=self.own)
        c1, c2 = self.session(b1), self.session(b2)
        self.own.cli("CONFIG", "RESETSTAT")
        self.pair(c1, "a")
        self.pair(c2, "b")
        libs = libraries(self.own)
        self.assertEqual(list(libs), [self.ours])
        h = self.ours.rsplit("_", 1)[1]
        self.assertTrue(all(f.endswith("_" + h) for f in libs[self.ours]))
        self.assertIn("acquire_" + h, libs[self.ours])
        stats = commandstats(self.own)
        self.assertGreaterEqual(stats.get("fcall", 0), 4, stats)
        self.assertNotIn("evalsha", stats)
        self.assertNotIn("eval", stats)

    def test_flags_let_releases_and_reads_run_when_redis_is_full(self):
        """Releases are flagged allow-oom (they only delete and publish),
        and so are a fenced delete (delif) and an admin's FREE; reads
        no-writes (LOCKS also allow-cross-slot-keys: it reads the keys
        SCAN finds); the rest none (a fenced write, setif, among them), so
        Redis refuses them under maxmemory.  Each batch function runs
        calls of its kind only."""
        self.own.cli("FUNCTION", "LOAD", generated()["library"])
        h = self.ours.rsplit("_", 1)[1]
        flags = {f[1]: sorted(f[5]) for lib in
                 self.own.cli("FUNCTION", "LIST") for f in lib[5]}
        want = {"release": ["allow-oom"], "forget": ["allow-oom"],
                "delif": ["allow-oom"], "free": ["allow-oom"],
                "batch_free": ["allow-oom"], "owner": ["no-writes"],
                "check": ["no-writes"], "batch_read": ["no-writes"],
                "peek": ["no-writes"],
                "locks": ["allow-cross-slot-keys", "no-writes"]}
        for name, fl in sorted(flags.items()):
            self.assertEqual(fl, want.get(name[:-len(h) - 1], []), name)
        # every script's function, the batch's, the two batches of one
        # kind and the lean exclusive batch (no flags: it writes)
        self.assertEqual(len(flags), sum(
            1 for k in generated() if k.endswith(".fn")) + 3, flags)
        self.assertEqual(flags["lean_" + h], [])
        # a batch of one kind refuses a call of another
        r = self.own.cli("FCALL", "batch_free_" + h, 1, "lbt:lock:x",
                         "owner", 1, 0)
        self.assertRegex(str(r[0]), "owner may not run in this batch")
        r = self.own.cli("FCALL", "batch_read_" + h, 1, "lbt:lock:x",
                         "owner", 1, 0)
        self.assertEqual(r, [[]])

    def test_library_already_there_is_used(self):
        # a broker of this build loaded it before (or Redis kept it)
        self.own.cli("FUNCTION", "LOAD", generated()["library"])
        b = self.start_broker(redis=self.own)
        c = self.session(b)
        self.pair(c, "k")
        self.assertEqual(list(libraries(self.own)), [self.ours])
        self.assertNotIn("refused the function library", b.log())

    def test_another_version_beside_ours_is_left_alone(self):
        """Two builds on one Redis (a rolling upgrade): each calls its
        own functions; neither replaces the other's library."""
        self.own.cli("FUNCTION", "LOAD", other_library())
        b = self.start_broker(redis=self.own)
        c, w = self.session(b), self.session(b)
        for i in range(3):
            self.pair(c, "k%d" % i)
        # a hand-off and a batch of calls run our code, not the other's
        self.assertToken(c.req("ACQUIRE h"))
        w.send("ACQUIRE h WAIT 5000")
        self.assertTrue(w.no_reply(0.1))
        self.assertEqual(c.req("RELEASE h"), "OK 0")
        self.assertToken(w.readline(timeout=5.0))
        libs = libraries(self.own)
        self.assertEqual(sorted(libs), sorted([self.ours,
                                               "lockbroker_" + OTHER]))
        # theirs is as it was: still its own error
        with self.assertRaisesRegex(RedisError, "the other version ran"):
            self.own.cli("FCALL", "acquire_" + OTHER, 0)
        self.assertEqual(libs["lockbroker_" + OTHER],
                         sorted(f + "_" + OTHER for f in
                                (k[:-3] for k in generated()
                                 if k.endswith(".fn"))))

    def test_redis_restart_loads_the_library_again(self):
        # no lock delay: a Redis back empty is a new tenure, whose delay
        # would hold back the grant (test_faults.py tests it)
        b = self.start_broker("--failover_lock_delay_ms", "0",
                              redis=self.own)
        c = self.session(b)
        self.pair(c, "k")
        self.own.restart()          # empty: no functions, no data
        wait_until(lambda: self.stats(c)["redis"] == "up", 5.0,
                   what="STATS redis=up after restart")
        self.assertEqual(list(libraries(self.own)), [self.ours])
        self.own.cli("CONFIG", "RESETSTAT")
        self.pair(c, "k")
        stats = commandstats(self.own)
        self.assertGreaterEqual(stats.get("fcall", 0), 2, stats)
        self.assertNotIn("eval", stats)


class TestFlushUnderLoad(FunctionCase):
    """FUNCTION FLUSH (and a FUNCTION DELETE of ours) again and again
    while sessions loop ACQUIRE / RELEASE on their own keys and two
    contend for one: every request is answered as without the flushes,
    Redis holds each lock as its holder's, and the library is loaded
    again once per loss, not once per call."""

    PAIRS = 150             # per looping session, a bound on the load
    SESSIONS = 12
    FLUSHES = 12

    def test_every_request_answered_and_locks_right(self):
        b = self.start_broker(redis=self.own)
        loopers = [self.session(b) for _ in range(self.SESSIONS)]
        rivals = [self.session(b) for _ in range(2)]
        errors = []
        hot_tokens = []
        stop = threading.Event()

        def loop(i, c):
            try:
                for n in range(self.PAIRS):
                    if stop.is_set():
                        return
                    self.pair(c, "own%d" % i)
            except Exception as e:      # the thread's failure, reported
                errors.append("session %d: %r" % (i, e))

        def rival(c):
            try:
                while not stop.is_set():
                    r = c.req("ACQUIRE hot WAIT 5000", timeout=8.0)
                    tok = self.assertToken(r)
                    hot_tokens.append(tok)
                    self.assertEqual(c.req("RELEASE hot"), "OK 0")
            except Exception as e:
                errors.append("rival: %r" % e)

        threads = [threading.Thread(target=loop, args=(i, c))
                   for i, c in enumerate(loopers)]
        threads += [threading.Thread(target=rival, args=(c,))
                    for c in rivals]
        self.own.cli("CONFIG", "RESETSTAT")
        for t in threads:
            t.start()
        try:
            for i in range(self.FLUSHES):
                time.sleep(0.1)
                if i == self.FLUSHES // 2:
                    try:
                        self.own.cli("FUNCTION", "DELETE", self.ours)
                    except RedisError:
                        pass        # flushed a moment ago, not back yet
                else:
                    self.own.cli("FUNCTION", "FLUSH")
        finally:
            time.sleep(0.2)
            stop.set()
            for t in threads[:-2]:
                t.join(30.0)
            for t in threads[-2:]:
                t.join(10.0)
        self.assertEqual(errors, [])
        self.assertGreater(len(hot_tokens), 2)
        self.assertEqual(hot_tokens, sorted(set(hot_tokens)))
        stats = commandstats(self.own)
        # the losses were noticed (the EVALs of calls that found nothing),
        # and each loss cost one FUNCTION LOAD, not one per call
        self.assertGreater(stats.get("eval", 0), 0, stats)
        self.assertLessEqual(stats.get("function|load", 0),
                             self.FLUSHES + 1, stats)
        self.assertGreater(stats.get("fcall", 0), stats.get("eval", 0),
                           stats)
        wait_until(lambda: list(libraries(self.own)) == [self.ours], 2.0,
                   what="our library loaded again, alone")
        for i in range(self.SESSIONS):
            self.assertEqual(self.own.cli("EXISTS", self.lock_key(
                "own%d" % i)), 0)
        self.assertIn("gone from Redis %s: loading it again" % self.own.addr,
                      b.log())


class TestOrderThroughReloads(FunctionCase):
    """Calls on one Redis connection keep their order when one of them
    must be sent again (the library flushed or deleted under it): the
    calls after it on its key wait for it.  Three sessions per key take
    turns (so most turns are early hand-offs, whose pass.lua is not
    awaited) and ask RENEW, PROCLAIM and CHECK of the hold just granted;
    a second broker works on keys of its own, so its library loads land
    between this broker's calls.  FUNCTION FLUSH or DELETE every 50 ms."""

    KEYS = 6
    PER_KEY = 3
    SECONDS = 3.0

    def test_holds_just_granted_are_never_lost(self):
        b = self.start_broker(redis=self.own)
        other = self.start_broker(redis=self.own)
        errors, lost, stop = [], [], threading.Event()
        counts = {"acquire": 0, "acquire_err": 0, "turns": 0}
        lock = threading.Lock()

        def turn(c, key):
            r = c.req("ACQUIRE %s WAIT 5000" % key, timeout=8.0)
            with lock:
                counts["acquire"] += 1
            if r.startswith("ERR "):
                self.assertErr(r, "UNAVAILABLE")
                with lock:
                    counts["acquire_err"] += 1
                return
            if r == "BUSY":     # 5 s: a key held by nobody
                lost.append("%s: BUSY after WAIT 5000" % key)
                return
            tok = self.assertToken(r)
            c.send("RENEW %s" % key)
            c.send("PROCLAIM %s v%d" % (key, tok))
            c.send("CHECK %s %d" % (key, tok))
            got = [c.readline(timeout=8.0) for _ in range(3)]
            for want, r in zip(("OK [0-9]+", "OK", "OK CURRENT"), got):
                if r.startswith("ERR LOST") or not (
                        re.fullmatch(want, r) or
                        r.startswith("ERR UNAVAILABLE ")):
                    lost.append("%s %d: %r" % (key, tok, got))
                    return
            r = c.req("RELEASE %s" % key, timeout=8.0)
            if r != "OK 0" and not r.startswith("ERR UNAVAILABLE "):
                lost.append("%s %d release: %r" % (key, tok, r))
            with lock:
                counts["turns"] += 1

        def loop(c, key):
            try:
                while not stop.is_set():
                    turn(c, key)
            except Exception as e:      # the thread's failure, reported
                errors.append("%s: %r" % (key, e))

        def elsewhere(c, i):
            try:
                while not stop.is_set():
                    r = c.req("ACQUIRE far%d" % i, timeout=8.0)
                    if r.startswith("OK "):
                        c.req("RELEASE far%d" % i, timeout=8.0)
            except Exception as e:
                errors.append("other broker: %r" % e)

        threads = [threading.Thread(target=loop, args=(
            self.session(b), "k%d" % k)) for k in range(self.KEYS)
            for _ in range(self.PER_KEY)]
        threads += [threading.Thread(target=elsewhere, args=(
            self.session(other), i)) for i in range(3)]
        for t in threads:
            t.start()
        try:
            end = time.monotonic() + self.SECONDS
            n = 0
            while time.monotonic() < end:
                time.sleep(0.05)
                n += 1
                try:
                    if n % 4 == 0:
                        self.own.cli("FUNCTION", "DELETE", self.ours)
                    else:
                        self.own.cli("FUNCTION", "FLUSH")
                except RedisError:
                    pass        # deleted a moment ago, not back yet
        finally:
            stop.set()
            for t in threads:
                t.join(30.0)
        sys.stderr.write("\nfigure: %d flushes/deletes in %.1f s: %d "
                         "ACQUIREs, %d ERR, %d turns (RENEW, PROCLAIM, "
                         "CHECK of the hold just granted)\n"
                         % (n, self.SECONDS, counts["acquire"],
                            counts["acquire_err"], counts["turns"]))
        self.assertEqual((errors, lost), ([], []), counts)
        self.assertFalse(any(t.is_alive() for t in threads))
        self.assertGreater(counts["turns"], 20, counts)
        self.assertLess(counts["acquire_err"] * 10, counts["acquire"],
                        counts)
        stats = self.stats(self.session(b))
        self.assertGreater(int(stats["early_handoffs"]), 0, stats)


class TestWithoutFunctions(FunctionCase):
    """A Redis without the FUNCTION command (before Redis 7): the scripts
    by SCRIPT LOAD and EVALSHA, as before the library."""

    def setUp(self):
        BrokerTestCase.setUp(self)
        self.own = self.start_redis("--rename-command", "FUNCTION", "")

    def test_calls_go_as_evalsha(self):
        b = self.start_broker(redis=self.own)
        c = self.session(b)
        self.own.cli("CONFIG", "RESETSTAT")
        for i in range(3):
            self.pair(c, "k%d" % i)
        stats = commandstats(self.own)
        self.assertGreaterEqual(stats.get("evalsha", 0), 6, stats)
        self.assertNotIn("fcall", stats)
        self.assertIn("Redis %s has no functions (Redis < 7): scripts by "
                      "EVALSHA" % self.own.addr, b.log())


if __name__ == "__main__":
    unittest.main()
