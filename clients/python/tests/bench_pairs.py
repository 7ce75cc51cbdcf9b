#!/usr/bin/env python3
"""
bench_pairs.py - acquire+release pairs per second through ONE client
object, against a broker as `make bench` runs it (default options,
log_level warn, its own Redis without persistence), started by the
conformance helper.

    python3 clients/python/tests/bench_pairs.py [--seconds 5] [--rounds 3]

Rows: the threaded Client with 1 thread, and with 8 threads on 8 keys
(requests of the threads pipelined on the one connection); the
AsyncClient with 1 task, and 8 tasks on 8 keys.  Each pair is
``lock(key, timeout=0)`` then ``release()``, each waiting for its reply.
Prints the best of the rounds per row (the machine is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, HERE)

import lockbroker  # noqa: E402
from servers import Servers, allow_old_brokers  # noqa: E402


def sync_pairs(addr: str, workers: int, seconds: float) -> float:
    with lockbroker.Client(addr) as c:
        counts = [0] * workers
        end = time.monotonic() + seconds

        def run(i: int) -> None:
            key = "bench:%d" % i
            n = 0
            while time.monotonic() < end:
                c.lock(key, timeout=0).release()
                n += 1
            counts[i] = n
        t0 = time.monotonic()
        threads = [threading.Thread(target=run, args=(i,))
                   for i in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(counts) / (time.monotonic() - t0)


def async_pairs(addr: str, workers: int, seconds: float) -> float:
    async def main() -> float:
        async with lockbroker.AsyncClient(addr) as c:
            end = time.monotonic() + seconds

            async def run(i: int) -> int:
                key, n = "bench:%d" % i, 0
                while time.monotonic() < end:
                    await (await c.lock(key, timeout=0)).release()
                    n += 1
                return n
            t0 = time.monotonic()
            total = sum(await asyncio.gather(*[run(i)
                                               for i in range(workers)]))
            return total / (time.monotonic() - t0)
    return asyncio.run(main())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    servers = Servers()
    try:
        servers.step("broker b1 log_level=warn")
        allow_old_brokers(servers, "b1")
        addr = servers.address("b1")
        rows = [("Client, 1 thread", sync_pairs, 1),
                ("Client, 8 threads on 8 keys", sync_pairs, 8),
                ("AsyncClient, 1 task", async_pairs, 1),
                ("AsyncClient, 8 tasks on 8 keys", async_pairs, 8)]
        for title, fn, n in rows:
            best = max(fn(addr, n, a.seconds) for _ in range(a.rounds))
            print("%-32s %8.0f pairs/s" % (title, best), flush=True)
    finally:
        servers.close()


if __name__ == "__main__":
    main()
