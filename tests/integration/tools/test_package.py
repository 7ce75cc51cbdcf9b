"""
test_package.py - the Debian package (make deb, debian/): what it holds,
and a whole install, upgrade, remove and purge with dpkg on this machine.

The module builds the package once with `make deb` (debhelper, through
the Makefile, lintian at the end: its errors fail the build).  The build
tests need dpkg-buildpackage; the install test needs root too, and leaves
the machine as it found it: it purges the package and deletes the
lockbroker user it made, even when an assertion fails.  It does not run
when the package is installed already (it would replace the machine's
own), nor when /etc/lockbroker or /var/lib/lockbroker is there (a purge
would remove it).

There is no running systemd here, so the install test cannot watch a
unit start.  What it checks instead: the wants symlink and `systemctl
is-enabled` (which works without systemd), and what the maintainer
scripts ask of systemd on a host that runs it: each dpkg call runs in a
private mount namespace whose /run is a fresh tmpfs holding
/run/systemd/system (how the scripts tell that systemd runs), with
systemctl and deb-systemd-invoke replaced by stand-ins that write down
their arguments (systemctl's calls on files alone, such as the preset
that enables the unit, go on to the real one).  So "enabled but not
started" is the absence of a start in that record, not the absence of a
process.

make test runs this module once (run.py ONCE): the sanitizer build has
nothing to add to it.
"""

import fcntl
import grp
import hashlib
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import unittest
import uuid

import harness
from harness import REPO, Client, wait_until
from test_ops import unit_settings

PACKAGE = "lockbrokerd"
DEB_DIR = os.path.join(REPO, "build", "deb")
USER = "lockbroker"
ETC = "/etc/lockbroker"
CONF = ETC + "/lockbrokerd.conf"
HOME = "/var/lib/lockbroker"
UNIT = "/lib/systemd/system/lockbrokerd.service"
WANTS = "/etc/systemd/system/multi-user.target.wants/lockbrokerd.service"
SOURCE_UNIT = os.path.join(REPO, "systemd", "lockbrokerd.service")
SOURCE_CONF = os.path.join(REPO, "conf", "lockbrokerd.conf")
# Every file the package installs (directories aside).
FILES = {
    "/usr/sbin/lockbrokerd", "/usr/bin/lockctl", CONF, UNIT,
    "/usr/share/man/man8/lockbrokerd.8.gz",
    "/usr/share/man/man1/lockctl.1.gz",
    "/usr/share/doc/lockbrokerd/changelog.gz",
    "/usr/share/doc/lockbrokerd/copyright",
}
# The unit settings in which the package's unit differs from the
# project's; every other line is the same.
UNIT_CHANGES = {
    "ExecStart": ["/usr/sbin/lockbrokerd -c " + CONF],
    "User": [USER], "Group": [USER], "DynamicUser": None,
}

_deb = None               # the .deb setUpModule built


def run(argv, timeout=120, **kw):
    return subprocess.run(argv, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout,
                          **kw)


def make_env():
    """This process's environment without what a calling make left in it
    (make test's MAKEFLAGS would hand its variables to make deb)."""
    env = dict(os.environ)
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        env.pop(k, None)
    return env


def makefile_version():
    with open(os.path.join(REPO, "Makefile")) as f:
        return re.search(r"^VERSION\s*:=\s*(\S+)", f.read(), re.M).group(1)


def package_status():
    """dpkg's status of the package: "not-installed", "installed",
    "config-files", ..."""
    r = run(["dpkg-query", "-W", "-f=${db:Status-Status}", PACKAGE])
    return r.stdout.strip() if r.returncode == 0 else "not-installed"


def user_exists(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def group_exists(name):
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def setUpModule():
    global _deb
    if not shutil.which("dpkg-buildpackage") or not shutil.which("dh"):
        raise unittest.SkipTest("dpkg-buildpackage or debhelper is not "
                                "installed (make deps installs them)")
    r = run(["make", "-C", REPO, "--no-print-directory", "deb"],
            timeout=900, env=make_env())
    if r.returncode != 0:
        raise AssertionError("make deb failed:\n%s%s"
                             % (r.stdout[-6000:], r.stderr[-3000:]))
    arch = run(["dpkg", "--print-architecture"]).stdout.strip()
    _deb = os.path.join(DEB_DIR, "%s_%s_%s.deb"
                        % (PACKAGE, makefile_version(), arch))
    if not os.path.isfile(_deb):
        raise AssertionError("make deb made no %s:\n%s" % (_deb, r.stdout))
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


# ------------------------------------------------------------ the build --

class TestBuild(unittest.TestCase):
    def test_version_is_the_makefiles(self):
        r = run(["dpkg-deb", "-f", _deb, "Package", "Version"])
        self.assertEqual(r.stdout.split(),
                         ["Package:", PACKAGE, "Version:",
                          makefile_version()])

    def test_changelog_behind_the_makefile_stops_the_build(self):
        """make deb with another VERSION than debian/changelog's refuses
        before it builds anything (the build of this module stays)."""
        r = run(["make", "-C", REPO, "--no-print-directory", "deb",
                 "VERSION=0.0.1"], timeout=300, env=make_env())
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("debian/changelog is at %s but VERSION is 0.0.1"
                      % makefile_version(), r.stdout)
        self.assertTrue(os.path.isfile(_deb))

    def test_lintian_found_no_errors(self):
        """make deb ran lintian on the .changes (the .deb, its -dbgsym and
        the .buildinfo) and failed on errors; the report is kept."""
        with open(os.path.join(DEB_DIR, "lintian.txt")) as f:
            report = f.read()
        self.assertEqual([l for l in report.splitlines()
                          if l.startswith("E:")], [], report)

    def test_files_depends_and_conffiles(self):
        r = run(["dpkg-deb", "-c", _deb])
        listed = {l.split()[-1][1:] for l in r.stdout.splitlines()
                  if not l.startswith("d")}
        self.assertEqual(listed, FILES)
        # What the binaries link (a sanitizer build would add libasan8),
        # and adduser for the postinst.
        depends = run(["dpkg-deb", "-f", _deb, "Depends"]).stdout
        self.assertEqual(sorted(d.split()[0] for d in depends.split(",")),
                         ["adduser", "libc6", "libevent-2.1-7",
                          "libhiredis0.14", "libssl3", "libuuid1"])
        self.assertIn("redis-server",
                      run(["dpkg-deb", "-f", _deb, "Recommends"]).stdout)
        d = tempfile.mkdtemp(prefix="lbt-deb-")
        self.addCleanup(shutil.rmtree, d, True)
        run(["dpkg-deb", "-e", _deb, d])
        with open(os.path.join(d, "conffiles")) as f:
            self.assertEqual(f.read().split(), [CONF])

    def test_source_tree_is_left_clean(self):
        """The package is built in a copy under build/deb, so debhelper's
        files never land in debian/."""
        debian = os.path.join(REPO, "debian")
        for name in ("tmp", "files", ".debhelper", PACKAGE,
                     "debhelper-build-stamp"):
            self.assertFalse(os.path.exists(os.path.join(debian, name)),
                             "debian/%s was left by the build" % name)


# ----------------------------------------------------------- on a host --

# One install test at a time on a machine: make test in two checkouts
# would otherwise install, and purge, the same package under each other.
MACHINE_LOCK = "/run/lock/lockbroker-test-package.lock"
MACHINE_LOCK_WAIT_S = 300


@unittest.skipUnless(os.geteuid() == 0, "installing a package needs root")
class TestInstall(harness.BrokerTestCase):
    def setUp(self):
        super().setUp()
        self.take_machine_lock()
        if package_status() != "not-installed":
            self.skipTest("%s is installed on this machine already: not "
                          "replacing it" % PACKAGE)
        for path in (ETC, HOME):
            if os.path.lexists(path):
                self.skipTest("%s is there already: a purge would remove "
                              "it" % path)
        if run(["unshare", "--mount", "true"]).returncode != 0:
            self.skipTest("unshare --mount fails here: no private /run")
        self.dir = tempfile.mkdtemp(prefix="lbt-package-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.user_was_there = user_exists(USER)
        self.group_was_there = group_exists(USER)
        self.addCleanup(self.leave_machine_as_it_was)
        self.shim, self.record = self.make_systemd_standins()

    def take_machine_lock(self):
        os.makedirs(os.path.dirname(MACHINE_LOCK), exist_ok=True)
        f = open(MACHINE_LOCK, "w")
        self.addCleanup(f.close)    # closing it lets go of the lock
        deadline = time.monotonic() + MACHINE_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    self.fail("another package test held %s for %d s"
                              % (MACHINE_LOCK, MACHINE_LOCK_WAIT_S))
                time.sleep(0.5)

    def leave_machine_as_it_was(self):
        """The purge, and then what a purge that failed would leave."""
        if package_status() != "not-installed":
            run(["dpkg", "--purge", PACKAGE], timeout=300)
        for path in (CONF, ETC):
            run(["dpkg-statoverride", "--quiet", "--remove", path])
        for path in (ETC, HOME):
            shutil.rmtree(path, ignore_errors=True)
        if not self.user_was_there and user_exists(USER):
            run(["deluser", "--system", "--quiet", USER])
        if not self.group_was_there and group_exists(USER):
            run(["delgroup", "--system", "--quiet", USER])

    def make_systemd_standins(self):
        """A directory of systemctl and deb-systemd-invoke that write
        their arguments to a record file, one call a line.  A systemctl
        call on files (--root=..., deb-systemd-helper's "preset" that
        enables the unit on a first installation) goes on to the real
        one: it needs no running systemd."""
        shim = os.path.join(self.dir, "bin")
        os.mkdir(shim)
        record = os.path.join(self.dir, "systemd-calls")
        real = shutil.which("systemctl") or "false"
        scripts = {
            "systemctl": 'case "$1" in --root=*) exec %s "$@";; esac\n'
                         % real,
            "deb-systemd-invoke": "",
        }
        for name, rest in scripts.items():
            path = os.path.join(shim, name)
            with open(path, "w") as f:
                f.write('#!/bin/sh\necho "%s $*" >>%s\n%s' % (name, record,
                                                              rest))
            os.chmod(path, 0o755)
        return shim, record

    def dpkg_where_systemd_runs(self, *args):
        """dpkg ARGS in a private mount namespace whose /run has
        /run/systemd/system; returns the systemd calls the maintainer
        scripts made, one string each."""
        open(self.record, "w").close()
        env = dict(os.environ, PATH=self.shim + ":" + os.environ["PATH"])
        r = run(["unshare", "--mount", "--propagation", "private", "--",
                 "sh", "-c", 'mount -t tmpfs lbt-run /run && '
                 'mkdir -p /run/systemd/system && exec "$@"', "sh",
                 "dpkg"] + list(args), timeout=300, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(self.record) as f:
            return f.read().splitlines()

    def assertMode(self, path, owner, group, mode):
        st = os.stat(path)
        self.assertEqual((pwd.getpwuid(st.st_uid).pw_name,
                          grp.getgrgid(st.st_gid).gr_name,
                          oct(stat.S_IMODE(st.st_mode))),
                         (owner, group, oct(mode)), path)

    def check_as(self, user, conf=CONF):
        """lockbrokerd -t on conf as user (with the user's groups)."""
        return run(["setpriv", "--reuid", user, "--regid",
                    grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name,
                    "--init-groups", "/usr/sbin/lockbrokerd", "-t", "-c",
                    conf])

    def test_install_upgrade_remove_purge(self):
        # ---- install: enabled, never started
        calls = self.dpkg_where_systemd_runs("--install", _deb)
        self.assertIn("systemctl --system daemon-reload", calls,
                      "no daemon-reload: the scripts did not see the "
                      "stand-in systemd, or no longer reload it")
        self.assertEqual([c for c in calls
                          if c.startswith("deb-systemd-invoke")], [],
                         "the first installation asked systemd to start "
                         "or stop the unit")
        self.assertEqual(package_status(), "installed")
        self.assertEqual(os.readlink(WANTS), UNIT)
        if shutil.which("systemctl"):
            r = run(["systemctl", "is-enabled", "lockbrokerd.service"])
            self.assertEqual(r.stdout.strip(), "enabled", r.stderr)

        # ---- the files, the user, the modes
        r = run(["dpkg-query", "-L", PACKAGE])
        installed = {p for p in r.stdout.split() if os.path.isfile(p)}
        self.assertEqual(installed, FILES)
        for exe in ("/usr/sbin/lockbrokerd", "/usr/bin/lockctl"):
            self.assertMode(exe, "root", "root", 0o755)
        with open(CONF) as a, open(SOURCE_CONF) as b:
            self.assertEqual(a.read(), b.read())
        u = pwd.getpwnam(USER)
        self.assertLess(u.pw_uid, 1000, "not a system user")
        self.assertEqual(grp.getgrgid(u.pw_gid).gr_name, USER)
        self.assertEqual(u.pw_dir, HOME)
        self.assertEqual(u.pw_shell, "/usr/sbin/nologin")
        self.assertMode(ETC, "root", USER, 0o750)
        self.assertMode(CONF, "root", USER, 0o640)
        self.assertMode(HOME, USER, USER, 0o750)

        # ---- the unit: the project's, with the package's paths and user
        mine, source = unit_settings(UNIT), unit_settings(SOURCE_UNIT)
        for key, values in UNIT_CHANGES.items():
            self.assertEqual(mine.pop(key, None), values, key)
            source.pop(key, None)
        self.assertEqual(mine, source)
        if shutil.which("systemd-analyze"):
            r = run(["systemd-analyze", "verify", "--man=no", UNIT])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertNotIn("lockbrokerd", r.stdout + r.stderr)

        # ---- the installed conf checks, as root and as the unit's user
        # (a group read); another user may not read it
        r = run(["/usr/sbin/lockbrokerd", "-t", "-c", CONF])
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.check_as(USER)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.check_as("nobody")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("Permission denied", r.stderr)

        # ---- the installed broker runs as the unit's user, and reads an
        # acl_file that is root:lockbroker 0640 (what DynamicUser= could
        # not give it)
        acl = ETC + "/apps.acl"
        with open(acl, "w") as f:
            f.write("app billing token-sha256 %s keys billing:*\n"
                    % hashlib.sha256(b"billing-token").hexdigest())
        os.chown(acl, 0, grp.getgrnam(USER).gr_gid)
        os.chmod(acl, 0o640)
        self.run_installed_broker(acl)

        # ---- upgrade (the same version again): a running broker is
        # restarted, a stopped one stays stopped; the modes stay
        calls = self.dpkg_where_systemd_runs("--install", _deb)
        self.assertIn("deb-systemd-invoke try-restart lockbrokerd.service",
                      calls)
        self.assertEqual([c for c in calls if re.match(
            r"deb-systemd-invoke (start|stop|restart) ", c)], [])
        self.assertMode(CONF, "root", USER, 0o640)

        # ---- remove: stopped; the conf and the user stay
        calls = self.dpkg_where_systemd_runs("--remove", PACKAGE)
        self.assertIn("deb-systemd-invoke stop lockbrokerd.service", calls)
        self.assertEqual(package_status(), "config-files")
        self.assertFalse(os.path.exists("/usr/sbin/lockbrokerd"))
        self.assertFalse(os.path.exists(UNIT))
        self.assertTrue(os.path.isfile(CONF))
        self.assertTrue(user_exists(USER))

        # ---- purge: /etc/lockbroker (with the operator's acl file) and
        # the home are gone, so are the symlink and the mode overrides;
        # the user and group stay
        r = run(["dpkg", "--purge", PACKAGE], timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(package_status(), "not-installed")
        for path in (ETC, HOME, WANTS):
            self.assertFalse(os.path.lexists(path), "%s is left" % path)
        r = run(["dpkg-statoverride", "--list"])
        self.assertNotIn(ETC, r.stdout)
        self.assertTrue(user_exists(USER))
        self.assertTrue(group_exists(USER))

    def run_installed_broker(self, acl):
        """/usr/sbin/lockbrokerd with the installed conf, as the unit runs
        it (user and group lockbroker), on a free port and the test's
        Redis: an app of the acl file takes a lock; SIGTERM ends it
        cleanly."""
        port = harness.free_port()
        log = open(os.path.join(self.dir, "broker.log"), "w+")
        self.addCleanup(log.close)
        proc = subprocess.Popen(
            ["setpriv", "--reuid", USER, "--regid", USER, "--init-groups",
             "/usr/sbin/lockbrokerd", "-c", CONF, "-b", "127.0.0.1", "-p",
             str(port), "-r", self.redis.addr, "--prefix", self.prefix,
             "--acl_file", acl],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)

        def stop():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.addCleanup(stop)

        def listening():
            if proc.poll() is not None:
                log.seek(0)
                raise AssertionError("the installed broker exited with %d:"
                                     "\n%s" % (proc.returncode, log.read()))
            try:
                Client(port, timeout=1.0).close()
                return True
            except OSError:
                return False
        wait_until(listening, 10.0, what="the installed broker listening")
        c = Client(port)
        self.addCleanup(c.close)
        self.assertEqual(c.req("AUTH billing-token"), "OK")
        wait_until(lambda: "redis=up" in c.req("STATS").split(), 10.0,
                   what="the installed broker connected to Redis")
        self.assertToken(c.req("ACQUIRE billing:%s" % uuid.uuid4().hex))
        self.assertErr(c.req("ACQUIRE reports:daily"), "DENIED")
        c.close()
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(timeout=15), 0)


if __name__ == "__main__":
    unittest.main()
