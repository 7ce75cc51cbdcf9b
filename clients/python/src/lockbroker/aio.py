"""The asyncio client: ``AsyncClient``, ``AsyncHold``, ``AsyncWatch``.

The same session core as the threaded client, driven from the event
loop: an ``asyncio.Protocol`` splits what the broker sends into lines and
feeds them to the core; requests are written at once with
``transport.write`` (pipelined, replies matched in order); a task
reconnects and resumes after a broken connection; a task sends the idle
PING.  A wait is cancelled the asyncio way (cancel the task awaiting it:
the broker is told CANCEL), and a lost hold cancels the task running under
its ``async with`` (which then raises ``LockLost``).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from typing import Any, AsyncIterator, Callable, Generator, cast

from . import _exits
from . import protocol as P
from ._base import ClientBase, HoldBase, WatchBase, no_answer
from ._common import addr_text, linger_ms
from ._core import HoldState, Request, Watch as WatchRequest, log
from ._net import tune
from .errors import (BrokerError, Closed, ConnectError, LockBrokerError,
                     LockLost, LockTimeout, NotAuthenticated, ProtocolError,
                     UsageError, VersionError, WaitCancelled, describe)


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """A done-callback for futures nobody awaits (no 'never retrieved')."""
    if not fut.cancelled():
        fut.exception()


class _LineProtocol(asyncio.Protocol):
    def __init__(self, client: "AsyncClient") -> None:
        self.client = client
        # set by connection_made, before anything can use it
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.buf = b""
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport        # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.client._last_rx = time.monotonic()
        self.buf += data
        if b"\n" not in data:
            return
        *lines, self.buf = self.buf.split(b"\n")
        for raw in lines:
            if self.lost:
                return
            self.client._line(self, raw.rstrip(b"\r").decode("ascii",
                                                               "replace"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.client._connection_lost(self, exc)


class AsyncClient(ClientBase):
    __doc__ = """The asyncio twin of ``lockbroker.Client`` (same arguments).
    Use ``async with AsyncClient(...) as client:`` or ``await
    client.connect()`` then ``await client.close()``.

    """ + (ClientBase.__doc__ or "").split("\n\n", 1)[1]

    def _start(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proto: _LineProtocol | None = None
        self._handshaking: tuple[_LineProtocol,
                                 asyncio.Queue[str | None]] | None = None
        self._started = False
        self._flush_soon = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._up = asyncio.Event()

    @property
    def _ev(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise UsageError("connect() the client first")
        return self._loop

    # ------------------------------------------------- the core's driver --
    def new_future(self) -> asyncio.Future[Any]:
        return self._ev.create_future()

    def defer(self, fn: Callable[[], None]) -> None:
        self._ev.call_soon(fn)

    def wake_writer(self) -> None:
        if not self._flush_soon:
            self._flush_soon = True
            self._ev.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_soon = False
        if self._connected and self._proto is not None:
            data = self._core.take_outgoing()
            if data:
                self._proto.transport.write(data)

    # ------------------------------------------------------- connections --
    async def connect(self) -> "AsyncClient":
        """Connect to the first broker that answers (HELLO, AUTH, the
        version check).  Raises as ``Client()`` does."""
        if self._started:
            raise UsageError("connect() once per client")
        self._started = True
        self._loop = asyncio.get_running_loop()
        errors = []
        for i in range(len(self._o.brokers)):
            try:
                proto, _ = await self._open_session(i, resume=False)
            except (VersionError, NotAuthenticated):
                raise
            except (OSError, asyncio.TimeoutError, LockBrokerError) as e:
                errors.append("%s: %s" % (addr_text(self._o.brokers[i]), e))
                continue
            self._install(proto, i, resumed=False)
            self._emit("connected", i)
            self._spawn(self._ping_loop())
            _exits.track(self)
            return self
        raise ConnectError("no broker answered: " + "; ".join(errors))

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task = self._ev.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _open_session(self, i: int, resume: bool
                            ) -> tuple[_LineProtocol, bool]:
        host, port = self._o.brokers[i]
        tls = self._o.tls
        transport, proto = await asyncio.wait_for(
            self._ev.create_connection(
                lambda: _LineProtocol(self), host, port, ssl=tls,
                server_hostname=(self._o.tls_server_name or host)
                if tls else None),
            self._o.connect_timeout)
        replies_q: asyncio.Queue[str | None] = asyncio.Queue()
        self._handshaking = (proto, replies_q)
        try:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                tune(sock, self._o.ping_interval + self._o.ping_timeout)
            gen = self._core.handshake(resume)
            lines = next(gen)
            while True:
                transport.write(("\n".join(lines) + "\n").encode("ascii"))
                replies = []
                for _ in lines:
                    r = await asyncio.wait_for(replies_q.get(),
                                               self._o.handshake_timeout)
                    if r is None:
                        raise ConnectionError("the broker closed the "
                                              "connection")
                    replies.append(r)
                try:
                    lines = gen.send(replies)
                except StopIteration as done:
                    return proto, bool(done.value)
        except BaseException:
            transport.abort()
            raise
        finally:
            self._handshaking = None

    def _install(self, proto: _LineProtocol, i: int, resumed: bool) -> None:
        self._core.reconcile(resumed)
        self._proto = proto
        self._current = i
        self._connected = True
        self._ping_sent = None
        self._last_rx = time.monotonic()
        self._up.set()
        self._flush()

    def _line(self, proto: _LineProtocol, line: str) -> None:
        hs = self._handshaking
        if hs is not None and hs[0] is proto and not line.startswith("EVENT "):
            if line:
                hs[1].put_nowait(line)
            return
        if proto is not self._proto and hs is None:
            return
        try:
            self._core.feed(line)
        except ProtocolError as e:
            log.error("%s: dropping the connection", e)
            proto.transport.abort()

    def _connection_lost(self, proto: _LineProtocol,
                         exc: Exception | None) -> None:
        hs = self._handshaking
        if hs is not None and hs[0] is proto:
            hs[1].put_nowait(None)
            return
        if proto is not self._proto:
            return
        self._proto = None
        self._connected = False
        self._up.clear()
        self._core.connection_lost()
        if self._closed or self._closing:
            return
        self._spawn(self._reconnect(
            str(exc) if exc else "the broker closed the connection"))

    async def _reconnect(self, reason: str) -> None:
        plan = self._reconnect_plan(reason)
        step = next(plan, None)
        while step is not None:
            if isinstance(step, float):
                await asyncio.sleep(step)
                step = next(plan, None)
                continue
            i, resume = step
            try:
                proto, resumed = await self._open_session(i, resume)
            except (OSError, asyncio.TimeoutError, LockBrokerError) as e:
                step = plan.send(str(e))
                continue
            if self._closed:
                proto.transport.abort()
                return
            self._install(proto, i, resumed)
            self._announce(i, resumed)
            return

    async def _ping_loop(self) -> None:
        while not self._closed:
            if not self._connected:
                await self._up.wait()
                continue
            dead = self._ping_due()
            if dead:
                log.warning("%s", dead)
                if self._proto is not None:
                    self._proto.transport.abort()
                continue
            self._flush()
            await asyncio.sleep(self._ping_check_in())

    # ------------------------------------------------------------ requests --
    async def _call(self, req: Request) -> Any:
        self._check_open()
        req.fut = self._ev.create_future()
        self._core.submit(req, wake=False)
        self._flush()
        done, _ = await asyncio.wait({req.fut},
                                     timeout=self._o.request_timeout)
        if not done:
            req.abandoned = True
            req.fut.add_done_callback(_retrieve)
            raise no_answer(req.text, self._o.request_timeout)
        return req.fut.result()

    def _check_open(self) -> None:
        super()._check_open()
        if not self._started:
            raise UsageError("connect() the client first")

    def lock(self, key: str, timeout: float | None = None, *,
             shared: bool = False, limit: int | None = None,
             ttl: float | None = None, value: str | None = None,
             on_lost: Callable[[LockLost], None] | None = None
             ) -> "LockContext":
        """Take key (arguments as ``Client.lock``).  ``async with
        client.lock(key) as hold:`` runs the block under the hold, and a
        lost hold cancels the task running it (the block then raises
        ``LockLost``); ``hold = await client.lock(key)`` gives the
        ``AsyncHold``.  Cancelling the awaiting task withdraws the wait."""
        P.check_key(key)
        P.acquire_line(key, shared=shared, limit=limit, value=value)
        return LockContext(self, key, timeout, dict(
            shared=shared, limit=limit, ttl=ttl, value=value,
            on_lost=on_lost))

    def elect(self, key: str, value: str, timeout: float | None = None, *,
              ttl: float | None = None,
              on_lost: Callable[[LockLost], None] | None = None
              ) -> "LockContext":
        """Run for leader of key with value; ``async with
        client.elect(key, addr):`` runs the block while leading (a lost
        leadership cancels it).  ``watch(key)`` shows who leads."""
        return self.lock(key, timeout, ttl=ttl, value=value, on_lost=on_lost)

    async def _take(self, key: str, timeout: float | None,
                    opts: dict[str, Any]) -> "AsyncHold":
        self._check_open()
        loop = self._ev
        acq = self._acquire(key, timeout, loop.create_future(),
                            asyncio.current_task(), **opts)
        deadline, fut = acq.deadline, acq.fut
        fut.add_done_callback(_retrieve)
        self._core.start(acq)
        self._flush()
        try:
            if deadline is None:
                await asyncio.wait({fut})
            else:
                await asyncio.wait({fut}, timeout=max(0.0, deadline -
                                                      time.monotonic()))
                if not fut.done() and (acq.state in ("sent", "queued") or (
                        acq.state == "new" and self._connected)):
                    # the broker's answer is on its way
                    await asyncio.wait({fut}, timeout=self._o.margin)
                if not fut.done():
                    acq.cancel(self._core, acq.timed_out())
                    self._flush()
        except asyncio.CancelledError:
            acq.cancel(self._core, WaitCancelled(
                describe(key, "the wait was cancelled"), key=key))
            if fut.done() and fut.exception() is None:
                # granted before the cancel reached it: nobody will use it
                rel = loop.create_future()
                rel.add_done_callback(_retrieve)
                self._core.release(fut.result(), None, rel)
            self._flush()
            raise
        return AsyncHold(self, fut.result())

    async def owner(self, key: str) -> P.KeyState:
        return cast(P.KeyState, await self._call(
            self._owner_request(key, None)))

    async def check(self, key: str, token: int) -> P.CheckResult:
        return cast(P.CheckResult, await self._call(
            self._check_request(key, token, None)))

    async def watch(self, key: str,
                    on_change: Callable[[P.KeyState], None] | None = None,
                    on_error: Callable[[LockBrokerError], None] | None = None
                    ) -> "AsyncWatch":
        w = AsyncWatch(self, key, on_change, on_error)
        if self._add_watch(key, w._listener):
            try:
                await self._call(WatchRequest(key, None))
            except BaseException:
                await w.close()
                raise
        return w

    async def _unwatch(self, w: "AsyncWatch") -> None:
        if not self._drop_watch(w.key, w._listener):
            return
        try:
            await self._call(Request("UNWATCH " + w.key, None, replay=False))
        except (ConnectError, BrokerError):
            pass

    async def held(self) -> list[str]:
        return cast("list[str]", await self._call(
            Request("HELD", None, P.parse_list)))

    async def ping(self) -> None:
        await self._call(Request("PING", None))

    async def stats(self) -> dict[str, str]:
        return self._stats(await self._call(Request("STATS", None)))

    async def close(self) -> None:
        """End the session (QUIT): the broker releases what it holds."""
        if self._closed or not self._started:
            self._closed = True
            return
        self._closing = True
        _exits.untrack(self)
        if self._connected:
            try:
                await asyncio.wait_for(self._call(
                    Request("QUIT", None, replay=False)),
                    min(2.0, self._o.request_timeout))
            except (asyncio.TimeoutError, LockBrokerError):
                pass
        self._closed = True
        self._connected = False
        self._core.shutdown(Closed("the client was closed"))
        if self._proto is not None:
            self._proto.transport.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def end_now(self, bound: float) -> None:
        """The end of the process with the client still open (see
        _exits.py): the event loop has usually stopped, so QUIT goes
        straight to the socket, and what the broker still sends is read
        until it closes the connection (closing a socket with unread data
        would reset the connection instead).  Over TLS the loop's TLS
        state is out of reach: that session ends with the connection, and
        its grace applies."""
        if self._closed or self._closing or self._proto is None:
            return
        self._closing = True
        _exits.untrack(self)
        transport = self._proto.transport
        raw = transport.get_extra_info("socket")
        if raw is None or self._o.tls is not None or raw.fileno() < 0:
            return
        # a line the loop had not finished writing is ended first
        quit_line = b"\nQUIT\n" if transport.get_write_buffer_size() \
            else b"QUIT\n"
        end = time.monotonic() + bound
        try:
            with socket.socket(fileno=os.dup(raw.fileno())) as s:
                s.settimeout(bound)
                s.sendall(quit_line)
                while time.monotonic() < end:
                    s.settimeout(max(0.01, end - time.monotonic()))
                    if not s.recv(65536):
                        break
        except OSError:
            pass

    async def __aenter__(self) -> "AsyncClient":
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class LockContext:
    """What ``AsyncClient.lock`` returns: awaitable (the hold) and an
    async context manager (the block runs under the hold)."""

    def __init__(self, client: AsyncClient, key: str,
                 timeout: float | None, opts: dict[str, Any]) -> None:
        self._client = client
        self._key = key
        self._timeout = timeout
        self._opts = opts
        self._hold: AsyncHold | None = None

    def __await__(self) -> Generator[Any, None, "AsyncHold"]:
        return self._client._take(self._key, self._timeout,
                                  self._opts).__await__()

    async def __aenter__(self) -> "AsyncHold":
        self._hold = await self._client._take(self._key, self._timeout,
                                              self._opts)
        return await self._hold.__aenter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._hold is not None
        await self._hold.__aexit__(exc_type, exc, tb)


class AsyncHold(HoldBase):
    """A hold (see ``lockbroker.Hold``): ``token``, ``lost``, ``await
    release()``.  ``async with hold:`` runs a block under it: if the hold
    is lost meanwhile the task running the block is cancelled, and the
    block raises ``LockLost`` instead of ``CancelledError``."""

    _client: AsyncClient

    def __init__(self, client: AsyncClient, state: HoldState) -> None:
        super().__init__(client, state)
        self._task: asyncio.Task[Any] | None = None
        self._cancelling = 0
        self._cancelled_by_loss = False

    async def release(self, linger: float | None = None) -> None:
        self._releasing()
        c = self._client
        fut = c._ev.create_future()
        c._core.release(self._st, linger_ms(linger), fut)
        c._flush()
        done, _ = await asyncio.wait({fut}, timeout=c._o.request_timeout)
        if not done:
            fut.add_done_callback(_retrieve)
            raise no_answer("RELEASE " + self.key, c._o.request_timeout)
        fut.result()

    async def renew(self, ttl: float | None = None) -> float:
        return cast(float, await self._client._call(
            self._renew_request(ttl, None)))

    async def proclaim(self, value: str) -> None:
        await self._client._call(self._proclaim_request(value, None))
        self._st.value = value

    def _on_lost(self, err: LockLost) -> None:
        task = self._task
        if task is not None and not task.done() and not self._released:
            self._cancelled_by_loss = True
            task.cancel(msg="lockbroker: %s" % err)

    async def __aenter__(self) -> "AsyncHold":
        self._task = task = asyncio.current_task()
        # Python >= 3.11 counts cancel requests: one from elsewhere is
        # told apart from the loss's own
        self._cancelling = task.cancelling() \
            if task is not None and hasattr(task, "cancelling") else 0
        self.add_lost_callback(self._on_lost)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        task, self._task = self._task, None
        release_error = None
        if not self._released:
            try:
                await self.release()
            except LockLost as e:
                release_error = e
        if self._cancelled_by_loss and exc_type is asyncio.CancelledError \
                and task is not None and (not hasattr(task, "uncancel") or
                                          task.uncancel() <= self._cancelling) \
                and self._st.lost_error is not None:
            raise self._st.lost_error from exc
        if release_error is not None and exc_type is None:
            raise release_error

class AsyncWatch(WatchBase):
    """A key's holders as the broker tells them (see ``lockbroker.Watch``):
    ``state``, ``leader``, ``error``, ``await wait(predicate)``, ``async for
    state in watch`` (the current state, then each change), ``await
    close()``."""

    def __init__(self, client: AsyncClient, key: str,
                 on_change: Callable[[P.KeyState], None] | None,
                 on_error: Callable[[LockBrokerError], None] | None) -> None:
        super().__init__(key, on_change, on_error)
        self._client = client
        self._changed = asyncio.Event()
        self._seq = 0

    def _listener(self, x: P.KeyState | LockBrokerError) -> None:
        if self._seen(x):
            self._seq += 1
        self._changed.set()
        self._changed = asyncio.Event()
        self._notify_user(x)

    async def wait(self, predicate: Callable[[P.KeyState], bool] | None = None,
                   timeout: float | None = None) -> P.KeyState:
        async def until() -> P.KeyState:
            while self._state is None or (predicate is not None and
                                          not predicate(self._state)):
                self._check()
                await self._changed.wait()
            return self._state
        try:
            return await asyncio.wait_for(until(), timeout)
        except asyncio.TimeoutError:
            raise LockTimeout(describe(
                self.key, "the watch saw no such state within %.3g s"
                % timeout), key=self.key) from None

    async def __aiter__(self) -> AsyncIterator[P.KeyState]:
        seen = 0
        while True:
            while self._seq == seen and not self._closed:
                await self._changed.wait()
            if self._error is not None:
                raise self._error
            if self._closed:
                return
            seen = self._seq
            assert self._state is not None
            yield self._state

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._changed.set()
        await self._client._unwatch(self)

    async def __aenter__(self) -> "AsyncWatch":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
