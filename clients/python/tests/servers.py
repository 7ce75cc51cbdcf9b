"""The shared conformance helper (tests/conformance/servers.py), driven
over its JSON lines: the Redis and brokers of the integration tests and of
the conformance runner.  The helper stops everything itself when this
process ends, however it ends (its standard input closes)."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
HELPER = os.path.join(REPO, "tests", "conformance", "servers.py")
TRANSCRIPTS = os.path.join(REPO, "tests", "conformance")


class HelperError(AssertionError):
    """The helper answered ok false."""


class Servers:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, HELPER], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, bufsize=1)
        first = self._read()
        if not first.get("ready"):
            raise HelperError("the helper did not start: %r" % first)

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise HelperError("the helper exited (%s)" % self.proc.poll())
        return json.loads(line)

    def request(self, **req: object) -> dict:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if not reply.get("ok"):
            raise HelperError(reply.get("error", repr(reply)))
        return reply

    def step(self, line: str) -> None:
        reply = self.request(op="step", line=line)
        if reply.get("skip"):       # an older helper's "needs": no skips
            raise HelperError(reply["skip"])

    def reset(self) -> None:
        self.request(op="reset")

    def broker(self, name: str) -> dict:
        return self.request(op="broker", name=name)

    def address(self, name: str, tls: bool = False) -> str:
        info = self.broker(name)
        return "127.0.0.1:%d" % (info["tls_port"] if tls else info["port"])

    def tls_context(self, name: str) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.broker(name)["ca"])
        return ctx

    def redis(self) -> dict:
        return self.request(op="redis")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.request(op="quit")
            except (HelperError, OSError, ValueError):
                pass
            self.proc.stdin.close()
            self.proc.wait(30)
        self.proc.stdout.close()


def allow_old_brokers(servers: Servers, name: str) -> None:
    """A broker of this branch may speak 1.1 until protocol 1.2 lands:
    then (and only then) the library is told to accept it, so the 1.1 parts
    are tested now and the version check stays real on a 1.2 broker."""
    version = servers.broker(name)["version"]
    major, minor = (int(x) for x in version.split(".")[:2])
    if (major, minor) < (1, 2):
        os.environ["LOCKBROKER_ALLOW_OLD"] = "1"
