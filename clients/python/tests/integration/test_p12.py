"""The protocol 1.2 part 1 words through the library against real brokers:
VALUE, OWNER ... VALUE, PROCLAIM, CHECK, WATCH, leader election, 100 ASYNC
waits over one client with one cancelled, a queued wait and a watch
across a RESUME.  Each test fails at once, saying so, against a broker
without protocol 1.2 (never faked here)."""

from __future__ import annotations

import asyncio
import threading
import time
import unittest

from base import BrokerTest, Events, stop_servers, wait_for

import lockbroker


def tearDownModule() -> None:
    stop_servers()


class TestP12(BrokerTest):
    BROKERS = ["broker b1", "broker b2"]

    def setUp(self) -> None:
        super().setUp()
        self.needs_12()

    def test_value_owner_check_proclaim(self) -> None:
        c, other = self.client("b1"), self.client("b2")
        hold = c.lock("svc:primary", value="10.0.0.7:8080")
        s = other.owner("svc:primary")
        self.assertEqual((s.kind, s.token, s.value, s.client_id),
                         ("exclusive", hold.token, "10.0.0.7:8080",
                          c.client_id))
        self.assertTrue(other.check("svc:primary", hold.token))
        hold.proclaim("10.0.0.7:9090")
        self.assertEqual(other.owner("svc:primary").value, "10.0.0.7:9090")
        hold.release()
        self.assertTrue(other.owner("svc:primary").free)
        self.assertEqual(other.check("svc:primary", hold.token),
                         lockbroker.CheckResult(False, None))
        h2 = other.lock("svc:primary")
        self.assertEqual(c.check("svc:primary", hold.token),
                         lockbroker.CheckResult(False, h2.token))
        self.assertIsNone(c.owner("svc:primary").value)

    def test_watch(self) -> None:
        c, other = self.client("b1"), self.client("b2")
        w = other.watch("jobs:k")
        self.assertTrue(w.wait(timeout=3).free)
        hold = c.lock("jobs:k", value="host-a")
        s = w.wait(lambda s: s.kind == "exclusive", 3)
        self.assertEqual((s.token, s.value), (hold.token, "host-a"))
        hold.release()
        w.wait(lambda s: s.free, 3)
        c.lock("jobs:k", shared=True)
        other.lock("jobs:k", shared=True)
        self.assertEqual(w.wait(lambda s: s.holders == 2, 3).kind, "shared")
        w.close()

    def test_election(self) -> None:
        a, b, follower = (self.client("b1"), self.client("b2"),
                          self.client("b1"))
        w = follower.watch("svc:leader")
        lead = a.elect("svc:leader", "10.0.0.1:80")
        w.wait(lambda s: w.leader == "10.0.0.1:80", 3)
        req = b.start_lock("svc:leader", value="10.0.0.2:80")
        time.sleep(0.2)
        self.assertFalse(req.done())
        lead.release()                      # resign
        self.assertGreater(req.result().token, lead.token)
        w.wait(lambda s: w.leader == "10.0.0.2:80", 3)

    def test_election_with_threads_as_the_readme_shows_it(self) -> None:
        a, b, follower = (self.client("b1"), self.client("b2"),
                          self.client("b1"))
        leaders: list[str | None] = []
        watching = threading.Event()

        def observe() -> None:
            with follower.watch("svc:leader") as w:
                for _ in w:
                    leaders.append(w.leader)
                    watching.set()
                    if w.leader == "10.0.0.8:80":
                        return
        observer = threading.Thread(target=observe)
        observer.start()
        self.assertTrue(watching.wait(3))
        with a.elect("svc:leader", "10.0.0.7:80") as leadership:
            took: list[lockbroker.Hold] = []
            candidate = threading.Thread(target=lambda: took.append(
                b.elect("svc:leader", "10.0.0.8:80")))
            candidate.start()
            time.sleep(0.3)
            self.assertEqual(took, [])          # one leader at a time
            self.assertFalse(leadership.lost)
        candidate.join(5)                       # resigned: b leads
        self.assertGreater(took[0].token, leadership.token)
        observer.join(5)
        self.assertFalse(observer.is_alive())
        self.assertIsNone(leaders[0])
        self.assertEqual([x for x in leaders if x],
                         ["10.0.0.7:80", "10.0.0.8:80"])

    def test_election_with_asyncio_as_the_readme_shows_it(self) -> None:
        async def t():
            a = lockbroker.AsyncClient(self.addr("b1"))
            b = lockbroker.AsyncClient(self.addr("b2"))
            follower = lockbroker.AsyncClient(self.addr("b1"))
            async with a, b, follower:
                leaders: list[str | None] = []

                async def observe() -> None:
                    async with await follower.watch("svc:leader") as w:
                        async for _ in w:
                            leaders.append(w.leader)
                            if w.leader == "10.0.0.8:80":
                                return
                observer = asyncio.ensure_future(observe())
                async with a.elect("svc:leader", "10.0.0.7:80") as first:
                    nxt = asyncio.ensure_future(
                        b.elect("svc:leader", "10.0.0.8:80"))
                    await asyncio.sleep(0.3)
                    self.assertFalse(nxt.done())
                second = await asyncio.wait_for(nxt, 5)
                self.assertGreater(second.token, first.token)
                await asyncio.wait_for(observer, 5)
                self.assertEqual([x for x in leaders if x],
                                 ["10.0.0.7:80", "10.0.0.8:80"])
                # a leadership lost cancels the block, which raises LockLost
                await second.release()
                with self.assertRaises(lockbroker.LockLost):
                    async with a.elect("svc:leader", "10.0.0.7:80", ttl=0.6):
                        self.step("redis del svc:leader")
                        await asyncio.sleep(10)
        asyncio.run(asyncio.wait_for(t(), 30))

    def test_a_hundred_waits_one_cancelled(self) -> None:
        holder, c = self.client(), self.client()
        holds = [holder.lock("q%d" % i) for i in range(100)]
        reqs = [c.start_lock("q%d" % i, timeout=30) for i in range(100)]
        time.sleep(0.3)
        t0 = time.monotonic()
        reqs[50].cancel()
        with self.assertRaises(lockbroker.WaitCancelled):
            reqs[50].result()
        self.assertLess(time.monotonic() - t0, 2)
        self.assertEqual(c.ping(), None)    # the session was never held up
        for h in holds:
            h.release()
        got = [r.result() for i, r in enumerate(reqs) if i != 50]
        self.assertEqual(len(got), 99)
        self.assertNotIn("q50", c.held())
        self.client().lock("q50", timeout=0).release()

    def test_a_queued_wait_and_a_watch_across_a_resume(self) -> None:
        events = Events()
        c = self.client("b1", "b2", on_event=events)
        other = self.client("b2")
        hold = other.lock("k")
        w = c.watch("k")
        req = c.start_lock("k", timeout=9)
        time.sleep(0.3)
        self.step("kill b1")
        wait_for(lambda: "resumed" in events.kinds, 8, "the resume")
        hold.release()
        got = req.result()
        s = w.wait(lambda s: s.token == got.token, 3)
        self.assertEqual(s.kind, "exclusive")

    def test_async_cancel_and_watch(self) -> None:
        async def t():
            c = lockbroker.AsyncClient(self.addr("b1"))
            holder = lockbroker.AsyncClient(self.addr("b2"))
            async with c, holder:
                hold = await holder.lock("k")
                w = await c.watch("k")
                await w.wait(lambda s: s.token == hold.token, 3)
                waiter = asyncio.ensure_future(c.lock("k", timeout=10))
                await asyncio.sleep(0.2)
                waiter.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await waiter
                await c.ping()
                await hold.release()
                await w.wait(lambda s: s.free, 3)
                self.assertEqual(await c.held(), [])
        asyncio.run(asyncio.wait_for(t(), 30))


if __name__ == "__main__":
    unittest.main()
