"""What a client counts of its own life, the same names in every
lockbroker library: a snapshot (``Client.counters()``) and the event the
``on_counter`` hook is given each time one of them moves."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional


@dataclass(frozen=True)
class Counters:
    """Since the client was made:

    - ``waits``: lock calls (``lock``, ``start_lock``, ``elect``) that
      ended, granted or not; ``wait_seconds_total``: the time they took,
      from the call to its outcome, summed;
    - ``holds``: holds that ended (released, lost, or ended with the
      session); ``hold_seconds_total``: how long they were held, summed
      (a hold still held is in neither yet);
    - ``losses``: holds reported lost while the client was open;
    - ``resumes``: sessions resumed (RESUME) after a broken connection;
    - ``reconnects``: connections made again after one broke, resumed or
      not (so resumes <= reconnects).
    """

    waits: int = 0
    wait_seconds_total: float = 0.0
    holds: int = 0
    hold_seconds_total: float = 0.0
    losses: int = 0
    resumes: int = 0
    reconnects: int = 0


@dataclass(frozen=True)
class CounterEvent:
    """What the ``on_counter`` hook is given: ``name`` is the counter that
    moved by one (waits, holds, losses, resumes, reconnects), ``key`` the
    key it was about (None for resumes and reconnects), ``seconds`` what
    was added to wait_seconds_total or hold_seconds_total (else 0)."""

    name: str
    key: Optional[str]
    seconds: float = 0.0


class Tally:
    """The counters as they move (under the client's lock)."""

    def __init__(self) -> None:
        self.values = dict.fromkeys((f.name for f in fields(Counters)), 0)

    def add(self, name: str, seconds: float = 0.0) -> None:
        self.values[name] += 1
        total = name[:-1] + "_seconds_total"    # waits -> wait_seconds_total
        if total in self.values:
            self.values[total] += seconds

    def snapshot(self) -> Counters:
        return Counters(**self.values)
