"""How old a kept answer may be: the service's one freshness guarantee, and each answer's age.

The guarantee, as an operator may repeat it to plugin authors:

    An answer never misses a change committed more than MARKETPLACE_WORKER_CACHE_MAX_AGE_SECONDS
    (60 s by default) before it is sent; while change notices flow, it misses none older than a
    few milliseconds.

Change notices (`changes.py`) are the fast path: a notice drops a worker's kept answers within
milliseconds. But a change can be committed without a notice (a restore with triggers disabled,
a replication apply worker, a notice lost with a connection), so every answer a worker keeps
(`http/worker_cache.py`) and every count it keeps (`readers.GenerationCounts`) also carries the
moment from which it is known to hold every committed change, its *as-of* time, and is not
served once that is older than the maximum age.

An answer's as-of time is when its request began reading (data committed before then is in
what it read), lowered by what it was built from: a count kept earlier, or a replica proven
current only as of an earlier moment (`read_proven_as_of`). Times are `time.monotonic()`.
"""

from __future__ import annotations

import time
from contextvars import ContextVar, Token
from dataclasses import dataclass

# The as-of time of the answer being built by this task, when one is being built for keeping.
_ANSWER_AS_OF: ContextVar[list[float] | None] = ContextVar("answer_as_of", default=None)

clock = time.monotonic


def answer_started(as_of: float) -> Token[list[float] | None]:
    """An answer that may be kept starts being built: its reads see what was committed by `as_of`."""
    return _ANSWER_AS_OF.set([as_of])


def answer_ended(token: Token[list[float] | None]) -> None:
    _ANSWER_AS_OF.reset(token)


def answer_as_of() -> float | None:
    """The as-of time of the answer being built (None outside one)."""
    cell = _ANSWER_AS_OF.get()
    return None if cell is None else cell[0]


def read_proven_as_of(moment: float) -> None:
    """What the answer being built just read is known to hold every change committed by `moment` only."""
    cell = _ANSWER_AS_OF.get()
    if cell is not None and moment < cell[0]:
        cell[0] = moment


@dataclass(frozen=True, slots=True)
class Stamp:
    """What an answer or count read now may be kept under: the data's generation and its as-of time."""

    generation: int
    as_of: float

    def kept_as_of(self) -> float:
        """The as-of time to keep what was built under this stamp with (lowered by what it read)."""
        built = answer_as_of()
        return self.as_of if built is None else min(self.as_of, built)
