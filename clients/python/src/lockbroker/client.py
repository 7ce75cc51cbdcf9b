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
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import queue
import ssl
import threading
import time
from typing import Any, Callable, Iterator, Sequence, cast

from . import protocol as P
from ._common import (ConnectionEvent, Options, addr_text, emit, linger_ms,
                      make_options, rotation, ttl_ms)
from ._core import (Acquire, Core, HoldRequest, HoldState, Request, Watch as
                    WatchRequest, WatchState, log)
from ._net import PlainStream, open_stream
from .errors import (BrokerError, ConnectError, LockBrokerError, LockLost,
                     LockTimeout, NotAuthenticated, ProtocolError,
                     UsageError, VersionError, WaitCancelled)


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


class Client:
    """A connection to a lockbroker (one session), shared by any number of
    threads.

    ``brokers``: "host:port", a comma-separated list or a sequence; the
    client connects to the first that answers and, when its connection
    breaks, resumes its session (RESUME) on any of them.  ``grace``: the
    seconds the broker keeps the session's holds after its connection
    broke (HELLO GRACE; 0: none, the holds end with the connection).
    ``auth``: the broker's AUTH token.  ``tls``: an ``ssl.SSLContext`` (or
    True for the system's default one).  ``name``: a label for the
    session.  ``connect_timeout``: per connection attempt.
    ``resume_timeout``: the retry budget after a broken connection (default:
    the grace); then holds are reported lost and requests fail, and the
    client keeps trying in the background.  ``ping_interval`` /
    ``ping_timeout``: after that long without a line from the broker the
    client sends PING, and without any line for ``ping_timeout`` more it
    declares the connection dead.  ``request_timeout``: how long a request
    other than a wait may go unanswered.  ``on_event``: a callable given a
    ``ConnectionEvent`` on connects, disconnects, resumes and new sessions
    (the ``lockbroker`` logger says the same).

    Raises ``ConnectError`` when no broker answers, ``VersionError`` for a
    broker without protocol 1.2, ``NotAuthenticated`` for a refused token.
    """

    def __init__(self, brokers: str | Sequence[str] = "127.0.0.1:7711", *,
                 grace: float = 30.0, auth: str | None = None,
                 tls: ssl.SSLContext | bool | None = None,
                 tls_server_name: str | None = None,
                 name: str | None = None, connect_timeout: float = 5.0,
                 resume_timeout: float | None = None,
                 ping_interval: float = 5.0, ping_timeout: float = 5.0,
                 request_timeout: float = 30.0,
                 on_event: Callable[[ConnectionEvent], None] | None = None
                 ) -> None:
        self._o: Options = make_options(
            brokers, grace=grace, auth=auth, tls=tls,
            tls_server_name=tls_server_name, name=name,
            connect_timeout=connect_timeout, resume_timeout=resume_timeout,
            ping_interval=ping_interval, ping_timeout=ping_timeout,
            request_timeout=request_timeout, on_event=on_event)
        self._mu = threading.Lock()
        self._writer_cv = threading.Condition(self._mu)
        self._wlock = threading.Lock()
        self._core = Core(self, name=name, grace_ms=self._o.grace_ms,
                          auth=auth, allow_old=self._o.allow_old)
        self._callbacks = _Callbacks()
        self._wake = False
        self._closed = False
        self._closing = False           # QUIT sent: the end is no break
        self._stopped = threading.Event()
        self._connected = False
        self._current = 0               # index of the broker in use
        self._ping_sent: float | None = None
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

    # ------------------------------------------------- the core's driver --
    def new_future(self) -> cf.Future[Any]:
        return cf.Future()

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
            emit(self._o, "connected", addr_text(self._o.brokers[i]),
                 "session %s" % self._core.client_id)
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
        emit(self._o, "disconnected", addr_text(self._o.brokers[self._current]),
             reason)
        give_up_at = time.monotonic() + self._o.resume_timeout
        resume, delay, last = True, 0.05, ""
        while not self._closed:
            for i in rotation(self._o.brokers, self._current + 1):
                if self._closed:
                    return False
                try:
                    stream, buf, resumed = self._open_session(i, resume)
                except (OSError, LockBrokerError) as e:
                    last = "%s: %s" % (addr_text(self._o.brokers[i]), e)
                    log.debug("reconnect: %s", last)
                    continue
                with self._mu:
                    self._core.reconcile(resumed)
                    self._stream, self._rbuf = stream, buf
                    self._connected = True
                    self._ping_sent = None
                    self._last_rx = time.monotonic()
                    self.wake_writer()  # never this thread: it must read
                self._current = i
                emit(self._o, "resumed" if resumed else "new_session",
                     addr_text(self._o.brokers[i]),
                     "session %s" % self._core.client_id)
                return True
            if resume and time.monotonic() >= give_up_at:
                resume = False
                with self._mu:
                    self._core.fail_all(ConnectError(
                        "no broker answered within %.1f s: %s"
                        % (self._o.resume_timeout, last)))
                emit(self._o, "reconnect_failed", "", last)
            self._stopped.wait(delay)
            delay = min(delay * 2, 1.0)
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

    def _ping_check_in(self) -> float | None:
        if not self._connected:
            return None             # woken when a connection is up
        now = time.monotonic()
        if self._ping_sent is not None:
            return max(0.01, self._ping_sent + self._o.ping_timeout - now)
        return max(0.01, self._last_rx + self._o.ping_interval - now)

    def _ping_due(self) -> str:
        """With self._mu held: send the idle PING when due; a reason when
        the connection is to be declared dead."""
        now = time.monotonic()
        if self._ping_sent is not None:
            if self._last_rx >= self._ping_sent:
                self._ping_sent = None
            elif now - self._ping_sent >= self._o.ping_timeout and \
                    not self._core.blocking:
                self._ping_sent = None
                return "no reply to PING within %.1f s" % self._o.ping_timeout
            return ""
        if now - self._last_rx >= self._o.ping_interval:
            self._ping_sent = now
            self._core.submit(Request("PING", None, replay=False), wake=False)
        return ""

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
        cf.wait([req.fut], timeout)
        if not req.fut.done():
            req.abandoned = True
            raise ConnectError("no answer to %s within %.1f s"
                               % (req.text, timeout))
        return req.fut.result()

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("the client is closed")

    def start_lock(self, key: str, timeout: float | None = None, *,
                   shared: bool = False, limit: int | None = None,
                   ttl: float | None = None, value: str | None = None,
                   on_lost: Callable[[LockLost], None] | None = None
                   ) -> "LockRequest":
        """Start taking key and return at once: a ``LockRequest`` whose
        ``result()`` gives the ``Hold`` and whose ``cancel()`` withdraws
        the wait (CANCEL).  Arguments as for ``lock``."""
        P.check_key(key)
        deadline = None if timeout is None else \
            time.monotonic() + max(0.0, timeout)
        # the thread object, not its ident: an ident is reused once its
        # thread ends, while a hold may outlive the thread that took it
        acq = Acquire(key, cf.Future(), owner=threading.current_thread(),
                      shared=shared, limit=limit, deadline=deadline,
                      ttl_ms=ttl_ms(ttl), value=value,
                      listeners=[on_lost] if on_lost else ())
        P.acquire_line(key, shared=shared, limit=limit, value=value)
        with self._mu:
            self._check_open()
            self._core.start(acq)
        self._flush()
        return LockRequest(self, acq)

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
        P.check_key(key)
        words = "OWNER %s VALUE" if self._core.async_waits else "OWNER %s"
        return cast(P.KeyState, self._call(
            Request(words % key, cf.Future(), P.parse_owner)))

    def check(self, key: str, token: int) -> P.CheckResult:
        """Whether token's hold on key is alive in Redis now (CHECK)."""
        P.check_key(key)
        if not isinstance(token, int) or not 1 <= token < 2 ** 53:
            raise ValueError("a token is an integer 1..2^53-1")
        return cast(P.CheckResult, self._call(
            Request("CHECK %s %d" % (key, token), cf.Future(),
                    lambda line: P.parse_check(line, token))))

    def watch(self, key: str,
              on_change: Callable[[P.KeyState], None] | None = None
              ) -> "Watch":
        """Follow key's holders (WATCH): a ``Watch`` with the latest state,
        ``wait()`` for a state, iteration over changes; ``on_change`` is
        called with every state."""
        P.check_key(key)
        w = Watch(self, key, on_change)
        with self._mu:
            self._check_open()
            ws = self._core.watches.get(key)
            new = ws is None
            if ws is None:
                ws = self._core.watches[key] = WatchState(key)
            ws.listeners.append(w._listener)
            if ws.state is not None:
                self.defer(functools.partial(w._listener, ws.state))
        if new:
            try:
                self._call(WatchRequest(key, cf.Future()))
            except BaseException:
                w.close()
                raise
        return w

    def _unwatch(self, w: "Watch") -> None:
        with self._mu:
            ws = self._core.watches.get(w.key)
            if ws is None or w._listener not in ws.listeners:
                return
            ws.listeners.remove(w._listener)
            if ws.listeners:
                return
            ws.active = False
            del self._core.watches[w.key]
            if self._closed:
                return
        try:
            self._call(Request("UNWATCH " + w.key, cf.Future(), replay=False))
        except (ConnectError, BrokerError):
            pass        # a new session has no watch anyway

    def held(self) -> list[str]:
        """The keys this session holds, as the broker lists them (HELD)."""
        return cast("list[str]", self._call(
            Request("HELD", cf.Future(), P.parse_list)))

    def ping(self) -> None:
        self._call(Request("PING", cf.Future()))

    def stats(self) -> dict[str, str]:
        """The broker's counters (STATS)."""
        line = self._call(Request("STATS", cf.Future()))
        return dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)

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

    def close(self) -> None:
        """End the session (QUIT): the broker releases everything it
        holds.  Waits in progress end with ``UsageError``."""
        with self._mu:
            if self._closed:
                return
            self._closing = True
            connected = self._connected
            quit_req = Request("QUIT", cf.Future(), replay=False)
            if connected:
                self._core.submit(quit_req, wake=False)
        if connected:
            self._flush()
            cf.wait([quit_req.fut], min(2.0, self._o.request_timeout))
        with self._mu:
            self._closed = True
            self._connected = False
            self._core.fail_all(UsageError("the client was closed"),
                                quiet=True)
            self._writer_cv.notify()
        self._stopped.set()
        self._stream.shutdown()
        me = threading.current_thread()
        for t in (self._reader, self._writer):
            if t is not me:
                t.join(5)
        self._stream.close()
        self._callbacks.stop()

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

    def __init__(self, client: Client, acq: Acquire) -> None:
        self._client = client
        self._acq = acq
        self._hold: Hold | None = None

    @property
    def key(self) -> str:
        return self._acq.key

    def done(self) -> bool:
        return bool(self._acq.fut.done())

    def cancel(self) -> None:
        """Withdraw the wait; ``result()`` then raises ``WaitCancelled``
        (unless it was granted before: then it gives the hold)."""
        self._stop(WaitCancelled("the wait for %s was cancelled" % self.key))

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
                cf.wait([fut])
            else:
                cf.wait([fut], max(0.0, acq.deadline - time.monotonic()))
                if not fut.done():
                    with c._mu:
                        at_broker = acq.state in ("sent", "queued")
                    if at_broker:   # the broker's TIMEOUT is on its way
                        cf.wait([fut], c._o.margin)
                    if not fut.done():
                        self._stop(LockTimeout(
                            "%s: the wait ran out" % self.key))
        except BaseException:
            self._stop(WaitCancelled("interrupted"))
            raise
        self._hold = Hold(c, fut.result())
        return self._hold


class Hold:
    """A hold on a key: ``token`` (the fencing token to send with every
    write), ``lost`` (and ``lost_error``), ``release()``; a context manager
    that releases it on exit.  Leaving the ``with`` block of a hold that
    was lost raises its ``LockLost`` (unless another exception is on its
    way): the work done under it was not protected to its end."""

    def __init__(self, client: Client, state: HoldState) -> None:
        self._client = client
        self._st = state
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
        c = self._client
        with c._mu:
            err = self._st.lost_error
            if err is not None:
                c.defer(functools.partial(fn, err))
            else:
                self._st.listeners.append(fn)

    def release(self, linger: float | None = None) -> None:
        """RELEASE; ``linger``: seconds the key stays taken after (nobody,
        this client included, takes it meanwhile).  Raises ``LockLost`` if
        the hold was lost (the local lock is let go all the same)."""
        if self._released:
            raise UsageError("%s was released already" % self.key)
        self._released = True
        c = self._client
        fut: cf.Future[None] = cf.Future()
        with c._mu:
            c._core.release(self._st, linger_ms(linger), fut)
        c._flush()
        cf.wait([fut], c._o.request_timeout)
        if not fut.done():
            raise ConnectError("no answer to RELEASE %s" % self.key)
        fut.result()

    def renew(self, ttl: float | None = None) -> float:
        """RENEW: set the key's TTL in Redis now; the TTL set, in seconds."""
        self._usable()
        text = "RENEW " + self.key
        if ttl is not None:
            text += " TTL %d" % P.to_ms(ttl, "ttl", minimum=1)
        req = HoldRequest(text, self._st, cf.Future(),
                          lambda line: int(line.split()[1]) / 1000.0)
        return cast(float, self._client._call(req))

    def proclaim(self, value: str) -> None:
        """PROCLAIM: replace the hold's value (same token)."""
        self._usable()
        P.check_value(value)
        req = HoldRequest("PROCLAIM %s %s" % (self.key, value), self._st,
                          cf.Future())
        self._client._call(req)
        self._st.value = value

    def _usable(self) -> None:
        if self._released:
            raise UsageError("%s was released" % self.key)
        if self._st.lost_error is not None:
            raise self._st.lost_error

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

    def __repr__(self) -> str:
        return "<lockbroker.Hold %s token %d%s>" % (
            self.key, self.token, " LOST" if self.lost else "")


class Watch:
    """The holders of a key as the broker tells them (WATCH): ``state`` is
    the latest (None before the first), ``leader`` the value of an
    exclusive holder (the elected leader's), ``wait()`` waits for a state,
    iterating yields each state as it comes.  ``close()`` ends it."""

    def __init__(self, client: Client, key: str,
                 on_change: Callable[[P.KeyState], None] | None) -> None:
        self._client = client
        self.key = key
        self._on_change = on_change
        self._cv = threading.Condition()
        self._state: P.KeyState | None = None
        self._seq = 0
        self._closed = False

    def _listener(self, state: P.KeyState) -> None:
        with self._cv:
            self._state = state
            self._seq += 1
            self._cv.notify_all()
        if self._on_change is not None:
            self._on_change(state)

    @property
    def state(self) -> P.KeyState | None:
        return self._state

    @property
    def leader(self) -> str | None:
        """The value of the key's exclusive holder (None: nobody, or a
        holder without a value)."""
        s = self._state
        return s.value if s is not None and s.kind == "exclusive" else None

    def wait(self, predicate: Callable[[P.KeyState], bool] | None = None,
             timeout: float | None = None) -> P.KeyState:
        """The first state (the current one included) for which predicate
        is true (default: any).  Raises ``LockTimeout`` after timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._state is None or (predicate is not None and
                                          not predicate(self._state)):
                if self._closed:
                    raise UsageError("the watch is closed")
                left = None if deadline is None else \
                    deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise LockTimeout("watch %s: no such state in time"
                                      % self.key)
                self._cv.wait(left)
            return self._state

    def __iter__(self) -> Iterator[P.KeyState]:
        seen = 0
        while True:
            with self._cv:
                while self._seq == seen and not self._closed:
                    self._cv.wait()
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
