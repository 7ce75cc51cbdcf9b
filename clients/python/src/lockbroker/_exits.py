"""Sessions end with QUIT when their client is gone, so the broker frees
their locks at once instead of keeping them for the grace (a grace is for
a connection that broke, not for an app that is done):

- at the normal end of the process (``atexit``: the script's end,
  ``sys.exit()``, an uncaught exception), every session still open is
  closed, all at once and within about a second;
- when a ``Client`` object becomes unreachable (``weakref.finalize`` on the
  user-facing object: the connection's threads hold only the session
  behind it), its session is closed on a thread of its own.

A process killed (SIGKILL, a crash, ``os._exit()``) sends nothing: the
broker keeps its locks for the grace, then frees them.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from typing import Any, Protocol

#: How long the end of the process waits for the sessions' QUITs.
EXIT_BOUND = 1.5


class Ending(Protocol):
    def end_now(self, bound: float) -> None:
        """QUIT and close, within bound seconds; at most once."""


_mu = threading.Lock()
_live: set[Ending] = set()


def track(session: Ending, handle: Any = None) -> None:
    """Close session at the end of the process, and (with a handle: the
    object users hold) once the handle is unreachable."""
    with _mu:
        _live.add(session)
    if handle is not None:
        fin = weakref.finalize(handle, _abandoned, session)
        fin.atexit = False          # _at_exit below closes it then


def untrack(session: Ending) -> None:
    """The session was closed."""
    with _mu:
        _live.discard(session)


def _abandoned(session: Ending) -> None:
    # The collector runs wherever the last reference went, maybe under
    # the session's own lock: close on a thread of its own.
    try:
        threading.Thread(target=session.end_now, args=(EXIT_BOUND,),
                         name="lockbroker-finalize", daemon=True).start()
    except RuntimeError:
        pass                        # the interpreter is ending: _at_exit


@atexit.register
def _at_exit() -> None:
    with _mu:
        sessions = list(_live)
    if not sessions:
        return
    end = time.monotonic() + EXIT_BOUND
    threads = []
    for s in sessions:              # all at once: each waits for its QUIT
        t = threading.Thread(target=s.end_now, args=(EXIT_BOUND,),
                             daemon=True)
        try:
            t.start()
            threads.append(t)
        except RuntimeError:        # no new threads here: one by one
            s.end_now(max(0.1, end - time.monotonic()))
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
