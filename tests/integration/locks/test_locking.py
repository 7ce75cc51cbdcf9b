"""
test_locking.py - lock semantics: acquire/busy/wait, reentrancy, release on
session end, fencing tokens, renew and auto-renew, FIFO waiters, limits,
and two brokers sharing one Redis.
"""

import re
import threading
import time
import unittest

import harness
from harness import UUID_RE, BrokerTestCase, ms_since, wait_until


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class LockCase(BrokerTestCase):
    def setUp(self):
        super().setUp()
        self.b = self.start_broker()

    def waiters_are(self, client, n, timeout=2.0):
        """Wait until STATS (asked on client) shows n waiters."""
        wait_until(lambda: self.stats(client)["waiters"] == str(n), timeout,
                   what="waiters=%d" % n)

    def owner_ttl(self, client, key):
        r = client.req("OWNER " + key)
        m = re.fullmatch(r"OK (%s) ([0-9]+) ([0-9]+)" % UUID_RE, r)
        self.assertIsNotNone(m, r)
        return m.group(1), int(m.group(2)), int(m.group(3))


class TestAcquire(LockCase):
    def test_acquire_sets_the_redis_key(self):
        a = self.connect(self.b)
        cid = a.hello()
        tok = self.assertToken(a.req("ACQUIRE res TTL 7000"))
        self.assertEqual(self.redis.cli("GET", self.lock_key("res")),
                         "%s:%d" % (cid, tok))
        pttl = self.redis.cli("PTTL", self.lock_key("res"))
        self.assertTrue(6000 < pttl <= 7000, pttl)
        self.assertEqual(int(self.redis.cli("GET", self.prefix + ":fence")),
                         tok)
        self.assertEqual(a.req("RELEASE res"), "OK 0")
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key("res")), 0)

    def test_busy_without_wait_is_immediate(self):
        a, b = self.connect(self.b), self.connect(self.b)
        self.assertToken(a.req("ACQUIRE k"))
        r, ms = b.timed_req("ACQUIRE k")
        self.assertEqual(r, "BUSY")
        self.assertLess(ms, 150)
        r, ms = b.timed_req("ACQUIRE k WAIT 0")
        self.assertEqual(r, "BUSY")
        self.assertLess(ms, 150)
        self.assertEqual(b.req("HELD"), "OK 0")

    def test_wait_times_out_with_busy(self):
        a, b = self.connect(self.b), self.connect(self.b)
        self.assertToken(a.req("ACQUIRE k"))
        r, ms = b.timed_req("ACQUIRE k WAIT 200")
        self.assertEqual(r, "BUSY")
        self.assertGreaterEqual(ms, 190)
        self.assertLess(ms, 600)
        self.waiters_are(b, 0)

    def test_waiter_gets_lock_at_release(self):
        a, b = self.connect(self.b), self.connect(self.b)
        ta = self.assertToken(a.req("ACQUIRE k"))
        b.send("ACQUIRE k WAIT 5000")
        self.waiters_are(a, 1)
        self.assertEqual(a.req("RELEASE k"), "OK 0")
        t0 = time.monotonic()
        tb = self.assertToken(b.readline())
        self.assertLess(ms_since(t0), 50, "waiter woke late: a poll loop?")
        self.assertGreater(tb, ta)
        self.assertEqual(b.req("HELD"), "OK 1 k")
        self.assertEqual(a.req("ACQUIRE k"), "BUSY")

    def test_waiting_acquire_holds_back_later_requests(self):
        a, b = self.connect(self.b), self.connect(self.b)
        self.assertToken(a.req("ACQUIRE k"))
        t0 = time.monotonic()
        b.sendraw(b"ACQUIRE k WAIT 300\nPING\nHELD\n")
        self.assertTrue(b.no_reply(0.2), "answered while the ACQUIRE waits")
        self.assertEqual(b.readline(), "BUSY")
        self.assertGreaterEqual(ms_since(t0), 290)
        self.assertEqual(b.readline(), "OK PONG")
        self.assertEqual(b.readline(), "OK 0")
        # Same when the wait ends with the lock.
        b.sendraw(b"ACQUIRE k WAIT 5000\nPING\nHELD\n")
        self.assertTrue(b.no_reply(0.1))
        self.assertEqual(a.req("RELEASE k"), "OK 0")
        self.assertToken(b.readline())
        self.assertEqual(b.readline(), "OK PONG")
        self.assertEqual(b.readline(), "OK 1 k")

    def test_release_not_held(self):
        a, b = self.connect(self.b), self.connect(self.b)
        self.assertErr(a.req("RELEASE nothing"), "NOTHELD")
        acid = a.hello()
        self.assertToken(a.req("ACQUIRE k"))
        self.assertErr(b.req("RELEASE k"), "NOTHELD")
        self.assertErr(b.req("RENEW k"), "NOTHELD")
        self.assertEqual(self.owner_ttl(b, "k")[0], acid)
        self.assertEqual(b.req("ACQUIRE k"), "BUSY")

    def test_fencing_tokens_strictly_increase(self):
        a, b = self.connect(self.b), self.connect(self.b)
        toks = []
        for _ in range(3):
            toks.append(self.assertToken(a.req("ACQUIRE f")))
            self.assertEqual(a.req("RELEASE f"), "OK 0")
        toks.append(self.assertToken(b.req("ACQUIRE f")))
        toks.append(self.assertToken(b.req("ACQUIRE g")))
        self.assertEqual(b.req("RELEASE f"), "OK 0")
        toks.append(self.assertToken(a.req("ACQUIRE f")))
        a.close()
        c = self.connect(self.b)
        toks.append(self.assertToken(c.req("ACQUIRE f WAIT 2000")))
        for x, y in zip(toks, toks[1:]):
            self.assertLess(x, y, toks)


    def test_tokens_increase_across_broker_restart(self):
        a = self.connect(self.b)
        t1 = self.assertToken(a.req("ACQUIRE rs"))
        self.b.stop()
        b2 = self.start_broker()
        c = self.connect(b2)
        t2 = self.assertToken(c.req("ACQUIRE rs"))
        self.assertGreater(t2, t1)

    def test_client_gone_mid_request_leaks_no_lock(self):
        # Replies from Redis that arrive for a session that has gone must
        # not leave its lock behind.
        obs = self.connect(self.b)
        for i in range(20):
            c = self.b.client()
            c.sendraw("ACQUIRE f%d\nACQUIRE g%d WAIT 1000\nACQUIRE h%d\n"
                      % (i, i, i))
            if i % 2:
                c.reset()
            else:
                c.close()
        holder, waiter = self.connect(self.b), None
        for i in range(10):
            self.assertToken(holder.req("ACQUIRE race WAIT 2000"))
            waiter = self.b.client()
            waiter.send("ACQUIRE race WAIT 2000")
            time.sleep(0.002 * (i % 3))
            holder.send("RELEASE race")
            waiter.reset()
            self.assertEqual(holder.readline(), "OK 0")
        wait_until(lambda: self.redis.cli("KEYS", self.prefix + ":lock:*")
                   == [], 2.0, what="no lock keys left in Redis")
        wait_until(lambda: self.stats(obs)["sessions"] == "2", 2.0,
                   what="sessions back to 2")
        st = self.stats(obs)
        self.assertEqual((st["locks_held"], st["waiters"]), ("0", "0"))
        self.assertEqual(obs.req("PING"), "OK PONG")

    def test_mutual_exclusion_under_contention(self):
        # Eight clients on two brokers take turns on one key; at no time
        # do two of them hold it, and tokens rise in grant order.
        b2 = self.start_broker()
        clients = [self.connect((self.b, b2)[i % 2], timeout=20)
                   for i in range(8)]
        mu = threading.Lock()
        state = {"holder": None, "overlap": 0, "tokens": [], "errors": []}

        def worker(idx, c):
            try:
                for _ in range(6):
                    r = c.req("ACQUIRE hot WAIT 15000 TTL 5000")
                    m = re.fullmatch(r"OK ([0-9]+)", r)
                    if not m:
                        raise AssertionError("ACQUIRE answered %r" % r)
                    with mu:
                        if state["holder"] is not None:
                            state["overlap"] += 1
                        state["holder"] = idx
                        state["tokens"].append(int(m.group(1)))
                    time.sleep(0.001)
                    with mu:
                        if state["holder"] != idx:
                            state["overlap"] += 1
                        state["holder"] = None
                    r = c.req("RELEASE hot")
                    if r != "OK 0":
                        raise AssertionError("RELEASE answered %r" % r)
            except Exception as e:      # reported by the main thread
                state["errors"].append(repr(e))

        threads = [threading.Thread(target=worker, args=(i, c))
                   for i, c in enumerate(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(state["errors"], [])
        self.assertEqual(state["overlap"], 0)
        toks = state["tokens"]
        self.assertEqual(len(toks), 48)
        self.assertEqual(toks, sorted(set(toks)))


class TestReentrant(LockCase):
    def test_reentrant_holds(self):
        a, b = self.connect(self.b), self.connect(self.b)
        tok = self.assertToken(a.req("ACQUIRE r"))
        self.assertEqual(a.req("ACQUIRE r"), "OK %d" % tok)
        # A holder never waits on itself.
        r, ms = a.timed_req("ACQUIRE r WAIT 3000")
        self.assertEqual(r, "OK %d" % tok)
        self.assertLess(ms, 500)
        self.assertEqual(a.req("HELD"), "OK 1 r")
        self.assertEqual(a.req("RELEASE r"), "OK 2")
        self.assertEqual(b.req("ACQUIRE r"), "BUSY")
        self.assertEqual(a.req("RELEASE r"), "OK 1")
        self.assertEqual(b.req("ACQUIRE r"), "BUSY")
        self.assertEqual(a.req("RELEASE r"), "OK 0")
        self.assertErr(a.req("RELEASE r"), "NOTHELD")
        self.assertGreater(self.assertToken(b.req("ACQUIRE r")), tok)

    def test_session_end_drops_all_holds(self):
        a, b = self.connect(self.b), self.connect(self.b)
        for _ in range(3):
            self.assertToken(a.req("ACQUIRE r"))
        b.send("ACQUIRE r WAIT 5000")
        self.waiters_are(self.connect(self.b), 1)
        a.close()
        self.assertToken(b.readline(2.0))


class TestSessionEnd(LockCase):
    def _wake_after(self, end):
        a, b = self.connect(self.b), self.connect(self.b)
        self.assertToken(a.req("ACQUIRE se"))
        b.send("ACQUIRE se WAIT 5000")
        self.waiters_are(self.connect(self.b), 1)
        t0 = time.monotonic()
        end(a)
        tb = self.assertToken(b.readline(5.0))
        ms = ms_since(t0)
        self.assertLess(ms, 50, "waiter got the lock %.0f ms after the "
                        "holder left" % ms)
        bid = b.hello()
        self.assertEqual(self.redis.cli("GET", self.lock_key("se")),
                         "%s:%d" % (bid, tb))

    def test_close_frees_lock_for_waiter(self):
        self._wake_after(lambda a: a.close())

    def test_reset_frees_lock_for_waiter(self):
        self._wake_after(lambda a: a.reset())

    def test_quit_frees_lock_for_waiter(self):
        self._wake_after(lambda a: a.send("QUIT"))

    def test_close_deletes_redis_key(self):
        a, b = self.connect(self.b), self.connect(self.b)
        self.assertToken(a.req("ACQUIRE gone1"))
        self.assertToken(a.req("ACQUIRE gone2"))
        a.close()
        wait_until(lambda: self.redis.cli("EXISTS", self.lock_key("gone1"),
                                          self.lock_key("gone2")) == 0,
                   1.0, interval=0.01, what="keys deleted after close")
        self.assertEqual(b.req("OWNER gone1"), "OK -")

    def test_closed_waiter_is_skipped(self):
        a = self.connect(self.b)
        w1, w2 = self.connect(self.b), self.connect(self.b)
        obs = self.connect(self.b)
        self.assertToken(a.req("ACQUIRE q"))
        w1.send("ACQUIRE q WAIT 5000")
        self.waiters_are(obs, 1)
        w2.send("ACQUIRE q WAIT 5000")
        self.waiters_are(obs, 2)
        w1.close()
        self.waiters_are(obs, 1)
        self.assertEqual(a.req("RELEASE q"), "OK 0")
        t0 = time.monotonic()
        self.assertToken(w2.readline())
        self.assertLess(ms_since(t0), 50)
        w2id = w2.hello()
        self.assertEqual(self.owner_ttl(obs, "q")[0], w2id)
        self.assertEqual(self.stats(obs)["locks_held"], "1")
        self.assertEqual(w2.req("RELEASE q"), "OK 0")
        self.assertEqual(obs.req("OWNER q"), "OK -")

    def test_waiters_served_in_order(self):
        a = self.connect(self.b)
        ws = [self.connect(self.b) for _ in range(3)]
        obs = self.connect(self.b)
        self.assertToken(a.req("ACQUIRE fifo"))
        for i, w in enumerate(ws):
            w.send("ACQUIRE fifo WAIT 5000")
            self.waiters_are(obs, i + 1)
        holder = a
        for i, w in enumerate(ws):
            self.assertEqual(holder.req("RELEASE fifo"), "OK 0")
            self.assertToken(w.readline())
            for later in ws[i + 1:]:
                self.assertTrue(later.no_reply(0.02),
                                "a later waiter was answered first")
            holder = w
        self.assertEqual(holder.req("RELEASE fifo"), "OK 0")


class TestTTL(LockCase):
    def test_auto_renew_keeps_lock_past_ttl(self):
        a, b = self.connect(self.b), self.connect(self.b)
        aid = a.hello()
        tok = self.assertToken(a.req("ACQUIRE ar TTL 300"))
        time.sleep(1.0)
        cid, ttl, t = self.owner_ttl(b, "ar")
        self.assertEqual((cid, t), (aid, tok))
        self.assertTrue(0 < ttl <= 300, ttl)
        self.assertEqual(b.req("ACQUIRE ar"), "BUSY")
        self.assertEqual(a.req("HELD"), "OK 1 ar")
        self.assertEqual(a.req("RELEASE ar"), "OK 0")

    def test_auto_renew_many_locks(self):
        a, b = self.connect(self.b), self.connect(self.b)
        cid = a.hello()
        keys = ["many%d" % i for i in range(200)]
        a.sendraw("".join("ACQUIRE %s TTL %d\n" % (k, 300 if i % 2 else 2000)
                          for i, k in enumerate(keys)))
        toks = [self.assertToken(a.readline()) for _ in keys]
        time.sleep(1.0)
        vals = self.redis.cli("MGET", *map(self.lock_key, keys))
        self.assertEqual(vals, ["%s:%d" % (cid, t) for t in toks])
        self.assertEqual(b.req("ACQUIRE many1"), "BUSY")
        self.assertEqual(a.req("HELD").split(" ")[1], "200")

    def test_default_ttl_option(self):
        br = self.start_broker("--default_ttl_ms", "1500")
        a = self.connect(br)
        self.assertToken(a.req("ACQUIRE dt"))
        ttl = self.owner_ttl(a, "dt")[1]
        self.assertTrue(1000 < ttl <= 1500, ttl)
        self.assertEqual(a.req("RENEW dt"), "OK 1500")

    def test_renew_sets_ttl_and_answers_it(self):
        a = self.connect(self.b)
        self.assertToken(a.req("ACQUIRE rn TTL 2000"))
        self.assertEqual(a.req("RENEW rn"), "OK 2000")
        self.assertEqual(a.req("RENEW rn TTL 8000"), "OK 8000")
        pttl = self.redis.cli("PTTL", self.lock_key("rn"))
        self.assertTrue(7000 < pttl <= 8000, pttl)
        # The new TTL is now the lock's TTL.
        self.assertEqual(a.req("renew rn"), "OK 8000")
        self.redis.cli("PEXPIRE", self.lock_key("rn"), 100000)
        self.assertEqual(a.req("RENEW rn"), "OK 8000")
        pttl = self.redis.cli("PTTL", self.lock_key("rn"))
        self.assertTrue(7000 < pttl <= 8000, pttl)
        self.assertErr(a.req("RENEW other"), "NOTHELD")

    def test_auto_renew_uses_renewed_ttl(self):
        a, b = self.connect(self.b), self.connect(self.b)
        self.assertToken(a.req("ACQUIRE au TTL 20000"))
        self.assertEqual(a.req("RENEW au TTL 400"), "OK 400")
        time.sleep(1.0)
        # Still held (renewed with 400, not dropped), and never set back
        # to 20000 by the auto-renewal.
        pttl = self.redis.cli("PTTL", self.lock_key("au"))
        self.assertTrue(0 < pttl <= 400, pttl)
        self.assertEqual(b.req("ACQUIRE au"), "BUSY")
        self.assertEqual(a.req("RELEASE au"), "OK 0")

    def test_max_ttl_clamps(self):
        br = self.start_broker("--max_ttl_ms", "5000",
                               "--default_ttl_ms", "1000")
        a = self.connect(br)
        self.assertToken(a.req("ACQUIRE mx TTL 60000"))
        ttl = self.owner_ttl(a, "mx")[1]
        self.assertTrue(4000 < ttl <= 5000, ttl)
        self.assertEqual(a.req("RENEW mx TTL 2147483647"), "OK 5000")
        self.assertEqual(a.req("RENEW mx TTL 3000"), "OK 3000")


class TestLimits(LockCase):
    def test_max_sessions(self):
        br = self.start_broker("--max_sessions", "2")
        c1, c2 = self.connect(br), self.connect(br)
        self.assertEqual(c1.req("PING"), "OK PONG")
        self.assertEqual(c2.req("PING"), "OK PONG")
        wait_until(lambda: self.stats(c1)["sessions"] == "2", 2.0,
                   what="sessions=2")
        c3 = self.connect(br)
        try:
            r = c3.readline(0.5)
        except OSError:
            c3.send("PING")
            r = c3.readline()
        self.assertErr(r, "LIMIT")
        self.assertTrue(c3.closed_by_peer(2.0))
        c1.close()
        wait_until(lambda: self.stats(c2)["sessions"] == "1", 2.0,
                   what="sessions=1")
        c4 = self.connect(br)
        self.assertEqual(c4.req("PING"), "OK PONG")

    def test_max_locks_per_session(self):
        br = self.start_broker("--max_locks_per_session", "2")
        a, b = self.connect(br), self.connect(br)
        self.assertToken(a.req("ACQUIRE l1"))
        tok = self.assertToken(a.req("ACQUIRE l2"))
        self.assertErr(a.req("ACQUIRE l3"), "LIMIT")
        self.assertEqual(a.req("ACQUIRE l2"), "OK %d" % tok)
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key("l3")), 0)
        self.assertToken(b.req("ACQUIRE l3"))
        self.assertEqual(a.req("RELEASE l1"), "OK 0")
        self.assertEqual(a.req("ACQUIRE l3"), "BUSY")
        self.assertToken(a.req("ACQUIRE l4"))

    def test_max_waiters(self):
        br = self.start_broker("--max_waiters", "1")
        a, w1, w2 = self.connect(br), self.connect(br), self.connect(br)
        self.assertToken(a.req("ACQUIRE mw"))
        w1.send("ACQUIRE mw WAIT 5000")
        self.waiters_are(a, 1)
        r, ms = w2.timed_req("ACQUIRE mw WAIT 5000")
        self.assertErr(r, "LIMIT")
        self.assertLess(ms, 500)
        self.assertEqual(a.req("RELEASE mw"), "OK 0")
        self.assertToken(w1.readline())


    def test_max_wait_clamps(self):
        br = self.start_broker("--max_wait_ms", "300")
        a, b = self.connect(br), self.connect(br)
        self.assertToken(a.req("ACQUIRE cw"))
        r, ms = b.timed_req("ACQUIRE cw WAIT 5000")
        self.assertEqual(r, "BUSY")
        self.assertTrue(290 <= ms < 1000, ms)


class TestTwoBrokers(LockCase):
    def setUp(self):
        super().setUp()
        self.b2 = self.start_broker()

    def test_brokers_exclude_each_other(self):
        a, b = self.connect(self.b), self.connect(self.b2)
        aid = a.hello()
        ta = self.assertToken(a.req("ACQUIRE x"))
        self.assertEqual(b.req("ACQUIRE x"), "BUSY")
        r, ms = b.timed_req("ACQUIRE x WAIT 200")
        self.assertEqual(r, "BUSY")
        self.assertTrue(190 <= ms < 600, ms)
        self.assertEqual(self.owner_ttl(b, "x")[0::2], (aid, ta))
        self.assertErr(b.req("RELEASE x"), "NOTHELD")
        tb = self.assertToken(b.req("ACQUIRE y"))
        self.assertEqual(a.req("ACQUIRE y"), "BUSY")
        self.assertGreater(tb, ta)

    def test_different_prefixes_do_not_collide(self):
        b3 = self.start_broker(prefix=self.prefix + "other")
        a, c = self.connect(self.b), self.connect(b3)
        ta = self.assertToken(a.req("ACQUIRE x"))
        tc = self.assertToken(c.req("ACQUIRE x"))
        # two counters: the other prefix's is not moved by this grant
        self.assertEqual(int(self.redis.cli(
            "GET", "%s:fence" % self.prefix)), ta)
        self.assertEqual(int(self.redis.cli(
            "GET", "%sother:fence" % self.prefix)), tc)

    def test_waiter_on_other_broker_woken_by_release(self):
        a, b = self.connect(self.b), self.connect(self.b2)
        ta = self.assertToken(a.req("ACQUIRE x TTL 20000"))
        b.send("ACQUIRE x WAIT 10000")
        self.waiters_are(self.connect(self.b2), 1)
        time.sleep(0.2)
        self.assertEqual(a.req("RELEASE x"), "OK 0")
        t0 = time.monotonic()
        tb = self.assertToken(b.readline())
        ms = ms_since(t0)
        self.assertLess(ms, 50, "cross-broker wake-up took %.0f ms" % ms)
        self.assertGreater(tb, ta)

    def test_waiter_on_other_broker_woken_by_session_close(self):
        a, b = self.connect(self.b), self.connect(self.b2)
        self.assertToken(a.req("ACQUIRE x TTL 20000"))
        b.send("ACQUIRE x WAIT 10000")
        self.waiters_are(self.connect(self.b2), 1)
        t0 = time.monotonic()
        a.close()
        self.assertToken(b.readline())
        ms = ms_since(t0)
        self.assertLess(ms, 50, "cross-broker wake-up took %.0f ms" % ms)

    def test_release_racing_the_waiters_first_attempt_is_not_missed(self):
        # The release lands while the waiter's first acquire attempt is in
        # flight (it saw the key held): the pub/sub wake must not be lost,
        # or the waiter sleeps until its WAIT (or the holder's TTL) ends.
        a, w = self.connect(self.b), self.connect(self.b2)
        obs = self.connect(self.b2)
        for i in range(100):    # the race hits ~1 round in 10-20
            self.assertToken(a.req("ACQUIRE race TTL 20000"))
            w.send("ACQUIRE race WAIT 300")
            self.waiters_are(obs, 1)
            self.assertEqual(a.req("RELEASE race"), "OK 0")
            t0 = time.monotonic()
            r = w.readline()
            ms = ms_since(t0)
            self.assertTrue(r.startswith("OK ") and ms < 100,
                            "round %d: waiter answered %r %.0f ms after the "
                            "release" % (i, r, ms))
            self.assertEqual(w.req("RELEASE race"), "OK 0")

    def test_remote_release_wakes_local_waiters_in_order(self):
        a = self.connect(self.b)
        w1, w2 = self.connect(self.b2), self.connect(self.b2)
        obs = self.connect(self.b2)
        self.assertToken(a.req("ACQUIRE x TTL 20000"))
        w1.send("ACQUIRE x WAIT 10000")
        self.waiters_are(obs, 1)
        w2.send("ACQUIRE x WAIT 10000")
        self.waiters_are(obs, 2)
        self.assertEqual(a.req("RELEASE x"), "OK 0")
        self.assertToken(w1.readline())
        self.assertTrue(w2.no_reply(0.1), "second waiter answered too")
        self.assertEqual(a.req("ACQUIRE x"), "BUSY")
        self.assertEqual(w1.req("RELEASE x"), "OK 0")
        t0 = time.monotonic()
        self.assertToken(w2.readline())
        self.assertLess(ms_since(t0), 50)

    def test_tokens_increase_across_brokers(self):
        a, b = self.connect(self.b), self.connect(self.b2)
        toks = []
        for i in range(3):
            for c in (a, b):
                toks.append(self.assertToken(c.req("ACQUIRE t%d" % i)))
                self.assertEqual(c.req("RELEASE t%d" % i), "OK 0")
        for x, y in zip(toks, toks[1:]):
            self.assertLess(x, y, toks)

    def test_killed_broker_lock_taken_after_ttl(self):
        a, b = self.connect(self.b), self.connect(self.b2)
        ta = self.assertToken(a.req("ACQUIRE kb TTL 500"))
        b.send("ACQUIRE kb WAIT 5000")
        self.waiters_are(self.connect(self.b2), 1)
        time.sleep(0.3)   # at least one auto-renewal has happened
        self.b.kill()
        t0 = time.monotonic()
        left = self.redis.cli("PTTL", self.lock_key("kb"))
        self.assertTrue(0 < left <= 500, left)
        tb = self.assertToken(b.readline(5.0))
        ms = ms_since(t0)
        self.assertGreaterEqual(ms, left - 30,
                                "lock taken before its TTL ran out")
        self.assertGreaterEqual(ms, 150)
        self.assertLess(ms, 1500, "waiter got the lock %.0f ms after the "
                        "kill (TTL 500)" % ms)
        self.assertGreater(tb, ta)

    def test_sigterm_releases_and_wakes_other_broker(self):
        a1, a2 = self.connect(self.b), self.connect(self.b)
        w = self.connect(self.b2)
        self.assertToken(a1.req("ACQUIRE s1 TTL 30000"))
        self.assertToken(a1.req("ACQUIRE s2 TTL 30000"))
        self.assertToken(a1.req("ACQUIRE s2"))
        self.assertToken(a2.req("ACQUIRE s3 TTL 30000"))
        w.send("ACQUIRE s1 WAIT 10000")
        self.waiters_are(self.connect(self.b2), 1)
        t0 = time.monotonic()
        self.assertEqual(self.b.stop(), 0)
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key("s2"),
                                        self.lock_key("s3")), 0)
        tw = self.assertToken(w.readline(2.0))
        self.assertLess(ms_since(t0), 2000)
        wid = w.hello()
        self.assertEqual(self.redis.cli("GET", self.lock_key("s1")),
                         "%s:%d" % (wid, tw))
        self.assertTrue(a1.closed_by_peer(1.0))


if __name__ == "__main__":
    unittest.main()
