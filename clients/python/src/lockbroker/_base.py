"""What Client and AsyncClient, their holds and their watches have in
common, whatever drives their I/O: options and session core, the requests
each method builds, the idle-PING rule, the bookkeeping of watches, and a
hold's and a watch's read-only face."""

from __future__ import annotations

import contextlib
import functools
import ssl
import time
from typing import Any, Callable, ContextManager, Generator, Sequence

from . import protocol as P
from ._common import (DEFAULT_GRACE, DEFAULT_PING_INTERVAL,
                      DEFAULT_PING_TIMEOUT, ConnectionEvent, Options,
                      addr_text, emit, make_options, rotation, ttl_ms)
from ._core import (Acquire, Core, Future, HoldRequest, HoldState, Request,
                    WatchState, log)
from .counters import CounterEvent, Counters
from .errors import (Closed, ConnectError, LockBrokerError, LockLost,
                     UsageError, describe, key_of)


def no_answer(request: str, timeout: float) -> ConnectError:
    """The error of a request the broker did not answer in time."""
    key = key_of(request)
    return ConnectError(describe(key or request.split(" ", 1)[0],
                                 "no answer within %.3g s" % timeout),
                        key=key, request=request)


class ClientBase:
    """A lockbroker session's client, apart from its I/O.

    ``brokers``: "host:port", a comma-separated list or a sequence; the
    client connects to the first that answers and, when its connection
    breaks, resumes its session (RESUME) on any of them.  ``grace``: the
    seconds the broker keeps the session's holds after its connection
    broke (HELLO GRACE; default 5; 0: none, the holds end with the
    connection): a crashed app's locks are free after it.  The end of the
    process, or of the client object, ends the session with QUIT (its
    locks free at once).
    ``auth``: the broker's AUTH token.  ``tls``: an ``ssl.SSLContext`` (or
    True for the system's default one); ``tls_server_name``: the name to
    check the broker's certificate against (default: the host).  ``name``:
    a label for the session.  ``connect_timeout``: per connection attempt.
    ``resume_timeout``: the retry budget after a broken connection
    (default: the grace); then holds are reported lost and requests fail,
    and the client keeps trying in the background.  ``ping_interval`` /
    ``ping_timeout`` (default 2 and 2): after ``ping_interval`` without a
    byte from the broker the client sends PING, and with nothing more for
    ``ping_timeout`` it declares the connection dead (a reply still
    arriving, however long, is no silence; nor is a 1.1 blocking wait).
    ``request_timeout``: how long a request other than a wait may go
    unanswered.  ``on_event``: a callable given a
    ``ConnectionEvent`` on connects, disconnects, resumes and new sessions
    (the ``lockbroker`` logger says the same).  ``on_counter``: a callable
    given a ``CounterEvent`` each time one of ``counters()`` moves.
    """

    def __init__(self, brokers: str | Sequence[str] = "127.0.0.1:7711", *,
                 grace: float = DEFAULT_GRACE, auth: str | None = None,
                 tls: ssl.SSLContext | bool | None = None,
                 tls_server_name: str | None = None,
                 name: str | None = None, connect_timeout: float = 5.0,
                 resume_timeout: float | None = None,
                 ping_interval: float = DEFAULT_PING_INTERVAL,
                 ping_timeout: float = DEFAULT_PING_TIMEOUT,
                 request_timeout: float = 30.0,
                 on_event: Callable[[ConnectionEvent], None] | None = None,
                 on_counter: Callable[[CounterEvent], None] | None = None
                 ) -> None:
        self._o: Options = make_options(
            brokers, grace=grace, auth=auth, tls=tls,
            tls_server_name=tls_server_name, name=name,
            connect_timeout=connect_timeout, resume_timeout=resume_timeout,
            ping_interval=ping_interval, ping_timeout=ping_timeout,
            request_timeout=request_timeout, on_event=on_event,
            on_counter=on_counter)
        self._core = Core(self, name=name, grace_ms=self._o.grace_ms,
                          auth=auth, allow_old=self._o.allow_old)
        self._core.on_counter = on_counter
        self._connected = False
        self._closed = False
        self._closing = False           # QUIT sent: the end is no break
        self._current = 0               # index of the broker in use
        self._last_rx = 0.0             # when a line last came
        self._ping_sent: float | None = None
        self._start()

    def _start(self) -> None:
        """The driver's own set-up (Client connects here)."""

    # -- the core's driver (Driver in _core.py), given by each client
    def new_future(self) -> Future:
        raise NotImplementedError

    def defer(self, fn: Callable[[], None]) -> None:
        raise NotImplementedError

    def wake_writer(self) -> None:
        raise NotImplementedError

    def _guard(self) -> ContextManager[Any]:
        """What makes core calls safe from the caller's side: the
        threaded client's lock; nothing in asyncio (one thread)."""
        return contextlib.nullcontext()

    # -- facts
    @property
    def client_id(self) -> str | None:
        """The session's client-id (the owner the broker shows)."""
        return self._core.client_id

    @property
    def version(self) -> tuple[int, ...]:
        """The broker's version, from HELLO."""
        return self._core.version

    @property
    def broker(self) -> str:
        """The address of the broker in use."""
        return addr_text(self._o.brokers[self._current])

    def counters(self) -> Counters:
        """A snapshot of the client's counters (see ``Counters``)."""
        with self._guard():
            return self._core.counters.snapshot()

    # -- connections
    def _announce(self, i: int, resumed: bool) -> None:
        self._current = i
        with self._guard():
            self._core.count("reconnects")
            if resumed:
                self._core.count("resumes")
        self._emit("resumed" if resumed else "new_session", i)

    def _emit(self, kind: str, i: int | None, detail: str = "") -> None:
        """Log and tell the hook (kind: see ConnectionEvent); i: the
        broker's index (the session's client-id is the detail then, unless
        one is given)."""
        broker = "" if i is None else addr_text(self._o.brokers[i])
        if i is not None and not detail:
            detail = "session %s" % self._core.client_id
        emit(self._o, kind, broker, detail, self.defer)

    def _reconnect_plan(self, reason: str
                        ) -> Generator[tuple[int, bool] | float, str, None]:
        """The one reconnect policy of both clients, as a generator: it
        yields (i, resume) for an attempt on broker i (the driver sends
        back what went wrong, or stops on success) or a delay in seconds
        to sleep.  The next broker first (the one in use may be dead or
        stopped; any broker of the same Redis can resume), every broker
        in turn, backoff from 50 ms doubling to 1 s; RESUME until the retry
        budget runs out, then everything is failed and a new session is
        tried for as long as the client lives."""
        self._emit("disconnected", self._current, reason)
        give_up_at = time.monotonic() + self._o.resume_timeout
        resume, delay, last = True, 0.05, ""
        while not self._closed:
            for i in rotation(self._o.brokers, self._current + 1):
                if self._closed:
                    return
                failed = yield (i, resume)
                last = "%s: %s" % (addr_text(self._o.brokers[i]), failed)
                log.debug("reconnect: %s", last)
            if resume and time.monotonic() >= give_up_at:
                resume = False
                with self._guard():
                    self._core.fail_all(ConnectError(
                        "no broker answered within %.1f s: %s"
                        % (self._o.resume_timeout, last)))
                self._emit("reconnect_failed", None, last)
            yield delay
            delay = min(delay * 2, 1.0)

    def _ping_due(self) -> str:
        """With the guard held, connected: send the idle PING when due; a
        reason when the connection is to be declared dead."""
        now = time.monotonic()
        if self._ping_sent is not None:
            if self._last_rx >= self._ping_sent:
                self._ping_sent = None
            elif now - self._ping_sent >= self._o.ping_timeout and \
                    not self._core.blocking and not self._input_waiting():
                self._ping_sent = None
                return "no reply to PING within %.1f s" % self._o.ping_timeout
            return ""
        if now - self._last_rx >= self._o.ping_interval:
            self._ping_sent = now
            self._core.submit(Request("PING", None, replay=False), wake=False)
        return ""

    def _input_waiting(self) -> bool:
        """Whether bytes from the broker wait to be read (a reader held
        up, say by a C extension keeping the GIL, is no silent broker).
        asyncio reads what came before it runs a timer's task."""
        return False

    def _ping_check_in(self) -> float:
        """Seconds until _ping_due has something to do."""
        now = time.monotonic()
        if self._ping_sent is not None:
            return max(0.01, self._ping_sent + self._o.ping_timeout - now)
        return max(0.01, self._last_rx + self._o.ping_interval - now)

    # -- requests
    def _check_open(self) -> None:
        if self._closed:
            raise Closed("the client is closed")

    def _acquire(self, key: str, timeout: float | None, fut: Future,
                 owner: Any, *, shared: bool, limit: int | None,
                 ttl: float | None, value: str | None,
                 on_lost: Callable[[LockLost], None] | None) -> Acquire:
        P.check_key(key)
        P.acquire_line(key, shared=shared, limit=limit, value=value)
        deadline = None if timeout is None else \
            time.monotonic() + max(0.0, timeout)
        return Acquire(key, fut, owner=owner, shared=shared, limit=limit,
                       deadline=deadline, ttl_ms=ttl_ms(ttl), value=value,
                       listeners=[on_lost] if on_lost else ())

    def _owner_request(self, key: str, fut: Future) -> Request:
        P.check_key(key)
        words = "OWNER %s VALUE" if self._core.async_waits else "OWNER %s"
        return Request(words % key, fut, P.parse_owner)

    def _check_request(self, key: str, token: int, fut: Future) -> Request:
        P.check_key(key)
        if not isinstance(token, int) or not 1 <= token < 2 ** 53:
            raise ValueError("a token is an integer 1..2^53-1")
        return Request("CHECK %s %d" % (key, token), fut,
                       lambda line: P.parse_check(line, token))

    @staticmethod
    def _stats(line: str) -> dict[str, str]:
        return dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)

    # -- watches
    def _add_watch(self, key: str, listener: Callable[[Any], None]) -> bool:
        """With the guard held: listen to key's states; True when the key
        was not watched yet (the caller sends WATCH)."""
        P.check_key(key)
        self._check_open()
        ws = self._core.watches.get(key)
        new = ws is None
        if ws is None:
            ws = self._core.watches[key] = WatchState(key)
        ws.listeners.append(listener)
        if ws.state is not None:
            self.defer(functools.partial(listener, ws.state))
        return new

    def _drop_watch(self, key: str, listener: Callable[[Any], None]) -> bool:
        """With the guard held: stop listening; True when nobody listens
        any more (the caller sends UNWATCH)."""
        ws = self._core.watches.get(key)
        if ws is None or listener not in ws.listeners:
            return False
        ws.listeners.remove(listener)
        if ws.listeners:
            return False
        ws.active = False
        del self._core.watches[key]
        return not self._closed


class HoldBase:
    """A hold's read-only face and the requests on it."""

    def __init__(self, client: ClientBase, state: HoldState,
                 keep: Any = None) -> None:
        self._client = client
        self._st = state
        self._keep = keep       # a Client handle: alive while the hold is
        self._released = False

    key = property(lambda self: self._st.key)
    token = property(lambda self: self._st.token,
                     doc="The fencing token of this hold.")
    kind = property(lambda self: self._st.kind,
                    doc="exclusive, shared or semaphore.")
    value = property(lambda self: self._st.value)
    lost = property(lambda self: self._st.lost,
                    doc="True once the hold is known lost.")
    lost_error = property(lambda self: self._st.lost_error)
    released = property(lambda self: self._released)

    def add_lost_callback(self, fn: Callable[[LockLost], None]) -> None:
        """fn(LockLost) when the hold is lost (at once if it is already)."""
        with self._client._guard():
            err = self._st.lost_error
            if err is not None:
                self._client.defer(functools.partial(fn, err))
            else:
                self._st.listeners.append(fn)

    def _releasing(self) -> None:
        if self._released:
            raise UsageError(describe(self.key, "released already"),
                             key=self.key)
        self._released = True

    def _usable(self) -> None:
        if self._released:
            raise UsageError(describe(self.key, "released already"),
                             key=self.key)
        if self._st.lost_error is not None:
            raise self._st.lost_error

    def _renew_request(self, ttl: float | None, fut: Future) -> HoldRequest:
        self._usable()
        text = "RENEW " + self.key
        if ttl is not None:
            text += " TTL %d" % P.to_ms(ttl, "ttl", minimum=1)
        return HoldRequest(text, self._st, fut,
                           lambda line: int(line.split()[1]) / 1000.0)

    def _proclaim_request(self, value: str, fut: Future) -> HoldRequest:
        self._usable()
        P.check_value(value)
        return HoldRequest("PROCLAIM %s %s" % (self.key, value), self._st,
                           fut)

    def __repr__(self) -> str:
        return "<lockbroker.%s %s token %d%s>" % (
            type(self).__name__, self.key, self.token,
            " LOST" if self.lost else "")


class WatchBase:
    """A watch's read-only face: the latest state and the leader, or the
    error that ended it."""

    def __init__(self, key: str,
                 on_change: Callable[[P.KeyState], None] | None,
                 on_error: Callable[[LockBrokerError], None] | None
                 ) -> None:
        self.key = key
        self._on_change = on_change
        self._on_error = on_error
        self._state: P.KeyState | None = None
        self._error: LockBrokerError | None = None
        self._closed = False

    @property
    def state(self) -> P.KeyState | None:
        """The latest state (None before the first)."""
        return self._state

    @property
    def error(self) -> LockBrokerError | None:
        """What ended the watch (the broker refused WATCH, e.g. after a
        failover to a broker without it); None while it runs."""
        return self._error

    def _seen(self, x: P.KeyState | LockBrokerError) -> bool:
        """Take a state or the watch's end (with the driver's lock or
        loop); True for a state."""
        if isinstance(x, LockBrokerError):
            self._error = x
            self._closed = True
            return False
        self._state = x
        return True

    def _notify_user(self, x: P.KeyState | LockBrokerError) -> None:
        """The user's callback for x (outside any lock of ours)."""
        if isinstance(x, LockBrokerError):
            if self._on_error is not None:
                self._on_error(x)
        elif self._on_change is not None:
            self._on_change(x)

    def _check(self) -> None:
        """Raise what ended the watch, or UsageError once it is closed."""
        if self._error is not None:
            raise self._error
        if self._closed:
            raise UsageError(describe(self.key, "the watch is closed"),
                             key=self.key)

    @property
    def leader(self) -> str | None:
        """The value of the key's exclusive holder: the elected leader's
        (None: nobody, or a holder without a value)."""
        s = self._state
        return s.value if s is not None and s.kind == "exclusive" else None
