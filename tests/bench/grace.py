#!/usr/bin/env python3
"""
grace.py - what grace sessions (issue 12) cost and how fast they come back.

Starts a redis-server and two brokers (loopback, free ports, stopped by
pid) and measures:

  resume after kill -9   A client holds HOLD keys in a grace session on
                         broker A; A is killed with SIGKILL; the client,
                         which notices the dead connection, connects to
                         broker B and sends RESUME.  Per round: the time
                         from the kill to RESUME's OK (the client's own
                         reconnect included, no retry sleeps), and whether
                         every key came back with its token.  A is started
                         again for the next round.
  Redis writes           Script calls Redis ran (INFO commandstats:
                         evalsha + eval) per ACQUIRE + RELEASE pair, for a
                         plain session and for a grace session, over PAIRS
                         pairs of distinct keys; and per HELLO ... GRACE;
                         with the time per pair (one client, one request
                         at a time: a grace grant waits for its record).

  python3 tests/bench/grace.py [--rounds 20] [--pairs 2000]
                               [--broker build/lockbrokerd]

A benchmark, not a test: it asserts nothing, it prints figures.
"""

import argparse
import os
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness                      # noqa: E402

HOLD = 5


def script_calls(redis):
    """evalsha + eval calls Redis ran so far."""
    n = 0
    for line in redis.cli("INFO", "commandstats").splitlines():
        if line.startswith(("cmdstat_evalsha:", "cmdstat_eval:")):
            n += int(line.split("calls=")[1].split(",")[0])
    return n


def writes_per_pair(redis, broker, grace, pairs):
    c = broker.client()
    if grace:
        before = script_calls(redis)
        r = c.req("HELLO bench GRACE 30000")
        assert r.startswith("OK ") and len(r.split()) == 4, r
        hello = script_calls(redis) - before
    else:
        hello = 0
    before = script_calls(redis)
    t0 = time.monotonic()
    for i in range(pairs):
        assert c.req("ACQUIRE w%d:%d" % (grace, i)).startswith("OK "), i
        assert c.req("RELEASE w%d:%d" % (grace, i)) == "OK 0", i
    us = (time.monotonic() - t0) * 1e6 / pairs
    per = (script_calls(redis) - before) / pairs
    c.req("QUIT")
    c.close()
    return per, hello, us


def resume_round(broker_a, broker_b, n):
    c = broker_a.client()
    r = c.req("HELLO r%d GRACE 20000" % n)
    _, cid, _, secret = r.split()
    tokens = {}
    for i in range(HOLD):
        r = c.req("ACQUIRE r%d:%d TTL 10000" % (n, i))
        assert r.startswith("OK "), r
        tokens["r%d:%d" % (n, i)] = r.split()[1]
    t0 = time.monotonic()
    os.kill(broker_a.pid, signal.SIGKILL)
    try:
        c.readline(timeout=5)       # EOF or reset: the broker is gone
    except (EOFError, OSError, harness.NoReply):
        pass
    c.close()
    d = broker_b.client()
    r = d.req("RESUME %s %s" % (cid, secret))
    took = time.monotonic() - t0
    keys = r.split()[2:] if r.startswith("OK ") else []
    same = all(d.req("ACQUIRE " + k) == "OK " + tokens[k] for k in keys)
    d.req("QUIT")
    d.close()
    broker_a.kill(check=False)
    broker_a._spawn()
    broker_a.wait_ready()
    return took, len(keys) == HOLD and same, r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--broker", default=None)
    args = ap.parse_args()
    if args.broker:
        harness.BROKER_BIN = os.path.abspath(args.broker)
    redis = harness.Redis()
    a = b = None
    try:
        a = harness.Broker(redis.addr, "bench")
        b = harness.Broker(redis.addr, "bench")
        plain, _, plain_us = writes_per_pair(redis, a, 0, args.pairs)
        grace, hello, grace_us = writes_per_pair(redis, a, 1, args.pairs)
        print("Redis script calls per ACQUIRE + RELEASE pair: plain %.2f, "
              "grace %.2f (HELLO ... GRACE: %d)" % (plain, grace, hello))
        print("one client, ACQUIRE + RELEASE pairs one after another: plain "
              "%.0f us per pair, grace %.0f us" % (plain_us, grace_us))
        times, bad = [], 0
        for n in range(args.rounds):
            took, ok, reply = resume_round(a, b, n)
            times.append(took * 1000)
            if not ok:
                bad += 1
                print("round %d: %s" % (n, reply))
        times.sort()
        print("kill -9 of the broker -> RESUME OK on another broker "
              "(%d rounds, %d keys each): p50 %.2f ms, max %.2f ms, "
              "rounds with a key or token missing: %d"
              % (args.rounds, HOLD, statistics.median(times), times[-1],
                 bad))
    finally:
        for br in (a, b):
            if br is not None:
                br.kill(check=False)
                br.close()
        redis.close()


if __name__ == "__main__":
    main()
