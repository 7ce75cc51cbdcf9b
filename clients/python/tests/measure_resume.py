#!/usr/bin/env python3
"""
measure_resume.py - how long after a broker's kill -9 its clients have
their sessions back on the second broker: the figure the default grace is
chosen from (issue 34: the grace is that time's max plus a margin).

    python3 clients/python/tests/measure_resume.py [--clients 50] [--rounds 3]
                                                   [--fault kill|pause]
                                                   [--ping SECONDS]

Two real brokers on one real Redis (build/lockbrokerd, or $LOCKBROKERD;
started on free ports in temp dirs by tests/conformance/servers.py); N
threaded Clients of this library list both brokers, each holds a lock
on the first; the first broker is killed with SIGKILL, and each client's
time from the kill to its "resumed" event (RESUME answered on the second
broker, holds back) is taken.  Prints p50 and max per round and over all
rounds; exits 1 if a client was not resumed with its hold.  --fault pause
stops the broker (SIGSTOP) instead: a broker whose host is gone, found
only by the idle PING (within ping_interval + ping_timeout; --ping sets
both, default the library's), which must resume the sessions while their
records live (the grace plus two touch periods after the broker's last
touch: 6.7 s at the least for the default grace).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, HERE)

import lockbroker  # noqa: E402
from lockbroker._common import (  # noqa: E402
    DEFAULT_GRACE, DEFAULT_PING_INTERVAL, DEFAULT_PING_TIMEOUT)
from servers import Servers  # noqa: E402


def one_round(servers: Servers, n: int, fault: str,
              ping: dict[str, float]) -> list[float]:
    servers.reset()
    servers.step("broker b1")
    servers.step("broker b2")
    addrs = [servers.address("b1"), servers.address("b2")]
    resumed: dict[int, float] = {}
    mu = threading.Condition()

    def hook(i: int):
        def on_event(ev: lockbroker.ConnectionEvent) -> None:
            if ev.kind == "resumed":
                with mu:
                    resumed[i] = time.monotonic()
                    mu.notify_all()
        return on_event

    clients = [lockbroker.Client(addrs, on_event=hook(i), **ping)
               for i in range(n)]
    try:
        holds = [c.lock("measure:%d" % i) for i, c in enumerate(clients)]
        t0 = time.monotonic()
        servers.step(fault + " b1")
        with mu:
            mu.wait_for(lambda: len(resumed) == n, 30)
        if fault == "pause":
            servers.step("resume b1")
        if len(resumed) < n:
            raise SystemExit("only %d of %d clients resumed within 30 s"
                             % (len(resumed), n))
        lost = [h.key for h in holds if h.lost]
        if lost:
            raise SystemExit("holds lost across the resume: %s" % lost)
        return sorted(t - t0 for t in resumed.values())
    finally:
        for c in clients:
            c.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fault", choices=("kill", "pause"), default="kill")
    ap.add_argument("--ping", type=float)
    a = ap.parse_args()
    ping = {} if a.ping is None else dict(ping_interval=a.ping,
                                          ping_timeout=a.ping)
    logging.getLogger("lockbroker").setLevel(logging.ERROR)
    servers = Servers()
    every: list[float] = []
    try:
        for r in range(a.rounds):
            times = one_round(servers, a.clients, a.fault, ping)
            every += times
            print("round %d: %d clients resumed, p50 %.0f ms, max %.0f ms"
                  % (r + 1, len(times), statistics.median(times) * 1000,
                     times[-1] * 1000), flush=True)
    finally:
        servers.close()
    print("all: %d resumes, p50 %.0f ms, max %.0f ms; grace %.0f s, ping "
          "%.1f + %.1f s" % (len(every), statistics.median(every) * 1000,
                             max(every) * 1000, DEFAULT_GRACE,
                             ping.get("ping_interval", DEFAULT_PING_INTERVAL),
                             ping.get("ping_timeout", DEFAULT_PING_TIMEOUT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
