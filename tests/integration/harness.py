"""
harness.py - real processes for the lockbroker integration tests.

Everything here starts real programs and talks to them over sockets, the
way a client would: no mocks.

  Redis   a redis-server on a free 127.0.0.1 port, no persistence; .cli()
          speaks RESP over a socket; stop/restart/pause/resume by pid.
  Broker  a lockbrokerd ($LOCKBROKERD, else build/lockbrokerd) on a free
          port, pointed at a Redis with a unique key prefix; its stderr goes
          to a file that is scanned for sanitizer reports when it stops.
          redis_addr=None starts it without -r (e.g. Sentinel mode, where
          the Redis options come in extra_args).
  Client  one TCP connection to a broker: send lines, read CRLF replies
          with a timeout.

A test module shares one Redis (setUpModule/tearDownModule call
module_redis_start/module_redis_stop); BrokerTestCase flushes it before
each test and gives each test its own key prefix.  Tests that kill or stop
Redis start their own with self.start_redis().
"""

import contextlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BROKER_BIN = os.environ.get("LOCKBROKERD") or os.path.join(
    REPO, "build", "lockbrokerd")
LOCKCTL_BIN = os.environ.get("LOCKCTL") or os.path.join(
    REPO, "build", "lockctl")
REDIS_BIN = os.environ.get("REDIS_SERVER") or shutil.which(
    "redis-server") or "redis-server"

# Sanitizer reports a broker may leave on stderr; any of them fails a test.
SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error:")

UUID_RE = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


# LBT_PORTS=<lo>-<hi> (run.py sets it when it runs modules in two lanes):
# free_port() picks its ports there instead of asking the kernel for one.
# The kernel hands out ports from its ephemeral range (bind to port 0,
# and the source port of every outgoing connection), the same range for
# every process: a port a test leaves free for a moment (Redis or a broker
# killed, to be started again on it) could be taken by another process's
# connection meanwhile.  Each lane gets its own range below the ephemeral
# one, so neither lane nor any outgoing connection lands on the other's.
_port_rng = random.Random()


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    span = os.environ.get("LBT_PORTS")
    if span:
        lo, hi = (int(x) for x in span.split("-"))
        for _ in range(1000):
            port = _port_rng.randint(lo, hi)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
        raise RuntimeError("no free port in LBT_PORTS=%s" % span)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred, timeout, interval=0.02, what="condition"):
    """Poll pred() until it returns a true value; return it, or raise."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = pred()
        except (OSError, EOFError, RedisError):
            last = None
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1f s waiting for %s"
                                 % (timeout, what))
        time.sleep(interval)


def ms_since(t0):
    return (time.monotonic() - t0) * 1000.0


def _proc_where(pid):
    """A process's state and wait channel, from /proc (for messages)."""
    out = []
    for name in ("wchan", "status"):
        try:
            with open("/proc/%d/%s" % (pid, name)) as f:
                text = f.read()
        except OSError:
            continue
        if name == "wchan":
            out.append("wchan " + text.strip())
        else:
            out += [ln.strip() for ln in text.splitlines()
                    if ln.startswith(("State:", "Threads:", "TracerPid:"))]
    return ", ".join(out) or "no /proc entry"


def _kill_wait(proc, sig=signal.SIGKILL, timeout=10.0):
    """Send sig to proc (if alive) and reap it; returns its exit code."""
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
        raise


@contextlib.contextmanager
def environ(**changes):
    """Set (or, with None, remove) environment variables for the block:
    the harness hands os.environ to the processes it starts."""
    old = {k: os.environ.get(k) for k in changes}
    try:
        for k, v in changes.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


# ---------------------------------------------------------------- Redis --

class RedisError(Exception):
    """An error reply (-ERR ...) from Redis."""


def _resp_encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, int):
            a = str(a)
        if isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class _RespReader:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("redis closed the connection")
        self.buf += data

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode("latin-1")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise RedisError("bad RESP line %r" % line)


class Redis:
    """A redis-server on a free port of 127.0.0.1, stopped by pid."""

    def __init__(self, *extra_args):
        self.extra = [str(a) for a in extra_args]
        self.dir = tempfile.mkdtemp(prefix="lbt-redis-")
        self.proc = None
        self.port = None
        for _ in range(5):
            self.port = free_port()
            if self._start():
                return
        self.close()
        raise RuntimeError("redis-server did not start; see its log")

    def argv(self):
        """The command line (a subclass may run it elsewhere: netpart)."""
        return [REDIS_BIN, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--daemonize", "no",
                "--dir", self.dir, "--loglevel", "warning"] + self.extra

    def _start(self, timeout=5.0):
        log = open(os.path.join(self.dir, "redis.log"), "ab")
        self.proc = subprocess.Popen(
            self.argv(),
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if self.cli("PING", timeout=0.5) == "PONG":
                    return True
            except (OSError, EOFError, RedisError):
                pass
            time.sleep(0.01)
        _kill_wait(self.proc)
        return False

    def cli(self, *args, timeout=5.0):
        """Send one command on a fresh connection; return the decoded reply.
        Error replies raise RedisError."""
        with socket.create_connection(("127.0.0.1", self.port),
                                      timeout=timeout) as s:
            s.sendall(_resp_encode(args))
            r = _RespReader(s).reply()
        if isinstance(r, RedisError):
            raise r
        return r

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGKILL and reap: Redis vanishes at once, data and all."""
        if self.proc is not None:
            _kill_wait(self.proc, signal.SIGKILL)

    def restart(self, timeout=5.0):
        """Stop, then start again on the same port (empty data set)."""
        self.stop()
        deadline = time.monotonic() + timeout
        while True:
            if self._start(timeout=max(0.5, deadline - time.monotonic())):
                return
            if time.monotonic() >= deadline:
                raise RuntimeError("redis-server did not restart on port %d"
                                   % self.port)
            time.sleep(0.1)

    def pause(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self):
        if self.alive():
            os.kill(self.proc.pid, signal.SIGCONT)

    def log(self):
        try:
            with open(os.path.join(self.dir, "redis.log"), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def close(self):
        if self.proc is not None:
            self.resume()
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


_module_redis = None


def module_redis_start():
    """For setUpModule: the Redis shared by a module's tests."""
    global _module_redis
    if _module_redis is None:
        _module_redis = Redis()
    return _module_redis


def module_redis_stop():
    """For tearDownModule."""
    global _module_redis
    if _module_redis is not None:
        _module_redis.close()
        _module_redis = None


def shared_redis():
    return module_redis_start()


# --------------------------------------------------------------- Client --

class NoReply(AssertionError, TimeoutError):
    """No reply in time: a test failure (AssertionError) that code polling
    with wait_until can still treat as a timeout (OSError)."""


class Client:
    """One TCP connection to a broker.  Replies must be one line ending in
    CRLF, printable ASCII; readline() returns it without the CRLF."""

    def __init__(self, port, host="127.0.0.1", timeout=5.0):
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.eof = False

    def sendraw(self, data):
        if isinstance(data, str):
            data = data.encode("latin-1")
        self.sock.sendall(data)

    def send(self, line):
        """Send line plus LF."""
        if isinstance(line, str):
            line = line.encode("latin-1")
        self.sendraw(line + b"\n")

    def _recv(self, timeout):
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
        self.buf += data
        return data

    def readline(self, timeout=None):
        """The next reply, without its CRLF.  Raises NoReply if none
        arrives within timeout, EOFError if the broker closed first."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            if self.eof:
                raise EOFError("connection closed; partial data %r"
                               % self.buf)
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise socket.timeout()
                self._recv(left)
            except socket.timeout:
                raise NoReply("no reply within %.3f s (have %r)"
                              % (timeout, self.buf)) from None
        line, self.buf = self.buf.split(b"\n", 1)
        if not line.endswith(b"\r"):
            raise AssertionError("reply not ended by CRLF: %r" % (line + b"\n"))
        line = line[:-1]
        if any(c < 0x20 or c > 0x7e for c in line):
            raise AssertionError("reply has bytes outside printable ASCII: %r"
                                 % line)
        return line.decode("ascii")

    def req(self, line, timeout=None):
        """Send one request line, return its reply."""
        self.send(line)
        return self.readline(timeout)

    def timed_req(self, line, timeout=None):
        """(reply, milliseconds it took)."""
        t0 = time.monotonic()
        r = self.req(line, timeout)
        return r, ms_since(t0)

    def no_reply(self, within):
        """True if nothing at all arrives (and no close) within seconds."""
        if self.buf:
            return False
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                if self._recv(deadline - time.monotonic()):
                    return False
            except socket.timeout:
                return True
            if self.eof:
                return False
        return True

    def wait_closed(self, timeout=2.0):
        """True once the broker has closed the connection (EOF or reset)
        within timeout; what it sent before stays in the buffer."""
        deadline = time.monotonic() + timeout
        while not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                self._recv(left)
            except socket.timeout:
                return False
        return True

    def closed_by_peer(self, timeout=2.0):
        """True once the broker has closed the connection (EOF or reset)
        within timeout and sent nothing more."""
        return self.wait_closed(timeout) and self.buf == b""

    def hello(self, name=None):
        """HELLO; returns the client-id."""
        r = self.req("HELLO" if name is None else "HELLO " + name)
        m = re.fullmatch(r"OK (%s) lockbroker/\S+" % UUID_RE, r)
        if not m:
            raise AssertionError("bad HELLO reply %r" % r)
        return m.group(1)

    def reset(self):
        """Close with an RST (SO_LINGER 0) instead of a FIN."""
        import struct
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                             struct.pack("ii", 1, 0))
        self.close()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class UnixClient(Client):
    """A Client over AF_UNIX."""

    def __init__(self, path, timeout=5.0):
        self.timeout = timeout
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        self.eof = False


def parse_stats(reply):
    """'OK a=1 b=x' -> {'a': '1', 'b': 'x'}."""
    words = reply.split(" ")
    if words[0] != "OK":
        raise AssertionError("STATS reply %r" % reply)
    out = {}
    for w in words[1:]:
        if "=" not in w:
            raise AssertionError("STATS word %r is not name=value in %r"
                                 % (w, reply))
        k, v = w.split("=", 1)
        out[k] = v
    return out


# --------------------------------------------------------------- Broker --

class Broker:
    """A lockbrokerd on a free port.  Ready when PING answers OK PONG and
    STATS shows redis=up.  redis_addr None: no -r is passed."""

    bind = "127.0.0.1"          # netpart's listen on all of their host's

    def __init__(self, redis_addr, prefix, *extra_args, wait_ready=True,
                 ready_timeout=5.0, auth=None):
        if not os.access(BROKER_BIN, os.X_OK):
            raise AssertionError("broker binary %s is missing (build it, or "
                                 "set LOCKBROKERD)" % BROKER_BIN)
        self.redis_addr = redis_addr
        self.prefix = prefix
        self.extra = [str(a) for a in extra_args]
        # With --auth_token the readiness probe must AUTH before STATS;
        # auth= gives the token to use instead (an acl_file app's).
        self.auth = auth
        if auth is None and "--auth_token" in self.extra[:-1]:
            self.auth = self.extra[self.extra.index("--auth_token") + 1]
        self.dir = tempfile.mkdtemp(prefix="lbt-broker-")
        self.logpath = os.path.join(self.dir, "stderr.log")
        self.proc = None
        self.rc = None
        self.checked = False
        for attempt in range(3):
            self.port = free_port()
            self._spawn()
            if not wait_ready:
                return
            try:
                self.wait_ready(ready_timeout)
                return
            except AssertionError:
                # Lost a race for the port: try another one.
                if (self.proc.poll() is not None and attempt < 2 and
                        "in use" in self.log()):
                    continue
                self.kill(check=False)
                shutil.rmtree(self.dir, ignore_errors=True)
                raise

    def _spawn(self):
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:halt_on_error=1:"
                       "abort_on_error=0")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        redis = [] if self.redis_addr is None else ["-r", self.redis_addr]
        argv = self.launcher() + (
            [BROKER_BIN, "-b", self.bind, "-p", str(self.port)] +
            redis + ["--prefix", self.prefix, "-v"] + self.extra)
        with open(self.logpath, "ab") as log:
            log.write(("--- %s\n" % " ".join(argv)).encode())
            log.flush()
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, env=env)
        self.rc = None
        self.checked = False

    def launcher(self):
        """What the command line runs under (netpart: ip netns exec)."""
        return []

    def wait_ready(self, timeout=5.0):
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("broker exited with %s during start-up:"
                                     "\n%s" % (self.proc.returncode,
                                               self.log()))
            try:
                c = self.client(timeout=1.0)
            except OSError:
                return False
            try:
                if c.req("PING") != "OK PONG":
                    return False
                if getattr(self, "auth", None) and \
                        c.req("AUTH " + self.auth) != "OK":
                    return False
                return "redis=up" in c.req("STATS").split(" ")
            except (OSError, EOFError):
                return False
            finally:
                c.close()
        try:
            wait_until(ready, timeout, interval=0.02,
                       what="broker ready (PING and STATS redis=up)")
        except AssertionError as e:
            if "timed out" not in str(e):
                raise
            raise AssertionError("%s\nbroker log:\n%s" % (e, self.log()))

    def client(self, timeout=5.0):
        return Client(self.port, timeout=timeout)

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log(self):
        try:
            with open(self.logpath, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def check_log(self):
        """Fail if the broker's stderr holds a sanitizer report."""
        text = self.log()
        for mark in SANITIZER_MARKS:
            if mark in text:
                raise AssertionError("broker stderr has %r:\n%s"
                                     % (mark, text))

    def stop(self, timeout=10.0, check=True):
        """SIGTERM and reap.  Returns the exit code; with check, fails
        unless it is 0 and the log is free of sanitizer reports."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.resume()
            try:
                self.rc = _kill_wait(self.proc, signal.SIGTERM, timeout)
            except subprocess.TimeoutExpired:
                # seen now and then under ASan on a loaded machine: the
                # broker logged "stopped" and returned from main, and the
                # leak check at exit took longer; give it as long again,
                # and say where it was if it still has not ended
                where = _proc_where(self.proc.pid)
                try:
                    self.rc = self.proc.wait(timeout=2 * timeout)
                    sys.stderr.write("harness: broker :%s took over %.0f s "
                                     "to exit after SIGTERM (%s)\n"
                                     % (self.port, timeout, where))
                except subprocess.TimeoutExpired:
                    raise AssertionError(
                        "broker ignored SIGTERM for %.0f s (%s):\n%s"
                        % (3 * timeout, _proc_where(self.proc.pid),
                           self.log())) from None
        else:
            self.rc = self.proc.returncode
        if check and not self.checked:
            self.checked = True
            self.check_log()
            if self.rc != 0:
                raise AssertionError("broker exited with %s, not 0:\n%s"
                                     % (self.rc, self.log()))
        return self.rc

    def kill(self, check=True):
        """SIGKILL and reap (no clean-up runs in the broker)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.rc = _kill_wait(self.proc, signal.SIGKILL)
            self.checked = True
        if check:
            self.check_log()
        return self.rc

    def pause(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self):
        if self.alive():
            os.kill(self.proc.pid, signal.SIGCONT)

    def close(self):
        """For cleanups: stop if still running (checking exit code and log),
        then remove the temp dir."""
        try:
            if self.alive():
                self.stop()
            elif not self.checked:
                self.checked = True
                self.check_log()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


# ------------------------------------------------------------ test case --

class BrokerTestCase(unittest.TestCase):
    """Base class: the module's shared Redis (flushed before each test), a
    unique prefix per test, and helpers that clean up after themselves."""

    def setUp(self):
        self.redis = shared_redis()
        self.redis.cli("FLUSHALL")
        self.prefix = "lbt" + uuid.uuid4().hex[:12]

    def start_redis(self, *extra):
        r = Redis(*extra)
        self.addCleanup(r.close)
        return r

    def start_broker(self, *extra, redis=None, prefix=None, cls=None, **kw):
        redis = redis or self.redis
        b = (cls or Broker)(redis.addr, prefix or self.prefix, *extra, **kw)
        self.addCleanup(b.close)
        return b

    def connect(self, broker, timeout=5.0):
        c = broker.client(timeout)
        self.addCleanup(c.close)
        return c

    def lock_key(self, key, prefix=None):
        return "%s:lock:%s" % (prefix or self.prefix, key)

    def stats(self, client):
        return parse_stats(client.req("STATS"))

    def assertErr(self, reply, code):
        self.assertRegex(reply, r"\AERR %s [ -~]+\Z" % code,
                         "expected ERR %s <text>" % code)

    def assertToken(self, reply):
        """Reply is OK <token>; returns the token as int."""
        m = re.fullmatch(r"OK ([0-9]+)", reply)
        self.assertIsNotNone(m, "expected OK <token>, got %r" % reply)
        return int(m.group(1))
