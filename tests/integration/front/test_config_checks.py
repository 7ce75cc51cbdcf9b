"""
test_config_checks.py - what "-t" accepts start-up accepts, the unix
socket is never taken over from a live broker nor born with a wide mode,
and min_ttl_ms raises tiny TTLs (issue 9, defects 8, 13, 14 and 5).

  addresses    bind, metrics_bind and redis are checked by the parsers the
               listeners and the store use: "-t" exits 2 for values that
               start-up refuses, and start-up refuses them the same way,
               exit 2 and the same message, before listening.
  unix socket  a second broker given a live broker's path exits 1 and the
               first keeps serving; a stale file (SIGKILLed broker) is
               replaced; under umask 0 the file is never wider than
               unixsocketperm, seen through an strace-delayed chmod.
  min_ttl_ms   ACQUIRE ... TTL 1 gets the floor (OWNER and Redis PTTL),
               is not taken by another session meanwhile, follows SIGHUP;
               min <= default <= max is enforced with exit 2.
"""

import contextlib
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import unittest
import uuid

import harness
from harness import BrokerTestCase, Client, UnixClient, umask, wait_until

# Values "-t" used to pass that start-up then refused (or that name a host
# the broker would have to resolve), and their good neighbours.
BAD_ADDRESSES = [
    ("bind", "localhost"),
    ("bind", "[::1]"),
    ("redis", "127.0.0.1"),
    ("redis", "127.0.0.1:0"),
    ("redis", "127.0.0.1:70000"),
    ("redis", "unix:"),
    ("metrics_bind", "localhost"),
]
GOOD_ADDRESSES = [
    ("bind", "::1"),
    ("bind", "0.0.0.0"),
    ("redis", "[::1]:6379"),
    ("redis", "unix:/tmp/x.sock"),
    ("redis", "127.0.0.1:6379"),
    ("metrics_bind", "::1"),
]

SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:abort_on_error=0",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


def broker_env(**extra):
    env = dict(os.environ)
    for k, v in SANITIZER_ENV.items():
        env.setdefault(k, v)
    env.update(extra)
    return env


def run(argv, timeout=30):
    """Run argv to completion; returns the CompletedProcess (text).  A
    process still running after timeout is killed and fails the test."""
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=timeout,
                              env=broker_env())
    except subprocess.TimeoutExpired:
        raise AssertionError("%s still running after %d s" %
                             (" ".join(argv), timeout)) from None


class ChecksCase(BrokerTestCase):
    def tmpdir(self):
        d = tempfile.mkdtemp(prefix="lbt-cc-")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def sock_path(self):
        return os.path.join(self.tmpdir(), "lb.sock")

    def check(self, *args):
        """lockbrokerd -t ARGS."""
        return run([harness.BROKER_BIN, "-t"] + list(args))

    def unix_client(self, path):
        c = UnixClient(path)
        self.addCleanup(c.close)
        return c

    def wait_exit(self, broker, timeout=10.0):
        """The exit code of a broker that must stop by itself."""
        wait_until(lambda: broker.proc.poll() is not None, timeout,
                   what="the broker to exit by itself")
        return broker.proc.returncode

    def owner_ttl(self, client, key):
        r = client.req("OWNER " + key)
        m = re.fullmatch(r"OK \S+ ([0-9]+) [0-9]+", r)
        self.assertIsNotNone(m, "OWNER %s: %r" % (key, r))
        return int(m.group(1))


# ------------------------------------------------------------ addresses --

class TestAddresses(ChecksCase):
    def test_check_tells_good_addresses_from_bad(self):
        """-t refuses, on the command line and in a conf file, exactly the
        addresses start-up cannot use, and names the option."""
        d = self.tmpdir()
        for name, value in BAD_ADDRESSES:
            with self.subTest(name=name, value=value, where="argv"):
                r = self.check("--" + name, value)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn("%s: '%s" % (name, value), r.stderr)
                self.assertNotIn("configuration OK", r.stdout)
            with self.subTest(name=name, value=value, where="file"):
                path = os.path.join(d, "bad.conf")
                with open(path, "w") as f:
                    f.write("# bad\n%s %s\n" % (name, value))
                r = self.check("-c", path)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn("%s:2: %s: '%s" % (path, name, value),
                              r.stderr)
        for name, value in GOOD_ADDRESSES:
            with self.subTest(name=name, value=value):
                r = self.check("--" + name, value)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("configuration OK", r.stdout)

    def test_startup_refuses_bad_addresses_like_check(self):
        """Start-up exits 2 (a bad configuration, not a run-time failure)
        with -t's message, before it listens on anything."""
        for name, value in BAD_ADDRESSES:
            with self.subTest(name=name, value=value):
                port = harness.free_port()
                args = ["-b", "127.0.0.1", "-p", str(port), "-r",
                        self.redis.addr, "--prefix", self.prefix,
                        "--" + name, value]
                checked = self.check(*args)
                r = run([harness.BROKER_BIN] + args, timeout=10)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(r.stderr, checked.stderr)
                self.assertNotIn("listening", r.stderr)
                for mark in harness.SANITIZER_MARKS:
                    self.assertNotIn(mark, r.stderr)


# ---------------------------------------------------------- unix socket --

class TestUnixSocket(ChecksCase):
    def assertServedBy(self, broker, path):
        """The unix socket at path reaches broker: a lock taken over it
        shows up, with its owner, through broker's own TCP port (a broker
        with another prefix would not see it)."""
        u = self.unix_client(path)
        self.assertEqual(u.req("PING"), "OK PONG")
        cid = u.hello()
        key = "unix-" + uuid.uuid4().hex[:8]
        self.assertToken(u.req("ACQUIRE " + key))
        t = self.connect(broker)
        self.assertEqual(t.req("OWNER " + key).split(" ")[1], cid)
        self.assertEqual(u.req("RELEASE " + key), "OK 0")

    def assertRefused(self, path, first):
        """A second broker (another prefix) given path exits 1, says why,
        and leaves the first broker's socket working."""
        other = self.start_broker("-s", path, prefix=self.prefix + "x",
                                  wait_ready=False)
        rc = self.wait_exit(other)
        self.assertEqual(rc, 1, other.log())
        self.assertRegex(other.log(), r"unixsocket %s is in use"
                         % re.escape(path))
        self.assertTrue(stat.S_ISSOCK(os.lstat(path).st_mode))
        self.assertServedBy(first, path)

    def test_second_broker_refuses_live_unixsocket(self):
        path = self.sock_path()
        first = self.start_broker("-s", path)
        self.assertServedBy(first, path)
        self.assertRefused(path, first)
        self.assertTrue(first.alive())
        self.assertEqual(first.stop(), 0)
        self.assertFalse(os.path.exists(path))     # removed at the stop

    def test_stale_socket_of_killed_broker_replaced_live_one_kept(self):
        path = self.sock_path()
        dead = self.start_broker("-s", path)
        dead.kill()                 # no clean-up: the file stays
        self.assertTrue(stat.S_ISSOCK(os.lstat(path).st_mode))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s, \
                self.assertRaises(ConnectionRefusedError):
            s.connect(path)
        second = self.start_broker("-s", path)
        self.assertServedBy(second, path)
        # Replacing is for stale files only: now the path is live.
        self.assertRefused(path, second)
        self.assertIn("removed stale unix socket %s" % path, second.log())

    def first_mode_seen(self, path, perm, timeout=10.0):
        """Start a broker under strace with chmod delayed by 2 s and umask
        0; return (every mode the socket file had while we watched, the
        strace process, the broker's log path).  The old code bound with
        the umask's mode and fixed it with that chmod: the delay holds that
        moment open long enough to be seen every time."""
        logpath = os.path.join(self.tmpdir(), "stderr.log")
        argv = ["strace", "-f", "-qq", "-o", os.devnull,
                "-e", "trace=chmod,fchmodat",
                "-e", "inject=chmod,fchmodat:delay_enter=2000000",
                harness.BROKER_BIN, "-b", "127.0.0.1",
                "-p", str(harness.free_port()), "-r", self.redis.addr,
                "--prefix", self.prefix, "-v", "-s", path,
                "--unixsocketperm", "%04o" % perm]
        # LeakSanitizer cannot run under ptrace; the rest of ASan can.
        env = broker_env(ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:"
                         "abort_on_error=0")
        with open(logpath, "wb") as log, umask(0):
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=log, env=env)
        self.addCleanup(self.stop_traced, proc)
        modes = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                modes.add(stat.S_IMODE(os.lstat(path).st_mode))
            except FileNotFoundError:
                time.sleep(0.002)
                continue
            break
        self.assertTrue(modes, "the socket file never appeared:\n%s"
                        % open(logpath, errors="replace").read())
        # Watch on through the delayed chmod, until the broker serves.
        def serving():
            modes.add(stat.S_IMODE(os.lstat(path).st_mode))
            c = UnixClient(path, timeout=1.0)
            try:
                return c.req("PING") == "OK PONG"
            finally:
                c.close()
        wait_until(serving, timeout, interval=0.01,
                   what="PING over the unix socket")
        return modes, proc, logpath

    def stop_traced(self, proc):
        """SIGTERM the broker strace runs (strace itself waits for it)."""
        if proc.poll() is not None:
            return
        kids = []
        try:
            with open("/proc/%d/task/%d/children" % (proc.pid, proc.pid)) as f:
                kids = [int(p) for p in f.read().split()]
        except OSError:
            pass
        for pid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            for pid in kids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.wait(timeout=5)

    @unittest.skipUnless(shutil.which("strace"), "strace is not installed")
    def test_socket_never_wider_than_unixsocketperm_under_umask_0(self):
        probe = subprocess.run(["strace", "-qq", "-o", os.devnull, "true"],
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, timeout=30)
        if probe.returncode != 0:
            self.skipTest("strace cannot trace here: %s"
                          % probe.stderr.decode(errors="replace").strip())
        path = self.sock_path()
        modes, proc, logpath = self.first_mode_seen(path, 0o600)
        wide = sorted("%04o" % m for m in modes if m & ~0o600)
        self.assertEqual(wide, [], "socket file modes seen: %s"
                         % sorted("%04o" % m for m in modes))
        self.assertEqual(stat.S_IMODE(os.lstat(path).st_mode), 0o600)
        self.stop_traced(proc)
        self.assertEqual(proc.returncode, 0)
        with open(logpath, errors="replace") as f:
            text = f.read()
        for mark in harness.SANITIZER_MARKS:
            self.assertNotIn(mark, text)


# ----------------------------------------------------------- min_ttl_ms --

class TestMinTtl(ChecksCase):
    def test_ttl_below_min_ttl_ms_is_raised_to_it(self):
        b = self.start_broker("--min_ttl_ms", "3000")
        c = self.connect(b)
        self.assertToken(c.req("ACQUIRE k TTL 1"))
        ttl = self.owner_ttl(c, "k")
        self.assertGreater(ttl, 1000)
        self.assertLessEqual(ttl, 3000)
        pttl = self.redis.cli("PTTL", self.lock_key("k"))
        self.assertGreater(pttl, 1000)
        self.assertLessEqual(pttl, 3000)
        # RENEW with a tiny TTL is raised the same way.
        r = c.req("RENEW k TTL 1")
        self.assertRegex(r, r"\AOK [0-9]+\Z")
        self.assertGreater(int(r.split(" ")[1]), 1000)
        self.assertGreater(self.redis.cli("PTTL", self.lock_key("k")), 1000)

    def test_ttl_of_1_ms_is_not_taken_by_another_session(self):
        """With the default floor (250 ms), a lock asked for with TTL 1 is
        granted and stays its holder's: renewals keep it, and a second
        session gets BUSY."""
        b = self.start_broker()
        holder, other = self.connect(b), self.connect(b)
        cid = holder.hello()
        token = self.assertToken(holder.req("ACQUIRE k TTL 1"))
        ttl = self.owner_ttl(holder, "k")
        self.assertGreater(ttl, 1)
        self.assertLessEqual(ttl, 250)
        for _ in range(5):
            time.sleep(0.1)
            self.assertEqual(other.req("ACQUIRE k"), "BUSY")
        r = other.req("OWNER k").split(" ")
        self.assertEqual((r[1], int(r[3])), (cid, token))
        self.assertEqual(holder.req("RELEASE k"), "OK 0")
        self.assertToken(other.req("ACQUIRE k"))

    def test_min_ttl_ms_applies_on_sighup(self):
        conf = os.path.join(self.tmpdir(), "lockbrokerd.conf")
        with open(conf, "w") as f:
            f.write("min_ttl_ms 500\n")
        b = self.start_broker("-c", conf)
        c = self.connect(b)
        self.assertToken(c.req("ACQUIRE before TTL 1"))
        self.assertLessEqual(self.owner_ttl(c, "before"), 500)
        with open(conf, "w") as f:
            f.write("min_ttl_ms 5000\n")
        os.kill(b.pid, signal.SIGHUP)

        def raised():
            d = Client(b.port, timeout=2.0)
            try:
                if not d.req("ACQUIRE after TTL 1").startswith("OK "):
                    return False
                return self.owner_ttl(d, "after") > 2000
            finally:
                d.close()
        wait_until(raised, 5.0, interval=0.05,
                   what="ACQUIRE TTL 1 raised to the new floor")

    def test_ttl_bounds_must_be_in_order(self):
        rows = [
            # min, default, max, exit code, words in the message
            ("1000", "1000", "1000", 0, ()),
            ("1", "30000", "600000", 0, ()),
            ("1001", "1000", "600000", 2, ("min_ttl_ms", "default_ttl_ms")),
            ("250", "1001", "1000", 2, ("default_ttl_ms", "max_ttl_ms")),
            ("5000", "30000", "1000", 2, ("default_ttl_ms", "max_ttl_ms")),
        ]
        for lo, mid, hi, code, words in rows:
            args = ["--min_ttl_ms", lo, "--default_ttl_ms", mid,
                    "--max_ttl_ms", hi]
            with self.subTest(args=args):
                r = self.check(*args)
                self.assertEqual(r.returncode, code, r.stderr)
                for w in words:
                    self.assertIn(w, r.stderr)
        # Start-up refuses the same way.
        r = run([harness.BROKER_BIN, "-b", "127.0.0.1", "-p",
                 str(harness.free_port()), "-r", self.redis.addr,
                 "--min_ttl_ms", "1001", "--default_ttl_ms", "1000"],
                timeout=10)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("min_ttl_ms (1001) exceeds default_ttl_ms (1000)",
                      r.stderr)


if __name__ == "__main__":
    unittest.main()
