"""The end of an app that never called close(), in real child processes
against a real broker (default grace): a normal end of the process (the
script's end, sys.exit, an uncaught exception; threads and asyncio) or of
the client object ends the session with QUIT, so its keys are free within
a second; a process killed with SIGKILL sends nothing, and its keys are
free once the default grace has run out (not before)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from base import BrokerTest, stop_servers

import lockbroker
from lockbroker._common import DEFAULT_GRACE

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", "..", "src"))


# A child's first lines: a Client of the broker at ADDR, holding "k".
TAKE_K = """
c = lockbroker.Client(ADDR)
hold = c.lock("k")
print("held", flush=True)
"""


def tearDownModule() -> None:
    stop_servers()


class ChildTest(BrokerTest):
    def child(self, body: str) -> subprocess.Popen:
        """A python3 running body (ADDR: the broker's address) with the
        library; it prints "held" once it holds the key "k" (its standard
        input is a pipe: ``p.stdin``)."""
        code = "import sys, lockbroker\nADDR = sys.argv[1]\n" + \
            textwrap.dedent(body)
        p = subprocess.Popen([sys.executable, "-c", code, self.addr()[0]],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=SRC))

        def reap() -> None:
            if p.poll() is None:
                p.kill()
            p.communicate()
        self.addCleanup(reap)
        line = p.stdout.readline()
        if line != "held\n":
            p.kill()
            self.fail("the child did not take the key: %r %s"
                      % (line, p.communicate()[1]))
        return p

    def free_within_a_second_of_its_end(self, body: str) -> None:
        other = self.client(grace=0)
        p = self.child(body)
        req = other.start_lock("k", timeout=10)
        p.wait(10)
        ended = time.monotonic()
        req.result()
        self.assertLess(time.monotonic() - ended, 1.0,
                        "the key was free only after the grace")


class TestNormalEnd(ChildTest):
    def test_the_script_ends(self) -> None:
        self.free_within_a_second_of_its_end(TAKE_K)

    def test_sys_exit_from_a_thread_holding_keys(self) -> None:
        self.free_within_a_second_of_its_end("""
            import threading
            c = lockbroker.Client(ADDR)
            def work():
                c.lock("k2")
                c.lock("k")
                print("held", flush=True)
            t = threading.Thread(target=work)
            t.start()
            t.join()
            sys.exit(3)
        """)

    def test_an_uncaught_exception(self) -> None:
        self.free_within_a_second_of_its_end(
            TAKE_K + 'raise RuntimeError("the app fails")\n')

    def test_asyncio_run_ends_with_the_client_open(self) -> None:
        self.free_within_a_second_of_its_end("""
            import asyncio
            async def main():
                c = lockbroker.AsyncClient(ADDR)
                await c.connect()
                await c.lock("k")
                print("held", flush=True)
            asyncio.run(main())
        """)

    def test_the_client_object_dropped_while_the_process_goes_on(
            self) -> None:
        other = self.client(grace=0)
        p = self.child(TAKE_K + """
import gc, time
sys.stdin.readline()
del c, hold
gc.collect()
time.sleep(30)
""")
        req = other.start_lock("k", timeout=10)
        p.stdin.write("drop it\n")     # the child drops its client
        p.stdin.flush()
        t0 = time.monotonic()
        req.result()
        self.assertLess(time.monotonic() - t0, 1.0)
        self.assertIsNone(p.poll(), "the process lives on")


class TestKilled(ChildTest):
    def test_sigkill_frees_the_key_once_the_default_grace_ran_out(
            self) -> None:
        other = self.client(grace=0)
        p = self.child(TAKE_K + "import time\ntime.sleep(60)\n")
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        killed = time.monotonic()
        with self.assertRaises(lockbroker.LockTimeout):
            other.lock("k", timeout=DEFAULT_GRACE - 1.0)
        other.lock("k", timeout=3.0)
        took = time.monotonic() - killed
        self.assertGreater(took, DEFAULT_GRACE - 0.5)
        self.assertLess(took, DEFAULT_GRACE + 1.5)


if __name__ == "__main__":
    import unittest
    unittest.main()
