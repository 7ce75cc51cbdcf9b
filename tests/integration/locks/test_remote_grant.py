"""
test_remote_grant.py - the cross-broker hand-off in one Redis round trip
through real brokers on a real redis-server.

A waiter on one broker whose attempt found the key held by a session of
another broker is recorded in Redis (<prefix>:rwait:<name>, rwait.lua);
the release on the holder's broker grants the key to the earliest record
in its own script call (lib/holders.lua, remote_grant) and publishes the
grant; the waiting broker tells its client and renews the hold at once.
A grant the waiting broker cannot deliver is released at once (orphans);
a broker killed -9 is granted nothing (its channel has no listener), and
a grant to one that hangs lasts at most 2 s in Redis, not a whole TTL.

Each test fails on a broker without the feature: the grant is looked for
in the release's own call (MONITOR: the commands each call ran), or in
the record and the counters only this path writes.
"""

import glob
import os
import re
import time
import unittest

from harness import Broker, wait_until
from test_lean import (BASELINE, LeanCase, Monitor, OldBroker,
                       module_redis_start, module_redis_stop)


def setUpModule():
    module_redis_start()


def tearDownModule():
    module_redis_stop()


# Debian's faketime (make deps): preloaded into the broker itself, so that
# its pid is the broker's (pause, resume and stop signal it, not a wrapper)
LIBFAKETIME = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))


def skewed(skew):
    """A Broker class whose wall clock is skew off ("+30s", "-30s":
    libfaketime; its monotonic clock is the real one)."""
    class SkewedBroker(Broker):
        def launcher(self):
            if not LIBFAKETIME:
                raise AssertionError("libfaketime is missing (make deps "
                                     "installs faketime)")
            # (an ASan build's runtime is then not the first library)
            return ["env", "LD_PRELOAD=" + LIBFAKETIME[0],
                    "FAKETIME=" + skew, "FAKETIME_DONT_FAKE_MONOTONIC=1",
                    "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=1:"
                    "halt_on_error=1:abort_on_error=0"]
    return SkewedBroker


class TestRemoteGrant(LeanCase):

    def rq(self, name):
        return "%s:rwait:%s" % (self.prefix, name)

    def records(self, name):
        return self.redis.cli("ZRANGE", self.rq(name), 0, -1)

    def recorded(self, name, n=1):
        wait_until(lambda: len(self.records(name)) >= n, 3.0,
                   what="%d record(s) of waiters for %s" % (n, name))

    def broker_ids(self):
        return set(m.split(" ")[0] for m in self.redis.cli(
            "ZRANGE", "%s:brokers" % self.prefix, 0, -1))

    def test_release_grants_the_remote_waiter_in_its_own_call(self):
        """The waiter on broker b gets OK with the token the release on
        broker a granted it: the SET of its value ran inside the call
        that released a's hold; b's own acquire never ran for it.  b
        renews it at once (the grant's PX is at most 2 s)."""
        a, b = self.broker(), self.broker()
        h, w = self.session(a), self.session(b)
        htok = self.assertToken(h.req("ACQUIRE rg TTL 20000"))
        w.send("ACQUIRE rg WAIT 8000 TTL 10000")
        self.recorded("rg")
        rec = self.records("rg")[0].split(" ")
        self.assertEqual(rec[2:], ["10000", w.cid])
        mon = Monitor(self.redis)
        self.assertEqual(h.req("RELEASE rg"), "OK 0")
        tok = self.assertToken(w.readline(timeout=2.0))
        self.assertGreater(tok, htok)
        calls = mon.stop()
        value = "%s:%d" % (w.cid, tok)
        setters = [args for args, ran in calls
                   if any(r[:3] == ["SET", self.key("rg"), value]
                          for r in ran)]
        self.assertEqual(len(setters), 1, calls)
        self.assertIn("%s:%d" % (h.cid, htok), setters[0],
                      "the grant was not made by the release's call")
        self.assertEqual(self.records("rg"), [])
        # renewed at once by b to its TTL
        wait_until(lambda: self.redis.cli("PTTL", self.key("rg")) > 5000,
                   1.0, what="b's first renewal")
        self.assertEqual(w.req("RELEASE rg"), "OK 0")
        self.assertEqual(self.stats(w)["orphans"], "0")

    def test_fifo_across_two_remote_waiters(self):
        """Waiters on brokers b then c: the release on a grants b's, and
        b's release grants c's, each in the release's call."""
        a, b, c = self.broker(), self.broker(), self.broker()
        h = self.session(a)
        self.assertToken(h.req("ACQUIRE ff TTL 20000"))
        w1, w2 = self.session(b), self.session(c)
        w1.send("ACQUIRE ff WAIT 8000")
        self.recorded("ff", 1)
        time.sleep(0.01)
        w2.send("ACQUIRE ff WAIT 8000")
        self.recorded("ff", 2)
        self.assertEqual([m.split(" ")[3] for m in self.records("ff")],
                         [w1.cid, w2.cid])
        self.assertEqual(h.req("RELEASE ff"), "OK 0")
        self.assertToken(w1.readline(timeout=2.0))
        w2.no_reply(0.3)
        mon = Monitor(self.redis)
        self.assertEqual(w1.req("RELEASE ff"), "OK 0")
        tok = self.assertToken(w2.readline(timeout=2.0))
        calls = mon.stop()
        self.assertTrue(any(r[:3] == ["SET", self.key("ff"), "%s:%d" % (
            w2.cid, tok)] for args, ran in calls for r in ran
            if w1.cid in " ".join(args)),
            "c's grant was not made in b's release call")
        self.assertEqual(w2.req("RELEASE ff"), "OK 0")

    def test_a_broker_killed_is_granted_nothing(self):
        """b, recorded first, dies (SIGKILL) while its announcement still
        stands; c's waiter is recorded after it.  The release on a finds
        that nobody hears b's channel (b's connections are gone): it grants
        b nothing and gives the key to c's waiter in the same call.  A key
        whose only record was b's is free at once (published), not held
        for b for the grant's 2 s."""
        a = self.broker()
        before = self.broker_ids()
        b = self.broker()
        bid = (self.broker_ids() - before).pop()
        c = self.broker()
        h, w, w2 = self.session(a), self.session(b), self.session(c)
        wl = self.session(b)
        for k in ("dk", "dl"):
            self.assertToken(h.req("ACQUIRE %s TTL 30000" % k))
        w.send("ACQUIRE dk WAIT 20000 TTL 30000")
        wl.send("ACQUIRE dl WAIT 20000 TTL 30000")
        self.recorded("dk")
        self.recorded("dl")
        time.sleep(0.01)
        w2.send("ACQUIRE dk WAIT 20000")
        self.recorded("dk", 2)
        o = self.session(a)
        o.send("ACQUIRE dl WAIT 20000")
        ann = "%s:brokers" % self.prefix
        member = [m for m in self.redis.cli("ZRANGE", ann, 0, -1)
                  if m.startswith(bid + " ")][0]
        b.kill()
        chan = "%s:granted:%s" % (self.prefix, bid)
        wait_until(lambda: self.redis.cli("PUBSUB", "NUMSUB", chan)[1] == 0,
                   2.0, what="Redis to see b's connections gone")
        # its announcement stands for 3 s after its last refresh: made to
        # stand through this test whatever the machine's pace
        secs, _ = self.redis.cli("TIME")
        self.redis.cli("ZADD", ann, int(secs) * 1000 + 20000, member)
        t0 = time.monotonic()
        self.assertEqual(h.req("RELEASE dk"), "OK 0")
        tok = self.assertToken(w2.readline(timeout=2.0))
        self.assertLess(time.monotonic() - t0, 1.0)
        self.assertEqual(self.redis.cli("GET", self.key("dk")),
                         "%s:%d" % (w2.cid, tok))
        self.assertEqual(self.records("dk"), [])
        t0 = time.monotonic()
        self.assertEqual(h.req("RELEASE dl"), "OK 0")
        self.assertToken(o.readline(timeout=2.0))
        self.assertLess(time.monotonic() - t0, 1.0)
        self.assertEqual(self.stats(o)["orphans"], "0")

    def test_a_grant_heard_late_is_released_not_delivered(self):
        """b is paused (SIGSTOP) when the grant is made and resumes after
        more than half the grant's 2 s: Redis may free the key before
        b's renewal lands, so b releases it (orphans) instead of telling
        its client; the waiter then takes the key by its own attempt,
        with a newer token."""
        self.late_grant_refused("lt", self.broker())

    def late_grant_refused(self, name, b):
        """A waiter on b recorded, b paused (SIGSTOP) while a's release
        grants it the key and 1.2 s more: b releases the grant (orphans),
        and its waiter takes the key by its own attempt, newer token."""
        a = self.broker()
        h, w = self.session(a), self.session(b)
        self.assertToken(h.req("ACQUIRE %s TTL 20000" % name))
        w.send("ACQUIRE %s WAIT 8000" % name)
        self.recorded(name)
        b.pause()
        try:
            self.assertEqual(h.req("RELEASE %s" % name), "OK 0")
            v = self.redis.cli("GET", self.key(name))
            self.assertTrue(v.startswith(w.cid + ":"), v)
            granted = int(v.rsplit(":", 1)[1])
            time.sleep(1.2)
        finally:
            b.resume()
        tok = self.assertToken(w.readline(timeout=3.0))
        self.assertGreater(tok, granted)
        self.assertEqual(self.stats(w)["orphans"], "1")
        self.assertEqual(w.req("RELEASE %s" % name), "OK 0")

    def held_and_watched(self, name):
        """Two brokers a and b; h on a holds name, wa on a watches it
        (told of h), w is a session on b: (a, b, h, w, wa)."""
        a, b = self.broker(), self.broker()
        h, w, wa = self.session(a), self.session(b), self.session(a)
        htok = self.assertToken(h.req("ACQUIRE %s TTL 20000" % name))
        self.assertEqual(wa.req("WATCH %s" % name), "OK")
        self.assertEqual(wa.readline(timeout=2.0), "EVENT HOLDER %s %s %d -"
                         % (name, h.cid, htok))
        return a, b, h, w, wa

    def test_an_attempt_that_meets_its_records_grant_takes_that_grant(self):
        """b's waiter is recorded; b is paused while a wake for the key
        (a "released" message) and then a's release, which grants the
        waiter's record, reach it.  Resumed, b sends the waiter's attempt
        on the wake and hears the grant with that attempt in flight; the
        attempt reaches Redis after the grant.  The waiter holds the
        grant's token, the one the watchers were told, not a new one
        (before: acquire.lua took the key anew with another token, and
        the grant was released as an orphan)."""
        a, b, h, w, wa = self.held_and_watched("ra")
        w.send("ACQUIRE ra WAIT 8000 TTL 9000")
        self.recorded("ra")
        b.pause()
        try:
            self.assertEqual(self.redis.cli(
                "PUBLISH", "%s:released" % self.prefix, "ra"), 2)
            self.assertEqual(h.req("RELEASE ra"), "OK 0")
            v = self.redis.cli("GET", self.key("ra"))
            self.assertTrue(v.startswith(w.cid + ":"), v)
            granted = int(v.rsplit(":", 1)[1])
        finally:
            b.resume()
        self.assertEqual(self.assertToken(w.readline(timeout=3.0)), granted)
        self.assertEqual(wa.readline(timeout=2.0), "EVENT HOLDER ra %s %d -"
                         % (w.cid, granted))
        wa.no_reply(0.5)
        self.assertEqual(self.stats(w)["orphans"], "0")
        self.assertEqual(self.redis.cli("GET", self.key("ra")),
                         "%s:%d" % (w.cid, granted))
        self.assertEqual(w.req("RELEASE ra"), "OK 0")

    def test_a_broker_clock_ahead_still_takes_grants(self):
        """b's clock is 30 s ahead of Redis's: a grant's age is measured
        on the master's clock (sampled by b's announce), not b's, so the
        grant is delivered, not released as if 30 s old."""
        a, b = self.broker(), self.broker(cls=skewed("+30s"))
        h, w = self.session(a), self.session(b)
        htok = self.assertToken(h.req("ACQUIRE ca TTL 20000"))
        w.send("ACQUIRE ca WAIT 8000 TTL 10000")
        self.recorded("ca")
        self.assertEqual(h.req("RELEASE ca"), "OK 0")
        v = self.redis.cli("GET", self.key("ca"))
        self.assertTrue(v.startswith(w.cid + ":"), v)
        tok = self.assertToken(w.readline(timeout=2.0))
        self.assertEqual(tok, int(v.rsplit(":", 1)[1]), "not the grant")
        self.assertGreater(tok, htok)
        self.assertEqual(self.stats(w)["orphans"], "0")
        self.assertEqual(w.req("RELEASE ca"), "OK 0")

    def test_a_broker_clock_behind_still_refuses_a_late_grant(self):
        """b's clock is 30 s behind Redis's and b is paused past half the
        grant's time: by b's own clock the grant would look 28 s young;
        on the master's it is late, so it is released (orphans), and the
        waiter takes the key by its own attempt."""
        self.late_grant_refused("cb", self.broker(cls=skewed("-30s")))

    def test_records_of_a_dead_broker_are_skipped(self):
        """Once b's announcement is gone its records grant nothing: the
        release frees the key and publishes, as without records."""
        a = self.broker()
        before = self.broker_ids()
        b = self.broker()
        bid = (self.broker_ids() - before).pop()
        b.kill()
        self.redis.cli("ZREM", "%s:brokers" % self.prefix, *[
            m for m in self.redis.cli("ZRANGE", "%s:brokers" % self.prefix,
                                      0, -1) if m.startswith(bid)])
        self.redis.cli("ZADD", self.rq("sk"), 1, "%s 7 30000 %s"
                       % (bid, "0" * 36))
        self.redis.cli("SET", "%s:listen:sk" % self.prefix, 1, "PX", 10000)
        self.redis.cli("SET", "%s:listen" % self.prefix, 1, "PX", 10000)
        h = self.session(a)
        self.assertToken(h.req("ACQUIRE sk"))
        self.assertEqual(h.req("RELEASE sk"), "OK 0")
        self.assertEqual(self.redis.cli("EXISTS", self.key("sk")), 0)
        self.assertEqual(self.records("sk"), [])

    def test_grant_for_a_wait_no_longer_there_is_released(self):
        """A record whose wait is gone from b (it ended, was cancelled,
        its forget lost the race): b releases the grant at once and
        counts it in orphans; the key is free again."""
        a = self.broker()
        before = self.broker_ids()
        b = self.broker()
        bid = (self.broker_ids() - before).pop()
        self.redis.cli("ZADD", self.rq("gk"), 1, "%s 999999 30000 %s"
                       % (bid, "f" * 36))
        self.redis.cli("SET", "%s:listen:gk" % self.prefix, 1, "PX", 10000)
        self.redis.cli("SET", "%s:listen" % self.prefix, 1, "PX", 10000)
        h, o = self.session(a), self.session(b)
        self.assertToken(h.req("ACQUIRE gk"))
        self.assertEqual(h.req("RELEASE gk"), "OK 0")
        wait_until(lambda: self.redis.cli("EXISTS", self.key("gk")) == 0,
                   1.0, what="the undeliverable grant released")
        self.assertEqual(self.stats(o)["orphans"], "1")
        self.assertToken(h.req("ACQUIRE gk"))

    def test_a_cancelled_wait_forgets_its_record(self):
        """The waiting client goes: its record is removed, and the
        release publishes instead of granting."""
        a, b = self.broker(), self.broker()
        h, w = self.session(a), self.session(b)
        self.assertToken(h.req("ACQUIRE ck TTL 20000"))
        w.send("ACQUIRE ck WAIT 8000")
        self.recorded("ck")
        w.close()
        wait_until(lambda: self.records("ck") == [], 2.0,
                   what="the record forgotten")
        self.assertEqual(h.req("RELEASE ck"), "OK 0")
        self.assertEqual(self.redis.cli("EXISTS", self.key("ck")), 0)

    def test_a_grant_past_the_sessions_limit_is_released(self):
        """An ASYNC wait recorded while its session held nothing; by the
        grant its session holds max_locks_per_session keys: the grant is
        released at once (orphans), the wait ends EVENT FAILED ... LIMIT,
        and the key is free."""
        a = self.broker()
        b = self.broker("--max_locks_per_session", 1)
        h, s = self.session(a), self.session(b)
        self.assertToken(h.req("ACQUIRE lm TTL 20000"))
        self.assertEqual(s.req("ACQUIRE lm WAIT 8000 ASYNC"), "OK QUEUED")
        self.recorded("lm")
        self.assertToken(s.req("ACQUIRE other"))
        self.assertEqual(h.req("RELEASE lm"), "OK 0")
        self.assertEqual(s.readline(timeout=2.0), "EVENT FAILED lm LIMIT")
        wait_until(lambda: self.redis.cli("EXISTS", self.key("lm")) == 0,
                   1.0, what="the grant released")
        self.assertEqual(self.stats(s)["orphans"], "1")

    def test_a_cancelled_async_wait_forgets_its_record(self):
        a, b = self.broker(), self.broker()
        h, s = self.session(a), self.session(b)
        self.assertToken(h.req("ACQUIRE cx TTL 20000"))
        self.assertEqual(s.req("ACQUIRE cx WAIT 8000 ASYNC"), "OK QUEUED")
        self.recorded("cx")
        self.assertEqual(s.req("CANCEL cx"), "OK 1")
        wait_until(lambda: self.records("cx") == [], 2.0,
                   what="the record forgotten")
        self.assertEqual(h.req("RELEASE cx"), "OK 0")
        self.assertEqual(self.redis.cli("EXISTS", self.key("cx")), 0)
        s.no_reply(0.2)

    def test_a_wait_with_a_value_is_granted_with_it(self):
        """ACQUIRE ... WAIT ... VALUE on b is recorded with its value; the
        release on a grants it and writes the value in the same call, so
        a watcher never sees the new holder without it; the value follows
        the hold's renewals and goes with its release."""
        a, b, h, w, wa = self.held_and_watched("rv")
        htok = int(self.redis.cli("GET", self.key("rv")).rsplit(":", 1)[1])
        w.send("ACQUIRE rv WAIT 8000 TTL 9000 VALUE http://b:8080/x")
        self.recorded("rv")
        self.assertEqual(self.records("rv")[0].split(" ")[2:],
                         ["9000", w.cid, "http://b:8080/x"])
        mon = Monitor(self.redis)
        self.assertEqual(h.req("RELEASE rv"), "OK 0")
        tok = self.assertToken(w.readline(timeout=2.0))
        calls = mon.stop()
        vk = "%s:value:rv" % self.prefix
        made = [ran for args, ran in calls
                if "%s:%d" % (h.cid, htok) in args]
        self.assertEqual(len(made), 1, calls)
        self.assertIn(["SET", self.key("rv"), "%s:%d" % (w.cid, tok), "PX",
                       "2000"], made[0])
        self.assertIn(["SET", vk, "%d http://b:8080/x" % tok, "PX", "2000"],
                      made[0])
        self.assertEqual(wa.readline(timeout=2.0),
                         "EVENT HOLDER rv %s %d http://b:8080/x"
                         % (w.cid, tok))
        self.assertRegex(h.req("OWNER rv VALUE"), r"\AOK %s [0-9]+ %d "
                         r"http://b:8080/x\Z" % (w.cid, tok))
        # b's first renewal takes the value's TTL to the lock's
        wait_until(lambda: self.redis.cli("PTTL", vk) > 5000, 1.0,
                   what="the value renewed with the hold")
        self.assertEqual(w.req("RELEASE rv"), "OK 0")
        self.assertEqual(self.redis.cli("EXISTS", vk), 0)
        self.assertEqual(wa.readline(timeout=2.0), "EVENT FREE rv")

    def grace_session(self, b):
        c = self.connect(b)
        m = re.fullmatch(r"OK (\S+) lockbroker/\S+ (\S+)",
                         c.req("HELLO GRACE 5000"))
        self.assertIsNotNone(m)
        c.cid = m.group(1)
        return c

    def test_a_grace_sessions_wait_is_granted_and_recorded_first(self):
        """A grace session's waits on b (blocking and ASYNC) are recorded
        and granted by the release's call; by the time the client hears
        of the grant, its session record in Redis lists the hold (a RESUME
        anywhere would carry it), and no longer the ASYNC wait."""
        a, b = self.broker(), self.broker()
        h = self.session(a)
        for k in ("gb", "ga"):
            self.assertToken(h.req("ACQUIRE %s TTL 20000" % k))
        g = self.grace_session(b)
        rec = "%s:session:%s" % (self.prefix, g.cid)
        self.assertEqual(g.req("ACQUIRE ga WAIT 8000 ASYNC"), "OK QUEUED")
        self.assertIsNotNone(self.redis.cli("HGET", rec, "w:ga"))
        self.recorded("ga")
        g.send("ACQUIRE gb WAIT 8000")
        self.recorded("gb")
        mon = Monitor(self.redis)
        self.assertEqual(h.req("RELEASE gb"), "OK 0")
        tok = self.assertToken(g.readline(timeout=2.0))
        self.assertIsNotNone(self.redis.cli("HGET", rec, "k:gb"))
        self.assertEqual(h.req("RELEASE ga"), "OK 0")
        ev = g.readline(timeout=2.0)
        self.assertRegex(ev, r"\AEVENT GRANTED ga [0-9]+\Z")
        self.assertIsNotNone(self.redis.cli("HGET", rec, "k:ga"))
        self.assertIsNone(self.redis.cli("HGET", rec, "w:ga"))
        calls = mon.stop()
        self.assertTrue(any(r[:3] == ["SET", self.key("gb"), "%s:%d" % (
            g.cid, tok)] for args, ran in calls for r in ran
            if h.cid in " ".join(args)),
            "the grace session's grant was not made in the release's call")
        self.assertEqual(sorted(g.req("HELD").split(" ")),
                         sorted("OK 2 ga gb".split(" ")))

    def test_shared_waits_not_recorded(self):
        """A shared wait is not recorded: it takes the key by its own
        attempt."""
        a, b = self.broker(), self.broker()
        h = self.session(a)
        self.assertToken(h.req("ACQUIRE ns TTL 20000"))
        s = self.session(b)
        s.send("ACQUIRE ns SHARED WAIT 5000")
        wait_until(lambda: self.redis.cli(
            "EXISTS", "%s:listen:ns" % self.prefix), 3.0,
            what="the waiter's attempt")
        time.sleep(0.2)
        self.assertEqual(self.records("ns"), [])
        self.assertEqual(h.req("RELEASE ns"), "OK 0")
        r = s.readline(timeout=2.0)
        self.assertTrue(r.startswith("OK"), r)
        self.assertEqual(s.req("RELEASE ns"), "OK 0")


class TestRemoteGrantMixedVersions(LeanCase):
    """Beside a broker of 27629bd (a rolling upgrade): its releases never
    grant remotely, so a waiter here recorded for its key is woken by the
    release's message, takes the key by its own attempt and forgets its
    record; a record never names the older broker."""

    def test_an_older_brokers_release_wakes_a_recorded_waiter(self):
        self.assertTrue(os.access(BASELINE, os.X_OK),
                        "no baseline broker %s" % BASELINE)
        old = OldBroker(self.redis.addr, self.prefix)
        self.addCleanup(old.close)
        new = self.broker(quiet=False)
        h = old.client()
        self.addCleanup(h.close)
        self.assertToken(h.req("ACQUIRE om TTL 20000"))
        w = self.session(new)
        w.send("ACQUIRE om WAIT 8000")
        rq = "%s:rwait:om" % self.prefix
        wait_until(lambda: self.redis.cli("ZCARD", rq) == 1, 3.0,
                   what="the waiter's record")
        self.assertEqual(h.req("RELEASE om"), "OK 0")
        t0 = time.monotonic()
        self.assertToken(w.readline(timeout=5.0))
        self.assertLess(time.monotonic() - t0, 0.5)
        wait_until(lambda: self.redis.cli("ZCARD", rq) == 0, 2.0,
                   what="the record forgotten")
        # and the other way round: the older broker's waiter is woken by
        # the newer one's release, which finds no record to grant
        h.send("ACQUIRE om WAIT 8000")
        time.sleep(0.3)
        self.assertEqual(w.req("RELEASE om"), "OK 0")
        self.assertToken(h.readline(timeout=2.0))
        self.assertEqual(h.req("RELEASE om"), "OK 0")


if __name__ == "__main__":
    unittest.main()
