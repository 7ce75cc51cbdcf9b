"""
test_batch.py - fewer Redis calls per request (issue 14, part 2): the
script calls a broker starts in one event-loop turn go to Redis as one
FCALL of the batch function of the library that scripts/embed.sh
generates from the scripts (EVALSHA of the batch script on a Redis
without functions), and each call's element of its reply reaches that
call's request as if it had gone alone.  A call alone still goes as its
own script's FCALL (or EVALSHA), at once (no timer waits for company).
Exclusive acquires and releases without values go as the lean exclusive
batch instead (issue 36, scripts/batch/lean.lua: FCALL lean_<hash>, or
EVALSHA of the batch script with "@lean" first), alone or many: test_lean.py
tests what it answers; here it is one more kind of batch.

To put many requests into one loop turn, a test stops the broker
(SIGSTOP), writes each session's request, and lets it go: epoll then
reports every session readable at once (libevent takes up to 32 events a
turn at first, so 40 requests make two or three batches, never 40 calls).
Calls are watched with MONITOR on Redis.  The batch script itself is also
run straight against Redis, as test_lua_multi.py runs the others, and so
is the library's batch function.  The classes ending in Evalsha run the
same on a Redis without functions (FUNCTION renamed away, as Redis < 7).
"""

import re
import socket
import time
import unittest
import uuid

# as embed.sh does
from test_lua_multi import expand, generated  # noqa: E402
from harness import (BrokerTestCase, Redis, RedisError, _RespReader,
                     _resp_encode, module_redis_start, module_redis_stop,
                     wait_until)

SESSIONS = 40
# A Redis without functions (as before Redis 7): FUNCTION is unknown.
NO_FUNCTIONS = ("--rename-command", "FUNCTION", "")


def setUpModule():
    module_redis_start()


def tearDownModule():
    module_redis_stop()


def sha(name):
    return generated()[name + ".sha"]


def fn(name):
    return generated()[name + ".fn"]


MONITOR_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')


class Monitor:
    """MONITOR on a Redis from now until stop(), which ends the window
    with an ECHO of a unique word and returns the script calls sent in
    between (FCALL / EVALSHA / EVAL / WAIT / FUNCTION, with their
    arguments as MONITOR shows them), not the commands scripts ran."""

    LINE = re.compile(r"\A[0-9.]+ \[[0-9]+ ([^\]]+)\] (.*)\Z", re.S)

    def __init__(self, redis):
        self.redis = redis
        self.sock = socket.create_connection(("127.0.0.1", redis.port),
                                             timeout=5.0)
        self.sock.sendall(_resp_encode(["MONITOR"]))
        self.reader = _RespReader(self.sock)
        if self.reader.reply() != "OK":
            raise AssertionError("MONITOR refused")

    def lines(self):
        """Every command from now until the window ends (an ECHO of a
        unique word), in order: (its source, its arguments); a script's
        own commands come from "lua", right after its call."""
        mark = "lbt-batch-" + uuid.uuid4().hex
        self.redis.cli("ECHO", mark)
        out = []
        try:
            while True:
                r = self.reader.reply()
                m = self.LINE.match(r)
                if m is None:
                    raise AssertionError("MONITOR line %r" % r)
                args = MONITOR_ARG.findall(m.group(2))
                if args[:2] == ["ECHO", mark]:
                    return out
                out.append((m.group(1), args))
        finally:
            self.sock.close()

    def stop(self):
        return [args for src, args in self.lines() if src != "lua" and
                args[0].upper() in ("FCALL", "EVALSHA", "EVAL", "WAIT",
                                    "FUNCTION")]


def lean_fn():
    """The lean exclusive batch's function: lean_<the library's hash>."""
    return "lean_" + generated()["library.name"].rsplit("_", 1)[1]


def batches(calls):
    """The batch calls among calls (FCALL of its function or of the lean
    one, or EVALSHA of the batch script's SHA1)."""
    return [a for a in calls if a[:2] in (["FCALL", fn("batch")],
                                          ["FCALL", lean_fn()],
                                          ["EVALSHA", sha("batch")])]


def lean_counts(call):
    """(acquires, releases) of a lean batch call, (0, 0) of another."""
    nkeys = int(call[2])
    args = call[3 + nkeys:]
    if not args or args[0] != "@lean":
        return (0, 0)
    return (int(args[1]), int(args[2]))


class BatchCase(BrokerTestCase):

    def sessions(self, broker, n=SESSIONS):
        out = []
        for _ in range(n):
            c = self.connect(broker)
            c.cid = c.hello()
            out.append(c)
        return out

    def burst(self, broker, clients, lines):
        """Each client's line, all read by the broker in one loop turn
        (or as few as epoll allows); returns the replies in order."""
        broker.pause()
        try:
            for c, line in zip(clients, lines):
                c.send(line)
            time.sleep(0.05)
        finally:
            broker.resume()
        return [c.readline() for c in clients]

    def assertHeldBy(self, redis, key, client, reply):
        """reply is OK <token>, and Redis stores key as that client's."""
        tok = self.assertToken(reply)
        self.assertEqual(redis.cli("GET", self.lock_key(key)),
                         "%s:%d" % (client.cid, tok),
                         "%s: the reply %r went to the wrong request?"
                         % (key, reply))
        return tok


# ------------------------------------------------------ through a broker --

class TestBatchedCalls(BatchCase):
    """On Redis 7: the broker's calls are FCALLs of its library."""

    functions = True

    def call_name(self, script):
        """What names script in the broker's calls to this Redis."""
        return fn(script) if self.functions else sha(script)

    def test_results_reach_their_requests(self):
        b = self.start_broker()
        cs = self.sessions(b)
        keys = ["k%d" % i for i in range(len(cs))]
        mon = Monitor(self.redis)
        # the first alone, as when epoll splits a burst and a turn has
        # one call: it goes as its own script's call
        replies = [cs[0].req("ACQUIRE %s" % keys[0])]
        replies += self.burst(b, cs[1:], ["ACQUIRE %s" % k for k in keys[1:]])
        toks = [self.assertHeldBy(self.redis, k, c, r)
                for k, c, r in zip(keys, cs, replies)]
        self.assertEqual(len(set(toks)), len(toks))
        replies = self.burst(b, cs, ["RELEASE %s" % k for k in keys])
        self.assertEqual(replies, ["OK 0"] * len(cs))
        for k in keys:
            self.assertEqual(self.redis.cli("EXISTS", self.lock_key(k)), 0)
        calls = mon.stop()
        # 80 requests: a handful of batches, not 80 calls
        self.assertLessEqual(len(calls), len(cs) // 2,
                             "%d script calls for %d requests"
                             % (len(calls), 2 * len(cs)))
        self.assertGreaterEqual(len(batches(calls)), 2)
        # every acquire and every release went out once, in lean
        # batches (the first alone: a lean batch of one), none as its
        # own script's call
        self.assertEqual(calls, batches(calls))
        counts = [lean_counts(c) for c in calls]
        self.assertEqual(sum(a for a, _ in counts), len(cs))
        self.assertEqual(sum(r for _, r in counts), len(cs))

    def test_handoffs_and_renewals_in_a_batch(self):
        """Releases handing keys to local waiters, renewals and new
        acquires of other keys, in one turn: each answer is its own."""
        b = self.start_broker()
        n = 12
        holders = self.sessions(b, n)
        waiters = self.sessions(b, n)
        others = self.sessions(b, n)
        for i, h in enumerate(holders):
            self.assertToken(h.req("ACQUIRE h%d" % i))
        for i, w in enumerate(waiters):
            w.send("ACQUIRE h%d WAIT 10000" % i)
        self.assertToken(others[0].req("ACQUIRE r0"))
        time.sleep(0.1)     # the waiters are queued behind the holders
        mon = Monitor(self.redis)
        clients = holders + others
        lines = (["RELEASE h%d" % i for i in range(n)] +
                 ["RENEW r0 TTL 45000"] +
                 ["ACQUIRE o%d" % i for i in range(1, n)])
        replies = self.burst(b, clients, lines)
        self.assertEqual(replies[:n], ["OK 0"] * n)
        self.assertEqual(replies[n], "OK 45000")
        for i, w in enumerate(waiters):
            self.assertHeldBy(self.redis, "h%d" % i, w, w.readline())
        for i in range(1, n):
            self.assertHeldBy(self.redis, "o%d" % i, others[i],
                              replies[n + i])
        self.assertGreater(self.redis.cli("PTTL", self.lock_key("r0")),
                           30000)
        calls = mon.stop()
        names = [a for c in batches(calls) for a in c
                 if a in ("handoff", "renew")]
        self.assertIn("handoff", names, calls)
        # the renewal: in a batch with the hand-offs, or alone when its
        # turn had no other call of its kind (the acquires of that turn
        # went lean)
        self.assertTrue("renew" in names or [
            c for c in calls if c[:2] in (["FCALL", fn("renew")],
                                          ["EVALSHA", sha("renew")])],
            calls)
        # the acquires of other keys went as lean batches
        self.assertEqual(sum(lean_counts(c)[0] for c in calls), n - 1)
        self.assertLess(len(calls), 2 * n)

    def test_lone_request_goes_alone_at_once(self):
        b = self.start_broker()
        c = self.connect(b)
        # the broker has the batch function (script), and yet ...
        if self.functions:
            names = [f[1] for lib in self.redis.cli("FUNCTION", "LIST")
                     for f in lib[5]]
            self.assertIn(fn("batch"), names)
        else:
            self.assertEqual(self.redis.cli("SCRIPT", "EXISTS",
                                            sha("batch")), [1])
        c.hello()
        mon = Monitor(self.redis)
        took = []
        for i in range(5):
            r, ms = c.timed_req("ACQUIRE lone%d" % i)
            self.assertToken(r)
            took.append(ms)
            self.assertEqual(c.req("RELEASE lone%d" % i), "OK 0")
        calls = mon.stop()
        # ... each call went at once, as a lean batch of one (an exclusive
        # acquire or release: test_lean.py), not in a batch of others
        lean = [self.call, lean_fn() if self.functions else sha("batch")]
        self.assertEqual([a[:2] for a in calls], [lean] * 10)
        self.assertEqual([lean_counts(c) for c in calls],
                         [(1, 0), (0, 1)] * 5)
        for i in range(5):
            self.assertIn(self.lock_key("lone%d" % i), calls[2 * i])
        self.assertLess(sorted(took)[2], 50.0, "ACQUIRE took %s ms" % took)

    @property
    def call(self):
        return "FCALL" if self.functions else "EVALSHA"

    def flush(self):
        """Empty what holds the broker's code in Redis."""
        self.redis.cli("FUNCTION" if self.functions else "SCRIPT", "FLUSH")

    def test_batch_sent_as_eval_after_flush(self):
        b = self.start_broker()
        cs = self.sessions(b, 10)
        self.flush()
        mon = Monitor(self.redis)
        replies = self.burst(b, cs, ["ACQUIRE f%d" % i for i in range(10)])
        for i, (c, r) in enumerate(zip(cs, replies)):
            self.assertHeldBy(self.redis, "f%d" % i, c, r)
        calls = mon.stop()
        self.assertTrue(batches(calls), calls)
        # The burst may reach the broker in two reads (a loaded run, ASan):
        # a call alone goes as its own script's call, so the first call to
        # meet the flushed cache or library may be the batch or a lone
        # one; whichever it was is sent again as EVAL, the others then run
        # as usual.
        addr = re.escape(self.redis.addr)
        if not self.functions:
            self.assertRegex(b.log(), r"script \S+ not cached in Redis "
                             r"%s: sent as EVAL" % addr)
            return
        self.assertRegex(b.log(), r"function \S+ not in Redis %s: sent as "
                         r"EVAL" % addr)
        # the library was loaded again, once
        loads = [a for a in calls if a[:2] == ["FUNCTION", "LOAD"]]
        self.assertEqual(len(loads), 1, [a[:2] for a in calls])
        self.assertIn("function library %s gone from Redis %s: loading it "
                      "again" % (generated()["library.name"],
                                 self.redis.addr), b.log())
        # and the next calls are its FCALLs again
        mon = Monitor(self.redis)
        replies = self.burst(b, cs, ["RELEASE f%d" % i for i in range(10)])
        self.assertEqual(replies, ["OK 0"] * 10)
        calls = mon.stop()
        self.assertTrue(calls)
        self.assertEqual({a[0] for a in calls}, {"FCALL"}, calls)


class TestBatchedCallsEvalsha(TestBatchedCalls):
    """The same on a Redis without functions: EVALSHA of the scripts."""

    functions = False

    @classmethod
    def setUpClass(cls):
        cls.no_fn = Redis(*NO_FUNCTIONS)

    @classmethod
    def tearDownClass(cls):
        cls.no_fn.close()

    def setUp(self):
        super().setUp()
        self.redis = self.no_fn
        self.redis.cli("FLUSHALL")


class TestBatchedGrantsAcked(BatchCase):
    """redis_replica_acks: every grant of a batch waits for the WAIT sent
    after it, and is undone when WAIT falls short."""

    def test_grants_of_a_batch_wait_for_replicas(self):
        master = self.start_redis("--repl-diskless-sync-delay", 0)
        replica = self.start_redis("--replicaof", "127.0.0.1",
                                   str(master.port))
        wait_until(lambda: acked(master), 10.0, what="replica acking")
        # 2 s: a replica's ack took over 300 ms once in a loaded CI run
        b = self.start_broker("--redis_replica_acks", 1,
                              "--redis_replica_ack_timeout_ms", 2000,
                              "--redis_timeout_ms", 3000, redis=master)
        cs = self.sessions(b, 10)
        mon = Monitor(master)
        replies = self.burst(b, cs, ["ACQUIRE a%d" % i for i in range(10)])
        for i, (c, r) in enumerate(zip(cs, replies)):
            self.assertHeldBy(master, "a%d" % i, c, r)
        calls = mon.stop()
        self.assertTrue(batches(calls), calls)
        first = calls.index(batches(calls)[0])
        self.assertIn("WAIT", [a[0] for a in calls[first + 1:]])
        # the replica stops: WAIT times out, each grant is undone
        self.addCleanup(replica.resume)
        replica.pause()
        replies = self.burst(b, cs, ["ACQUIRE u%d" % i for i in range(10)])
        for r in replies:
            self.assertErr(r, "UNAVAILABLE")
        for i in range(10):
            wait_until(lambda: master.cli("EXISTS", self.lock_key(
                "u%d" % i)) == 0, 2.0, what="grant u%d undone" % i)


def acked(master):
    """A write on master reaches its replica, as WAIT sees it (a replica
    just linked may not answer WAIT for a while: its offset stays 0)."""
    with socket.create_connection(("127.0.0.1", master.port),
                                  timeout=5.0) as s:
        s.sendall(_resp_encode(["SET", "lbt-acked", "1"]) +
                  _resp_encode(["WAIT", 1, 200]))
        rd = _RespReader(s)
        return rd.reply() == "OK" and rd.reply() == 1


# --------------------------------------------- the batch script alone --

class TestBatchScript(unittest.TestCase):
    """scripts/embed.sh's batch, straight against redis-server."""

    P = "bt"

    @classmethod
    def setUpClass(cls):
        cls.redis = module_redis_start()
        cls.sha = cls.redis.cli("SCRIPT", "LOAD", generated()["batch"])

    def setUp(self):
        self.redis.cli("FLUSHALL")

    def lk(self, name):
        return "%s:lock:%s" % (self.P, name)

    def head(self):
        return ["EVALSHA", self.sha]

    def batch(self, *calls):
        """calls: (script, keys, args); one call of the batch."""
        keys, argv = [], []
        for script, k, a in calls:
            keys += k
            argv += [script, len(k), len(a)] + list(a)
        with socket.create_connection(("127.0.0.1", self.redis.port),
                                      timeout=5.0) as s:
            s.sendall(_resp_encode(self.head() + [len(keys)] + keys + argv))
            return _RespReader(s).reply()

    def acquire(self, name, owner, ttl=10000, fence=None):
        return ("acquire", [self.lk(name), fence or self.P + ":fence",
                            self.P + ":lockdelay"],
                [owner, ttl, self.P + ":wanted", "b " + name, 0])

    def test_a_failing_call_does_not_take_the_others_down(self):
        r = self.redis
        # a counter above the clock: tokens are the counter plus one
        base = 5 * 10 ** 15
        r.cli("SET", "bt:fence", base)
        r.cli("SET", self.lk("held"), "own2:7")
        r.cli("HSET", "bt:badfence", "f", "v")   # GET of it: WRONGTYPE
        out = self.batch(
            self.acquire("a", "own1"),
            self.acquire("b", "own3", fence="bt:badfence"),
            ("release", [self.lk("held")], ["own2:7", "bt:released", "held"]),
            ("renew", [self.lk("a")], ["own1:%d" % (base + 1), 5000]),
            ("nosuch", [], []),
            self.acquire("c", "own4", ttl="abc"))
        self.assertEqual(len(out), 6, out)
        self.assertEqual(out[0], [1, base + 1, 0])     # none set aside
        self.assertIsInstance(out[1], RedisError)
        self.assertTrue(str(out[1]).startswith("WRONGTYPE"), out[1])
        self.assertEqual(out[2], 1)
        self.assertEqual(out[3], [1])
        self.assertIsInstance(out[4], RedisError)
        self.assertTrue(str(out[4]).startswith("ERR "), out[4])
        self.assertIsInstance(out[5], RedisError)       # SET PX abc
        self.assertEqual(r.cli("GET", self.lk("a")), "own1:%d" % (base + 1))
        self.assertIsNone(r.cli("GET", self.lk("b")))   # failed before SET
        self.assertIsNone(r.cli("GET", self.lk("held")))
        self.assertIsNone(r.cli("GET", self.lk("c")))
        # as alone, a failed call keeps what it wrote before its error:
        # the token it drew is gone
        self.assertEqual(r.cli("GET", "bt:fence"), str(base + 2))
        self.assertGreater(r.cli("PTTL", self.lk("a")), 0)

    def test_calls_run_in_order(self):
        """One key's calls depend on each other: each sees the last."""
        base = 5 * 10 ** 15     # above the clock: counter + 1
        self.redis.cli("SET", "bt:fence", base)
        out = self.batch(
            self.acquire("k", "A"),
            ("handoff", [self.lk("k"), "bt:fence"],
             ["A:%d" % (base + 1), "B", 20000, "bt:released", "k"]),
            ("renew", [self.lk("k")], ["B:%d" % (base + 2), 30000]),
            ("release", [self.lk("k")], ["A:%d" % (base + 1),
                                         "bt:released", "k"]),
            ("owner", [self.lk("k")], []))
        # the release finds B's hold: A's was lost, to another (3)
        self.assertEqual(out[:4], [[1, base + 1, 0], [1, base + 2, 0], [1],
                                   3])
        self.assertEqual(out[4][0], "B:%d" % (base + 2))
        self.assertGreater(out[4][1], 20000)

    def test_answers_as_each_script_alone(self):
        """The same calls, batched and alone on the same data, answer
        alike."""
        r = self.redis
        alone = []
        calls = [self.acquire("x", "A"), self.acquire("x", "B"),
                 ("owner", [self.lk("x")], []),
                 ("owner", [self.lk("free")], []),
                 ("forget", [self.lk("x")], ["A", "bt:released", "x"])]
        for script, keys, args in calls:
            alone.append(r.cli("EVAL", generated_text(script), len(keys),
                               *keys, *args))
        r.cli("FLUSHALL")
        out = self.batch(*calls)
        # PTTLs may differ by a ms or so, tokens (the clock) by more
        self.assertEqual(out[0][0::2], alone[0][0::2])
        self.assertGreater(out[0][1], alone[0][1])
        self.assertEqual(out[1][0], alone[1][0])
        self.assertEqual(out[2][0], "A:%d" % out[0][1])  # the same holder
        self.assertEqual(alone[2][0], "A:%d" % alone[0][1])
        self.assertEqual(out[3:], alone[3:])


class TestBatchFunction(TestBatchScript):
    """The same, as the library's batch function (FCALL)."""

    @classmethod
    def setUpClass(cls):
        cls.redis = module_redis_start()
        try:
            cls.redis.cli("FUNCTION", "LOAD", generated()["library"])
        except RedisError as e:
            if "already exists" not in str(e):
                raise

    def head(self):
        return ["FCALL", fn("batch")]


def generated_text(name):
    """One script's text as embed.sh expands it ("-- @include" lines)."""
    return expand(name + ".lua")


if __name__ == "__main__":
    unittest.main()
