"""
test_ops.py - what an operator relies on: the systemd unit, the man page,
"make install", configuration checking (-t, -h), readiness and state
notifications to systemd (sd_notify), reload on SIGHUP and the unix socket
listener.

The docs-in-sync tests parse option names from conf/lockbrokerd.conf, the
-h output and the man page, so adding an option to the options table
without documenting it everywhere fails here.
"""

import filecmp
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
from harness import (REPO, BrokerTestCase, Client, Redis, UnixClient,
                     environ, umask, wait_until)

UNIT = os.path.join(REPO, "systemd", "lockbrokerd.service")
MANPAGE = os.path.join(REPO, "daemon", "lockbrokerd.8")
CONF = os.path.join(REPO, "conf", "lockbrokerd.conf")
PREFIX = "/usr/local"
INSTALLED_BIN = PREFIX + "/sbin/lockbrokerd"
INSTALLED_CONF = PREFIX + "/etc/lockbroker/lockbrokerd.conf"
FLAGS = ("-c", "-b", "-p", "-r", "-s", "-t", "-v", "-h", "-V")


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


def run(argv, timeout=60, **kw):
    """Run argv to completion; returns the CompletedProcess (text)."""
    return subprocess.run(argv, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout, **kw)


def broker_bin():
    return harness.BROKER_BIN


def conf_option_names(path=CONF):
    """Names set by the non-comment lines of a conf file, in order."""
    names = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                names.append(line.split()[0])
    return names


def help_text():
    r = run([broker_bin(), "-h"])
    if r.returncode != 0:
        raise AssertionError("-h exited %d: %s" % (r.returncode, r.stderr))
    return r.stdout


def help_option_names(text):
    """Option names of the options table as -h lists them."""
    return re.findall(r"^ +(?:--)?([a-z][a-z0-9_]*) {2,}\S", text, re.M)


def unit_lines(path=UNIT):
    with open(path) as f:
        return f.read().splitlines()


def unit_settings(path=UNIT):
    """{key: [values...]} of the unit's assignments (all sections)."""
    out = {}
    for line in unit_lines(path):
        line = line.strip()
        if not line or line[0] in "#;[" or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out.setdefault(k.strip(), []).append(v.strip())
    return out


class ConfBroker(harness.Broker):
    """A broker whose options come from a conf file it reads with -c.

    With conf=None the conf file is written into the broker's temp dir
    with bind, port, redis and prefix plus `settings`, and can be rewritten
    with rewrite() for a reload.  With conf=PATH that file is used as is,
    and bind/port/redis/prefix are given on the command line.  No -v: the
    conf's log_level counts.  `binary` replaces $LOCKBROKERD."""

    def __init__(self, redis_addr, prefix, *extra_args, settings=None,
                 conf=None, binary=None, **kw):
        self.settings = dict(settings or {})
        self.given_conf = conf
        self.binary = binary or harness.BROKER_BIN
        self.confpath = None
        super().__init__(redis_addr, prefix, *extra_args, **kw)

    def write_conf(self):
        lines = ["# written by test_ops.py",
                 "bind 127.0.0.1",
                 "port %d" % self.port,
                 "redis %s" % self.redis_addr,
                 "prefix %s" % self.prefix]
        for k, v in self.settings.items():
            lines.append('%s "%s"' % (k, v) if v == "" else "%s %s" % (k, v))
        tmp = self.confpath + ".tmp"
        with open(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, self.confpath)

    def rewrite(self, **settings):
        """Change settings in the conf file (for a SIGHUP)."""
        self.settings.update(settings)
        self.write_conf()

    def _spawn(self):
        if self.given_conf:
            argv = [self.binary, "-c", self.given_conf, "-b", "127.0.0.1",
                    "-p", str(self.port), "-r", self.redis_addr,
                    "--prefix", self.prefix]
        else:
            self.confpath = os.path.join(self.dir, "lockbrokerd.conf")
            self.write_conf()
            argv = [self.binary, "-c", self.confpath]
        argv += self.extra
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:halt_on_error=1:"
                       "abort_on_error=0")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        with open(self.logpath, "ab") as log:
            log.write(("--- %s\n" % " ".join(argv)).encode())
            log.flush()
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, env=env)
        self.rc = None
        self.checked = False

    def signal(self, sig):
        os.kill(self.proc.pid, sig)

    def log_since(self, mark):
        return self.log()[mark:]


class NotifySocket:
    """The receiving end of $NOTIFY_SOCKET, as systemd binds it: a unix
    datagram socket at a path, or abstract with '@name'.  Each datagram
    holds newline-separated VAR=value assignments; they are kept in
    arrival order in self.msgs."""

    def __init__(self, abstract=False):
        self.dir = tempfile.mkdtemp(prefix="lbt-notify-")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = "lbt-notify-" + uuid.uuid4().hex
            self.sock.bind("\0" + name)
            self.env = "@" + name
        else:
            path = os.path.join(self.dir, "notify")
            self.sock.bind(path)
            self.env = path
        self.msgs = []

    def _recv(self, timeout):
        self.sock.settimeout(max(timeout, 0.001))
        try:
            data = self.sock.recv(4096)
        except socket.timeout:
            return False
        self.msgs.extend(l for l in data.decode("utf-8", "replace")
                         .split("\n") if l)
        return True

    def wait_for(self, pred, timeout, start=0):
        """Index of the first message at or after start for which pred
        holds, reading datagrams until timeout; raises if none comes."""
        deadline = time.monotonic() + timeout
        i = start
        while True:
            while i < len(self.msgs):
                if pred(self.msgs[i]):
                    return i
                i += 1
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no matching notification within %.1f "
                                     "s; got %r" % (timeout, self.msgs))
            self._recv(left)

    def wait_msg(self, msg, timeout, start=0):
        return self.wait_for(lambda m: m == msg, timeout, start)

    def collect(self, within):
        """Read whatever arrives during `within` seconds."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            self._recv(deadline - time.monotonic())
        return self.msgs

    def close(self):
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class OpsCase(BrokerTestCase):
    def start_conf_broker(self, *extra, redis=None, **kw):
        redis = redis or self.redis
        b = ConfBroker(redis.addr, self.prefix, *extra, **kw)
        self.addCleanup(b.close)
        return b

    def notify_socket(self, abstract=False):
        n = NotifySocket(abstract)
        self.addCleanup(n.close)
        return n

    def tmpdir(self):
        d = tempfile.mkdtemp(prefix="lbt-ops-")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def ping(self, port):
        c = Client(port, timeout=2.0)
        try:
            return c.req("PING")
        finally:
            c.close()


# ------------------------------------------------------------ the unit --

@unittest.skipUnless(shutil.which("systemd-analyze"),
                     "systemd-analyze is not installed")
class TestSystemdUnit(OpsCase):
    def test_unit_verifies(self):
        """systemd-analyze verify, on a copy whose ExecStart is the broker
        under test (the installed path need not exist here) and with the
        man page of Documentation= findable."""
        d = self.tmpdir()
        with open(UNIT) as f:
            text = f.read()
        self.assertIn(INSTALLED_BIN, text)
        unit = os.path.join(d, "lockbrokerd.service")
        with open(unit, "w") as f:
            f.write(text.replace(INSTALLED_BIN,
                                 os.path.abspath(broker_bin())))
        os.makedirs(os.path.join(d, "man", "man8"))
        shutil.copy(MANPAGE, os.path.join(d, "man", "man8"))
        argv = ["systemd-analyze", "verify"]
        if not shutil.which("man"):
            argv.append("--man=no")
        r = run(argv + [unit], env=dict(os.environ,
                                        MANPATH=os.path.join(d, "man")))
        out = r.stdout + r.stderr
        self.assertEqual(r.returncode, 0, out)
        # Unknown keys and bad values are only warnings: fail on any
        # message about our unit.
        self.assertNotIn("lockbrokerd", out)

    def test_security_exposure_is_ok(self):
        r = run(["systemd-analyze", "security", "--offline=yes", UNIT])
        out = r.stdout + r.stderr
        if r.returncode != 0 and "offline" in out:
            self.skipTest("systemd-analyze has no --offline")
        m = re.search(r"Overall exposure level for \S+: ([0-9.]+) (\w+)",
                      out)
        self.assertIsNotNone(m, out)
        self.assertLess(float(m.group(1)), 2.0, out)
        self.assertEqual(m.group(2), "OK", out)

    def test_unit_essentials(self):
        s = unit_settings()
        self.assertEqual(s.get("Type"), ["notify"])
        self.assertEqual(s.get("ExecStart"), [
            "%s -c %s" % (INSTALLED_BIN, INSTALLED_CONF)])
        self.assertEqual(s.get("ExecReload"), ["/bin/kill -HUP $MAINPID"])
        self.assertEqual(s.get("Restart"), ["on-failure"])
        self.assertEqual(s.get("DynamicUser"), ["yes"])
        self.assertEqual(s.get("RuntimeDirectory"), ["lockbroker"])
        self.assertEqual(s.get("CapabilityBoundingSet"), [""])
        self.assertEqual(s.get("AmbientCapabilities"), [""])
        self.assertEqual(s.get("UMask"), ["0077"])
        fams = " ".join(s.get("RestrictAddressFamilies", [])).split()
        self.assertEqual(sorted(fams), ["AF_INET", "AF_INET6", "AF_UNIX"])

    def test_nofile_limit_fits_max_sessions(self):
        """LimitNOFILE covers the shipped max_sessions plus the daemon's
        reserve of 64, so it never needs to raise its own limit."""
        limit = unit_settings()["LimitNOFILE"][-1].split(":")[0]
        with open(CONF) as f:
            m = re.search(r"^max_sessions\s+(\d+)", f.read(), re.M)
        self.assertGreaterEqual(int(limit), int(m.group(1)) + 64)

    def test_every_hardening_line_is_commented(self):
        lines = unit_lines()
        start = next(i for i, l in enumerate(lines) if "Hardening" in l)
        end = next(i for i, l in enumerate(lines)
                   if i > start and l.startswith("["))
        for i in range(start + 1, end):
            l = lines[i].strip()
            if l and not l.startswith("#"):
                self.assertTrue(lines[i - 1].lstrip().startswith("#"),
                                "no comment line above %r" % l)


# -------------------------------------------------------- the man page --

class TestManPage(OpsCase):
    def test_lints_clean(self):
        """mandoc -T lint (any level, style included) or, without mandoc,
        groff -ww.  Only "referenced manual not found" is let through:
        whether lockctl(1) is installed is not the page's business."""
        if shutil.which("mandoc"):
            r = run(["mandoc", "-T", "lint", "-W", "style", MANPAGE])
            msgs = [l for l in (r.stdout + r.stderr).splitlines()
                    if MANPAGE in l and
                    "referenced manual not found" not in l]
            self.assertEqual(msgs, [])
            self.assertLessEqual(r.returncode, 1)
        elif shutil.which("groff"):
            r = run(["groff", "-ww", "-mandoc", "-z", MANPAGE])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stderr, "")
        else:
            self.skipTest("neither mandoc nor groff is installed")

    def test_documents_every_option_and_flag(self):
        with open(MANPAGE) as f:
            page = f.read()
        documented = set(re.findall(r"^\.It Cm ([a-z0-9_]+)", page, re.M))
        table = set(help_option_names(help_text()))
        self.assertTrue(table)
        self.assertEqual(sorted(table - documented), [],
                         "options of -h missing from the man page")
        self.assertEqual(sorted(documented - table), [],
                         "man page options that -h does not know")
        flags = set(re.findall(r"^\.It Fl ([A-Za-z])\b", page, re.M))
        for flag in FLAGS:
            self.assertIn(flag[1], flags, "%s is not in the man page" % flag)

    def test_sighup_list_matches_help(self):
        """The man page names exactly the options -h marks as applied by
        SIGHUP."""
        with open(MANPAGE) as f:
            page = f.read()
        m = re.search(r"^\.It Dv SIGHUP\n(.*?)^\.(?:It|El)\b", page,
                      re.M | re.S)
        self.assertIsNotNone(m)
        in_page = set(re.findall(r"^\.Cm ([a-z0-9_]+)", m.group(1), re.M))
        live = set(re.findall(r"^ +(?:--)?([a-z][a-z0-9_]*) .*SIGHUP",
                              help_text(), re.M))
        self.assertTrue(live)
        self.assertEqual(sorted(in_page), sorted(live))


# ------------------------------------------------------------- install --

class TestInstall(OpsCase):
    def test_make_install_layout_and_installed_broker_runs(self):
        dest = self.tmpdir()
        argv = ["make", "-C", REPO, "--no-print-directory", "install",
                "DESTDIR=" + dest, "PREFIX=" + PREFIX]
        bindir = os.path.dirname(os.path.abspath(broker_bin()))
        if os.path.relpath(bindir, REPO) == os.path.join("build", "asan"):
            argv.append("SANITIZE=1")
        r = run(argv, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        root = dest + PREFIX
        files = {
            "sbin/lockbrokerd": None,
            "etc/lockbroker/lockbrokerd.conf": CONF,
            "lib/systemd/system/lockbrokerd.service": UNIT,
            "share/man/man8/lockbrokerd.8": MANPAGE,
        }
        for rel, src in files.items():
            path = os.path.join(root, rel)
            self.assertTrue(os.path.isfile(path), "%s not installed" % rel)
            if src:
                self.assertTrue(filecmp.cmp(path, src, shallow=False), rel)
        binary = os.path.join(root, "sbin", "lockbrokerd")
        self.assertTrue(os.access(binary, os.X_OK))
        # The installed unit points at the installed binary and conf.
        unit = unit_settings(os.path.join(
            root, "lib/systemd/system/lockbrokerd.service"))
        self.assertEqual(unit["ExecStart"][-1].split()[0], INSTALLED_BIN)
        self.assertIn(INSTALLED_CONF, unit["ExecStart"][-1].split())

        conf = os.path.join(root, "etc/lockbroker/lockbrokerd.conf")
        r = run([binary, "-t", "-c", conf])
        self.assertEqual(r.returncode, 0, r.stderr)
        b = self.start_conf_broker(conf=conf, binary=binary)
        c = self.connect(b)
        self.assertEqual(c.req("PING"), "OK PONG")
        self.assertToken(c.req("ACQUIRE installed"))
        self.assertEqual(b.stop(), 0)


# --------------------------------------------------- configuration check --

class TestConfigCheck(OpsCase):
    def write(self, text):
        d = self.tmpdir()
        path = os.path.join(d, "test.conf")
        with open(path, "w") as f:
            f.write(text)
        return path

    def assertBadConf(self, text, line, what):
        path = self.write(text)
        r = run([broker_bin(), "-t", "-c", path])
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertRegex(r.stderr, r"%s:%d: \S" % (re.escape(path), line))
        self.assertIn(what, r.stderr)

    def test_shipped_conf_checks_ok(self):
        r = run([broker_bin(), "-t", "-c", CONF])
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_good_conf_checks_ok(self):
        path = self.write("# a comment\n\n  port 7799\nauth_token \"s3cret\"\n"
                          "unixsocketperm 0600\nlog_level debug\n")
        r = run([broker_bin(), "-t", "-c", path])
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_unknown_option_exits_2_with_file_and_line(self):
        self.assertBadConf("port 7799\n# comment\nno_such_option 1\n", 3,
                           "no_such_option")

    def test_out_of_range_value_exits_2_with_file_and_line(self):
        self.assertBadConf("\nport 70000\n", 2, "port")

    def test_bad_mode_exits_2_with_file_and_line(self):
        self.assertBadConf("unixsocketperm 0999\n", 1, "unixsocketperm")

    def test_bad_command_line_value_exits_2(self):
        r = run([broker_bin(), "-t", "-c", CONF, "--max_line", "1"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("max_line", r.stderr)

    def test_help_lists_every_conf_option(self):
        """Every option the shipped conf sets is in -h: docs and the
        options table stay in sync."""
        names = conf_option_names()
        self.assertGreater(len(names), 10)
        listed = help_option_names(help_text())
        for name in names:
            self.assertIn(name, listed, "%s is in the conf, not in -h" % name)
        for name in listed:
            self.assertIn(name, names, "%s is in -h, not in the conf" % name)

    def test_help_lists_every_flag(self):
        text = help_text()
        for flag in FLAGS:
            self.assertRegex(text, r"(?m)^ +%s\b" % re.escape(flag),
                             "%s is missing from -h" % flag)


# ----------------------------------------------------------- sd_notify --

class TestNotify(OpsCase):
    def assertReadyMeansServing(self, n, b, timeout=10.0):
        """READY=1 arrives, and at that moment the broker already answers
        PING (first try) and has Redis up."""
        n.wait_msg("READY=1", timeout)
        c = self.connect(b)
        self.assertEqual(c.req("PING"), "OK PONG")
        self.assertEqual(self.stats(c)["redis"], "up")

    def start_notified(self, abstract=False, redis=None, **kw):
        n = self.notify_socket(abstract)
        with environ(NOTIFY_SOCKET=n.env):
            b = self.start_conf_broker(redis=redis, wait_ready=False, **kw)
        return n, b

    def test_ready_after_serving_path_socket(self):
        n, b = self.start_notified()
        self.assertReadyMeansServing(n, b)

    def test_ready_after_serving_abstract_socket(self):
        n, b = self.start_notified(abstract=True)
        self.assertReadyMeansServing(n, b)

    def test_status_while_redis_down_then_ready(self):
        r = Redis()
        self.addCleanup(r.close)
        r.stop()                    # its port, with nothing listening
        n, b = self.start_notified(redis=r)
        i = n.wait_for(lambda m: m.startswith("STATUS=") and
                       "redis" in m.lower(), 5.0)
        # Serving clients, but not ready while Redis is down.
        wait_until(lambda: self.ping(b.port) == "OK PONG", 5.0,
                   what="PING while Redis is down")
        self.assertNotIn("READY=1", n.collect(1.5))
        r.restart()
        self.assertReadyMeansServing(n, b, timeout=10.0)
        self.assertLess(i, n.msgs.index("READY=1"))

    def test_sighup_reloading_then_ready(self):
        n, b = self.start_notified()
        n.wait_msg("READY=1", 10.0)
        start = len(n.msgs)
        b.signal(signal.SIGHUP)
        i = n.wait_msg("RELOADING=1", 5.0, start)
        n.wait_msg("READY=1", 5.0, i + 1)
        self.assertEqual(self.ping(b.port), "OK PONG")

    def test_sigterm_stopping(self):
        n, b = self.start_notified(abstract=True)
        n.wait_msg("READY=1", 10.0)
        start = len(n.msgs)
        b.signal(signal.SIGTERM)
        n.wait_msg("STOPPING=1", 5.0, start)
        self.assertEqual(b.stop(), 0)

    def test_no_notify_socket_is_fine(self):
        with environ(NOTIFY_SOCKET=None):
            b = self.start_conf_broker()
        self.assertEqual(self.ping(b.port), "OK PONG")
        self.assertEqual(b.stop(), 0)


# --------------------------------------------------------------- reload --

class TestReload(OpsCase):
    def wait_auth_required(self, b, timeout=5.0):
        def needs_auth():
            c = Client(b.port, timeout=2.0)
            try:
                r = c.req("ACQUIRE reload:probe")
                if r.startswith("OK"):
                    c.req("RELEASE reload:probe")
                return r.startswith("ERR NOAUTH")
            finally:
                c.close()
        wait_until(needs_auth, timeout, interval=0.05,
                   what="AUTH required after SIGHUP")

    def test_sighup_applies_auth_token_limits_and_log_level(self):
        b = self.start_conf_broker(settings={
            "log_level": "info", "max_locks_per_session": 1000,
            "auth_token": ""})
        c = self.connect(b)
        c.hello("before-reload")
        self.assertToken(c.req("ACQUIRE a"))
        self.assertToken(c.req("ACQUIRE b"))
        self.assertToken(c.req("ACQUIRE c"))
        self.assertNotIn("before-reload", b.log())   # info: no debug line

        b.rewrite(log_level="debug", max_locks_per_session=2,
                  auth_token="s3cret")
        b.signal(signal.SIGHUP)
        self.wait_auth_required(b)

        d = self.connect(b)
        self.assertEqual(d.req("PING"), "OK PONG")
        self.assertErr(d.req("ACQUIRE x"), "NOAUTH")
        self.assertErr(d.req("HELD"), "NOAUTH")
        self.assertErr(d.req("AUTH wrong"), "NOAUTH")
        self.assertEqual(d.req("AUTH s3cret"), "OK")
        d.hello("after-reload")
        wait_until(lambda: "after-reload" in b.log(), 2.0,
                   what="a debug line once log_level is debug")
        self.assertToken(d.req("ACQUIRE x"))
        self.assertToken(d.req("ACQUIRE y"))
        self.assertErr(d.req("ACQUIRE z"), "LIMIT")
        # The old session keeps its locks.
        self.assertEqual(c.req("OWNER a").split(" ")[0], "OK")
        self.assertNotEqual(c.req("OWNER a"), "OK -")
        self.assertEqual(b.stop(), 0)

    def test_sighup_logs_options_that_need_a_restart(self):
        b = self.start_conf_broker()
        old_port = b.port
        mark = len(b.log())
        b.rewrite(port=harness.free_port(), max_line=8192,
                  auth_token="t0ken")
        b.signal(signal.SIGHUP)
        self.wait_auth_required(b)
        log = b.log_since(mark)
        self.assertRegex(log, r"port\b.*restart")
        self.assertRegex(log, r"max_line\b.*restart")
        self.assertEqual(self.ping(old_port), "OK PONG")

    def test_sighup_with_a_bad_conf_keeps_running(self):
        b = self.start_conf_broker()
        mark = len(b.log())
        with open(b.confpath, "a") as f:
            f.write("no_such_option 1\n")
        b.signal(signal.SIGHUP)
        wait_until(lambda: "no_such_option" in b.log_since(mark), 5.0,
                   what="the reload error logged")
        self.assertTrue(b.alive())
        c = self.connect(b)
        self.assertToken(c.req("ACQUIRE still-serving"))
        self.assertEqual(b.stop(), 0)


# ---------------------------------------------------------- unix socket --

class TestUnixSocket(OpsCase):
    def start_unix(self, *extra, **kw):
        path = os.path.join(self.tmpdir(), "lb.sock")
        # A umask like the unit's UMask=0077: the mode must still come out
        # as unixsocketperm says.
        with umask(0o077):
            b = self.start_broker("-s", path, *extra, **kw)
        return b, path

    def unix_client(self, path):
        c = UnixClient(path)
        self.addCleanup(c.close)
        return c

    def test_ping_over_unix_socket_beside_tcp(self):
        b, path = self.start_unix()
        u = self.unix_client(path)
        self.assertEqual(u.req("PING"), "OK PONG")
        self.assertEqual(self.ping(b.port), "OK PONG")
        # The same broker: a lock taken over one is seen over the other.
        cid = u.hello()
        self.assertToken(u.req("ACQUIRE unix:k"))
        t = self.connect(b)
        self.assertEqual(t.req("OWNER unix:k").split(" ")[1], cid)
        self.assertEqual(t.req("ACQUIRE unix:k"), "BUSY")

    def test_default_mode_is_0660(self):
        b, path = self.start_unix()
        st = os.stat(path)
        self.assertTrue(stat.S_ISSOCK(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o660)

    def test_unixsocketperm_sets_mode(self):
        b, path = self.start_unix("--unixsocketperm", "0600")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.assertEqual(self.unix_client(path).req("PING"), "OK PONG")

    def test_stale_socket_file_is_replaced(self):
        path = os.path.join(self.tmpdir(), "lb.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.close()                   # leaves the file behind, like a crash
        b = self.start_broker("-s", path)
        self.assertEqual(self.unix_client(path).req("PING"), "OK PONG")


if __name__ == "__main__":
    unittest.main()
