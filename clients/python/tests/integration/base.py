"""What the integration tests share: the conformance helper (one process
for the whole run, reset before each test: a fresh Redis, fresh brokers,
a new key prefix) and clients that are closed after each test."""

from __future__ import annotations

import logging
import os
import sys
import time
import unittest
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))

import lockbroker  # noqa: E402
from servers import Servers, allow_old_brokers  # noqa: E402

logging.getLogger("lockbroker").setLevel(
    logging.DEBUG if os.environ.get("LOCKBROKER_LOG") else logging.CRITICAL)

_servers: Servers | None = None


def servers() -> Servers:
    global _servers
    if _servers is None:
        _servers = Servers()
    return _servers


def stop_servers() -> None:
    global _servers
    if _servers is not None:
        _servers.close()
        _servers = None


def wait_for(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out after %.1f s waiting for %s"
                                 % (timeout, what))
        time.sleep(0.01)


class Events:
    """A reconnect hook that remembers the kinds it was told."""

    def __init__(self) -> None:
        self.kinds: list[str] = []

    def __call__(self, ev: lockbroker.ConnectionEvent) -> None:
        self.kinds.append(ev.kind)


class BrokerTest(unittest.TestCase):
    """Each test starts with the brokers named in BROKERS (a list of
    broker step lines, as in a transcript) on a fresh Redis."""

    BROKERS = ["broker b1"]

    def setUp(self) -> None:
        self.servers = servers()
        self.servers.reset()
        for line in self.BROKERS:
            self.servers.step(line)
            allow_old_brokers(self.servers, line.split()[1])

    def step(self, line: str) -> None:
        self.servers.step(line)

    def addr(self, *names: str, tls: bool = False) -> list[str]:
        return [self.servers.address(n, tls) for n in names or ("b1",)]

    def client(self, *names: str, **kw: Any) -> lockbroker.Client:
        kw.setdefault("grace", 10.0)
        c = lockbroker.Client(self.addr(*names, tls="tls" in kw), **kw)
        self.addCleanup(c.close)
        return c

    def needs_12(self) -> None:
        """Fail at once, saying why, on a broker without protocol 1.2 (the
        test is expected to fail until it lands: never faked here)."""
        v = self.servers.broker("b1")["version"]
        if tuple(int(x) for x in v.split(".")[:2]) < (1, 2):
            self.fail("needs protocol 1.2: the broker speaks %s" % v)
