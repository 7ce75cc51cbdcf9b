#!/usr/bin/env python3
"""lock.py - take a lockbroker lock, use its fencing token, release it;
if the connection drops meanwhile, reconnect and RESUME the session.

usage: lock.py [--tls [--cacert FILE] [--cert FILE --key FILE]]
               [--shared | --limit N] [KEY [WAIT_MS [WORK_MS]]]
               (defaults: example 5000 0)
--shared takes a read hold that other --shared runs share; --limit N takes
one of N permits of a semaphore (protocol 1.1).
--tls connects with TLS (to the broker's tls_port), verifying the broker's
certificate against --cacert (default: the system's CAs) and the host name
or IP; --cert and --key send a client certificate (tls_auth_clients).
The broker is $LOCKBROKER_HOST:$LOCKBROKER_PORT (127.0.0.1:7711).
Exits 0 when done, 75 if the lock stayed busy, 1 on an error.
"""
import os
import socket
import ssl
import sys
import time

# If the connection drops, the broker keeps our locks this long for RESUME.
GRACE_MS = 10000


class Session:
    """A broker session that survives a dropped connection: HELLO ... GRACE
    gives a client-id and a secret, and RESUME with both on a new
    connection gets the session back, locks and all."""

    def __init__(self, addr, timeout, tls=None):
        # tls: None for plain TCP, or an ssl.SSLContext (see tls_context)
        self.addr, self.timeout, self.tls = addr, timeout, tls
        self.connect()
        words = self.call("HELLO lock.py GRACE %d" % GRACE_MS).split()
        if len(words) != 4 or words[0] != "OK":
            raise ValueError("HELLO: %s" % " ".join(words))
        self.client_id, self.secret = words[1], words[3]

    def connect(self):
        self.sock = socket.create_connection(self.addr, timeout=self.timeout)
        if self.tls is not None:
            # checks the certificate against the host name (or IP) too
            self.sock = self.tls.wrap_socket(self.sock,
                                             server_hostname=self.addr[0])
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


def tls_context(cacert=None, cert=None, key=None):
    """A client TLS context: TLS 1.2 or later, the broker's certificate
    verified against cacert (None: the system's CAs), and with cert and
    key, a client certificate for a broker with tls_auth_clients."""
    ctx = ssl.create_default_context(cafile=cacert)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


def main():
    args, shared, limit = sys.argv[1:], False, None
    tls, files = False, {"--cacert": None, "--cert": None, "--key": None}
    while args[:1] and args[0] in ("--tls",) + tuple(files):
        if args[0] == "--tls":
            tls, args = True, args[1:]
        elif len(args) > 1:
            files[args[0]], args = args[1], args[2:]
        else:
            raise ValueError("%s needs a file" % args[0])
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
    ctx = tls_context(files["--cacert"], files["--cert"],
                      files["--key"]) if tls else None
    s = Session((host, port), timeout=wait_ms / 1000 + 10, tls=ctx)
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
