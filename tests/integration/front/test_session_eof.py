"""
test_session_eof.py - end of input is not the end of the session (issue 9,
D15).

A client that half-closes (shutdown(SHUT_WR); `nc -N` or Debian's
`nc -q1` after its stdin ends) still gets a reply to every line it sent,
in order, a last line without LF included; then the broker closes the
connection and releases the session's locks.  An ACQUIRE that waits when
the EOF comes, or would wait after it, is answered BUSY at once: a client
that can no longer give up must not hold a queue place.  The holder of
that key is not disturbed.
"""

import re
import shutil
import socket
import subprocess
import time
import unittest

import harness
from harness import BrokerTestCase, UUID_RE, wait_until

NC = shutil.which("nc")


def setUpModule():
    harness.module_redis_start()


def tearDownModule():
    harness.module_redis_stop()


def half_closed_session(port, data, timeout=10.0):
    """Send data, shutdown(SHUT_WR), read until the broker closes.
    Returns (reply lines without CRLF, seconds from the half-close to the
    broker's close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        t0 = time.monotonic()
        buf = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            buf += d
        took = time.monotonic() - t0
    assert buf == b"" or buf.endswith(b"\r\n"), buf
    return [l for l in buf.decode("ascii").split("\r\n")[:-1]], took


class EofCase(BrokerTestCase):
    def setUp(self):
        super().setUp()
        self.b = self.start_broker()
        self.obs = self.connect(self.b)     # watches STATS and OWNER

    def sessions_back_to(self, n):
        """The half-closed session is freed: n sessions are left."""
        wait_until(lambda: self.stats(self.obs)["sessions"] == str(n), 3.0,
                   what="the half-closed session freed (sessions=%d)" % n)

    def assertFree(self, key):
        wait_until(lambda: self.obs.req("OWNER " + key) == "OK -", 3.0,
                   what="%s free after the session ended" % key)
        self.assertEqual(self.redis.cli("EXISTS", self.lock_key(key)), 0)


class TestPipedInput(EofCase):
    # OWNER, ACQUIRE and RELEASE all wait for Redis: each reply used to be
    # dropped, because the broker ended the session at EOF.
    REQUESTS = b"OWNER k\nACQUIRE k\nACQUIRE k2\nRELEASE k\nPING\n"

    def check_replies(self, lines):
        self.assertEqual(len(lines), 5, lines)
        self.assertEqual(lines[0], "OK -")
        self.assertRegex(lines[1], r"\AOK [0-9]+\Z")
        self.assertRegex(lines[2], r"\AOK [0-9]+\Z")
        self.assertEqual(lines[3:], ["OK 0", "OK PONG"])

    def test_nc_q1_gets_every_reply_and_frees_its_lock(self):
        if NC is None:
            self.skipTest("nc missing (apt-get install netcat-openbsd)")
        p = subprocess.run([NC, "-q1", "127.0.0.1", str(self.b.port)],
                           input=self.REQUESTS, capture_output=True,
                           timeout=15)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.check_replies(p.stdout.decode("ascii").split("\r\n")[:-1])
        self.assertFree("k2")       # still held at EOF: released at the end
        self.sessions_back_to(1)

    def test_shutdown_wr_gets_every_reply_and_frees_its_lock(self):
        lines, took = half_closed_session(self.b.port, self.REQUESTS)
        self.check_replies(lines)
        self.assertLess(took, 3.0)
        self.assertFree("k2")
        self.sessions_back_to(1)

    def test_last_line_without_lf_is_answered(self):
        lines, _ = half_closed_session(self.b.port,
                                       b"PING\r\nACQUIRE nolf\nOWNER nolf")
        self.assertEqual(len(lines), 3, lines)
        self.assertEqual(lines[0], "OK PONG")
        tok = re.fullmatch(r"OK ([0-9]+)", lines[1])
        self.assertIsNotNone(tok, lines)
        self.assertRegex(lines[2], r"\AOK %s [0-9]+ %s\Z"
                         % (UUID_RE, tok.group(1)))
        self.assertFree("nolf")

    def test_quit_before_eof_still_ends_there(self):
        lines, _ = half_closed_session(self.b.port,
                                       b"ACQUIRE q\nQUIT\nPING\n")
        self.assertEqual(len(lines), 2, lines)
        self.assertRegex(lines[0], r"\AOK [0-9]+\Z")
        self.assertEqual(lines[1], "OK")
        self.assertFree("q")


class TestWaitingAtEof(EofCase):
    # Sessions left once the half-closed one is gone: obs and the holder.
    LEFT = 2

    def setUp(self):
        super().setUp()
        self.holder = self.connect(self.b)
        self.hid = self.holder.hello()
        self.tok = self.assertToken(self.holder.req("ACQUIRE k"))

    def assertHolderUnaffected(self):
        self.assertEqual(self.holder.req("HELD"), "OK 1 k")
        r = self.obs.req("OWNER k")
        self.assertRegex(r, r"\AOK %s [0-9]+ %d\Z" % (self.hid, self.tok))
        self.assertEqual(self.stats(self.obs)["waiters"], "0")
        self.assertEqual(self.holder.req("RELEASE k"), "OK 0")

    def test_acquire_wait_then_half_close_is_busy_at_once(self):
        # The EOF may come while the ACQUIRE's first try is in Redis.
        lines, took = half_closed_session(self.b.port,
                                          b"ACQUIRE k WAIT 30000\n")
        self.assertEqual(lines, ["BUSY"])
        self.assertLess(took, 2.0, "answered only when WAIT ran out?")
        self.sessions_back_to(self.LEFT)
        self.assertHolderUnaffected()

    def test_queued_waiter_is_busy_when_eof_comes(self):
        w = self.connect(self.b)
        w.send("ACQUIRE k WAIT 30000")
        wait_until(lambda: self.stats(self.obs)["waiters"] == "1", 3.0,
                   what="waiters=1")
        t0 = time.monotonic()
        w.sock.shutdown(socket.SHUT_WR)
        self.assertEqual(w.readline(timeout=5.0), "BUSY")
        self.assertLess(time.monotonic() - t0, 2.0)
        self.assertTrue(w.closed_by_peer(3.0), "not closed after the reply")
        self.sessions_back_to(self.LEFT)
        self.assertHolderUnaffected()

    def test_lines_after_eof_are_answered_in_order(self):
        w = self.connect(self.b)
        w.sendraw(b"ACQUIRE k WAIT 30000\nPING\nACQUIRE k WAIT 30000\n"
                  b"OWNER k\nACQUIRE other WAIT 30000\nHELD\n")
        wait_until(lambda: self.stats(self.obs)["waiters"] == "1", 3.0,
                   what="waiters=1")
        w.sock.shutdown(socket.SHUT_WR)
        got = [w.readline(timeout=5.0) for _ in range(6)]
        self.assertEqual(got[0], "BUSY")
        self.assertEqual(got[1], "OK PONG")
        self.assertEqual(got[2], "BUSY", "an ACQUIRE after EOF waited")
        self.assertRegex(got[3], r"\AOK %s [0-9]+ %d\Z" % (self.hid, self.tok))
        self.assertRegex(got[4], r"\AOK [0-9]+\Z")     # free: granted
        self.assertEqual(got[5], "OK 1 other")
        self.assertTrue(w.closed_by_peer(3.0))
        self.assertFree("other")
        self.sessions_back_to(self.LEFT)
        self.assertHolderUnaffected()

    def test_holder_half_close_answers_then_hands_over(self):
        w = self.connect(self.b)
        w.send("ACQUIRE k WAIT 10000")
        wait_until(lambda: self.stats(self.obs)["waiters"] == "1", 3.0,
                   what="waiters=1")
        self.holder.sendraw(b"OWNER k\nRENEW k TTL 20000\n")
        self.holder.sock.shutdown(socket.SHUT_WR)
        self.assertRegex(self.holder.readline(),
                         r"\AOK %s [0-9]+ %d\Z" % (self.hid, self.tok))
        self.assertEqual(self.holder.readline(), "OK 20000")
        self.assertTrue(self.holder.closed_by_peer(3.0))
        # The holder's session ended: its lock went to the waiter.
        self.assertGreater(self.assertToken(w.readline(timeout=5.0)),
                           self.tok)


if __name__ == "__main__":
    unittest.main()
