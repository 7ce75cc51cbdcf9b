#!/usr/bin/env python3
"""
run_conformance.py - replays the transcripts of tests/conformance/
(grammar: tests/conformance/README.md) through the Python library's
threaded Client, against servers started by the shared helper.

    python3 clients/python/tests/run_conformance.py [name ...]

Each transcript (all, or those named, with or without .txt) gets a fresh
Redis and brokers (helper reset).  Each action runs on a thread of its own,
so the library's local per-key lock sees two actions as two threads.
Prints PASS/FAIL per transcript (a failure with its line and what happened)
and "N passed, N failed"; exits 1 if any failed.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, HERE)

import logging  # noqa: E402

import lockbroker  # noqa: E402
from lockbroker import KeyState, _exits  # noqa: E402
from servers import (TRANSCRIPTS, HelperError, Servers,  # noqa: E402
                     allow_old_brokers)  # noqa: E402

STEP_BOUND = 10.0           # seconds any step may take (README)
RUNNER_WORDS = {"client", "await", "cancel", "assert", "repeat"}


class Failure(AssertionError):
    pass


def expand(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Comments and blanks out, repeat expanded."""
    out = []
    for n, line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"repeat (\d+)\.\.(\d+) (.+)", line)
        if m:
            for i in range(int(m.group(1)), int(m.group(2)) + 1):
                out.append((n, m.group(3).replace("{i}", str(i))))
        else:
            out.append((n, line))
    return out


def split_step(line: str) -> tuple[list[str], list[str] | None]:
    words = line.split()
    if "->" in words:
        i = words.index("->")
        return words[:i], words[i + 1:]
    return words, None


def options(words: list[str]) -> tuple[list[str], dict[str, str], set[str]]:
    """Positional words, name=value options, flags (README: options and
    flags come after the positional words; here: any word with '=' is an
    option, and the caller says which bare words are flags)."""
    pos, opts, flags = [], {}, set()
    for w in words:
        if "=" in w:
            k, v = w.split("=", 1)
            opts[k] = v
        elif w in ("shared", "tls"):
            flags.add(w)
        else:
            pos.append(w)
    return pos, opts, flags


def outcome_of(exc: BaseException | None, value: Any) -> str:
    """The conformance word for what a call gave."""
    if exc is None:
        return "ok"
    if isinstance(exc, lockbroker.LockTimeout):
        return "timeout"
    if isinstance(exc, lockbroker.LockBusy):
        return "busy"
    if isinstance(exc, lockbroker.WaitCancelled):
        return "cancelled"
    if isinstance(exc, lockbroker.LockBrokerError):
        return "error " + exc.code
    return "error %s: %s" % (type(exc).__name__, exc)


class Call:
    """One action on a thread of its own."""

    def __init__(self, fn: Callable[["Call"], Any]) -> None:
        self.fn = fn
        self.started = time.monotonic()
        self.ended: float | None = None
        self.value: Any = None
        self.exc: BaseException | None = None
        self.request: lockbroker.LockRequest | None = None
        self.have_request = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.value = self.fn(self)
        except BaseException as e:      # noqa: BLE001 - reported
            self.exc = e
        finally:
            self.ended = time.monotonic()
            self.have_request.set()
            self.done.set()

    def wait(self, bound: float = STEP_BOUND) -> None:
        if not self.done.wait(bound):
            raise Failure("the call did not end within %.0f s" % bound)


class Transcript:
    def __init__(self, servers: Servers, name: str) -> None:
        self.servers = servers
        self.name = name
        self.vars: dict[str, int] = {}
        self.clients: dict[str, lockbroker.Client] = {}
        self.events: dict[str, list[str]] = {}
        self.events_cv = threading.Condition()
        self.holds: dict[tuple[str, str], lockbroker.Hold] = {}
        self.lost: dict[int, threading.Event] = {}
        self.watches: dict[tuple[str, str], lockbroker.Watch] = {}
        self.calls: dict[str, tuple[Call, str, str, str]] = {}

    # -- tokens
    def token(self, word: str, value: int | None, what: str) -> None:
        """Bind or compare a $variable (or '-' for no token)."""
        if word == "-":
            if value is not None:
                raise Failure("%s: expected no token, got %s" % (what, value))
            return
        if not word.startswith("$"):
            raise Failure("bad token word %r" % word)
        if word not in self.vars:
            if value is None:
                raise Failure("%s: expected a token, got none" % what)
            self.vars[word] = value
        elif self.vars[word] != value:
            raise Failure("%s: token %s is %s, expected %s = %s"
                          % (what, value, value, word, self.vars[word]))

    def tokval(self, word: str) -> int:
        if word not in self.vars:
            raise Failure("%s is not bound yet" % word)
        return self.vars[word]

    # -- states
    def state_matches(self, state: KeyState | None, words: list[str],
                      bind: bool) -> str | None:
        """None if state matches the state words, else why not."""
        if state is None:
            return "no state yet"
        kind, rest = words[0], words[1:]
        if kind != state.kind:
            return "is %s" % self.show(state)
        if kind == "exclusive":
            for w in rest:
                if w.startswith("value="):
                    want = w[6:]
                    have = state.value if state.value is not None else "-"
                    if have != want:
                        return "value %s, not %s" % (have, want)
                elif w.startswith("$"):
                    if w in self.vars:
                        if self.vars[w] != state.token:
                            return "token %s, not %s" % (state.token, w)
                    elif bind:
                        self.vars[w] = state.token
        elif kind == "shared":
            if rest and int(rest[0]) != state.holders:
                return "%d holders" % state.holders
        elif kind == "semaphore":
            if rest and int(rest[0]) != state.holders:
                return "%d holders" % state.holders
            if len(rest) > 1 and int(rest[1]) != state.limit:
                return "limit %s" % state.limit
        return None

    @staticmethod
    def show(state: KeyState) -> str:
        if state.kind == "exclusive":
            return "exclusive %s value=%s" % (state.token, state.value or "-")
        if state.kind == "shared":
            return "shared %d" % state.holders
        if state.kind == "semaphore":
            return "semaphore %d %s" % (state.holders, state.limit)
        return "free"

    # -- the steps
    def run(self, lines: list[tuple[int, str]]) -> None:
        self.servers.reset()
        try:
            for n, line in expand(lines):
                try:
                    self.step(line)
                except Failure as e:
                    raise Failure("line %d: %s\n    %s" % (n, line, e))
                except HelperError as e:
                    raise Failure("line %d: %s\n    helper: %s"
                                  % (n, line, e))
                except Exception as e:  # noqa: BLE001 - the library's own
                    raise Failure("line %d: %s\n    %s: %s"
                                  % (n, line, type(e).__name__, e))
        finally:
            for c in self.clients.values():
                try:
                    c.close()
                except Exception:       # noqa: BLE001 - best effort
                    pass

    def step(self, line: str) -> None:
        words, out = split_step(line)
        first = words[0]
        if first == "client":
            return self.make_client(words[1:], out)
        if first == "await":
            call, c, key, kind = self.calls.pop(words[1])
            call.wait()
            return self.check_outcome(call, out, c, key, kind)
        if first == "cancel":
            call, c, key, kind = self.calls.pop(words[1])
            if not call.have_request.wait(STEP_BOUND):
                raise Failure("the call never started")
            if call.request is not None:
                call.request.cancel()
            call.wait()
            return self.check_outcome(call, out, c, key, kind)
        if first == "assert":
            a, op, b = words[1:4]
            x, y = self.tokval(a), self.tokval(b)
            ok = {"<": x < y, "=": x == y, "!=": x != y}[op]
            if not ok:
                raise Failure("%s=%d %s %s=%d is false" % (a, x, op, b, y))
            return None
        if first in self.clients:
            return self.action(first, words[1:], out)
        self.servers.step(line)
        # the library refuses a broker older than 1.2 unless told (see
        # servers.allow_old_brokers): only ever for a broker of that age
        if first == "broker":
            allow_old_brokers(self.servers, words[1])
        return None

    def make_client(self, words: list[str], out: list[str] | None) -> None:
        pos, opts, flags = options(words)
        name, brokers = pos[0], pos[1].split(",")
        tls = "tls" in flags
        kw: dict[str, Any] = {}
        if "grace" in opts:
            kw["grace"] = int(opts["grace"]) / 1000.0
        if "ping" in opts:
            kw["ping_interval"] = kw["ping_timeout"] = \
                int(opts["ping"]) / 1000.0
        if tls:
            kw["tls"] = self.servers.tls_context(brokers[0])
        self.events[name] = []

        def hook(ev: lockbroker.ConnectionEvent, name: str = name) -> None:
            with self.events_cv:
                self.events[name].append(ev.kind)
                self.events_cv.notify_all()
        try:
            client = lockbroker.Client(
                [self.servers.address(b, tls) for b in brokers],
                auth=opts.get("auth"), name=opts.get("name"),
                on_event=hook, **kw)
        except lockbroker.LockBrokerError as e:
            got = outcome_of(e, None)
            if (out or ["ok"]) != got.split():
                raise Failure("expected %s, got %s" % (" ".join(out or ["ok"]),
                                                      got))
            return
        self.clients[name] = client
        if out not in (None, ["ok"]):
            raise Failure("expected %s, the client connected"
                          % " ".join(out))

    def action(self, c: str, words: list[str], out: list[str] | None
               ) -> None:
        client = self.clients[c]
        verb, args = words[0], words[1:]
        if verb == "expect":
            return self.expect(c, args)
        pos, opts, flags = options(args)
        key = pos[0] if pos else ""
        fn = self.callable_for(client, c, verb, pos, opts, flags)
        call = Call(fn)
        if "async" in opts:
            self.calls[opts["async"]] = (call, c, key, verb)
            return None
        if out is None:
            raise Failure("an action without async= needs -> outcome")
        call.wait()
        return self.check_outcome(call, out, c, key, verb)

    def callable_for(self, client: lockbroker.Client, c: str, verb: str,
                     pos: list[str], opts: dict[str, str], flags: set[str]
                     ) -> Callable[[Call], Any]:
        key = pos[0] if pos else ""
        ms = (lambda name: int(opts[name]) / 1000.0 if name in opts
              else None)
        if verb in ("lock", "elect"):
            lost = threading.Event()

            def take(call: Call) -> Any:
                kw: dict[str, Any] = {"ttl": ms("ttl")}
                if verb == "elect":
                    kw["value"] = pos[1]
                else:
                    kw["value"] = opts.get("value")
                    kw["shared"] = "shared" in flags
                    if "limit" in opts:
                        kw["limit"] = int(opts["limit"])
                timeout = ms("wait") if "wait" in opts else (
                    None if verb == "elect" else 0.0)
                call.request = client.start_lock(
                    key, timeout, on_lost=lambda e: lost.set(), **kw)
                call.have_request.set()
                hold = call.request.result()
                self.lost[id(hold)] = lost
                return hold
            return take
        if verb in ("unlock", "resign"):
            def unlock(call: Call) -> Any:
                hold = self.holds.pop((c, key), None)
                if hold is None:
                    raise Failure("%s holds no %s" % (c, key))
                hold.release(ms("linger"))
            return unlock
        if verb == "renew":
            return lambda call: self.hold(c, key).renew(ms("ttl"))
        if verb == "proclaim":
            return lambda call: self.hold(c, key).proclaim(pos[1])
        if verb == "owner":
            return lambda call: client.owner(key)
        if verb == "check":
            return lambda call: client.check(key, self.tokval(pos[1]))
        if verb == "watch":
            def watch(call: Call) -> None:
                self.watches[(c, key)] = client.watch(key)
            return watch
        if verb == "unwatch":
            return lambda call: self.watches.pop((c, key)).close()
        if verb in ("close", "exit"):
            def close(call: Call) -> None:
                if verb == "exit":      # what the end of the process does
                    client._s.end_now(_exits.EXIT_BOUND)
                else:
                    client.close()
                for k in [k for k in self.holds if k[0] == c]:
                    del self.holds[k]
            return close
        raise Failure("unknown action %r" % verb)

    def hold(self, c: str, key: str) -> lockbroker.Hold:
        if (c, key) not in self.holds:
            raise Failure("%s holds no %s" % (c, key))
        return self.holds[(c, key)]

    def check_outcome(self, call: Call, out: list[str], c: str, key: str,
                      verb: str) -> None:
        want = list(out)
        after = None
        if want and want[-1].startswith("after="):
            lo, hi = want.pop()[6:].split("..")
            after = (int(lo), int(hi))
        value, exc = call.value, call.exc
        if isinstance(exc, Failure):
            raise exc
        if isinstance(value, lockbroker.Hold):
            self.holds[(c, key)] = value
            got = ["held"]
            if want[:1] == ["held"] and len(want) > 1:
                self.token(want[1], value.token, "held")
                got.append(want[1])
        elif isinstance(value, KeyState):
            why = self.state_matches(value, want, bind=True)
            got = want if why is None else [self.show(value)]
        elif isinstance(value, lockbroker.CheckResult):
            if value.current:
                got = ["current"]
            else:
                got = ["stale"]
                if want[:1] == ["stale"] and len(want) > 1:
                    self.token(want[1], value.token, "stale")
                    got.append(want[1])
        else:
            got = outcome_of(exc, value).split()
        if got != want:
            raise Failure("expected %s, got %s" % (" ".join(want),
                                                   " ".join(got)))
        if after is not None:
            took = (call.ended - call.started) * 1000.0
            if not after[0] <= took <= after[1]:
                raise Failure("took %.0f ms, not %d..%d" % (took, *after))

    def expect(self, c: str, args: list[str]) -> None:
        pos, opts, _ = options(args)
        what = pos[0]
        within = int(opts.get("within", 5000)) / 1000.0
        if what == "lost":
            hold = self.hold(c, pos[1])
            if not self.lost[id(hold)].wait(within) or not hold.lost:
                raise Failure("%s was not reported lost within %.1f s"
                              % (pos[1], within))
        elif what == "held":
            hold = self.hold(c, pos[1])
            if len(pos) > 2:
                self.token(pos[2], hold.token, "held")
            end = time.monotonic() + int(opts.get("for", 0)) / 1000.0
            while True:
                if hold.lost:
                    raise Failure("%s was reported lost: %s"
                                  % (pos[1], hold.lost_error))
                if time.monotonic() >= end:
                    break
                time.sleep(0.02)
        elif what == "watch":
            w = self.watches.get((c, pos[1]))
            if w is None:
                raise Failure("%s does not watch %s" % (c, pos[1]))
            # the state's own words (shared, value=...) are not options
            state = [w_ for w_ in args[2:] if not w_.startswith("within=")]
            self.wait_state(w, state, within)
        elif what == "leader":
            key = pos[1]
            w = self.watches.get((c, "leader:" + key))
            if w is None:
                w = self.watches[(c, "leader:" + key)] = \
                    self.clients[c].watch(key)
            want = pos[2]
            try:
                w.wait(lambda s: (w.leader or "-") == want, within)
            except lockbroker.LockTimeout:
                raise Failure("the leader is %s, not %s"
                              % (w.leader or "-", want)) from None
        elif what == "event":
            name = pos[1]
            end = time.monotonic() + within
            with self.events_cv:
                while name not in self.events[c]:
                    left = end - time.monotonic()
                    if left <= 0:
                        raise Failure("no %s event within %.1f s (saw %s)"
                                      % (name, within, self.events[c]))
                    self.events_cv.wait(left)
                self.events[c].remove(name)
        else:
            raise Failure("unknown expectation %r" % what)

    def wait_state(self, w: lockbroker.Watch, words: list[str],
                   within: float) -> None:
        try:
            w.wait(lambda s: self.state_matches(s, words, bind=False) is None,
                   within)
        except lockbroker.LockTimeout:
            raise Failure("the watch shows %s" % (
                self.show(w.state) if w.state else "nothing")) from None
        self.state_matches(w.state, words, bind=True)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.DEBUG if os.environ.get(
        "LOCKBROKER_LOG") else logging.ERROR)
    names = [a[:-4] if a.endswith(".txt") else a for a in argv]
    files = sorted(f[:-4] for f in os.listdir(TRANSCRIPTS)
                   if f.endswith(".txt"))
    if names:
        missing = set(names) - set(files)
        if missing:
            print("no such transcript: %s" % ", ".join(sorted(missing)))
            return 2
        files = [f for f in files if f in names]
    servers = Servers()
    passed = failed = 0
    try:
        for name in files:
            with open(os.path.join(TRANSCRIPTS, name + ".txt")) as f:
                lines = list(enumerate(f.read().splitlines(), 1))
            t0 = time.monotonic()
            try:
                Transcript(servers, name).run(lines)
            except Exception as e:  # noqa: BLE001 - a failure, not the end
                failed += 1
                why = e if isinstance(e, Failure) else "%s: %s" % (
                    type(e).__name__, e)
                print("FAIL %s (%.1f s)\n  %s" % (name, time.monotonic() - t0,
                                                  why), flush=True)
                continue
            passed += 1
            print("PASS %s (%.1f s)" % (name, time.monotonic() - t0),
                  flush=True)
    finally:
        servers.close()
    # nothing is skipped: a broker without a word a transcript needs fails it
    print("%d passed, %d failed, 0 skipped" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
