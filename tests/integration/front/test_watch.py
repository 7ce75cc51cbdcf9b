"""
test_watch.py - WATCH and UNWATCH (protocol 1.2): a key's holders told as
they change, whichever broker changes them.

  - WATCH answers OK, then the current state (EVENT FREE / EVENT HOLDER
    ...), then every change: a grant, a value (PROCLAIM, a reentrant
    ACQUIRE ... VALUE: same token, new value), a release, shared holders
    coming and going, permits; made on this broker or another;
  - a holder whose broker died: FREE once its TTL runs out in Redis
    (nobody publishes that);
  - events come between replies, with or without EVENTS ON, also while the
    session's own blocking ACQUIRE ... WAIT waits;
  - WATCH again tells the state again; UNWATCH answers OK 1 / OK 0 and
    stops the events; max_watches_per_session binds (ERR LIMIT) and UNWATCH
    gives a place back; QUIT ends the watches; bad input: ERR BADARG; an
    access list: ERR DENIED outside the app's keys, client-ids hidden;
  - Redis away: WATCH answers OK and the first event comes once Redis is
    back; a change made while the watcher's broker had no Redis is told;
  - the watch survives a RESUME on the same broker and on another, which
    tell the current state again;
  - one read per change per broker however many sessions watch a key;
    a key nobody watches gets no "held" message;
  - 3,000 pipelined WATCHes are answered in order within 10 s while another
    session's PING is answered within 100 ms; a client that does not read
    gets each key's latest state once it reads, not a backlog.
"""

import collections
import re
import socket
import threading
import time
import unittest

import harness
from harness import BrokerTestCase, UUID_RE, wait_until


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class Session:
    """A connection whose EVENT lines are kept apart from replies."""

    def __init__(self, client):
        self.c = client
        self.events = collections.deque()

    def _line(self, timeout):
        return self.c.readline(timeout)

    def req(self, line, timeout=5.0):
        self.c.send(line)
        return self.reply(timeout)

    def reply(self, timeout=5.0):
        deadline = time.monotonic() + timeout
        while True:
            line = self._line(max(0.001, deadline - time.monotonic()))
            if line.startswith("EVENT "):
                self.events.append(line)
            else:
                return line

    def event(self, timeout=3.0):
        if self.events:
            return self.events.popleft()
        line = self._line(timeout)
        if not line.startswith("EVENT "):
            raise AssertionError("a reply where an event was due: %r" % line)
        return line

    def quiet(self, within):
        """No event (and no reply) within seconds."""
        return not self.events and self.c.no_reply(within)


class WatchCase(BrokerTestCase):
    def session(self, broker):
        return Session(self.connect(broker))

    def watch(self, s, key):
        self.assertEqual(s.req("WATCH %s" % key), "OK")
        return s.event()

    def holder(self, ev, key):
        m = re.fullmatch(r"EVENT HOLDER %s (%s|\?) ([0-9]+) (\S+)"
                         % (re.escape(key), UUID_RE), ev)
        self.assertIsNotNone(m, ev)
        return m.group(1), int(m.group(2)), m.group(3)


class TestStates(WatchCase):
    def setUp(self):
        super().setUp()
        self.b1 = self.start_broker()
        self.b2 = self.start_broker()

    def test_every_change_from_either_broker(self):
        w = self.session(self.b2)
        a = self.session(self.b1)
        self.assertEqual(self.watch(w, "k"), "EVENT FREE k")
        t = self.assertToken(a.req("ACQUIRE k VALUE host-a"))
        cid = a.req("HELLO").split()[1]
        self.assertEqual(self.holder(w.event(), "k"), (cid, t, "host-a"))
        self.assertEqual(a.req("PROCLAIM k host-b"), "OK")
        self.assertEqual(self.holder(w.event(), "k"), (cid, t, "host-b"))
        # a reentrant ACQUIRE ... VALUE: same token, new value
        self.assertEqual(a.req("ACQUIRE k VALUE host-c"), "OK %d" % t)
        self.assertEqual(self.holder(w.event(), "k"), (cid, t, "host-c"))
        self.assertEqual(a.req("RELEASE k"), "OK 1")
        self.assertEqual(a.req("RELEASE k"), "OK 0")
        self.assertEqual(w.event(), "EVENT FREE k")
        # the watcher's own broker, no value
        t2 = self.assertToken(w.req("ACQUIRE k"))
        self.assertEqual(self.holder(w.event(), "k")[1:], (t2, "-"))
        self.assertGreater(t2, t)
        self.assertEqual(w.req("RELEASE k"), "OK 0")
        self.assertEqual(w.event(), "EVENT FREE k")
        # shared holders, counted as they come and go
        self.assertToken(a.req("ACQUIRE k SHARED"))
        self.assertEqual(w.event(), "EVENT HOLDER k SHARED 1")
        self.assertToken(w.req("ACQUIRE k SHARED"))
        self.assertEqual(w.event(), "EVENT HOLDER k SHARED 2")
        self.assertEqual(a.req("RELEASE k"), "OK 0")
        self.assertEqual(w.event(), "EVENT HOLDER k SHARED 1")
        self.assertEqual(w.req("RELEASE k"), "OK 0")
        self.assertEqual(w.event(), "EVENT FREE k")
        self.assertToken(a.req("ACQUIRE k LIMIT 3"))
        self.assertEqual(w.event(), "EVENT HOLDER k SEMAPHORE 1 3")
        self.assertToken(w.req("ACQUIRE k LIMIT 3"))
        self.assertEqual(w.event(), "EVENT HOLDER k SEMAPHORE 2 3")
        self.assertTrue(w.quiet(0.3))

    def test_handoff_to_a_waiter_with_a_value(self):
        w = self.session(self.b1)
        a = self.session(self.b1)
        b = self.session(self.b1)
        self.assertEqual(self.watch(w, "k"), "EVENT FREE k")
        ta = self.assertToken(a.req("ACQUIRE k VALUE va"))
        self.assertEqual(self.holder(w.event(), "k")[1:], (ta, "va"))
        b.c.send("ACQUIRE k WAIT 5000 VALUE vb")
        time.sleep(0.1)
        self.assertEqual(a.req("RELEASE k"), "OK 0")
        tb = self.assertToken(b.reply())
        self.assertEqual(self.holder(w.event(), "k")[1:], (tb, "vb"))
        self.assertTrue(w.quiet(0.3))

    def test_early_handoffs_are_seen_from_another_broker(self):
        """An early hand-off (the broker passes the key to its next local
        waiter at once, Redis hears of it behind: pass.lua) is news for
        a watcher on another broker too."""
        w = self.session(self.b2)
        s = [self.session(self.b1) for _ in range(4)]
        self.assertEqual(self.watch(w, "k"), "EVENT FREE k")
        t0 = self.assertToken(s[0].req("ACQUIRE k"))
        self.holder(w.event(), "k")
        for x in s[1:]:
            x.c.send("ACQUIRE k WAIT 5000")
        time.sleep(0.2)
        before = self.stats(self.connect(self.b1))["early_handoffs"]
        last = t0
        for i in range(3):
            self.assertEqual(s[i].req("RELEASE k"), "OK 0")
            t = self.assertToken(s[i + 1].reply())
            # the watcher sees each new holder, whatever the way
            seen = self.holder(w.event(), "k")[1]
            while seen < t:
                seen = self.holder(w.event(), "k")[1]
            self.assertEqual(seen, t)
            self.assertGreater(t, last)
            last = t
        after = self.stats(self.connect(self.b1))["early_handoffs"]
        self.assertGreaterEqual(int(after) - int(before), 1)
        self.assertEqual(s[3].req("RELEASE k"), "OK 0")
        self.assertEqual(w.event(), "EVENT FREE k")

    def test_a_dead_brokers_holder_goes_free_at_its_ttl(self):
        w = self.session(self.b1)
        self.assertEqual(self.watch(w, "k"), "EVENT FREE k")
        a = self.session(self.b2)
        t = self.assertToken(a.req("ACQUIRE k TTL 1500 VALUE x"))
        self.assertEqual(self.holder(w.event(), "k")[1:], (t, "x"))
        t0 = time.monotonic()
        self.b2.kill()
        self.assertEqual(w.event(timeout=5.0), "EVENT FREE k")
        self.assertLess(time.monotonic() - t0, 2.5)

    def test_events_between_replies_and_during_a_blocking_wait(self):
        a = self.session(self.b1)
        w = self.session(self.b2)
        self.assertEqual(self.watch(w, "k"), "EVENT FREE k")
        self.assertEqual(self.watch(w, "j"), "EVENT FREE j")
        ta = self.assertToken(a.req("ACQUIRE k"))
        self.assertEqual(self.holder(w.event(), "k")[1], ta)
        # w waits for k itself (a candidate watching the key it wants):
        # changes of j still come while its ACQUIRE waits
        w.c.send("ACQUIRE k WAIT 5000")
        time.sleep(0.1)
        tj = self.assertToken(a.req("ACQUIRE j VALUE jj"))
        self.assertEqual(self.holder(w.c.readline(2.0), "j")[1:],
                         (tj, "jj"))
        self.assertEqual(a.req("RELEASE k"), "OK 0")
        # its grant, and the watch's news of it (the moment k was free
        # may be coalesced into it: a state that lasted no time)
        lines = []
        while not lines or not lines[-1].startswith("EVENT HOLDER k"):
            lines.append(w.c.readline(2.0))
        oks = [ln for ln in lines if ln.startswith("OK ")]
        self.assertEqual(len(oks), 1, lines)
        tw = self.assertToken(oks[0])
        self.assertEqual(self.holder(lines[-1], "k")[1], tw)
        self.assertTrue(set(lines) <= {oks[0], "EVENT FREE k", lines[-1]},
                        lines)

    def test_watch_again_unwatch_and_quit(self):
        w = self.session(self.b1)
        a = self.session(self.b2)
        self.assertEqual(self.watch(w, "k"), "EVENT FREE k")
        # again: the state again, though unchanged
        self.assertEqual(self.watch(w, "k"), "EVENT FREE k")
        self.assertEqual(w.req("UNWATCH k"), "OK 1")
        self.assertEqual(w.req("UNWATCH k"), "OK 0")
        self.assertEqual(w.req("UNWATCH never"), "OK 0")
        self.assertToken(a.req("ACQUIRE k"))
        self.assertTrue(w.quiet(0.4))
        self.assertEqual(w.req("PING"), "OK PONG")
        # QUIT ends the watches with the session
        self.assertEqual(self.holder(self.watch(w, "k"), "k")[2], "-")
        self.assertEqual(w.req("QUIT"), "OK")
        self.assertTrue(w.c.wait_closed(2.0))

    def test_events_need_no_events_on(self):
        w = self.session(self.b1)
        self.assertEqual(w.req("EVENTS OFF"), "OK")
        self.assertEqual(self.watch(w, "k"), "EVENT FREE k")

    def test_bad_input(self):
        w = self.session(self.b1)
        for line in ("WATCH", "WATCH a b", "UNWATCH", "UNWATCH a b",
                     "WATCH " + "k" * 300):
            self.assertErr(w.req(line), "BADARG")
        self.assertEqual(w.req("PING"), "OK PONG")

    def test_one_read_per_change_however_many_watch(self):
        ws = [self.session(self.b1) for _ in range(20)]
        for w in ws:
            self.assertEqual(self.watch(w, "k"), "EVENT FREE k")
        a = self.session(self.b2)
        self.redis.cli("CONFIG", "RESETSTAT")
        t = self.assertToken(a.req("ACQUIRE k"))
        for w in ws:
            self.assertEqual(self.holder(w.event(), "k")[1], t)
        calls = self.watch_reads()
        # one read for the grant (two at most: a refresh may fall in)
        self.assertLessEqual(calls, 2, calls)
        self.assertGreaterEqual(calls, 1, calls)

    def watch_reads(self):
        info = self.redis.cli("INFO", "commandstats")
        n = 0
        for fn in re.findall(r"cmdstat_fcall:calls=([0-9]+)", info):
            n += int(fn)
        for fn in re.findall(r"cmdstat_evalsha:calls=([0-9]+)", info):
            n += int(fn)
        # the acquire is one call: the rest are reads
        return n - 1

    def test_an_unwatched_key_publishes_no_held_message(self):
        a = self.session(self.b1)
        pub = socket.create_connection(("127.0.0.1", self.redis.port))
        self.addCleanup(pub.close)
        pub.sendall(b"SUBSCRIBE %s:released\r\n" % self.prefix.encode())
        pub.settimeout(2.0)
        pub.recv(4096)
        # a subscriber that is no broker with listen marks: the brokers'
        # next announce (each second) has every release published
        # (announce.lua; test_lean.py)
        wait_until(lambda: self.redis.cli("EXISTS", "%s:listenall"
                                          % self.prefix), 3.0,
                   what="releases published to every subscriber")
        self.assertToken(a.req("ACQUIRE plain"))
        self.assertEqual(a.req("RELEASE plain"), "OK 0")
        time.sleep(0.2)
        pub.settimeout(0.3)
        got = b""
        try:
            while True:
                d = pub.recv(4096)
                if not d:
                    break
                got += d
        except socket.timeout:
            pass
        self.assertNotIn(b"held plain", got)
        self.assertIn(b"plain", got)     # the release, as before


class TestLimits(WatchCase):
    def test_max_watches_per_session(self):
        b = self.start_broker("--max_watches_per_session", "3")
        w = self.session(b)
        for k in ("a", "b", "c"):
            self.assertEqual(self.watch(w, k), "EVENT FREE %s" % k)
        self.assertErr(w.req("WATCH d"), "LIMIT")
        # a key watched already is no new place
        self.assertEqual(self.watch(w, "a"), "EVENT FREE a")
        self.assertEqual(w.req("UNWATCH b"), "OK 1")
        self.assertEqual(self.watch(w, "d"), "EVENT FREE d")
        self.assertEqual(w.req("PING"), "OK PONG")

    def test_denied_outside_the_apps_keys_and_ids_hidden(self):
        import hashlib
        import os
        import tempfile
        d = tempfile.mkdtemp()
        path = os.path.join(d, "acl")
        with open(path, "w") as f:
            for app, tok, keys in (("a", "ta", "a:*"), ("b", "tb", "a:*")):
                f.write("app %s token-sha256 %s keys %s\n"
                        % (app, hashlib.sha256(tok.encode()).hexdigest(),
                           keys))
        b = self.start_broker("--acl_file", path, auth="ta")
        w = self.session(b)
        self.assertEqual(w.req("AUTH ta"), "OK")
        self.assertErr(w.req("WATCH other"), "DENIED")
        self.assertEqual(self.watch(w, "a:1"), "EVENT FREE a:1")
        o = self.session(b)
        self.assertEqual(o.req("AUTH tb"), "OK")
        t = self.assertToken(o.req("ACQUIRE a:1"))
        self.assertEqual(self.holder(w.event(), "a:1")[:2], ("?", t))


class TestRedisAway(WatchCase):
    def test_watch_while_redis_is_down_and_changes_missed(self):
        r = self.start_redis()
        b1 = self.start_broker(redis=r)
        b2 = self.start_broker(redis=r)
        w = self.session(b1)
        a = self.session(b2)
        self.assertEqual(self.watch(w, "k"), "EVENT FREE k")
        r.pause()
        try:
            self.assertEqual(w.req("WATCH j"), "OK")
            self.assertTrue(w.quiet(0.3))
        finally:
            r.resume()
        self.assertEqual(w.event(timeout=5.0), "EVENT FREE j")
        # a change made while the watcher's broker had no Redis: told
        # once it is back
        r.restart()
        wait_until(lambda: a.req("PING") == "OK PONG", 5.0)
        t = None
        deadline = time.monotonic() + 10
        while t is None and time.monotonic() < deadline:
            rep = a.req("ACQUIRE k VALUE after")
            if rep.startswith("OK "):
                t = int(rep.split()[1])
            else:
                time.sleep(0.1)
        self.assertIsNotNone(t)
        while True:
            ev = w.event(timeout=10.0)
            if ev.startswith("EVENT HOLDER"):
                break
        self.assertEqual(self.holder(ev, "k")[1:], (t, "after"))


class TestResume(WatchCase):
    def test_watch_goes_on_after_resume_here_and_elsewhere(self):
        b1 = self.start_broker()
        b2 = self.start_broker()
        w = self.session(b1)
        r = w.req("HELLO GRACE 10000")
        m = re.fullmatch(r"OK (%s) lockbroker/\S+ (\S+)" % UUID_RE, r)
        self.assertIsNotNone(m, r)
        cid, secret = m.group(1), m.group(2)
        self.assertEqual(self.watch(w, "k"), "EVENT FREE k")
        self.assertEqual(self.watch(w, "j"), "EVENT FREE j")
        self.assertEqual(w.req("UNWATCH j"), "OK 1")
        a = self.session(b2)
        for broker, value in ((b1, "v1"), (b2, "v2")):
            w.c.reset()
            time.sleep(0.1)
            t = self.assertToken(a.req("ACQUIRE k VALUE %s" % value))
            w = self.session(broker)
            r = w.req("RESUME %s %s" % (cid, secret))
            self.assertTrue(r.startswith("OK "), r)
            # the current state again, on the broker that has it now
            self.assertEqual(self.holder(w.event(), "k")[1:], (t, value))
            self.assertEqual(a.req("RELEASE k"), "OK 0")
            self.assertEqual(w.event(), "EVENT FREE k")
            # j was unwatched: nothing of it
            self.assertToken(a.req("ACQUIRE j"))
            self.assertEqual(a.req("RELEASE j"), "OK 0")
            self.assertTrue(w.quiet(0.3))


class TestLoad(WatchCase):
    def test_3000_pipelined_watches_while_others_are_served(self):
        b = self.start_broker("--max_watches_per_session", "5000")
        w = self.session(b)
        p = self.connect(b)
        n = 3000
        pings = []
        stop = threading.Event()

        def pinger():
            while not stop.is_set():
                r, ms = p.timed_req("PING")
                pings.append(ms)
                time.sleep(0.02)
        th = threading.Thread(target=pinger)
        t0 = time.monotonic()
        th.start()
        try:
            w.c.sendraw("".join("WATCH w%d\n" % i for i in range(n)))
            oks = frees = 0
            seen = set()
            while oks < n or frees < n:
                line = w.c.readline(10.0)
                if line == "OK":
                    oks += 1
                else:
                    m = re.fullmatch(r"EVENT FREE w([0-9]+)", line)
                    self.assertIsNotNone(m, line)
                    seen.add(int(m.group(1)))
                    frees += 1
            took = time.monotonic() - t0
        finally:
            stop.set()
            th.join()
        self.assertEqual(seen, set(range(n)))
        self.assertLess(took, 10.0)
        self.assertTrue(pings)
        self.assertLess(max(pings), 100.0, "PING took %.1f ms" % max(pings))
        print("\nfigure: %d WATCHes answered with their states in %.2f s; "
              "PING max %.1f ms" % (n, took, max(pings)))

    def test_a_client_that_does_not_read_gets_the_latest_state(self):
        b = self.start_broker()
        # a small receive window, set before the connection is made
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", b.port))
        w = harness.Client.__new__(harness.Client)
        w.timeout, w.sock, w.buf, w.eof = 5.0, sock, b"", False
        self.addCleanup(w.close)
        a = self.session(b)
        keys = ["k%d" % i for i in range(40)]
        w.sendraw("".join("WATCH %s\n" % k for k in keys))
        time.sleep(0.5)
        rss0 = self.rss(b)
        # many changes of each key while w reads nothing: far more than
        # the kernel's socket buffers take (their limit here is 4 MB;
        # this is 40 * 1201 events of ~300 bytes, 14 MB)
        rounds = 600
        for rnd in range(rounds):
            for k in keys:
                a.c.send("ACQUIRE %s VALUE r%d-%s" % (k, rnd, "x" * 240))
            for k in keys:
                self.assertTrue(a.reply().startswith("OK "))
            for k in keys:
                a.c.send("RELEASE %s" % k)
            for k in keys:
                self.assertEqual(a.reply(), "OK 0")
        for k in keys:
            self.assertTrue(a.req("ACQUIRE %s VALUE last" % k)
                            .startswith("OK "))
        rss = self.rss(b)
        # now read everything: each key's last event is its last state
        last = {}
        lines = 0
        while True:
            try:
                line = w.readline(1.0)
            except harness.NoReply:
                break
            lines += 1
            m = re.fullmatch(r"EVENT (?:HOLDER|FREE) (k[0-9]+)(.*)", line)
            if m:
                last[m.group(1)] = line
        for k in keys:
            self.assertTrue(last[k].endswith(" last"), last.get(k))
        # a backlog of every change would be 40 * (2 * rounds + 1) events,
        # most of them in the broker's memory
        changes = 40 * (2 * rounds + 1)
        self.assertLess(lines, changes // 2, lines)
        if "/asan/" not in harness.BROKER_BIN:
            # (ASan keeps freed memory in quarantine: RSS says nothing)
            self.assertLess(rss - rss0, 4 * 1024 * 1024)
        print("\nfigure: %d lines read for %d changes of 40 keys; broker "
              "RSS grew %.1f MB" % (lines, changes, (rss - rss0) / 1e6))

    def rss(self, broker):
        with open("/proc/%d/status" % broker.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0


if __name__ == "__main__":
    unittest.main()
