#!/usr/bin/env python3
"""
lean_ab.py - the Redis time per acquire+release pair of one batch call,
as the baseline broker sends it (its batch function: each call's own
script body) and as this build's lean batch sends it (scripts/batch/
lean.lua), straight to one Redis, no broker in between.

  python3 tests/bench/lean_ab.py BASE/library.lua NEW/library.lua \
      [B ...] [--rounds N] [--calls N]

Starts its own redis-server (harness: free port, no persistence), loads
both function libraries (named by their hashes: they sit side by side),
then for each B (default 8 and 16), rounds alternated between the two:
N calls (default 1,500), each of B acquires of free keys and the B
releases of the previous call's keys, one call in flight, as the broker's
batches carry them at 50 connections (the arguments each build sends for
a key nobody watches and a hold without a value); CONFIG RESETSTAT before
and INFO commandstats after: FCALL usec, and the commands the scripts ran,
per pair.  Prints one line per round, then the medians.  Nothing asserts:
the machine is shared.
"""

import argparse
import os
import re
import socket
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness  # noqa: E402

BROKER = "b" * 36
OWNER = "o" * 36


def base_call(h, p, acq, rel):
    """The baseline's batch: per call its script's name, key and argument
    counts, keys and arguments (acquire: lock, counter, lock delay; owner,
    TTL, wanted channel, announcement, will_wait, reserve)."""
    keys, args = [], []
    for k in acq:
        keys += [p + ":lock:" + k, p + ":fence", p + ":lockdelay"]
        args += ["acquire", 3, 6, OWNER, 30000, p + ":wanted",
                 BROKER + " " + k, 0, 0]
    for k, v in rel:
        keys.append(p + ":lock:" + k)
        args += ["release", 1, 3, v, p + ":released", k]
    return ["FCALL", "batch_" + h, len(keys)] + keys + args


def lean_call(h, p, acq, rel):
    """This build's lean batch (daemon/store/lean.c's words)."""
    keys = [p + ":fence", p + ":lockdelay", p + ":listen", p + ":listenall"]
    keys += [p + ":lock:" + k for k, _ in rel]
    keys += [p + ":lock:" + k for k in acq]
    args = ["@lean", len(acq), len(rel), p + ":wanted", p + ":released",
            BROKER + " "]
    for k in acq:
        args += [OWNER, 30000, 0, 0]
    for k, v in rel:
        args.append(v)
    return ["FCALL", "lean_" + h, len(keys)] + keys + args


def token_of(x):
    """A grant's token from either reply: {1, token, more} or token."""
    return x[1] if isinstance(x, list) else x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("sizes", nargs="*", type=int, default=[8, 16])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=1500)
    a = ap.parse_args()
    r = harness.Redis()
    try:
        libs = []
        for name, path, make in (("base batch", a.base, base_call),
                                 ("lean", a.new, lean_call)):
            with open(path) as f:
                text = f.read()
            h = re.search(r"#!lua name=lockbroker_(\w+)", text).group(1)
            r.cli("FUNCTION", "LOAD", text)
            libs.append((name, h, make))
        s = socket.create_connection(("127.0.0.1", r.port))
        rd = harness._RespReader(s)
        got = {}
        for b in a.sizes:
            for rnd in range(a.rounds):
                order = libs if rnd % 2 == 0 else libs[::-1]
                for name, h, make in order:
                    p = "lab%s%d%d" % (h[:4], b, rnd)
                    r.cli("SET", p + ":fence", 1)
                    r.cli("CONFIG", "RESETSTAT")
                    prev = []
                    for i in range(a.calls):
                        acq = ["g%d:%d" % (i % 2, j) for j in range(b)]
                        s.sendall(harness._resp_encode(make(h, p, acq,
                                                            prev)))
                        out = rd.reply()
                        toks = [token_of(x) for x in out[:b]]
                        if not all(isinstance(t, int) and t > 1
                                   for t in toks):
                            sys.exit("%s: not granted: %r" % (name, out[:2]))
                        prev = [(k, "%s:%d" % (OWNER, t))
                                for k, t in zip(acq, toks)]
                    st = {}
                    for line in r.cli("INFO", "commandstats").splitlines():
                        m = re.match(r"cmdstat_(\w+):calls=(\d+),usec=(\d+)",
                                     line)
                        if m:
                            st[m.group(1)] = (int(m.group(2)),
                                              int(m.group(3)))
                    pairs = b * a.calls
                    us = st["fcall"][1] / pairs
                    cmds = sum(c for k, (c, _) in st.items() if k not in (
                        "fcall", "config", "info")) / pairs
                    got.setdefault((b, name), []).append((us, cmds))
                    print("B=%d round %d %s: %.2f us per pair, %.2f "
                          "commands" % (b, rnd, name, us, cmds))
        for (b, name), v in sorted(got.items()):
            print("B=%d %s: median %.2f us per pair (min %.2f), %.2f "
                  "commands per pair" % (
                      b, name, statistics.median(x for x, _ in v),
                      min(x for x, _ in v), v[0][1]))
    finally:
        r.close()


if __name__ == "__main__":
    main()
