#!/usr/bin/env python3
"""
calls_ab.py - the Redis time of one acquire and one release, as two builds
of the broker call them, straight to one Redis (no broker in between).

  python3 tests/bench/calls_ab.py OLD/library.lua NEW/library.lua [rounds]

Starts its own redis-server (harness, free port, no persistence), loads
both function libraries (each named by its hash: they sit side by side),
then per round and per build: 2,000 pipelined FCALL acquire_<hash> of
free keys, then the 2,000 releases, CONFIG RESETSTAT before each batch and
INFO commandstats after it: usec per call.  The arguments are those the
broker sends for a key nobody watches and a hold without a value: OLD's
three keys and six arguments (as at 27629bd), NEW's with the watch mark
after its keys.  Prints one line per round and
build, then the min and median of each.  Nothing asserts: the machine is
shared.
"""

import os
import re
import socket
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness  # noqa: E402

N = 2000


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    r = harness.Redis()
    try:
        libs = []
        for path, extras in ((sys.argv[1], False), (sys.argv[2], True)):
            with open(path) as f:
                text = f.read()
            h = re.search(r"#!lua name=lockbroker_(\w+)", text).group(1)
            r.cli("FUNCTION", "LOAD", text)
            libs.append((h, extras))
        s = socket.create_connection(("127.0.0.1", r.port))
        rd = harness._RespReader(s)

        def pipe(cmds):
            s.sendall(b"".join(harness._resp_encode(c) for c in cmds))
            return [rd.reply() for _ in cmds]

        def usec():
            t = r.cli("INFO", "commandstats")
            return float(re.search(r"cmdstat_fcall:calls=\d+,usec=\d+,"
                                   r"usec_per_call=([0-9.]+)", t).group(1))
        got = {h: ([], []) for h, _ in libs}
        for rnd in range(rounds):
            for h, extras in libs:
                p = "ab%s%d" % (h[:4], rnd)
                acq = []
                for i in range(N):
                    keys = ["%s:lock:q%d" % (p, i), p + ":fence",
                            p + ":lockdelay"]
                    args = ["owner", "30000", p + ":wanted", "b q", "0", "0"]
                    if extras:
                        keys.append("%s:watched:q%d" % (p, i))
                    acq.append(["FCALL", "acquire_" + h, len(keys)] + keys +
                               args)
                r.cli("CONFIG", "RESETSTAT")
                out = pipe(acq)
                a = usec()
                r.cli("CONFIG", "RESETSTAT")
                pipe([["FCALL", "release_" + h, 1, "%s:lock:q%d" % (p, i),
                       "owner:%d" % o[1], p + ":released", "q%d" % i]
                      for i, o in enumerate(out)])
                b = usec()
                got[h][0].append(a)
                got[h][1].append(b)
                print("round %d %s: acquire %.2f us, release %.2f us"
                      % (rnd, "new" if extras else "old", a, b))
        for h, extras in libs:
            a, b = got[h]
            print("%s: acquire min %.1f median %.1f us; release min %.1f "
                  "median %.1f us" % ("new" if extras else "old", min(a),
                                      statistics.median(a), min(b),
                                      statistics.median(b)))
    finally:
        r.close()


if __name__ == "__main__":
    main()
