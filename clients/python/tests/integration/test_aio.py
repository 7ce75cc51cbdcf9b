"""AsyncClient against real brokers: async with, a lost hold cancels the
task under it, tasks of one loop on one key, a cancelled wait, the
deadline, kill -9 and RESUME, TLS."""

from __future__ import annotations

import asyncio
import time
import unittest

from base import BrokerTest, Events, stop_servers

import lockbroker


def tearDownModule() -> None:
    stop_servers()


class AsyncTest(BrokerTest):
    async def aclient(self, *names: str, **kw) -> lockbroker.AsyncClient:
        kw.setdefault("grace", 10.0)
        c = lockbroker.AsyncClient(self.addr(*names, tls="tls" in kw), **kw)
        await c.connect()
        self.closing.append(c)
        return c

    def run_async(self, coro) -> None:
        async def main():
            self.closing = []
            try:
                await asyncio.wait_for(coro, 30)
            finally:
                for c in self.closing:
                    await c.close()
        asyncio.run(main())


class TestAsync(AsyncTest):
    BROKERS = ["broker b1", "broker b2"]

    def test_async_with_and_the_token(self) -> None:
        async def t():
            c, other = await self.aclient(), await self.aclient()
            async with c.lock("orders:42", ttl=0.5) as hold:
                await asyncio.sleep(1.0)          # past the TTL
                with self.assertRaises(lockbroker.LockBusy):
                    await other.lock("orders:42", timeout=0)
                self.assertEqual((await c.owner("orders:42")).token,
                                 hold.token)
            self.assertTrue(hold.released)
            hold2 = await other.lock("orders:42", timeout=0)
            self.assertGreater(hold2.token, hold.token)
            await hold2.release()
        self.run_async(t())

    def test_a_lost_hold_cancels_the_task_under_it(self) -> None:
        async def t():
            c = await self.aclient()
            reached = []

            async def work():
                async with c.lock("x", ttl=0.6):
                    self.step("redis del x")
                    await asyncio.sleep(10)     # cancelled long before
                    reached.append("end")
            t0 = time.monotonic()
            with self.assertRaises(lockbroker.LockLost):
                await work()
            self.assertLess(time.monotonic() - t0, 5)
            self.assertEqual(reached, [])
            await (await c.lock("x", timeout=0)).release()   # goes on
        self.run_async(t())

    def test_tasks_of_one_loop_never_overlap(self) -> None:
        async def t():
            c = await self.aclient()
            inside, most, tokens = [0], [0], []

            async def worker():
                for _ in range(5):
                    async with c.lock("stock:7", timeout=30) as hold:
                        inside[0] += 1
                        most[0] = max(most[0], inside[0])
                        tokens.append(hold.token)
                        await asyncio.sleep(0.002)
                        inside[0] -= 1
            await asyncio.gather(*[worker() for _ in range(10)])
            self.assertEqual(most[0], 1)
            self.assertEqual(tokens, sorted(set(tokens)))
            self.assertEqual(len(tokens), 50)
        self.run_async(t())

    def test_the_same_task_again_is_a_usage_error(self) -> None:
        async def t():
            c = await self.aclient()
            async with c.lock("k"):
                with self.assertRaises(lockbroker.UsageError):
                    await c.lock("k", timeout=1)
        self.run_async(t())

    def test_the_deadline_and_a_cancelled_wait(self) -> None:
        async def t():
            c, other, third = (await self.aclient(), await self.aclient(),
                               await self.aclient())
            hold = await c.lock("k")
            t0 = time.monotonic()
            with self.assertRaises(lockbroker.LockTimeout):
                await other.lock("k", timeout=0.4)
            self.assertGreater(time.monotonic() - t0, 0.35)
            waiter = asyncio.ensure_future(other.lock("k", timeout=10))
            await asyncio.sleep(0.2)
            waiter.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await waiter
            await hold.release()
            await (await third.lock("k", timeout=3)).release()
            for _ in range(100):            # the grant, if any, given back
                if await other.held() == []:
                    break
                await asyncio.sleep(0.02)
            self.assertEqual(await other.held(), [])
        self.run_async(t())

    def test_kill9_resumed_on_the_second_broker(self) -> None:
        async def t():
            events = Events()
            c = await self.aclient("b1", "b2", on_event=events)
            hold = await c.lock("orders:42", ttl=5)
            self.step("kill b1")
            for _ in range(400):
                if "resumed" in events.kinds:
                    break
                await asyncio.sleep(0.02)
            self.assertIn("resumed", events.kinds)
            self.assertFalse(hold.lost)
            self.assertEqual((await c.owner("orders:42")).token, hold.token)
            await hold.release()
        self.run_async(t())


class TestAsyncTLS(AsyncTest):
    BROKERS = ["broker b1 tls"]

    def test_tls(self) -> None:
        async def t():
            c = await self.aclient(tls=self.servers.tls_context("b1"))
            async with c.lock("secure:k") as hold:
                self.assertGreater(hold.token, 0)
        self.run_async(t())


if __name__ == "__main__":
    unittest.main()
