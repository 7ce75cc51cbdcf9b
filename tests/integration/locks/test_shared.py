"""
test_shared.py - shared (read/write) locks and counting semaphores
(issue 13, protocol 1.1: ACQUIRE <key> SHARED, ACQUIRE <key> LIMIT <n>),
with a real Redis and two brokers on one prefix.

  TestSemaphoreContention  30 clients on two brokers never hold more than
                           n permits at once, all are served, tokens rise
  TestReadersWriter        readers together, a writer alone; FIFO across
                           kinds on one broker; a writer waiting on another
                           broker holds back new readers
  TestSessionEnd           a permit is freed the moment its session ends,
                           but outlives a broker killed with -9 until its TTL
  TestLost                 a hold removed in Redis: EVENT LOST, ERR LOST
  TestWakeLatency          release -> grant across brokers within a few ms
  TestKinds                kind and limit mismatches (local and in Redis),
                           no upgrade, reentrancy, OWNER, HELD, limits
  TestRedisLayout          the sorted set, its "#" member, expiry scores

Each test asserts something a broker without the feature gets wrong.
Latencies are printed (stderr) as figures, with loose bounds that only a
poll loop or a TTL-bound wake-up would miss.
"""

import re
import socket
import sys
import threading
import time
import unittest

import harness
from harness import (UUID_RE, BrokerTestCase, RedisError, _resp_encode,
                     _RespReader, ms_since, wait_until)

OWNER_SHOWN = 16        # most holders OWNER lists
WAKE_MS = 50            # loose bound on a release -> grant wake-up


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


def figure(text):
    """A measured figure, printed beside the test names."""
    sys.stderr.write("\nfigure: %s\n" % text)
    sys.stderr.flush()


class Subscriber:
    """A Redis connection SUBSCRIBEd to one channel; wait_message() says
    whether a message arrived in time."""

    def __init__(self, redis, channel):
        self.sock = socket.create_connection(("127.0.0.1", redis.port),
                                             timeout=2)
        self.sock.sendall(_resp_encode(["SUBSCRIBE", channel]))
        self.reader = _RespReader(self.sock)
        self.reader.reply()     # the subscription's confirmation

    def wait_message(self, timeout=2.0):
        self.sock.settimeout(timeout)
        try:
            m = self.reader.reply()
        except socket.timeout:
            return None
        return m[2] if isinstance(m, list) and m[0] == "message" else None

    def close(self):
        self.sock.close()


class SharedCase(BrokerTestCase):
    """Two brokers, X and Y, on the module's Redis and one prefix."""

    def setUp(self):
        super().setUp()
        self.x = self.start_broker()
        self.y = self.start_broker()

    def waiters_are(self, client, n, timeout=2.0):
        wait_until(lambda: self.stats(client)["waiters"] == str(n), timeout,
                   what="waiters=%d" % n)

    def subscribe_wanted(self):
        s = Subscriber(self.redis, self.prefix + ":wanted")
        self.addCleanup(s.close)
        return s

    def announced(self, sub, key):
        """Wait for a waiter's announcement of key on the wanted channel:
        its attempt ran in Redis and found the key held.  Then give the
        brokers a moment to read the same message (they subscribed before
        this test did)."""
        deadline = time.monotonic() + 2.0
        while True:
            # Earlier waiters may announce themselves again (a read hold
            # or permit freed wakes them, and they find the key held).
            msg = sub.wait_message(max(0.01, deadline - time.monotonic()))
            self.assertIsNotNone(msg, "no waiter for %s announced itself"
                                 % key)
            # "<broker-id> <key>" from a writer, "<broker-id>+<key>" from
            # a reader or a permit waiter
            if msg[37:] == key and msg[36] in " +":
                break
        time.sleep(0.03)

    def owner(self, client, key):
        """OWNER parsed: None when free, else (kind, total, limit, listed)
        with kind "X" (exclusive), "SHARED" or "SEMAPHORE", total the
        holders, limit the permits (0 for a lock) and listed the holders
        shown, as (client-id, ttl-ms-left, token)."""
        r = client.req("OWNER " + key)
        if r == "OK -":
            return None
        w = r.split(" ")
        self.assertEqual(w[0], "OK", r)
        if w[1] == "SHARED":
            kind, total, limit, rest = "SHARED", int(w[2]), 0, w[3:]
        elif w[1] == "SEMAPHORE":
            kind, total, limit, rest = ("SEMAPHORE", int(w[2]), int(w[3]),
                                        w[4:])
        else:
            kind, total, limit, rest = "X", 1, 0, w[1:]
        self.assertEqual(len(rest) % 3, 0, r)
        listed = []
        for i in range(0, len(rest), 3):
            self.assertRegex(rest[i], r"\A%s\Z" % UUID_RE, r)
            self.assertRegex(rest[i + 1], r"\A[0-9]+\Z", r)
            self.assertRegex(rest[i + 2], r"\A[0-9]+\Z", r)
            listed.append((rest[i], int(rest[i + 1]), int(rest[i + 2])))
        self.assertEqual(len(listed), min(total, OWNER_SHOWN), r)
        return kind, total, limit, listed

    def read_event(self, client, broker):
        """The next line, within 2 s; a closed connection fails the test
        saying whether its broker died."""
        try:
            return client.readline(2.0)
        except EOFError:
            self.fail("the broker closed the connection (broker %s); log "
                      "tail:\n%s" % ("alive" if broker.alive() else
                                     "DIED, exit %s" % broker.proc.returncode,
                                     "\n".join(broker.log().splitlines()
                                               [-12:])))

    def zset(self, key):
        """The lock key's sorted set as {member: score}."""
        flat = self.redis.cli("ZRANGE", self.lock_key(key), 0, -1,
                              "WITHSCORES")
        return {flat[i]: int(float(flat[i + 1]))
                for i in range(0, len(flat), 2)}

    def redis_ms(self):
        sec, usec = self.redis.cli("TIME")
        return int(sec) * 1000 + int(usec) // 1000


# ------------------------------------------------------------ semaphores --

class TestSemaphoreContention(SharedCase):
    CLIENTS = 30
    ROUNDS = 3
    LIMIT = 3
    HOLD_S = 0.015

    def test_30_clients_on_two_brokers_never_exceed_the_limit(self):
        key = "pool"
        mu = threading.Lock()
        state = {"in": 0, "peak": 0, "over": []}
        holds = []              # (req sent, OK read, RELEASE sent, token, who)
        errors = []
        stop = threading.Event()
        redis_peak = [0]

        def client(c, who):
            try:
                for _ in range(self.ROUNDS):
                    t_req = time.monotonic()
                    r = c.req("ACQUIRE %s LIMIT %d WAIT 8000 TTL 2000"
                              % (key, self.LIMIT), timeout=10)
                    t_ok = time.monotonic()
                    m = re.fullmatch(r"OK ([0-9]+)", r)
                    if not m:
                        raise AssertionError("%s: ACQUIRE answered %r"
                                             % (who, r))
                    with mu:
                        state["in"] += 1
                        state["peak"] = max(state["peak"], state["in"])
                        if state["in"] > self.LIMIT:
                            state["over"].append((who, state["in"]))
                    time.sleep(self.HOLD_S)
                    with mu:
                        state["in"] -= 1
                        t_rel = time.monotonic()
                        holds.append((t_req, t_ok, t_rel, int(m.group(1)),
                                      who))
                    r = c.req("RELEASE " + key)
                    if r != "OK 0":
                        raise AssertionError("%s: RELEASE answered %r"
                                             % (who, r))
            except Exception as e:      # reported by the main thread
                errors.append("%s: %r" % (who, e))

        def watch_redis():
            # Redis's own count of live holders, polled meanwhile.
            while not stop.is_set():
                try:
                    n = self.redis.cli("ZCOUNT", self.lock_key(key), "(0",
                                       "+inf")
                except (OSError, RedisError):
                    continue
                redis_peak[0] = max(redis_peak[0], n)
                time.sleep(0.002)

        cs = []
        for i in range(self.CLIENTS):
            b = self.x if i % 2 == 0 else self.y
            cs.append((self.connect(b, timeout=10), "%s%d" % ("xy"[i % 2], i)))
        watcher = threading.Thread(target=watch_redis)
        watcher.start()
        ts = [threading.Thread(target=client, args=a) for a in cs]
        t0 = time.monotonic()
        for t in ts:
            t.start()
        for t in ts:
            t.join(20)
        took = ms_since(t0)
        stop.set()
        watcher.join(5)
        figure("%d clients x %d rounds, LIMIT %d, %.0f ms holds: %.0f ms; "
               "peak holders %d (client side), %d (Redis)"
               % (self.CLIENTS, self.ROUNDS, self.LIMIT, self.HOLD_S * 1000,
                  took, state["peak"], redis_peak[0]))
        self.assertFalse(any(t.is_alive() for t in ts), "clients hung")
        self.assertEqual(errors, [])
        self.assertEqual(state["over"], [], "more holders than permits")
        self.assertLessEqual(redis_peak[0], self.LIMIT)
        # A semaphore, not a lock: the permits were used side by side.
        self.assertEqual(state["peak"], self.LIMIT)
        # Every client was served every round, in bounded time.
        per = {}
        for h in holds:
            per[h[4]] = per.get(h[4], 0) + 1
        self.assertEqual(per, {who: self.ROUNDS for _, who in cs})
        self.assertLess(took, 8000)
        # Tokens: unique, and a grant that began after another's OK was
        # read has the higher one (fencing across permits).
        toks = [h[3] for h in holds]
        self.assertEqual(len(set(toks)), len(toks), "a token granted twice")
        for a in holds:
            for b in holds:
                if a[1] < b[0]:
                    self.assertLess(a[3], b[3], "token went down: %s got %d "
                                    "after %s's %d" % (b[4], b[3], a[4], a[3]))
        self.assertIsNone(self.owner(self.connect(self.x), key))
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key(key)), 0)


# ----------------------------------------------------------- read/write --

class TestReadersWriter(SharedCase):
    def test_readers_share_on_both_brokers_writer_waits_for_all(self):
        r1, r2 = self.connect(self.x), self.connect(self.x)
        r3, w = self.connect(self.y), self.connect(self.y)
        ids = {r1.hello(), r2.hello(), r3.hello()}
        toks = [self.assertToken(c.req("ACQUIRE doc SHARED"))
                for c in (r1, r2, r3)]
        self.assertEqual(len(set(toks)), 3, "each read hold has its token")
        kind, total, _, listed = self.owner(w, "doc")
        self.assertEqual((kind, total), ("SHARED", 3))
        self.assertEqual({h[0] for h in listed}, ids)
        self.assertEqual(sorted(h[2] for h in listed), sorted(toks))
        # A writer: BUSY at once, and with WAIT it waits for every reader.
        self.assertEqual(w.req("ACQUIRE doc"), "BUSY")
        self.assertEqual(self.connect(self.x).req("ACQUIRE doc"), "BUSY")
        w.send("ACQUIRE doc WAIT 4000")
        self.assertEqual(r1.req("RELEASE doc"), "OK 0")
        self.assertEqual(r3.req("RELEASE doc"), "OK 0")
        self.assertTrue(w.no_reply(0.15), "writer granted beside a reader")
        self.assertEqual(r2.req("RELEASE doc"), "OK 0")
        tw = self.assertToken(w.readline())
        self.assertGreater(tw, max(toks))
        self.assertEqual(self.owner(r1, "doc")[0], "X")
        # While the writer holds, readers wait (on both brokers).
        self.assertEqual(r1.req("ACQUIRE doc SHARED"), "BUSY")
        self.assertEqual(r3.req("ACQUIRE doc SHARED"), "BUSY")
        r1.send("ACQUIRE doc SHARED WAIT 4000")
        r3.send("ACQUIRE doc SHARED WAIT 4000")
        self.assertTrue(r1.no_reply(0.15), "reader granted beside a writer")
        self.assertTrue(r3.no_reply(0.01), "reader granted beside a writer")
        self.assertEqual(w.req("RELEASE doc"), "OK 0")
        t1, t3 = self.assertToken(r1.readline()), self.assertToken(r3.readline())
        self.assertGreater(min(t1, t3), tw)
        self.assertEqual(self.owner(w, "doc")[:2], ("SHARED", 2))
        for c in (r1, r3):
            self.assertEqual(c.req("RELEASE doc"), "OK 0")
        self.assertIsNone(self.owner(w, "doc"))

    def test_waiting_writer_is_not_overtaken_by_a_later_reader(self):
        r1, w, r2, r3 = [self.connect(self.x) for _ in range(4)]
        obs = self.connect(self.x)
        t1 = self.assertToken(r1.req("ACQUIRE f SHARED"))
        w.send("ACQUIRE f WAIT 4000")
        self.waiters_are(obs, 1)
        # Shared with r1, but queued behind the writer (FIFO across kinds).
        r2.send("ACQUIRE f SHARED WAIT 4000")
        self.waiters_are(obs, 2)
        self.assertTrue(r2.no_reply(0.2), "a later reader overtook the "
                        "waiting writer")
        self.assertEqual(r3.req("ACQUIRE f SHARED"), "BUSY")
        self.assertEqual(self.owner(obs, "f")[:2], ("SHARED", 1))
        self.assertEqual(r1.req("RELEASE f"), "OK 0")
        tw = self.assertToken(w.readline())
        self.assertTrue(r2.no_reply(0.1), "reader granted beside the writer")
        self.assertEqual(w.req("RELEASE f"), "OK 0")
        t2 = self.assertToken(r2.readline())
        self.assertLess(t1, tw)
        self.assertLess(tw, t2)
        self.assertEqual(r2.req("RELEASE f"), "OK 0")

    def test_consecutive_readers_at_the_head_are_granted_together(self):
        w1 = self.connect(self.x)
        rs = [self.connect(self.x) for _ in range(3)]
        w2, obs = self.connect(self.x), self.connect(self.x)
        tw1 = self.assertToken(w1.req("ACQUIRE g"))
        for i, r in enumerate(rs):
            r.send("ACQUIRE g SHARED WAIT 4000")
            self.waiters_are(obs, i + 1)
        w2.send("ACQUIRE g WAIT 4000")
        self.waiters_are(obs, 4)
        self.assertEqual(w1.req("RELEASE g"), "OK 0")
        trs = [self.assertToken(r.readline(2.0)) for r in rs]
        self.assertGreater(min(trs), tw1)
        self.assertEqual(self.owner(obs, "g")[:2], ("SHARED", 3))
        self.assertTrue(w2.no_reply(0.1), "second writer granted beside "
                        "readers")
        for r in rs[:2]:
            self.assertEqual(r.req("RELEASE g"), "OK 0")
        self.assertTrue(w2.no_reply(0.1), "writer granted beside a reader")
        self.assertEqual(rs[2].req("RELEASE g"), "OK 0")
        self.assertGreater(self.assertToken(w2.readline()), max(trs))
        self.assertEqual(w2.req("RELEASE g"), "OK 0")

    def test_writer_waiting_on_other_broker_holds_back_new_readers(self):
        # Deterministic part of the cross-broker writer preference: once a
        # writer on Y announced itself, a reader on X no longer joins X's
        # read (it would be granted at once without the rule) and the
        # writer gets the key when X's reads drain.  Not asserted: which of
        # the writer and a reader queued on X meanwhile wins the moment the
        # last read ends (X holds its readers back YIELD_MS = 5 ms only).
        sub = self.subscribe_wanted()
        r1, r2, r3 = [self.connect(self.x) for _ in range(3)]
        w = self.connect(self.y)
        t1 = self.assertToken(r1.req("ACQUIRE cfg SHARED"))
        # Before any writer, another reader on X joins.
        self.assertToken(r2.req("ACQUIRE cfg SHARED"))
        self.assertEqual(r2.req("RELEASE cfg"), "OK 0")
        w.send("ACQUIRE cfg WAIT 4000")
        self.announced(sub, "cfg")
        self.assertEqual(r2.req("ACQUIRE cfg SHARED"), "BUSY",
                         "a reader joined while a writer waits elsewhere")
        r, ms = r3.timed_req("ACQUIRE cfg SHARED WAIT 250")
        self.assertEqual(r, "BUSY")
        self.assertGreaterEqual(ms, 240)
        self.assertEqual(self.owner(r1, "cfg")[:2], ("SHARED", 1))
        self.assertTrue(w.no_reply(0.01))
        t0 = time.monotonic()
        self.assertEqual(r1.req("RELEASE cfg"), "OK 0")
        tw = self.assertToken(w.readline())
        figure("shared -> remote writer after drain: %.1f ms" % ms_since(t0))
        self.assertGreater(tw, t1)
        # And the readers wait for the writer, then come back.
        r2.send("ACQUIRE cfg SHARED WAIT 4000")
        self.assertTrue(r2.no_reply(0.1))
        self.assertEqual(w.req("RELEASE cfg"), "OK 0")
        self.assertGreater(self.assertToken(r2.readline()), tw)
        self.assertEqual(r2.req("RELEASE cfg"), "OK 0")


class TestWriterAcrossBrokers(SharedCase):
    """Issue 23: a writer waiting on one broker is not overtaken by readers
    that arrive after it on another; a writer that gives up or vanishes
    holds them back no longer (at most its mark's TTL, 3 s)."""

    def queue(self, broker, n, line, obs, base):
        """n connections to broker sending line; waits until obs (on that
        broker) shows base + n waiters."""
        cs = [self.connect(broker, timeout=10) for _ in range(n)]
        for c in cs:
            c.send(line)
        self.waiters_are(obs, base + n, timeout=5.0)
        return cs

    def test_late_readers_elsewhere_wait_for_the_writer(self):
        # The defect's scenario: the key held exclusive, 40 readers wait
        # on both brokers, then a writer on Y, then 5 readers on X.  At
        # the release the 40 share the key; the writer is next, before
        # the 5 late ones (they were granted with the 40, and the writer
        # waited for their whole hold).
        ox, oy = self.connect(self.x), self.connect(self.y)
        holder = self.connect(self.x)
        t0 = self.assertToken(holder.req("ACQUIRE doc"))
        line = "ACQUIRE doc SHARED WAIT 20000"
        early = (self.queue(self.x, 20, line, ox, 0) +
                 self.queue(self.y, 20, line, oy, 0))
        w = self.connect(self.y, timeout=10)
        w.send("ACQUIRE doc WAIT 20000")
        self.waiters_are(oy, 21)
        time.sleep(0.2)         # its mark is announced, X hears of it
        late = self.queue(self.x, 5, line, ox, 20)
        self.assertEqual(holder.req("RELEASE doc"), "OK 0")
        tokens = [self.assertToken(c.readline(3.0)) for c in early]
        self.assertGreater(min(tokens), t0)
        for c in late:
            self.assertTrue(c.no_reply(0.05), "a reader that came after "
                            "the writer was granted before it")
        self.assertTrue(w.no_reply(0.05))
        for c in early:
            self.assertEqual(c.req("RELEASE doc"), "OK 0")
        tw = self.assertToken(w.readline(3.0))
        self.assertGreater(tw, max(tokens))
        for c in late:
            self.assertTrue(c.no_reply(0.05), "a late reader was granted "
                            "beside the writer")
        self.assertEqual(w.req("RELEASE doc"), "OK 0")
        for c in late:
            self.assertGreater(self.assertToken(c.readline(3.0)), tw)
            self.assertEqual(c.req("RELEASE doc"), "OK 0")

    def test_writer_gone_holds_readers_back_no_longer(self):
        # A writer whose WAIT runs out lets the late readers go at once; a
        # writer whose broker dies holds them back at most its mark's TTL.
        ox = self.connect(self.x)
        holder = self.connect(self.x)
        self.assertToken(holder.req("ACQUIRE doc"))
        w = self.connect(self.y)
        w.send("ACQUIRE doc WAIT 1500")
        time.sleep(0.3)         # its attempt finds the key held: marked
        late = self.queue(self.x, 2, "ACQUIRE doc SHARED WAIT 10000", ox, 0)
        self.assertEqual(w.readline(3.0), "BUSY")
        t0 = time.monotonic()
        self.assertEqual(holder.req("RELEASE doc"), "OK 0")
        for c in late:
            self.assertToken(c.readline(2.0))
        ms = ms_since(t0)
        figure("writer gave up, key released -> late readers: %.0f ms" % ms)
        self.assertLess(ms, 1000, "the mark of a writer that gave up held "
                        "the readers back")
        for c in late:
            self.assertEqual(c.req("RELEASE doc"), "OK 0")

        z = self.start_broker()
        self.assertToken(holder.req("ACQUIRE doc2"))
        w = self.connect(z)
        w.send("ACQUIRE doc2 WAIT 20000")
        time.sleep(0.3)
        late = self.queue(self.x, 2, "ACQUIRE doc2 SHARED WAIT 10000", ox, 0)
        z.kill()
        t0 = time.monotonic()
        self.assertEqual(holder.req("RELEASE doc2"), "OK 0")
        for c in late:
            self.assertToken(c.readline(5.0))
        ms = ms_since(t0)
        figure("writer's broker killed -> late readers: %.0f ms" % ms)
        self.assertLess(ms, 4500)


class TestWriterGivesUpAcrossBrokers(SharedCase):
    """A writer waiting on Y for a key X's readers hold made X answer BUSY
    to every new SHARED request for as long as X's readers held the key
    (minutes), after the writer had given up and Redis held no writer
    mark: X kept the writer it had heard of.  However the writer gives up
    (its WAIT answered BUSY, an ASYNC wait timed out or cancelled, its
    session ended), new readers on both brokers are granted within the
    mark's 3 s (here: at once, as the writer's broker tells the others)."""

    def writer_waits(self, line):
        """A reader holds doc on X; a writer on Y queues with line; X has
        heard of it (a new reader there is refused)."""
        holder = self.connect(self.x)
        self.assertToken(holder.req("ACQUIRE doc SHARED"))
        w = self.connect(self.y)
        wanted = self.subscribe_wanted()
        w.send(line)
        self.announced(wanted, "doc")
        time.sleep(0.2)             # its mark is made
        probe = self.connect(self.x)
        self.assertEqual(probe.req("ACQUIRE doc SHARED"), "BUSY",
                         "X did not hold a reader back for the writer")
        return holder, w, probe

    def readers_granted(self, t0):
        """A new reader on X, then on Y, asked once every 50 ms, is
        granted within 3 s of t0 (the writer gave up); returns the ms."""
        for broker in (self.x, self.y):
            c = self.connect(broker)
            while True:
                r = c.req("ACQUIRE doc SHARED")
                if r != "BUSY":
                    break
                self.assertLess(ms_since(t0), 3000, "readers still held "
                                "back by a writer that gave up")
                time.sleep(0.05)
            self.assertToken(r)
        return ms_since(t0)

    def test_writer_busy(self):
        holder, w, probe = self.writer_waits("ACQUIRE doc WAIT 500")
        self.assertEqual(w.readline(3.0), "BUSY")
        ms = self.readers_granted(time.monotonic())
        figure("writer BUSY -> readers on both brokers: %.0f ms" % ms)

    def test_writer_async_timeout(self):
        holder, w, probe = self.writer_waits(
            "ACQUIRE doc WAIT 500 ASYNC")
        self.assertEqual(w.readline(3.0), "OK QUEUED")
        self.assertEqual(w.readline(3.0), "EVENT TIMEOUT doc")
        ms = self.readers_granted(time.monotonic())
        figure("writer ASYNC TIMEOUT -> readers: %.0f ms" % ms)

    def test_writer_cancel(self):
        holder, w, probe = self.writer_waits(
            "ACQUIRE doc WAIT 20000 ASYNC")
        self.assertEqual(w.readline(3.0), "OK QUEUED")
        self.assertEqual(w.req("CANCEL doc"), "OK 1")
        ms = self.readers_granted(time.monotonic())
        figure("writer CANCEL -> readers: %.0f ms" % ms)

    def test_writer_session_end(self):
        holder, w, probe = self.writer_waits("ACQUIRE doc WAIT 20000")
        w.close()
        ms = self.readers_granted(time.monotonic())
        figure("writer's session ended -> readers: %.0f ms" % ms)


# ------------------------------------------------------- session end, -9 --

class TestSessionEnd(SharedCase):
    def test_permit_of_a_closed_session_is_free_at_once_on_both_brokers(self):
        h1, h2 = self.connect(self.x), self.connect(self.x)
        wy, wx = self.connect(self.y), self.connect(self.x)
        sub = self.subscribe_wanted()
        # TTL 10000: a wake-up that waited for the TTL would take 10 s.
        for h in (h1, h2):
            self.assertToken(h.req("ACQUIRE sem LIMIT 2 TTL 10000"))
        wy.send("ACQUIRE sem LIMIT 2 WAIT 3000")
        self.announced(sub, "sem")
        # A reset on X: the waiter on Y gets the permit (pub/sub wake).
        t0 = time.monotonic()
        h1.reset()
        self.assertToken(wy.readline())
        remote_ms = ms_since(t0)
        # A plain close on X: the waiter on X gets it (local hand-over).
        wx.send("ACQUIRE sem LIMIT 2 WAIT 3000")
        self.waiters_are(h2, 1)
        time.sleep(0.03)
        t0 = time.monotonic()
        h2.close()
        self.assertToken(wx.readline())
        local_ms = ms_since(t0)
        figure("session end -> permit: other broker %.1f ms (reset), same "
               "broker %.1f ms (close)" % (remote_ms, local_ms))
        self.assertLess(remote_ms, WAKE_MS)
        self.assertLess(local_ms, WAKE_MS)
        self.assertEqual(self.owner(wx, "sem")[:3], ("SEMAPHORE", 2, 2))

    def test_permit_of_a_killed_broker_frees_at_its_ttl(self):
        z = self.start_broker()
        doomed, live = self.connect(z), self.connect(self.x)
        waiter = self.connect(self.x)
        did = doomed.hello()
        td = self.assertToken(doomed.req("ACQUIRE sem LIMIT 2 TTL 1000"))
        tl = self.assertToken(live.req("ACQUIRE sem LIMIT 2 TTL 1000"))
        waiter.send("ACQUIRE sem LIMIT 2 WAIT 4000")
        self.waiters_are(live, 1)
        time.sleep(0.4)         # past a renewal (TTL/3) of both holds
        z.kill()
        t0 = time.monotonic()
        # No broker renews the dead one's hold from now: it frees at its
        # score (its last renewal + 1000 ms).
        expiry = self.zset("sem")["%s:%d" % (did, td)]
        left = expiry - self.redis_ms()
        tw = self.assertToken(waiter.readline(5.0))
        ms = ms_since(t0)
        late = self.redis_ms() - expiry
        figure("broker killed -> permit after %.0f ms (TTL 1000; the hold "
               "had %d ms left at the kill; granted %d ms after its score)"
               % (ms, left, late))
        self.assertTrue(600 <= left <= 1000, left)
        self.assertGreaterEqual(ms, 550)
        self.assertLess(ms, 2000)
        self.assertGreaterEqual(late, -5, "granted before the hold expired")
        self.assertLess(late, 300)
        self.assertGreater(tw, max(td, tl))
        # The live holder was renewed meanwhile (twice its TTL by now), and
        # the dead one is gone.
        kind, total, limit, listed = self.owner(waiter, "sem")
        self.assertEqual((kind, total, limit), ("SEMAPHORE", 2, 2))
        self.assertEqual(sorted(h[2] for h in listed), [tl, tw])
        self.assertEqual(live.req("RELEASE sem"), "OK 0")
        self.assertEqual(waiter.req("RELEASE sem"), "OK 0")


# ------------------------------------------------------------ lost holds --

class TestLost(SharedCase):
    def test_permit_removed_in_redis_is_reported_lost(self):
        a, b = self.connect(self.x), self.connect(self.y)
        aid = a.hello()
        self.assertEqual(a.req("EVENTS ON"), "OK")
        ta = self.assertToken(a.req("ACQUIRE sem LIMIT 2 TTL 300"))
        tb = self.assertToken(b.req("ACQUIRE sem LIMIT 2 TTL 300"))
        self.assertEqual(self.redis.cli("ZREM", self.lock_key("sem"),
                                        "%s:%d" % (aid, ta)), 1)
        t0 = time.monotonic()
        self.assertEqual(self.read_event(a, self.x), "EVENT LOST sem %d" % ta)
        figure("ZREM -> EVENT LOST: %.0f ms (TTL 300)" % ms_since(t0))
        self.assertLess(ms_since(t0), 1000)
        self.assertEqual(a.req("HELD"), "OK 0")
        self.assertErr(a.req("RELEASE sem"), "LOST")
        self.assertErr(a.req("RELEASE sem"), "NOTHELD")
        # The other permit is untouched; the freed one can be taken again.
        self.assertEqual(b.req("HELD"), "OK 1 sem")
        self.assertGreater(self.assertToken(
            a.req("ACQUIRE sem LIMIT 2 TTL 300")), tb)
        self.assertEqual(b.req("RELEASE sem"), "OK 0")
        self.assertEqual(a.req("RELEASE sem"), "OK 0")

    def test_shared_key_deleted_in_redis_is_lost_for_every_reader(self):
        a, b = self.connect(self.x), self.connect(self.y)
        quiet = self.connect(self.x)
        for c in (a, b):
            self.assertEqual(c.req("EVENTS ON"), "OK")
        ta = self.assertToken(a.req("ACQUIRE doc SHARED TTL 300"))
        tb = self.assertToken(b.req("ACQUIRE doc SHARED TTL 300"))
        tq = self.assertToken(quiet.req("ACQUIRE doc SHARED TTL 300"))
        self.assertEqual(self.redis.cli("DEL", self.lock_key("doc")), 1)
        # Two holds of one key on X lost in one renewal.
        self.assertEqual(self.read_event(a, self.x), "EVENT LOST doc %d" % ta)
        self.assertEqual(self.read_event(b, self.y), "EVENT LOST doc %d" % tb)
        self.assertErr(a.req("RELEASE doc"), "LOST")
        self.assertErr(b.req("RENEW doc"), "LOST")
        # Without EVENTS ON: no line, but RELEASE answers ERR LOST.
        self.assertTrue(quiet.no_reply(0.3))
        self.assertErr(quiet.req("RELEASE doc"), "LOST")
        self.assertIsNone(self.owner(a, "doc"))
        self.assertGreater(self.assertToken(a.req("ACQUIRE doc")),
                           max(ta, tb, tq))
        self.assertEqual(a.req("RELEASE doc"), "OK 0")


# ------------------------------------------------------------- wake-ups --

class TestWakeLatency(SharedCase):
    ROUNDS = 5

    def test_release_wakes_the_other_brokers_waiter_at_once(self):
        sub = self.subscribe_wanted()
        sem, rw = [], []
        for i in range(self.ROUNDS):
            # A semaphore with its one permit held on X, waiter on Y.
            key = "s%d" % i
            h, w = self.connect(self.x), self.connect(self.y)
            self.assertToken(h.req("ACQUIRE %s LIMIT 1 TTL 10000" % key))
            w.send("ACQUIRE %s LIMIT 1 WAIT 3000" % key)
            self.announced(sub, key)
            t0 = time.monotonic()
            self.assertEqual(h.req("RELEASE " + key), "OK 0")
            self.assertToken(w.readline())
            sem.append(ms_since(t0))
            # Two readers on X, a writer waiting on Y.
            key = "rw%d" % i
            r1, r2 = self.connect(self.x), self.connect(self.x)
            w = self.connect(self.y)
            for r in (r1, r2):
                self.assertToken(r.req("ACQUIRE %s SHARED TTL 10000" % key))
            w.send("ACQUIRE %s WAIT 3000" % key)
            self.announced(sub, key)
            self.assertEqual(r1.req("RELEASE " + key), "OK 0")
            self.assertTrue(w.no_reply(0.02))
            t0 = time.monotonic()
            self.assertEqual(r2.req("RELEASE " + key), "OK 0")
            self.assertToken(w.readline())
            rw.append(ms_since(t0))
        figure("release -> grant on the other broker, %d rounds: semaphore "
               "%s ms; shared -> exclusive %s ms"
               % (self.ROUNDS, " ".join("%.1f" % v for v in sem),
                  " ".join("%.1f" % v for v in rw)))
        self.assertLess(max(sem), WAKE_MS, sem)
        self.assertLess(max(rw), WAKE_MS, rw)


# ---------------------------------------------------------------- kinds --

class TestGraceResume(SharedCase):
    def test_resume_elsewhere_keeps_a_permit_and_a_read(self):
        """A grace session's permit and shared hold survive its connection
        and come back, same tokens, on the other broker; they are renewed
        there past their TTL and still count against the limit."""
        g = self.connect(self.x)
        w = g.req("HELLO rw GRACE 5000").split()
        cid, secret = w[1], w[3]
        t_sem = self.assertToken(g.req("ACQUIRE sem LIMIT 2 TTL 900"))
        t_sh = self.assertToken(g.req("ACQUIRE sh SHARED TTL 900"))
        g.close()
        r = self.connect(self.y)
        resumed = r.req("RESUME %s %s" % (cid, secret)).split()
        self.assertEqual(resumed[:2], ["OK", "2"])
        self.assertEqual(sorted(resumed[2:]), ["sem", "sh"])
        time.sleep(1.2)                 # past the TTL: renewed by Y now
        o = self.owner(r, "sem")
        self.assertEqual((o[0], o[1], o[2]), ("SEMAPHORE", 1, 2))
        self.assertEqual((o[3][0][0], o[3][0][2]), (cid, t_sem))
        o = self.owner(r, "sh")
        self.assertEqual((o[0], o[3][0][0], o[3][0][2]), ("SHARED", cid, t_sh))
        other = self.connect(self.x)
        self.assertToken(other.req("ACQUIRE sem LIMIT 2"))
        self.assertEqual(self.connect(self.x).req("ACQUIRE sem LIMIT 2"),
                         "BUSY")
        self.assertEqual(r.req("RELEASE sem"), "OK 0")
        self.assertEqual(r.req("RELEASE sh"), "OK 0")
        self.assertIsNone(self.owner(other, "sh"))


class TestKinds(SharedCase):
    def test_kind_and_limit_mismatch_here_and_on_the_other_broker(self):
        a, b = self.connect(self.x), self.connect(self.y)
        c = self.connect(self.x)        # same broker as the holder
        self.assertToken(a.req("ACQUIRE sem LIMIT 3"))
        self.assertToken(a.req("ACQUIRE ex"))
        self.assertToken(a.req("ACQUIRE sh SHARED"))
        sem_err = r"\AERR BADARG the key is a semaphore with LIMIT 3\Z"
        lock_err = r"\AERR BADARG the key is a lock, not a semaphore\Z"
        for other in (c, b):            # local table, then Redis says it
            for line in ("ACQUIRE sem", "ACQUIRE sem SHARED",
                         "ACQUIRE sem LIMIT 2", "ACQUIRE sem LIMIT 4"):
                self.assertRegex(other.req(line), sem_err, line)
            for line in ("ACQUIRE ex LIMIT 3", "ACQUIRE sh LIMIT 1"):
                self.assertRegex(other.req(line), lock_err, line)
            # An exclusive lock is BUSY for a reader, a reader's key BUSY
            # for a writer: both are locks.
            self.assertEqual(other.req("ACQUIRE ex SHARED"), "BUSY")
            self.assertEqual(other.req("ACQUIRE sh"), "BUSY")
            # With WAIT, a mismatch answers at once: it never goes away
            # by waiting.
            r, ms = other.timed_req("ACQUIRE sem SHARED WAIT 2000")
            self.assertRegex(r, sem_err)
            r2, ms2 = other.timed_req("ACQUIRE ex LIMIT 2 WAIT 2000")
            self.assertRegex(r2, lock_err)
            self.assertLess(max(ms, ms2), 500)
            self.assertEqual(other.req("HELD"), "OK 0")
        # The holder itself, reentrant with another kind.
        self.assertRegex(a.req("ACQUIRE sem LIMIT 2"), sem_err)
        self.assertRegex(a.req("ACQUIRE ex LIMIT 3"), lock_err)
        # Free again: the key may change kind.
        for k in ("sem", "ex", "sh"):
            self.assertEqual(a.req("RELEASE " + k), "OK 0")
        self.assertToken(b.req("ACQUIRE sem SHARED"))
        self.assertRegex(c.req("ACQUIRE sem LIMIT 3"), lock_err)
        self.assertToken(b.req("ACQUIRE ex LIMIT 5"))
        self.assertRegex(c.req("ACQUIRE ex"),
                         r"\AERR BADARG the key is a semaphore with LIMIT 5\Z")

    def test_no_upgrade_from_shared_and_exclusive_covers_shared(self):
        a, b = self.connect(self.x), self.connect(self.y)
        ts = self.assertToken(a.req("ACQUIRE doc SHARED"))
        for line in ("ACQUIRE doc", "ACQUIRE doc WAIT 2000"):
            r, ms = a.timed_req(line)
            self.assertErr(r, "BADARG")
            self.assertIn("this session holds the key SHARED", r)
            self.assertLess(ms, 500)
        # Still held shared, once; another reader still joins.
        self.assertEqual(a.req("HELD"), "OK 1 doc")
        self.assertEqual(self.owner(b, "doc")[:2], ("SHARED", 1))
        self.assertToken(b.req("ACQUIRE doc SHARED"))
        self.assertEqual(b.req("RELEASE doc"), "OK 0")
        self.assertEqual(a.req("RELEASE doc"), "OK 0")
        # Exclusive, then SHARED: a reentrant hold, same token.
        tx = self.assertToken(a.req("ACQUIRE doc"))
        self.assertEqual(self.assertToken(a.req("ACQUIRE doc SHARED")), tx)
        self.assertGreater(tx, ts)
        self.assertEqual(self.owner(b, "doc")[0], "X")
        self.assertEqual(self.redis.cli("TYPE", self.lock_key("doc")),
                         "string")
        self.assertEqual(b.req("ACQUIRE doc SHARED"), "BUSY")
        self.assertEqual(a.req("RELEASE doc"), "OK 1")
        self.assertEqual(b.req("ACQUIRE doc SHARED"), "BUSY")
        self.assertEqual(a.req("RELEASE doc"), "OK 0")
        self.assertToken(b.req("ACQUIRE doc SHARED"))

    def test_reentrant_permit_and_read_take_one_place(self):
        a, b, c = self.connect(self.x), self.connect(self.x), self.connect(
            self.y)
        ta = self.assertToken(a.req("ACQUIRE sem LIMIT 2"))
        for _ in range(2):
            self.assertEqual(self.assertToken(a.req("ACQUIRE sem LIMIT 2")),
                             ta)
        # Three holds, one permit: the second is still free.
        self.assertEqual(self.owner(b, "sem")[:3], ("SEMAPHORE", 1, 2))
        tb = self.assertToken(b.req("ACQUIRE sem LIMIT 2"))
        self.assertEqual(c.req("ACQUIRE sem LIMIT 2"), "BUSY")
        self.assertEqual(a.req("RELEASE sem"), "OK 2")
        self.assertEqual(a.req("RELEASE sem"), "OK 1")
        self.assertEqual(c.req("ACQUIRE sem LIMIT 2"), "BUSY")
        self.assertEqual(a.req("RELEASE sem"), "OK 0")
        self.assertGreater(self.assertToken(c.req("ACQUIRE sem LIMIT 2")), tb)
        # The same for a read hold.
        tr = self.assertToken(a.req("ACQUIRE doc SHARED"))
        self.assertEqual(self.assertToken(a.req("ACQUIRE doc SHARED")), tr)
        self.assertEqual(self.owner(c, "doc")[:2], ("SHARED", 1))
        self.assertEqual(len(self.zset("doc")), 2)      # "#" and one holder
        self.assertEqual(a.req("RELEASE doc"), "OK 1")
        self.assertEqual(c.req("ACQUIRE doc"), "BUSY")
        self.assertEqual(a.req("RELEASE doc"), "OK 0")
        self.assertToken(c.req("ACQUIRE doc"))

    def test_owner_shapes_of_the_three_kinds(self):
        obs = self.connect(self.y)
        self.assertEqual(obs.req("OWNER free"), "OK -")
        # Exclusive: v1 shape.
        e = self.connect(self.x)
        eid = e.hello()
        te = self.assertToken(e.req("ACQUIRE ex TTL 5000"))
        kind, _, _, listed = self.owner(obs, "ex")
        self.assertEqual(kind, "X")
        self.assertEqual((listed[0][0], listed[0][2]), (eid, te))
        self.assertTrue(4000 < listed[0][1] <= 5000, listed)
        # Shared, holders on both brokers, with their own TTLs.
        r1, r2 = self.connect(self.x), self.connect(self.y)
        want = {}
        for c, ttl in ((r1, 3000), (r2, 6000)):
            want[c.hello()] = (self.assertToken(
                c.req("ACQUIRE sh SHARED TTL %d" % ttl)), ttl)
        kind, total, _, listed = self.owner(obs, "sh")
        self.assertEqual((kind, total), ("SHARED", 2))
        for cid, ttl, tok in listed:
            self.assertEqual(want[cid][0], tok)
            self.assertTrue(want[cid][1] - 1000 < ttl <= want[cid][1],
                            listed)
        # Semaphore: holders and limit.
        s1, s2 = self.connect(self.x), self.connect(self.y)
        sids = {}
        for c in (s1, s2):
            sids[c.hello()] = self.assertToken(c.req("ACQUIRE sem LIMIT 5"))
        kind, total, limit, listed = self.owner(obs, "sem")
        self.assertEqual((kind, total, limit), ("SEMAPHORE", 2, 5))
        self.assertEqual({h[0]: h[2] for h in listed}, sids)
        # Many readers: all counted, at most 16 listed.
        many = [self.connect(self.x if i % 2 else self.y) for i in range(20)]
        for c in many:
            self.assertToken(c.req("ACQUIRE big SHARED"))
        kind, total, _, listed = self.owner(obs, "big")
        self.assertEqual((kind, total, len(listed)),
                         ("SHARED", 20, OWNER_SHOWN))
        for c in many:
            c.close()
        wait_until(lambda: self.owner(obs, "big") is None, 2.0,
                   what="readers freed by their sessions' end")

    def test_held_and_max_locks_per_session_count_every_kind(self):
        z = self.start_broker("--max_locks_per_session", "2")
        a = self.connect(z)
        self.assertEqual(a.req("HELD"), "OK 0")
        self.assertToken(a.req("ACQUIRE sem LIMIT 3"))
        self.assertToken(a.req("ACQUIRE doc SHARED"))
        held = a.req("HELD").split(" ")
        self.assertEqual((held[:2], sorted(held[2:])),
                         (["OK", "2"], ["doc", "sem"]))
        # A third key of any kind is over the limit ...
        for line in ("ACQUIRE ex", "ACQUIRE s2 LIMIT 3", "ACQUIRE d2 SHARED",
                     "ACQUIRE sem2 LIMIT 3 WAIT 100"):
            self.assertErr(a.req(line), "LIMIT")
        # ... a reentrant hold is not a new key.
        self.assertToken(a.req("ACQUIRE sem LIMIT 3"))
        self.assertToken(a.req("ACQUIRE doc SHARED"))
        self.assertEqual(a.req("RELEASE sem"), "OK 1")
        self.assertErr(a.req("ACQUIRE ex"), "LIMIT")
        self.assertEqual(a.req("RELEASE sem"), "OK 0")
        self.assertToken(a.req("ACQUIRE ex"))
        held = a.req("HELD").split(" ")
        self.assertEqual((held[:2], sorted(held[2:])),
                         (["OK", "2"], ["doc", "ex"]))
        # Per session: another session still takes permits.
        b = self.connect(z)
        self.assertToken(b.req("ACQUIRE sem LIMIT 3"))
        self.assertToken(b.req("ACQUIRE doc SHARED"))
        st = self.stats(b)
        self.assertEqual(st["locks_held"], "4", st)


# --------------------------------------------------------- Redis layout --

class TestRedisLayout(SharedCase):
    def check_layout(self, key, kind_score, holders, scores=True):
        """The set holds "#" scored kind_score and exactly holders
        ({member: (ttl, redis ms before ACQUIRE)}), each scored by its
        expiry (checked when scores: no renewal since); the key expires
        with the latest."""
        z = self.zset(key)
        self.assertEqual(self.redis.cli("TYPE", self.lock_key(key)), "zset")
        self.assertEqual(z.pop("#"), kind_score)
        self.assertEqual(set(z), set(holders))
        for m, (ttl, before) in holders.items() if scores else ():
            self.assertGreaterEqual(z[m], before + ttl, m)
            self.assertLess(z[m], before + ttl + 500, m)
        self.assertEqual(self.redis.cli("PEXPIRETIME", self.lock_key(key)),
                         max(z.values()))
        return z

    def test_shared_and_semaphore_keys_are_sorted_sets_of_holders(self):
        for key, kind, score in (("doc", "SHARED", 0), ("sem", "LIMIT 3", -3)):
            a, b = self.connect(self.x), self.connect(self.y)
            holders = {}
            for c, ttl in ((a, 5000), (b, 900)):
                cid = c.hello()
                before = self.redis_ms()
                tok = self.assertToken(
                    c.req("ACQUIRE %s %s TTL %d" % (key, kind, ttl)))
                holders["%s:%d" % (cid, tok)] = (ttl, before)
            self.check_layout(key, score, holders)
            # The longer holder leaves: the expiry follows the other one.
            am = [m for m in holders if holders[m][0] == 5000][0]
            self.assertEqual(a.req("RELEASE " + key), "OK 0")
            del holders[am]
            self.check_layout(key, score, holders, scores=False)
            # Renewals move a live holder's score (TTL/3 = 300 ms) ...
            z0 = self.zset(key)
            bm = list(holders)[0]
            wait_until(lambda: self.zset(key).get(bm, 0) > z0[bm], 2.0,
                       what="holder's score renewed")
            self.assertEqual(
                self.redis.cli("PEXPIRETIME", self.lock_key(key)),
                self.zset(key)[bm])
            # ... and the last release deletes the key.
            self.assertEqual(b.req("RELEASE " + key), "OK 0")
            self.assertEqual(self.redis.cli("EXISTS", self.lock_key(key)), 0)

    def test_exclusive_lock_stays_a_string(self):
        a = self.connect(self.x)
        cid = a.hello()
        tok = self.assertToken(a.req("ACQUIRE ex TTL 4000"))
        self.assertEqual(a.req("ACQUIRE ex SHARED"), "OK %d" % tok)
        self.assertEqual(self.redis.cli("TYPE", self.lock_key("ex")),
                         "string")
        self.assertEqual(self.redis.cli("GET", self.lock_key("ex")),
                         "%s:%d" % (cid, tok))
        self.assertTrue(3000 < self.redis.cli("PTTL", self.lock_key("ex"))
                        <= 4000)
        self.assertEqual(a.req("RELEASE ex"), "OK 1")
        self.assertEqual(a.req("RELEASE ex"), "OK 0")
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key("ex")), 0)


if __name__ == "__main__":
    unittest.main()
