"""What Client and AsyncClient share besides the session core: their
options, the reconnect hook's event, the broker address list, and the
mapping from API units (seconds) to the protocol's."""

from __future__ import annotations

import functools
import logging
import os
import ssl
from dataclasses import dataclass
from typing import Callable, Sequence

from . import protocol as P
from .counters import CounterEvent

log = logging.getLogger("lockbroker")

DEFAULT_BROKER = "127.0.0.1:7711"

#: Seconds the broker keeps a session's holds after its connection broke
#: without QUIT (HELLO GRACE): long enough to resume on another broker
#: after a broker's kill -9 (tests/measure_resume.py: 50 clients back
#: within 40 ms), short enough that a crashed app's locks are free within
#: seconds.  The same in every lockbroker library.
DEFAULT_GRACE = 5.0

#: Seconds without a line from the broker before the idle PING, and then
#: without any line before the connection is declared dead.  A broker whose
#: host vanished (no FIN, no RST) is found within their sum, 4 s, and the
#: session resumed elsewhere while its record lives (the grace plus two of
#: the broker's touch periods after its last touch: 6.7 s at the least for
#: the default grace; measure_resume.py --fault pause: 50 clients back
#: within 4.1 s).  The same in every lockbroker library.
DEFAULT_PING_INTERVAL = 2.0
DEFAULT_PING_TIMEOUT = 2.0


@dataclass(frozen=True)
class ConnectionEvent:
    """What the reconnect hook (``on_event``) is told.  ``kind``:

    - ``connected``: the first session is up;
    - ``disconnected``: the connection broke (``detail`` says how);
    - ``resumed``: a new connection took the session over (RESUME) with
      its holds, waits and watches;
    - ``new_session``: the session could not be resumed (no grace, its
      grace ran out, the broker lost it); its holds were reported lost and
      a fresh session took its place, waits and watches issued again;
    - ``reconnect_failed``: no broker answered within the retry budget;
      holds were reported lost, requests failed; the client keeps trying.
    """

    kind: str
    broker: str
    detail: str = ""


@dataclass
class Options:
    """A client's settings, checked once (see Client for their meaning)."""

    brokers: list[tuple[str, int]]
    grace_ms: int
    auth: str | None
    tls: ssl.SSLContext | None
    tls_server_name: str | None
    name: str | None
    connect_timeout: float
    resume_timeout: float
    ping_interval: float
    ping_timeout: float
    request_timeout: float
    on_event: Callable[[ConnectionEvent], None] | None
    on_counter: Callable[[CounterEvent], None] | None
    allow_old: bool

    @property
    def handshake_timeout(self) -> float:
        """How long each handshake reply (HELLO, RESUME) may take: a
        broker that accepts connections but answers nothing (stopped,
        overloaded) is passed over for the next one."""
        return min(self.connect_timeout, max(1.0, self.ping_timeout))

    @property
    def margin(self) -> float:
        """How long past a wait's deadline the caller gives the broker's
        own TIMEOUT to arrive before it gives up locally."""
        return max(1.0, self.ping_timeout)


def make_options(brokers: str | Sequence[str], *, grace: float,
                 auth: str | None, tls: ssl.SSLContext | bool | None,
                 tls_server_name: str | None, name: str | None,
                 connect_timeout: float, resume_timeout: float | None,
                 ping_interval: float, ping_timeout: float,
                 request_timeout: float,
                 on_event: Callable[[ConnectionEvent], None] | None,
                 on_counter: Callable[[CounterEvent], None] | None
                 ) -> Options:
    if isinstance(brokers, str):
        brokers = [b for b in brokers.split(",") if b.strip()]
    addrs = [P.parse_address(b.strip()) for b in brokers]
    if not addrs:
        raise ValueError("no broker address")
    if tls is True:
        tls = ssl.create_default_context()
    elif tls is False:
        tls = None
    if auth is not None:
        P.check_word(auth, "auth token")
    if name is not None:
        P.check_word(name, "name")
    grace_ms = P.to_ms(grace, "grace") if grace else 0
    if resume_timeout is None:
        # beyond the grace a RESUME cannot succeed; without one, a new
        # session is worth trying for a while all the same
        resume_timeout = grace if grace else 10.0
    for what, v in (("connect_timeout", connect_timeout),
                    ("ping_interval", ping_interval),
                    ("ping_timeout", ping_timeout),
                    ("request_timeout", request_timeout)):
        if not v > 0:
            raise ValueError("%s must be > 0 seconds" % what)
    return Options(
        brokers=addrs, grace_ms=grace_ms, auth=auth, tls=tls or None,
        tls_server_name=tls_server_name, name=name,
        connect_timeout=connect_timeout, resume_timeout=resume_timeout,
        ping_interval=ping_interval, ping_timeout=ping_timeout,
        request_timeout=request_timeout, on_event=on_event,
        on_counter=on_counter, allow_old=os.environ.get("LOCKBROKER_ALLOW_OLD") == "1")


def addr_text(addr: tuple[str, int]) -> str:
    host, port = addr
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % addr


def rotation(brokers: list[tuple[str, int]], first: int) -> list[int]:
    """The order to try the brokers in, from index first on (after a
    broken connection: the next broker first, as the one in use may be
    dead or stopped; any broker of the same Redis can resume)."""
    n = len(brokers)
    return [(first + i) % n for i in range(n)]


def emit(opts: Options, kind: str, broker: str, detail: str,
         run: Callable[[Callable[[], None]], None]) -> None:
    """Log a connection event, and have run() call the hook with it (the
    client's callback thread or event loop, never its reader: a hook may
    call the client)."""
    level = logging.WARNING if kind in ("disconnected", "new_session",
                                        "reconnect_failed") else logging.INFO
    log.log(level, "%s %s%s", kind, broker, ": " + detail if detail else "")
    hook = opts.on_event
    if hook is not None:
        run(functools.partial(hook, ConnectionEvent(kind, broker, detail)))


def ttl_ms(ttl: float | None) -> int | None:
    return None if ttl is None else P.to_ms(ttl, "ttl", minimum=1)


def linger_ms(linger: float | None) -> int | None:
    return None if not linger else P.to_ms(linger, "linger", minimum=1)
