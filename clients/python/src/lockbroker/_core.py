"""The session core, shared by Client (threads) and AsyncClient (asyncio):
no sockets, no threads, no clock of its own.

It keeps what one broker session is: the requests written to the
connection and not answered yet (replies come in request order, so the
oldest takes the next reply line), the queue of requests not written yet,
the holds, the queued waits, the watches.  It turns each line read into a
completion: an ``EVENT`` line goes to the hold, wait or watch it names,
any other line to the oldest request.  When the connection breaks, it
decides what becomes of every request that was in flight once the next
connection is up: resumed (RESUME) or a new session.

A driver (client.py, aio.py) owns the I/O: it calls ``take_outgoing``
when it can write, ``feed`` for each line read, ``connection_lost`` and,
on the next connection, runs ``handshake`` and then ``reconcile``.  It
calls every method with its own lock held (or from its one event-loop
thread), and gives the core its future type and a way to run callbacks
after that lock is let go (``Driver``).
"""

from __future__ import annotations

import functools
import logging
import time
from collections import deque
from typing import Any, Callable, Generator, Iterable, Protocol

from . import protocol as P
from .counters import CounterEvent, Tally
from .errors import (BrokerError, ConnectError, LockBrokerError, LockLost,
                     LockTimeout, NotHeld, ProtocolError, SessionLost,
                     Unavailable, UsageError, VersionError, WaitCancelled,
                     busy, describe, error_for_code, error_from_reply, lost)

log = logging.getLogger("lockbroker")

# A wait that the caller wants without end is asked for in steps of this
# (the broker clamps to its max_wait_ms anyway); each TIMEOUT re-issues it.
FOREVER_STEP_MS = P.MAX_MS


# The driver's future type (concurrent.futures.Future for Client,
# asyncio.Future for AsyncClient): done(), set_result(), set_exception().
Future = Any


class Driver(Protocol):
    def new_future(self) -> Future: ...
    def defer(self, fn: Callable[[], None]) -> None:
        """Run fn once the driver's lock is let go (user callbacks)."""
    def wake_writer(self) -> None:
        """Something was queued by the core itself (not by a caller that
        writes next): make the driver write it."""


def settle(fut: Future, value: Any = None,
           exc: BaseException | None = None) -> None:
    """Complete fut once; later outcomes are dropped."""
    if fut is None or fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)


# ----------------------------------------------------------------- holds --

class HoldState:
    """One hold of this session on a key, as the core knows it."""

    __slots__ = ("key", "token", "kind", "limit", "value", "lost_error",
                 "session", "released", "listeners", "owner", "has_local",
                 "granted_at", "ended")

    def __init__(self, key: str, token: int, kind: str, limit: int | None,
                 value: str | None, session: int) -> None:
        self.key = key
        self.token = token
        self.kind = kind                  # exclusive, shared, semaphore
        self.limit = limit
        self.value = value
        self.lost_error: LockLost | None = None
        self.session = session            # Core.session when granted
        self.released = False
        self.listeners: list[Callable[[LockLost], None]] = []
        self.owner: Any = None            # the thread or task that took it
        self.has_local = False            # holds the local key lock
        self.granted_at = time.monotonic()
        self.ended = False                # counted in Core.counters

    @property
    def lost(self) -> bool:
        return self.lost_error is not None


class WatchState:
    """A key this session watches, the latest state seen, and who wants to
    hear of changes: each listener is called with each state, or once with
    the error that ended the watch (the broker refused WATCH)."""

    __slots__ = ("key", "state", "seq", "listeners", "active")

    def __init__(self, key: str) -> None:
        self.key = key
        self.state: P.KeyState | None = None
        self.seq = 0
        self.listeners: list[Callable[[P.KeyState | LockBrokerError],
                                      None]] = []
        self.active = True


# -------------------------------------------------------------- requests --

class Request:
    """A request line and what to do with its reply.  ``line()`` is asked
    when the request is written (so a wait can compute what is left of its
    deadline); None drops it unsent."""

    key = ""
    blocking = False        # holds back the session's later replies (1.1)

    def __init__(self, text: str, fut: Future,
                 parse: Callable[[str], Any] | None = None,
                 replay: bool = True) -> None:
        self.text = text
        self.fut = fut
        self.parse = parse
        self.replay = replay
        self.abandoned = False

    def line(self, core: "Core") -> str | None:
        if self.abandoned or (self.fut is not None and self.fut.done()):
            return None
        return self.text

    def reply(self, core: "Core", line: str) -> None:
        if line.startswith("ERR"):
            settle(self.fut, exc=error_from_reply(line, self.text))
            return
        try:
            value = self.parse(line) if self.parse else line
        except ProtocolError as e:
            settle(self.fut, exc=e)
            return
        settle(self.fut, value)

    def dropped(self, core: "Core", resumed: bool,
                listed: set[str]) -> bool:
        """The connection broke before the reply: True to send it again
        on the new connection (after ``reconcile``), else settled here."""
        if self.replay and not self.abandoned:
            return True
        settle(self.fut, exc=ConnectError(
            describe(self.key or self.text.split(" ", 1)[0],
                     "the connection was lost before the reply"),
            key=self.key or None, request=self.text))
        return False


class Acquire(Request):
    """ACQUIRE ... ASYNC and its outcome: an ``OK <token>`` at once, or
    ``OK QUEUED`` then one of GRANTED, TIMEOUT, FAILED.  Re-issued with
    what is left of the caller's deadline when the broker's clamped wait
    ran out first, or when a new connection lost the queued wait."""

    def __init__(self, key: str, fut: Future, *, owner: Any,
                 shared: bool = False, limit: int | None = None,
                 deadline: float | None = None, ttl_ms: int | None = None,
                 value: str | None = None,
                 listeners: Iterable[Callable[[LockLost], None]] = ()
                 ) -> None:
        super().__init__("ACQUIRE " + key, fut)
        self.key = key
        self.owner = owner              # the thread or task asking
        self.shared = shared
        self.limit = limit
        self.deadline = deadline        # time.monotonic(), None: no end
        self.started = time.monotonic()
        # a caller who would wait hears TIMEOUT, not BUSY, even when the
        # deadline passed before the request could be written
        self.patient = deadline is None or deadline > time.monotonic()
        self.ttl_ms = ttl_ms
        self.value = value
        self.listeners = list(listeners)
        self.has_local = False          # holds the local key lock
        # local (behind another of this client), new, sent, queued,
        # dropped (its connection broke), done
        self.state = "new"
        self.cancel_error: BaseException | None = None
        self.wait_ms = 0
        self.blocking = False

    @property
    def kind(self) -> str:
        if self.shared:
            return "shared"
        return "semaphore" if self.limit is not None else "exclusive"

    def line(self, core: "Core") -> str | None:
        if self.state == "done":
            return None
        if self.cancel_error is not None:
            self.finish(core, exc=self.cancel_error)
            return None
        if self.deadline is None:
            self.wait_ms = FOREVER_STEP_MS
        else:
            left = self.deadline - time.monotonic()
            self.wait_ms = 0 if left <= 0 else P.to_ms(left, "wait")
        asynchronous = core.async_waits
        self.blocking = not asynchronous and self.wait_ms > 0
        self.text = P.acquire_line(
            self.key, shared=self.shared, limit=self.limit,
            wait_ms=self.wait_ms, ttl_ms=self.ttl_ms, value=self.value,
            asynchronous=asynchronous)
        self.state = "sent"
        return self.text

    def reply(self, core: "Core", line: str) -> None:
        if self.state == "done":
            if line.startswith("OK ") and line != "OK QUEUED":
                core.stray_grant(self.key)      # a caller gave up on it
            return
        if line == "OK QUEUED":
            self.state = "queued"
            core.waits[self.key] = self
            if self.cancel_error is not None:
                core.submit(Cancel(self.key, None))
            return
        if line.startswith("OK "):
            self.granted(core, line.split(" ", 1)[1])
        elif line == "BUSY":
            self.not_granted(core)
        else:
            self.finish(core, exc=error_from_reply(line, self.text))

    def event(self, core: "Core", ev: P.Event) -> None:
        core.waits.pop(self.key, None)
        line = " ".join(("EVENT", ev.kind, ev.key) + ev.args)
        if ev.kind == "GRANTED" and ev.args:
            self.granted(core, ev.args[0])
        elif ev.kind == "TIMEOUT":
            self.not_granted(core, line)
        else:                       # FAILED <CODE>
            code = ev.args[0] if ev.args else "UNAVAILABLE"
            self.finish(core, exc=error_for_code(
                code, "the wait ended", self.text, key=self.key,
                reply=line))

    def granted(self, core: "Core", word: str) -> None:
        try:
            token = P.parse_token(word)
        except ProtocolError as e:
            self.finish(core, exc=e)
            return
        if self.cancel_error is not None:
            core.stray_grant(self.key)
            self.finish(core, exc=self.cancel_error)
            return
        hold = HoldState(self.key, token, self.kind, self.limit, self.value,
                         core.session)
        hold.owner = self.owner
        hold.listeners = self.listeners
        hold.has_local, self.has_local = self.has_local, False
        core.holds[self.key] = hold
        self.state = "done"
        core.count("waits", self.key, hold.granted_at - self.started)
        settle(self.fut, hold)

    def not_granted(self, core: "Core", reply: str = "BUSY") -> None:
        if self.cancel_error is not None:
            self.finish(core, exc=self.cancel_error)
        elif self.wait_ms == 0 and not self.patient:
            self.finish(core, exc=busy(self.key, reply, self.text))
        elif self.deadline is None or self.deadline - time.monotonic() > 0.001:
            core.submit(self)       # the broker clamped the wait: go on
        else:
            self.finish(core, exc=self.timed_out(reply))

    def timed_out(self, reply: str | None = None) -> LockTimeout:
        """The error of a wait whose deadline passed."""
        took = "%.3g s" % (self.deadline - self.started) \
            if self.deadline is not None else "its wait"
        return LockTimeout(describe(self.key, "not granted within " + took),
                           key=self.key, reply=reply, request=self.text)

    def finish(self, core: "Core", exc: BaseException) -> None:
        """Ends without a hold."""
        if self.state == "done":
            return
        self.state = "done"
        core.count("waits", self.key, time.monotonic() - self.started)
        if core.waits.get(self.key) is self:
            del core.waits[self.key]
        if self.has_local:
            self.has_local = False
            core.local_done(self.key)
        settle(self.fut, exc=exc)

    def cancel(self, core: "Core", exc: BaseException) -> None:
        """The caller gives up (cancelled, or its deadline passed while the
        broker could not tell it): withdraw the wait, give back a grant
        that comes anyway, end with exc."""
        if self.state == "done" or self.cancel_error is not None:
            return
        self.cancel_error = exc
        if self.state == "queued":
            core.submit(Cancel(self.key, None))
        elif self.state in ("new", "dropped", "local"):
            self.finish(core, exc)
        # "sent": the reply decides (OK QUEUED -> CANCEL, OK -> release)
        settle(self.fut, exc=exc)

    def dropped(self, core: "Core", resumed: bool,
                listed: set[str]) -> bool:
        if self.state == "done":
            return False
        if self.cancel_error is not None:
            self.finish(core, exc=self.cancel_error)
            return False
        if resumed and self.key in core.requeued:
            self.state = "queued"       # its OK QUEUED was lost, not the wait
            core.waits[self.key] = self
            return False
        self.state = "dropped"
        return True


class Release(Request):
    """RELEASE <key> [LINGER ms] of a hold."""

    def __init__(self, hold: HoldState, linger_ms: int | None,
                 fut: Future) -> None:
        text = "RELEASE " + hold.key
        if linger_ms:
            text += " LINGER %d" % linger_ms
        super().__init__(text, fut)
        self.key = hold.key
        self.hold = hold

    def ended(self, core: "Core") -> None:
        core.forget(self.hold)
        core.let_go(self.hold)

    def reply(self, core: "Core", line: str) -> None:
        if line.startswith("OK"):
            self.ended(core)
            settle(self.fut, None)
            return
        err: BrokerError = error_from_reply(line, self.text)
        if isinstance(err, (LockLost, NotHeld)) and \
                self.hold.lost_error is not None:
            err = self.hold.lost_error
        elif isinstance(err, LockLost):
            err = lost(self.key, self.hold.token, err.text, reply=line,
                       request=self.text)
            core.mark_lost(self.hold, err)
        elif isinstance(err, Unavailable):
            # the broker frees it once Redis answers: for us it is gone
            log.warning("%s (the broker finishes the release)", err)
            self.ended(core)
            settle(self.fut, None)
            return
        self.ended(core)
        settle(self.fut, exc=err)

    def dropped(self, core: "Core", resumed: bool,
                listed: set[str]) -> bool:
        if resumed and self.key in listed:
            return True                     # still ours: release it again
        self.ended(core)
        if self.hold.lost:
            settle(self.fut, exc=self.hold.lost_error)
        else:
            settle(self.fut, None)          # the old session's end freed it
        return False


class HoldRequest(Request):
    """RENEW or PROCLAIM: a request on a hold; ERR LOST marks it lost."""

    def __init__(self, text: str, hold: HoldState, fut: Future,
                 parse: Callable[[str], Any] | None = None) -> None:
        super().__init__(text, fut, parse)
        self.key = hold.key
        self.hold = hold

    def reply(self, core: "Core", line: str) -> None:
        if line.startswith("ERR LOST"):
            text = line.split(" ", 2)[2] if line.count(" ") > 1 else ""
            core.mark_lost(self.hold, lost(self.key, self.hold.token, text,
                                           reply=line, request=self.text))
            settle(self.fut, exc=self.hold.lost_error)
            return
        super().reply(core, line)

    def dropped(self, core: "Core", resumed: bool,
                listed: set[str]) -> bool:
        if resumed and self.key in listed:
            return True
        settle(self.fut, exc=self.hold.lost_error or lost(
            self.key, self.hold.token, "not kept across the reconnect",
            request=self.text))
        return False


class Cancel(Request):
    """CANCEL <key> of a queued wait."""

    def __init__(self, key: str, fut: Future) -> None:
        super().__init__("CANCEL " + key, fut)
        self.key = key

    def reply(self, core: "Core", line: str) -> None:
        acq = core.waits.get(self.key)
        if line == "OK 1" and acq is not None:
            acq.finish(core, exc=acq.cancel_error or WaitCancelled(
                describe(self.key, "the wait was cancelled"), key=self.key,
                reply=line, request=self.text))
        settle(self.fut, line)

    def dropped(self, core: "Core", resumed: bool,
                listed: set[str]) -> bool:
        if self.key in core.waits:      # still queued after the RESUME
            return True
        settle(self.fut, "OK 0")
        return False


class Watch(Request):
    """WATCH <key>: OK, then the state comes as an event."""

    def __init__(self, key: str, fut: Future) -> None:
        super().__init__("WATCH " + key, fut)
        self.key = key

    def reply(self, core: "Core", line: str) -> None:
        if line.startswith("ERR"):
            # e.g. a broker without WATCH after a failover: the watch ends,
            # loudly, and is not asked for again
            err = error_from_reply(line, self.text)
            core.watch_failed(self.key, err)
            settle(self.fut, exc=err)
            return
        super().reply(core, line)

    def dropped(self, core: "Core", resumed: bool,
                listed: set[str]) -> bool:
        w = core.watches.get(self.key)
        if w is not None and w.active:
            return True         # WATCH again: it answers OK, state again
        settle(self.fut, None)
        return False


class LocalKey:
    """The local lock on one key: whose request or hold has it, and the
    requests of this client queued behind it."""

    __slots__ = ("owner", "queue")

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self.queue: deque[Acquire] = deque()


# ------------------------------------------------------------------ core --

class Core:
    """One broker session's state (see the module's comment)."""

    def __init__(self, driver: Driver, *, name: str | None, grace_ms: int,
                 auth: str | None, allow_old: bool) -> None:
        self.driver = driver
        self.name = name
        self.grace_ms = grace_ms
        self.auth = auth
        self.allow_old = allow_old
        self.client_id: str | None = None
        self.secret: str | None = None
        self.version: tuple[int, ...] = ()
        self.async_waits = True         # False against a 1.1 broker
        self.session = 0                # +1 per new session (not per RESUME)
        self.outq: deque[Request] = deque()
        self.pending: deque[Request] = deque()
        self.holds: dict[str, HoldState] = {}
        self.waits: dict[str, Acquire] = {}
        self.watches: dict[str, WatchState] = {}
        self.local: dict[str, LocalKey] = {}
        self.dropped: list[Request] = []
        self.requeued: set[str] = set()     # EVENT QUEUED after a RESUME
        self.blocking = 0                   # 1.1 blocking waits in flight
        self.listed: set[str] = set()       # the keys a RESUME gave back
        self.resume_error: BrokerError | None = None
        self.counters = Tally()
        self.on_counter: Callable[[CounterEvent], None] | None = None

    # -- writing
    def submit(self, req: Request, front: bool = False,
               wake: bool = True) -> None:
        """Queue req for writing.  A caller that writes next itself passes
        wake=False; the core's own requests wake the driver's writer."""
        if front:
            self.outq.appendleft(req)
        else:
            self.outq.append(req)
        if wake:
            self.driver.wake_writer()

    def take_outgoing(self) -> bytes:
        """The queued requests' lines (moved to pending), to write now."""
        out = []
        while self.outq:
            req = self.outq.popleft()
            text = req.line(self)
            if text is None:
                continue
            self.pending.append(req)
            if req.blocking:
                self.blocking += 1
            out.append(text)
        return ("\n".join(out) + "\n").encode("ascii") if out else b""

    # -- reading
    def feed(self, line: str) -> None:
        """One line read from the connection (without its CRLF)."""
        if line.startswith("EVENT "):
            self.event(P.parse_event(line))
            return
        if not line:
            return
        P.reply_kind(line)
        if not self.pending:
            raise ProtocolError("a reply nobody asked for: %r" % line)
        req = self.pending.popleft()
        if req.blocking:
            self.blocking -= 1
        req.reply(self, line)

    def event(self, ev: P.Event) -> None:
        if ev.kind == "LOST":
            hold = self.holds.get(ev.key)
            if hold is not None and ev.args and ev.args[0] == str(hold.token):
                self.mark_lost(hold, lost(ev.key, hold.token, reply=" ".join(
                    ("EVENT", ev.kind, ev.key) + ev.args)))
        elif ev.kind in ("GRANTED", "TIMEOUT", "FAILED"):
            acq = self.find_wait(ev.key)
            if acq is not None:
                acq.event(self, ev)
            elif ev.kind == "GRANTED":
                self.stray_grant(ev.key)
        elif ev.kind == "QUEUED":
            self.requeued.add(ev.key)
        elif ev.kind in ("HOLDER", "FREE"):
            w = self.watches.get(ev.key)
            if w is not None and w.active:
                self.watch_changed(w, P.watch_state(ev))
        else:
            log.debug("event ignored: %s %s", ev.kind, ev.key)

    def find_wait(self, key: str) -> Acquire | None:
        """The wait an outcome event names: a queued one, or (while a
        RESUME is being settled) one whose OK QUEUED the old connection
        lost."""
        acq = self.waits.get(key)
        if acq is None:
            for req in self.dropped:
                if isinstance(req, Acquire) and req.key == key and \
                        req.state != "done":
                    return req
        return acq

    # -- holds
    def mark_lost(self, hold: HoldState, err: LockLost,
                  quiet: bool = False) -> None:
        """The hold is gone: its callbacks run, and the key is free for
        this client's other threads or tasks (nobody holds it here)."""
        if hold.lost or hold.released:
            return
        hold.lost_error = err
        log.log(logging.DEBUG if quiet else logging.WARNING, "%s", err)
        if not quiet:
            self.count("losses", hold.key)
        self.hold_ended(hold)
        self.let_go(hold)
        for fn in list(hold.listeners):
            self.driver.defer(functools.partial(fn, err))

    def let_go(self, hold: HoldState) -> None:
        if hold.has_local:
            hold.has_local = False
            self.local_done(hold.key)

    def forget(self, hold: HoldState) -> None:
        hold.released = True
        self.hold_ended(hold)
        if self.holds.get(hold.key) is hold:
            del self.holds[hold.key]

    def hold_ended(self, hold: HoldState) -> None:
        """Count a hold's end once (released, lost or the session's end);
        a ghost (a grant nobody knew of, token 0) is not counted."""
        if not hold.ended and hold.token:
            hold.ended = True
            self.count("holds", hold.key,
                       time.monotonic() - hold.granted_at)

    def count(self, name: str, key: str | None = None,
              seconds: float = 0.0) -> None:
        """One event for the counters (and the hook, after the lock)."""
        self.counters.add(name, seconds)
        hook = self.on_counter
        if hook is not None:
            self.driver.defer(functools.partial(
                hook, CounterEvent(name, key, seconds)))

    def stray_grant(self, key: str) -> None:
        """A grant nobody will use (its caller gave up, or a RESUME listed
        a key whose OK was lost with the connection): give it back."""
        if key in self.holds:
            return
        ghost = HoldState(key, 0, "exclusive", None, None, self.session)
        self.submit(Release(ghost, None, None))

    def release(self, hold: HoldState, linger_ms: int | None,
                fut: Future) -> None:
        """A caller ends its hold (RELEASE); the local key lock goes to the
        next of this client once the broker answered."""
        if hold.lost or hold.released:
            # nothing to send: the broker holds nothing for it any more
            # (and a RELEASE could end a later hold of the same key)
            self.forget(hold)
            settle(fut, exc=hold.lost_error or lost(
                hold.key, hold.token, "the session ended", cls=SessionLost))
            return
        lk = self.local.get(hold.key)
        if lk is not None and hold.has_local:
            lk.owner = None     # its thread or task may ask again (queued)
        self.submit(Release(hold, linger_ms, fut), wake=False)

    # -- the local key lock
    def start(self, acq: Acquire) -> None:
        """Queue acq behind the library's local lock on its key: one
        request or hold per key and client object at a time, whatever the
        broker's per-session reentrancy would allow.  The thread or task
        that holds (or is taking) the key asking again is a UsageError."""
        lk = self.local.get(acq.key)
        if lk is None:
            self.local[acq.key] = LocalKey(acq.owner)
            acq.has_local = True
            self.submit(acq, wake=False)
            return
        if lk.owner == acq.owner or any(
                a.owner == acq.owner and a.state != "done" for a in lk.queue):
            raise UsageError("%s is already held or being taken through this "
                             "client by the same thread or task" % acq.key)
        if acq.deadline is not None and acq.deadline <= time.monotonic():
            acq.state = "done"          # one try, and this client has it
            self.count("waits", acq.key)
            settle(acq.fut, exc=busy(acq.key, None, acq.text,
                                     "another thread or task of this client"))
            return
        acq.state = "local"
        lk.queue.append(acq)

    def local_done(self, key: str) -> None:
        """The key's request or hold is over: the next of this client."""
        lk = self.local.get(key)
        if lk is None:
            return
        while lk.queue:
            nxt = lk.queue.popleft()
            if nxt.state != "local":
                continue
            lk.owner = nxt.owner
            nxt.has_local = True
            nxt.state = "new"
            self.submit(nxt)
            return
        del self.local[key]


    # -- watches
    def watch_changed(self, w: WatchState, state: P.KeyState) -> None:
        w.state = state
        w.seq += 1
        for fn in list(w.listeners):
            self.driver.defer(functools.partial(fn, state))

    def watch_failed(self, key: str, err: LockBrokerError) -> None:
        """The broker refused to watch key: its listeners are told, and it
        is watched no more (never asked for again)."""
        w = self.watches.get(key)
        if w is None or not w.active:
            return
        del self.watches[key]
        w.active = False
        log.error("%s: the watch ended", err)
        for fn in list(w.listeners):
            self.driver.defer(functools.partial(fn, err))

    # -- connections
    def connection_lost(self) -> None:
        """The connection is gone: what was in flight waits for the next."""
        self.dropped.extend(self.pending)
        self.pending.clear()
        self.blocking = 0
        for acq in self.waits.values():
            acq.state = "dropped"

    def fail_all(self, exc: LockBrokerError, quiet: bool = False) -> None:
        """No connection can be made (the retry budget ran out): every
        request fails, every hold is lost, the waits end."""
        reqs = self.dropped + list(self.pending) + list(self.outq)
        self.dropped, self.outq = [], deque()
        self.pending.clear()
        for acq in list(self.waits.values()):
            acq.finish(self, exc)
        for req in reqs:
            if isinstance(req, Acquire):
                req.finish(self, exc)
            else:
                if isinstance(req, Release):
                    req.ended(self)     # the session's end frees it
                    settle(req.fut, None)
                settle(req.fut, exc=exc)
        self.end_session(str(exc), quiet)

    def shutdown(self, exc: LockBrokerError) -> None:
        """The client is closed: everything fails, the requests queued
        behind the local key locks too (nothing will be sent again)."""
        self.fail_all(exc, quiet=True)
        while self.outq or self.local:
            for lk in list(self.local.values()):
                for acq in lk.queue:
                    acq.finish(self, exc)
                lk.queue.clear()
            self.local.clear()
            self.fail_all(exc, quiet=True)

    def end_session(self, why: str, quiet: bool = False) -> None:
        """The session is gone: every hold is lost (SessionLost, why)."""
        for hold in list(self.holds.values()):
            self.mark_lost(hold, lost(hold.key, hold.token, why,
                                      cls=SessionLost), quiet)
        self.holds.clear()
        self.session += 1

    def handshake(self, resume: bool
                  ) -> Generator[list[str], list[str], bool]:
        """A generator: yields lists of request lines, is sent the list of
        their replies, returns True (resumed) or False (a new session).
        Raises NotAuthenticated, VersionError, BrokerError."""
        lines = []
        if self.auth:
            lines.append("AUTH " + self.auth)
        hello = "HELLO" + (" " + self.name if self.name else "")
        resume = resume and self.grace_ms > 0 and self.secret is not None
        lines.append(hello if resume or not self.grace_ms
                     else "%s GRACE %d" % (hello, self.grace_ms))
        lines.append("EVENTS ON")
        if resume:
            lines.append("RESUME %s %s" % (self.client_id, self.secret))
        replies = yield lines
        if self.auth:
            auth_reply = replies.pop(0)
            if auth_reply != "OK":
                raise error_from_reply(auth_reply, "AUTH")
        self._hello(replies[0], fresh=not resume)
        if replies[1] != "OK":
            raise error_from_reply(replies[1], "EVENTS ON")
        if not resume:
            return False
        answer = replies[2]
        if answer.startswith("OK"):
            self.listed = set(P.parse_list(answer))
            self.requeued = set()
            yield ["PING"]          # events the RESUME sends come before
            return True
        err = error_from_reply(answer, "RESUME")
        if err.code in ("UNAVAILABLE",):
            raise err
        log.warning("session %s could not be resumed: %s", self.client_id,
                    err)
        self.resume_error = err
        replies = yield ["%s GRACE %d" % (hello, self.grace_ms)]
        self._hello(replies[0], fresh=True)
        return False

    def _hello(self, reply: str, fresh: bool) -> None:
        if not reply.startswith("OK "):
            raise error_from_reply(reply, "HELLO")
        version = P.parse_version(reply)
        if version[:2] < P.MIN_VERSION and not self.allow_old:
            raise VersionError(
                "the broker speaks lockbroker/%s; this library needs "
                "protocol 1.2 or later" % ".".join(map(str, version)))
        self.version = version
        self.async_waits = version[:2] >= P.MIN_VERSION
        if fresh:
            words = reply.split()
            self.client_id = words[1]
            self.secret = words[3] if len(words) > 3 else None

    def reconcile(self, resumed: bool) -> None:
        """After the handshake: what the old connection left, settled or
        queued again, ahead of anything callers queued meanwhile.  Resumed:
        a hold RESUME does not list is lost, a listed key nobody knew of
        (its OK was lost with the connection) is released, a wait the
        broker did not say QUEUED for is issued again.  A new session: every
        hold is lost, every wait issued again, every watch set again."""
        listed = self.listed if resumed else set()
        front: list[Request] = []
        if resumed:
            releasing = {r.key for r in self.dropped
                         if isinstance(r, Release)}
            for key, hold in list(self.holds.items()):
                if key not in listed and key not in releasing:
                    self.mark_lost(hold, lost(
                        key, hold.token, "not kept by the RESUME",
                        request="RESUME"))
                    self.forget(hold)
            for key in sorted(listed - set(self.holds)):
                ghost = HoldState(key, 0, "exclusive", None, None,
                                  self.session)
                front.append(Release(ghost, None, None))
        for key, acq in list(self.waits.items()):
            if resumed and key in self.requeued:
                acq.state = "queued"
                continue
            del self.waits[key]
            if acq.dropped(self, resumed, listed):
                front.append(acq)
        dropped, self.dropped = self.dropped, []
        for req in dropped:
            if req.dropped(self, resumed, listed):
                front.append(req)
        if not resumed:
            why = self.resume_error
            self.end_session(
                "the session could not be resumed (%s)" % why.text if why
                else "the connection was lost, and the session with it")
            for key, w in self.watches.items():
                if w.active and not any(isinstance(r, Watch) and r.key == key
                                        for r in front):
                    front.append(Watch(key, None))
        for req in reversed(front):
            self.submit(req, front=True, wake=False)
        self.resume_error = None
        self.requeued = set()
        self.listed = set()
