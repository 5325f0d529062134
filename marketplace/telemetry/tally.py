"""Counts of the request path kept in plain numbers, added to the Prometheus metrics in batches.

With several workers (and `marketplace serve` with one as well) every increment of a Prometheus
metric is a locked write to a memory-mapped file, a few microseconds each and three or four per
request: a large share of a cached answer's cost. Here a request adds to plain numbers of its
worker; they are added to the metrics at the end of the event loop's turn that counted them (so
once for all the requests one turn answered), before every exposition (so a scrape shows every
request its worker answered) and when the worker stops.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from typing import Any


class _Durations:
    """Observations of one histogram series not yet added to it, by bucket."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: list[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.total = 0.0


class Tally:
    def __init__(self) -> None:
        self._counts: dict[Any, int] = {}
        self._durations: dict[Any, _Durations] = {}
        self._fold_pending = False

    def count(self, counter: Any) -> None:
        """One more on a counter series (a `Counter` without labels or a labelled child)."""
        counts = self._counts
        counts[counter] = counts.get(counter, 0) + 1
        if not self._fold_pending:
            self._fold_soon()

    def observe(self, histogram: Any, value: float) -> None:
        """One observation of a histogram series (its buckets as `Histogram.observe` picks them)."""
        durations = self._durations.get(histogram)
        if durations is None:
            # The series' upper bounds, the last one +Inf (prometheus_client keeps them there).
            durations = self._durations[histogram] = _Durations(list(histogram._upper_bounds))
        durations.counts[bisect_left(durations.bounds, value)] += 1
        durations.total += value
        if not self._fold_pending:
            self._fold_soon()

    def _fold_soon(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.fold()  # outside an event loop: nothing to batch with
            return
        self._fold_pending = True
        loop.call_soon(self.fold)

    def fold(self) -> None:
        """Add every pending count and observation to its metric."""
        self._fold_pending = False
        counts, self._counts = self._counts, {}
        for counter, amount in counts.items():
            counter.inc(amount)
        durations, self._durations = self._durations, {}
        for histogram, pending in durations.items():
            # What `Histogram.observe` does per value, once per bucket: its sum and bucket values.
            histogram._sum.inc(pending.total)
            for bucket, amount in zip(histogram._buckets, pending.counts, strict=True):
                if amount:
                    bucket.inc(amount)


# The worker's one tally (each worker process has its own).
TALLY = Tally()
