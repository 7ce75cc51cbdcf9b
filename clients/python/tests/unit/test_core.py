"""Unit tests of the session core (_core.py) with a recording driver: the
lines it writes, and what each reply or event line it is fed does to
requests, holds, waits, watches and the local key lock; the handshake and
what a reconnect settles or sends again.  No sockets, no threads."""

from __future__ import annotations

import concurrent.futures as cf
import logging
import time
import unittest

from lockbroker import _core as C
from lockbroker import protocol as P
from lockbroker.errors import (LimitExceeded, LockBusy, LockLost,
                               LockTimeout, NotAuthenticated, NotHeld,
                               SessionLost, Unavailable, UsageError,
                               VersionError, WaitCancelled, ConnectError)

logging.getLogger("lockbroker").setLevel(logging.CRITICAL)

CID = "3f2b8c1e-6d4a-4b7e-9a51-0c2d9e8f7a10"
SECRET = "9f0c3e1a7b2d4c5e8f6a1b3c5d7e9f01"


class Driver:
    def __init__(self) -> None:
        self.deferred: list = []
        self.woken = 0

    def new_future(self) -> cf.Future:
        return cf.Future()

    def defer(self, fn) -> None:
        self.deferred.append(fn)

    def wake_writer(self) -> None:
        self.woken += 1

    def run_deferred(self) -> None:
        todo, self.deferred = self.deferred, []
        for fn in todo:
            fn()


class CoreTest(unittest.TestCase):
    def setUp(self) -> None:
        self.driver = Driver()
        self.core = C.Core(self.driver, name=None, grace_ms=30000, auth=None,
                           allow_old=False)
        self.connect(version="1.2.0")

    # -- helpers
    def connect(self, version: str = "1.2.0", resume: bool = False,
                resume_reply: str | None = None) -> bool:
        gen = self.core.handshake(resume)
        lines = next(gen)
        replies = []
        for line in lines:
            if line.startswith("HELLO"):
                replies.append("OK %s lockbroker/%s%s" % (
                    CID, version, " " + SECRET if "GRACE" in line else ""))
            elif line.startswith("RESUME"):
                replies.append(resume_reply)
            else:
                replies.append("OK")
        try:
            while True:
                lines = gen.send(replies)
                replies = ["OK PONG" if line == "PING" else
                           "OK %s lockbroker/%s %s" % (CID, version, SECRET)
                           for line in lines]
        except StopIteration as done:
            resumed = bool(done.value)
        self.core.reconcile(resumed)
        return resumed

    def sent(self) -> list[str]:
        data = self.core.take_outgoing()
        return data.decode().splitlines() if data else []

    def feed(self, *lines: str) -> None:
        for line in lines:
            self.core.feed(line)
        self.driver.run_deferred()

    def acquire(self, key: str = "k", timeout: float | None = None,
                owner: object = "t1", **kw) -> C.Acquire:
        deadline = None if timeout is None else time.monotonic() + timeout
        acq = C.Acquire(key, cf.Future(), owner=owner, deadline=deadline,
                        **kw)
        self.core.start(acq)
        return acq

    def held(self, key: str = "k", token: int = 17,
             owner: object = "t1") -> C.HoldState:
        acq = self.acquire(key, 0, owner)
        self.assertEqual(self.sent(), ["ACQUIRE %s ASYNC" % key])
        self.feed("OK %d" % token)
        return acq.fut.result(0)

    def release(self, hold: C.HoldState) -> cf.Future:
        fut: cf.Future = cf.Future()
        self.core.release(hold, None, fut)
        return fut


class TestPipelining(CoreTest):
    def test_replies_go_to_requests_in_order_events_between(self) -> None:
        hold = self.held("a", 5)
        reqs = [C.Request(t, cf.Future()) for t in ("PING", "HELD", "STATS")]
        for r in reqs:
            self.core.submit(r, wake=False)
        self.assertEqual(self.sent(), ["PING", "HELD", "STATS"])
        self.feed("OK PONG", "EVENT LOST a 5", "OK 0", "OK x=1")
        self.assertEqual([r.fut.result(0) for r in reqs],
                         ["OK PONG", "OK 0", "OK x=1"])
        self.assertIsInstance(hold.lost_error, LockLost)

    def test_lost_event_names_the_hold_by_key_and_token(self) -> None:
        a, b = self.held("a", 5), self.held("b", 6)
        self.feed("EVENT LOST a 4", "EVENT LOST b 6")   # a: an older hold
        self.assertFalse(a.lost)
        self.assertTrue(b.lost)

    def test_a_reply_nobody_asked_for_is_a_protocol_error(self) -> None:
        with self.assertRaises(P.ProtocolError):
            self.core.feed("OK 1")

    def test_err_reply_raises_the_codes_class(self) -> None:
        r = C.Request("OWNER k VALUE", cf.Future(), P.parse_owner)
        self.core.submit(r, wake=False)
        self.sent()
        self.feed("ERR DENIED app billing may not use this key")
        self.assertEqual(type(r.fut.exception(0)).__name__, "Denied")


class TestWaits(CoreTest):
    def test_wait_is_async_with_the_deadline_left(self) -> None:
        acq = self.acquire("k", 2.0)
        line = self.sent()[0]
        self.assertRegex(line, r"^ACQUIRE k WAIT (19\d\d|2000) ASYNC$")
        self.feed("OK QUEUED")
        self.assertIs(self.core.waits["k"], acq)
        self.feed("EVENT GRANTED k 42")
        self.assertEqual(acq.fut.result(0).token, 42)
        self.assertNotIn("k", self.core.waits)

    def test_options_on_the_line(self) -> None:
        self.acquire("s", 0, shared=True, ttl_ms=500)
        self.acquire("m", 0, limit=3)
        self.acquire("v", 0, value="10.0.0.7:80")
        self.assertEqual(self.sent(), ["ACQUIRE s SHARED TTL 500 ASYNC",
                                       "ACQUIRE m LIMIT 3 ASYNC",
                                       "ACQUIRE v VALUE 10.0.0.7:80 ASYNC"])

    def test_busy_on_one_try_timeout_after_a_wait(self) -> None:
        one = self.acquire("a", 0)
        waits = self.acquire("b", 0.001)
        time.sleep(0.005)
        self.sent()
        self.feed("BUSY", "OK QUEUED", "EVENT TIMEOUT b")
        self.assertIsInstance(one.fut.exception(0), LockBusy)
        self.assertIsInstance(waits.fut.exception(0), LockTimeout)

    def test_a_timeout_before_the_deadline_is_waited_again(self) -> None:
        # the broker clamped WAIT to its max_wait_ms
        acq = self.acquire("k", 30.0)
        self.sent()
        self.feed("OK QUEUED", "EVENT TIMEOUT k")
        self.assertFalse(acq.fut.done())
        self.assertRegex(self.sent()[0], r"^ACQUIRE k WAIT \d+ ASYNC$")

    def test_failed_outcomes(self) -> None:
        a, b = self.acquire("a", 5), self.acquire("b", 5)
        self.sent()
        self.feed("OK QUEUED", "OK QUEUED", "EVENT FAILED a UNAVAILABLE",
                  "EVENT FAILED b LIMIT")
        self.assertIsInstance(a.fut.exception(0), Unavailable)
        self.assertIsInstance(b.fut.exception(0), LimitExceeded)

    def test_a_hundred_waits_one_cancelled(self) -> None:
        acqs = [self.acquire("q%d" % i, 30) for i in range(100)]
        self.assertEqual(len(self.sent()), 100)
        self.feed(*["OK QUEUED"] * 100)
        acqs[50].cancel(self.core, WaitCancelled("x"))
        self.assertEqual(self.sent(), ["CANCEL q50"])
        self.feed("OK 1")
        self.assertIsInstance(acqs[50].fut.exception(0), WaitCancelled)
        self.feed(*["EVENT GRANTED q%d %d" % (i, 1000 + i)
                    for i in range(100) if i != 50])
        self.assertEqual([a.fut.result(0).token for a in acqs if a is not
                          acqs[50]], [1000 + i for i in range(100) if i != 50])
        self.assertEqual(self.sent(), [])

    def test_a_grant_racing_the_cancel_is_given_back(self) -> None:
        acq = self.acquire("k", 30)
        self.sent()
        self.feed("OK QUEUED")
        acq.cancel(self.core, WaitCancelled("x"))
        self.assertEqual(self.sent(), ["CANCEL k"])
        self.feed("EVENT GRANTED k 9", "OK 0")
        self.assertIsInstance(acq.fut.exception(0), WaitCancelled)
        self.assertEqual(self.sent(), ["RELEASE k"])
        self.assertNotIn("k", self.core.holds)

    def test_cancel_before_ok_queued_cancels_when_it_comes(self) -> None:
        acq = self.acquire("k", 30)
        self.sent()
        acq.cancel(self.core, WaitCancelled("x"))
        self.assertIsInstance(acq.fut.exception(0), WaitCancelled)
        self.feed("OK QUEUED")
        self.assertEqual(self.sent(), ["CANCEL k"])
        self.feed("OK 1")
        self.assertNotIn("k", self.core.local)      # the local lock is free

    def test_cancel_of_a_grant_in_flight_releases_it(self) -> None:
        acq = self.acquire("k", 0)
        self.sent()
        acq.cancel(self.core, WaitCancelled("x"))
        self.feed("OK 5")
        self.assertEqual(self.sent(), ["RELEASE k"])


class TestLocalLock(CoreTest):
    def test_a_second_thread_waits_for_the_first(self) -> None:
        hold = self.held("k", 1, owner="t1")
        other = self.acquire("k", 10, owner="t2")
        self.assertEqual(self.sent(), [])           # nothing to the broker
        self.release(hold)
        self.assertEqual(self.sent(), ["RELEASE k"])
        self.feed("OK 0")
        self.assertRegex(self.sent()[0], r"^ACQUIRE k WAIT \d+ ASYNC$")
        self.feed("OK 2")
        self.assertEqual(other.fut.result(0).token, 2)

    def test_the_same_thread_again_is_a_usage_error(self) -> None:
        self.held("k", 1, owner="t1")
        with self.assertRaises(UsageError):
            self.acquire("k", 10, owner="t1")

    def test_one_try_while_another_thread_holds_is_busy(self) -> None:
        self.held("k", 1, owner="t1")
        acq = self.acquire("k", 0, owner="t2")
        self.assertIsInstance(acq.fut.exception(0), LockBusy)
        self.assertEqual(self.sent(), [])

    def test_a_lost_hold_lets_the_next_in_and_sends_nothing(self) -> None:
        hold = self.held("k", 1, owner="t1")
        other = self.acquire("k", 10, owner="t2")
        self.feed("EVENT LOST k 1")
        self.assertRegex(self.sent()[0], r"^ACQUIRE k WAIT")
        self.feed("OK 2")
        fut = self.release(hold)        # the late release of the lost hold
        self.assertIsInstance(fut.exception(0), LockLost)
        self.assertEqual(self.sent(), [])            # no RELEASE of hold 2
        self.assertEqual(other.fut.result(0).token, 2)

    def test_closing_ends_the_requests_queued_behind_a_hold(self) -> None:
        self.held("k", 1, owner="t1")
        behind = self.acquire("k", None, owner="t2")
        self.core.shutdown(UsageError("closed"))
        self.assertIsInstance(behind.fut.exception(0), UsageError)
        self.assertEqual(self.core.local, {})
        self.assertEqual(self.sent(), [])

    def test_lost_callbacks_run_deferred(self) -> None:
        seen = []
        acq = self.acquire("k", 0, listeners=[seen.append])
        self.sent()
        self.feed("OK 3", "EVENT LOST k 3")
        self.assertEqual(len(seen), 1)
        self.assertIsInstance(seen[0], LockLost)
        self.assertTrue(acq.fut.result(0).lost)


class TestRelease(CoreTest):
    def test_release_answers(self) -> None:
        a, b, c = self.held("a", 1), self.held("b", 2), self.held("c", 3)
        fa, fb, fc = self.release(a), self.release(b), self.release(c)
        self.assertEqual(self.sent(), ["RELEASE a", "RELEASE b", "RELEASE c"])
        self.feed("OK 0", "ERR LOST the lock expired",
                  "ERR UNAVAILABLE redis is down")
        self.assertIsNone(fa.result(0))
        self.assertIsInstance(fb.exception(0), LockLost)
        self.assertIsNone(fc.result(0))      # the broker finishes it
        self.assertEqual(self.core.holds, {})

    def test_notheld_of_a_hold_not_lost_is_notheld(self) -> None:
        fut = self.release(self.held("a", 1))
        self.sent()
        self.feed("ERR NOTHELD this session does not hold the key")
        self.assertIsInstance(fut.exception(0), NotHeld)

    def test_linger(self) -> None:
        hold = self.held("a", 1)
        self.core.release(hold, 60000, cf.Future())
        self.assertEqual(self.sent(), ["RELEASE a LINGER 60000"])


class TestWatch(CoreTest):
    def test_states(self) -> None:
        w = self.core.watches["j"] = C.WatchState("j")
        seen: list[P.KeyState] = []
        w.listeners.append(seen.append)
        self.feed("EVENT FREE j",
                  "EVENT HOLDER j %s 12 host-a" % CID,
                  "EVENT HOLDER j ? 13 -",
                  "EVENT HOLDER j SHARED 2",
                  "EVENT HOLDER j SEMAPHORE 1 3",
                  "EVENT FREE other")
        self.assertEqual([s.kind for s in seen],
                         ["free", "exclusive", "exclusive", "shared",
                          "semaphore"])
        self.assertEqual((seen[1].token, seen[1].value, seen[1].client_id),
                         (12, "host-a", CID))
        self.assertEqual((seen[2].value, seen[2].client_id), (None, "?"))
        self.assertEqual((seen[4].holders, seen[4].limit), (1, 3))


class TestHandshake(unittest.TestCase):
    def core(self, **kw) -> C.Core:
        args = dict(name="w", grace_ms=5000, auth=None, allow_old=False)
        args.update(kw)
        return C.Core(Driver(), **args)

    def test_lines_of_a_new_session(self) -> None:
        gen = self.core(auth="tok").handshake(False)
        self.assertEqual(next(gen), ["AUTH tok", "HELLO w GRACE 5000",
                                     "EVENTS ON"])

    def test_an_old_broker_is_refused(self) -> None:
        gen = self.core().handshake(False)
        next(gen)
        with self.assertRaises(VersionError):
            gen.send(["OK %s lockbroker/1.1.0 %s" % (CID, SECRET), "OK"])

    def test_an_old_broker_when_allowed_gets_blocking_waits(self) -> None:
        core = self.core(allow_old=True)
        gen = core.handshake(False)
        next(gen)
        with self.assertRaises(StopIteration):
            gen.send(["OK %s lockbroker/1.0.0 %s" % (CID, SECRET), "OK"])
        core.reconcile(False)
        acq = C.Acquire("k", cf.Future(), owner=1,
                        deadline=time.monotonic() + 1)
        core.start(acq)
        self.assertRegex(core.take_outgoing().decode(),
                         r"^ACQUIRE k WAIT \d+\n$")
        self.assertEqual(core.blocking, 1)

    def test_later_versions_pass(self) -> None:
        for v in ("1.2.0", "1.3.1", "2.0.0"):
            gen = self.core().handshake(False)
            next(gen)
            with self.assertRaises(StopIteration):
                gen.send(["OK %s lockbroker/%s %s" % (CID, v, SECRET), "OK"])

    def test_a_refused_token(self) -> None:
        gen = self.core(auth="bad").handshake(False)
        next(gen)
        with self.assertRaises(NotAuthenticated):
            gen.send(["ERR NOAUTH wrong token", "ERR NOAUTH x", "ERR NOAUTH"])

    def test_resume_refused_starts_a_new_session_on_that_connection(self):
        core = self.core()
        core.client_id, core.secret = CID, SECRET
        gen = core.handshake(True)
        self.assertEqual(next(gen), ["HELLO w", "EVENTS ON",
                                     "RESUME %s %s" % (CID, SECRET)])
        again = gen.send(["OK %s lockbroker/1.2.0" % "x" * 1, "OK",
                          "ERR NOSESSION the session expired"])
        self.assertEqual(again, ["HELLO w GRACE 5000"])
        with self.assertRaises(StopIteration) as done:
            gen.send(["OK 11111111-2222-3333-4444-555555555555 "
                      "lockbroker/1.2.0 abcd"])
        self.assertFalse(done.exception.value)
        self.assertEqual(core.secret, "abcd")


class TestReconnect(CoreTest):
    def test_resumed(self) -> None:
        kept, gone = self.held("kept", 1), self.held("gone", 2)
        rel = self.held("rel", 3)
        queued = self.acquire("queued", 30)
        dropped_wait = self.acquire("dropped", 30)
        self.sent()
        self.feed("OK QUEUED", "OK QUEUED")
        self.release(rel)
        inflight = self.acquire("inflight", 30)
        renew = C.HoldRequest("RENEW kept", kept, cf.Future())
        self.core.submit(renew, wake=False)
        self.assertEqual(len(self.sent()), 3)
        self.core.connection_lost()
        # the broker kept kept and rel (its RELEASE never arrived), lost
        # gone, and took inflight whose OK was lost; only queued is queued
        reply = "OK 3 kept rel inflight"
        gen = self.core.handshake(True)
        next(gen)
        gen.send(["OK x lockbroker/1.2.0", "OK", reply])
        self.core.feed("EVENT QUEUED queued")
        with self.assertRaises(StopIteration):
            gen.send(["OK PONG"])
        self.core.reconcile(True)
        self.driver.run_deferred()
        self.assertFalse(kept.lost)
        self.assertIsInstance(gone.lost_error, LockLost)
        self.assertEqual(self.core.waits, {"queued": queued})
        lines = self.sent()
        self.assertEqual(lines[0], "RELEASE inflight")   # unknown: given back
        self.assertRegex(lines[1], r"^ACQUIRE dropped WAIT \d+ ASYNC$")
        self.assertEqual(lines[2], "RELEASE rel")
        self.assertRegex(lines[3], r"^ACQUIRE inflight WAIT \d+ ASYNC$")
        self.assertEqual(lines[4], "RENEW kept")
        self.assertEqual(len(lines), 5)
        self.assertFalse(dropped_wait.fut.done() or inflight.fut.done())

    def test_ok_queued_lost_with_the_connection(self) -> None:
        acq = self.acquire("k", 30)
        self.sent()
        self.core.connection_lost()
        gen = self.core.handshake(True)
        next(gen)
        gen.send(["OK x lockbroker/1.2.0", "OK", "OK 0"])
        self.core.feed("EVENT QUEUED k")
        with self.assertRaises(StopIteration):
            gen.send(["OK PONG"])
        self.core.reconcile(True)
        self.assertEqual(self.sent(), [])            # not asked again
        self.feed("EVENT GRANTED k 8")
        self.assertEqual(acq.fut.result(0).token, 8)

    def test_new_session(self) -> None:
        hold = self.held("h", 1)
        rel = self.held("rel", 2)
        wait = self.acquire("w", 30)
        self.sent()
        self.feed("OK QUEUED")
        fut = self.release(rel)
        self.core.watches["j"] = C.WatchState("j")
        self.sent()
        self.core.connection_lost()
        self.assertFalse(self.connect(resume=True,
                                      resume_reply="ERR NOSESSION expired"))
        self.driver.run_deferred()
        self.assertIsInstance(hold.lost_error, SessionLost)
        self.assertIsNone(fut.result(0))     # the session's end freed it
        lines = self.sent()
        self.assertRegex(lines[0], r"^ACQUIRE w WAIT \d+ ASYNC$")
        self.assertEqual(lines[1:], ["WATCH j"])
        self.assertFalse(wait.fut.done())
        late = self.release(hold)
        self.assertIsInstance(late.exception(0), SessionLost)
        self.assertEqual(self.sent(), [])

    def test_budget_exhausted_fails_everything(self) -> None:
        hold = self.held("h", 1)
        wait = self.acquire("w", 30)
        ping = C.Request("PING", cf.Future())
        self.core.submit(ping, wake=False)
        self.sent()
        self.core.connection_lost()
        self.core.fail_all(ConnectError("nobody answered"))
        self.driver.run_deferred()
        self.assertIsInstance(hold.lost_error, SessionLost)
        self.assertIsInstance(wait.fut.exception(0), ConnectError)
        self.assertIsInstance(ping.fut.exception(0), ConnectError)
        self.assertEqual(self.core.local, {})


class TestProtocol(unittest.TestCase):
    def test_owner(self) -> None:
        s = P.parse_owner("OK %s 29998 17 10.0.0.7:8080" % CID)
        self.assertEqual((s.kind, s.token, s.value, s.ttl_ms),
                         ("exclusive", 17, "10.0.0.7:8080", 29998))
        self.assertIsNone(P.parse_owner("OK %s 1 17 -" % CID).value)
        self.assertIsNone(P.parse_owner("OK %s 1 17" % CID).value)
        self.assertTrue(P.parse_owner("OK -").free)
        self.assertEqual(P.parse_owner("OK SHARED 2 a 1 2 b 1 3").holders, 2)
        s = P.parse_owner("OK SEMAPHORE 2 3 a 1 2 b 1 3")
        self.assertEqual((s.holders, s.limit), (2, 3))
        with self.assertRaises(P.ProtocolError):
            P.parse_owner("OK %s x 17" % CID)

    def test_check(self) -> None:
        self.assertTrue(P.parse_check("OK CURRENT", 5))
        self.assertEqual(P.parse_check("OK STALE 9", 5), P.CheckResult(False,
                                                                       9))
        self.assertEqual(P.parse_check("OK STALE -", 5).token, None)

    def test_acquire_line_checks(self) -> None:
        for bad in ("", "a b", "x" * 257, "caf\u00e9"):
            with self.assertRaises(ValueError):
                P.acquire_line(bad)
        with self.assertRaises(ValueError):
            P.acquire_line("k", shared=True, limit=2)
        with self.assertRaises(ValueError):
            P.acquire_line("k", shared=True, value="v")
        with self.assertRaises(ValueError):
            P.acquire_line("k", value="a b")

    def test_ms(self) -> None:
        self.assertEqual(P.to_ms(0.0011, "x"), 2)
        self.assertEqual(P.to_ms(1e12, "x"), P.MAX_MS)
        with self.assertRaises(ValueError):
            P.to_ms(-1, "x")

    def test_addresses(self) -> None:
        self.assertEqual(P.parse_address("h"), ("h", 7711))
        self.assertEqual(P.parse_address("h:1"), ("h", 1))
        self.assertEqual(P.parse_address("[::1]:9"), ("::1", 9))

    def test_every_err_code_has_its_class(self) -> None:
        from lockbroker import errors as E
        for code in ("BADCMD", "BADARG", "TOOLONG", "NOAUTH", "NOTHELD",
                     "LOST", "UNAVAILABLE", "LIMIT", "NOSESSION", "DENIED"):
            err = E.error_from_reply("ERR %s some text" % code)
            self.assertEqual(err.code, code)
            self.assertIsNot(type(err), E.BrokerError)
            self.assertEqual(err.text, "some text")
        self.assertEqual(E.error_from_reply("ERR NEWCODE x").code, "NEWCODE")


if __name__ == "__main__":
    unittest.main()
