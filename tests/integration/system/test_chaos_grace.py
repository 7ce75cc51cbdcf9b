"""
test_chaos_grace.py - grace sessions under faults: clients whose
connections break RESUME elsewhere and carry on with the locks the reply
lists, against a fenced resource (protocol 1.1, issue 12).

Set-up
  * the store: one redis-server (no persistence: Redis is not faulted);
  * three lockbrokerd on it, one prefix, --redis_timeout_ms 500;
  * the resource: a separate redis-server, test_chaos's Resource (per key
    the highest token accepted; a write with a lower token is rejected
    and logged);
  * ten client threads, each one grace session (HELLO name GRACE 3000,
    EVENTS ON) looping on a random one of four keys:
        ACQUIRE <key> WAIT 300 TTL 1500 -> OK <token>: write, hold
        5-20 ms (reading EVENT lines), write again, RELEASE.
    When its connection breaks (EOF, reset, no reply in time) a client
    stops using the resource, connects to a random live broker and sends
    RESUME <client-id> <secret> (again on ERR UNAVAILABLE or a refused
    connect, for up to 2.5 s).  A key it believed it held (granted, no
    RELEASE sent yet, not told LOST) that OK lists is the SAME hold
    going on: OWNER must show the client-id and the old token, the client
    writes with that token again and releases as usual.  One the reply
    leaves out is "lost on resume": the hold ended at the break.  A key
    listed that the client did not believe it held may only be the one of
    an ACQUIRE or RELEASE in flight at the break: it is released.
  * the faults, one at a time in shuffled rounds, each followed by a
    settle period (every broker ready, no client still resuming):
      reset_client    three clients (holders first) close with SO_LINGER 0
                      wherever they are, then resume;
      sigterm_broker  SIGTERM the broker with the most holders (it must
                      exit 0, leaving its grace sessions' locks in Redis),
                      start it again on the same port 0.1-0.4 s later;
      kill9_broker    the same with kill -9;
      pause_broker    SIGSTOP a broker for 0.5 s (a third of the TTL, so
                      no lock may be lost), SIGCONT.

What is asserted (each says what would make it fail)
  Times are time.monotonic() in this process.  A hold starts (s) AFTER
  its OK was read and ends (e) BEFORE its RELEASE is sent, or at the
  break for a hold lost on resume; between a break and the RESUME's OK
  nothing is written.  So both errors go the safe way, as in test_chaos.
  1. Exclusion and fencing.  For holds X, Y of one key with token(X) <
     token(Y) and s(Y) < e(X): X must have been told LOST (ERR LOST,
     EVENT LOST) or lost on resume; a hold that went on through a RESUME
     is one hold, so a key handed to another client while its holder was
     detached fails here.  A write the resource rejected must come from
     such a hold too (else a newer token was accepted while its holder
     still believed it held the key).  A token never belongs to two
     holds, nor is accepted from two clients.  Fails if a RESUME lists a
     key someone else took meanwhile, or a detached session's lock
     expires/is freed while the session is still resumable.
  2. No lock lost.  After a reset_client or sigterm_broker fault (any
     break but kill -9), every RESUME lists every key its client believed
     it held, with the same token (OWNER).  Only kill9_broker may lose one
     (the lock's TTL may run out before the RESUME); LOST told to a
     client is allowed only in a kill -9 window too.  Fails if SIGTERM
     frees grace locks, or a detach/resume drops one.
  3. RESUME never answers ERR NOSESSION (nor NOAUTH) while the grace
     (3 s since the break) runs; a broker never closes a connection by
     itself (a break with no fault behind it fails).  Fails if the record
     is ended/expired too early or a SIGTERM ends sessions.
  4. Brokers: exit 0 on SIGTERM, no sanitizer report in any log
     (harness check_log), still running at the end, and no "ERROR" (or
     log level "error") line in any log.  Afterwards every key is free
     for a fresh client on every broker, with a token above all seen.
A one-line summary goes to stderr.  CHAOS_SEED=<n> replays the random
choices.  Wall time about 15 s (the fault phase is 12 s).

TestResumeOntoStaleHold is a defect the chaos test found, made
deterministic (under a second); it fails today.
"""

import collections
import os
import random
import re
import select
import socket
import struct
import sys
import threading
import time
import traceback
import unittest

import harness
from harness import UUID_RE, Client, wait_until
from test_chaos import SANITIZED, Resource
from test_grace import GRACE_HELLO_RE



N_BROKERS = 3
N_CLIENTS = 10
KEYS = ["cg-a", "cg-b", "cg-c", "cg-d"]
GRACE_MS = 3000
TTL_MS = 1500
WAIT_MS = 300
PAUSE_S = 0.5                   # SIGSTOP: a third of the TTL
CHAOS_S = 12.0                  # faults are injected this long
QUIET_S = 1.0                   # then the clients run on without faults
REPLY_TIMEOUT_S = 8.0 if SANITIZED else 5.0
RESUME_RETRY_S = 2.5            # a client keeps trying to RESUME this long
SETTLE_GRACE_S = 1.0            # a fault's window ends this long after it
FAULTS = ("reset_client", "sigterm_broker", "kill9_broker", "pause_broker")


class Broken(Exception):
    """The connection is gone (or the client gave up on it)."""

    def __init__(self, why):
        super().__init__(why)
        self.why = why


class GraceBroker(harness.Broker):
    """A broker the injector stops or kills and starts again on its port.
    generation and last_fault are set BEFORE the signal, so a client that
    sees its connection end can tell why."""

    def __init__(self, *a, **kw):
        self.generation = 0
        self.down = False
        self.last_fault = None
        super().__init__(*a, **kw)

    def bounce(self, how, down_s):
        """how: 'sigterm' or 'kill9'.  Returns a problem text or None."""
        self.last_fault = how
        self.generation += 1
        self.down = True
        problem = None
        try:
            if how == "sigterm":
                rc = self.stop(check=False)
                self.check_log()
                if rc != 0:
                    problem = "broker :%d exited %s on SIGTERM" % (self.port,
                                                                   rc)
            else:
                self.kill(check=True)
        except AssertionError as e:
            problem = str(e)[-3000:]
        time.sleep(down_s)
        self._spawn()
        self.wait_ready(15.0)
        self.down = False
        return problem


class Hold:
    """One OK <token>, seen from its client; lives on through RESUMEs that
    list its key."""

    def __init__(self, hid, key, token, port, s):
        self.id = hid
        self.key = key
        self.token = token
        self.port = port
        self.s = s
        self.e = None
        self.stage = 0           # 0 granted, 1 written once, 2 RELEASE sent
        self.told = None         # "ERR LOST" / "EVENT LOST"
        self.told_at = None
        self.lost_on_resume = False
        self.resumes = 0         # RESUMEs it went on through
        self.writes = []         # (wid, accepted)
        self.outcome = None

    def excused(self):
        return bool(self.told or self.lost_on_resume)

    def describe(self, t0):
        return ("hold %s key=%s token=%d s=%.3f e=%s outcome=%s told=%s "
                "lost_on_resume=%s resumes=%d writes=%s"
                % (self.id, self.key, self.token, self.s - t0,
                   "%.3f" % (self.e - t0) if self.e is not None else "-",
                   self.outcome, self.told, self.lost_on_resume,
                   self.resumes, self.writes))


class World:
    def __init__(self, seed):
        self.seed = seed
        self.t0 = time.monotonic()
        self.mu = threading.Lock()
        self.stop = threading.Event()
        self.brokers = []
        self.clients = []
        self.holds = []
        self.violations = []
        self.counts = collections.Counter()
        self.faults = collections.Counter()
        self.fault_log = []
        self.windows = []        # (kind, start, end)
        self.current = None      # the fault in progress: (kind, start)
        self.stop_by = None      # clients give up releasing after this

    def now(self):
        return time.monotonic() - self.t0

    def count(self, name, n=1):
        with self.mu:
            self.counts[name] += n

    def broker_at(self, port):
        for b in self.brokers:
            if b.port == port:
                return b
        return None

    def live_ports(self):
        return [b.port for b in self.brokers if not b.down]

    def violation(self, what, client=None):
        text = "[t=%.3f] %s" % (self.now(), what)
        if client is not None and len(self.violations) < 8:
            text += "\n" + client.transcript()
        with self.mu:
            self.violations.append(text)

    def in_window(self, t, kinds):
        cur = self.current
        if cur is not None and cur[0] in kinds and t >= cur[1]:
            return True
        return any(k in kinds and a <= t <= b for k, a, b in self.windows)


# --------------------------------------------------------------- client --

class Conn:
    """One connection of a client; EVENT lines are handled on the way."""

    def __init__(self, client, port):
        self.client = client
        self.world = client.world
        self.port = port
        b = self.world.broker_at(port)
        self.generation = b.generation
        self.sock = socket.create_connection(("127.0.0.1", port),
                                             timeout=1.0)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.closed = False

    def log(self, d, text):
        self.client.lines.append((time.monotonic(), self.port, d, text))

    def close(self, rst=False):
        if self.closed:
            return
        self.closed = True
        if rst:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                     struct.pack("ii", 1, 0))
            except OSError:
                pass
        try:
            self.sock.close()
        except OSError:
            pass

    def _fill(self, timeout):
        if self.client.reset_flag:
            # The fault: close with an RST, wherever the client is.
            self.client.reset_flag = False
            self.log("!", "reset by the test (RST)")
            self.close(rst=True)
            raise Broken("reset")
        try:
            ready = select.select([self.sock], [], [], max(0.0, timeout))[0]
            if not ready:
                return
            data = self.sock.recv(65536)
        except OSError as e:
            self.log("!", "recv: %s" % e)
            self.close()
            raise Broken("io")
        if not data:
            self.log("!", "EOF")
            self.close()
            raise Broken("eof")
        self.buf += data

    def _pop_line(self):
        while b"\n" in self.buf:
            raw, self.buf = self.buf.split(b"\n", 1)
            text = raw.decode("latin-1").rstrip("\r")
            self.log("<", text)
            if text.startswith("EVENT "):
                self._event(text)
                continue
            return text
        return None

    def _event(self, text):
        m = re.fullmatch(r"EVENT LOST (\S+) ([0-9]+)", text)
        h = self.client.hold
        if not m or h is None or h.key != m.group(1) or \
                h.token != int(m.group(2)):
            self.world.violation("%r names no lock this client holds (%s)"
                                 % (text, h and "%s %d" % (h.key, h.token)),
                                 self.client)
            return
        self.world.count("event_lost")
        if h.told is None:
            h.told, h.told_at = "EVENT LOST", time.monotonic()

    def pump(self, duration):
        """Read EVENT lines for duration seconds (0: what is there)."""
        deadline = time.monotonic() + duration
        while True:
            line = self._pop_line()
            if line is not None:
                self.world.violation("reply %r with no request outstanding"
                                     % line, self.client)
                continue
            left = deadline - time.monotonic()
            self._fill(min(max(left, 0.0), 0.02))
            if left <= 0:
                line = self._pop_line()
                if line is not None:
                    self.world.violation("reply %r with no request "
                                         "outstanding" % line, self.client)
                return

    def request(self, line):
        self.pump(0)
        self.log(">", line)
        try:
            self.sock.sendall(line.encode() + b"\n")
        except OSError as e:
            self.log("!", "send: %s" % e)
            self.close()
            raise Broken("io")
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        while True:
            r = self._pop_line()
            if r is not None:
                return r
            left = deadline - time.monotonic()
            if left <= 0:
                self.world.violation("no reply to %r within %.0f s"
                                     % (line, REPLY_TIMEOUT_S), self.client)
                self.close()
                raise Broken("timeout")
            self._fill(min(left, 0.02))


class GraceClient(threading.Thread):
    def __init__(self, world, idx, resource_port, seed):
        super().__init__(name="g%02d" % idx, daemon=True)
        self.world = world
        self.rng = random.Random(seed)
        self.resource_port = resource_port
        self.reset_flag = False
        self.phase = "starting"   # idle acquiring holding releasing
        #                           recovering done
        self.conn = None
        self.cid = self.secret = None
        self.hold = None          # the hold in progress
        self.inflight = None      # ("ACQUIRE"|"RELEASE", key) unanswered
        self.lines = []
        self.nhold = 0

    def transcript(self, tail=30):
        out = ["  client %s client-id %s, last lines:" % (self.name,
                                                          self.cid)]
        for t, port, d, text in self.lines[-tail:]:
            out.append("    %8.3f :%d %s %s" % (t - self.world.t0, port, d,
                                                 text))
        for b in self.world.brokers if self.cid else ():
            logl = [ln for ln in b.log().splitlines() if self.cid in ln]
            if logl:
                out.append("    broker :%d log lines for it:" % b.port)
                out.extend("      " + ln for ln in logl[-10:])
        return "\n".join(out)

    def bad(self, what, r):
        self.world.violation("unexpected reply %r to %s" % (r, what), self)
        self.conn.close()
        raise Broken("bad reply")

    # -- the loop --

    def run(self):
        w = self.world
        try:
            self.res = Resource(self.resource_port)
            self.fresh_session(time.monotonic() + 10.0)
            while not w.stop.is_set() or self.hold is not None:
                if w.stop.is_set() and time.monotonic() > w.stop_by:
                    # Bounded: a hold that cannot be released in 5 s.
                    w.violation("hold %s not released 5 s after the stop"
                                % self.hold.id, self)
                    self.hold.e = self.hold.e or time.monotonic()
                    break
                try:
                    if self.hold is None:
                        self.acquire()
                    if self.hold is not None:
                        self.use_and_release()
                except Broken as e:
                    why = e.why
                    while True:     # a RESUME's connection may break too
                        try:
                            self.recover(why)
                            break
                        except Broken as e2:
                            why = e2.why
            try:
                if self.conn.request("QUIT") != "OK":
                    w.violation("QUIT not answered OK", self)
            except Broken:
                pass
        except Exception:
            w.violation("client %s crashed:\n%s"
                        % (self.name, traceback.format_exc()), self)
        finally:
            if self.conn is not None:
                self.conn.close()
            self.phase = "done"

    def connect_any(self):
        ports = self.world.live_ports()
        self.rng.shuffle(ports)
        for port in ports:
            try:
                return Conn(self, port)
            except OSError:
                continue
        return None

    def fresh_session(self, deadline):
        """HELLO name GRACE on a live broker (a new client-id)."""
        while True:
            conn = self.connect_any()
            if conn is not None:
                try:
                    r = conn.request("HELLO %s GRACE %d" % (self.name,
                                                            GRACE_MS))
                    m = re.fullmatch(GRACE_HELLO_RE, r)
                    if m and conn.request("EVENTS ON") == "OK":
                        self.conn = conn
                        self.cid, self.secret = m.group(1), m.group(2)
                        self.world.count("sessions")
                        self.phase = "idle"
                        return
                    self.world.violation("HELLO GRACE answered %r" % r, self)
                except Broken:
                    pass
                conn.close()
            if time.monotonic() > deadline:
                raise AssertionError("no session could be started")
            time.sleep(0.05)

    def write(self, h):
        wid = "%s.%d" % (h.id, len(h.writes) + 1)
        ok = self.res.write(h.key, h.token, wid)
        h.writes.append((wid, ok))
        self.world.count("writes_accepted" if ok else "writes_rejected")

    def acquire(self):
        key = self.rng.choice(KEYS)
        line = "ACQUIRE %s WAIT %d TTL %d" % (key, WAIT_MS, TTL_MS)
        self.phase = "acquiring"
        self.inflight = ("ACQUIRE", key)
        r = self.conn.request(line)
        self.inflight = None
        self.phase = "idle"
        if r == "BUSY":
            self.world.count("busy")
            return
        if r.startswith("ERR UNAVAILABLE"):
            self.world.count("acquire_unavailable")
            time.sleep(0.05)
            return
        m = re.fullmatch(r"OK ([0-9]+)", r)
        if not m:
            self.bad(line, r)
        self.nhold += 1
        h = Hold("%s/%d" % (self.name, self.nhold), key, int(m.group(1)),
                 self.conn.port, time.monotonic())
        with self.world.mu:
            self.world.holds.append(h)
        self.hold = h
        self.phase = "holding"

    def use_and_release(self):
        h = self.hold
        if h.stage == 0:
            self.write(h)
            h.stage = 1
            self.conn.pump(self.rng.uniform(0.005, 0.020))
        if h.stage == 1:
            self.conn.pump(0)
            if h.told is None:
                self.write(h)
            h.e = time.monotonic()
            h.stage = 2
        self.phase = "releasing"
        first = time.monotonic()
        while True:
            self.inflight = ("RELEASE", h.key)
            r = self.conn.request("RELEASE %s" % h.key)
            self.inflight = None
            if r == "OK 0":
                h.outcome = h.outcome or "released"
                break
            if r.startswith("ERR LOST "):
                self.world.count("err_lost")
                if h.told is None:
                    h.told, h.told_at = "ERR LOST", time.monotonic()
                h.outcome = "lost"
                break
            if r.startswith("ERR UNAVAILABLE") and \
                    time.monotonic() - first < 5.0:
                self.world.count("release_unavailable")
                time.sleep(0.05)
                continue
            self.bad("RELEASE %s (hold %s)" % (h.key, h.id), r)
        self.hold = None
        self.phase = "idle"

    # -- a broken connection --

    def cause_of(self, why, conn):
        """Why the connection ended: our reset, a fault of its broker, a
        timeout we gave up on, or nothing (a violation)."""
        if why in ("reset", "timeout", "bad reply"):
            return why
        b = self.world.broker_at(conn.port)
        if b.generation != conn.generation or b.down:
            return b.last_fault
        return "unexplained"

    def recover(self, why):
        w = self.world
        t_break = time.monotonic()
        old = self.conn
        old.close()
        self.phase = "recovering"
        cause = self.cause_of(why, old)
        if cause == "unexplained":
            # Assertion 3: fails if a broker closes a live session's
            # connection with no fault behind it.
            w.violation("connection to :%d ended (%s) with no fault behind "
                        "it" % (old.port, why), self)
        h = self.hold
        believed = h if (h is not None and h.stage < 2 and
                         h.told is None) else None
        inflight = self.inflight
        self.inflight = None
        w.count("breaks")
        while True:
            conn = self.connect_any()
            r = None
            if conn is not None:
                try:
                    r = conn.request("RESUME %s %s" % (self.cid, self.secret))
                except Broken:
                    r = None
            elapsed = time.monotonic() - t_break
            if r is not None and r.startswith("OK"):
                break
            if r is not None and r.startswith("ERR UNAVAILABLE"):
                w.count("resume_unavailable")
            elif r is not None:
                conn.close()
                # Assertion 3: fails if RESUME within the grace answers
                # NOSESSION (record ended or expired early) or NOAUTH.
                if not (r.startswith("ERR NOSESSION") and
                        elapsed * 1000 >= GRACE_MS):
                    w.violation("RESUME %.0f ms after the break (%s) "
                                "answered %r" % (elapsed * 1e3, cause, r),
                                self)
                self.lose(believed, t_break, cause, "RESUME %r" % r)
                self.fresh_session(time.monotonic() + 10.0)
                return
            if conn is not None:
                conn.close()
            if elapsed > RESUME_RETRY_S:
                w.violation("no RESUME answered OK within %.1f s of the "
                            "break (%s); last answer %r"
                            % (RESUME_RETRY_S, cause, r), self)
                self.lose(believed, t_break, cause, "no RESUME")
                self.fresh_session(time.monotonic() + 10.0)
                return
            time.sleep(0.03)
        self.conn = conn
        w.count("resumes")
        w.count("resumes_" + cause)
        m = re.fullmatch(r"OK ([0-9]+)((?: \S+)*)", r)
        listed = m.group(2).split() if m else None
        if listed is None or int(m.group(1)) != len(listed):
            self.bad("RESUME", r)
        if conn.request("EVENTS ON") != "OK":
            self.bad("EVENTS ON", "?")
        for key in listed:
            if believed is not None and key == believed.key:
                continue
            if h is not None and key == h.key:
                continue        # its RELEASE was in flight: sent again
            if inflight is not None and key == inflight[1]:
                # A grant answered after the break (or a RELEASE that did
                # not happen): not the client's hold; give it back.
                w.count("resume_listed_inflight")
                self.inflight = ("RELEASE", key)
                rr = conn.request("RELEASE %s" % key)
                self.inflight = None
                if rr != "OK 0":
                    self.bad("RELEASE %s of a grant in flight" % key, rr)
                continue
            # Assertion 1/2: fails if RESUME hands out a key the session
            # never held (or held and released).
            w.violation("RESUME listed %s, which the client did not hold "
                        "(in flight: %s): %r" % (key, inflight, r), self)
        if believed is not None:
            if believed.key in listed:
                own = conn.request("OWNER %s" % believed.key)
                m = re.fullmatch(r"OK (%s) [0-9]+ ([0-9]+)" % UUID_RE, own)
                if not m or m.group(1) != self.cid or \
                        int(m.group(2)) != believed.token:
                    # Assertion 2: same client-id, same token.
                    w.violation("after RESUME listed %s (hold %s token %d),"
                                " OWNER answered %r" % (
                                    believed.key, believed.id,
                                    believed.token, own), self)
                believed.resumes += 1
                w.count("holds_resumed")
                if believed.stage >= 1:
                    # The same hold goes on: write again with its token.
                    self.write(believed)
            else:
                self.lose(believed, t_break, cause, "RESUME %r" % r)
        elif h is not None and h.key not in listed:
            # Its RELEASE was sent before the break and did happen, or it
            # was told LOST before the break.
            if h.e is None:
                h.e = t_break
            h.outcome = h.outcome or ("released" if h.stage == 2 else
                                      "lost")
            self.hold = None
        self.phase = "holding" if self.hold is not None else "idle"

    def lose(self, h, t_break, cause, how):
        """A hold the client believed in that came not back."""
        if h is None:
            if self.hold is not None:
                if self.hold.e is None:
                    self.hold.e = t_break
                self.hold.outcome = self.hold.outcome or "session_gone"
            self.hold = None
            return
        h.lost_on_resume = True
        h.e = t_break
        h.outcome = "lost_on_resume"
        self.world.count("lost_on_resume")
        self.hold = None
        if cause != "kill9":
            # Assertion 2: fails if a reset or SIGTERM (or a pause) loses
            # a lock: every believed key must come back.
            self.world.violation("hold %s (%s token %d) lost on resume "
                                 "after a break by %s: %s"
                                 % (h.id, h.key, h.token, cause, how), self)


# ----------------------------------------------------------------- test --

class TestChaosGrace(unittest.TestCase):
    def setUp(self):
        seed = int(os.environ.get("CHAOS_SEED") or
                   random.SystemRandom().randrange(1, 10 ** 9))
        self.rng = random.Random(seed)
        self.world = World(seed)
        self.store = harness.Redis()
        self.addCleanup(self.store.close)
        self.resource = harness.Redis()
        self.addCleanup(self.resource.close)
        self.prefix = "cg%d" % seed
        for _ in range(N_BROKERS):
            b = GraceBroker(self.store.addr, self.prefix,
                            "--redis_timeout_ms", "500", ready_timeout=15.0)
            self.addCleanup(b.close)
            self.world.brokers.append(b)
        self.addCleanup(self.stop_clients)

    def stop_clients(self):
        w = self.world
        if not w.stop.is_set():
            w.stop_by = time.monotonic() + 5.0
            w.stop.set()
        for b in w.brokers:
            b.resume()
        deadline = time.monotonic() + 5.0 + 2 * REPLY_TIMEOUT_S
        for c in w.clients:
            c.join(timeout=max(0.1, deadline - time.monotonic()))

    # -- faults --

    def holders(self, port=None):
        return [c for c in self.world.clients if c.phase == "holding" and
                (port is None or (c.conn is not None and c.conn.port == port))]

    def wait_holders(self, pred, within=0.4):
        """Fire while clients hold: wait a moment for pred() to be true."""
        end = time.monotonic() + within
        while not pred() and time.monotonic() < end:
            time.sleep(0.005)

    def busiest_broker(self):
        self.wait_holders(lambda: self.holders())
        return max(self.world.brokers,
                   key=lambda b: (len(self.holders(b.port)),
                                  self.rng.random()))

    def fault(self, kind):
        w = self.world
        rng = self.rng
        t = time.monotonic()
        w.current = (kind, t)
        if kind == "reset_client":
            self.wait_holders(lambda: len(self.holders()) >= 2)
            hs = self.holders()
            rng.shuffle(hs)
            victims = hs[:2]
            rest = [c for c in w.clients if c not in victims]
            victims += rng.sample(rest, 3 - len(victims))
            for c in victims:
                c.reset_flag = True
            try:
                wait_until(lambda: not any(c.reset_flag for c in victims),
                           5.0, what="reset clients to notice")
            except AssertionError as e:
                w.violation(str(e))
            what = "reset %s" % ",".join(c.name for c in victims)
        elif kind in ("sigterm_broker", "kill9_broker"):
            b = self.busiest_broker()
            n = len(self.holders(b.port))
            down = rng.uniform(0.1, 0.4)
            how = "sigterm" if kind == "sigterm_broker" else "kill9"
            problem = b.bounce(how, down)
            if problem:
                # Assertion 4: fails if SIGTERM exits non-zero or a
                # sanitizer report is in the log.
                w.violation("%s of broker :%d: %s" % (how, b.port, problem))
            what = "%s broker :%d (%d holders on it), restarted after " \
                   "%.2f s" % (how, b.port, n, down)
        else:
            b = self.busiest_broker()
            n = len(self.holders(b.port))
            b.pause()
            try:
                time.sleep(PAUSE_S)
            finally:
                b.resume()
            what = "SIGSTOP broker :%d (%d holders on it) for %.1f s" % (
                b.port, n, PAUSE_S)
        self.settle()
        end = time.monotonic()
        w.windows.append((kind, t, end + SETTLE_GRACE_S))
        w.current = None
        w.faults[kind] += 1
        w.fault_log.append("%7.3f-%7.3f %s" % (t - w.t0, end - w.t0, what))

    def settle(self):
        w = self.world
        for b in w.brokers:
            if not b.alive():
                w.violation("broker :%d is not running:\n%s"
                            % (b.port, b.log()[-3000:]))
        try:
            wait_until(lambda: not any(c.phase in ("recovering", "starting")
                                       or c.reset_flag for c in w.clients),
                       RESUME_RETRY_S + 2 * REPLY_TIMEOUT_S, interval=0.02,
                       what="clients to resume")
        except AssertionError as e:
            w.violation("%s: %s" % (e, [c.name for c in w.clients if
                                        c.phase == "recovering"]))

    # -- the test --

    def test_chaos_grace(self):
        w = self.world
        for i in range(N_CLIENTS):
            c = GraceClient(w, i, self.resource.port, self.rng.random())
            w.clients.append(c)
        for c in w.clients:
            c.start()
        self.settle()
        end = time.monotonic() + CHAOS_S
        order = []
        while time.monotonic() < end and len(w.violations) < 20:
            time.sleep(self.rng.uniform(0.4, 0.9))
            if not order:
                order = list(FAULTS)
                self.rng.shuffle(order)
            self.fault(order.pop())
        time.sleep(QUIET_S)
        self.stop_clients()
        hung = [c for c in w.clients if c.is_alive()]
        for c in hung:
            w.violation("client %s still running after stop" % c.name, c)
        for c in w.clients:
            if hasattr(c, "res"):
                c.res.close()

        self.check_after()
        self.check_holds()
        self.check_resource()
        self.check_brokers()
        self.summary()
        self.assertGreaterEqual(w.counts["resumes"], 1, "no RESUME at all")
        if w.violations:
            self.fail("%d violation(s) (seed %d); the first ones:\n\n%s\n\n"
                      "faults:\n  %s"
                      % (len(w.violations), w.seed,
                         "\n\n".join(w.violations[:6]),
                         "\n  ".join(w.fault_log)))

    # -- checks --

    def check_after(self):
        """Every key free for a fresh client on every broker (the clients
        all QUIT), with a token above all handed out."""
        w = self.world
        top = collections.defaultdict(int)
        for h in w.holds:
            top[h.key] = max(top[h.key], h.token)
        for b in w.brokers:
            try:
                c = Client(b.port, timeout=REPLY_TIMEOUT_S)
            except OSError as e:
                w.violation("after the run, :%d: %s" % (b.port, e))
                continue
            try:
                for key in KEYS:
                    line = "ACQUIRE %s WAIT 2000" % key
                    r = c.req(line)
                    m = re.fullmatch(r"OK ([0-9]+)", r)
                    if not m or int(m.group(1)) <= top[key]:
                        w.violation("after the run, %s on :%d answered %r "
                                    "(tokens up to %d seen)"
                                    % (line, b.port, r, top[key]))
                        continue
                    top[key] = int(m.group(1))
                    if c.req("RELEASE %s" % key) != "OK 0":
                        w.violation("after the run, RELEASE %s failed" % key)
            except (OSError, EOFError, AssertionError) as e:
                w.violation("after the run, on :%d: %s" % (b.port, e))
            finally:
                c.close()

    def check_holds(self):
        w = self.world
        t0 = w.t0
        owner = {}
        for h in w.holds:
            if h.e is None:
                w.violation("hold never ended: " + h.describe(t0))
                h.e = time.monotonic()
            # A token is one hold's (tokens come from one INCR).
            if owner.setdefault((h.key, h.token), h.id) != h.id:
                w.violation("token %d of %s handed out twice: holds %s, %s"
                            % (h.token, h.key, owner[(h.key, h.token)],
                               h.id))
            if h.told:
                w.count("told_lost")
                # Assertion 2: fails if a lock is lost (LOST told) where
                # no broker was killed.
                if not w.in_window(h.told_at, ("kill9_broker",)):
                    w.violation("%s with no kill -9 around: %s"
                                % (h.told, h.describe(t0)))
            for wid, ok in h.writes:
                if not ok and not h.excused():
                    # Assertion 1 (fencing): fails if a newer token was
                    # accepted while this holder still held the key.
                    w.violation("a write of a hold never told LOST nor "
                                "lost on resume was rejected as stale: "
                                + h.describe(t0))
        # Assertion 1 (exclusion), as in test_chaos.check_holds: for
        # token(X) < token(Y), s(Y) < e(X) needs X told LOST or lost on
        # resume; a hold that went on through a RESUME is one hold.
        bykey = collections.defaultdict(list)
        for h in w.holds:
            bykey[h.key].append(h)
        for key, hs in bykey.items():
            hs.sort(key=lambda h: h.token)
            first_later = None    # least s among the larger tokens
            for x in reversed(hs):
                y = first_later
                if y is not None and y.s < x.e:
                    w.count("superseded")
                    if not x.excused():
                        w.violation("exclusion: hold %s of %s granted while "
                                    "hold %s still held it (never told "
                                    "LOST, not lost on resume)\n  %s\n  %s"
                                    % (y.id, key, x.id, x.describe(t0),
                                       y.describe(t0)))
                if first_later is None or x.s < first_later.s:
                    first_later = x

    def check_resource(self):
        """The resource's log agrees with the clients, and a token was
        accepted from one client only."""
        w = self.world
        seen = {}
        for h in w.holds:
            for wid, ok in h.writes:
                seen[wid] = ok
        logged = 0
        for key in KEYS:
            writer = {}
            for entry in self.resource.cli("LRANGE", "res:log:" + key, 0, -1):
                wid, tok, ok = entry.split(" ")
                logged += 1
                if seen.get(wid) != (ok == "1"):
                    w.violation("resource logged %r, the client saw %r"
                                % (entry, seen.get(wid)))
                if ok == "1":
                    who = wid.split("/")[0]
                    if writer.setdefault(tok, who) != who:
                        w.violation("token %s of %s accepted from %s and %s"
                                    % (tok, key, writer[tok], who))
        if logged != len(seen):
            w.violation("resource logged %d writes, clients made %d"
                        % (logged, len(seen)))

    def check_brokers(self):
        """Assertion 4: every broker still up, exits 0 on SIGTERM, no
        sanitizer report and no ERROR line in its log (all its runs)."""
        w = self.world
        for b in w.brokers:
            if not b.alive():
                w.violation("broker :%d died:\n%s" % (b.port,
                                                      b.log()[-3000:]))
            try:
                rc = b.stop(check=False)
                b.checked = True
                b.check_log()
                if rc != 0:
                    w.violation("broker :%d exited %s on SIGTERM at the end"
                                % (b.port, rc))
            except AssertionError as e:
                w.violation("broker :%d: %s" % (b.port, str(e)[-3000:]))
            bad = [ln for ln in b.log().splitlines()
                   if "ERROR" in ln or re.match(r"\S+ \S+ error ", ln)]
            if bad:
                w.violation("broker :%d logged errors:\n  %s"
                            % (b.port, "\n  ".join(bad[:10])))

    def summary(self):
        w = self.world
        c = w.counts
        line = ("chaos_grace: seed=%d %.1fs%s brokers=%d clients=%d keys=%d "
                "faults=%d (%s) sessions=%d breaks=%d resumes=%d (reset=%d "
                "sigterm=%d kill9=%d timeout=%d) resume_unavailable=%d "
                "holds=%d holds_resumed=%d lost_on_resume=%d "
                "resume_listed_inflight=%d told_lost=%d writes_accepted=%d "
                "writes_rejected=%d superseded=%d busy=%d "
                "unavailable(acquire=%d release=%d) violations=%d"
                % (w.seed, w.now(), " (sanitized)" if SANITIZED else "",
                   N_BROKERS, N_CLIENTS, len(KEYS),
                   sum(w.faults.values()),
                   " ".join("%s=%d" % (f, w.faults[f]) for f in FAULTS),
                   c["sessions"], c["breaks"], c["resumes"],
                   c["resumes_reset"], c["resumes_sigterm"],
                   c["resumes_kill9"], c["resumes_timeout"],
                   c["resume_unavailable"], len(w.holds), c["holds_resumed"],
                   c["lost_on_resume"], c["resume_listed_inflight"],
                   c["told_lost"], c["writes_accepted"],
                   c["writes_rejected"], c["superseded"], c["busy"],
                   c["acquire_unavailable"], c["release_unavailable"],
                   len(w.violations)))
        sys.stderr.write("\n" + line + "\n")
        if os.environ.get("CHAOS_VERBOSE"):
            sys.stderr.write("faults:\n  " + "\n  ".join(w.fault_log) + "\n")
        sys.stderr.flush()


class TestResumeOntoStaleHold(unittest.TestCase):
    def test_resume_lists_a_key_a_resumed_away_session_held_here(self):
        # Found by test_chaos_grace (assertion 2: "lost on resume after a
        # break by reset: RESUME 'OK 0'", about 1 run in 10).  S holds k
        # on b2, its connection resets, it is resumed on b1, and its
        # RELEASE there hands k straight to A waiting on b1 (a hand-over:
        # no PUBLISH, so b2 keeps S's stale hold until its next renewal,
        # TTL/3 later).  A's connection resets and A resumes on b2 at
        # once: RESUME must list k with A's token.
        # FAILS today: b2 answers "OK 0" (its log: "'k' is held by another
        # session here; not resumed") although Redis already holds k for
        # A's new generation: A lost k, and nobody can take k until its
        # TTL runs out.
        redis = harness.Redis()
        self.addCleanup(redis.close)
        prefix = "cgs%d" % random.randrange(10 ** 9)
        b1 = harness.Broker(redis.addr, prefix)
        self.addCleanup(b1.close)
        b2 = harness.Broker(redis.addr, prefix)
        self.addCleanup(b2.close)

        def conn(b):
            c = b.client()
            self.addCleanup(c.close)
            return c

        def grace_hello(c):
            r = c.req("HELLO GRACE %d" % GRACE_MS)
            m = re.fullmatch(GRACE_HELLO_RE, r)
            self.assertIsNotNone(m, r)
            return m.group(1), m.group(2)

        s = conn(b2)
        scid, ssecret = grace_hello(s)
        self.assertRegex(s.req("ACQUIRE k TTL %d" % TTL_MS), r"\AOK [0-9]+\Z")
        s.reset()
        time.sleep(0.05)            # b2 sees S's connection end
        s2 = conn(b1)
        self.assertEqual(s2.req("RESUME %s %s" % (scid, ssecret)), "OK 1 k")
        a = conn(b1)
        acid, asecret = grace_hello(a)
        a.send("ACQUIRE k WAIT 2000 TTL %d" % TTL_MS)
        self.assertTrue(a.no_reply(0.05), "A did not wait")
        self.assertEqual(s2.req("RELEASE k"), "OK 0")
        m = re.fullmatch(r"OK ([0-9]+)", a.readline())
        self.assertIsNotNone(m, "A not granted k")
        a.reset()
        a2 = conn(b2)
        r = a2.req("RESUME %s %s" % (acid, asecret))
        own = conn(b1).req("OWNER k")
        self.assertEqual(r, "OK 1 k", "RESUME on b2 of A (which held k, "
                         "token %s) answered %r; OWNER k: %r; b2 log:\n%s"
                         % (m.group(1), r, own, "\n".join(
                             ln for ln in b2.log().splitlines()
                             if acid in ln or scid in ln)))
        self.assertRegex(own, r"\AOK %s [0-9]+ %s\Z" % (acid, m.group(1)))
        self.assertEqual(a2.req("RELEASE k"), "OK 0")


if __name__ == "__main__":
    unittest.main()
