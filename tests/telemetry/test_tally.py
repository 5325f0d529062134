"""The request path's counts kept in plain numbers reach their Prometheus metrics whole: the same
samples as counted one by one, at the end of the loop's turn, and before any exposition."""

from __future__ import annotations

import asyncio
import random

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest

from marketplace.telemetry.metrics import exposition
from marketplace.telemetry.tally import Tally

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def samples(registry: CollectorRegistry) -> list[str]:
    return [
        line
        for line in generate_latest(registry).decode().splitlines()
        if not line.startswith("#") and "_created" not in line
    ]


def test_folded_observations_are_the_samples_of_the_same_values_observed_one_by_one() -> None:
    folded_registry, direct_registry = CollectorRegistry(), CollectorRegistry()
    folded = Histogram("duration_seconds", "d", ["route"], buckets=BUCKETS, registry=folded_registry)
    direct = Histogram("duration_seconds", "d", ["route"], buckets=BUCKETS, registry=direct_registry)
    counted = Counter("answers_total", "a", ["route"], registry=folded_registry)
    counted_directly = Counter("answers_total", "a", ["route"], registry=direct_registry)
    tally = Tally()
    values = [random.Random(7).choice(BUCKETS) for _ in range(50)]  # values on the bounds too
    values += [random.Random(seed).uniform(0, 12) for seed in range(200)]
    for number, value in enumerate(values):
        route = "a" if number % 3 else "b"
        tally.observe(folded.labels(route), value)
        tally.count(counted.labels(route))
        direct.labels(route).observe(value)
        counted_directly.labels(route).inc()
    tally.fold()

    assert samples(folded_registry) == samples(direct_registry)


async def test_counts_reach_their_metric_at_the_end_of_the_loop_turn_that_counted_them() -> None:
    registry = CollectorRegistry()
    counter = Counter("turn_total", "t", registry=registry)
    tally = Tally()
    for _ in range(3):
        tally.count(counter)
    await asyncio.sleep(0)
    await asyncio.sleep(0)

    assert registry.get_sample_value("turn_total") == 3


async def test_an_exposition_shows_the_counts_its_worker_has_not_folded_yet() -> None:
    from marketplace.telemetry.tally import TALLY

    counter = Counter("marketplace_test_tally_total", "t")
    try:
        TALLY.count(counter)
        TALLY.count(counter)
        # No turn of the loop in between: the exposition folds them itself.
        assert "marketplace_test_tally_total 2.0" in exposition().decode()
    finally:
        REGISTRY.unregister(counter)
