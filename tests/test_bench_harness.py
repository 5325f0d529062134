"""The load-run harness (`bench/`): the catalogue it fills, the requests it sends, its report.

The fill is checked on both profiles and every request it would send is answered through the app
in process; wrk itself is needed only by the last test (CI also runs `bench/run.py --smoke`).
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.catalogue import Catalogue, Size, resource_name, tagline
from bench.fill import database_url, fill_postgresql, fill_sqlite, postgresql_counts
from bench.harness import Options, ProfileRun, RouteResult, Run
from bench.hotspots import outside, summarise
from bench.report import render
from bench.request_mix import (
    ROUTES,
    Population,
    postgresql_population,
    sqlite_population,
    zipf_sample,
)
from bench.servers import free_port
from bench.wrk_run import WrkResult, parse_summary, run_wrk, wrk_available
from marketplace.app import build_app
from marketplace.config import Settings
from marketplace.services import build_services
from tests.profiles import POSTGRES_ADMIN_URL, postgres_admin, require_postgresql, unique_name

REPOSITORY = Path(__file__).resolve().parent.parent
SMALL = 50


def _quiet(_message: str) -> None:
    pass


def test_names_and_taglines_are_the_same_for_the_same_seed() -> None:
    first, second = random.Random(7), random.Random(7)
    names = [resource_name(first) for _ in range(50)]
    assert names == [resource_name(second) for _ in range(50)]
    for _ in range(200):
        words = tagline(first).split()
        assert 6 <= len(words) <= 12


def test_the_catalogue_keeps_its_proportions_and_references() -> None:
    catalogue = Catalogue(Size(SMALL))
    resources = list(catalogue.rows("resources"))
    versions = list(catalogue.rows("versions"))
    accesses = list(catalogue.rows("accesses"))
    assert len(resources) == SMALL
    assert len(list(catalogue.rows("users"))) == Size(SMALL).users
    assert len(accesses) == Size(SMALL).accesses
    assert abs(len(versions) - 5 * SMALL) < 2 * SMALL
    owner = {row[0]: row[1] for row in versions}
    for row in resources:
        current = row[14]
        assert current is None or owner[current] == row[0]
    pairs = [(row[1], row[2]) for row in accesses]
    assert len(pairs) == len(set(pairs))


def test_popular_items_are_drawn_more_often() -> None:
    drawn = zipf_sample(list(range(100)), random.Random(1), 10_000, 1.0)
    assert drawn.count(0) > drawn.count(50) * 10


async def _answers(database: str, population: Population) -> dict[str, set[int]]:
    """The statuses the app gives to every request line of every route."""
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        database_url=database,
        redis_url=None,
        app_key="bench",
        base_url="http://marketplace.test",
    )
    services = build_services(settings)
    statuses: dict[str, set[int]] = {}
    try:
        transport = httpx.ASGITransport(app=build_app(services=services))
        async with httpx.AsyncClient(transport=transport, base_url="http://marketplace.test") as client:
            for name, route in ROUTES.items():
                lines = route.lines(population, random.Random(name), 40)
                for number, line in enumerate(lines):
                    method, path = line.split(" ", 1)
                    response = await client.request(
                        method, path, headers={"X-Forwarded-For": f"10.1.{number // 250}.{number % 250}"}
                    )
                    statuses.setdefault(name, set()).add(response.status_code)
    finally:
        await services.close()
    return statuses


async def test_sqlite_fill_answers_every_route(tmp_path: Path) -> None:
    path = tmp_path / "bench.db"
    filled = fill_sqlite(path, Catalogue(Size(SMALL)), REPOSITORY, refill=False, progress=_quiet)
    assert not filled.kept
    assert filled.counts["resources"] == SMALL
    assert filled.counts["accesses"] == Size(SMALL).accesses
    with closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    again = fill_sqlite(path, Catalogue(Size(SMALL)), REPOSITORY, refill=False, progress=_quiet)
    assert again.kept and again.counts == filled.counts

    population = sqlite_population(path)
    assert population.visible_ids and population.chat_ids and population.words
    statuses = await _answers(f"sqlite:///{path}", population)
    assert statuses == {name: {200} for name in ROUTES}


@pytest.fixture
def postgresql_database() -> Iterator[str]:
    require_postgresql()
    name = unique_name("mp_bench")
    yield name
    postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_postgresql_fill_answers_every_route(postgresql_database: str, tmp_path: Path) -> None:
    filled = fill_postgresql(
        POSTGRES_ADMIN_URL,
        postgresql_database,
        Catalogue(Size(SMALL)),
        REPOSITORY,
        tmp_path,
        refill=False,
        progress=_quiet,
    )
    url = database_url(POSTGRES_ADMIN_URL, postgresql_database)
    assert filled.counts["resources"] == SMALL
    assert filled.counts == asyncio.run(postgresql_counts(url))

    population = postgresql_population(url)
    statuses = asyncio.run(_answers(url, population))
    assert statuses == {name: {200} for name in ROUTES}


# Resources whose kept counts (migration 0006) differ from their rows'.
KEPT_COUNTS_DIFFERING = """
SELECT COUNT(*) FROM resources r LEFT JOIN resource_counts c ON c.resource_id = r.id
WHERE COALESCE(c.purchases, 0) <> (
    SELECT COUNT(*) FROM accesses a WHERE a.resource_id = r.id AND a.source = 'purchase' AND NOT a.revoked
) OR COALESCE(c.rating_count, 0) <> (SELECT COUNT(*) FROM reviews v WHERE v.resource_id = r.id)
OR COALESCE(c.rating_sum, 0) <> (SELECT COALESCE(SUM(rating), 0) FROM reviews v WHERE v.resource_id = r.id)
"""
KEPT_COUNTS = "SELECT COALESCE(SUM(purchases), 0) + COALESCE(SUM(rating_count), 0) FROM resource_counts"


def test_a_filled_catalogue_keeps_the_counts_of_its_accesses_and_reviews(
    postgresql_database: str, tmp_path: Path
) -> None:
    import asyncpg  # type: ignore[import-untyped]

    path = tmp_path / "bench.db"
    fill_sqlite(path, Catalogue(Size(SMALL)), REPOSITORY, refill=False, progress=_quiet)
    with closing(sqlite3.connect(path)) as connection:
        assert connection.execute(KEPT_COUNTS_DIFFERING).fetchone() == (0,)
        assert connection.execute(KEPT_COUNTS).fetchone()[0] > 0
    fill_postgresql(
        POSTGRES_ADMIN_URL,
        postgresql_database,
        Catalogue(Size(SMALL)),
        REPOSITORY,
        tmp_path,
        refill=False,
        progress=_quiet,
    )

    async def counts() -> tuple[int, int]:
        connection = await asyncpg.connect(database_url(POSTGRES_ADMIN_URL, postgresql_database))
        try:
            return await connection.fetchval(KEPT_COUNTS_DIFFERING), await connection.fetchval(KEPT_COUNTS)
        finally:
            await connection.close()

    differing, kept = asyncio.run(counts())
    assert differing == 0 and kept > 0


def _wrk(requests: int = 1000, status_errors: int = 0, p99: float = 5.0) -> WrkResult:
    return WrkResult(requests, 1.0, status_errors, 0, 1.0, 1.0, 2.0, 3.0, p99, 9.0)


def report_options(tmp_path: Path, **chosen: Any) -> Options:
    """The options of a run on the 200k catalogue, as a report shows them; `chosen` overrides."""
    values: dict[str, Any] = {
        "resources": 200_000,
        "seconds": 1,
        "warmup": 0,
        "connections": 32,
        "threads": 1,
        "profile_routes": (),
        "sizes": (),
        "matrix": True,
        "source": REPOSITORY,
        "workdir": tmp_path,
        "postgres_url": "",
        "redis_url": "",
        "refill": False,
        "seed": 1,
        "request_lines": 100,
        "env": {},
        "command_line": "python bench/run.py",
    }
    values.update(chosen)
    return Options(**values)


def test_the_report_states_ratios_targets_and_statuses(tmp_path: Path) -> None:
    from bench.fill import Filled

    options = report_options(
        tmp_path, profiles=("sqlite",), rounds=2, workers=(1, 2), routes=("version", "licence")
    )
    from datetime import UTC, datetime

    run = Run(options, datetime.now(UTC), {"Machine": "test"})
    run.profiles.append(ProfileRun("sqlite", Filled({"resources": 200_000}, 3.0, kept=False)))
    for workers in (1, 2):
        version = RouteResult("sqlite", workers, "version")
        version.ceiling = [_wrk(10_000), _wrk(12_000)]
        version.service = [_wrk(7_000, p99=9.0), _wrk(6_000, p99=20.0)]
        version.service_cpu_us = [100.0, 120.0]
        version.ceiling_cpu_us = [50.0, 60.0]
        version.worker_rss_mib = [80.0] * workers
        version.statuses = {"200": 13_000}
        version.cache = {"hit": 9.0, "miss": 1.0}
        run.routes.append(version)
        licence = RouteResult("sqlite", workers, "licence")
        licence.ceiling = [_wrk(10_000), _wrk(10_000)]
        licence.service = [_wrk(5_000, status_errors=3), _wrk(5_000)]
        licence.statuses = {"200": 9_997, "429": 3}
        run.routes.append(licence)

    text = render(run)
    # Median of the pairs 0.7 and 0.5.
    assert "| `version` | 1 | 11,000 | 6,500 | **0.600** |" in text
    assert (
        "| `version` ≥ 0.6 of the ceiling | SQLite, in-process store, 1 worker(s) | 0.600 of the ceiling | yes |"
        in text
    )
    assert "`version` p99 ≤ 15 ms at 32 connections" in text
    assert "90%" in text
    assert "200 ×9,997, 429 ×3" in text
    assert "## 1 vs 2 workers" in text
    assert "## External figures" in text


def test_hotspots_are_summarised_by_part_and_function() -> None:
    raw = "\n".join(
        [
            'process 1:"python";run (asyncio/runners.py:118);handle (marketplace/http/limits.py:40) 30',
            'process 1:"python";run (asyncio/runners.py:118);handle (marketplace/http/limits.py:41) 5',
            'process 1:"python";handle (marketplace/http/limits.py:40);execute (sqlalchemy/engine.py:9) 10',
            'process 1:"python";run (asyncio/runners.py:118);parse (uvicorn/protocols/http.py:9) 15',
        ]
    )
    found = summarise(raw)
    assert found.samples == 60
    assert found.parts[0] == ("marketplace http layers", 35)
    assert found.own[0] == ("handle (marketplace/http/limits.py)", 35)
    assert found.inner == [("handle (marketplace/http/limits.py)", 45), (outside("uvicorn"), 15)]


def test_the_wrk_summary_line_is_read() -> None:
    output = (
        "Running 1s test\n"
        'BENCH {"requests": 2500, "duration_us": 1000000, "connect": 0, "read": 1, "write": 0, '
        '"status": 4, "timeout": 2, "mean_us": 1500.0, "p50_us": 1000, "p90_us": 2000, "p95_us": 2500, '
        '"p99_us": 4000, "max_us": 9000}\n'
    )
    result = parse_summary(output)
    assert result.rate == 2500
    assert (result.status_errors, result.socket_errors, result.errors) == (4, 3, 7)
    assert (result.p50_ms, result.p95_ms, result.p99_ms) == (1.0, 2.5, 4.0)


@pytest.mark.skipif(not wrk_available(), reason="wrk is not installed (apt-get install wrk)")
def test_wrk_runs_the_request_script_against_the_ceiling(tmp_path: Path) -> None:
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
        requests.write_text("GET /api/v1/resource/1\nPOST /api/v1/licence/KEY\n")
        result = run_wrk(port, requests, seconds=1, connections=4)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert result.requests > 0
    assert result.errors == 0


def test_the_report_estimates_the_hosts_for_100k_version_checks_from_measured_costs(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from bench.fill import Filled

    options = report_options(tmp_path, profiles=("postgresql",), rounds=1, workers=(2,), routes=("version",))
    run = Run(options, datetime.now(UTC), {"Machine": "test"})
    run.profiles.append(ProfileRun("postgresql", Filled({"resources": 200_000}, 3.0, kept=False)))
    version = RouteResult("postgresql", 2, "version")
    version.ceiling = [_wrk(10_000)]
    version.service = [_wrk(7_000)]
    version.service_cpu_us = [140.0]
    version.store_cpu_us = [20.0]
    version.cache = {"hit": 1.0, "miss": 1.0}
    run.routes.append(version)

    text = render(run)
    # 100,000 x 140 us = 14 cores; 8-core hosts 70% busy take 5.6 each.
    assert "## Hosts for 100,000 version checks per second" in text
    assert "**3 hosts of 8 cores**" in text
    assert "2.0 cores of PostgreSQL and Redis together; 50,000 reads per second reach PostgreSQL" in text


def _sqlite_run(tmp_path: Path, **chosen: Any) -> Run:
    from datetime import UTC, datetime

    from bench.fill import Filled

    values: dict[str, Any] = {"profiles": ("sqlite",), "rounds": 1, "workers": (1,), "routes": ("version",)}
    values.update(chosen)
    run = Run(report_options(tmp_path, **values), datetime.now(UTC), {"Machine": "test"})
    run.profiles.append(ProfileRun("sqlite", Filled({"resources": 200_000}, 3.0, kept=False)))
    return run


def _version(
    service_rate: int, *, access_log: bool = True, rss: float = 80.0, cpu: float = 100.0
) -> RouteResult:
    result = RouteResult("sqlite", 1, "version", access_log=access_log)
    result.ceiling = [_wrk(10_000)]
    result.service = [_wrk(service_rate, p99=9.0)]
    result.ceiling_cpu_us = [50.0]
    result.service_cpu_us = [cpu]
    result.worker_rss_mib = [rss]
    result.access_lines = service_rate if access_log else 0
    return result


def test_a_missed_target_says_by_how_much_and_why_from_the_hand_kept_reasons(tmp_path: Path) -> None:
    from bench.misses import MISSES

    run = _sqlite_run(tmp_path)
    run.routes.append(_version(3_790))

    text = render(run)
    row = next(line for line in text.splitlines() if line.startswith("| `version` ≥ 0.6 of the ceiling"))
    assert "| 0.379 of the ceiling, 0.221 short | **no** |" in row
    assert MISSES["version-ratio/sqlite"] in row


def test_the_headline_tables_are_the_default_settings_and_the_access_log_is_compared_beside(
    tmp_path: Path,
) -> None:
    run = _sqlite_run(tmp_path)
    run.routes += [_version(6_000, cpu=150.0), _version(8_000, access_log=False, cpu=100.0)]

    text = render(run)
    headline = text.split("## SQLite, in-process store", 1)[1].split("##", 1)[0]
    assert "| `version` | 1 | 10,000 | 6,000 | **0.600** |" in headline
    assert "8,000" not in headline
    compared = text.split("## The access log", 1)[1]
    assert "| `version` | 1 | 6,000 | 8,000 | -25% | 0.600 | 0.800 |" in compared
    assert "| 150 | 100 | +50% | 6,000 |" in compared


def test_the_worker_memory_target_states_the_excess_at_200k_resources(tmp_path: Path) -> None:
    run = _sqlite_run(tmp_path)
    run.routes.append(_version(7_000, rss=115.0))

    text = render(run)
    assert "| ≤ 100 MiB resident per worker, 200k resources |" in text
    assert "| 115 MiB, 15 MiB over | **no** |" in text


def test_the_laravel_target_says_it_is_measured_separately_and_where_its_figure_is(tmp_path: Path) -> None:
    run = _sqlite_run(tmp_path)
    run.routes.append(_version(7_000))

    row = next(line for line in render(run).splitlines() if "Laravel" in line)
    assert "measured separately" in row
    assert "bench/HISTORY.md" in row


def test_the_plot_is_drawn_beside_the_report_and_linked_from_it(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from bench.results_plot import plot, plot_name

    run = _sqlite_run(tmp_path, workers=(1, 2), routes=("version", "licence"))
    for workers in (1, 2):
        for route in ("version", "licence"):
            result = _version(7_000)
            result.workers, result.route = workers, route
            run.routes.append(result)
    drawn = plot_name(tmp_path / "RESULTS.md")

    assert drawn == tmp_path / "results.png"
    assert plot(run, drawn)
    assert drawn.read_bytes().startswith(b"\x89PNG")
    assert "](results.png)" in render(run, drawn.name)


def test_the_service_is_measured_with_its_default_settings_and_its_log_drained(tmp_path: Path) -> None:
    from bench.harness import service_server

    options = report_options(tmp_path, profiles=("sqlite",), rounds=1, workers=(1,), routes=("version",))
    logged = service_server(options, "sqlite", "sqlite:///x.db", 1, tmp_path / "log")
    unlogged = service_server(options, "sqlite", "sqlite:///x.db", 1, tmp_path / "log", access_log=False)

    assert "--no-access-log" not in logged.command
    assert unlogged.command[-1] == "--no-access-log"
    assert not {"MARKETPLACE_LOG_LEVEL", "MARKETPLACE_LOG_FORMAT", "MARKETPLACE_ACCESS_LOG"} & set(logged.env)
    assert logged.drained and unlogged.drained


def test_the_log_drain_counts_access_lines_and_keeps_the_others(tmp_path: Path) -> None:
    import os

    from bench.servers import LogDrain

    reading, writing = os.pipe()
    log = tmp_path / "server.log"
    drain = LogDrain(reading, log)
    access = b'{"time": "t", "level": "info", "logger": "marketplace.access", "message": "GET /"}\n'
    other = b'{"time": "t", "level": "info", "logger": "uvicorn.error", "message": "Started"}\n'
    # Lines cut across writes, as a pipe may hand them over.
    data = other + access * 3 + other
    os.write(writing, data[:50])
    os.write(writing, data[50:])
    os.close(writing)
    drain.join()

    assert drain.access_lines == 3
    assert drain.access_bytes == 3 * len(access)
    assert log.read_bytes() == other * 2
