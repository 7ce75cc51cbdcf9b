#!/usr/bin/env python3
"""
run.py - run the lockbroker integration tests.

  python3 tests/integration/run.py                 every test_*.py here
  python3 tests/integration/run.py test_protocol   only these modules
  python3 tests/integration/run.py test_locking.TestReentrant.test_x

The broker binary is $LOCKBROKERD (make integration sets it), else
build/lockbrokerd.  The last line printed is always
"N passed, N failed" (plus ", N skipped" when some were skipped); the exit
status is 1 if anything failed or no test ran (passed) at all.
"""

import os
import sys
import time
import unittest

SLOWEST = 12        # the longest tests, listed after the run

HERE = os.path.dirname(os.path.abspath(__file__))


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


def main(argv):
    sys.path.insert(0, HERE)
    os.chdir(HERE)
    loader = unittest.TestLoader()
    if argv:
        suite = loader.loadTestsFromNames([test_name(a) for a in argv])
    else:
        suite = loader.discover(HERE, pattern="test_*.py", top_level_dir=HERE)
    verbosity = int(os.environ.get("VERBOSITY", "2"))
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=verbosity,
                                     resultclass=TimedResult)
    result = runner.run(suite)
    slow = sorted(result.took.items(), key=lambda kv: -kv[1])[:SLOWEST]
    if len(result.took) > 1:
        print("slowest: %s" % ", ".join("%s %.1fs" % (name, secs)
                                        for name, secs in slow))

    # One count per failing test (a failure plus a failing cleanup is one);
    # errors in module/class fixtures count too.
    failed = set()
    for test, _ in result.failures + result.errors:
        failed.add(test.id() if hasattr(test, "id") else str(test))
    for test in result.unexpectedSuccesses:
        failed.add(test.id())
    skipped = len(result.skipped)
    ran_failed = len({t.id() for t, _ in result.failures + result.errors
                      if isinstance(t, unittest.TestCase)} |
                     {t.id() for t in result.unexpectedSuccesses})
    passed = max(0, result.testsRun - ran_failed - skipped)
    line = "%d passed, %d failed" % (passed, len(failed))
    if skipped:
        line += ", %d skipped" % skipped
    sys.stdout.flush()
    sys.stderr.flush()
    print(line, flush=True)
    # Zero tests run (or none passing) is a failure too: a typo in a name
    # or an import that found nothing must not look green.
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
