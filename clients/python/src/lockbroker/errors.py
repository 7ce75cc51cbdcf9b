"""The exceptions of the lockbroker client: one class per ERR code of the
protocol, one per outcome that is not a grant (BUSY, a wait that ran out, a
lost hold, a cancelled wait), and the library's own (a broker too old, none
reachable, a session that could not be resumed, a closed client, misuse).

Every message says what happened to which key, for a person
(``orders:42: the lock was lost (token 1795805345549156)``); the wire is in
attributes: ``key``, ``reply`` (the broker's line: ``ERR LOST ...``,
``EVENT LOST ...``, ``BUSY``, ...) and ``request`` (the line it answered),
each None when there is none.  Branch on the class, never on the message."""

from __future__ import annotations

from typing import Optional

# The verbs whose first argument is a key: an error to one of them is
# about that key.
_KEYED = frozenset(("ACQUIRE", "RELEASE", "RENEW", "OWNER", "CHECK",
                    "PROCLAIM", "WATCH", "UNWATCH", "CANCEL"))


def key_of(request: Optional[str]) -> Optional[str]:
    """The key a request line names (None for HELLO, AUTH, RESUME, ...)."""
    words = (request or "").split()
    if len(words) > 1 and words[0].upper() in _KEYED:
        return words[1]
    return None


def describe(subject: Optional[str], phrase: str,
             detail: Optional[str] = None) -> str:
    """``<subject>: <phrase> (<detail>)``, the shape of every message."""
    head = "%s: %s" % (subject, phrase) if subject else phrase
    return "%s (%s)" % (head, detail) if detail else head


class LockBrokerError(Exception):
    """Base of every exception this library raises.  ``key``, ``reply``
    and ``request``: the key it is about, the broker's line and the
    request line it answered (None when there is none)."""

    #: The conformance word for this error (README of tests/conformance).
    code = "ERROR"

    def __init__(self, message: str = "", *, key: Optional[str] = None,
                 reply: Optional[str] = None,
                 request: Optional[str] = None) -> None:
        super().__init__(message)
        self.key = key
        self.reply = reply
        self.request = request


# -------------------------------------------------- the broker's ERR codes --

class BrokerError(LockBrokerError):
    """An ``ERR <CODE> <text>`` reply (or an ``EVENT FAILED <key> <CODE>``).
    ``code`` is the code, ``text`` the broker's words after it (for
    people: branch on the class)."""

    code = "ERR"
    #: What the code means, in the message.
    phrase = "the broker refused the request"

    def __init__(self, text: str = "", request: Optional[str] = None, *,
                 key: Optional[str] = None, reply: Optional[str] = None,
                 message: Optional[str] = None) -> None:
        self.text = text
        if key is None:
            key = key_of(request)
        if message is None:
            verb = (request or "").split(" ", 1)[0] or None
            message = describe(key or verb, self.phrase.format(
                verb=verb or "the request"), text or None)
        super().__init__(message, key=key, reply=reply, request=request)


class BadCommand(BrokerError):
    code = "BADCMD"
    phrase = "the broker does not know {verb}"


class BadArgument(BrokerError, ValueError):
    code = "BADARG"
    phrase = "bad argument"


class LineTooLong(BrokerError):
    code = "TOOLONG"
    phrase = "the request line is too long"


class NotAuthenticated(BrokerError, PermissionError):
    """AUTH is needed, or the token (or a RESUME's secret) is wrong."""
    code = "NOAUTH"
    phrase = "not authenticated"


class NotHeld(BrokerError):
    code = "NOTHELD"
    phrase = "not held by this session"


class LockLost(BrokerError):
    """The hold is gone: the broker said ``EVENT LOST`` or ``ERR LOST``, or a
    reconnect could not keep it.  Stop using the resource.  ``token``: the
    lost hold's fencing token (None when unknown)."""
    code = "LOST"
    phrase = "the lock was lost"

    def __init__(self, text: str = "", request: Optional[str] = None, *,
                 key: Optional[str] = None, reply: Optional[str] = None,
                 message: Optional[str] = None,
                 token: Optional[int] = None) -> None:
        self.token = token
        if message is None and token is not None:
            message = describe(key or key_of(request), self.phrase,
                               "token %d" % token + ("; " + text if text
                                                     else ""))
        super().__init__(text, request, key=key, reply=reply,
                         message=message)


class Unavailable(BrokerError):
    """The broker cannot reach Redis (``ERR UNAVAILABLE``, or a wait that
    ended ``EVENT FAILED <key> UNAVAILABLE``)."""
    code = "UNAVAILABLE"
    phrase = "the broker cannot reach Redis"


class LimitExceeded(BrokerError):
    code = "LIMIT"
    phrase = "a broker limit was reached"


class NoSession(BrokerError):
    code = "NOSESSION"
    phrase = "the session cannot be resumed"


class Denied(BrokerError, PermissionError):
    """The key is outside the patterns of the app this session is."""
    code = "DENIED"
    phrase = "denied: outside this app's keys"


ERR_CLASSES: dict[str, type[BrokerError]] = {
    cls.code: cls for cls in (BadCommand, BadArgument, LineTooLong,
                              NotAuthenticated, NotHeld, LockLost,
                              Unavailable, LimitExceeded, NoSession, Denied)}


def error_for_code(code: str, text: str = "", request: Optional[str] = None,
                   **kw: object) -> BrokerError:
    """The exception for an ERR code (an unknown code still gives a
    BrokerError carrying it)."""
    cls = ERR_CLASSES.get(code)
    if cls is None:
        err = BrokerError(text, request, **kw)     # type: ignore[arg-type]
        err.code = code or "ERR"
        return err
    return cls(text, request, **kw)                # type: ignore[arg-type]


def error_from_reply(line: str, request: Optional[str] = None,
                     **kw: object) -> BrokerError:
    """The exception for an ``ERR <CODE> <text>`` line."""
    words = line.split(" ", 2)
    code = words[1] if len(words) > 1 else ""
    text = words[2] if len(words) > 2 else ""
    return error_for_code(code, text, request, reply=line, **kw)


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
    that holds it through this client, a released hold, a closed client
    (``Closed``)."""
    code = "USAGE"


class Closed(UsageError):
    """The client was closed (``close()``, or the end of the process): a
    request made after it, or a wait it ended."""


class ConnectError(LockBrokerError, ConnectionError):
    """No broker of the list could be reached (or the connection broke and
    could not be made again within the retry budget)."""
    code = "CONNECT"


class VersionError(LockBrokerError):
    """The broker speaks a protocol older than 1.2."""
    code = "VERSION"


class SessionLost(LockLost):
    """The session could not be resumed after its connection was lost (or
    the client was closed): its holds are gone."""
    code = "SESSION"


def lost(key: str, token: int, why: str = "", *,
         cls: type[LockLost] = LockLost, reply: Optional[str] = None,
         request: Optional[str] = None) -> LockLost:
    """The error of a lost hold: ``<key>: the lock was lost (token <n>)``,
    then why when there is more to say."""
    message = describe(key, LockLost.phrase, "token %d" % token)
    if why:
        message += ": " + why
    return cls(why, request, key=key, reply=reply, message=message,
               token=token)


def busy(key: str, reply: Optional[str] = "BUSY",
         request: Optional[str] = None,
         who: str = "another session") -> LockBusy:
    """The error of a one-try take of a key someone holds."""
    return LockBusy(describe(key, "held by " + who), key=key, reply=reply,
                    request=request)


class ProtocolError(LockBrokerError):
    """The broker sent a line this library cannot read."""
    code = "PROTOCOL"
