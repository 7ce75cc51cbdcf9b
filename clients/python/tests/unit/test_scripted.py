"""Unit tests of the two drivers (Client's threads, AsyncClient's loop)
and their routing, against a scripted in-process server: each connection
plays a script (expect this line, send these).  It speaks only the lines
a test scripts, so it plays what a real broker does only in a corner (an
EVENT QUEUED after RESUME, a broker too old, one that refuses VALUE or
WATCH after a failover); the integration tests cover the flows against
real brokers."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import threading
import time
import unittest
from typing import Callable

import lockbroker

logging.getLogger("lockbroker").setLevel(logging.CRITICAL)

CID = "3f2b8c1e-6d4a-4b7e-9a51-0c2d9e8f7a10"
SECRET = "9f0c3e1a7b2d4c5e8f6a1b3c5d7e9f01"


class Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(10)
        self.buf = b""

    def line(self) -> str:
        while b"\n" not in self.buf:
            data = self.sock.recv(4096)
            if not data:
                raise EOFError("the client closed the connection")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def expect(self, pattern: str) -> re.Match:
        line = self.line()
        m = re.fullmatch(pattern, line)
        if m is None:
            raise AssertionError("expected /%s/, got %r" % (pattern, line))
        return m

    def send(self, *lines: str) -> None:
        self.sock.sendall(b"".join(x.encode() + b"\r\n" for x in lines))

    def hello(self, version: str = "1.2.0", resume: str | None = None
              ) -> None:
        """The library's handshake: HELLO, EVENTS ON (and RESUME)."""
        m = self.expect(r"HELLO( GRACE \d+)?")
        self.send("OK %s lockbroker/%s%s" % (CID, version,
                                             " " + SECRET if m.group(1)
                                             else ""))
        self.expect("EVENTS ON")
        self.send("OK")
        if resume is not None:
            self.expect("RESUME %s %s" % (CID, SECRET))
            self.send(resume)


class Scripted:
    """A server on 127.0.0.1 playing one script per accepted connection
    (the first connection the first script, ...), each in a thread of its
    own; failures are kept for check()."""

    def __init__(self, *scripts: Callable[[Conn], None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.scripts = list(scripts)
        self.errors: list[BaseException] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        threads = []
        for script in self.scripts:
            sock, _ = self.listener.accept()
            t = threading.Thread(target=self._play, args=(script, sock),
                                 daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join(15)
        self.done.set()

    def _play(self, script: Callable[[Conn], None],
              sock: socket.socket) -> None:
        try:
            script(Conn(sock))
        except BaseException as e:      # noqa: BLE001 - for check()
            self.errors.append(e)
        finally:
            sock.close()

    def check(self) -> None:
        self.done.wait(15)
        self.listener.close()
        if self.errors:
            raise self.errors[0]


def quit_(conn: Conn) -> None:
    conn.expect("QUIT")
    conn.send("OK")


def dribbled_held(c: Conn) -> None:
    """A HELD whose answer takes over twice ping_timeout (0.4 s) to
    arrive, two bytes every 50 ms, after the client's idle PING went out;
    the PING is answered after it, in order; PINGs until QUIT."""
    c.hello()
    c.expect("HELD")
    c.expect("PING")                    # 0.1 s without a byte
    reply = b"OK 3 orders:1 orders:2 orders:3\r\n"
    for i in range(0, len(reply), 2):
        c.sock.sendall(reply[i:i + 2])
        time.sleep(0.05)
    c.send("OK PONG")
    while c.expect("PING|QUIT").group(0) == "PING":
        c.send("OK PONG")
    c.send("OK")


class DriverTest(unittest.TestCase):
    def setUp(self) -> None:
        self.env = os.environ.pop("LOCKBROKER_ALLOW_OLD", None)

    def tearDown(self) -> None:
        if self.env is not None:
            os.environ["LOCKBROKER_ALLOW_OLD"] = self.env


class TestThreaded(DriverTest):
    def test_an_old_broker_is_refused_at_connect(self) -> None:
        srv = Scripted(lambda c: c.hello("1.1.0"))
        with self.assertRaises(lockbroker.VersionError) as cm:
            lockbroker.Client(srv.addr)
        self.assertIn("1.2", str(cm.exception))
        srv.check()

    def test_a_wait_is_async_and_the_session_goes_on(self) -> None:
        def script(c: Conn) -> None:
            c.hello()
            c.expect(r"ACQUIRE k WAIT (4\d\d\d|5000) ASYNC")
            c.send("OK QUEUED")
            c.expect("PING")
            c.send("OK PONG", "EVENT GRANTED k 77")
            c.expect("RELEASE k")
            c.send("OK 0")
            quit_(c)
        srv = Scripted(script)
        with lockbroker.Client(srv.addr) as client:
            req = client.start_lock("k", timeout=5)
            client.ping()                   # answered while k is waited for
            hold = req.result()
            self.assertEqual(hold.token, 77)
            hold.release()
        srv.check()

    def test_cancel_sends_cancel(self) -> None:
        def script(c: Conn) -> None:
            c.hello()
            c.expect(r"ACQUIRE k WAIT \d+ ASYNC")
            c.send("OK QUEUED")
            c.expect("CANCEL k")
            c.send("OK 1")
            quit_(c)
        srv = Scripted(script)
        with lockbroker.Client(srv.addr) as client:
            req = client.start_lock("k", timeout=30)
            time.sleep(0.1)
            req.cancel()
            with self.assertRaises(lockbroker.WaitCancelled):
                req.result()
        srv.check()

    def test_watch_states(self) -> None:
        def script(c: Conn) -> None:
            c.hello()
            c.expect("WATCH k")
            c.send("OK", "EVENT FREE k")
            c.expect("PING")
            c.send("EVENT HOLDER k %s 5 10.0.0.7:80" % CID, "OK PONG")
            c.expect("UNWATCH k")
            c.send("OK 1")
            quit_(c)
        srv = Scripted(script)
        with lockbroker.Client(srv.addr) as client:
            w = client.watch("k")
            self.assertTrue(w.wait(timeout=3).free)
            client.ping()
            self.assertEqual(w.wait(lambda s: not s.free, 3).token, 5)
            self.assertEqual(w.leader, "10.0.0.7:80")
            w.close()
        srv.check()

    def test_a_queued_wait_survives_a_resume(self) -> None:
        def first(c: Conn) -> None:
            c.hello()
            c.expect(r"ACQUIRE k WAIT \d+ ASYNC")
            c.send("OK QUEUED")             # then the connection breaks

        def second(c: Conn) -> None:
            c.hello(resume="OK 0")
            c.send("EVENT QUEUED k")
            c.expect("PING")
            c.send("OK PONG", "EVENT GRANTED k 9")
            c.expect("RELEASE k")           # not a second ACQUIRE
            c.send("OK 0")
            quit_(c)
        srv = Scripted(first, second)
        events: list[str] = []
        with lockbroker.Client(srv.addr,
                               on_event=lambda e: events.append(e.kind)
                               ) as client:
            hold = client.start_lock("k", timeout=10).result()
            self.assertEqual(hold.token, 9)
            # the hook runs on the callback thread: it may come after the
            # grant reached this thread
            t0 = time.monotonic()
            while "resumed" not in events and time.monotonic() - t0 < 5:
                time.sleep(0.02)
            self.assertIn("resumed", events)
            hold.release()
        srv.check()

    def test_a_grant_whose_ok_was_lost_is_given_back_and_asked_again(self
                                                                     ) -> None:
        def first(c: Conn) -> None:
            c.hello()
            c.expect(r"ACQUIRE k ASYNC")    # no answer: the connection ends

        def second(c: Conn) -> None:
            c.hello(resume="OK 1 k")        # the broker had granted it
            c.expect("PING")
            c.send("OK PONG")
            c.expect("RELEASE k")
            c.send("OK 0")
            c.expect(r"ACQUIRE k ASYNC")
            c.send("OK 12")
            quit_(c)
        srv = Scripted(first, second)
        with lockbroker.Client(srv.addr) as client:
            self.assertEqual(client.lock("k", timeout=0).token, 12)
        srv.check()

    def test_a_reply_still_arriving_is_no_silence(self) -> None:
        srv = Scripted(dribbled_held)
        events: list[str] = []
        with lockbroker.Client(srv.addr, ping_interval=0.1, ping_timeout=0.4,
                               on_event=lambda e: events.append(e.kind)
                               ) as client:
            held = client.held()
        srv.check()
        self.assertEqual(held, ["orders:1", "orders:2", "orders:3"])
        self.assertEqual(events, ["connected"])

    def test_an_old_brokers_blocking_wait_is_no_silence(self) -> None:
        """A 1.1 broker holds every reply back behind a blocking wait
        (tests only): the PING's deadline waits for it."""
        def script(c: Conn) -> None:
            c.hello("1.1.0")
            while c.expect(r"PING|ACQUIRE k WAIT \d+").group(0) == "PING":
                c.send("OK PONG")       # an idle PING may come first
            time.sleep(1.2)             # three times ping_timeout
            c.send("OK 5")
            while c.expect("PING|QUIT").group(0) == "PING":
                c.send("OK PONG")
            c.send("OK")
        srv = Scripted(script)
        events: list[str] = []
        os.environ["LOCKBROKER_ALLOW_OLD"] = "1"
        try:
            client = lockbroker.Client(
                srv.addr, ping_interval=0.1, ping_timeout=0.4,
                on_event=lambda e: events.append(e.kind))
        finally:
            del os.environ["LOCKBROKER_ALLOW_OLD"]
        with client:
            token = client.lock("k", timeout=3).token
        srv.check()
        self.assertEqual(token, 5)
        self.assertEqual(events, ["connected"])

    def test_bytes_waiting_in_the_socket_are_no_silence(self) -> None:
        """The reader held up (a C extension keeping the GIL, say) while
        the PONG waits in the socket: the PING's deadline passes three
        times over, and the connection is kept."""
        gate = threading.Event()
        ponged = threading.Event()

        def script(c: Conn) -> None:
            c.hello()
            c.expect("PING")
            c.send("OK PONG")           # read at once
            c.expect("PING")
            c.send("OK PONG")           # read once the gate opens
            ponged.set()
            while c.expect("PING|QUIT").group(0) == "PING":
                c.send("OK PONG")
            c.send("OK")
        srv = Scripted(script)
        events: list[str] = []
        # ping_timeout leaves the scripted server (a thread, slow on a
        # loaded machine) time to answer; the hold-up is three of it.
        with lockbroker.Client(srv.addr, ping_interval=0.1, ping_timeout=0.6,
                               on_event=lambda e: events.append(e.kind)
                               ) as client:
            driver = client._s
            real = driver._stream.recv

            def held_up() -> bytes:
                gate.wait(10)
                return real()
            driver._stream.recv = held_up   # from the reader's next read
            self.assertTrue(ponged.wait(5))
            time.sleep(1.8)
            gate.set()
            time.sleep(0.1)
        srv.check()
        self.assertEqual(events, ["connected"])

    def test_a_silent_broker_is_declared_dead_by_the_idle_ping(self) -> None:
        def first(c: Conn) -> None:
            c.hello()
            c.expect("PING")                # and never answers
            time.sleep(2)

        def second(c: Conn) -> None:
            c.hello(resume="OK 0")
            c.expect("PING")
            c.send("OK PONG")
            quit_(c)
        srv = Scripted(first, second)
        events: list[str] = []
        t0 = time.monotonic()
        with lockbroker.Client(srv.addr, ping_interval=0.2,
                               ping_timeout=0.3,
                               on_event=lambda e: events.append(e.kind)):
            while "resumed" not in events and time.monotonic() - t0 < 5:
                time.sleep(0.02)
        self.assertIn("resumed", events)
        self.assertLess(time.monotonic() - t0, 2.0)
        srv.check()


def refuses_value_and_watch(c: Conn) -> None:
    """A broker without ACQUIRE ... VALUE and WATCH (protocol 1.2 part 1's
    first half): each refusal is answered once; a library that asked
    again would meet QUIT's expectation instead."""
    c.hello()
    c.expect(r"ACQUIRE svc:leader VALUE 10\.0\.0\.7:80 ASYNC")
    c.send("ERR BADARG VALUE is not supported by this broker yet")
    c.expect("WATCH svc:leader")
    c.send("ERR BADCMD unknown command")
    quit_(c)


def watch_refused_after_a_new_session(first_ok: str):
    """Two connections: a watch that works, the connection breaks, the
    session cannot be resumed, and the new session's WATCH is refused (a
    failover to a broker without WATCH); then only QUIT."""
    def first(c: Conn) -> None:
        c.hello()
        c.expect("WATCH k")
        c.send("OK", first_ok)          # then the connection breaks

    def second(c: Conn) -> None:
        c.hello(resume="ERR NOSESSION expired")
        c.expect(r"HELLO GRACE \d+")
        c.send("OK %s lockbroker/1.2.0 %s" % (CID, SECRET))
        c.expect("WATCH k")
        c.send("ERR BADCMD unknown command")
        quit_(c)
    return Scripted(first, second)


class TestRefusedWords(DriverTest):
    """A broker that refuses a word the library needs: the caller, and a
    watch's listeners, are told at once; nothing is asked again."""

    def test_elect_and_watch_raise_the_refusal(self) -> None:
        srv = Scripted(refuses_value_and_watch)
        with lockbroker.Client(srv.addr) as client:
            with self.assertRaises(lockbroker.BadArgument) as cm:
                client.elect("svc:leader", "10.0.0.7:80", timeout=0)
            self.assertEqual(str(cm.exception), "svc:leader: bad argument "
                             "(VALUE is not supported by this broker yet)")
            with self.assertRaises(lockbroker.BadCommand) as cm2:
                client.watch("svc:leader")
            self.assertEqual(str(cm2.exception), "svc:leader: the broker "
                             "does not know WATCH (unknown command)")
            self.assertEqual(cm2.exception.request, "WATCH svc:leader")
        srv.check()

    def test_elect_without_a_deadline_is_not_retried(self) -> None:
        def script(c: Conn) -> None:
            c.hello()
            c.expect(r"ACQUIRE svc:leader VALUE 10\.0\.0\.7:80 WAIT \d+ "
                     r"ASYNC")
            c.send("ERR BADARG VALUE is not supported by this broker yet")
            quit_(c)
        srv = Scripted(script)
        with lockbroker.Client(srv.addr) as client:
            t0 = time.monotonic()
            with self.assertRaises(lockbroker.BadArgument):
                client.elect("svc:leader", "10.0.0.7:80")
            self.assertLess(time.monotonic() - t0, 2.0)
        srv.check()

    def test_a_watch_refused_after_a_new_session_ends_loudly(self) -> None:
        srv = watch_refused_after_a_new_session("EVENT FREE k")
        told: list[BaseException] = []
        with lockbroker.Client(srv.addr, ping_interval=0.2,
                               ping_timeout=0.2) as client:
            w = client.watch("k", on_error=told.append)
            self.assertTrue(w.wait(timeout=3).free)
            with self.assertRaises(lockbroker.BadCommand):
                w.wait(lambda s: not s.free, timeout=5)
            self.assertIsInstance(w.error, lockbroker.BadCommand)
            with self.assertRaises(lockbroker.BadCommand):
                list(w)
            deadline = time.monotonic() + 2
            while not told and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertEqual(told, [w.error])
            w.close()
        srv.check()

    def test_asyncio_the_same(self) -> None:
        srv = watch_refused_after_a_new_session("EVENT FREE k")
        told: list[BaseException] = []

        async def t():
            async with lockbroker.AsyncClient(
                    srv.addr, ping_interval=0.2, ping_timeout=0.2) as client:
                w = await client.watch("k", on_error=told.append)
                seen = []
                with self.assertRaises(lockbroker.BadCommand):
                    async for state in w:
                        seen.append(state.kind)
                self.assertEqual(seen, ["free"])
                self.assertEqual(told, [w.error])
        asyncio.run(asyncio.wait_for(t(), 20))
        srv.check()


class TestAsync(DriverTest):
    def run_async(self, coro) -> None:
        asyncio.run(asyncio.wait_for(coro, 20))

    def test_a_reply_still_arriving_is_no_silence(self) -> None:
        srv = Scripted(dribbled_held)
        events: list[str] = []

        async def t() -> list[str]:
            async with lockbroker.AsyncClient(
                    srv.addr, ping_interval=0.1, ping_timeout=0.4,
                    on_event=lambda e: events.append(e.kind)) as client:
                return await client.held()
        held = asyncio.run(asyncio.wait_for(t(), 20))
        srv.check()
        self.assertEqual(held, ["orders:1", "orders:2", "orders:3"])
        self.assertEqual(events, ["connected"])

    def test_an_old_broker_is_refused_at_connect(self) -> None:
        srv = Scripted(lambda c: c.hello("1.0.0"))

        async def t():
            with self.assertRaises(lockbroker.VersionError):
                await lockbroker.AsyncClient(srv.addr).connect()
        self.run_async(t())
        srv.check()

    def test_cancelling_the_task_sends_cancel(self) -> None:
        def script(c: Conn) -> None:
            c.hello()
            c.expect(r"ACQUIRE k WAIT \d+ ASYNC")
            c.send("OK QUEUED")
            c.expect("CANCEL k")
            c.send("EVENT GRANTED k 4", "OK 0")     # the grant won the race
            c.expect("RELEASE k")
            c.send("OK 0")
            quit_(c)
        srv = Scripted(script)

        async def t():
            async with lockbroker.AsyncClient(srv.addr) as client:
                waiter = asyncio.ensure_future(client.lock("k", timeout=30))
                await asyncio.sleep(0.1)
                waiter.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await waiter
                await asyncio.sleep(0.2)
        self.run_async(t())
        srv.check()

    def test_a_lost_hold_cancels_the_block(self) -> None:
        def script(c: Conn) -> None:
            c.hello()
            c.expect(r"ACQUIRE k ASYNC")
            c.send("OK 21")
            c.expect("PING")
            c.send("EVENT LOST k 21", "OK PONG")
            quit_(c)                # no RELEASE for a lost hold
        srv = Scripted(script)

        async def t():
            async with lockbroker.AsyncClient(srv.addr) as client:
                with self.assertRaises(lockbroker.LockLost):
                    async with client.lock("k", timeout=0):
                        await client.ping()
                        await asyncio.sleep(5)
        self.run_async(t())
        srv.check()


if __name__ == "__main__":
    unittest.main()
