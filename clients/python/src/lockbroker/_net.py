"""Sockets for the threaded client: a connection to one broker address
with the liveness options the protocol advises (TCP keepalive with short
timers, TCP_USER_TIMEOUT), plain or TLS.  TLS runs over memory BIOs so
that the reader thread and a writing thread never call into one OpenSSL
object at once."""

from __future__ import annotations

import socket
import ssl
import threading

TCP_USER_TIMEOUT = getattr(socket, "TCP_USER_TIMEOUT", 18)   # Linux option 18


def tune(sock: socket.socket, dead_after_s: float) -> None:
    """TCP_NODELAY (requests are small and pipelined), keepalive probes
    after a few idle seconds, and TCP_USER_TIMEOUT: unacknowledged data
    for dead_after_s ends the connection."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    idle = max(1, int(dead_after_s / 3))
    for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", idle),
                        ("TCP_KEEPCNT", 3)):
        opt = getattr(socket, name, None)
        if opt is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, opt, value)
            except OSError:
                pass
    try:
        sock.setsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT,
                        int(dead_after_s * 1000))
    except OSError:
        pass                        # not Linux: the idle PING still runs


class PlainStream:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def recv(self) -> bytes:
        return self.sock.recv(65536)

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def shutdown(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()


class TLSStream(PlainStream):
    """TLS over a plain socket through an SSLObject: the OpenSSL object is
    touched under one lock, the socket's reads and writes happen outside
    it (one reader thread, writers ordered by their own lock)."""

    def __init__(self, sock: socket.socket, ctx: ssl.SSLContext,
                 server_hostname: str | None) -> None:
        super().__init__(sock)
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.incoming, self.outgoing,
                                server_hostname=server_hostname)
        self.lock = threading.Lock()
        self.wlock = threading.Lock()
        while True:
            try:
                self.obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionError("the broker closed the connection "
                                          "during the TLS handshake")
                self.incoming.write(data)
        self._flush()

    def _flush(self) -> None:
        with self.wlock:
            with self.lock:
                data = self.outgoing.read()
            if data:
                self.sock.sendall(data)

    def recv(self) -> bytes:
        while True:
            with self.lock:
                try:
                    data = self.obj.read(65536)
                except ssl.SSLWantReadError:
                    data = None
                except ssl.SSLZeroReturnError:
                    return b""
                pending = self.outgoing.pending
            if pending:
                self._flush()       # e.g. a key update to answer
            if data:
                return data
            raw = self.sock.recv(65536)
            if not raw:
                return b""
            with self.lock:
                self.incoming.write(raw)

    def sendall(self, data: bytes) -> None:
        with self.wlock:
            with self.lock:
                self.obj.write(data)
                out = self.outgoing.read()
            self.sock.sendall(out)


def open_stream(host: str, port: int, *, timeout: float,
                tls: ssl.SSLContext | None, server_hostname: str | None,
                dead_after_s: float) -> PlainStream:
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        tune(sock, dead_after_s)
        if tls is not None:
            return TLSStream(sock, tls, server_hostname or host)
        return PlainStream(sock)
    except BaseException:
        sock.close()
        raise
