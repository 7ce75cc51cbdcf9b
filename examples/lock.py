#!/usr/bin/env python3
"""lock.py - take a lockbroker lock, use its fencing token, release it.

usage: lock.py [KEY [WAIT_MS]]   (defaults: example 5000)
The broker is $LOCKBROKER_HOST:$LOCKBROKER_PORT (127.0.0.1:7711).
Exits 0 when done, 75 if the lock stayed busy, 1 on an error.
"""
import os
import socket
import sys


def main():
    key = sys.argv[1] if len(sys.argv) > 1 else "example"
    wait_ms = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    host = os.environ.get("LOCKBROKER_HOST", "127.0.0.1")
    port = int(os.environ.get("LOCKBROKER_PORT", "7711"))

    # The lock lives as long as this connection: keep it open while working.
    with socket.create_connection((host, port),
                                  timeout=wait_ms / 1000 + 10) as sock:
        replies = sock.makefile("r", encoding="ascii", newline="\r\n")

        def call(line):
            """Send one request; return its one-line reply without CRLF."""
            sock.sendall(line.encode("ascii") + b"\n")
            reply = replies.readline()
            if not reply:
                raise ConnectionError("broker closed the connection")
            return reply.rstrip("\r\n")

        reply = call("ACQUIRE %s WAIT %d" % (key, wait_ms))
        if reply == "BUSY":
            print("lock.py: %s is busy" % key, file=sys.stderr)
            return 75
        if not reply.startswith("OK "):
            print("lock.py: ACQUIRE: %s" % reply, file=sys.stderr)
            return 1
        token = int(reply.split()[1])
        print("acquired %s with fencing token %d" % (key, token))
        # Do the work here.  Send the token with every write, so that the
        # resource can refuse a holder whose token is older than one seen.

        reply = call("RELEASE " + key)
        if not reply.startswith("OK"):
            print("lock.py: RELEASE: %s" % reply, file=sys.stderr)
            return 1
        print("released %s" % key)
        call("QUIT")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ValueError) as e:
        print("lock.py: %s" % e, file=sys.stderr)
        sys.exit(1)
