"""The threaded client: ``Client``, its ``Hold``s, ``LockRequest``s and
``Watch``es.

One connection per Client (one broker session).  Any number of threads
use it at once: a request is queued in the session core and written by
whichever thread gets the write lock first (the others' requests go in
the same write), so requests are pipelined; a reader thread reads every
line and hands it to the core, which completes the request or routes the
event; a writer thread writes what the core queues itself and sends the
idle PING; a callback thread runs the user's callbacks (lost holds, watch
changes, the reconnect hook), so a callback may call the client.

``Client`` is a handle on a ``_Session`` (the object those threads run):
holds, waits and watches keep the handle alive, the threads do not, so
an app that drops its last reference to the client ends the session
(QUIT, see _exits.py), as the end of the process does.
"""

from __future__ import annotations

import functools
import queue
import select
import threading
import time
import weakref
from typing import Any, Callable, Iterator, cast

from . import _exits
from . import protocol as P
from ._base import ClientBase, HoldBase, WatchBase, no_answer
from ._common import addr_text, linger_ms
from ._core import Acquire, Request, Watch as WatchRequest, log
from ._net import PlainStream, open_stream
from .counters import Counters
from .errors import (BrokerError, Closed, ConnectError, LockBrokerError,
                     LockLost, LockTimeout, NotAuthenticated, ProtocolError,
                     VersionError, WaitCancelled, describe)


class Outcome:
    """The future of one request, for the threads of a Client: set once
    by the reader thread, waited for by the caller.  A plain lock, held
    until the outcome is set, is the cheapest wake-up Python has (a
    concurrent.futures.Future costs a Condition and waiter objects per
    wait, and pairs/s with it)."""

    __slots__ = ("_lock", "_done", "_value", "_exc")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._done = False
        self._value: Any = None
        self._exc: BaseException | None = None

    def done(self) -> bool:
        return self._done

    def set_result(self, value: Any) -> None:
        self._value = value
        self._done = True
        self._lock.release()

    def set_exception(self, exc: BaseException) -> None:
        self._exc = exc
        self._done = True
        self._lock.release()

    def wait(self, timeout: float | None = None) -> bool:
        """True once the outcome is set (within timeout seconds)."""
        if self._done:
            return True
        if self._lock.acquire(timeout=-1 if timeout is None else
                              max(0.0, timeout)):
            self._lock.release()        # for the next waiter, if any
        return self._done

    def exception(self) -> BaseException | None:
        return self._exc

    def result(self) -> Any:
        if self._exc is not None:
            raise self._exc
        return self._value


class _Callbacks:
    """One thread that runs user callbacks in order."""

    def __init__(self) -> None:
        self.q: queue.SimpleQueue[Callable[[], None] | None] = \
            queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name="lockbroker-callbacks")
        self.thread.start()

    def put(self, fn: Callable[[], None]) -> None:
        self.q.put(fn)

    def _run(self) -> None:
        while True:
            fn = self.q.get()
            if fn is None:
                return
            try:
                fn()
            except Exception:
                log.exception("a lockbroker callback failed")

    def stop(self) -> None:
        self.q.put(None)


class _LineReader:
    def __init__(self, stream: PlainStream, buf: bytes = b"") -> None:
        self.stream = stream
        self.buf = buf

    def readline(self) -> str:
        while b"\n" not in self.buf:
            data = self.stream.recv()
            if not data:
                raise ConnectionError("the broker closed the connection")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line.rstrip(b"\r").decode("ascii", "replace")


class _Session(ClientBase):
    """What a Client's threads run: the connection, the core, the threads.
    The public methods are Client's (their documentation is there)."""

    def _start(self) -> None:
        self._mu = threading.Lock()
        self._writer_cv = threading.Condition(self._mu)
        self._wlock = threading.Lock()
        self._callbacks = _Callbacks()
        self._wake = False
        self._stopped = threading.Event()
        self._drop_reason = ""
        try:
            self._stream, self._rbuf = self._first_connect()
        except BaseException:
            self._callbacks.stop()
            raise
        self._last_rx = time.monotonic()
        self._reader = threading.Thread(target=self._read_loop, daemon=True,
                                        name="lockbroker-reader")
        self._writer = threading.Thread(target=self._write_loop, daemon=True,
                                        name="lockbroker-writer")
        self._reader.start()
        self._writer.start()
        _exits.track(self)

    def _guard(self) -> threading.Lock:
        return self._mu

    # ------------------------------------------------- the core's driver --
    def new_future(self) -> Outcome:
        return Outcome()

    def defer(self, fn: Callable[[], None]) -> None:
        self._callbacks.put(fn)

    def wake_writer(self) -> None:
        self._wake = True               # called with self._mu held
        self._writer_cv.notify()

    # ------------------------------------------------------- connections --
    def _first_connect(self) -> tuple[PlainStream, bytes]:
        errors = []
        for i in range(len(self._o.brokers)):
            try:
                stream, buf, _ = self._open_session(i, resume=False)
            except (VersionError, NotAuthenticated):
                raise
            except (OSError, LockBrokerError) as e:
                errors.append("%s: %s" % (addr_text(self._o.brokers[i]), e))
                continue
            with self._mu:
                self._core.reconcile(False)
                self._connected = True
            self._current = i
            self._emit("connected", i)
            return stream, buf
        raise ConnectError("no broker answered: " + "; ".join(errors))

    def _open_session(self, i: int, resume: bool
                      ) -> tuple[PlainStream, bytes, bool]:
        """Connect to broker i and run the handshake (HELLO, AUTH, EVENTS
        ON, RESUME): the stream, bytes read past the handshake, and
        whether the session was resumed."""
        host, port = self._o.brokers[i]
        stream = open_stream(host, port, timeout=self._o.connect_timeout,
                             tls=self._o.tls,
                             server_hostname=self._o.tls_server_name,
                             dead_after_s=self._o.ping_interval +
                             self._o.ping_timeout)
        try:
            stream.sock.settimeout(self._o.handshake_timeout)
            reader = _LineReader(stream)
            with self._mu:
                gen = self._core.handshake(resume)
                lines = next(gen)
            while True:
                stream.sendall(("\n".join(lines) + "\n").encode("ascii"))
                replies: list[str] = []
                while len(replies) < len(lines):
                    line = reader.readline()
                    if line.startswith("EVENT "):
                        with self._mu:
                            self._core.feed(line)
                    elif line:
                        replies.append(line)
                with self._mu:
                    try:
                        lines = gen.send(replies)
                    except StopIteration as done:
                        resumed = bool(done.value)
                        break
            stream.sock.settimeout(None)
            return stream, reader.buf, resumed
        except BaseException:
            stream.close()
            raise

    def _reconnect(self, reason: str) -> bool:
        """The reader thread's: a new connection to some broker, the
        session resumed or a new one, what was in flight settled or sent
        again.  False once the client is closed."""
        with self._mu:
            self._connected = False
            self._core.connection_lost()
            old = self._stream
            closing = self._closed or self._closing
        old.close()
        if closing:
            return False
        plan = self._reconnect_plan(reason)
        step = next(plan, None)
        while step is not None:
            if isinstance(step, float):
                self._stopped.wait(step)
                step = next(plan, None)
                continue
            i, resume = step
            try:
                stream, buf, resumed = self._open_session(i, resume)
            except (OSError, LockBrokerError) as e:
                step = plan.send(str(e))
                continue
            with self._mu:
                self._core.reconcile(resumed)
                self._stream, self._rbuf = stream, buf
                self._connected = True
                self._ping_sent = None
                self._last_rx = time.monotonic()
                self.wake_writer()      # never this thread: it must read
            self._announce(i, resumed)
            return True
        return False

    def _drop(self, reason: str) -> None:
        """Declare the connection dead: the reader sees it end."""
        self._drop_reason = reason
        self._stream.shutdown()

    # ------------------------------------------------------------ threads --
    def _read_loop(self) -> None:
        buf = self._rbuf
        while True:
            if b"\n" in buf:
                *lines, buf = buf.split(b"\n")
                try:
                    with self._mu:
                        for raw in lines:
                            self._core.feed(raw.rstrip(b"\r").decode(
                                "ascii", "replace"))
                except ProtocolError as e:
                    log.error("%s: dropping the connection", e)
                    self._drop(str(e))
            try:
                data = self._stream.recv()
            except OSError as e:
                data, self._drop_reason = b"", self._drop_reason or str(e)
            if data:
                self._last_rx = time.monotonic()
                buf += data
                continue
            reason = self._drop_reason or "the broker closed the connection"
            self._drop_reason = ""
            if not self._reconnect(reason):
                return
            buf = self._rbuf

    def _write_loop(self) -> None:
        while True:
            dead = ""
            with self._mu:
                if not self._wake and not self._closed:
                    self._writer_cv.wait(self._ping_check_in())
                if self._closed:
                    return
                self._wake = False
                if self._connected:
                    dead = self._ping_due()
            if dead:
                self._drop(dead)
            self._flush()

    def _input_waiting(self) -> bool:
        try:
            return bool(select.select([self._stream.sock], [], [], 0)[0])
        except (OSError, ValueError):
            return False            # closed meanwhile: the reader says so

    def _ping_check_in(self) -> float | None:    # type: ignore[override]
        if not self._connected:
            return None             # woken when a connection is up
        return super()._ping_check_in()

    def _flush(self) -> None:
        """Write what the core has queued.  Whoever holds the write lock
        writes for everybody; a thread that finds it taken leaves its
        request to the holder, which looks again after letting it go."""
        while True:
            if not self._wlock.acquire(blocking=False):
                return
            try:
                while True:
                    with self._mu:
                        if not self._connected:
                            break
                        data = self._core.take_outgoing()
                        stream = self._stream
                    if not data:
                        break
                    try:
                        stream.sendall(data)
                    except OSError as e:
                        self._drop("write failed: %s" % e)
                        break
            finally:
                self._wlock.release()
            with self._mu:
                if not (self._connected and self._core.outq):
                    return

    # ------------------------------------------------------------ requests --
    def _call(self, req: Request, timeout: float | None = None) -> Any:
        """Send req and wait for its outcome."""
        with self._mu:
            self._check_open()
            self._core.submit(req, wake=False)
        self._flush()
        return self._result(req, self._o.request_timeout
                            if timeout is None else timeout)

    def _result(self, req: Request, timeout: float) -> Any:
        req.fut.wait(timeout)
        if not req.fut.done():
            req.abandoned = True
            raise no_answer(req.text, timeout)
        return req.fut.result()

    def start_lock(self, key: str, timeout: float | None, *,
                   shared: bool, limit: int | None, ttl: float | None,
                   value: str | None,
                   on_lost: Callable[[LockLost], None] | None,
                   keep: Any) -> "LockRequest":
        # the thread object, not its ident: an ident is reused once its
        # thread ends, while a hold may outlive the thread that took it
        acq = self._acquire(key, timeout, Outcome(),
                            threading.current_thread(), shared=shared,
                            limit=limit, ttl=ttl, value=value,
                            on_lost=on_lost)
        with self._mu:
            self._check_open()
            self._core.start(acq)
        self._flush()
        return LockRequest(self, acq, keep)

    def owner(self, key: str) -> P.KeyState:
        return cast(P.KeyState, self._call(self._owner_request(key,
                                                               Outcome())))

    def check(self, key: str, token: int) -> P.CheckResult:
        return cast(P.CheckResult, self._call(
            self._check_request(key, token, Outcome())))

    def watch(self, key: str,
              on_change: Callable[[P.KeyState], None] | None,
              on_error: Callable[[LockBrokerError], None] | None,
              keep: Any) -> "Watch":
        w = Watch(self, key, on_change, on_error, keep)
        with self._mu:
            new = self._add_watch(key, w._relay)
        if new:
            try:
                self._call(WatchRequest(key, Outcome()))
            except BaseException:
                w.close()
                raise
        return w

    def _unwatch(self, w: "Watch") -> None:
        with self._mu:
            if not self._drop_watch(w.key, w._relay):
                return
        try:
            self._call(Request("UNWATCH " + w.key, Outcome(), replay=False))
        except (ConnectError, BrokerError):
            pass        # a new session has no watch anyway

    def held(self) -> list[str]:
        return cast("list[str]", self._call(
            Request("HELD", Outcome(), P.parse_list)))

    def ping(self) -> None:
        self._call(Request("PING", Outcome()))

    def stats(self) -> dict[str, str]:
        return self._stats(self._call(Request("STATS", Outcome())))

    def close(self) -> None:
        self.end_now(2.0)

    def end_now(self, bound: float) -> None:
        """QUIT, waiting at most bound seconds for the broker's answer
        (then the connection ends all the same), and stop the threads."""
        with self._mu:
            if self._closed or self._closing:
                return
            self._closing = True
            connected = self._connected
            quit_req = Request("QUIT", Outcome(), replay=False)
            if connected:
                self._core.submit(quit_req, wake=False)
        _exits.untrack(self)
        if connected:
            self._flush()
            quit_req.fut.wait(min(bound, self._o.request_timeout))
        with self._mu:
            self._closed = True
            self._connected = False
            self._core.shutdown(Closed("the client was closed"))
            self._writer_cv.notify()
        self._stopped.set()
        self._stream.shutdown()
        me = threading.current_thread()
        for t in (self._reader, self._writer):
            if t is not me:
                t.join(bound)
        self._stream.close()
        self._callbacks.stop()


def _forward(name: str) -> property:
    """A property of the Client handle that is its session's."""
    return property(lambda self: getattr(self._s, name),
                    doc=getattr(ClientBase, name).__doc__)


class Client:
    __doc__ = """A connection to a lockbroker (one session), shared by any
    number of threads.

    """ + (ClientBase.__doc__ or "").split("\n\n", 1)[1] + """
    Raises ``ConnectError`` when no broker answers, ``VersionError`` for a
    broker without protocol 1.2, ``NotAuthenticated`` for a refused token.
    """

    # The arguments are ClientBase's (one list for Client and AsyncClient):
    # help() and inspect show them.
    @functools.wraps(ClientBase.__init__, assigned=("__annotations__",),
                     updated=())
    def __init__(self, *args: Any, **options: Any) -> None:
        self._s = _Session(*args, **options)
        _exits.track(self._s, self)

    client_id = _forward("client_id")
    version = _forward("version")
    broker = _forward("broker")

    def counters(self) -> Counters:
        """A snapshot of the client's counters (see ``Counters``)."""
        return self._s.counters()

    def start_lock(self, key: str, timeout: float | None = None, *,
                   shared: bool = False, limit: int | None = None,
                   ttl: float | None = None, value: str | None = None,
                   on_lost: Callable[[LockLost], None] | None = None
                   ) -> "LockRequest":
        """Start taking key and return at once: a ``LockRequest`` whose
        ``result()`` gives the ``Hold`` and whose ``cancel()`` withdraws
        the wait (CANCEL).  Arguments as for ``lock``."""
        return self._s.start_lock(key, timeout, shared=shared, limit=limit,
                                  ttl=ttl, value=value, on_lost=on_lost,
                                  keep=self)

    def lock(self, key: str, timeout: float | None = None, *,
             shared: bool = False, limit: int | None = None,
             ttl: float | None = None, value: str | None = None,
             on_lost: Callable[[LockLost], None] | None = None) -> "Hold":
        """Take key: exclusive, ``shared`` (a read hold beside others), or
        one of ``limit`` permits.  ``timeout``: seconds to wait (None: as
        long as it takes; 0: one try).  ``ttl``: the key's TTL in Redis
        (the broker renews it while the session lives).  ``value``: a text
        on an exclusive hold (OWNER and WATCH show it).  ``on_lost``: called
        with a ``LockLost`` if the hold is lost.

        Returns a ``Hold`` (a context manager that releases it).  Raises
        ``LockBusy`` (one try, held elsewhere), ``LockTimeout``,
        ``UsageError`` when this thread already holds or is taking key
        through this client, or the error the broker answered."""
        return self.start_lock(key, timeout, shared=shared, limit=limit,
                               ttl=ttl, value=value,
                               on_lost=on_lost).result()

    def elect(self, key: str, value: str, timeout: float | None = None, *,
              ttl: float | None = None,
              on_lost: Callable[[LockLost], None] | None = None) -> "Hold":
        """Run for leader of key with value (e.g. this instance's address)
        and return once leading: the ``Hold`` is the leadership (release
        it to resign; ``on_lost`` says it ended).  Everyone can follow who
        leads with ``watch(key).leader``."""
        return self.lock(key, timeout, ttl=ttl, value=value, on_lost=on_lost)

    def owner(self, key: str) -> P.KeyState:
        """Who holds key now, on any broker (with the holder's value)."""
        return self._s.owner(key)

    def check(self, key: str, token: int) -> P.CheckResult:
        """Whether token's hold on key is alive in Redis now (CHECK)."""
        return self._s.check(key, token)

    def watch(self, key: str,
              on_change: Callable[[P.KeyState], None] | None = None,
              on_error: Callable[[LockBrokerError], None] | None = None
              ) -> "Watch":
        """Follow key's holders (WATCH): a ``Watch`` with the latest state,
        ``wait()`` for a state, iteration over changes; ``on_change`` is
        called with every state, ``on_error`` with what ends the watch if
        the broker refuses it (e.g. after a failover to a broker without
        WATCH).  Raises the broker's error (``BadCommand``) at once if it
        refuses the first WATCH."""
        return self._s.watch(key, on_change, on_error, self)

    def held(self) -> list[str]:
        """The keys this session holds, as the broker lists them (HELD)."""
        return self._s.held()

    def ping(self) -> None:
        self._s.ping()

    def stats(self) -> dict[str, str]:
        """The broker's counters (STATS)."""
        return self._s.stats()

    def close(self) -> None:
        """End the session (QUIT): the broker releases everything it
        holds.  Waits in progress end with ``Closed``.  (The end of the
        process, or of the last reference to this object, does the
        same.)"""
        self._s.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "<lockbroker.Client %s session %s>" % (self.broker,
                                                      self.client_id)


class LockRequest:
    """A lock being taken (``Client.start_lock``): ``result()`` waits for
    the ``Hold``, ``cancel()`` gives up (the broker is told CANCEL; a grant
    that races it is given back)."""

    def __init__(self, client: _Session, acq: Acquire, keep: Any) -> None:
        self._client = client
        self._acq = acq
        self._keep = keep               # the Client: alive while we are
        self._hold: Hold | None = None

    @property
    def key(self) -> str:
        return self._acq.key

    def done(self) -> bool:
        return bool(self._acq.fut.done())

    def cancel(self) -> None:
        """Withdraw the wait; ``result()`` then raises ``WaitCancelled``
        (unless it was granted before: then it gives the hold)."""
        self._stop(WaitCancelled(describe(self.key, "the wait was cancelled"),
                                 key=self.key))

    def _stop(self, exc: BaseException) -> None:
        c = self._client
        with c._mu:
            self._acq.cancel(c._core, exc)
        c._flush()

    def result(self) -> "Hold":
        """Wait for the outcome (until the deadline given to start_lock)."""
        if self._hold is not None:
            return self._hold
        fut, acq, c = self._acq.fut, self._acq, self._client
        try:
            if acq.deadline is None:
                fut.wait()
            else:
                fut.wait(max(0.0, acq.deadline - time.monotonic()))
                if not fut.done():
                    with c._mu:
                        at_broker = acq.state in ("sent", "queued") or (
                            acq.state == "new" and c._connected)
                    if at_broker:   # the broker's answer is on its way
                        fut.wait(c._o.margin)
                    if not fut.done():
                        self._stop(acq.timed_out())
        except BaseException:
            self._stop(WaitCancelled(describe(self.key, "interrupted"),
                                     key=self.key))
            raise
        self._hold = Hold(c, fut.result(), self._keep)
        return self._hold


class Hold(HoldBase):
    """A hold on a key: ``token`` (the fencing token to send with every
    write), ``lost`` (and ``lost_error``), ``release()``; a context manager
    that releases it on exit.  Leaving the ``with`` block of a hold that
    was lost raises its ``LockLost`` (unless another exception is on its
    way): the work done under it was not protected to its end."""

    _client: _Session

    def release(self, linger: float | None = None) -> None:
        """RELEASE; ``linger``: seconds the key stays taken after (nobody,
        this client included, takes it meanwhile).  Raises ``LockLost`` if
        the hold was lost (the local lock is let go all the same)."""
        self._releasing()
        c = self._client
        fut: Outcome = Outcome()
        with c._mu:
            c._core.release(self._st, linger_ms(linger), fut)
        c._flush()
        fut.wait(c._o.request_timeout)
        if not fut.done():
            raise no_answer("RELEASE " + self.key, c._o.request_timeout)
        fut.result()

    def renew(self, ttl: float | None = None) -> float:
        """RENEW: set the key's TTL in Redis now; the TTL set, in seconds."""
        return cast(float, self._client._call(self._renew_request(
            ttl, Outcome())))

    def proclaim(self, value: str) -> None:
        """PROCLAIM: replace the hold's value (same token)."""
        self._client._call(self._proclaim_request(value, Outcome()))
        self._st.value = value

    def __enter__(self) -> "Hold":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._released:
            return
        try:
            self.release()
        except LockLost:
            if exc_type is None:
                raise

class Watch(WatchBase):
    """The holders of a key as the broker tells them (WATCH): ``state`` is
    the latest (None before the first), ``leader`` the value of an
    exclusive holder (the elected leader's), ``wait()`` waits for a state,
    iterating yields each state as it comes.  ``close()`` ends it.  If the
    broker refuses the watch (a failover to a broker without WATCH),
    ``error`` says why, ``on_error`` is called with it, and ``wait()`` and
    iteration raise it."""

    def __init__(self, client: _Session, key: str,
                 on_change: Callable[[P.KeyState], None] | None,
                 on_error: Callable[[LockBrokerError], None] | None,
                 keep: Any) -> None:
        super().__init__(key, on_change, on_error)
        self._client = client
        self._keep = keep               # the Client: alive while we are
        self._cv = threading.Condition()
        self._seq = 0
        # what the session calls: it must not keep this watch (and the
        # Client with it) alive once its user let go of both
        me = weakref.WeakMethod(self._listener)

        def relay(x: P.KeyState | LockBrokerError) -> None:
            listener = me()
            if listener is not None:
                listener(x)
        self._relay = relay

    def _listener(self, x: P.KeyState | LockBrokerError) -> None:
        with self._cv:
            if self._seen(x):
                self._seq += 1
            self._cv.notify_all()
        self._notify_user(x)

    def wait(self, predicate: Callable[[P.KeyState], bool] | None = None,
             timeout: float | None = None) -> P.KeyState:
        """The first state (the current one included) for which predicate
        is true (default: any).  Raises ``LockTimeout`` after timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._state is None or (predicate is not None and
                                          not predicate(self._state)):
                self._check()
                left = None if deadline is None else \
                    deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise LockTimeout(describe(
                        self.key, "the watch saw no such state within %.3g s"
                        % timeout), key=self.key)
                self._cv.wait(left)
            return self._state

    def __iter__(self) -> Iterator[P.KeyState]:
        seen = 0
        while True:
            with self._cv:
                while self._seq == seen and not self._closed:
                    self._cv.wait()
                if self._error is not None:
                    raise self._error
                if self._closed:
                    return
                seen = self._seq
                state = self._state
            assert state is not None
            yield state

    def close(self) -> None:
        with self._cv:
            if self._closed:
                return
            self._closed = True
            self._cv.notify_all()
        self._client._unwatch(self)

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
