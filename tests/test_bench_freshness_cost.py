"""The freshness-cost run (`bench/freshness_cost.py`): what it reads from the service's metrics,
the hit ratios it expects for each maximum age, the order it runs them in, its table, and the
paced request script. Only the last test needs wrk and a server (the ceiling)."""

from __future__ import annotations

import math
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from bench.freshness_cost import (
    Lookups,
    Measured,
    Report,
    alternating,
    expected_hit_ratios,
    hit_ratio_from_cold,
    render,
    shares,
    steady_hit_ratio,
)
from bench.harness import metric_deltas
from bench.servers import free_port, parse_metrics
from bench.wrk_run import WrkResult, run_wrk, wrk_available

REPOSITORY = Path(__file__).resolve().parent.parent

BEFORE = """
marketplace_worker_cache_lookups_total{outcome="hit"} 100.0
marketplace_worker_cache_lookups_total{outcome="miss"} 50.0
marketplace_http_requests_total{method="GET",route="resource_version",status="200"} 150.0
marketplace_http_requests_total{method="GET",route="metrics",status="200"} 3.0
"""
AFTER = """
marketplace_worker_cache_lookups_total{outcome="hit"} 400.0
marketplace_worker_cache_lookups_total{outcome="miss"} 450.0
marketplace_worker_cache_lookups_total{outcome="expired"} 200.0
marketplace_worker_cache_lookups_total{outcome="off"} 0.0
marketplace_http_requests_total{method="GET",route="resource_version",status="200"} 1148.0
marketplace_http_requests_total{method="GET",route="resource_version",status="429"} 2.0
marketplace_http_requests_total{method="GET",route="metrics",status="200"} 4.0
"""


def _wrk(requests: int, seconds: float = 60.0, socket_errors: int = 0) -> WrkResult:
    return WrkResult(requests, seconds, 0, socket_errors, 2.0, 1.5, 3.0, 4.0, 8.0, 20.0)


def test_the_hit_ratio_counts_expired_entries_as_lookups_that_missed() -> None:
    statuses, outcomes = metric_deltas(parse_metrics(BEFORE), parse_metrics(AFTER))
    lookups = Lookups.from_outcomes(outcomes)
    assert lookups == Lookups(hit=300, miss=400, expired=200, off=0)
    assert lookups.hit_ratio == pytest.approx(300 / 900)
    assert lookups.expired_share == pytest.approx(200 / 900)
    # The scrapes of /metrics are not the load's requests.
    assert statuses == {"200": 998, "429": 2}
    assert math.isnan(Lookups().hit_ratio)


def test_the_steady_hit_ratio_is_the_kept_requests_over_a_keeping_cycle() -> None:
    # One worker, a key every 100 s, kept 60 s: 0.6 hits per miss.
    assert steady_hit_ratio(0.01, 60) == pytest.approx(0.6 / 1.6)
    assert steady_hit_ratio(0.01, 1e9) == 1.0
    assert steady_hit_ratio(0.01, 1) < steady_hit_ratio(0.01, 10) < steady_hit_ratio(0.01, 60)


def _simulated_hit_ratio(
    warmup_rate: float, key_rate: float, max_age: float, start: float, end: float, keys: int
) -> float:
    """The worker cache's rule run on Poisson requests of `keys` keys from an empty cache, at
    `warmup_rate` until `start` and `key_rate` after."""
    rng = random.Random(7)
    hits = lookups = 0
    for _ in range(keys):
        moment, kept_at = 0.0, None
        while True:
            if moment < start:
                moment += rng.expovariate(warmup_rate)
                if moment >= start:
                    # Poisson arrivals forget the past: the window's own start over again.
                    moment = start + rng.expovariate(key_rate)
            else:
                moment += rng.expovariate(key_rate)
            if moment > end:
                break
            hit = kept_at is not None and moment - kept_at <= max_age
            if not hit:
                kept_at = moment
            if moment >= start:
                lookups += 1
                hits += hit
    return hits / lookups


@pytest.mark.parametrize("max_age", [1.0, 10.0, 30.0, 60.0, 1e9])
@pytest.mark.parametrize("warmup_rate", [0.02, 0.04, 0.001])
def test_the_hit_ratio_expected_from_cold_is_what_the_cache_rule_gives(
    max_age: float, warmup_rate: float
) -> None:
    expected = hit_ratio_from_cold(0.02, max_age, 60, 120, warmup_rate=warmup_rate)
    simulated = _simulated_hit_ratio(warmup_rate, 0.02, max_age, 60, 120, keys=10_000)
    assert expected == pytest.approx(simulated, abs=0.015)


def test_the_hit_ratio_from_cold_climbs_to_the_steady_state() -> None:
    early = hit_ratio_from_cold(0.02, 30, 10, 70)
    late = hit_ratio_from_cold(0.02, 30, 2000, 2100)
    assert early < late == pytest.approx(steady_hit_ratio(0.02, 30), abs=0.01)
    with pytest.raises(ValueError):
        hit_ratio_from_cold(0.02, 30, 70, 10)


def test_the_workers_shares_come_from_their_cpu_time() -> None:
    assert shares({11: 1.0, 12: 2.0}, {11: 2.0, 12: 5.0}) == pytest.approx([0.25, 0.75])
    assert shares({11: 1.0, 12: 2.0}, {11: 1.0, 12: 2.0}) == [0.5, 0.5]
    # A worker gone during the window counts as having done nothing more.
    assert shares({11: 1.0, 12: 2.0}, {12: 4.0}) == pytest.approx([0.0, 1.0])


def test_a_worker_that_had_no_share_of_the_warm_up_starts_the_window_cold() -> None:
    kept_its_share, _ = expected_hit_ratios([0.5, 0.5], 600, 18_000, 1e9, (60, 120), [0.5, 0.5])
    moved, _ = expected_hit_ratios([0.5, 0.5], 600, 18_000, 1e9, (60, 120), [1.0, 0.0])
    assert moved < kept_its_share
    assert moved == pytest.approx(
        0.5 * hit_ratio_from_cold(300 / 18_000, 1e9, 60, 120, warmup_rate=600 / 18_000)
        + 0.5 * hit_ratio_from_cold(300 / 18_000, 1e9, 60, 120, warmup_rate=0.0)
    )


def test_an_uneven_split_over_the_workers_raises_the_expected_hit_ratio() -> None:
    even, even_steady = expected_hit_ratios([0.5, 0.5], 600, 18_000, 30, (10, 70))
    alone, alone_steady = expected_hit_ratios([1.0, 0.0], 600, 18_000, 30, (10, 70))
    # One worker alone sees each key twice as often.
    assert alone == pytest.approx(hit_ratio_from_cold(600 / 18_000, 30, 10, 70))
    assert even == pytest.approx(hit_ratio_from_cold(300 / 18_000, 30, 10, 70))
    assert even < alone
    assert even_steady == pytest.approx(steady_hit_ratio(300 / 18_000, 30))
    assert even_steady < alone_steady


def test_the_ages_run_from_both_ends_of_the_list_in_turn() -> None:
    assert alternating([1e9, 60, 30, 10, 1]) == [1e9, 1, 60, 10, 30]
    assert alternating([60, 1]) == [60, 1]
    assert alternating([]) == []


def test_the_table_gives_each_route_its_ratios_and_the_cpu_relative_to_no_bound() -> None:
    report = Report(resources=20_000, keys=18_000, rate=600, workers=2, seconds=60, warmup=10, connections=16)
    for max_age, hit, cpu in ((1.0, 10, 36.0), (1e9, 600, 24.0), (60.0, 300, 30.0)):
        report.measured.append(
            Measured(
                max_age=max_age,
                route="version",
                result=_wrk(36_000),
                cpu_seconds=cpu,
                lookups=Lookups(hit=hit, miss=1000 - hit),
                statuses={"200": 36_000},
                window=(10.0, 70.0),
                worker_shares=[0.5, 0.5],
                warmup_shares=[0.6, 0.4],
                predicted=0.5,
                steady=0.6,
            )
        )
    table = render(report)
    assert "600 requests/s offered" in table
    assert "`card`" not in table
    rows = [line for line in table.splitlines() if line.startswith("| ") and "max age" not in line]
    assert rows == [
        "| none | 0.600 | 0.000 | 0.500 | 0.600 | 1.000 | 600 | 667 | 1.00 | 0.60/0.40 → 0.50/0.50 | 0 |",
        "| 60 s | 0.300 | 0.000 | 0.500 | 0.600 | 0.500 | 600 | 833 | 1.25 | 0.60/0.40 → 0.50/0.50 | 0 |",
        "| 1 s | 0.010 | 0.000 | 0.500 | 0.600 | 0.016 | 600 | 1,000 | 1.50 | 0.60/0.40 → 0.50/0.50 | 0 |",
    ]


@pytest.mark.skipif(not wrk_available(), reason="wrk is not installed (apt-get install wrk)")
def test_the_paced_script_offers_no_more_than_its_rate(tmp_path: Path) -> None:
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "reference_app:app",
            "--app-dir",
            str(REPOSITORY / "bench"),
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        requests = tmp_path / "requests.txt"
        requests.write_text("GET /api/v1/resource/1\nGET /api/v1/resource/version/2\n")
        result = run_wrk(port, requests, seconds=2, connections=4, rate=50)
    finally:
        server.terminate()
        server.wait(timeout=10)
    # 50 a second for 2 s (the ceiling answers thousands a second without the schedule).
    assert 0 < result.requests <= 110
    assert result.errors == 0
