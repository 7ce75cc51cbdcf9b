"""The threaded Client against real brokers and a real Redis (started by
the conformance helper): take/renew/release, threads of one process on one
key, waits and deadlines, shared and limit, lost holds with requests in
flight, kill -9 and RESUME on a second broker, TLS, AUTH and access
lists, liveness options."""

from __future__ import annotations

import socket
import threading
import time

from base import BrokerTest, Events, stop_servers, wait_for

import lockbroker
from lockbroker import _net


def tearDownModule() -> None:
    stop_servers()


class TestTakeRenewRelease(BrokerTest):
    def test_held_past_its_ttl_renewed_released(self) -> None:
        c, other = self.client(), self.client()
        hold = c.lock("orders:42", ttl=0.5)
        time.sleep(1.2)             # more than twice the TTL
        self.assertFalse(hold.lost)
        with self.assertRaises(lockbroker.LockBusy):
            other.lock("orders:42", timeout=0)
        self.assertEqual(hold.renew(ttl=2), 2.0)
        self.assertEqual(c.owner("orders:42").token, hold.token)
        hold.release()
        later = other.lock("orders:42", timeout=0)
        self.assertGreater(later.token, hold.token)

    def test_with_block_and_the_token(self) -> None:
        c = self.client()
        with c.lock("jobs:1") as hold:
            self.assertIsInstance(hold.token, int)
            self.assertEqual(c.held(), ["jobs:1"])
        self.assertTrue(hold.released)
        self.assertEqual(c.held(), [])

    def test_linger_keeps_the_key(self) -> None:
        c, other = self.client(), self.client()
        c.lock("nightly").release(linger=0.8)
        with self.assertRaises(lockbroker.LockBusy):
            other.lock("nightly", timeout=0)
        t0 = time.monotonic()
        other.lock("nightly", timeout=5)
        self.assertGreater(time.monotonic() - t0, 0.4)

    def test_liveness_options_on_the_socket(self) -> None:
        c = self.client(ping_interval=2, ping_timeout=3)
        sock = c._s._stream.sock
        self.assertEqual(sock.getsockopt(socket.SOL_SOCKET,
                                         socket.SO_KEEPALIVE), 1)
        self.assertEqual(sock.getsockopt(socket.IPPROTO_TCP,
                                         _net.TCP_USER_TIMEOUT), 5000)


class TestThreadsOfOneProcess(BrokerTest):
    def run_holders(self, client: lockbroker.Client, n: int, rounds: int,
                    hold_s: float) -> tuple[int, list[int]]:
        """n threads take one key rounds times each through one client;
        the most that were inside at once, and the tokens in order."""
        inside, most, tokens = [0], [0], []
        mu = threading.Lock()
        errors = []

        def worker() -> None:
            try:
                for _ in range(rounds):
                    with client.lock("stock:7", timeout=30) as hold:
                        with mu:
                            inside[0] += 1
                            most[0] = max(most[0], inside[0])
                            tokens.append(hold.token)
                        time.sleep(hold_s)
                        with mu:
                            inside[0] -= 1
            except BaseException as e:      # noqa: BLE001 - reported below
                errors.append(e)
        threads = [threading.Thread(target=worker) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])
        return most[0], tokens

    def test_two_threads_never_overlap(self) -> None:
        most, tokens = self.run_holders(self.client(), 2, 15, 0.002)
        self.assertEqual(most, 1)
        self.assertEqual(len(tokens), 30)
        self.assertEqual(tokens, sorted(set(tokens)))   # a new grant each

    def test_fifty_holders_never_overlap(self) -> None:
        most, tokens = self.run_holders(self.client(), 50, 1, 0.002)
        self.assertEqual(most, 1)
        self.assertEqual(tokens, sorted(set(tokens)))

    def test_the_same_thread_again_is_a_usage_error(self) -> None:
        c = self.client()
        with c.lock("k"):
            with self.assertRaises(lockbroker.UsageError):
                c.lock("k", timeout=1)
        c.lock("k").release()       # and it is free again afterwards


class TestWaits(BrokerTest):
    def test_the_wait_ends_at_the_deadline(self) -> None:
        c, other = self.client(), self.client()
        c.lock("k")
        t0 = time.monotonic()
        with self.assertRaises(lockbroker.LockTimeout):
            other.lock("k", timeout=0.4)
        took = time.monotonic() - t0
        self.assertGreater(took, 0.35)
        self.assertLess(took, 3.0)

    def test_a_wait_is_granted_on_release(self) -> None:
        c, other = self.client(), self.client()
        hold = c.lock("k")
        req = other.start_lock("k", timeout=10)
        time.sleep(0.2)
        self.assertFalse(req.done())
        t0 = time.monotonic()
        hold.release()
        got = req.result()
        self.assertLess(time.monotonic() - t0, 2.0)
        self.assertGreater(got.token, hold.token)

    def test_a_cancelled_wait_never_holds_the_key(self) -> None:
        c, other, third = self.client(), self.client(), self.client()
        hold = c.lock("k")
        req = other.start_lock("k", timeout=10)
        time.sleep(0.2)
        req.cancel()
        with self.assertRaises(lockbroker.WaitCancelled):
            req.result()
        hold.release()
        third.lock("k", timeout=3).release()     # the key did come free
        wait_for(lambda: other.held() == [], 3, "the waiter to hold nothing")


class TestSharedAndLimit(BrokerTest):
    BROKERS = ["broker b1", "broker b2"]

    def test_readers_together_then_a_writer(self) -> None:
        r1, r2, w = self.client("b1"), self.client("b2"), self.client("b1")
        h1 = r1.lock("catalog", shared=True)
        h2 = r2.lock("catalog", shared=True)
        self.assertEqual(r1.owner("catalog").kind, "shared")
        self.assertEqual(r1.owner("catalog").holders, 2)
        with self.assertRaises(lockbroker.LockBusy):
            w.lock("catalog", timeout=0)
        req = w.start_lock("catalog", timeout=10)
        h1.release()
        h2.release()
        self.assertGreater(req.result().token, max(h1.token, h2.token))

    def test_a_semaphore_of_two(self) -> None:
        a, b, c = self.client("b1"), self.client("b2"), self.client("b1")
        ha = a.lock("api:quota", limit=2)
        b.lock("api:quota", limit=2)
        with self.assertRaises(lockbroker.LockBusy):
            c.lock("api:quota", limit=2, timeout=0)
        with self.assertRaises(lockbroker.BadArgument):
            c.lock("api:quota", limit=3, timeout=0)
        req = c.start_lock("api:quota", limit=2, timeout=10)
        time.sleep(0.1)
        ha.release()
        self.assertEqual(req.result().kind, "semaphore")


class TestLost(BrokerTest):
    def test_lost_goes_to_its_hold_while_requests_are_in_flight(self) -> None:
        c = self.client()
        told = []
        b = c.lock("b", ttl=0.9)            # taken first: not the first
        a = c.lock("a", ttl=0.9, on_lost=told.append)   # hold by chance
        stop, answered, errors = threading.Event(), [0], []

        def busy() -> None:         # requests in flight the whole time
            while not stop.is_set():
                try:
                    c.stats()
                    c.held()
                    answered[0] += 2
                except BaseException as e:      # noqa: BLE001
                    errors.append(e)
                    return
        threads = [threading.Thread(target=busy) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            self.step("redis del a")
            wait_for(lambda: a.lost, 3, "hold a reported lost")
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        self.assertEqual(errors, [])
        self.assertGreater(answered[0], 10)
        wait_for(lambda: told, 2, "the lost callback")
        self.assertIsInstance(told[0], lockbroker.LockLost)
        self.assertIn("a", str(told[0]))
        self.assertFalse(b.lost)
        with self.assertRaises(lockbroker.LockLost):
            a.release()
        b.release()

    def test_leaving_the_block_of_a_lost_hold_raises(self) -> None:
        c = self.client()
        with self.assertRaises(lockbroker.LockLost):
            with c.lock("x", ttl=0.6) as hold:
                self.step("redis overwrite x")
                wait_for(lambda: hold.lost, 3, "the hold reported lost")
        c.lock("y").release()       # the client goes on


class TestResume(BrokerTest):
    BROKERS = ["broker b1", "broker b2"]

    def test_kill9_resumed_on_the_second_broker(self) -> None:
        events = Events()
        c = self.client("b1", "b2", on_event=events)
        x = c.lock("orders:42", ttl=5)
        y = c.lock("catalog", shared=True, ttl=5)
        other = self.client("b2")
        self.step("kill b1")
        wait_for(lambda: "resumed" in events.kinds, 8, "the resume")
        self.assertFalse(x.lost or y.lost)
        self.assertEqual(sorted(c.held()), ["catalog", "orders:42"])
        self.assertEqual(c.owner("orders:42").token, x.token)
        self.assertEqual(c.broker, self.addr("b2")[0])
        with self.assertRaises(lockbroker.LockBusy):
            other.lock("orders:42", timeout=0)
        x.release()
        self.assertGreater(other.lock("orders:42", timeout=0).token, x.token)

    def test_the_hook_may_call_the_client(self) -> None:
        seen: list[list[str]] = []
        clients: list[lockbroker.Client] = []

        def hook(ev: lockbroker.ConnectionEvent) -> None:
            if ev.kind == "resumed":    # not on the reader: no deadlock
                seen.append(clients[0].held())
        clients.append(self.client("b1", "b2", on_event=hook))
        clients[0].lock("k", ttl=5)
        self.step("kill b1")
        wait_for(lambda: seen, 8, "the hook's HELD answer")
        self.assertEqual(seen[0], ["k"])

    def test_without_grace_the_holds_are_lost(self) -> None:
        events = Events()
        c = self.client("b1", grace=0, on_event=events)
        hold = c.lock("deploy")
        self.step("restart b1")
        wait_for(lambda: "new_session" in events.kinds, 8, "a new session")
        self.assertIsInstance(hold.lost_error, lockbroker.SessionLost)
        self.assertGreater(c.lock("deploy", timeout=0).token, hold.token)

    def test_the_retry_budget_runs_out_then_the_client_recovers(self) -> None:
        events = Events()
        c = self.client("b1", resume_timeout=0.5, on_event=events)
        hold = c.lock("k", ttl=1)
        self.step("kill b1")
        wait_for(lambda: "reconnect_failed" in events.kinds, 5, "the failure")
        self.assertIsInstance(hold.lost_error, lockbroker.SessionLost)
        with self.assertRaises(lockbroker.SessionLost):
            hold.release()
        self.step("restart b1")
        wait_for(lambda: "new_session" in events.kinds, 8, "a new session")
        c.lock("k", timeout=3).release()


class TestCountersAndErrors(BrokerTest):
    BROKERS = ["broker b1", "broker b2"]

    def test_the_counters_after_a_scripted_run(self) -> None:
        told: list[lockbroker.CounterEvent] = []
        events = Events()
        c = self.client("b1", "b2", on_counter=told.append, on_event=events)
        other = self.client("b2")
        hold = c.lock("a")                          # waits 1
        time.sleep(0.2)
        hold.release()                              # holds 1, >= 0.2 s
        other.lock("b")
        with self.assertRaises(lockbroker.LockBusy):
            c.lock("b", timeout=0)                  # waits 2
        with self.assertRaises(lockbroker.LockTimeout):
            c.lock("b", timeout=0.3)                # waits 3, >= 0.3 s
        doomed = c.lock("l", ttl=0.6)               # waits 4
        self.step("redis del l")
        wait_for(lambda: doomed.lost, 3, "the loss")   # losses 1, holds 2
        kept = c.lock("k", ttl=5)                   # waits 5
        self.step("kill b1")
        wait_for(lambda: "resumed" in events.kinds, 8, "the resume")
        kept.release()                              # holds 3
        n = c.counters()
        self.assertEqual((n.waits, n.holds, n.losses, n.resumes,
                          n.reconnects), (5, 3, 1, 1, 1))
        self.assertGreaterEqual(n.wait_seconds_total, 0.3)
        self.assertLess(n.wait_seconds_total, 3.0)
        self.assertGreaterEqual(n.hold_seconds_total, 0.2)
        wait_for(lambda: len(told) == 11, 2, "a hook call per count")
        self.assertEqual(sorted(e.name for e in told),
                         ["holds"] * 3 + ["losses", "reconnects", "resumes"]
                         + ["waits"] * 5)
        self.assertEqual([e.key for e in told if e.name == "waits"],
                         ["a", "b", "b", "l", "k"])
        self.assertAlmostEqual(sum(e.seconds for e in told
                                   if e.name == "holds"),
                               n.hold_seconds_total)

    def test_errors_say_what_happened_to_which_key(self) -> None:
        c, other = self.client(), self.client()
        hold = c.lock("lost:py", ttl=0.6)
        self.step("redis del lost:py")
        wait_for(lambda: hold.lost, 3, "the loss")
        e = hold.lost_error
        self.assertEqual(str(e), "lost:py: the lock was lost (token %d)"
                         % hold.token)
        self.assertEqual((e.key, e.reply, e.request, e.token),
                         ("lost:py", "EVENT LOST lost:py %d" % hold.token,
                          None, hold.token))
        other.lock("busy")
        with self.assertRaises(lockbroker.LockBusy) as cm:
            c.lock("busy", timeout=0)
        self.assertEqual(str(cm.exception), "busy: held by another session")
        self.assertEqual((cm.exception.reply, cm.exception.request),
                         ("BUSY", "ACQUIRE busy ASYNC"))
        with self.assertRaises(lockbroker.LockTimeout) as cm2:
            c.lock("busy", timeout=0.25)
        self.assertEqual(str(cm2.exception),
                         "busy: not granted within 0.25 s")
        other.lock("sem", limit=2)
        with self.assertRaises(lockbroker.BadArgument) as cm3:
            c.lock("sem", limit=3, timeout=0)
        self.assertEqual(str(cm3.exception), "sem: bad argument (the key is "
                         "a semaphore with LIMIT 2)")
        self.assertEqual((cm3.exception.key, cm3.exception.reply,
                          cm3.exception.request),
                         ("sem", "ERR BADARG the key is a semaphore with "
                          "LIMIT 2", "ACQUIRE sem LIMIT 3 ASYNC"))
        c.close()
        with self.assertRaises(lockbroker.Closed) as cm4:
            c.lock("any")
        self.assertEqual(str(cm4.exception), "the client is closed")


class TestTLS(BrokerTest):
    BROKERS = ["broker b1 tls"]

    def test_tls_with_the_test_ca(self) -> None:
        c = self.client(tls=self.servers.tls_context("b1"))
        plain = self.client()
        hold = c.lock("secure:k")
        with self.assertRaises(lockbroker.LockBusy):
            plain.lock("secure:k", timeout=0)
        hold.release()

    def test_an_unknown_ca_is_refused(self) -> None:
        import ssl
        with self.assertRaises(lockbroker.ConnectError) as cm:
            lockbroker.Client(self.addr(tls=True),
                              tls=ssl.create_default_context())
        self.assertIn("CERTIFICATE_VERIFY_FAILED", str(cm.exception))


class TestAuth(BrokerTest):
    BROKERS = ["broker b1 auth=s3cret",
               "broker b2 app=billing:billing-token:billing:*,invoices:*"]

    def test_a_wrong_or_missing_token_at_connect(self) -> None:
        with self.assertRaises(lockbroker.NotAuthenticated):
            lockbroker.Client(self.addr("b1"), auth="wrong")
        with self.assertRaises(lockbroker.NotAuthenticated):
            lockbroker.Client(self.addr("b1"))
        self.client("b1", auth="s3cret").lock("any").release()

    def test_denied_keys(self) -> None:
        c = self.client("b2", auth="billing-token")
        c.lock("invoices:2024-06").release()
        with self.assertRaises(lockbroker.Denied) as cm:
            c.lock("reports:daily", timeout=0)
        self.assertEqual(str(cm.exception), "reports:daily: denied: outside "
                         "this app's keys (app billing may not use this key)")
        t0 = time.monotonic()
        with self.assertRaises(lockbroker.Denied):
            c.lock("reports:daily", timeout=5)
        self.assertLess(time.monotonic() - t0, 1.0)


if __name__ == "__main__":
    import unittest
    unittest.main()
