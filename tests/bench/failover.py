#!/usr/bin/env python3
"""
failover.py - how long a Sentinel failover interrupts lockbroker.

Starts a Sentinel topology (1 master, 2 replicas, 3 sentinels; loopback,
free ports, stopped by pid) and one broker in Sentinel mode, then runs
ROUNDS failovers by kill -9 of the master.  Before each kill, HOLDERS
sessions hold a key each; during the failover a prober session asks for a
fresh free key every PROBE_MS (one try).  Per round it records:

  first_ok_s   master kill -> the first OK for a free key on the new master
               (includes the failover lock delay, see --lock-delay-ms)
  renew_ok_s   master kill -> the first holder's RENEW answered OK
  reclaimed    held locks the broker set again on the new master
  lost         held locks reported lost

and prints one line per round, then p50 / max.  The killed node is
restarted as a replica, so every round fails over a healthy set-up.

  python3 tests/bench/failover.py [--rounds 10] [--lock-delay-ms 0]
                                  [--broker build/lockbrokerd]

A benchmark, not a test: it asserts nothing, it prints figures.
"""

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness                      # noqa: E402
from harness import parse_stats     # noqa: E402
from topology import SentinelTopology  # noqa: E402

PROBE_MS = 20


def one_round(topo, broker, holders, n, lock_delay_ms):
    for i, h in enumerate(holders):
        r = h.req("ACQUIRE held%d TTL 20000 WAIT 10000" % i, timeout=12)
        assert r.startswith("OK "), r
    probe = broker.client(timeout=5)
    before = parse_stats(probe.req("STATS"))
    t0 = time.monotonic()
    old = topo.kill_master()
    first_ok = renew_ok = None
    deadline = t0 + 30 + lock_delay_ms / 1000.0
    i = 0
    while time.monotonic() < deadline and (first_ok is None or
                                           renew_ok is None):
        if first_ok is None:
            r = probe.req("ACQUIRE probe%d:%d TTL 20000" % (n, i))
            i += 1
            if r.startswith("OK "):
                first_ok = time.monotonic() - t0
                probe.req("RELEASE probe%d:%d" % (n, i - 1))
        if renew_ok is None:
            r = holders[0].req("RENEW held0")
            if r.startswith("OK "):
                renew_ok = time.monotonic() - t0
        time.sleep(PROBE_MS / 1000.0)
    after = parse_stats(probe.req("STATS"))
    for i, h in enumerate(holders):
        h.req("RELEASE held%d" % i)
    probe.close()
    topo.restart(old, replicaof=topo.master_addr())
    topo.wait_ready(timeout=30)
    return {
        "first_ok_s": first_ok,
        "renew_ok_s": renew_ok,
        "reclaimed": int(after["reclaimed"]) - int(before["reclaimed"]),
        "lost": int(after["lost"]) - int(before["lost"]),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--holders", type=int, default=20)
    ap.add_argument("--lock-delay-ms", type=int, default=0)
    ap.add_argument("--broker", default=None)
    args = ap.parse_args()
    if args.broker:
        harness.BROKER_BIN = os.path.abspath(args.broker)
    topo = SentinelTopology(down_after_ms=500, failover_timeout_ms=10000)
    broker = None
    try:
        broker = harness.Broker(
            None, "lbfo", "--redis_sentinels", topo.sentinel_addrs(),
            "--redis_master_name", topo.master_name,
            "--failover_lock_delay_ms", str(args.lock_delay_ms))
        holders = [broker.client(timeout=15) for _ in range(args.holders)]
        rows = []
        for n in range(args.rounds):
            row = one_round(topo, broker, holders, n, args.lock_delay_ms)
            rows.append(row)
            print("round %2d: first OK %.2f s, RENEW OK %.2f s, reclaimed "
                  "%d, lost %d" % (n + 1, row["first_ok_s"] or -1,
                                   row["renew_ok_s"] or -1,
                                   row["reclaimed"], row["lost"]),
                  flush=True)
        for k in ("first_ok_s", "renew_ok_s"):
            v = [r[k] for r in rows if r[k] is not None]
            if v:
                print("%s: p50 %.2f s, max %.2f s (%d rounds)"
                      % (k, statistics.median(v), max(v), len(v)))
        print("reclaimed %d, lost %d in all"
              % (sum(r["reclaimed"] for r in rows),
                 sum(r["lost"] for r in rows)))
    finally:
        if broker is not None:
            broker.kill(check=False)
        topo.close()


if __name__ == "__main__":
    main()
