"""
test_robustness.py - regressions for issue 9's defects in the lock table,
the scripts and shutdown.  Each test failed on the broker before the fix:

  D2  a session that ended while the Redis connection was down kept its
      locks in Redis for the whole TTL;
  D3  SIGTERM during a Redis reconnect exited at once, freeing nothing;
  D4  a free key was answered BUSY when Redis answered slowly for the TTL;
  D5  TTLs of 1-5 ms expired in Redis before the first renewal, so another
      broker took the key from a live session;
  D6  after a RELEASE answered ERR UNAVAILABLE, the broker's other sessions
      got BUSY for that key forever;
  D7  tokens past 1e14 were stored as "1e+14", and past 2^53 two grants
      shared a token;
  D9  a SIGHUP as soon as the port answered could kill the broker;
  D16 a RELEASE retried after Redis restarted empty answered ERR LOST
      (PROTOCOL.md said OK 0).
And one found by issue 11's chaos test (TestBrokerStopped): a broker
stopped longer than redis_timeout_ms dropped its Redis connection on
waking, with the replies it waited for unread in the socket.
"""

import os
import resource
import signal
import socket
import threading
import time

import harness
from harness import BrokerTestCase, ms_since, wait_until

MAX_TOKEN = 2 ** 53 - 1


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class RobustCase(BrokerTestCase):
    def redis_state(self, client):
        return self.stats(client)["redis"]

    def own_broker(self, *extra):
        """A broker on a Redis of its own (the test stops and pauses it)."""
        self.own = self.start_redis()
        self.addCleanup(self.own.resume)
        return self.start_broker("--redis_timeout_ms", "200", *extra,
                                 redis=self.own)

    def make_redis_down(self, broker, probe):
        """Pause Redis and make the broker notice: a request in flight
        times out, the connection drops, reconnects get no answer."""
        self.own.pause()
        self.assertErr(probe.req("OWNER probe", timeout=3.0), "UNAVAILABLE")
        wait_until(lambda: self.redis_state(probe) == "down", 3.0,
                   what="STATS redis=down")

    def exists(self, key, redis=None):
        return (redis or self.own).cli("EXISTS", self.lock_key(key))


class TestSessionEndWhileRedisDown(RobustCase):
    """D2: remember what must be freed, free it when Redis answers."""

    def test_locks_of_a_session_gone_during_an_outage_freed_on_reconnect(self):
        b = self.own_broker()
        holder, probe = self.connect(b), self.connect(b)
        for k in ("d2a", "d2b"):
            self.assertToken(holder.req("ACQUIRE %s TTL 60000" % k))
        self.make_redis_down(b, probe)
        holder.close()
        wait_until(lambda: self.stats(probe)["sessions"] == "1", 2.0,
                   what="the holder's session ended")
        self.own.resume()
        t0 = time.monotonic()
        wait_until(lambda: self.exists("d2a") + self.exists("d2b") == 0,
                   5.0, what="the gone session's locks freed in Redis "
                   "(TTL 60 s)")
        self.assertLess(ms_since(t0), 3000)
        # and a new session can have them at once
        self.assertToken(probe.req("ACQUIRE d2a WAIT 2000"))


class TestSigtermDuringReconnect(RobustCase):
    """D3: SIGTERM waits (within ~2 s) for Redis to free the locks."""

    def test_sigterm_while_redis_is_away_frees_locks_once_it_answers(self):
        b = self.own_broker()
        holder, probe = self.connect(b), self.connect(b)
        self.assertToken(holder.req("ACQUIRE d3 TTL 60000"))
        self.make_redis_down(b, probe)
        t0 = time.monotonic()
        os.kill(b.pid, signal.SIGTERM)
        time.sleep(0.3)
        self.assertTrue(b.alive(), "the broker exited at once on SIGTERM "
                        "while Redis was away")
        self.own.resume()
        rc = b.proc.wait(timeout=10)
        took = ms_since(t0)
        self.assertEqual(rc, 0, b.log())
        self.assertLess(took, 3000, "shutdown took %.0f ms" % took)
        self.assertEqual(self.exists("d3"), 0,
                         "the lock outlived the broker's shutdown")

    def test_sigterm_gives_up_after_its_budget_when_redis_stays_away(self):
        b = self.own_broker()
        holder, probe = self.connect(b), self.connect(b)
        self.assertToken(holder.req("ACQUIRE d3b TTL 60000"))
        self.make_redis_down(b, probe)
        t0 = time.monotonic()
        os.kill(b.pid, signal.SIGTERM)
        rc = b.proc.wait(timeout=10)
        took = ms_since(t0)
        self.assertEqual(rc, 0, b.log())
        self.assertGreater(took, 1500, "did not wait for Redis at all")
        self.assertLess(took, 4000, "shutdown took %.0f ms" % took)
        self.assertIn("not confirmed by Redis", b.log())


class TestSlowRedisIsNotBusy(RobustCase):
    """D4: BUSY means someone else holds the key, nothing else."""

    def stalled_acquire(self, b, line, stall_s=0.35):
        c = self.connect(b, timeout=5.0)
        self.redis_paused_for(stall_s, lambda: c.send(line))
        return c.readline(5.0)

    def redis_paused_for(self, seconds, during):
        self.own.pause()
        try:
            during()
            time.sleep(seconds)
        finally:
            self.own.resume()

    def test_one_try_on_a_free_key_during_a_stall_is_not_busy(self):
        self.own = self.start_redis()
        b = self.start_broker("--redis_timeout_ms", "2000", redis=self.own)
        r = self.stalled_acquire(b, "ACQUIRE d4 TTL 300")
        self.assertNotEqual(r, "BUSY", "a free key answered BUSY")
        self.assertErr(r, "UNAVAILABLE")
        c = self.connect(b)
        wait_until(lambda: c.req("OWNER d4") == "OK -", 2.0,
                   what="the late grant given back")
        self.assertToken(c.req("ACQUIRE d4 TTL 300"))

    def test_waiting_acquire_during_a_stall_retries_within_its_deadline(self):
        self.own = self.start_redis()
        b = self.start_broker("--redis_timeout_ms", "2000", redis=self.own)
        r = self.stalled_acquire(b, "ACQUIRE d4w TTL 300 WAIT 5000")
        self.assertToken(r)

    def test_tiny_ttl_on_free_keys_never_busy(self):
        # TTL 1: on the old broker every grant whose reply came later than
        # 2/3 ms was given back and answered BUSY.  Many sessions asking
        # at once make most replies that late.
        b = self.start_broker()
        clients = [b.client() for _ in range(150)]
        for c in clients:
            self.addCleanup(c.close)
        for i, c in enumerate(clients):
            c.send("ACQUIRE t%d TTL 1" % i)
        replies = [c.readline() for c in clients]
        busy = [i for i, r in enumerate(replies) if r == "BUSY"]
        self.assertEqual(busy, [], "free keys answered BUSY")
        for r in replies:
            self.assertToken(r)


class TestTtlFloor(RobustCase):
    """D5: min_ttl_ms keeps short-TTL locks exclusive under load."""

    HOLDERS = 12
    SECONDS = 3.0

    def test_ttl_1_is_raised_to_the_floor(self):
        b = self.start_broker()
        c = self.connect(b)
        self.assertToken(c.req("ACQUIRE fl TTL 1"))
        pttl = self.redis.cli("PTTL", self.lock_key("fl"))
        self.assertGreater(pttl, 100, "TTL 1 was not raised (PTTL %d)"
                           % pttl)

    def test_locks_at_the_floor_stay_exclusive_under_load(self):
        a = self.start_broker()
        other = self.start_broker()
        holders = []
        for i in range(self.HOLDERS):
            h = self.connect(a)
            self.assertEqual(h.req("EVENTS ON"), "OK")
            self.assertToken(h.req("ACQUIRE f%d TTL 1" % i))
            holders.append(h)
        stop = time.monotonic() + self.SECONDS
        errors = []

        def load(n):
            try:
                c = a.client()
                while time.monotonic() < stop:
                    c.req("ACQUIRE load%d TTL 1" % n)
                    c.req("RELEASE load%d" % n)
                c.close()
            except Exception as e:   # noqa: BLE001 - reported below
                errors.append("load: %r" % e)

        def thief():
            try:
                c = other.client()
                i = 0
                while time.monotonic() < stop:
                    r = c.req("ACQUIRE f%d" % (i % self.HOLDERS))
                    if r != "BUSY":
                        errors.append("f%d taken by another broker from a "
                                      "live session: %r"
                                      % (i % self.HOLDERS, r))
                        return
                    i += 1
                c.close()
            except Exception as e:   # noqa: BLE001
                errors.append("thief: %r" % e)

        threads = [threading.Thread(target=load, args=(n,))
                   for n in range(6)] + [threading.Thread(target=thief)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.SECONDS + 30)
        self.assertEqual(errors, [])
        for i, h in enumerate(holders):
            self.assertTrue(h.no_reply(0.05), "an EVENT for f%d" % i)
            self.assertEqual(h.req("RELEASE f%d" % i), "OK 0")


class TestReleaseUnavailable(RobustCase):
    """D6 and D16: a RELEASE that Redis could not confirm."""

    def test_other_sessions_are_not_blocked_after_a_timed_out_release(self):
        b = self.own_broker()
        a, c = self.connect(b), self.connect(b)
        self.assertToken(a.req("ACQUIRE d6 TTL 60000"))
        self.own.pause()
        self.assertErr(a.req("RELEASE d6", timeout=3.0), "UNAVAILABLE")
        self.own.resume()
        wait_until(lambda: self.redis_state(c) == "up", 5.0,
                   what="STATS redis=up")
        r, ms = c.timed_req("ACQUIRE d6 WAIT 3000", timeout=5.0)
        self.assertToken(r)
        self.assertLess(ms, 2500)
        self.assertEqual(a.req("RELEASE d6"), "OK 0")
        self.assertEqual(c.req("RELEASE d6"), "OK 0")

    def test_release_refused_while_down_then_others_acquire(self):
        b = self.own_broker()
        a, c = self.connect(b), self.connect(b)
        self.assertToken(a.req("ACQUIRE d6b TTL 60000"))
        self.make_redis_down(b, c)
        self.assertErr(a.req("RELEASE d6b"), "UNAVAILABLE")
        self.own.resume()
        wait_until(lambda: self.redis_state(c) == "up", 5.0,
                   what="STATS redis=up")
        self.assertToken(c.req("ACQUIRE d6b WAIT 3000", timeout=5.0))

    def test_retried_release_after_redis_restarted_empty_is_ok_0(self):
        b = self.own_broker()
        a = self.connect(b)
        self.assertToken(a.req("ACQUIRE d16 TTL 60000"))
        self.own.stop()
        self.assertErr(a.req("RELEASE d16", timeout=3.0), "UNAVAILABLE")
        self.own.restart()
        wait_until(lambda: self.redis_state(a) == "up", 5.0,
                   what="STATS redis=up")
        self.assertEqual(a.req("RELEASE d16"), "OK 0")
        self.assertErr(a.req("RELEASE d16"), "NOTHELD")

    def test_retried_timed_out_release_after_empty_restart_is_ok_0(self):
        b = self.own_broker()
        a = self.connect(b)
        self.assertToken(a.req("ACQUIRE d16b TTL 60000"))
        self.own.pause()
        self.assertErr(a.req("RELEASE d16b", timeout=3.0), "UNAVAILABLE")
        self.own.resume()
        self.own.restart()
        wait_until(lambda: self.redis_state(a) == "up", 5.0,
                   what="STATS redis=up")
        self.assertEqual(a.req("RELEASE d16b"), "OK 0")


class TestLargeTokens(RobustCase):
    """D7: tokens are integers all the way, and stop below 2^53."""

    def fence(self, value):
        self.redis.cli("SET", "%s:fence" % self.prefix, str(value))

    def test_tokens_past_1e14_keep_their_digits(self):
        # (tokens follow the clock, about 1.8e15 now: a counter above it
        # makes the next token the counter plus one)
        b = self.start_broker()
        a = self.connect(b)
        cid = a.hello()
        self.fence(4999999999999999)
        tok = self.assertToken(a.req("ACQUIRE big"))
        self.assertEqual(tok, 5000000000000000)
        self.assertEqual(self.redis.cli("GET", self.lock_key("big")),
                         "%s:5000000000000000" % cid)
        owner = a.req("OWNER big").split(" ")
        self.assertEqual((owner[0], owner[1], owner[3]),
                         ("OK", cid, "5000000000000000"))
        self.assertRegex(a.req("RENEW big"), r"\AOK [0-9]+\Z")
        self.assertEqual(a.req("RELEASE big"), "OK 0")
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key("big")), 0)

    def test_no_token_past_2_pow_53_minus_1(self):
        b = self.start_broker()
        a, w, c = self.connect(b), self.connect(b), self.connect(b)
        self.fence(MAX_TOKEN - 2)
        self.assertEqual(self.assertToken(a.req("ACQUIRE t1")),
                         MAX_TOKEN - 1)
        w.send("ACQUIRE t1 WAIT 5000")
        self.assertTrue(w.no_reply(0.2))
        self.assertEqual(a.req("RELEASE t1"), "OK 0")    # a handoff
        self.assertEqual(self.assertToken(w.readline()), MAX_TOKEN)
        self.assertErr(c.req("ACQUIRE t2"), "LIMIT")
        # a handoff with no token left: the release happens, the waiter
        # hears why it got nothing
        c.send("ACQUIRE t1 WAIT 5000")
        self.assertTrue(c.no_reply(0.2))
        self.assertEqual(w.req("RELEASE t1"), "OK 0")
        self.assertErr(c.readline(), "LIMIT")
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key("t1")), 0)
        self.assertEqual(int(self.redis.cli("GET", "%s:fence"
                                            % self.prefix)), MAX_TOKEN)


class TestSighupAtStart(RobustCase):
    """D9: handlers are in place before the port answers."""

    STARTS = 40

    def test_sighup_as_soon_as_the_port_answers(self):
        import socket
        for i in range(self.STARTS):
            b = self.start_broker(wait_ready=False)
            deadline = time.monotonic() + 5
            while True:
                try:
                    socket.create_connection(("127.0.0.1", b.port),
                                             timeout=0.5).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or not b.alive():
                        self.fail("broker did not start:\n" + b.log())
                    time.sleep(0.0005)
            os.kill(b.pid, signal.SIGHUP)
            time.sleep(0.05)
            self.assertTrue(b.alive(), "start %d: SIGHUP killed the broker "
                            "(rc %s)" % (i, b.proc.poll()))
            self.assertEqual(b.client().req("PING"), "OK PONG")
            b.stop()


class TestLoweredKeyLimit(RobustCase):
    """D10: a lowered max_key_len applies to new keys only."""

    def test_held_long_key_still_released_after_sighup(self):
        conf = os.path.join(self.own_dir(), "lb.conf")
        with open(conf, "w") as f:
            f.write("max_key_len 300\n")
        b = self.start_broker("-c", conf)
        c = self.connect(b)
        long_key = "L" * 300
        self.assertToken(c.req("ACQUIRE " + long_key))
        with open(conf, "w") as f:
            f.write("max_key_len 100\n")
        os.kill(b.pid, signal.SIGHUP)
        wait_until(lambda: "configuration reloaded" in b.log(), 3.0,
                   what="the reload")
        self.assertErr(c.req("ACQUIRE " + "N" * 101), "BADARG")
        self.assertRegex(c.req("RENEW " + long_key), r"\AOK [0-9]+\Z")
        self.assertRegex(c.req("OWNER " + long_key), r"\AOK ")
        self.assertEqual(c.req("RELEASE " + long_key), "OK 0")
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key(long_key)),
                         0)

    def own_dir(self):
        import shutil
        import tempfile
        d = tempfile.mkdtemp(prefix="lbt-conf-")
        self.addCleanup(shutil.rmtree, d, True)
        return d


class TestCleanupWhileConnected(RobustCase):
    """Review of issue 9: a release Redis refused (an error reply, the
    connection still up) was sent again only on a reconnect, so the key
    stayed taken for its whole TTL."""

    def test_refused_release_is_retried_without_a_reconnect(self):
        own = self.start_redis()
        b = self.start_broker(redis=own)
        a, d = self.connect(b), self.connect(b)
        self.assertToken(a.req("ACQUIRE rr TTL 60000"))
        own.cli("CONFIG", "SET", "min-replicas-to-write", "1")
        self.assertErr(a.req("RELEASE rr"), "UNAVAILABLE")
        own.cli("CONFIG", "SET", "min-replicas-to-write", "0")
        wait_until(lambda: own.cli("EXISTS", self.lock_key("rr")) == 0,
                   5.0, what="the refused release sent again (TTL 60 s)")
        self.assertToken(d.req("ACQUIRE rr"))
        self.assertEqual(a.req("RELEASE rr"), "OK 0")
        self.assertEqual(self.stats(d)["redis_reconnects"], "0")


class TestWaitersThroughAPeerClose(RobustCase):
    """Review of issue 10: when Redis itself closes the connection, hiredis
    fails the requests in flight before it reports the disconnect; the
    waiters whose attempt was in flight were answered at once, as if
    Redis were up and refusing."""

    def test_waiters_with_an_attempt_in_flight_keep_their_turn(self):
        own = self.start_redis()
        self.addCleanup(own.resume)
        b = self.start_broker("--redis_timeout_ms", "3000",
                              "--failover_lock_delay_ms", "1000", redis=own)
        w1, w2 = self.connect(b, timeout=10), self.connect(b, timeout=10)
        own.pause()
        w1.send("ACQUIRE pc WAIT 20000")     # its attempt is in flight
        w2.send("ACQUIRE pc WAIT 20000")     # queued behind it
        time.sleep(0.3)
        own.restart()   # kill -9 while stopped: a peer close, no reply
        self.assertTrue(w1.no_reply(0.5) and w2.no_reply(0.01),
                        "a waiter was answered by the connection loss")
        self.assertToken(w1.readline(8.0))   # after the lock delay
        self.assertTrue(w2.no_reply(0.3))    # still behind w1
        self.assertEqual(w1.req("RELEASE pc"), "OK 0")
        self.assertToken(w2.readline(3.0))


class TestErrorReplyIsFinal(RobustCase):
    """Review of issue 10: an error reply on a live connection (here
    NOREPLICAS) made a waiting ACQUIRE try again at once, in a loop, for
    its whole wait (34,000 EVALSHAs in 2 s).  And a refused write is an
    outage like any other: the waiter keeps its place until its WAIT
    runs out, trying again with backoff, and is granted if Redis takes
    writes again meanwhile."""

    def test_refused_acquire_is_answered_not_retried(self):
        own = self.start_redis()
        b = self.start_broker(redis=own)
        c = self.connect(b)
        own.cli("CONFIG", "SET", "min-replicas-to-write", "1")
        own.cli("CONFIG", "RESETSTAT")
        r, ms = c.timed_req("ACQUIRE er WAIT 2000", timeout=5.0)
        self.assertErr(r, "UNAVAILABLE")
        self.assertGreaterEqual(ms, 1900)       # its WAIT, not at once
        stats = own.cli("INFO", "commandstats")
        # a function that may write is refused before it runs (counted
        # as rejected), a script as EVALSHA while it runs
        calls = [int(p.split("=")[1]) for line in stats.splitlines()
                 if line.startswith(("cmdstat_fcall:", "cmdstat_evalsha:"))
                 for p in line.split(":", 1)[1].split(",")
                 if p.startswith(("calls=", "rejected_calls="))]
        # backoff 50 ms doubling to 1 s: about 6 tries in 2 s, no loop
        self.assertGreater(sum(calls), 0, stats)
        self.assertLessEqual(sum(calls), 10, stats)
        own.cli("CONFIG", "SET", "min-replicas-to-write", "0")

    def test_waiter_keeps_its_place_while_redis_refuses_writes(self):
        # maxmemory with noeviction: Redis refuses every script (OOM).
        # The holder's RELEASE is refused too (the broker finishes it);
        # the waiter's turn comes while Redis refuses: it keeps its place
        # and is granted once Redis takes writes again, seconds of WAIT
        # later -- not ERR UNAVAILABLE at once.
        own = self.start_redis()
        b = self.start_broker(redis=own)
        h, w = self.connect(b), self.connect(b)
        self.assertToken(h.req("ACQUIRE oom"))
        w.send("ACQUIRE oom WAIT 8000")
        self.assertTrue(w.no_reply(0.2))
        own.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
        own.cli("CONFIG", "SET", "maxmemory", "1")
        try:
            self.assertErr(h.req("RELEASE oom"), "UNAVAILABLE")
            self.assertTrue(w.no_reply(1.5),
                            "the waiter was answered while Redis refused")
        finally:
            own.cli("CONFIG", "SET", "maxmemory", "0")
        self.assertToken(w.readline(timeout=5.0))


class TestReleasesUnderMaxmemory(RobustCase):
    """A Redis at maxmemory with noeviction refuses a function that may
    write before it runs, whatever it would do: as FCALLs, releases were
    refused too (as EVAL, their DEL and PUBLISH went through), so a full
    Redis kept every lock until its TTL.  Releases (a RELEASE, a session
    end's, alone or many in one batch) run in functions flagged
    allow-oom, reads (OWNER, CHECK) in no-writes ones; an ACQUIRE is still
    refused as a write.  The same on a Redis without functions (EVAL)."""

    EXTRA = ()

    def full_redis(self):
        own = self.start_redis(*self.EXTRA)
        self.addCleanup(lambda: own.cli("CONFIG", "SET", "maxmemory", "0"))
        return own

    def fill(self, own):
        own.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
        own.cli("CONFIG", "SET", "maxmemory", "1")

    def test_releases_and_reads_answer_when_redis_is_full(self):
        own = self.full_redis()
        b = self.start_broker(redis=own)
        c, ender = self.connect(b), self.connect(b)
        many = [self.connect(b) for _ in range(8)]
        toks = {k: self.assertToken(c.req("ACQUIRE %s" % k))
                for k in ("f1", "f2")}
        for k in ("e1", "e2"):
            self.assertToken(ender.req("ACQUIRE %s" % k))
        for i, m in enumerate(many):
            self.assertToken(m.req("ACQUIRE m%d" % i))
        self.fill(own)
        self.assertErr(c.req("ACQUIRE f3"), "UNAVAILABLE")   # a write
        self.assertEqual(c.req("RELEASE f1"), "OK 0")
        self.assertEqual(self.exists("f1", own), 0)
        self.assertRegex(c.req("OWNER f2"),
                         r"\AOK [0-9a-f-]{36} [0-9]+ %d\Z" % toks["f2"])
        self.assertEqual(c.req("CHECK f2 %d" % toks["f2"]), "OK CURRENT")
        self.assertEqual(c.req("CHECK f1 %d" % toks["f1"]), "OK STALE -")
        # many in one loop turn: one batch of releases
        b.pause()
        try:
            for i, m in enumerate(many):
                m.send("RELEASE m%d" % i)
            time.sleep(0.05)
        finally:
            b.resume()
        self.assertEqual([m.readline() for m in many], ["OK 0"] * len(many))
        for i in range(len(many)):
            self.assertEqual(self.exists("m%d" % i, own), 0)
        # a session's end frees its keys
        ender.close()
        wait_until(lambda: self.exists("e1", own) + self.exists("e2", own)
                   == 0, 3.0, what="the ended session's keys freed")
        self.assertEqual(c.req("RELEASE f2"), "OK 0")
        self.assertEqual(self.exists("f2", own), 0)


class TestReleasesUnderMaxmemoryEvalsha(TestReleasesUnderMaxmemory):
    """The same on a Redis without functions (as before Redis 7)."""

    EXTRA = ("--rename-command", "FUNCTION", "")


class TestNoRefusalsWhileConnecting(RobustCase):
    """A one-try ACQUIRE sent as soon as a (re)started broker listens,
    while its first Redis connection was still being made, answered ERR
    UNAVAILABLE at once (19-23 of 25 tries under load).  A request that
    comes while the connection is being made waits for that attempt, at
    most redis_timeout_ms: here Redis is stopped (SIGSTOP) while the
    broker starts, so the attempt hangs in its handshake until Redis goes
    on, 0.4 s later.  An attempt that fails answers at once."""

    CLIENTS = 100

    def start_clients(self, port, lines, replies):
        """A thread per line: connect as soon as port listens, send the
        line, keep the reply (or the error)."""
        def one(i, line):
            deadline = time.monotonic() + 5.0
            while True:
                try:
                    c = harness.Client(port, timeout=5.0)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        replies[i] = "never connected"
                        return
                    time.sleep(0.002)
            try:
                replies[i] = c.req(line, timeout=5.0)
            except (OSError, EOFError, AssertionError) as e:
                replies[i] = "no reply: %r" % e
            finally:
                c.close()
        threads = [threading.Thread(target=one, args=(i, line))
                   for i, line in enumerate(lines)]
        for t in threads:
            t.start()
        return threads

    def test_clients_of_a_restart_wait_for_the_first_connection(self):
        own = self.start_redis()
        self.addCleanup(own.resume)
        b = self.start_broker(redis=own)
        tok = self.assertToken(self.connect(b).req("ACQUIRE held"))
        b.kill()            # a crash: "held" stays in Redis
        own.pause()
        b2 = self.start_broker("--redis_timeout_ms", "2000", redis=own,
                               wait_ready=False)
        lines = ["ACQUIRE k%d" % i for i in range(self.CLIENTS)]
        lines += ["OWNER k0", "CHECK k0 1", "OWNER held", "RELEASE k0"]
        replies = [None] * len(lines)
        threads = self.start_clients(b2.port, lines, replies)
        time.sleep(0.4)
        own.resume()
        for t in threads:
            t.join(10.0)
        refused = [r for r in replies if not r or not r.startswith(
            ("OK", "ERR NOTHELD"))]
        self.assertEqual(refused, [], replies)
        for r in replies[:self.CLIENTS]:
            self.assertToken(r)
        self.assertRegex(replies[-4], r"\AOK( -|( [^ ]+){3})\Z")
        self.assertRegex(replies[-3], r"\AOK STALE ([0-9]+|-)\Z")
        self.assertRegex(replies[-2], r"\AOK [0-9a-f-]{36} [0-9]+ %d\Z"
                         % tok)
        self.assertErr(replies[-1], "NOTHELD")
        self.assertEqual(own.cli("EXISTS", self.lock_key("k1")), 0,
                         "the sessions ended: their keys freed")

    def test_an_attempt_that_fails_answers_at_once(self):
        own = self.start_redis()
        port = own.port
        own.stop()          # nothing listens: every attempt fails at once
        b = self.start_broker("--redis_timeout_ms", "2000", redis=own,
                              wait_ready=False)
        conns = []

        def listening():
            try:
                conns.append(b.client(timeout=5.0))
                return True
            except OSError:
                return False
        wait_until(listening, 5.0, what="the broker listens")
        c = conns[0]
        self.addCleanup(c.close)
        for line in ("ACQUIRE x", "OWNER x", "CHECK x 1"):
            r, ms = c.timed_req(line, timeout=5.0)
            self.assertErr(r, "UNAVAILABLE")
            self.assertLess(ms, 500, "%s waited for a Redis that was "
                            "refusing connections" % line)
        self.assertEqual(port, own.port)


class TestBrokerStopped(RobustCase):
    """Issue 11's chaos test: a broker stopped (SIGSTOP) longer than
    redis_timeout_ms while a command was in flight dropped its Redis
    connection on waking, before reading the reply waiting in its socket:
    the request was answered ERR UNAVAILABLE, and a lock that expired and
    was taken meanwhile was never reported lost (its RELEASE answered
    UNAVAILABLE, then OK 0).  The time the broker did not run is its own,
    not Redis's: the reply is read and the news it carries kept."""

    def stop_broker_around(self, b, secs):
        os.kill(b.pid, signal.SIGSTOP)
        try:
            time.sleep(secs)
        finally:
            os.kill(b.pid, signal.SIGCONT)

    def test_reply_waiting_in_the_socket_is_read(self):
        b = self.own_broker()
        c = self.connect(b)
        tok = self.assertToken(c.req("ACQUIRE stalled TTL 5000"))
        self.own.pause()
        c.send("OWNER stalled")         # in flight: Redis is stopped
        time.sleep(0.05)
        os.kill(b.pid, signal.SIGSTOP)
        self.own.resume()               # the reply reaches the socket
        time.sleep(0.8)                 # 4x redis_timeout_ms (200)
        os.kill(b.pid, signal.SIGCONT)
        self.assertRegex(c.readline(timeout=3.0),
                         r"\AOK [0-9a-f-]{36} [0-9]+ %d\Z" % tok)
        st = self.stats(c)
        self.assertEqual(st["redis_reconnects"], "0", b.log())
        self.assertIn("event loop stalled", b.log())

    def test_lock_lost_while_stopped_is_reported(self):
        b1 = self.own_broker()
        b2 = self.start_broker("--redis_timeout_ms", "200", redis=self.own)
        c1, c2 = self.connect(b1), self.connect(b2)
        self.assertEqual(c1.req("EVENTS ON"), "OK")
        t1 = self.assertToken(c1.req("ACQUIRE gone TTL 300"))
        # load, so that b1 has commands in flight when it is stopped
        stop = threading.Event()

        def load():
            c = b1.client(timeout=5.0)
            try:
                while not stop.is_set():
                    c.req("ACQUIRE load")
                    c.req("RELEASE load")
            except (OSError, EOFError, AssertionError):
                pass
            finally:
                c.close()

        th = threading.Thread(target=load, daemon=True)
        th.start()
        self.addCleanup(th.join, 5.0)
        self.addCleanup(stop.set)
        time.sleep(0.05)
        os.kill(b1.pid, signal.SIGSTOP)
        try:
            t2 = self.assertToken(c2.req("ACQUIRE gone WAIT 3000 TTL 300",
                                         timeout=5.0))
            self.assertGreater(t2, t1)
            self.assertEqual(c2.req("RELEASE gone"), "OK 0")
            c1.send("RELEASE gone")
            time.sleep(0.6)
        finally:
            os.kill(b1.pid, signal.SIGCONT)
        lines = [c1.readline(timeout=3.0)]
        if lines[-1].startswith("EVENT LOST"):
            lines.append(c1.readline(timeout=3.0))
        self.assertTrue(lines[-1].startswith("ERR LOST"),
                        "the holder of a lock taken while its broker was "
                        "stopped was not told: %r\n%s" % (lines, b1.log()))
        stop.set()


class TestDescriptorsShort(RobustCase):
    """Issue 23's sibling of the /metrics flood, on the client listener:
    with the broker out of descriptors, accept() fails; the listener
    pauses (it did), and the error is logged at most once per 10 s with
    the count since (it was logged at every pause: 10 lines a second)."""

    def test_accept_errors_pause_and_are_logged_once(self):
        b = self.start_broker()
        c = self.connect(b)
        soft, hard = resource.prlimit(b.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(b.pid, resource.RLIMIT_NOFILE, (48, hard))
        socks = []
        self.addCleanup(lambda: [s.close() for s in socks])
        for _ in range(80):
            socks.append(socket.create_connection(("127.0.0.1", b.port),
                                                  timeout=5))
        time.sleep(1.5)
        lines = b.log().count("accept: Too many open files")
        print("\n  %d accept error lines in 1.5 s" % lines, end=" ",
              flush=True)
        self.assertGreaterEqual(lines, 1, "no EMFILE: the test did not "
                                "exhaust the descriptors")
        self.assertLessEqual(lines, 1, "accept errors flood the log")
        self.assertEqual(c.req("PING"), "OK PONG")
        for s in socks:
            s.close()
        resource.prlimit(b.pid, resource.RLIMIT_NOFILE, (soft, hard))
        wait_until(lambda: self.connect(b).req("PING") == "OK PONG", 3.0,
                   what="new sessions served again")
