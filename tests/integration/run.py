#!/usr/bin/env python3
"""
run.py - run the lockbroker integration tests.

  python3 tests/integration/run.py                 every test_*.py (in the
                                                   group folders, GROUPS)
  python3 tests/integration/run.py test_protocol   only these modules
  python3 tests/integration/run.py test_locking.TestReentrant.test_x

The broker binary is $LOCKBROKERD (make integration sets it), else
build/lockbrokerd.  The last line printed is always
"N passed, N failed" (plus ", N skipped" when some were skipped); the exit
status is 1 if anything failed or no test ran (passed) at all.

Two lanes.  When the modules to run include some of BESIDE and others,
the BESIDE ones run in a second process (this script again) while this
one runs the OVERLAP ones; every other module runs only after the second
process has ended, alone as before.  BESIDE modules spend their time
waiting on timers (Sentinel failovers, grace periods, keepalive probes,
the 10 s between two auth failure log lines): together ~2 minutes of wall
time for ~20 s of CPU, so on 2 cores they cost the OVERLAP modules little.
The chaos tests (TTL 600 ms, renewals every 200 ms), the modules with
wake-up bounds of 50-100 ms, and any module not listed (new ones) run
alone.  Each lane picks its ports in a range of its own below the
kernel's ephemeral range (harness.free_port, LBT_PORTS), so a port one
lane leaves free while it restarts a process there is never taken by the
other lane or by an outgoing connection.  The second lane's output is
printed in one block when it ends; the counts and the slowest list cover
both.  LBT_LANES=0 runs everything in this process, one module after
another, in name order.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

SLOWEST = 12        # the longest tests, listed after the run

HERE = os.path.dirname(os.path.abspath(__file__))

# Second lane: wall time spent waiting, little CPU (ASan build, seconds of
# wall / CPU per module: test_sentinel 47/7, test_grace 30/6, test_faults
# 20/3, test_netns 12/1, test_auth_stats 12/1, test_eof_grace 6/1,
# test_regressions 6/1, test_dns 10/2 (DNS answers held back 2 s,
# reconnects to a moved name); test_partitions, normal build only (ONCE),
# 85/6: cuts and failovers in network namespaces).
BESIDE = ("test_sentinel", "test_grace", "test_faults", "test_netns",
          "test_auth_stats", "test_eof_grace", "test_regressions",
          "test_partitions", "test_dns")
# Run by this process while the second lane runs: no timing bound tighter
# than a few hundred ms on a machine that has a core to spare.
OVERLAP = ("test_cluster", "test_robustness", "test_lockctl",
           "test_examples", "test_metrics", "test_config_checks",
           "test_protocol", "test_ops", "test_handoff", "test_session_eof",
           "test_logging", "test_early_handoff", "test_acl", "test_batch",
           "test_tls", "test_dashboards")
# Each lane's ports: LANE_PORTS ports each, just below the ephemeral range.
LANE_PORTS = 10000
# Run once: suites that gain nothing from the sanitizer build (they test
# what crosses a network, other languages' clients, packaging, the
# contrib/ dashboard and alert rules checked by promtool).  With
# LBT_ONCE_DONE=1 in the environment (make test's second, sanitizer pass)
# they are left out, and the run says so.
ONCE = ("test_package", "test_partitions", "test_dashboards")


def test_name(arg):
    """Accept test_x, test_x.py, path/to/test_x.py, test_x.Class.method."""
    if arg.endswith(".py"):
        arg = os.path.basename(arg)[:-3]
    return arg


class TimedResult(unittest.TextTestResult):
    """Remembers how long each test took (setUp and cleanups included),
    so a run ends with the list of the slowest: the suite has a time
    budget (README) and this says where it goes."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.took = {}
        self._t0 = None

    def startTest(self, test):
        self._t0 = time.monotonic()
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        if self._t0 is not None:
            self.took[test.id()] = time.monotonic() - self._t0


class Tally:
    """What the closing lines need, summed over runs (and lanes)."""

    def __init__(self):
        self.took = {}
        self.failed = set()
        self.passed = 0
        self.skipped = 0

    def add(self, result):
        self.took.update(result.took)
        # One count per failing test (a failure plus a failing cleanup is
        # one); errors in module/class fixtures count too.
        for test, _ in result.failures + result.errors:
            self.failed.add(test.id() if hasattr(test, "id") else str(test))
        for test in result.unexpectedSuccesses:
            self.failed.add(test.id())
        skipped = len(result.skipped)
        ran_failed = len({t.id() for t, _ in result.failures + result.errors
                          if isinstance(t, unittest.TestCase)} |
                         {t.id() for t in result.unexpectedSuccesses})
        self.passed += max(0, result.testsRun - ran_failed - skipped)
        self.skipped += skipped

    def to_json(self):
        return {"took": self.took, "failed": sorted(self.failed),
                "passed": self.passed, "skipped": self.skipped}

    def add_json(self, d):
        self.took.update(d["took"])
        self.failed.update(d["failed"])
        self.passed += d["passed"]
        self.skipped += d["skipped"]


# The tests are grouped in folders by the layer a failure points at
# (daemon/front, net, locks, store; the system as a whole; the tools beside
# the daemon).  A module keeps its bare name wherever it lives: every group
# folder is on sys.path, so selectors, lanes and imports between modules
# ("from test_lua_multi import ...") name it alone.
GROUPS = ("front", "net", "locks", "store", "system", "tools")


def module_names():
    return sorted(f[:-3] for g in GROUPS
                  for f in os.listdir(os.path.join(HERE, g))
                  if f.startswith("test_") and f.endswith(".py"))


def lane_ports():
    """(this lane's range, the second lane's range) as "lo-hi", or None
    when the ephemeral range leaves no room below it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            eph_lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    top = eph_lo - 1
    if top - 2 * LANE_PORTS < 1024:
        return None
    return ("%d-%d" % (top - 2 * LANE_PORTS + 1, top - LANE_PORTS),
            "%d-%d" % (top - LANE_PORTS + 1, top))


class LoadError(unittest.TestCase):
    """A name that did not load (import error, typo): one failed test."""

    def __init__(self, name, error):
        super().__init__("runTest")
        self.name = name
        self.error = error

    def id(self):
        return "load %s" % self.name

    def runTest(self):
        raise self.error


def run_tests(names, tally, runner):
    if not names:
        return
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    for name in names:
        try:
            suite.addTest(loader.loadTestsFromName(name))
        except Exception as e:      # noqa: BLE001 - reported as a failure
            suite.addTest(LoadError(name, e))
    tally.add(runner.run(suite))


def start_lane(names, ports):
    """This script on names in a second process; returns (process,
    output file, report path)."""
    out = tempfile.TemporaryFile(mode="w+b")
    fd, report = tempfile.mkstemp(prefix="lbt-lane-", suffix=".json")
    os.close(fd)
    env = dict(os.environ, LBT_PORTS=ports, LBT_LANES="0")
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--report", report] +
        names, stdin=subprocess.DEVNULL, stdout=out,
        stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return proc, out, report


def stop_lane(proc):
    """Ctrl-C or an error here: stop the second lane too."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()


def finish_lane(lane, names, tally, t0):
    """Wait for the second lane, print its output, add its counts."""
    proc, out, report = lane
    rc = proc.wait()
    took = time.monotonic() - t0
    out.seek(0)
    text = out.read().decode("utf-8", "replace")
    out.close()
    sys.stdout.flush()
    bar = "=" * 70
    print("%s\nsecond lane (%s), %.1f s, exit %d:\n%s" % (
        bar, " ".join(names), took, rc, bar))
    sys.stdout.write(text)
    print(bar, flush=True)
    try:
        with open(report) as f:
            tally.add_json(json.load(f))
    except (OSError, ValueError, KeyError):
        what = "second lane (%s): exit %d, no report" % (" ".join(names), rc)
        print("FAIL: %s (counted as one failed test)" % what, flush=True)
        tally.failed.add(what)
    finally:
        try:
            os.unlink(report)
        except OSError:
            pass


def main(argv):
    report = None
    if argv[:1] == ["--report"]:
        report, argv = argv[1], argv[2:]
    for d in (HERE,) + tuple(os.path.join(HERE, g) for g in GROUPS):
        sys.path.insert(0, d)
    os.chdir(HERE)
    names = [test_name(a) for a in argv] or module_names()
    if os.environ.get("LBT_ONCE_DONE") == "1" and report is None:
        once = [n for n in names if n.split(".")[0] in ONCE]
        if once:
            print("run once, left out of this pass: %s" % " ".join(once))
        names = [n for n in names if n not in once]
    verbosity = int(os.environ.get("VERBOSITY", "2"))
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=verbosity,
                                     resultclass=TimedResult)
    tally = Tally()

    beside = [n for n in names if n.split(".")[0] in BESIDE]
    ports = lane_ports()
    if (os.environ.get("LBT_LANES", "1") != "0" and report is None and
            beside and len(beside) < len(names) and ports is not None):
        rest = [n for n in names if n not in beside]
        overlap = [n for n in rest if n.split(".")[0] in OVERLAP]
        alone = [n for n in rest if n not in overlap]
        os.environ["LBT_PORTS"] = ports[0]
        t0 = time.monotonic()
        lane = start_lane(beside, ports[1])
        try:
            run_tests(overlap, tally, runner)
            waited = time.monotonic()
            finish_lane(lane, beside, tally, t0)
            print("lanes: this one ran %s in %.1f s, then waited %.1f s "
                  "for the second" % (" ".join(overlap) or "nothing",
                                      waited - t0,
                                      time.monotonic() - waited))
        finally:
            stop_lane(lane[0])
        run_tests(alone, tally, runner)
    else:
        run_tests(names, tally, runner)

    if report is not None:
        # The second lane: its counts go to the first, which prints the
        # closing lines for both.
        with open(report, "w") as f:
            json.dump(tally.to_json(), f)
        print("this lane: %d passed, %d failed, %d skipped"
              % (tally.passed, len(tally.failed), tally.skipped), flush=True)
        return 0
    slow = sorted(tally.took.items(), key=lambda kv: -kv[1])[:SLOWEST]
    if len(tally.took) > 1:
        print("slowest: %s" % ", ".join("%s %.1fs" % (name, secs)
                                        for name, secs in slow))
    line = "%d passed, %d failed" % (tally.passed, len(tally.failed))
    if tally.skipped:
        line += ", %d skipped" % tally.skipped
    sys.stdout.flush()
    sys.stderr.flush()
    print(line, flush=True)
    # Zero tests run (or none passing) is a failure too: a typo in a name
    # or an import that found nothing must not look green.
    return 1 if tally.failed or tally.passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
