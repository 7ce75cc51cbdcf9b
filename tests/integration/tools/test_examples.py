"""
test_examples.py - every client example in examples/ against a real
broker: it waits for a lock another client holds briefly, prints the
fencing token and exits 0; it exits 75 when the lock stays busy and 1 on an
ERR reply or when no broker listens.  With --limit N it takes a permit of
a semaphore beside other holders, with --shared a read hold beside other
readers (protocol 1.1); three lock.py --limit 2 workers are never more
than two inside at once.  lock.py also resumes its session
(RESUME) when a relay between it and the broker resets its connection while
it holds the lock, and keeps the lock with the same token.

An example whose runtime (python3, node, bash, a C compiler) is missing is
skipped with a message saying which.
"""

import os
import re
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import harness
from harness import UUID_RE, BrokerTestCase, wait_until

EXAMPLES = os.path.join(harness.REPO, "examples")
RUN_TIMEOUT = 20.0
TOKEN_RE = r"acquired %s with fencing token ([0-9]+)\nreleased %s\n"


class Relay:
    """A TCP relay from a free port of 127.0.0.1 to a broker, so that a test
    can break a connection the way a network would: cut() resets both
    sides of every connection relayed so far; later ones are relayed as
    usual.  One thread, one select() loop; accepted counts connections."""

    def __init__(self, port):
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.peer = {}            # each relayed socket -> its other side
        self.accepted = 0
        self.cut_asked = threading.Event()
        self.cut_done = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopping:
            if self.cut_asked.is_set():
                for s in self.peer:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                 struct.pack("ii", 1, 0))
                    s.close()
                self.peer.clear()
                self.cut_asked.clear()
                self.cut_done.set()
            ready = select.select([self.listener] + list(self.peer), [], [],
                                  0.02)[0]
            for s in ready:
                if s is self.listener:
                    a = s.accept()[0]
                    b = socket.create_connection(("127.0.0.1", self.target))
                    self.peer[a], self.peer[b] = b, a
                    self.accepted += 1
                elif s in self.peer:      # not dropped earlier this turn
                    try:
                        data = s.recv(65536)
                        if data:
                            self.peer[s].sendall(data)
                    except OSError:
                        data = b""
                    if not data:
                        self._drop(s)

    def _drop(self, s):
        """One side ended: end the other too."""
        other = self.peer.pop(s)
        self.peer.pop(other, None)
        s.close()
        other.close()

    def cut(self, timeout=5.0):
        self.cut_done.clear()
        self.cut_asked.set()
        if not self.cut_done.wait(timeout):
            raise AssertionError("the relay did not cut its connections")

    def close(self):
        self.stopping = True
        self.thread.join(5)
        for s in list(self.peer) + [self.listener]:
            s.close()


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class ExampleTests:
    """The tests every example must pass, mixed into one BrokerTestCase per
    example; each subclass says how to run its example."""

    missing = None         # why argv() is None

    @classmethod
    def argv(cls):
        """The command that runs the example, or None (why in cls.missing)."""
        raise NotImplementedError

    def setUp(self):
        if self.argv() is None:
            self.skipTest(self.missing)
        super().setUp()
        self.b = self.start_broker()

    def run_example(self, *args, port=None):
        env = dict(os.environ)
        env["LOCKBROKER_HOST"] = "127.0.0.1"
        env["LOCKBROKER_PORT"] = str(port or self.b.port)
        p = subprocess.run(self.argv() + [str(a) for a in args],
                           stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, env=env, timeout=RUN_TIMEOUT)
        return p.returncode, p.stdout, p.stderr

    def start_example(self, *args):
        env = dict(os.environ, LOCKBROKER_HOST="127.0.0.1",
                   LOCKBROKER_PORT=str(self.b.port))
        p = subprocess.Popen(self.argv() + [str(a) for a in args],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)

        def reap():
            if p.poll() is None:
                p.kill()
            p.communicate(timeout=10)
        self.addCleanup(reap)
        return p

    def test_waits_for_holder_then_prints_token_and_releases(self):
        holder = self.connect(self.b)
        held = self.assertToken(holder.req("ACQUIRE job"))
        p = self.start_example("job", 10000)
        wait_until(lambda: self.stats(holder)["waiters"] == "1", 10.0,
                   what="the example to wait for the lock")
        self.assertEqual(holder.req("RELEASE job"), "OK 0")
        out, err = p.communicate(timeout=RUN_TIMEOUT)
        self.assertEqual(p.returncode, 0, err)
        m = re.fullmatch(TOKEN_RE % ("job", "job"), out)
        self.assertIsNotNone(m, out)
        self.assertGreater(int(m.group(1)), held)
        self.assertEqual(holder.req("OWNER job"), "OK -")

    def test_free_lock_default_key(self):
        rc, out, err = self.run_example()
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, TOKEN_RE % ("example", "example"))

    def test_busy_exits_75(self):
        holder = self.connect(self.b)
        self.assertToken(holder.req("ACQUIRE job"))
        rc, out, err = self.run_example("job", 200)
        self.assertEqual(rc, 75, err)
        self.assertEqual(out, "")
        self.assertIn("busy", err)

    def test_err_reply_exits_1(self):
        rc, out, err = self.run_example("k" * 300, 0)   # key too long
        self.assertEqual(rc, 1, err)
        self.assertEqual(out, "")
        self.assertIn("ERR BADARG", err)

    def test_limit_takes_a_permit_beside_a_holder_until_all_are_taken(self):
        holder = self.connect(self.b)
        held = self.assertToken(holder.req("ACQUIRE job LIMIT 2"))
        rc, out, err = self.run_example("--limit", 2, "job", 0)
        self.assertEqual(rc, 0, err)
        m = re.fullmatch(TOKEN_RE % ("job", "job"), out)
        self.assertIsNotNone(m, out)
        self.assertNotEqual(int(m.group(1)), held)
        self.assertToken(self.connect(self.b).req("ACQUIRE job LIMIT 2"))
        rc, out, err = self.run_example("--limit", 2, "job", 200)
        self.assertEqual((rc, out), (75, ""), err)
        self.assertIn("busy", err)

    def test_limit_other_than_the_semaphore_s_exits_1(self):
        holder = self.connect(self.b)
        self.assertToken(holder.req("ACQUIRE job LIMIT 3"))
        rc, out, err = self.run_example("--limit", 2, "job", 0)
        self.assertEqual((rc, out), (1, ""), err)
        self.assertIn("ERR BADARG the key is a semaphore with LIMIT 3", err)

    def test_shared_beside_a_reader_and_busy_for_a_writer(self):
        reader = self.connect(self.b)
        self.assertToken(reader.req("ACQUIRE job SHARED"))
        rc, out, err = self.run_example("--shared", "job", 0)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, TOKEN_RE % ("job", "job"))
        rc, out, err = self.run_example("job", 200)     # the writer
        self.assertEqual((rc, out), (75, ""), err)
        self.assertIn("busy", err)
        self.assertRegex(reader.req("OWNER job"), r"\AOK SHARED 1 %s "
                         r"[0-9]+ [0-9]+\Z" % UUID_RE)

    def test_no_broker_exits_1(self):
        rc, out, err = self.run_example("job", 0, port=harness.free_port())
        self.assertEqual(rc, 1, err)
        self.assertEqual(out, "")
        self.assertNotEqual(err, "")


class TestPython(ExampleTests, BrokerTestCase):
    @classmethod
    def argv(cls):
        return [sys.executable, os.path.join(EXAMPLES, "lock.py")]

    def test_dropped_connection_is_resumed_with_the_same_lock(self):
        relay = Relay(self.b.port)
        self.addCleanup(relay.close)
        env = dict(os.environ, LOCKBROKER_HOST="127.0.0.1",
                   LOCKBROKER_PORT=str(relay.port))
        p = subprocess.Popen(self.argv() + ["job", "0", "3000"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
        self.addCleanup(lambda: p.poll() is None and p.kill())
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(p.stdout),
                                  daemon=True)
        reader.start()

        def said(prefix):
            """lock.py's lines so far that start with prefix."""
            found = [l for l in lines if l.startswith(prefix)]
            if not found and p.poll() is not None:
                reader.join(5)
                raise AssertionError("lock.py exited %d; it said %r and %r"
                                     % (p.returncode, lines, p.stderr.read()))
            return found
        got = wait_until(lambda: said("acquired "), 10.0,
                         what="lock.py to take the lock")[0]
        tok = int(re.fullmatch(r"acquired job with fencing token ([0-9]+)\n",
                               got).group(1))
        watcher = self.connect(self.b)
        owner = re.fullmatch(r"OK (%s) [0-9]+ %d" % (UUID_RE, tok),
                             watcher.req("OWNER job"))
        self.assertIsNotNone(owner, "lock.py does not hold job")

        relay.cut()
        wait_until(lambda: said("resumed "), 5.0, what="lock.py to resume")
        self.assertEqual(relay.accepted, 2)
        self.assertRegex(watcher.req("OWNER job"), r"\AOK %s [0-9]+ %d\Z"
                         % (owner.group(1), tok))

        self.assertEqual(p.wait(timeout=RUN_TIMEOUT), 0, p.stderr.read())
        reader.join(5)
        self.assertEqual(lines, [got, "resumed job after a dropped "
                                 "connection\n", "released job\n"])
        self.assertEqual(p.stderr.read(), "")
        self.assertEqual(watcher.req("OWNER job"), "OK -")

    def test_limit_2_workers_are_never_more_than_two_inside(self):
        """The README's rate-limited API: three workers that each hold a
        permit of job LIMIT 2 for 1 s; OWNER, polled meanwhile, never
        lists more than two holders, and lists three tokens in all."""
        procs = [self.start_example("--limit", 2, "job", 10000, 1000)
                 for _ in range(3)]
        watcher = self.connect(self.b)
        seen, tokens = set(), set()
        deadline = time.monotonic() + RUN_TIMEOUT
        while any(p.poll() is None for p in procs) and \
                time.monotonic() < deadline:
            words = watcher.req("OWNER job").split()
            if words[1:2] == ["SEMAPHORE"]:
                self.assertEqual(words[3], "2", words)
                seen.add(int(words[2]))
                tokens.update(words[6::3])
            else:
                self.assertEqual(words, ["OK", "-"])
            time.sleep(0.01)
        for p in procs:
            out, err = p.communicate(timeout=RUN_TIMEOUT)
            self.assertEqual(p.returncode, 0, err)
            self.assertRegex(out, TOKEN_RE % ("job", "job"))
        self.assertEqual(max(seen, default=0), 2,
                         "holders seen at once: %r" % seen)
        self.assertEqual(len(tokens), 3, tokens)


class TestNode(ExampleTests, BrokerTestCase):
    missing = "node is not installed"

    @classmethod
    def argv(cls):
        node = shutil.which("node") or shutil.which("nodejs")
        return None if node is None else [node,
                                          os.path.join(EXAMPLES, "lock.js")]


class TestBash(ExampleTests, BrokerTestCase):
    missing = "bash is not installed"

    @classmethod
    def argv(cls):
        bash = shutil.which("bash")
        return None if bash is None else [bash,
                                          os.path.join(EXAMPLES, "lock.sh")]


class TestC(ExampleTests, BrokerTestCase):
    """lock.c, built once with the project's warnings (any error fails)."""
    missing = "no C compiler (cc, gcc or clang)"
    binary = None

    @classmethod
    def setUpClass(cls):
        cc = shutil.which(os.environ.get("CC") or "cc") or \
            shutil.which("gcc") or shutil.which("clang")
        if cc is None:
            return
        cls.tmp = tempfile.mkdtemp(prefix="lbt-example-c-")
        out = os.path.join(cls.tmp, "lock")
        p = subprocess.run(
            [cc, "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra",
             "-Werror", "-Wshadow", "-Wstrict-prototypes",
             "-Wmissing-prototypes", "-Wformat=2", "-O2", "-o", out,
             os.path.join(EXAMPLES, "lock.c")],
            capture_output=True, text=True, timeout=120)
        cls.build_error = None
        if p.returncode != 0:
            cls.build_error = p.stdout + p.stderr
        cls.binary = out

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "tmp", None):
            shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def argv(cls):
        return None if cls.binary is None else [cls.binary]

    def setUp(self):
        super().setUp()
        if self.build_error is not None:
            self.fail("examples/lock.c does not build:\n" + self.build_error)

