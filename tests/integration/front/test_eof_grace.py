"""
test_eof_grace.py - a half-closed session that never reads its replies.

Review of issue 9: once its unread output passed 64 KiB (the session stops
taking requests until the client reads), a half-closed session never
reached its 5 s close grace, so it kept its locks for ever.
"""

import socket
import time

import harness
from harness import BrokerTestCase, wait_until


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


class TestHalfClosedNonReader(BrokerTestCase):
    KEYS = 200

    def test_paused_half_closed_session_ends_within_its_grace(self):
        b = self.start_broker()
        d = self.connect(b)
        s = socket.socket()
        self.addCleanup(s.close)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", b.port))
        f = s.makefile("rb")
        key = lambda i: "k%03d%s" % (i, "x" * 240)   # noqa: E731
        for i in range(self.KEYS):
            s.sendall(("ACQUIRE %s\n" % key(i)).encode())
            self.assertTrue(f.readline().startswith(b"OK "))
        # The EOF is read while an ACQUIRE waits (answered BUSY at EOF);
        # then ~50 KB per HELD, far more than the socket buffers take,
        # pause the session with lines still to answer.
        h = self.connect(b)
        self.assertTrue(h.req("ACQUIRE w").startswith("OK "))
        s.sendall(b"ACQUIRE w WAIT 60000\n" + b"HELD\n" * 400)
        time.sleep(0.3)
        s.shutdown(socket.SHUT_WR)
        t0 = time.monotonic()
        wait_until(lambda: self.stats(d)["sessions"] == "2", 12.0,
                   what="the half-closed session that reads nothing ended")
        took = time.monotonic() - t0
        self.assertLess(took, 8.0)
        wait_until(lambda: d.req("OWNER %s" % key(0)) == "OK -", 3.0,
                   what="its locks freed")
