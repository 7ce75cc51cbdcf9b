#!/usr/bin/env python3
"""lock.py - take a lockbroker lock, use its fencing token, release it;
if the connection drops meanwhile, reconnect and RESUME the session.

usage: lock.py [--shared | --limit N] [KEY [WAIT_MS [WORK_MS]]]
               (defaults: example 5000 0)
--shared takes a read hold that other --shared runs share; --limit N takes
one of N permits of a semaphore (protocol 1.1).
The broker is $LOCKBROKER_HOST:$LOCKBROKER_PORT (127.0.0.1:7711).
Exits 0 when done, 75 if the lock stayed busy, 1 on an error.
"""
import os
import socket
import sys
import time

# If the connection drops, the broker keeps our locks this long for RESUME.
GRACE_MS = 10000


class Session:
    """A broker session that survives a dropped connection: HELLO ... GRACE
    gives a client-id and a secret, and RESUME with both on a new
    connection gets the session back, locks and all."""

    def __init__(self, addr, timeout):
        self.addr, self.timeout = addr, timeout
        self.connect()
        words = self.call("HELLO lock.py GRACE %d" % GRACE_MS).split()
        if len(words) != 4 or words[0] != "OK":
            raise ValueError("HELLO: %s" % " ".join(words))
        self.client_id, self.secret = words[1], words[3]

    def connect(self):
        self.sock = socket.create_connection(self.addr, timeout=self.timeout)
        self.replies = self.sock.makefile("r", encoding="ascii",
                                          newline="\r\n")

    def call(self, line):
        """Send one request; return its one-line reply without CRLF."""
        self.sock.sendall(line.encode("ascii") + b"\n")
        reply = self.replies.readline()
        if not reply:
            raise ConnectionError("broker closed the connection")
        return reply.rstrip("\r\n")

    def close(self):
        self.replies.close()
        self.sock.close()

    def acquire(self, key, wait_ms, shared=False, limit=None):
        """ACQUIRE key: alone, or with shared=True together with other
        shared holders (many readers, one writer), or with limit=n as one
        of n permits (at most n holders at once).  Returns the token, or
        None if it stayed busy for wait_ms; raises ValueError on ERR."""
        line = "ACQUIRE %s" % key
        if shared:
            line += " SHARED"
        elif limit is not None:
            line += " LIMIT %d" % limit
        reply = self.call("%s WAIT %d" % (line, wait_ms))
        if reply == "BUSY":
            return None
        if not reply.startswith("OK "):
            raise ValueError("ACQUIRE: %s" % reply)
        return int(reply.split()[1])

    def resume(self, key):
        """Reconnect and RESUME; fail unless the session still holds key.
        While the broker cannot be reached (it may be restarting) or says
        ERR UNAVAILABLE, retry for as long as the grace lasts."""
        self.close()
        deadline = time.monotonic() + GRACE_MS / 1000
        while True:
            try:
                self.connect()
                reply = self.call("RESUME %s %s" % (self.client_id,
                                                    self.secret))
            except OSError as e:         # not reachable: retry the same way
                reply = "ERR UNAVAILABLE %s" % e
            if not reply.startswith("ERR UNAVAILABLE") or \
                    time.monotonic() > deadline:
                break
            self.close()
            time.sleep(0.2)
        # OK <n> <key> ...: the keys the session holds again, same tokens.
        if not reply.startswith("OK ") or key not in reply.split()[2:]:
            raise ConnectionError("RESUME: %s" % reply)


def main():
    args, shared, limit = sys.argv[1:], False, None
    if args[:1] == ["--shared"]:
        shared, args = True, args[1:]
    elif args[:1] == ["--limit"] and len(args) > 1:
        limit, args = int(args[1]), args[2:]
    key = args[0] if len(args) > 0 else "example"
    wait_ms = int(args[1]) if len(args) > 1 else 5000
    work_ms = int(args[2]) if len(args) > 2 else 0
    host = os.environ.get("LOCKBROKER_HOST", "127.0.0.1")
    port = int(os.environ.get("LOCKBROKER_PORT", "7711"))

    # The lock lives as long as the session: keep it open while working.
    s = Session((host, port), timeout=wait_ms / 1000 + 10)
    token = s.acquire(key, wait_ms, shared=shared, limit=limit)
    if token is None:
        print("lock.py: %s is busy" % key, file=sys.stderr)
        return 75
    print("acquired %s with fencing token %d" % (key, token), flush=True)

    # Do the work here, in steps.  Send the token with every write, so that
    # the resource can refuse a holder whose token is older than one seen.
    # Between steps, PING: a dropped connection shows up as an error, and
    # RESUME takes the session back with the lock.
    end = time.monotonic() + work_ms / 1000
    while time.monotonic() < end:
        time.sleep(0.1)
        try:
            s.call("PING")
        except OSError:
            s.resume(key)
            print("resumed %s after a dropped connection" % key, flush=True)

    reply = s.call("RELEASE " + key)
    if not reply.startswith("OK"):
        print("lock.py: RELEASE: %s" % reply, file=sys.stderr)
        return 1
    print("released %s" % key)
    s.call("QUIT")     # without QUIT the session would wait GRACE_MS for us
    s.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ValueError) as e:
        print("lock.py: %s" % e, file=sys.stderr)
        sys.exit(1)
