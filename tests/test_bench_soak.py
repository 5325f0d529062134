"""The soak run's pieces that can be checked quickly (`bench/soak.py` itself runs for minutes): the
capacity search with a fake measurement, the paced load against a small in-process server, the
report and the plot from saved samples, and the servers of a run's own, restarted.
"""

from __future__ import annotations

import asyncio
import copy
import tempfile
from pathlib import Path
from typing import Any

import pytest

from bench.capacity import Limits, Probe, find_capacity, judge
from bench.instances import PostgresInstance, RedisInstance, postgres_bin, redis_server
from bench.paced_load import Interval, PacedLoad, percentile
from bench.soak import restart_moment
from bench.soak_report import minutes, plot, render, verdicts
from tests.profiles import services_required


def _probe_holding_up_to(capacity: float) -> tuple[list[float], Any]:
    tried: list[float] = []

    def probe(rate: float) -> Probe:
        tried.append(rate)
        holds = rate <= capacity
        return Probe(rate, holds, "held" if holds else "too fast", (1.0,), (5.0,), 0, 10, 10)

    return tried, probe


def test_capacity_is_wrks_rate_when_that_rate_holds_paced() -> None:
    tried, probe = _probe_holding_up_to(1000)
    capacity, probes = find_capacity(800, probe)
    assert capacity == 800
    assert tried == [800]
    assert [found.holds for found in probes] == [True]


def test_capacity_search_halves_until_a_rate_holds_then_narrows_the_gap() -> None:
    tried, probe = _probe_holding_up_to(300)
    capacity, probes = find_capacity(1000, probe, refinements=2)
    assert tried == [1000, 500, 250, 375, 312.5]
    assert capacity == 250
    assert len(probes) == 5


def test_capacity_search_keeps_a_refined_rate_that_holds() -> None:
    tried, probe = _probe_holding_up_to(400)
    capacity, _probes = find_capacity(1000, probe, refinements=2)
    assert tried == [1000, 500, 250, 375, 437.5]
    assert capacity == 375


def test_capacity_is_zero_when_no_rate_holds() -> None:
    tried, probe = _probe_holding_up_to(0)
    capacity, _probes = find_capacity(100, probe, floor=10)
    assert capacity == 0
    assert tried == [100, 50, 25, 12.5]


def _third(p50: float, p99: float, *, due: int = 100, answered: int = 100, status: str = "200") -> Interval:
    return Interval(
        0.0, 10.0, due=due, answered=answered, statuses={status: answered}, p50_ms=p50, p99_ms=p99
    )


def test_a_rate_holds_only_without_failures_backlog_or_growing_latency() -> None:
    steady = [_third(5, 40), _third(8, 90), _third(6, 45)]
    assert judge(100, steady).holds
    failed = [_third(5, 40), _third(5, 40, status="500"), _third(5, 40)]
    assert judge(100, failed).reason == "100 failed requests"
    behind = [_third(5, 40), _third(5, 40, answered=50), _third(5, 40)]
    assert "answered" in judge(100, behind).reason
    growing = [_third(5, 40), _third(30, 200), _third(60, 300)]
    assert judge(100, growing).reason == "p50 grew from 5.0 to 60.0 ms"
    slow = [_third(5, 40), _third(5, 40), _third(5, 900)]
    assert not judge(100, slow, Limits(p99_bound_ms=500)).holds


def test_restarts_fall_in_the_middle_of_a_minute_at_a_third_and_two_thirds() -> None:
    assert (restart_moment(30, 1), restart_moment(30, 2)) == (630, 1230)
    assert (restart_moment(3, 1), restart_moment(3, 2)) == (90, 150)
    assert (restart_moment(1, 1), restart_moment(1, 2)) == (20, 40)


def test_percentiles_are_nearest_rank() -> None:
    values = [float(value) for value in range(1, 101)]
    assert percentile(values, 0.5) == 50
    assert percentile(values, 0.99) == 99
    assert percentile([7.0], 0.99) == 7


async def test_the_paced_load_sends_every_request_due_and_counts_statuses_and_cut_connections() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            target = head.split(b" ")[1]
            if target == b"/cut":
                break
            status = b"500 Internal Server Error" if target == b"/fail" else b"200 OK"
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reported: list[Interval] = []
    lines = [("GET", "/ok"), ("POST", "/ok"), ("GET", "/fail"), ("GET", "/cut")]
    load = PacedLoad(
        port, lines, rate=200, seconds=1, interval=60, connections=8, seed=3, report=reported.append
    )
    async with server:
        await load.run()
    assert len(reported) == 1
    interval = reported[0]
    assert interval.due == 200
    cut = interval.transport_errors
    assert interval.answered + cut == 200
    assert set(interval.statuses) == {"200", "500"}
    assert cut > 0 and set(interval.transport_kinds) == {"IncompleteReadError"}
    assert interval.errors == interval.statuses["500"] + cut
    assert sum(interval.error_seconds.values()) == interval.errors
    assert interval.p50_ms is not None and interval.p99_ms is not None


START = 1_800_000_000.0


def _interval(minute: int, *, errors_at: dict[int, int] | None = None, p50: float = 4.0) -> dict[str, Any]:
    failed = sum((errors_at or {}).values())
    return {
        "started": START + 60 * minute,
        "seconds": 60.0,
        "due": 6000,
        "answered": 6000 - failed,
        "statuses": {"200": 6000 - failed},
        "transport_errors": failed,
        "transport_kinds": {"TimeoutError": failed} if failed else {},
        "p50_ms": p50,
        "p99_ms": 10 * p50,
        "max_ms": 20 * p50,
        "error_seconds": {str(int(START) + second): count for second, count in (errors_at or {}).items()},
    }


def _write(at: float, *, visible_after: float | None = 0.01, at_end: bool = True) -> dict[str, Any]:
    return {
        "kind": "release",
        "target": {"resource": 7, "version": "soak-1"},
        "at": START + at,
        "ok": True,
        "attempts": 1,
        "command_seconds": 1.2,
        "visible_after_seconds": visible_after,
        "visible_at_end": at_end,
        "error": "",
    }


def soak_samples(count: int = 6) -> dict[str, Any]:
    """Saved samples of a run of `count` minutes: flat memory and latency, failures only while
    PostgreSQL restarts (minute 3), every write shown."""
    restart = START + 150
    return {
        "setup": {
            "command": "python bench/soak.py --minutes 6",
            "minutes": count,
            "workers": 2,
            "resources": 1000,
            "counts": {"resources": 1000},
            "environment": {"Machine": "test"},
            "started": "2027-01-15 08:00 UTC",
            "mix": {"version": 100},
            "write_every_seconds": 20,
            "grace_seconds": 10,
            "freshness_seconds": 2,
        },
        "capacity": {
            "wrk_rate": 1000.0,
            "wrk_p99_ms": 50.0,
            "wrk_connections": 32,
            "probe_seconds": 30,
            "probes": [
                {
                    "rate": 1000.0,
                    "holds": False,
                    "reason": "p50 grew from 5.0 to 90.0 ms",
                    "p50_ms": [5.0, 40.0, 90.0],
                    "p99_ms": [50.0, 300.0, 450.0],
                    "errors": 0,
                    "due": 30000,
                    "answered": 29000,
                },
                {
                    "rate": 500.0,
                    "holds": True,
                    "reason": "held",
                    "p50_ms": [3.0, 3.5, 3.0],
                    "p99_ms": [20.0, 30.0, 21.0],
                    "errors": 0,
                    "due": 15000,
                    "answered": 15000,
                },
            ],
            "capacity": 500.0,
        },
        "load": {"rate": 350.0, "fraction": 0.7, "started": START},
        "intervals": [
            _interval(minute, errors_at={151: 12} if minute == 2 else None) for minute in range(count)
        ],
        "samples": [
            {
                "at": START + 60 * minute,
                "worker_pids": [11, 12],
                "worker_rss_mib": [100.0, 98.0],
                "worker_sockets": [9, 9],
                "supervisor_rss_mib": 27.0,
            }
            for minute in range(count + 1)
        ],
        "restarts": [{"what": "postgresql", "began": restart, "ended": restart + 0.5}],
        "writes": [_write(20 * number) for number in range(1, 3 * count)],
        "probe_writes": [],
    }


def _answers(data: dict[str, Any]) -> dict[str, bool]:
    return {verdict.question: verdict.holds for verdict in verdicts(data)}


def test_a_steady_run_passes_every_verdict_and_notes_its_restart_minute() -> None:
    data = soak_samples()
    assert all(_answers(data).values()), verdicts(data)
    rows = minutes(data)
    assert [row.restarts for row in rows] == [[], [], ["postgresql"], [], [], []]
    report = render(data)
    assert "- **Memory flat?** yes" in report
    assert "- **Errors only inside restart windows?** yes: 12 failed requests inside" in report
    assert "Capacity: **500 req/s**; the load: **350 req/s**" in report
    assert "| 3 | 5,988 | 12 | 4.0 | 40.0 | 100 / 98 | 27 | 9 / 9 | postgresql |" in report


def test_growing_memory_is_not_flat() -> None:
    data = soak_samples()
    for minute, sample in enumerate(data["samples"]):
        sample["worker_rss_mib"] = [100.0 + 8 * minute, 98.0]
    assert _answers(data)["Memory flat?"] is False
    data = soak_samples()
    data["samples"][-1]["worker_pids"] = [11, 13]
    assert _answers(data)["Memory flat?"] is False


def test_growing_latency_is_not_flat() -> None:
    data = soak_samples()
    for minute, interval in enumerate(data["intervals"]):
        interval["p50_ms"] = 4.0 + 5 * minute
    assert _answers(data)["Latency flat?"] is False


def test_failures_outside_a_restart_window_are_reported_with_their_moment() -> None:
    data = soak_samples()
    data["intervals"][5] = _interval(5, errors_at={320: 3})
    assert _answers(data)["Errors only inside restart windows?"] is False
    assert "3 outside (at 320 s)" in render(data)


def test_a_write_not_shown_in_time_or_at_the_end_fails_the_write_verdict() -> None:
    for change in ({"visible_after_seconds": 2.5}, {"visible_at_end": False}, {"ok": False, "error": "x"}):
        data = copy.deepcopy(soak_samples())
        data["writes"][3].update(change)
        assert _answers(data)["Writes all visible?"] is False, change


def test_the_plot_is_drawn_from_the_samples(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "soak.png"
    plot(soak_samples(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _servers_or_skip() -> None:
    if postgres_bin() is None or redis_server() is None:
        message = "PostgreSQL server binaries (/usr/lib/postgresql/*/bin) or redis-server not installed"
        if services_required():
            pytest.fail(message)
        pytest.skip(message)


def test_a_runs_own_servers_restart_on_their_port_and_keep_what_was_committed() -> None:
    _servers_or_skip()
    import asyncpg  # type: ignore[import-untyped]
    import redis

    async def query(url: str, statement: str) -> object:
        connection = await asyncpg.connect(url)
        try:
            return await connection.fetchval(statement)
        finally:
            await connection.close()

    with tempfile.TemporaryDirectory() as folder:
        with PostgresInstance(Path(folder)) as postgres, RedisInstance(Path(folder)) as store:
            assert postgres.port not in (5432,) and store.port != 6379
            asyncio.run(query(postgres.admin_url, "CREATE TABLE kept AS SELECT 42 AS answer"))
            postgres.restart()
            assert asyncio.run(query(postgres.admin_url, "SELECT answer FROM kept")) == 42
            store.restart()
            assert redis.Redis.from_url(store.url).ping()
        assert not (Path(folder) / "postgres" / "data" / "postmaster.pid").exists()
