"""The wire words of protocol 1.2, without any I/O: checking what goes into
a request line, reading reply and event lines, and the small value types a
caller sees (a key's state, a CHECK answer).  See proto/PROTOCOL.md and the
1.2 part 1 words (ASYNC, CANCEL, VALUE, PROCLAIM, WATCH, CHECK)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from .errors import BadArgument, ProtocolError

MAX_KEY = 256           # the broker's default max_key_len
MAX_VALUE = 256
MAX_MS = 2147483647     # the largest <ms> the protocol takes
MIN_VERSION = (1, 2)

_WORD = re.compile(r"[\x21-\x7e]+")


def check_word(word: str, what: str, longest: int = 64) -> str:
    """A word of the protocol: 1..longest printable ASCII characters
    without blanks (0x21..0x7e)."""
    if not isinstance(word, str) or not _WORD.fullmatch(word) or \
            len(word) > longest:
        raise ValueError("%s: 1..%d printable ASCII characters without "
                         "blanks, not %r" % (what, longest, word))
    return word


def check_key(key: str) -> str:
    return check_word(key, "a key", MAX_KEY)


def check_value(value: str) -> str:
    return check_word(value, "a value", MAX_VALUE)


def to_ms(seconds: float, what: str, minimum: int = 0) -> int:
    """Seconds (the API's unit) to the protocol's whole milliseconds,
    rounded up and clamped to the protocol's range."""
    if seconds is None or seconds != seconds or seconds < 0:
        raise ValueError("%s must be a number of seconds >= 0, not %r"
                         % (what, seconds))
    return max(minimum, min(MAX_MS, int(math.ceil(seconds * 1000.0))))


def acquire_line(key: str, *, shared: bool = False, limit: int | None = None,
                 wait_ms: int = 0, ttl_ms: int | None = None,
                 value: str | None = None, asynchronous: bool = True) -> str:
    """``ACQUIRE <key> [SHARED | LIMIT n] [WAIT ms] [TTL ms] [VALUE v]
    [ASYNC]``.  A request the broker would refuse with ERR BADARG raises
    BadArgument (a ValueError) before it is sent."""
    words = ["ACQUIRE", check_key(key)]
    if shared and limit is not None:
        raise BadArgument("shared and limit exclude each other", key=key)
    if shared:
        words.append("SHARED")
    if limit is not None:
        if not isinstance(limit, int) or not 1 <= limit <= 1000000:
            raise BadArgument("limit is 1..1000000, not %r" % (limit,),
                              key=key)
        words += ["LIMIT", str(limit)]
    if value is not None:
        if shared or limit is not None:
            raise BadArgument("a value goes on an exclusive hold only",
                              key=key)
        words += ["VALUE", check_value(value)]
    if wait_ms:
        words += ["WAIT", str(wait_ms)]
    if ttl_ms is not None:
        words += ["TTL", str(max(1, ttl_ms))]
    if asynchronous:
        words.append("ASYNC")
    return " ".join(words)


# ------------------------------------------------------------------ replies --

def reply_kind(line: str) -> str:
    """OK, BUSY or ERR: the first word of a reply line."""
    first = line.split(" ", 1)[0]
    if first not in ("OK", "BUSY", "ERR"):
        raise ProtocolError("not a reply: %r" % line)
    return first


def parse_token(word: str) -> int:
    if not word.isdigit() or len(word) > 16:
        raise ProtocolError("not a fencing token: %r" % word)
    return int(word)


def parse_version(hello_reply: str) -> tuple[int, ...]:
    """``OK <client-id> lockbroker/<version> [<secret>]`` -> (major, minor,
    patch)."""
    m = re.search(r"\blockbroker/(\d+)\.(\d+)(?:\.(\d+))?", hello_reply)
    if not m:
        raise ProtocolError("HELLO reply without a version: %r" % hello_reply)
    return tuple(int(x) for x in m.groups(default="0"))


@dataclass(frozen=True)
class KeyState:
    """Who holds a key: the answer of ``owner()`` and each state a watch
    sees.  ``kind`` is free, exclusive, shared or semaphore; ``holders``
    counts the sessions holding it (1 for exclusive); ``client_id``,
    ``token`` and ``value`` describe an exclusive holder (``client_id`` is
    "?" when the broker may not show it, ``value`` None when it has none);
    ``limit`` is a semaphore's; ``ttl_ms`` what an OWNER saw left."""

    kind: Literal["free", "exclusive", "shared", "semaphore"]
    holders: int = 0
    limit: int | None = None
    client_id: str | None = None
    token: int | None = None
    value: str | None = None
    ttl_ms: int | None = None

    @property
    def free(self) -> bool:
        return self.kind == "free"


FREE = KeyState("free")


def _value(word: str) -> str | None:
    return None if word == "-" else word


def parse_owner(line: str) -> KeyState:
    """The reply to ``OWNER <key> VALUE`` (or plain ``OWNER``)."""
    w = line.split()
    try:
        if w[0] != "OK":
            raise ProtocolError("not an OWNER answer: %r" % line)
        if w[1:] == ["-"]:
            return FREE
        if w[1] == "SHARED":
            return KeyState("shared", holders=int(w[2]))
        if w[1] == "SEMAPHORE":
            return KeyState("semaphore", holders=int(w[2]), limit=int(w[3]))
        return KeyState("exclusive", holders=1, client_id=w[1],
                        ttl_ms=int(w[2]), token=parse_token(w[3]),
                        value=_value(w[4]) if len(w) > 4 else None)
    except (IndexError, ValueError):
        raise ProtocolError("not an OWNER answer: %r" % line) from None


@dataclass(frozen=True)
class CheckResult:
    """CHECK's answer: ``current`` when the token's hold is alive in Redis;
    otherwise ``token`` is the current holder's (None: the key is free)."""

    current: bool
    token: int | None = None

    def __bool__(self) -> bool:
        return self.current


def parse_check(line: str, token: int) -> CheckResult:
    w = line.split()
    if w[:2] == ["OK", "CURRENT"]:
        return CheckResult(True, token)
    if w[:2] == ["OK", "STALE"] and len(w) == 3:
        return CheckResult(False, None if w[2] == "-" else parse_token(w[2]))
    raise ProtocolError("not a CHECK answer: %r" % line)


# ------------------------------------------------------------------- events --

@dataclass(frozen=True)
class Event:
    """One ``EVENT <kind> <key> ...`` line: kind is LOST, GRANTED, TIMEOUT,
    FAILED, QUEUED, HOLDER or FREE; args are the words after the key."""

    kind: str
    key: str
    args: tuple[str, ...]


def parse_event(line: str) -> Event:
    w = line.split()
    if len(w) < 3 or w[0] != "EVENT":
        raise ProtocolError("not an event: %r" % line)
    return Event(w[1], w[2], tuple(w[3:]))


def watch_state(ev: Event) -> KeyState:
    """The key state an ``EVENT HOLDER`` or ``EVENT FREE`` line tells."""
    a = ev.args
    try:
        if ev.kind == "FREE":
            return FREE
        if a[0] == "SHARED":
            return KeyState("shared", holders=int(a[1]))
        if a[0] == "SEMAPHORE":
            return KeyState("semaphore", holders=int(a[1]), limit=int(a[2]))
        return KeyState("exclusive", holders=1, client_id=a[0],
                        token=parse_token(a[1]), value=_value(a[2]))
    except (IndexError, ValueError):
        raise ProtocolError("not a watch event: %s %s %s"
                            % (ev.kind, ev.key, " ".join(a))) from None


def parse_list(line: str) -> list[str]:
    """``OK <n> [key ...]`` (HELD, RESUME) -> the keys."""
    w = line.split()
    if len(w) < 2 or w[0] != "OK" or not w[1].isdigit() or \
            int(w[1]) != len(w) - 2:
        raise ProtocolError("not an OK <n> <keys> answer: %r" % line)
    return w[2:]


def parse_address(addr: str, default_port: int = 7711) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]:port`` -> (host, port)."""
    m = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?|([^:]+)(?::(\d+))?", addr)
    if not m:
        raise ValueError("a broker address is host[:port], not %r" % addr)
    host = m.group(1) or m.group(3)
    port = m.group(2) or m.group(4)
    return host, int(port) if port else default_port
