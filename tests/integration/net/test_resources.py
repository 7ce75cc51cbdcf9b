"""
test_resources.py - what the broker's resources cost and how it guards them:
Redis AUTH (password, ACL user, a wrong password refused and retried with
backoff), a client that pipelines without reading (the broker stops reading
it once its output is past 64 KiB), and many connections stalled in the
middle of a line.  Memory is the broker's VmRSS from /proc/<pid>/status;
the figures go to stderr.

Covered elsewhere, so not here: max_sessions, max_locks_per_session and
max_waiters (test_locking.TestLimits).
"""

import re
import select
import socket
import sys
import threading
import time
import unittest

import harness
from harness import (BrokerTestCase, RedisError, _resp_encode, _RespReader,
                     ms_since, wait_until)

# ASan's shadow memory, redzones and quarantine make every allocation cost
# more: scale the memory bounds for the sanitizer build.
ASAN = "/asan/" in harness.BROKER_BIN
MEM_SCALE = 4 if ASAN else 1
MiB = 1024 * 1024

SERVED_MS = 100         # another client's PING during a flood or a stall


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


def vm_rss(pid):
    """The process's resident set size in bytes."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS for pid %d" % pid)


def report(what):
    sys.stderr.write("\n    [resources] %s\n" % what)
    sys.stderr.flush()


class RssSampler:
    """Samples a pid's VmRSS every 50 ms in a thread; .peak is the largest."""

    def __init__(self, pid, interval=0.05):
        self.pid = pid
        self.interval = interval
        self.base = vm_rss(pid)
        self.peak = self.base
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self):
        try:
            rss = vm_rss(self.pid)
        except (OSError, AssertionError):
            return
        self.samples += 1
        self.peak = max(self.peak, rss)

    def stop(self):
        self._stop.set()
        self._thread.join(2.0)
        self.sample()
        return self.peak - self.base


# ---------------------------------------------------------------- AUTH --

class AuthRedis(harness.Redis):
    """A redis-server started with --requirepass whose .cli() logs in first
    (as .user when set).  After CONFIG SET requirepass, set .password."""

    def __init__(self, password, *extra):
        self.password = password
        self.user = None
        super().__init__("--requirepass", password, *extra)

    def cli(self, *args, timeout=5.0):
        auth = (["AUTH", self.user, self.password] if self.user
                else ["AUTH", self.password])
        with socket.create_connection(("127.0.0.1", self.port),
                                      timeout=timeout) as s:
            s.sendall(_resp_encode(auth) + _resp_encode(args))
            rd = _RespReader(s)
            a = rd.reply()
            r = rd.reply()
        if isinstance(a, RedisError):
            raise a
        if isinstance(r, RedisError):
            raise r
        return r


class ResourceCase(BrokerTestCase):
    def redis_state(self, client):
        return self.stats(client)["redis"]

    def start_auth_redis(self, password):
        r = AuthRedis(password)
        self.addCleanup(r.close)
        return r

    def redis_clients(self, redis):
        """CLIENT LIST as a list of {field: value}, this probe excluded."""
        out = []
        for line in redis.cli("CLIENT", "LIST").splitlines():
            f = dict(w.split("=", 1) for w in line.split(" ") if "=" in w)
            if f.get("cmd") != "client|list":
                out.append(f)
        return out

    def assertBrokerLoggedIn(self, redis, user):
        """The broker's command and subscriber connections are both
        logged in to Redis as user."""
        def both():
            cl = [c for c in self.redis_clients(redis)
                  if c.get("user") == user]
            # (the subscriber: the release and wanted channels, and
            # this broker's own for remote grants)
            return (len(cl) >= 2 and any(int(c.get("sub", "0")) >= 2
                                         for c in cl) and cl)
        wait_until(both, 3.0, what="broker's command and subscriber "
                   "connections logged in as %r" % user)


class TestRedisAuth(ResourceCase):
    def test_redis_password_accepted(self):
        r = self.start_auth_redis("s3cret")
        b = self.start_broker("--redis_password", "s3cret", redis=r)
        c = self.connect(b)
        cid = c.hello()
        tok = self.assertToken(c.req("ACQUIRE pw"))
        self.assertEqual(r.cli("GET", self.lock_key("pw")),
                         "%s:%d" % (cid, tok))
        self.assertBrokerLoggedIn(r, "default")
        self.assertEqual(c.req("RELEASE pw"), "OK 0")

    def test_acl_user(self):
        r = self.start_auth_redis("s3cret")
        r.cli("ACL", "SETUSER", "lb", "on", ">pw", "~*", "&*", "+@all")
        b = self.start_broker("--redis_user", "lb", "--redis_password", "pw",
                              redis=r)
        c = self.connect(b)
        cid = c.hello()
        tok = self.assertToken(c.req("ACQUIRE acl"))
        self.assertEqual(r.cli("GET", self.lock_key("acl")),
                         "%s:%d" % (cid, tok))
        self.assertBrokerLoggedIn(r, "lb")
        # The subscriber works too: a release on a second broker wakes it.
        b2 = self.start_broker("--redis_user", "lb", "--redis_password",
                               "pw", redis=r)
        w, o = self.connect(b2), self.connect(b2)
        w.send("ACQUIRE acl WAIT 5000")
        wait_until(lambda: self.stats(o)["waiters"] == "1", 2.0,
                   what="waiters=1 on the second broker")
        t0 = time.monotonic()
        self.assertEqual(c.req("RELEASE acl"), "OK 0")
        self.assertGreater(self.assertToken(w.readline(2.0)), tok)
        self.assertLess(ms_since(t0), 1000)

    def start_wrong_password_broker(self, redis):
        """A broker whose password Redis refuses; (broker, client,
        monotonic time it was started)."""
        t_start = time.monotonic()
        b = self.start_broker("--redis_password", "wrong-one", redis=redis,
                              wait_ready=False)
        c = wait_until(lambda: b.client(), 5.0, what="broker listening")
        self.addCleanup(c.close)
        return b, c, t_start

    def log_after(self, b, t_start, secs):
        """The broker's log once secs have passed since t_start."""
        time.sleep(max(0.0, secs - (time.monotonic() - t_start)))
        self.assertTrue(b.alive(), "broker exited:\n" + b.log())
        return b.log().splitlines()

    def test_wrong_password_logged_retried_then_recovers(self):
        r = self.start_auth_redis("s3cret")
        b, c, t_start = self.start_wrong_password_broker(r)
        self.assertEqual(c.req("PING"), "OK PONG")
        self.assertEqual(self.redis_state(c), "down")
        r0, ms = c.timed_req("ACQUIRE k", timeout=3.0)
        self.assertErr(r0, "UNAVAILABLE")
        self.assertLess(ms, 500, "ACQUIRE took %.0f ms to fail" % ms)

        # The log over 3 s from start-up: the refusal said clearly, and
        # retried with backoff (50 ms doubling: about 6 attempts), not in
        # a hot loop.
        lines = self.log_after(b, t_start, 3.0)
        log = "\n".join(lines)
        refusals = [l for l in lines if re.search(
            r"refused.*(WRONGPASS|invalid)", l)]
        self.assertTrue(refusals, "no line says Redis refused the "
                        "password:\n" + log)
        attempts = len([l for l in lines if re.search(
            r"Redis command connection failed.*retrying", l)])
        redis_lines = [l for l in lines if "Redis" in l]
        report("wrong Redis password, first 3 s: %d command-connection "
               "attempts, %d lines about Redis; first refusal: %s"
               % (attempts, len(redis_lines), refusals[0].strip()))
        self.assertGreater(attempts, 1, "not retried:\n" + log)
        self.assertLess(attempts, 12, "hot loop:\n" + log)
        self.assertLess(len(redis_lines), 100, "hot loop:\n" + log)
        # The harness's "--- argv" line aside, the password is never logged.
        self.assertFalse([l for l in lines if "wrong-one" in l and
                          not l.startswith("--- ")], "password logged")
        self.assertEqual(self.redis_state(c), "down")
        self.assertErr(c.req("ACQUIRE k"), "UNAVAILABLE")

        # Redis takes the broker's password now: it connects by itself.
        r.cli("CONFIG", "SET", "requirepass", "wrong-one")
        r.password = "wrong-one"
        t0 = time.monotonic()
        wait_until(lambda: self.redis_state(c) == "up", 4.0,
                   what="STATS redis=up once the password matches")
        report("wrong Redis password: up %.0f ms after Redis took it"
               % ms_since(t0))
        cid = c.hello()
        tok = self.assertToken(c.req("ACQUIRE k"))
        self.assertEqual(r.cli("GET", self.lock_key("k")),
                         "%s:%d" % (cid, tok))
        self.assertBrokerLoggedIn(r, "default")


    # Regression: each refused attempt once logged the WRONGPASS line, one
    # "handshake refused: NOAUTH" line per SCRIPT LOAD queued behind the
    # AUTH, and more for the subscriber: 9 lines per attempt.
    def test_wrong_password_logged_once_per_attempt(self):
        r = self.start_auth_redis("s3cret")
        b, c, t_start = self.start_wrong_password_broker(r)
        lines = self.log_after(b, t_start, 3.0)
        attempts = len([l for l in lines if re.search(
            r"Redis (command|subscriber) connection failed", l)])
        redis_lines = [l for l in lines if "Redis" in l]
        self.assertGreater(attempts, 1)
        # The refusal, and the "failed; retrying" line: 2 per attempt.
        self.assertLessEqual(len(redis_lines), 2 * attempts,
                             "\n".join(redis_lines))
        self.assertLess(len(redis_lines), 50, "\n".join(redis_lines))

# -------------------------------------------------------- backpressure --

PONG = b"OK PONG\r\n"


def flood(sock, line, max_lines, stall_s, chunk=65536, sampler=None,
          during=None):
    """Send line (bytes, LF-ended) up to max_lines times on the non-blocking
    sock, never reading, until all is sent or no byte went out for stall_s.
    Calls during() now and then.  Returns (bytes sent, whether it stalled,
    seconds it took)."""
    data = line * max_lines
    off = 0
    t0 = last = time.monotonic()
    next_during = t0
    while off < len(data):
        now = time.monotonic()
        if during is not None and now >= next_during:
            during()
            next_during = time.monotonic() + 0.1
        try:
            n = sock.send(data[off:off + chunk])
        except BlockingIOError:
            n = 0
        if n:
            off += n
            last = time.monotonic()
            continue
        if time.monotonic() - last >= stall_s:
            return off, True, time.monotonic() - t0
        select.select([], [sock], [], 0.02)
    return off, False, time.monotonic() - t0


def drain(sock, tail, want, timeout):
    """Send tail (the rest of a line cut by a short send) while reading
    everything: return the bytes read once want bytes came, or on timeout
    or EOF."""
    got = bytearray()
    deadline = time.monotonic() + timeout
    while len(got) < want:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        r, w, _ = select.select([sock], [sock] if tail else [], [], left)
        if w:
            try:
                tail = tail[sock.send(tail):]
            except BlockingIOError:
                pass
        if r:
            try:
                data = sock.recv(1 << 20)
            except BlockingIOError:
                continue
            if not data:
                break
            got += data
    return bytes(got)


class TestBackpressure(ResourceCase):
    def setUp(self):
        super().setUp()
        self.b = self.start_broker()
        self.other = self.connect(self.b)
        self.assertEqual(self.other.req("PING"), "OK PONG")

    def flooder(self):
        s = socket.create_connection(("127.0.0.1", self.b.port))
        self.addCleanup(s.close)
        s.setblocking(False)
        return s

    def other_served(self, worst):
        r, ms = self.other.timed_req("PING", timeout=2.0)
        self.assertEqual(r, "OK PONG")
        worst[0] = max(worst[0], ms)

    def flood_then_read(self, max_lines, stall_s, hold_s):
        """Flood PINGs without reading, then read every reply.  Returns
        (lines sent, stalled, peak RSS growth, worst PING ms of the other
        client)."""
        line = b"PING\n"
        s = self.flooder()
        worst = [0.0]
        rss = RssSampler(self.b.pid)
        sent, stalled, secs = flood(
            s, line, max_lines, stall_s,
            during=lambda: self.other_served(worst))
        # Held while the flooder still does not read.
        end = time.monotonic() + hold_s
        while time.monotonic() < end:
            self.other_served(worst)
            time.sleep(0.05)
        growth = rss.stop()
        self.assertTrue(self.b.alive(), self.b.log())
        n, cut = divmod(sent, len(line))
        tail = line[cut:] if cut else b""
        n += 1 if cut else 0
        got = drain(s, tail, n * len(PONG), timeout=30.0)
        self.assertEqual(len(got), n * len(PONG),
                         "sent %d lines, got %d bytes of replies"
                         % (n, len(got)))
        self.assertTrue(got == PONG * n, "a reply other than OK PONG")
        # Nothing more, and the session still works.
        s.setblocking(True)
        s.settimeout(0.2)
        try:
            extra = s.recv(100)
        except socket.timeout:
            extra = b""
        self.assertEqual(extra, b"", "more replies than requests")
        s.sendall(b"HELD\n")
        s.settimeout(2.0)
        self.assertEqual(s.recv(100), b"OK 0\r\n")
        st = self.stats(self.other)
        self.assertEqual(st["sessions"], "2")
        self.assertEqual(st["redis"], "up")
        return n, stalled, growth, worst[0], secs, rss

    def test_ping_flood_of_50000_lines_without_reading(self):
        n, stalled, growth, worst, secs, rss = self.flood_then_read(
            50000, stall_s=0.5, hold_s=0.5)
        self.assertEqual(n, 50000)
        report("50,000-line PING flood, client not reading: broker VmRSS "
               "%.1f MiB before, peak %.1f MiB (+%.0f KiB, %d samples); "
               "other client's PING worst %.1f ms%s"
               % (rss.base / MiB, rss.peak / MiB, growth / 1024.0,
                  rss.samples, worst, " [ASan]" if ASAN else ""))
        self.assertLess(growth, 16 * MiB * MEM_SCALE)
        self.assertLess(worst, SERVED_MS)

    def test_flood_past_socket_buffers_stops_reading(self):
        # 50,000 PINGs (450 KB of replies) fit in the kernel's socket
        # buffers, so they never reach the broker's 64 KiB output bound.
        # 4,000,000 (20 MB sent, 36 MB of replies) do: the broker must stop
        # reading, so the client's sends stall.  Without that bound the
        # broker would read it all and buffer the replies in memory.
        n, stalled, growth, worst, secs, rss = self.flood_then_read(
            4000000, stall_s=0.3, hold_s=0.2)
        report("PING flood until the broker stopped reading: %d lines "
               "(%.1f MB) sent in %.1f s before it stalled; broker VmRSS "
               "%.1f MiB before, peak %.1f MiB (+%.0f KiB); other client's "
               "PING worst %.1f ms%s"
               % (n, n * 5 / 1e6, secs, rss.base / MiB, rss.peak / MiB,
                  growth / 1024.0, worst, " [ASan]" if ASAN else ""))
        self.assertTrue(stalled, "the broker read all %d lines of a client "
                        "that does not read" % n)
        self.assertLess(growth, 16 * MiB * MEM_SCALE)
        self.assertLess(worst, SERVED_MS)


# ------------------------------------------------------ stalled lines --

class TestPartialLines(ResourceCase):
    N = 500

    def test_500_connections_stalled_mid_line(self):
        b = self.start_broker()
        other = self.connect(b)
        base_sessions = int(self.stats(other)["sessions"])
        rss = RssSampler(b.pid)
        stalled = []
        for i in range(self.N):
            c = b.client()
            stalled.append(c)
            self.addCleanup(c.close)
            c.sendraw("ACQUIRE k")
        wait_until(lambda: int(self.stats(other)["sessions"]) ==
                   base_sessions + self.N, 5.0,
                   what="sessions=%d" % (base_sessions + self.N))
        worst = 0.0
        for _ in range(10):
            r, ms = other.timed_req("PING")
            self.assertEqual(r, "OK PONG")
            worst = max(worst, ms)
            time.sleep(0.03)
        growth = rss.stop()
        report("%d connections stalled mid-line: broker VmRSS %.1f MiB "
               "before, peak %.1f MiB (+%.0f KiB, %.0f B each); other "
               "client's PING worst %.1f ms%s"
               % (self.N, rss.base / MiB, rss.peak / MiB, growth / 1024.0,
                  growth / float(self.N), worst, " [ASan]" if ASAN else ""))
        self.assertLess(growth, 8 * MiB * MEM_SCALE)
        self.assertLess(worst, SERVED_MS)
        # None was answered; the first one's line is whole once its LF
        # comes, and the second one then finds the key taken.
        self.assertTrue(stalled[-1].no_reply(0.05))
        stalled[0].sendraw(" WAIT 0\n")
        self.assertToken(stalled[0].readline())
        self.assertEqual(stalled[1].req(""), "BUSY")
        for c in stalled:
            c.close()
        wait_until(lambda: int(self.stats(other)["sessions"]) ==
                   base_sessions, 5.0,
                   what="sessions back to %d" % base_sessions)
        self.assertEqual(other.req("OWNER k"), "OK -")


if __name__ == "__main__":
    unittest.main()
