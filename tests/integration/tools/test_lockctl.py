"""
test_lockctl.py - the lockctl client against a real broker: runs under a
lock serialize, exit statuses pass through, busy gives 75 (or -E), a lost
lock (broker killed, key deleted in Redis) stops CMD with 70, signals reach
CMD and the lock is released, --hold-at-least keeps the key taken after a
fast CMD, --limit N lets N runs in at once and --shared lets readers in
together while a run without it waits (protocol 1.1), elect runs CMD only
while leading and a second candidate takes over from a killed leader,
with its --value readable by others, watch prints a key's holders as they
change (protocol 1.2), owner/stats/ping, AUTH, unix socket, usage; the
admin view (1.2): locks prints every holder one per line over every page,
kill and free print the reply and exit 0 on OK, 70 on ERR (a session
that is no admin: ERR DENIED).

lockctl is $LOCKCTL (make integration sets it), else build/lockctl.  CMDs
are small Python scripts (WORKER below) that log what they see to a file,
so every check reads like a transcript of what happened.
"""

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import harness
from harness import UUID_RE, BrokerTestCase, wait_until

LOCKCTL = os.environ.get("LOCKCTL") or os.path.join(
    harness.REPO, "build", "lockctl")
RUN_TIMEOUT = 20.0        # no lockctl run in this file should come close

# The CMD most tests run: "worker.py LOG HOLD_S [ignore-term] [until=PATH]".
# It logs "start <monotonic> <token>" and "end <monotonic>", sleeps HOLD_S
# in between (with until=PATH: until PATH exists, HOLD_S at most), and on
# SIGTERM logs "term" and exits 7 (or ignores SIGTERM).
WORKER = r"""
import os, signal, sys, time
log, hold = sys.argv[1], float(sys.argv[2])
def note(s):
    with open(log, "a") as f:
        f.write(s + "\n")
def on_term(sig, frame):
    note("term")
    sys.exit(7)
signal.signal(signal.SIGTERM, signal.SIG_IGN if "ignore-term" in sys.argv
              else on_term)
note("start %.6f %s %s %d" % (time.monotonic(), os.environ["LOCKBROKER_KEY"],
                              os.environ["LOCKBROKER_TOKEN"], os.getpid()))
gate = [a[6:] for a in sys.argv[3:] if a.startswith("until=")]
if gate:
    deadline = time.monotonic() + hold
    while not os.path.exists(gate[0]) and time.monotonic() < deadline:
        time.sleep(0.01)
else:
    time.sleep(hold)
note("end %.6f" % time.monotonic())
"""


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class LockctlCase(BrokerTestCase):
    broker_args = ()

    def setUp(self):
        super().setUp()
        if not os.access(LOCKCTL, os.X_OK):
            raise AssertionError("lockctl binary %s is missing (build it, "
                                 "or set LOCKCTL)" % LOCKCTL)
        self.dir = tempfile.mkdtemp(prefix="lbt-lockctl-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.b = self.start_broker(*self.broker_argv())
        self.worker = os.path.join(self.dir, "worker.py")
        with open(self.worker, "w") as f:
            f.write(WORKER)

    def broker_argv(self):
        return self.broker_args

    def env(self, **extra):
        env = dict(os.environ)
        env.pop("LOCKBROKER_HOST", None)
        env["LOCKBROKER_PORT"] = str(self.b.port)
        env.update(extra)
        return env

    def path(self, name):
        return os.path.join(self.dir, name)

    def work(self, log, hold, *more):
        """argv of a worker CMD."""
        return [sys.executable, self.worker, self.path(log), str(hold)] + \
            list(more)

    def lockctl(self, *args, env=None, timeout=RUN_TIMEOUT):
        """Run lockctl to the end: (exit status, stdout, stderr)."""
        p = subprocess.run([LOCKCTL] + [str(a) for a in args],
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, env=env or self.env(), timeout=timeout)
        return p.returncode, p.stdout, p.stderr

    def spawn(self, *args, env=None):
        """Start lockctl in the background; killed at cleanup."""
        p = subprocess.Popen([LOCKCTL] + [str(a) for a in args],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env=env or self.env())
        self.addCleanup(self._reap, p)
        return p

    @staticmethod
    def _reap(p):
        if p.poll() is None:
            p.kill()
        p.communicate(timeout=10)

    def finish(self, p, timeout=RUN_TIMEOUT):
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err

    def log(self, name):
        try:
            with open(self.path(name)) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def started(self, name, timeout=10.0, proc=None):
        """Wait for a worker's start line: (t, key, token, pid).  With
        proc (its lockctl), fail at once if that exits first."""
        def start_line():
            lines = [l for l in self.log(name) if l.startswith("start ")]
            if not lines and proc is not None and proc.poll() is not None:
                raise AssertionError("lockctl exited %d before worker %s "
                                     "started: %r" % (proc.returncode, name,
                                                      proc.stderr.read()))
            return lines
        line = wait_until(start_line, timeout,
                          what="worker %s to start" % name)[0]
        _, t, key, tok, pid = line.split(" ")
        return float(t), key, int(tok), int(pid)

    def ended(self, name):
        ends = [l for l in self.log(name) if l.startswith("end ")]
        self.assertEqual(len(ends), 1, self.log(name))
        return float(ends[0].split(" ")[1])

    def owner(self, key):
        c = self.connect(self.b)
        return c.req("OWNER " + key)

    def assert_lost_when_deleted(self, key, *args):
        """lockctl ARGS (with -t 600) runs a worker logging to KEY's log
        under KEY; once the worker runs, KEY's lock is deleted in Redis:
        the broker's renewal (every TTL/3) finds it gone within ~0.2 s and
        sends EVENT LOST, and lockctl stops the worker and exits 70."""
        p = self.spawn(*args, "--", *self.work(key, 30))
        _, _, tok, _ = self.started(key, proc=p)
        self.redis.cli("DEL", self.lock_key(key))
        rc, _, err = self.finish(p, timeout=10)
        self.assertEqual(rc, 70, err)
        self.assertIn("EVENT LOST %s %d" % (key, tok), err)
        self.assertIn("term", self.log(key))

    def cmd_dies_with_lockctl(self, pid):
        """On Linux (PR_SET_PDEATHSIG), wait for CMD pid to be gone (or a
        zombie) once its lockctl was killed."""
        def gone():
            try:
                with open("/proc/%d/stat" % pid) as f:
                    return f.read().split(") ")[1].startswith("Z")
            except FileNotFoundError:
                return True
        if sys.platform.startswith("linux"):
            wait_until(gone, 5.0, what="CMD to die with lockctl")


class TestRun(LockctlCase):
    def test_cmd_sees_key_and_token_and_holds_the_lock(self):
        p = self.spawn("job", "--", *self.work("w", 30))
        _, key, tok, _ = self.started("w")
        self.assertEqual(key, "job")
        r = self.owner("job")
        self.assertRegex(r, r"\AOK %s [0-9]+ %d\Z" % (UUID_RE, tok))
        self.assertEqual(self.redis.cli("GET", self.prefix + ":fence"),
                         str(tok))
        p.send_signal(signal.SIGTERM)
        self.finish(p)

    def test_exit_status_passes_through(self):
        for code in (0, 3, 255):
            rc, _, err = self.lockctl("k", "--", "sh", "-c", "exit %d" % code)
            self.assertEqual(rc, code, err)
        rc, _, _ = self.lockctl("k", "--", "sh", "-c", "kill -KILL $$")
        self.assertEqual(rc, 128 + signal.SIGKILL)
        self.assertEqual(self.owner("k"), "OK -")

    def test_lock_released_when_cmd_exits(self):
        rc, _, err = self.lockctl("k", "--", *self.work("w", 0))
        self.assertEqual(rc, 0, err)
        self.assertEqual(err, "")
        self.assertEqual(self.owner("k"), "OK -")
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key("k")), 0)

    def test_two_runs_serialize_and_second_sees_higher_token(self):
        a = self.spawn("-w", 10000, "k", "--", *self.work("a", 0.6))
        a_start, _, a_tok, _ = self.started("a")
        b = self.spawn("-w", 10000, "k", "--", *self.work("b", 0))
        self.assertEqual(self.finish(a)[0], 0)
        rc, _, err = self.finish(b)
        self.assertEqual(rc, 0, err)
        b_start, _, b_tok, _ = self.started("b")
        a_end = self.ended("a")
        self.assertGreaterEqual(b_start, a_end,
                                "b started before a ended: no exclusion")
        self.assertGreater(b_tok, a_tok)

    def test_many_runs_never_overlap(self):
        procs = [self.spawn("-w", 15000, "k", "--", *self.work("w%d" % i, 0.1))
                 for i in range(4)]
        for p in procs:
            rc, _, err = self.finish(p)
            self.assertEqual(rc, 0, err)
        spans = sorted((self.started("w%d" % i)[0], self.ended("w%d" % i),
                        self.started("w%d" % i)[2]) for i in range(4))
        for (s1, e1, t1), (s2, e2, t2) in zip(spans, spans[1:]):
            self.assertGreaterEqual(s2, e1, "runs overlap: %r" % spans)
            self.assertGreater(t2, t1, "tokens not increasing: %r" % spans)

    def test_cmd_not_found_is_127_and_releases(self):
        rc, _, err = self.lockctl("k", "--", self.path("no-such-cmd"))
        self.assertEqual(rc, 127)
        self.assertIn("lockctl: ", err)
        self.assertEqual(self.owner("k"), "OK -")

    def test_ttl_option_sets_redis_ttl(self):
        p = self.spawn("-t", 7000, "k", "--", *self.work("w", 30))
        self.started("w")
        pttl = self.redis.cli("PTTL", self.lock_key("k"))
        self.assertTrue(0 < pttl <= 7000, pttl)
        p.send_signal(signal.SIGTERM)
        self.finish(p)


class TestBusy(LockctlCase):
    def hold(self, key):
        c = self.connect(self.b)
        self.assertToken(c.req("ACQUIRE " + key))
        return c

    def test_busy_exits_75_without_running_cmd(self):
        self.hold("k")
        rc, _, err = self.lockctl("k", "--", *self.work("w", 0))
        self.assertEqual(rc, 75)
        self.assertRegex(err, r"\Alockctl: [^\n]*busy[^\n]*\n\Z")
        self.assertEqual(self.log("w"), [])

    def test_E_sets_the_busy_status(self):
        self.hold("k")
        for code in (0, 3, 200):
            rc, _, _ = self.lockctl("-E", code, "k", "--", "true")
            self.assertEqual(rc, code)

    def test_wait_runs_out_then_busy(self):
        self.hold("k")
        t0 = time.monotonic()
        rc, _, _ = self.lockctl("-w", 300, "k", "--", "true")
        self.assertEqual(rc, 75)
        self.assertGreaterEqual(time.monotonic() - t0, 0.28)

    def test_wait_gets_lock_when_holder_leaves(self):
        c = self.hold("k")
        p = self.spawn("-w", 10000, "k", "--", *self.work("w", 0))
        wait_until(lambda: self.stats(c)["waiters"] == "1", 5.0,
                   what="lockctl waiting")
        c.close()
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(self.log("w")), 2)


class TestLost(LockctlCase):
    def test_broker_killed_stops_cmd_and_exits_70(self):
        p = self.spawn("-k", 5, "k", "--", *self.work("w", 30))
        self.started("w")
        self.b.kill()
        t0 = time.monotonic()
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 70, err)
        self.assertLess(time.monotonic() - t0, 3.0)
        self.assertIn("term", self.log("w"))
        self.assertIn("lost", err)

    def test_cmd_ignoring_sigterm_gets_sigkill_after_grace(self):
        p = self.spawn("-k", 1, "k", "--", *self.work("w", 30, "ignore-term"))
        _, _, _, pid = self.started("w")
        self.b.kill()
        t0 = time.monotonic()
        rc, _, err = self.finish(p)
        took = time.monotonic() - t0
        self.assertEqual(rc, 70, err)
        self.assertGreaterEqual(took, 0.9)
        self.assertLess(took, 4.0)
        self.assertIn("SIGKILL", err)
        self.assertFalse(os.path.exists("/proc/%d" % pid), "CMD survived")

    def test_redis_restart_without_data_loses_lock_and_exits_70(self):
        # With no failover lock delay the broker cannot reclaim a lock
        # Redis lost (it may have been taken meanwhile): it is lost.
        own = self.start_redis()
        b = self.start_broker("--failover_lock_delay_ms", "0", redis=own)
        p = self.spawn("-t", 900, "k", "--", *self.work("w", 30),
                       env=self.env(LOCKBROKER_PORT=str(b.port)))
        _, _, tok, _ = self.started("w")
        own.restart()
        rc, _, err = self.finish(p, timeout=10)
        self.assertEqual(rc, 70, err)
        self.assertIn("EVENT LOST k %d" % tok, err)
        self.assertIn("term", self.log("w"))

    def test_lockctl_killed_takes_cmd_and_lock_with_it(self):
        p = self.spawn("k", "--", *self.work("w", 30))
        _, _, _, pid = self.started("w")
        p.kill()
        p.communicate(timeout=10)
        self.cmd_dies_with_lockctl(pid)
        wait_until(lambda: self.owner("k") == "OK -", 5.0,
                   what="the lock to be released")

    def test_lock_deleted_in_redis_sends_event_and_exits_70(self):
        self.assert_lost_when_deleted("k", "-t", 600, "k")

    def test_killed_with_delay_keeps_the_key_for_the_delay(self):
        """--delay MS (ACQUIRE ... DELAY, 1.2): lockctl killed, the key
        stays taken MS more; a normal end frees it at once."""
        p = self.spawn("--delay", 1500, "k", "--", *self.work("w", 30))
        _, _, _, pid = self.started("w")
        p.kill()
        p.communicate(timeout=10)
        t0 = time.monotonic()
        self.cmd_dies_with_lockctl(pid)
        self.assertNotEqual(self.owner("k"), "OK -")
        wait_until(lambda: self.owner("k") == "OK -", 5.0,
                   what="the lock to be released after its delay")
        self.assertGreater(time.monotonic() - t0, 1.0)
        rc, _, err = self.lockctl("--delay", 5000, "k", "--", "true")
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.owner("k"), "OK -")
        rc, _, err = self.lockctl("--delay", 10, "--shared", "k", "--",
                                  "true")
        self.assertEqual(rc, 64, err)
        self.assertIn("--delay is for exclusive holds", err)


class TestSignals(LockctlCase):
    def test_sigterm_reaches_cmd_and_lock_is_released(self):
        p = self.spawn("k", "--", *self.work("w", 30))
        self.started("w")
        p.send_signal(signal.SIGTERM)
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 7, err)      # the worker's own TERM exit
        self.assertIn("term", self.log("w"))
        self.assertEqual(self.owner("k"), "OK -")

    def test_other_signals_pass_through_as_128_plus_n(self):
        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
            p = self.spawn("k", "--", "sh", "-c", "echo up; exec sleep 30")
            self.assertEqual(p.stdout.readline(), "up\n")
            p.send_signal(sig)
            rc, _, err = self.finish(p)
            self.assertEqual(rc, 128 + sig, err)
            self.assertEqual(self.owner("k"), "OK -")

    def test_signal_while_waiting_gives_up_without_running_cmd(self):
        c = self.connect(self.b)
        self.assertToken(c.req("ACQUIRE k"))
        p = self.spawn("-w", 30000, "k", "--", *self.work("w", 0))
        wait_until(lambda: self.stats(c)["waiters"] == "1", 5.0,
                   what="lockctl waiting")
        p.send_signal(signal.SIGTERM)
        rc, _, err = self.finish(p, timeout=5)
        self.assertEqual(rc, 128 + signal.SIGTERM, err)
        self.assertEqual(self.log("w"), [])
        wait_until(lambda: self.stats(c)["waiters"] == "0", 5.0,
                   what="waiter gone")


class TestHoldAtLeast(LockctlCase):
    """--hold-at-least MS: when CMD ends sooner, lockctl exits at once and
    leaves the key taken until MS after it acquired it (RELEASE ...
    LINGER); waiters get it when that runs out."""

    def test_fast_cmd_leaves_key_taken_until_ms_after_acquisition(self):
        t0 = time.monotonic()
        rc, _, err = self.lockctl("--hold-at-least", 1500, "k", "--", "true")
        t1 = time.monotonic()
        self.assertEqual((rc, err), (0, ""))
        self.assertLess(t1 - t0, 1.0, "lockctl waited out the time itself")
        other = self.connect(self.b)
        self.assertEqual(other.req("ACQUIRE k"), "BUSY")
        m = re.fullmatch(r"OK %s ([0-9]+) [0-9]+" % UUID_RE, self.owner("k"))
        self.assertIsNotNone(m, "the key is not taken after lockctl exited")
        self.assertLessEqual(int(m.group(1)), 1500)
        # lockctl acquired between t0 and t1: the key is taken until 1.5 s
        # after that (a few ms of rounding allowed), then a waiter gets it.
        self.assertToken(other.req("ACQUIRE k WAIT 5000", timeout=10))
        got = time.monotonic()
        self.assertGreaterEqual(got, t0 + 1.5 - 0.02,
                                "the key was free too early")
        self.assertLess(got, t1 + 1.5 + 0.25,
                        "the waiter got the key late after it expired")

    def test_without_it_the_key_is_free_at_once(self):
        rc, _, err = self.lockctl("k", "--", "true")
        self.assertEqual((rc, err), (0, ""))
        self.assertEqual(self.owner("k"), "OK -")
        self.assertToken(self.connect(self.b).req("ACQUIRE k"))

    def test_cmd_longer_than_ms_releases_at_once(self):
        rc, _, err = self.lockctl("--hold-at-least", 200, "k", "--",
                                  "sleep", "0.4")
        self.assertEqual((rc, err), (0, ""))
        self.assertEqual(self.owner("k"), "OK -")
        self.assertToken(self.connect(self.b).req("ACQUIRE k"))

    def test_cmd_stopped_by_signal_leaves_the_same_lock_taken(self):
        p = self.spawn("--hold-at-least", 5000, "k", "--",
                       *self.work("w", 30))
        _, _, tok, _ = self.started("w")
        p.send_signal(signal.SIGTERM)
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 7, err)      # the worker's own TERM exit
        self.assertEqual(self.connect(self.b).req("ACQUIRE k"), "BUSY")
        self.assertRegex(self.owner("k"), r"\AOK %s [0-9]+ %d\Z"
                         % (UUID_RE, tok))


def most_at_once(spans):
    """The largest number of (start, end) spans that overlap at one
    moment (an end before a start at the same instant)."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    inside = most = 0
    for _, d in edges:
        inside += d
        most = max(most, inside)
    return most


class TestSharedAndLimit(LockctlCase):
    """--limit N: one of N permits of a semaphore (ACQUIRE ... LIMIT n);
    --shared: a read hold (ACQUIRE ... SHARED).  A worker logs its start
    after lockctl's OK and its end before the RELEASE, so spans that
    overlap were inside together.  The holders that others must wait for
    hold until the test opens their gate (worker until=PATH)."""

    def setUp(self):
        super().setUp()
        self.gate = "until=" + self.path("gate")

    def open_gate(self):
        with open(self.path("gate"), "w"):
            pass

    def span(self, name):
        return self.started(name)[0], self.ended(name)

    def waiters(self, n, what):
        c = self.connect(self.b)
        wait_until(lambda: self.stats(c)["waiters"] == str(n), 5.0,
                   what=what)

    def test_limit_2_lets_two_of_three_runs_in_at_once(self):
        procs = [self.spawn("--limit", 2, "-w", 15000, "k", "--",
                            *self.work("w%d" % i, 10, self.gate))
                 for i in range(3)]
        wait_until(lambda: len([i for i in range(3) if self.log("w%d" % i)])
                   == 2, 10.0, what="two runs to start")
        self.waiters(1, "the third run to wait")
        self.assertRegex(self.owner("k"), r"\AOK SEMAPHORE 2 2( %s [0-9]+ "
                         r"[0-9]+){2}\Z" % UUID_RE)
        self.open_gate()
        for p in procs:
            rc, _, err = self.finish(p)
            self.assertEqual((rc, err), (0, ""))
        spans = [self.span("w%d" % i) for i in range(3)]
        self.assertEqual(most_at_once(spans), 2,
                         "runs inside at once: %r" % spans)
        tokens = {self.started("w%d" % i)[2] for i in range(3)}
        self.assertEqual(len(tokens), 3, "each permit has its own token")
        self.assertEqual(self.owner("k"), "OK -")

    def test_shared_readers_run_together_and_a_writer_waits(self):
        readers = [self.spawn("--shared", "-w", 10000, "k", "--",
                              *self.work("r%d" % i, 10, self.gate))
                   for i in (1, 2)]
        self.started("r1")
        self.started("r2")
        self.assertRegex(self.owner("k"), r"\AOK SHARED 2( %s [0-9]+ [0-9]+)"
                         r"{2}\Z" % UUID_RE)
        writer = self.spawn("-w", 10000, "k", "--", *self.work("w", 0))
        self.waiters(1, "the writer to wait")
        self.assertEqual(self.log("w"), [])
        self.open_gate()
        for p in readers + [writer]:
            rc, _, err = self.finish(p)
            self.assertEqual((rc, err), (0, ""))
        r1, r2 = self.span("r1"), self.span("r2")
        self.assertEqual(most_at_once([r1, r2]), 2,
                         "the readers were not inside together")
        self.assertGreaterEqual(self.started("w")[0], max(r1[1], r2[1]),
                                "the writer ran beside a reader")

    def test_reader_after_a_waiting_writer_waits_behind_it(self):
        reader = self.spawn("--shared", "k", "--",
                            *self.work("r1", 10, self.gate))
        self.started("r1")
        writer = self.spawn("-w", 10000, "k", "--", *self.work("w", 0.3))
        self.waiters(1, "the writer to wait")
        late = self.spawn("--shared", "-w", 10000, "k", "--",
                          *self.work("r2", 0))
        self.waiters(2, "the second reader to wait")
        self.assertEqual(self.log("r2"), [])
        self.open_gate()
        for p in (reader, writer, late):
            rc, _, err = self.finish(p)
            self.assertEqual((rc, err), (0, ""))
        w = self.span("w")
        self.assertGreaterEqual(w[0], self.ended("r1"))
        self.assertGreaterEqual(self.started("r2")[0], w[1],
                                "a reader overtook the waiting writer")

    def test_lost_permit_or_shared_hold_stops_cmd_and_exits_70(self):
        # As for a lock: the renewal (every TTL/3) finds the key gone.
        for kind in (("--limit", 2), ("--shared",)):
            key = kind[0].strip("-")
            self.assert_lost_when_deleted(key, *kind, "-t", 600, key)

    def test_limit_busy_exits_75_without_running_cmd(self):
        for _ in range(2):
            self.assertToken(self.connect(self.b).req("ACQUIRE k LIMIT 2"))
        rc, _, err = self.lockctl("--limit", 2, "-w", 200, "k", "--",
                                  *self.work("w", 0))
        self.assertEqual(rc, 75, err)
        self.assertEqual(err, "lockctl: lock k is busy (LIMIT 2: every "
                         "permit taken) (waited 200 ms)\n")
        self.assertEqual(self.log("w"), [])

    def test_other_kind_or_limit_is_refused_with_the_reply(self):
        c = self.connect(self.b)
        self.assertToken(c.req("ACQUIRE sem LIMIT 3"))
        self.assertToken(c.req("ACQUIRE lock"))
        for args, want in (
                (("--limit", 2, "sem"), "ACQUIRE sem LIMIT 2: ERR BADARG "
                 "the key is a semaphore with LIMIT 3"),
                (("--shared", "sem"), "ACQUIRE sem SHARED: ERR BADARG the "
                 "key is a semaphore with LIMIT 3"),
                (("-w", 100, "sem"), "ACQUIRE sem WAIT 100: ERR BADARG the "
                 "key is a semaphore with LIMIT 3"),
                (("--limit", 3, "lock"), "ACQUIRE lock LIMIT 3: ERR BADARG "
                 "the key is a lock, not a semaphore")):
            rc, out, err = self.lockctl(*args, "--", *self.work("w", 0))
            self.assertEqual((rc, out, err), (1, "", "lockctl: %s\n" % want))
        self.assertEqual(self.log("w"), [])
        # with the same LIMIT, lockctl takes a second permit of the three
        rc, _, err = self.lockctl("--limit", 3, "sem", "--", "true")
        self.assertEqual((rc, err), (0, ""))

    def test_limit_takes_1_to_1000000_like_the_protocol(self):
        for n in (1, 1000000):
            rc, out, err = self.lockctl("--limit", n, "k%d" % n, "--", "sh",
                                        "-c", 'exec "$0" owner "$1"',
                                        LOCKCTL, "k%d" % n)
            self.assertEqual(rc, 0, err)
            self.assertRegex(out, r"\AOK SEMAPHORE 1 %d %s [0-9]+ [0-9]+\n\Z"
                             % (n, UUID_RE))
        for n in (0, 1000001, -1, "2x"):
            rc, _, err = self.lockctl("--limit", n, "k", "--", "true")
            self.assertEqual(rc, 64, err)
            self.assertIn("--limit wants a number 1..1000000", err)


class TestElect(LockctlCase):
    """elect KEY -- CMD: an exclusive ACQUIRE (with --value, ACQUIRE ...
    VALUE), CMD run while this lockctl leads and stopped as the run mode
    stops it when the lock is lost."""

    def waiters(self, c, n):
        wait_until(lambda: self.stats(c)["waiters"] == str(n), 5.0,
                   what="%d waiting candidate(s)" % n)

    def test_cmd_runs_only_while_leading(self):
        c = self.connect(self.b)
        held = self.assertToken(c.req("ACQUIRE svc"))
        p = self.spawn("-w", 30000, "elect", "svc", "--",
                       *self.work("w", 30))
        self.waiters(c, 1)
        time.sleep(0.3)
        self.assertEqual(self.log("w"), [], "CMD ran before it led")
        self.assertEqual(c.req("RELEASE svc"), "OK 0")
        _, key, tok, _ = self.started("w")
        self.assertEqual(key, "svc")
        self.assertGreater(tok, held)
        self.assertRegex(self.owner("svc"), r"\AOK %s [0-9]+ %d\Z"
                         % (UUID_RE, tok))
        p.send_signal(signal.SIGTERM)
        rc, _, err = self.finish(p)
        self.assertEqual(rc, 7, err)      # the worker's own TERM exit
        self.assertEqual(self.owner("svc"), "OK -")

    def test_second_candidate_takes_over_when_the_leader_is_killed(self):
        a = self.spawn("-w", 30000, "elect", "svc", "--", *self.work("a", 30))
        _, _, a_tok, a_pid = self.started("a", proc=a)
        b = self.spawn("-w", 30000, "elect", "svc", "--", *self.work("b", 30))
        self.waiters(self.connect(self.b), 1)
        self.assertEqual(self.log("b"), [], "two leaders at once")
        a.kill()                          # SIGKILL: its session just ends
        killed = time.monotonic()
        b_start, _, b_tok, _ = self.started("b", timeout=5.0)
        self.assertLess(b_start - killed, 2.0, "the takeover was slow")
        self.assertGreater(b_tok, a_tok)
        self.cmd_dies_with_lockctl(a_pid)
        self.assertRegex(self.owner("svc"), r"\AOK %s [0-9]+ %d\Z"
                         % (UUID_RE, b_tok))
        b.send_signal(signal.SIGTERM)
        self.assertEqual(self.finish(b)[0], 7)

    def test_leadership_lost_stops_cmd_and_exits_70(self):
        # As for the run mode: the broker finds the key gone on renewal.
        self.assert_lost_when_deleted("svc", "-t", 600, "elect", "svc")

    def test_value_is_read_with_owner_value_from_another_session(self):
        p = self.spawn("--value", "10.0.0.1:80", "elect", "svc", "--",
                       *self.work("w", 30))
        _, _, tok, _ = self.started("w", proc=p)
        other = self.connect(self.b)
        self.assertRegex(other.req("OWNER svc VALUE"),
                         r"\AOK %s [0-9]+ %d 10\.0\.0\.1:80\Z"
                         % (UUID_RE, tok))
        p.send_signal(signal.SIGTERM)
        self.finish(p)
        self.assertEqual(other.req("OWNER svc VALUE"), "OK -")

    def test_without_w_campaigns_until_it_leads_and_w0_tries_once(self):
        c = self.connect(self.b)
        self.assertToken(c.req("ACQUIRE svc"))
        rc, _, err = self.lockctl("-w", "0", "elect", "svc", "--",
                                  *self.work("w", 0))
        self.assertEqual(rc, 75, err)
        self.assertEqual(err, "lockctl: lock svc is busy\n")
        self.assertEqual(self.log("w"), [])
        # no -w: it waits (as long as the broker's max_wait_ms) and
        # leads once the key is free
        p = self.spawn("elect", "svc", "--", *self.work("w", 0))
        time.sleep(1.0)
        self.assertIsNone(p.poll())
        self.assertEqual(self.log("w"), [])
        self.assertEqual(c.req("RELEASE svc"), "OK 0")
        self.assertEqual(self.finish(p)[0], 0)
        self.assertTrue(self.log("w"))     # CMD ran, once it led

    def test_elect_or_watch_before_dashes_is_a_key(self):
        # "elect -- CMD" is the run mode on the lock named elect (and
        # "watch -- CMD" on watch), while "elect elect -- CMD" campaigns
        # for the key named elect.
        show = ("sh", "-c", 'echo "$LOCKBROKER_KEY"; exec "$0" owner '
                '"$LOCKBROKER_KEY"', LOCKCTL)
        for args in (("elect", "--"), ("watch", "--"),
                     ("elect", "elect", "--"), ("elect", "watch", "--")):
            rc, out, err = self.lockctl(*args, *show)
            self.assertEqual(rc, 0, "lockctl %r: %r" % (args, err))
            self.assertRegex(out, r"\A%s\nOK %s [0-9]+ [0-9]+\n\Z"
                             % (args[-2], UUID_RE))
        rc, _, err = self.lockctl("--value", "v", "elect", "--", "true")
        self.assertEqual(rc, 64, err)
        self.assertIn("--value is for elect only", err)


class LineReader:
    """A child's stdout read a line at a time with a deadline (a pipe:
    a line arrives only when the writer flushes it)."""

    def __init__(self, p):
        self.p = p
        self.fd = p.stdout.fileno()
        self.buf = b""

    def line(self, timeout=5.0):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise AssertionError("no line within %.1f s (have %r)"
                                     % (timeout, self.buf))
            data = os.read(self.fd, 65536)
            if not data:
                raise AssertionError("lockctl's stdout ended (have %r): "
                                     "%r" % (self.buf, self.p.stderr.read()))
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode("ascii")

    def quiet(self, within):
        """True if no byte arrives within seconds."""
        return not self.buf and not select.select([self.fd], [], [],
                                                  within)[0]


class TestWatch(LockctlCase):
    """watch KEY: the key's state at once, then a line per change, each
    the EVENT line without "EVENT ", until SIGINT/SIGTERM (exit 0) or the
    end of the connection (exit 1)."""

    def watch(self, key):
        p = subprocess.Popen([LOCKCTL, "watch", key], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=self.env())
        self.addCleanup(self._reap, p)
        return p, LineReader(p)

    def test_prints_holder_and_free_as_another_session_takes_and_releases(
            self):
        p, out = self.watch("svc")
        self.assertEqual(out.line(), "FREE svc")      # the state now
        c = self.connect(self.b)
        cid = c.hello()
        tok = self.assertToken(c.req("ACQUIRE svc VALUE 10.0.0.1:80"))
        self.assertEqual(out.line(), "HOLDER svc %s %d 10.0.0.1:80"
                         % (cid, tok))
        self.assertEqual(c.req("RELEASE svc"), "OK 0")
        self.assertEqual(out.line(), "FREE svc")
        tok2 = self.assertToken(c.req("ACQUIRE svc"))
        self.assertEqual(out.line(), "HOLDER svc %s %d -" % (cid, tok2))
        c.close()                          # the session's end frees it
        self.assertEqual(out.line(), "FREE svc")
        self.assertTrue(out.quiet(0.3))
        p.send_signal(signal.SIGINT)
        rest, err = p.communicate(timeout=10)
        self.assertEqual((p.returncode, rest, err), (0, b"", b""))

    def test_first_line_is_the_holder_now_and_sigterm_exits_0(self):
        c = self.connect(self.b)
        cid = c.hello()
        tok = self.assertToken(c.req("ACQUIRE svc"))
        p, out = self.watch("svc")
        self.assertEqual(out.line(), "HOLDER svc %s %d -" % (cid, tok))
        self.assertTrue(out.quiet(0.3))
        p.send_signal(signal.SIGTERM)
        rest, err = p.communicate(timeout=10)
        self.assertEqual((p.returncode, rest, err), (0, b"", b""))
        wait_until(lambda: self.stats(c)["sessions"] == "1", 5.0,
                   what="the watch's session to end")

    def test_elect_candidates_seen_by_a_watcher(self):
        p, out = self.watch("svc")
        self.assertEqual(out.line(), "FREE svc")
        a = self.spawn("-w", 30000, "--value", "a:1", "elect", "svc", "--",
                       *self.work("a", 30))
        _, _, a_tok, _ = self.started("a", proc=a)
        self.assertRegex(out.line(), r"\AHOLDER svc %s %d a:1\Z"
                         % (UUID_RE, a_tok))
        b = self.spawn("-w", 30000, "--value", "b:2", "elect", "svc", "--",
                       *self.work("b", 30))
        self.waiters(1)
        a.kill()
        _, _, b_tok, _ = self.started("b")
        # the hand-over may pass through FREE (or be coalesced away)
        line = out.line()
        if line == "FREE svc":
            line = out.line()
        self.assertRegex(line, r"\AHOLDER svc %s %d b:2\Z"
                         % (UUID_RE, b_tok))
        b.send_signal(signal.SIGTERM)
        self.finish(b)
        self.assertEqual(out.line(), "FREE svc")

    def waiters(self, n):
        c = self.connect(self.b)
        wait_until(lambda: self.stats(c)["waiters"] == str(n), 5.0,
                   what="%d waiting candidate(s)" % n)

    def test_broker_gone_ends_watch_with_1(self):
        p, out = self.watch("svc")
        self.assertEqual(out.line(), "FREE svc")
        self.b.kill()
        rest, err = p.communicate(timeout=10)
        self.assertEqual(p.returncode, 1, err)
        self.assertEqual(rest, b"")
        self.assertRegex(err.decode(), r"\Alockctl: watch svc: [^\n]+\n\Z")


class TestSubcommands(LockctlCase):
    def test_ping(self):
        self.assertEqual(self.lockctl("ping"), (0, "OK PONG\n", ""))

    def test_stats(self):
        rc, out, _ = self.lockctl("stats")
        self.assertEqual(rc, 0)
        self.assertEqual(harness.parse_stats(out.rstrip("\n"))["redis"], "up")

    def test_owner_free_and_held(self):
        self.assertEqual(self.lockctl("owner", "k"), (0, "OK -\n", ""))
        c = self.connect(self.b)
        cid = c.hello()
        tok = self.assertToken(c.req("ACQUIRE k"))
        rc, out, _ = self.lockctl("owner", "k")
        self.assertEqual(rc, 0)
        self.assertRegex(out, r"\AOK %s [0-9]+ %d\n\Z" % (cid, tok))

    def test_error_reply_exits_1(self):
        rc, out, err = self.lockctl("owner", "x" * 300)
        self.assertEqual((rc, out), (1, ""))
        self.assertRegex(err, r"\Alockctl: ERR BADARG ")

    def test_no_broker_exits_1(self):
        env = self.env(LOCKBROKER_PORT=str(harness.free_port()))
        for args in (("ping",), ("k", "--", "true")):
            rc, _, err = self.lockctl(*args, env=env)
            self.assertEqual(rc, 1)
            self.assertRegex(err, r"\Alockctl: cannot connect")

    def test_subcommand_word_before_dashes_is_a_key(self):
        rc, out, err = self.lockctl("stats", "--", "sh", "-c",
                                    'echo "$LOCKBROKER_KEY"')
        self.assertEqual((rc, out), (0, "stats\n"), err)


class TestAdmin(LockctlCase):
    def test_locks_prints_every_holder_one_per_line(self):
        c = self.connect(self.b)
        cid = c.hello("holder")
        toks = {}
        for i in range(130):
            toks["ad:%03d" % i] = self.assertToken(c.req("ACQUIRE ad:%03d"
                                                         % i))
        for i in range(5):
            self.assertToken(c.req("ACQUIRE other:%d" % i))
        rc, out, err = self.lockctl("locks", "ad:*")
        self.assertEqual((rc, err), (0, ""))
        lines = out.splitlines()
        self.assertEqual(len(lines), 130)
        got = {}
        for l in lines:
            w = l.split(" ")
            self.assertEqual(len(w), 9, l)
            self.assertEqual(w[1:4], ["lock", cid, "holder"], l)
            got[w[0]] = int(w[4])
        self.assertEqual(got, toks)
        rc, out, _ = self.lockctl("locks")
        self.assertEqual((rc, len(out.splitlines())), (0, 135))
        self.assertEqual(self.lockctl("locks", "none:*"), (0, "", ""))

    def test_kill_and_free_print_the_reply(self):
        c = self.connect(self.b)
        cid = c.hello()
        self.assertToken(c.req("ACQUIRE k1"))
        self.assertToken(c.req("ACQUIRE k2"))
        self.assertEqual(self.lockctl("free", "k1"), (0, "OK 1\n", ""))
        self.assertEqual(c.req("HELD"), "OK 1 k2")
        self.assertEqual(self.lockctl("free", "k1"), (0, "OK 0\n", ""))
        self.assertEqual(self.lockctl("kill", cid), (0, "OK 1\n", ""))
        self.assertTrue(c.wait_closed(1.5))
        self.assertEqual(self.owner("k2"), "OK -")
        self.assertEqual(self.lockctl("kill", cid), (0, "OK 0\n", ""))
        rc, out, err = self.lockctl("kill", "not-a-client-id")
        self.assertEqual((rc, out), (70, ""))
        self.assertRegex(err, r"\Alockctl: ERR BADARG ")
        rc, out, err = self.lockctl("free", "x" * 300)
        self.assertEqual((rc, out), (70, ""))
        self.assertRegex(err, r"\Alockctl: ERR BADARG ")


class TestAdminDenied(LockctlCase):
    broker_args = ("--admin_local", "no")

    def test_not_an_admin_exits_70(self):
        c = self.connect(self.b)
        cid = c.hello()
        self.assertToken(c.req("ACQUIRE k"))
        for args in (("locks",), ("locks", "k*"), ("kill", cid),
                     ("free", "k")):
            rc, out, err = self.lockctl(*args)
            self.assertEqual((rc, out), (70, ""), args)
            self.assertRegex(err, r"\Alockctl: ERR DENIED ", args)
        self.assertEqual(c.req("HELD"), "OK 1 k")


class TestAddress(LockctlCase):
    def test_H_overrides_environment(self):
        env = self.env(LOCKBROKER_HOST="127.0.0.1:%d" % harness.free_port())
        self.assertEqual(self.lockctl("ping", env=env)[0], 1)
        rc, out, _ = self.lockctl("-H", "127.0.0.1:%d" % self.b.port, "ping",
                                  env=env)
        self.assertEqual((rc, out), (0, "OK PONG\n"))

    def test_host_with_port_in_environment(self):
        env = self.env(LOCKBROKER_HOST="localhost:%d" % self.b.port,
                       LOCKBROKER_PORT="1")
        self.assertEqual(self.lockctl("ping", env=env)[:2], (0, "OK PONG\n"))


class TestUnixSocket(LockctlCase):
    def broker_argv(self):
        self.sock = self.path("b.sock")
        return ("-s", self.sock)

    def test_run_and_owner_over_unix_socket(self):
        rc, out, err = self.lockctl("-U", self.sock, "k", "--", "sh", "-c",
                                    'lockctl_owner=$("$0" -U "$1" owner k);'
                                    'echo "$lockctl_owner"', LOCKCTL,
                                    self.sock)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"\AOK %s [0-9]+ [0-9]+\n\Z" % UUID_RE)


class TestAuth(LockctlCase):
    broker_args = ("--auth_token", "s3cret-token")

    def token_file(self, text):
        path = self.path("token")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_good_token_runs_cmd(self):
        good = self.token_file("s3cret-token\n")
        rc, out, err = self.lockctl("-a", good, "k", "--", "sh", "-c",
                                    'echo "$LOCKBROKER_TOKEN"')
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"\A[0-9]+\n\Z")
        self.assertEqual(self.lockctl("-a", good, "owner", "k")[:2],
                         (0, "OK -\n"))

    def test_wrong_token_exits_1(self):
        bad = self.token_file("nope\n")
        rc, _, err = self.lockctl("-a", bad, "k", "--", *self.work("w", 0))
        self.assertEqual(rc, 1)
        self.assertRegex(err, r"\Alockctl: AUTH refused: ERR NOAUTH ")
        self.assertEqual(self.log("w"), [])

    def test_no_token_gets_noauth(self):
        self.assertEqual(self.lockctl("ping")[0], 0)   # PING needs no AUTH
        rc, _, err = self.lockctl("owner", "k")
        self.assertEqual(rc, 1)
        self.assertIn("ERR NOAUTH", err)
        rc, _, err = self.lockctl("k", "--", "true")
        self.assertEqual(rc, 1)
        self.assertIn("ERR NOAUTH", err)

    def test_missing_token_file_exits_1(self):
        rc, _, err = self.lockctl("-a", self.path("absent"), "ping")
        self.assertEqual(rc, 1)
        self.assertIn("No such file", err)


class TestUsage(LockctlCase):
    def test_usage_errors_exit_64(self):
        for args in ((), ("k",), ("k", "true"), ("k", "--"), ("-w", "soon",
                     "k", "--", "true"), ("-t", "0", "k", "--", "true"),
                     ("-E", "256", "k", "--", "true"), ("-q", "ping"),
                     ("-w",), ("owner",), ("ping", "extra"),
                     ("-H", "h:99999", "ping"), ("bad key", "--", "true"),
                     ("--hold-at-least", "soon", "k", "--", "true"),
                     ("--hold-at-least", "-1", "k", "--", "true"),
                     ("--hold-at-least", "2147483648", "k", "--", "true"),
                     ("--hold-at-least",), ("--no-such-option", "ping"),
                     ("--shared", "--limit", "2", "k", "--", "true"),
                     ("--limit", "2", "--shared", "k", "--", "true"),
                     ("--limit",), ("--shared=1", "k", "--", "true"),
                     ("--shared", "owner", "k"), ("--limit", "2", "stats"),
                     ("elect",), ("elect", "k"), ("elect", "k", "true"),
                     ("elect", "k", "--"), ("watch",), ("watch", "k", "x"),
                     ("--shared", "elect", "k", "--", "true"),
                     ("--limit", "2", "elect", "k", "--", "true"),
                     ("--value", "v", "k", "--", "true"),
                     ("--value", "v", "watch", "k"),
                     ("--value", "a b", "elect", "k", "--", "true"),
                     ("--value", "v" * 257, "elect", "k", "--", "true"),
                     ("--value", "", "elect", "k", "--", "true"),
                     ("--value",), ("locks", "a", "b"), ("kill",),
                     ("kill", "a", "b"), ("free",), ("free", "a", "b"),
                     ("--shared", "locks"), ("--value", "v", "kill", "x")):
            rc, out, err = self.lockctl(*args)
            self.assertEqual(rc, 64, "lockctl %r: %r" % (args, err))
            self.assertTrue(err.startswith("lockctl: "), err)
            self.assertEqual(out, "")

    def test_help_and_version(self):
        rc, out, _ = self.lockctl("-h")
        self.assertEqual(rc, 0)
        self.assertIn("usage: lockctl", out)
        self.assertIn("port %d" % self.b.port, out)   # live default
        rc, out, _ = self.lockctl("-V")
        self.assertEqual(rc, 0)
        self.assertRegex(out, r"\Alockctl [0-9]+\.[0-9]+\.[0-9]+\n\Z")


class TestManPage(unittest.TestCase):
    MAN = os.path.join(harness.REPO, "lockctl", "lockctl.1")

    def test_man_page_lints_clean(self):
        mandoc = shutil.which("mandoc")
        if mandoc is None:
            self.skipTest("mandoc is not installed")
        p = subprocess.run([mandoc, "-T", "lint", "-W", "warning", self.MAN],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual((p.returncode, p.stdout + p.stderr), (0, ""))

    def test_every_option_in_help_and_man_page(self):
        if not os.access(LOCKCTL, os.X_OK):
            self.fail("lockctl binary %s is missing" % LOCKCTL)
        help_text = subprocess.run([LOCKCTL, "-h"], capture_output=True,
                                   text=True, timeout=10).stdout
        with open(self.MAN) as f:
            man = f.read()
        for opt in list("aEHhktUVw") + ["-hold-at-least", "-shared",
                                        "-limit", "-value"]:
            self.assertRegex(help_text, r"(?m)^  -%s\b" % opt)
            self.assertRegex(man, r"(?m)^\.It Fl %s\b" % opt)
        for sub in ("elect", "watch", "owner", "stats", "ping", "locks",
                    "kill", "free"):
            self.assertIn(sub, help_text)
            self.assertRegex(man, r"(?m)^\.It Cm %s\b" % sub)


if __name__ == "__main__":
    unittest.main()
