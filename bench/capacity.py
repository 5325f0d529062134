"""The capacity of a server under the mixed load: the highest paced (open-loop) rate that holds.

A rate holds when a run at that rate, through a back-office write in its middle, answers every
request due, fails none, and its latency does not grow: the last third of the run is not slower
than the first (a server short of capacity queues, and its latency climbs for as long as the
run lasts) and its p99 stays under a bound. wrk's closed-loop rate is where the search starts: a
closed loop never sends faster than answers come back, so it is at or above what holds open-loop.
From there the rate is halved until one holds, then the gap to the last that did not is halved
`refinements` times.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.paced_load import Interval

# A run in thirds: first, middle (the write), last.
THIRDS = 3


@dataclass(frozen=True)
class Probe:
    """One paced run at `rate` and what it showed, by third of the run."""

    rate: float
    holds: bool
    reason: str
    p50_ms: tuple[float | None, ...]
    p99_ms: tuple[float | None, ...]
    errors: int
    due: int
    answered: int


@dataclass(frozen=True)
class Limits:
    # The last third's p50 may be at most `growth` times the first's, plus `slack_ms`.
    growth: float = 2.0
    slack_ms: float = 10.0
    p99_bound_ms: float = 500.0
    answered_fraction: float = 0.99


def judge(rate: float, thirds: Sequence[Interval], limits: Limits = Limits()) -> Probe:
    """Whether the run whose intervals are `thirds` held its rate, and why not."""
    due = sum(interval.due for interval in thirds)
    answered = sum(interval.answered for interval in thirds)
    errors = sum(interval.errors for interval in thirds)
    p50 = tuple(interval.p50_ms for interval in thirds)
    p99 = tuple(interval.p99_ms for interval in thirds)
    reason = ""
    if errors:
        reason = f"{errors} failed requests"
    elif due == 0 or answered < limits.answered_fraction * due:
        reason = f"{answered} of {due} requests answered"
    elif any(value is None or value > limits.p99_bound_ms for value in p99):
        reason = f"p99 above {limits.p99_bound_ms:.0f} ms"
    else:
        first, last = p50[0], p50[-1]
        assert first is not None and last is not None
        if last > limits.growth * first + limits.slack_ms:
            reason = f"p50 grew from {first:.1f} to {last:.1f} ms"
    return Probe(rate, not reason, reason or "held", p50, p99, errors, due, answered)


def find_capacity(
    start: float, probe: Callable[[float], Probe], *, refinements: int = 2, floor: float = 5.0
) -> tuple[float, list[Probe]]:
    """The highest rate found to hold, searching down from `start`, and every probe made. 0 when
    not even `floor` requests per second hold."""
    probes: list[Probe] = []

    def holds(rate: float) -> bool:
        probes.append(probe(rate))
        return probes[-1].holds

    failed = start
    rate = start
    while not holds(rate):
        failed = rate
        rate = rate / 2
        if rate < floor:
            return 0.0, probes
    held = rate
    if held == start:
        return held, probes
    for _ in range(refinements):
        middle = (held + failed) / 2
        if holds(middle):
            held = middle
        else:
            failed = middle
    return held, probes
