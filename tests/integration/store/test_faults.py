"""
test_faults.py - what the broker does when Redis or the world misbehaves:
Redis killed, restarted, stopped (SIGSTOP), functions or scripts flushed,
lock keys deleted or stolen behind the broker's back, and SIGTERM of the
broker.
"""

import time
import unittest

import harness
from harness import BrokerTestCase, ms_since, wait_until

UNAVAILABLE_MS = 2000     # "within about a second"; loose bound


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class FaultCase(BrokerTestCase):
    def assertUnavailable(self, client, line, within_ms=UNAVAILABLE_MS):
        r, ms = client.timed_req(line, timeout=within_ms / 1000.0 + 3)
        self.assertErr(r, "UNAVAILABLE")
        self.assertLess(ms, within_ms, "%s took %.0f ms to fail" % (line, ms))

    def redis_state(self, client):
        return self.stats(client)["redis"]


class TestRedisDown(FaultCase):
    # Reconnects without the failover lock delay: a Redis restarted empty
    # is a new tenure, whose delay (tested in TestRestartWithoutData)
    # would hold back every grant of a free key here.
    def setUp(self):
        super().setUp()
        self.own = self.start_redis()
        self.b = self.start_broker("--failover_lock_delay_ms", "0",
                                   redis=self.own)

    def test_requests_fail_fast_and_recover_after_restart(self):
        c = self.connect(self.b)
        self.assertToken(c.req("ACQUIRE held TTL 60000"))
        self.own.stop()
        for line in ("ACQUIRE k", "OWNER k", "RENEW held",
                     "RENEW held TTL 5000", "RELEASE held"):
            self.assertUnavailable(c, line)
        # An ACQUIRE with WAIT waits out the outage as a queued one does:
        # ERR UNAVAILABLE when its WAIT runs out, not at once.
        r, ms = c.timed_req("ACQUIRE k WAIT 400", timeout=5)
        self.assertErr(r, "UNAVAILABLE")
        self.assertGreaterEqual(ms, 350)
        self.assertLess(ms, 400 + UNAVAILABLE_MS)
        # Local commands still work.  The RELEASE answered ERR
        # UNAVAILABLE is the broker's to finish: no longer held here.
        self.assertEqual(c.req("PING"), "OK PONG")
        self.assertEqual(c.req("HELD"), "OK 0")
        c.hello()
        c2 = self.connect(self.b)
        self.assertEqual(c2.req("PING"), "OK PONG")
        c2.hello("late")
        wait_until(lambda: self.redis_state(c2) == "down", 2.0,
                   what="STATS redis=down")
        # A second round still answers fast (no hang once known down).
        self.assertUnavailable(c2, "ACQUIRE k2")
        self.own.restart()
        t0 = time.monotonic()
        wait_until(lambda: self.redis_state(c2) == "up", 5.0,
                   what="STATS redis=up after restart")
        reconnect_ms = ms_since(t0)
        self.assertLess(reconnect_ms, 5000)
        tok = self.assertToken(c2.req("ACQUIRE k2"))
        cid = c2.hello()
        self.assertEqual(self.own.cli("GET", self.lock_key("k2")),
                         "%s:%d" % (cid, tok))
        self.assertEqual(c2.req("RELEASE k2"), "OK 0")
        self.assertEqual(c2.req("OWNER k2"), "OK -")

    def test_acquire_with_wait_during_an_outage_is_granted_after_it(self):
        c = self.connect(self.b)
        self.own.stop()
        wait_until(lambda: self.redis_state(c) == "down", 3.0,
                   what="STATS redis=down")
        c.send("ACQUIRE w WAIT 10000")
        self.assertTrue(c.no_reply(0.3), "answered during the outage")
        self.own.restart()
        tok = self.assertToken(c.readline(timeout=8))
        cid = c.hello()
        self.assertEqual(self.own.cli("GET", self.lock_key("w")),
                         "%s:%d" % (cid, tok))

    def test_locks_gone_with_redis_are_lost(self):
        c = self.connect(self.b)
        self.assertToken(c.req("ACQUIRE l1 TTL 60000"))
        self.assertToken(c.req("ACQUIRE l2 TTL 60000"))
        self.own.restart()          # comes back empty
        wait_until(lambda: self.redis_state(c) == "up", 5.0,
                   what="STATS redis=up after restart")
        self.assertErr(c.req("RELEASE l1"), "LOST")
        self.assertErr(c.req("RENEW l2"), "LOST")
        self.assertEqual(c.req("HELD"), "OK 0")
        self.assertToken(c.req("ACQUIRE l1"))

    def test_sigterm_with_redis_down_exits_0(self):
        c = self.connect(self.b)
        self.assertToken(c.req("ACQUIRE d TTL 60000"))
        self.own.stop()
        wait_until(lambda: self.redis_state(c) == "down", 2.0,
                   what="STATS redis=down")
        t0 = time.monotonic()
        self.assertEqual(self.b.stop(), 0)
        self.assertLess(ms_since(t0), 3000)

    def test_waiting_acquire_runs_out_while_redis_is_gone(self):
        # The waiter stays queued through the outage (issue 10: a
        # failover must not cost it its turn); when its WAIT runs out
        # with Redis still gone it hears ERR UNAVAILABLE, not BUSY.
        a, b = self.connect(self.b), self.connect(self.b)
        self.assertToken(a.req("ACQUIRE w TTL 60000"))
        b.send("ACQUIRE w WAIT 2000")
        wait_until(lambda: self.stats(a)["waiters"] == "1", 2.0,
                   what="waiters=1")
        t0 = time.monotonic()
        self.own.stop()
        self.assertTrue(b.no_reply(1.0), "the waiter was failed at once")
        r = b.readline(5.0)
        ms = ms_since(t0)
        self.assertErr(r, "UNAVAILABLE")
        self.assertGreater(ms, 1500)
        self.assertLess(ms, 4000)
        self.assertEqual(b.req("PING"), "OK PONG")

    def test_waiter_keeps_its_turn_across_a_reconnect(self):
        own = self.start_redis()
        br = self.start_broker(redis=own)
        a, b = self.connect(br), self.connect(br)
        cid = a.hello()
        tok = self.assertToken(a.req("ACQUIRE kw TTL 60000"))
        b.send("ACQUIRE kw WAIT 20000")
        wait_until(lambda: self.stats(a)["waiters"] == "1", 2.0,
                   what="waiters=1")
        own.cli("CLIENT", "KILL", "TYPE", "normal")
        wait_until(lambda: self.stats(a)["redis_reconnects"] == "1", 3.0,
                   what="the broker reconnected")
        self.assertTrue(b.no_reply(0.3), "the waiter was answered")
        self.assertEqual(own.cli("GET", self.lock_key("kw")),
                         "%s:%d" % (cid, tok))
        self.assertEqual(a.req("RELEASE kw"), "OK 0")
        self.assertGreater(self.assertToken(b.readline(3.0)), tok)

    def test_broker_started_while_redis_down_connects_later(self):
        r2 = self.start_redis()
        r2.stop()
        br = self.start_broker(redis=r2, wait_ready=False)
        c = wait_until(lambda: br.client(), 5.0, what="broker listening")
        self.addCleanup(c.close)
        self.assertEqual(c.req("PING"), "OK PONG")
        self.assertEqual(self.redis_state(c), "down")
        self.assertUnavailable(c, "ACQUIRE early")
        r2.restart()
        wait_until(lambda: self.redis_state(c) == "up", 5.0,
                   what="STATS redis=up once Redis is there")
        self.assertToken(c.req("ACQUIRE early"))


class TestRestartWithoutData(FaultCase):
    """Issue 10: a Redis that comes back without its data is a new master
    tenure.  The broker reclaims the locks its sessions hold (same value,
    same token), and for failover_lock_delay_ms no broker grants a key
    that looks free, since its holder's broker may not have reclaimed it
    yet.  Tokens go on increasing."""

    def test_held_locks_reclaimed_and_free_keys_delayed(self):
        own = self.start_redis()
        br = self.start_broker("--failover_lock_delay_ms", "1500",
                               redis=own)
        a, o = self.connect(br), self.connect(br)
        self.assertEqual(a.req("EVENTS ON"), "OK")
        cid = a.hello()
        t1 = self.assertToken(a.req("ACQUIRE r1 TTL 60000"))
        t2 = self.assertToken(a.req("ACQUIRE r2 TTL 60000"))
        own.restart()          # comes back empty
        wait_until(lambda: self.redis_state(a) == "up", 5.0,
                   what="STATS redis=up after restart")
        t0 = time.monotonic()
        self.assertEqual(own.cli("GET", self.lock_key("r1")),
                         "%s:%d" % (cid, t1))
        self.assertEqual(own.cli("GET", self.lock_key("r2")),
                         "%s:%d" % (cid, t2))
        st = self.stats(a)
        self.assertEqual(st["reclaimed"], "2")
        self.assertEqual(st["redis_tenures"], "2")
        self.assertTrue(a.no_reply(0.1), "an EVENT for a reclaimed lock")
        # a free key: not at once (one try), granted once the delay ends
        self.assertErr(o.req("ACQUIRE free"), "UNAVAILABLE")
        tf = self.assertToken(o.req("ACQUIRE free WAIT 5000"))
        self.assertGreater(ms_since(t0), 1000)
        self.assertGreater(tf, t2)
        self.assertEqual(a.req("HELD"), "OK 2 r1 r2")
        self.assertRegex(a.req("RENEW r2"), r"\AOK [0-9]+\Z")
        self.assertEqual(a.req("RELEASE r1"), "OK 0")


class TestRedisStopped(FaultCase):
    def setUp(self):
        super().setUp()
        self.own = self.start_redis()
        self.b = self.start_broker(redis=self.own)

    def test_unanswered_acquire_does_not_keep_the_key(self):
        # The ACQUIRE reaches the stopped Redis and runs once it resumes,
        # but its client was told ERR UNAVAILABLE: the broker frees that
        # grant as soon as Redis is back, not after the 60 s TTL.
        c = self.connect(self.b)
        self.own.pause()
        self.addCleanup(self.own.resume)
        self.assertUnavailable(c, "ACQUIRE orphan TTL 60000", within_ms=2500)
        self.own.resume()
        other = self.connect(self.b)
        wait_until(lambda: self.redis_state(other) == "up", 5.0,
                   what="STATS redis=up after SIGCONT")
        wait_until(lambda: self.own.cli("EXISTS",
                                        self.lock_key("orphan")) == 0,
                   2.0, what="the unanswered grant freed")
        self.assertToken(other.req("ACQUIRE orphan"))

    def test_sigstopped_redis_gives_unavailable(self):
        c = self.connect(self.b)
        self.assertToken(c.req("ACQUIRE held TTL 60000"))
        self.own.pause()
        self.addCleanup(self.own.resume)
        self.assertUnavailable(c, "ACQUIRE k", within_ms=2500)
        self.assertUnavailable(c, "OWNER held", within_ms=2500)
        self.assertEqual(c.req("PING"), "OK PONG")
        wait_until(lambda: self.redis_state(c) == "down", 3.0,
                   what="STATS redis=down while Redis is stopped")
        self.own.resume()
        wait_until(lambda: self.redis_state(c) == "up", 5.0,
                   what="STATS redis=up after SIGCONT")
        self.assertToken(c.req("ACQUIRE k"))

    def test_release_unavailable_is_finished_by_the_broker(self):
        # The timed-out RELEASE may still run in Redis once it resumes
        # (the bytes were sent), so its outcome is unknown: the broker
        # takes it over (no longer in HELD, no longer renewed), frees the
        # key as soon as Redis answers, and RELEASE again answers OK 0.
        c = self.connect(self.b)
        c.hello()
        self.assertToken(c.req("ACQUIRE keep TTL 60000"))
        self.own.pause()
        self.addCleanup(self.own.resume)
        self.assertUnavailable(c, "RELEASE keep", within_ms=2500)
        self.assertEqual(c.req("HELD"), "OK 0")
        self.own.resume()
        wait_until(lambda: self.redis_state(c) == "up", 5.0,
                   what="STATS redis=up after SIGCONT")
        wait_until(lambda: self.own.cli("EXISTS", self.lock_key("keep"))
                   == 0, 2.0, what="the key freed on reconnect")
        self.assertEqual(c.req("RELEASE keep"), "OK 0")
        self.assertEqual(c.req("HELD"), "OK 0")

    def test_release_refused_while_down_is_sent_on_reconnect(self):
        # Redis gone before the RELEASE: nothing was sent yet.  The broker
        # sends it as soon as Redis answers again (before any new grant),
        # and RELEASE again answers OK 0.
        c = self.connect(self.b)
        c.hello()
        self.assertToken(c.req("ACQUIRE keep2 TTL 60000"))
        self.own.pause()
        self.addCleanup(self.own.resume)
        self.assertUnavailable(c, "OWNER keep2", within_ms=2500)
        self.assertUnavailable(c, "RELEASE keep2", within_ms=500)
        self.assertEqual(c.req("HELD"), "OK 0")
        self.own.resume()
        wait_until(lambda: self.redis_state(c) == "up", 5.0,
                   what="STATS redis=up after SIGCONT")
        wait_until(lambda: self.own.cli("EXISTS", self.lock_key("keep2"))
                   == 0, 2.0, what="the key freed on reconnect")
        self.assertEqual(c.req("RELEASE keep2"), "OK 0")


class TestScripts(FaultCase):
    """The broker's code emptied out of Redis under it (FUNCTION FLUSH; on
    a Redis without functions, SCRIPT FLUSH): each request is still
    answered as before."""

    def flush(self):
        self.redis.cli("FUNCTION", "FLUSH")

    def test_flush_falls_back_to_eval(self):
        b = self.start_broker()
        a, o = self.connect(b), self.connect(b)
        aid = a.hello()
        tok = self.assertToken(a.req("ACQUIRE s1"))   # library loaded
        self.flush()
        t2 = self.assertToken(a.req("ACQUIRE s2 TTL 5000"))
        self.assertGreater(t2, tok)
        self.flush()
        self.assertEqual(a.req("RENEW s2 TTL 7000"), "OK 7000")
        pttl = self.redis.cli("PTTL", self.lock_key("s2"))
        self.assertTrue(6000 < pttl <= 7000, pttl)
        self.flush()
        self.assertRegex(o.req("OWNER s2"),
                         r"\AOK %s [0-9]+ %d\Z" % (aid, t2))
        self.flush()
        self.assertEqual(a.req("RELEASE s2"), "OK 0")
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key("s2")), 0)
        self.flush()
        self.assertEqual(o.req("ACQUIRE s1"), "BUSY")


class TestScriptsEvalsha(TestScripts):
    """On a Redis without functions (as before Redis 7): SCRIPT FLUSH."""

    def setUp(self):
        super().setUp()
        self.redis = self.start_redis("--rename-command", "FUNCTION", "")

    def flush(self):
        self.redis.cli("SCRIPT", "FLUSH")


class TestLost(FaultCase):
    def setUp(self):
        super().setUp()
        self.b = self.start_broker()

    def test_release_of_deleted_key_is_lost_then_forgotten(self):
        a = self.connect(self.b)
        self.assertToken(a.req("ACQUIRE l TTL 30000"))
        self.assertToken(a.req("ACQUIRE m TTL 30000"))
        self.redis.cli("DEL", self.lock_key("l"))
        self.assertErr(a.req("RELEASE l"), "LOST")
        self.assertErr(a.req("RELEASE l"), "NOTHELD")
        self.assertEqual(a.req("HELD"), "OK 1 m")
        self.assertEqual(a.req("RELEASE m"), "OK 0")
        self.assertEqual(a.req("HELD"), "OK 0")

    def test_renew_of_deleted_key_is_lost_then_forgotten(self):
        a = self.connect(self.b)
        self.assertToken(a.req("ACQUIRE l TTL 30000"))
        self.redis.cli("DEL", self.lock_key("l"))
        self.assertErr(a.req("RENEW l"), "LOST")
        self.assertErr(a.req("RENEW l"), "NOTHELD")
        self.assertErr(a.req("RELEASE l"), "NOTHELD")
        self.assertEqual(a.req("HELD"), "OK 0")
        # The key is free again; a new acquisition gets a new token.
        self.assertToken(a.req("ACQUIRE l"))

    def test_stolen_key_is_lost_and_left_alone(self):
        a = self.connect(self.b)
        tok = self.assertToken(a.req("ACQUIRE st TTL 30000"))
        thief = "00000000-0000-0000-0000-000000000000:%d" % (tok + 100)
        self.redis.cli("SET", self.lock_key("st"), thief, "PX", 30000)
        self.assertErr(a.req("RELEASE st"), "LOST")
        self.assertEqual(self.redis.cli("GET", self.lock_key("st")), thief)
        self.assertEqual(a.req("HELD"), "OK 0")
        self.assertEqual(a.req("ACQUIRE st"), "BUSY")

    def test_lost_lock_is_not_taken_back_by_auto_renew(self):
        # b is on another broker, so its ACQUIRE asks Redis, where the key
        # is gone (this broker may still believe a holds it).
        b2 = self.start_broker()
        a, b = self.connect(self.b), self.connect(b2)
        ta = self.assertToken(a.req("ACQUIRE ln TTL 300"))
        self.redis.cli("DEL", self.lock_key("ln"))
        bid = b.hello()
        tb = self.assertToken(b.req("ACQUIRE ln TTL 30000"))
        self.assertGreater(tb, ta)
        time.sleep(0.6)     # several of a's renewals would have run
        self.assertEqual(self.redis.cli("GET", self.lock_key("ln")),
                         "%s:%d" % (bid, tb))
        self.assertErr(a.req("RELEASE ln"), "LOST")
        self.assertEqual(a.req("HELD"), "OK 0")
        self.assertEqual(self.redis.cli("GET", self.lock_key("ln")),
                         "%s:%d" % (bid, tb))

    def test_lost_lock_frees_local_waiter(self):
        # A lock that vanished from Redis must not keep blocking this
        # broker's own waiters: auto-renewal finds it lost (TTL 300).
        a, w = self.connect(self.b), self.connect(self.b)
        self.assertToken(a.req("ACQUIRE lw TTL 300"))
        w.send("ACQUIRE lw WAIT 3000")
        wait_until(lambda: self.stats(a)["waiters"] == "1", 2.0,
                   what="waiters=1")
        self.redis.cli("DEL", self.lock_key("lw"))
        tw = self.assertToken(w.readline(3.5))
        wid = w.hello()
        self.assertEqual(self.redis.cli("GET", self.lock_key("lw")),
                         "%s:%d" % (wid, tw))
        self.assertErr(a.req("RELEASE lw"), "LOST")


class TestEvents(FaultCase):
    def setUp(self):
        super().setUp()
        self.b = self.start_broker()

    def test_events_on_reports_lost_lock(self):
        a = self.connect(self.b)
        self.assertEqual(a.req("events on"), "OK")
        tok = self.assertToken(a.req("ACQUIRE ev TTL 300"))
        keep = self.assertToken(a.req("ACQUIRE keep TTL 300"))
        self.redis.cli("DEL", self.lock_key("ev"))
        t0 = time.monotonic()
        self.assertEqual(a.readline(2.0), "EVENT LOST ev %d" % tok)
        self.assertLess(ms_since(t0), 1000)
        self.assertTrue(a.no_reply(0.4), "more than one event")
        self.assertEqual(a.req("HELD"), "OK 1 keep")
        self.assertErr(a.req("RELEASE ev"), "LOST")
        self.assertErr(a.req("RELEASE ev"), "NOTHELD")
        self.assertEqual(a.req("RELEASE keep"), "OK 0")
        self.assertGreater(keep, tok)

    def test_event_for_stolen_key(self):
        a = self.connect(self.b)
        self.assertEqual(a.req("EVENTS ON"), "OK")
        tok = self.assertToken(a.req("ACQUIRE sk TTL 300"))
        self.redis.cli("SET", self.lock_key("sk"),
                       "00000000-0000-0000-0000-000000000000:999999")
        self.assertEqual(a.readline(2.0), "EVENT LOST sk %d" % tok)
        self.assertErr(a.req("RENEW sk"), "LOST")
        self.assertEqual(self.redis.cli("GET", self.lock_key("sk")),
                         "00000000-0000-0000-0000-000000000000:999999")

    def test_no_events_unless_turned_on(self):
        a, b = self.connect(self.b), self.connect(self.b)
        self.assertEqual(b.req("EVENTS ON"), "OK")
        self.assertEqual(b.req("EVENTS OFF"), "OK")
        self.assertToken(a.req("ACQUIRE q1 TTL 300"))
        self.assertToken(b.req("ACQUIRE q2 TTL 300"))
        self.redis.cli("DEL", self.lock_key("q1"), self.lock_key("q2"))
        self.assertTrue(a.no_reply(0.8), "event without EVENTS ON")
        self.assertTrue(b.no_reply(0.1), "event after EVENTS OFF")
        self.assertErr(a.req("RELEASE q1"), "LOST")
        self.assertErr(b.req("RELEASE q2"), "LOST")

    def test_event_arrives_while_acquire_waits(self):
        a, b = self.connect(self.b), self.connect(self.b)
        self.assertEqual(a.req("EVENTS ON"), "OK")
        tok = self.assertToken(a.req("ACQUIRE mine TTL 300"))
        self.assertToken(b.req("ACQUIRE theirs"))
        a.send("ACQUIRE theirs WAIT 5000")
        self.redis.cli("DEL", self.lock_key("mine"))
        self.assertEqual(a.readline(2.0), "EVENT LOST mine %d" % tok)
        self.assertEqual(b.req("RELEASE theirs"), "OK 0")
        self.assertToken(a.readline())

    def test_events_arguments(self):
        a = self.connect(self.b)
        for line in ("EVENTS", "EVENTS maybe", "EVENTS ON OFF", "EVENTS 1"):
            self.assertErr(a.req(line), "BADARG")
        self.assertEqual(a.req("Events Off"), "OK")


class TestShutdown(FaultCase):
    def test_sigterm_releases_all_locks_and_exits_0(self):
        b = self.start_broker()
        a1, a2 = self.connect(b), self.connect(b)
        keys = ["t1", "t2", "t3"]
        self.assertToken(a1.req("ACQUIRE t1 TTL 60000"))
        self.assertToken(a1.req("ACQUIRE t2 TTL 60000"))
        self.assertToken(a1.req("ACQUIRE t2"))
        self.assertToken(a2.req("ACQUIRE t3 TTL 60000"))
        w = self.connect(b)
        w.send("ACQUIRE t3 WAIT 10000")
        wait_until(lambda: self.stats(a1)["waiters"] == "1", 2.0,
                   what="waiters=1")
        self.assertEqual(self.redis.cli("EXISTS", *map(self.lock_key, keys)),
                         3)
        t0 = time.monotonic()
        self.assertEqual(b.stop(), 0)
        self.assertLess(ms_since(t0), 3000)
        self.assertEqual(self.redis.cli("EXISTS", *map(self.lock_key, keys)),
                         0)
        for c in (a1, a2):
            self.assertTrue(c.closed_by_peer(1.0))
        # The waiter is answered or just closed, never handed a lock that
        # stays in Redis.
        self.assertEqual(self.redis.cli("KEYS", self.prefix + ":lock:*"), [])

    def test_sigterm_idle_exits_0_quickly(self):
        b = self.start_broker()
        c = self.connect(b)
        self.assertEqual(c.req("PING"), "OK PONG")
        t0 = time.monotonic()
        self.assertEqual(b.stop(), 0)
        self.assertLess(ms_since(t0), 3000)


if __name__ == "__main__":
    unittest.main()
