"""What the version map costs a worker: the time to build it at the start and the memory it takes.

With `--rate-size N`, also the update check's rate on the catalogue of N resources: ids drawn
uniformly over the visible resources (every id about as often: the case a cache of answers
serves worst), wrk 1 thread / 32 connections, the ceiling (`reference_app.py`) and the service
with the map off and on, alternated (ceiling, off, on, ...), the ratio to the ceiling of the same
round.

For each catalogue size, a PostgreSQL catalogue of its own (`marketplace_versionmap_<resources>`,
filled by `fill.py` and kept for the next run) served by `marketplace serve --workers 1`, with the
map on and off in turn (off, on, off, on): the time until `/up` answers, the map's build time (its
log line), the worker's RSS once built (or, off, after the same wait), and a check that the
update check answers. Run:

    .venv/bin/python bench/version_map.py --sizes 200000,2000000
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

# Run as a script: the repository's root is where `bench` is imported from.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench.catalogue import Catalogue, Size  # noqa: E402
from bench.fill import database_url, fill_postgresql, marketplace_command, service_environment  # noqa: E402
from bench.servers import Server, cpu_seconds, descendants, free_port  # noqa: E402
from bench.wrk_run import run_wrk  # noqa: E402

BENCH = Path(__file__).resolve().parent

_BUILT = re.compile(
    r"current version map built: (\d+) visible resources, (\d+) distinct answers, in ([0-9.]+) s"
)


def _server(source: Path, url: str, workdir: Path, *, map_on: bool, log: Path) -> Server:
    port = free_port()
    settings = {
        "MARKETPLACE_DATABASE_URL": url,
        "MARKETPLACE_APP_KEY": "bench",
        "MARKETPLACE_STORAGE_DIR": str(workdir / "storage"),
        "MARKETPLACE_LOG_FORMAT": "text",
        "MARKETPLACE_LOG_LEVEL": "info",
        "MARKETPLACE_CURRENT_VERSION_MAP": "true" if map_on else "false",
    }
    command = [*marketplace_command(), "serve", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--workers", "1", "--no-access-log"]
    return Server("service", command, service_environment(source, settings), port, workdir, "/up", log)


def _built(log: Path, timeout: float) -> tuple[int, int, float] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _BUILT.search(log.read_text(errors="replace"))
        if found is not None:
            return int(found.group(1)), int(found.group(2)), float(found.group(3))
        time.sleep(0.2)
    return None


def measure(source: Path, url: str, workdir: Path, *, map_on: bool, run: int) -> dict[str, float]:
    log = workdir / f"version-map-{'on' if map_on else 'off'}-{run}.log"
    log.write_text("")
    server = _server(source, url, workdir, map_on=map_on, log=log)
    began = time.monotonic()
    server.start(timeout=120)
    figures: dict[str, float] = {"up_seconds": time.monotonic() - began}
    try:
        if map_on:
            built = _built(log, timeout=600)
            if built is None:
                raise SystemExit(f"the map was not built within 600 s: see {log}")
            figures["visible"], figures["answers"], figures["build_seconds"] = built
        else:
            time.sleep(5)
        answer = httpx.get(server.url("/api/v1/resource/version/1"), timeout=10)
        assert answer.status_code in (200, 404), answer.status_code
        figures["rss_mib"] = server.memory()[0][0]
    finally:
        server.stop()
    return figures


def _ceiling(source: Path, workdir: Path, log: Path) -> Server:
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "reference_app:app", "--app-dir", str(BENCH)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--no-access-log"]
    command += ["--log-level", "warning"]
    return Server("ceiling", command, service_environment(source, {}), port, workdir, "/", log)


def _uniform_requests(url: str, path: Path, count: int) -> Path:
    import asyncio
    import random

    import asyncpg

    async def visible() -> list[int]:
        connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            rows = await connection.fetch(
                "SELECT id FROM resources WHERE status IN ('published', 'unlisted') AND deleted_at IS NULL"
            )
        finally:
            await connection.close()
        return [row[0] for row in rows]

    ids = asyncio.run(visible())
    drawn = random.Random(1)
    path.write_text("".join(f"GET /api/v1/resource/version/{drawn.choice(ids)}\n" for _ in range(count)))
    return path


def _tree_cpu(server: Server) -> float:
    return cpu_seconds(server.pid) + sum(cpu_seconds(pid) for pid in descendants(server.pid))


def measure_rate(source: Path, url: str, workdir: Path, *, rounds: int, seconds: int) -> None:
    requests = _uniform_requests(url, workdir / "uniform-version-requests.txt", 50_000)
    servers = {
        "ceiling": _ceiling(source, workdir, workdir / "ceiling.log"),
        "off": _server(source, url, workdir, map_on=False, log=workdir / "rate-off.log"),
        "on": _server(source, url, workdir, map_on=True, log=workdir / "rate-on.log"),
    }
    (workdir / "rate-on.log").write_text("")
    try:
        for server in servers.values():
            server.start(timeout=120)
        if _built(workdir / "rate-on.log", timeout=600) is None:
            raise SystemExit("the map was not built within 600 s")
        for server in servers.values():
            run_wrk(server.port, requests, seconds=3, connections=32)  # warm-up
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in servers}
        for _ in range(rounds):
            for name, server in servers.items():
                cpu = _tree_cpu(server)
                result = run_wrk(server.port, requests, seconds=seconds, connections=32)
                rate = result.requests / result.seconds
                used = (_tree_cpu(server) - cpu) / max(result.requests, 1) * 1e6
                figures[name].append((rate, used))
                print(
                    f"  {name}: {rate:,.0f} req/s, {used:.0f} CPU us/request, p99 {result.p99_ms} ms",
                    flush=True,
                )
        print(
            "\n| round | ceiling req/s | off req/s (ratio) | on req/s (ratio) | off CPU us/req | on CPU us/req |"
        )
        print("|---:|---:|---:|---:|---:|---:|")
        for index in range(rounds):
            ceiling = figures["ceiling"][index][0]
            off, off_cpu = figures["off"][index]
            on, on_cpu = figures["on"][index]
            print(
                f"| {index + 1} | {ceiling:,.0f} | {off:,.0f} ({off / ceiling:.3f}) | {on:,.0f} ({on / ceiling:.3f}) "
                f"| {off_cpu:.0f} | {on_cpu:.0f} |"
            )
    finally:
        for server in servers.values():
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="200000,2000000")
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "marketplace-version-map"
    )
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--runs", type=int, default=2, help="off/on pairs per size")
    parser.add_argument("--refill", action="store_true")
    parser.add_argument("--rate-size", type=int, default=0, help="measure the rate on this catalogue")
    parser.add_argument("--rate-only", action="store_true", help="skip the start-up measurements")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=8)
    arguments = parser.parse_args()
    arguments.workdir.mkdir(parents=True, exist_ok=True)
    if arguments.rate_size:
        name = f"marketplace_versionmap_{arguments.rate_size}"
        url = database_url(arguments.postgres_url, name)
        measure_rate(
            arguments.source, url, arguments.workdir, rounds=arguments.rounds, seconds=arguments.seconds
        )
        if arguments.rate_only:
            return
    rows = []
    for size in (int(value) for value in arguments.sizes.split(",")):
        name = f"marketplace_versionmap_{size}"
        filled = fill_postgresql(
            arguments.postgres_url,
            name,
            Catalogue(Size(size), seed=1),
            arguments.source,
            arguments.workdir,
            refill=arguments.refill,
            progress=print,
        )
        print(
            f"{size:,} resources: {'kept' if filled.kept else 'filled'} in {filled.seconds:.1f} s", flush=True
        )
        url = database_url(arguments.postgres_url, name)
        results: dict[bool, list[dict[str, float]]] = {False: [], True: []}
        for run in range(arguments.runs):
            for map_on in (False, True):
                figures = measure(arguments.source, url, arguments.workdir, map_on=map_on, run=run)
                print(f"  map {'on ' if map_on else 'off'}: {figures}", flush=True)
                results[map_on].append(figures)
        off_rss = statistics.median(figures["rss_mib"] for figures in results[False])
        on_rss = statistics.median(figures["rss_mib"] for figures in results[True])
        build = statistics.median(figures["build_seconds"] for figures in results[True])
        visible = int(results[True][0]["visible"])
        rows.append((size, visible, build, off_rss, on_rss))
    print(
        "\n| resources | visible | map built in (s) | worker RSS off (MiB) | worker RSS on (MiB) | map (MiB) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for size, visible, build, off_rss, on_rss in rows:
        print(
            f"| {size:,} | {visible:,} | {build:.1f} | {off_rss:.1f} | {on_rss:.1f} | {on_rss - off_rss:+.1f} |"
        )


if __name__ == "__main__":
    main()
