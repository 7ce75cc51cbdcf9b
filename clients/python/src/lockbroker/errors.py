"""The exceptions of the lockbroker client: one class per ERR code of the
protocol, one per outcome that is not a grant (BUSY, a wait that ran out, a
lost hold, a cancelled wait), and the library's own (a broker too old, none
reachable, a session that could not be resumed, misuse)."""

from __future__ import annotations


class LockBrokerError(Exception):
    """Base of every exception this library raises."""

    #: The conformance word for this error (README of tests/conformance).
    code = "ERROR"


# -------------------------------------------------- the broker's ERR codes --

class BrokerError(LockBrokerError):
    """An ``ERR <CODE> <text>`` reply.  ``code`` is the code, ``text`` the
    broker's words after it (for people: branch on the class)."""

    code = "ERR"

    def __init__(self, text: str = "", request: str | None = None) -> None:
        self.text = text
        self.request = request
        where = " (to %s)" % request if request else ""
        super().__init__("%s %s%s" % (self.code, text, where))


class BadCommand(BrokerError):
    code = "BADCMD"


class BadArgument(BrokerError, ValueError):
    code = "BADARG"


class LineTooLong(BrokerError):
    code = "TOOLONG"


class NotAuthenticated(BrokerError, PermissionError):
    """AUTH is needed, or the token (or a RESUME's secret) is wrong."""
    code = "NOAUTH"


class NotHeld(BrokerError):
    code = "NOTHELD"


class LockLost(BrokerError):
    """The hold is gone: the broker said ``EVENT LOST`` or ``ERR LOST``, or a
    reconnect could not keep it.  Stop using the resource."""
    code = "LOST"


class Unavailable(BrokerError):
    """The broker cannot reach Redis (``ERR UNAVAILABLE``, or a wait that
    ended ``EVENT FAILED <key> UNAVAILABLE``)."""
    code = "UNAVAILABLE"


class LimitExceeded(BrokerError):
    code = "LIMIT"


class NoSession(BrokerError):
    code = "NOSESSION"


class Denied(BrokerError, PermissionError):
    """The key is outside the patterns of the app this session is."""
    code = "DENIED"


ERR_CLASSES: dict[str, type[BrokerError]] = {
    cls.code: cls for cls in (BadCommand, BadArgument, LineTooLong,
                              NotAuthenticated, NotHeld, LockLost,
                              Unavailable, LimitExceeded, NoSession, Denied)}


def error_from_reply(line: str, request: str | None = None) -> BrokerError:
    """The exception for an ``ERR <CODE> <text>`` line (an unknown code
    still gives a BrokerError carrying it)."""
    words = line.split(" ", 2)
    code = words[1] if len(words) > 1 else ""
    text = words[2] if len(words) > 2 else ""
    cls = ERR_CLASSES.get(code)
    if cls is None:
        err = BrokerError(text, request)
        err.code = code
        return err
    return cls(text, request)


# ------------------------------------------------ outcomes without a grant --

class NotAcquired(LockBrokerError):
    """The key was not granted: base of LockBusy and LockTimeout."""


class LockBusy(NotAcquired):
    """Someone else holds the key (a one-try lock: ``timeout=0``)."""
    code = "BUSY"


class LockTimeout(NotAcquired, TimeoutError):
    """The wait ran out (``EVENT TIMEOUT``, or the caller's deadline)."""
    code = "TIMEOUT"


class WaitCancelled(LockBrokerError):
    """The wait was cancelled by its caller (``LockRequest.cancel``); the
    key is not held.  (An asyncio task gets ``CancelledError`` instead.)"""
    code = "CANCELLED"


# ------------------------------------------------------ the library's own --

class UsageError(LockBrokerError, RuntimeError):
    """The API was misused: a second take of a key by the thread or task
    that holds it through this client, a closed client, a released hold."""
    code = "USAGE"


class ConnectError(LockBrokerError, ConnectionError):
    """No broker of the list could be reached (or the connection broke and
    could not be made again within the retry budget)."""
    code = "CONNECT"


class VersionError(LockBrokerError):
    """The broker speaks a protocol older than 1.2."""
    code = "VERSION"


class SessionLost(LockLost):
    """The session could not be resumed after its connection was lost: its
    holds are gone (a fresh session took its place)."""
    code = "SESSION"


class ProtocolError(LockBrokerError):
    """The broker sent a line this library cannot read."""
    code = "PROTOCOL"
