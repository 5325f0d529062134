"""A worker's resident memory after the load run's routes, and where it goes.

    .venv/bin/python bench/worker_memory.py --profile sqlite                 # RSS after each route
    .venv/bin/python bench/worker_memory.py --profile postgresql --trace     # and a heap summary
    .venv/bin/python bench/worker_memory.py --profile sqlite --env MARKETPLACE_WORKER_CACHE_MAX_BYTES=8388608

Serves the catalogue of `run.py` (kept in --workdir and PostgreSQL, filled when missing) with
`marketplace serve` at its default settings (the access log on, drained as `run.py` does), sends
each route of the request mix with wrk, and prints each worker's RSS at start and after every
route, then its anonymous and file-backed parts (`/proc/<pid>/smaps_rollup`). With --trace the
workers run under `memory_probe/sitecustomize.py`: Python's allocations traced from the start,
summed by the part of the code that made them, beside glibc's count of what is allocated and held
free. Tracing slows the service and adds its own memory (counted apart): compare the parts, and
read the RSS of an untraced run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench.harness import Options, fill_catalogue, metric_deltas, say, service_server  # noqa: E402
from bench.request_mix import ROUTES, write_request_file  # noqa: E402
from bench.servers import Server, rss_mib  # noqa: E402
from bench.wrk_run import run_wrk  # noqa: E402

REPOSITORY = Path(__file__).resolve().parent.parent
PROBE = Path(__file__).resolve().parent / "memory_probe"


def _smaps(pid: int) -> dict[str, float]:
    found: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            key, _, rest = line.partition(":")
            if rest.strip().endswith("kB"):
                found[key] = int(rest.split()[0]) / 1024
    except OSError:
        pass
    return found


def _probe(server: Server, prefix: Path, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Asks every process of the server for its heap summary and waits for the workers'."""
    asked = time.time()
    Path(f"{prefix}.request").write_text(str(asked))
    workers = server.workers()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = []
        for pid in workers:
            path = Path(f"{prefix}-{pid}.json")
            if path.exists() and path.stat().st_mtime >= asked - 1:
                found.append(json.loads(path.read_text()))
        if len(found) == len(workers):
            return found
        time.sleep(0.5)
    return []


def _mib(value: float) -> str:
    return f"{value / 1024 / 1024:.1f}"


def main(argv: list[str] | None = None) -> None:
    found = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    found.add_argument("--profile", choices=("sqlite", "postgresql"), default="sqlite")
    found.add_argument("--resources", type=int, default=200_000)
    found.add_argument("--workers", type=int, default=1)
    found.add_argument("--seconds", type=int, default=5, help="wrk's run per route")
    found.add_argument("--connections", type=int, default=32)
    found.add_argument("--routes", default=",".join(ROUTES))
    found.add_argument("--trace", action="store_true", help="heap summary by part of the code (slow)")
    found.add_argument("--env", action="append", default=[], metavar="VAR=VALUE")
    found.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "marketplace-bench")
    found.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    found.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    found.add_argument("--source", type=Path, default=REPOSITORY)
    arguments = found.parse_args(argv)
    routes = tuple(name for name in arguments.routes.split(",") if name)
    options = Options(
        profiles=(arguments.profile,),
        resources=arguments.resources,
        seconds=arguments.seconds,
        rounds=1,
        warmup=0,
        workers=(arguments.workers,),
        connections=arguments.connections,
        threads=1,
        routes=routes,
        profile_routes=(),
        sizes=(),
        matrix=True,
        source=arguments.source.resolve(),
        workdir=arguments.workdir.resolve(),
        postgres_url=arguments.postgres_url,
        redis_url=arguments.redis_url,
        refill=False,
        seed=1,
        request_lines=50_000,
        env=dict(pair.split("=", 1) for pair in arguments.env),
        command_line="",
    )
    options.workdir.mkdir(parents=True, exist_ok=True)
    url, _filled, population = fill_catalogue(options, arguments.profile, arguments.resources)
    requests_dir = options.workdir / f"requests-{arguments.profile}-{arguments.resources}"
    requests_dir.mkdir(parents=True, exist_ok=True)
    files = {
        name: write_request_file(
            ROUTES[name], population, requests_dir / f"{name}.txt", count=options.request_lines, seed=1
        )
        for name in routes
    }
    log = options.workdir / f"server-memory-{arguments.profile}.log"
    server = service_server(options, arguments.profile, url, arguments.workers, log)
    prefix = Path(tempfile.mkdtemp(prefix="worker-memory-")) / "probe"
    if arguments.trace:
        server.env["PYTHONPATH"] = f"{PROBE}:{server.env['PYTHONPATH']}"
        server.env["BENCH_MEMORY_PROBE"] = str(prefix)
    rows: list[tuple[str, list[float], str]] = []
    summaries: list[dict[str, Any]] = []
    try:
        # Tracing every allocation makes the imports several times slower.
        server.start(timeout=240 if arguments.trace else 60)
        rows.append(("started", [rss_mib(pid) for pid in server.workers()], ""))
        for name in routes:
            before = server.metrics()
            result = run_wrk(
                server.port, files[name], seconds=arguments.seconds, connections=arguments.connections
            )
            _statuses, cache = metric_deltas(before, server.metrics())
            lookups = sum(cache.values())
            hits = f", {cache.get('hit', 0.0) / lookups:.0%} cache hits" if lookups else ""
            rows.append((name, [rss_mib(pid) for pid in server.workers()], f"{result.rate:,.0f} req/s{hits}"))
            say(f"{name}: RSS {rows[-1][1]} MiB, {result.rate:,.0f} req/s, {result.errors} errors")
        smaps = [_smaps(pid) for pid in server.workers()]
        if arguments.trace:
            summaries = _probe(server, prefix)
    finally:
        server.stop()
    settings = ", ".join(f"`{pair}`" for pair in arguments.env) or "defaults"
    print(
        f"\n{arguments.profile}, {arguments.resources:,} resources, {arguments.workers} worker(s), {settings}\n"
    )
    print("| After | Worker RSS MiB | wrk |\n|---|---:|---:|")
    for name, values, note in rows:
        print(f"| {name} | {' / '.join(f'{value:.1f}' for value in values)} | {note} |")
    print("\n| smaps_rollup (MiB) | " + " | ".join(f"worker {n + 1}" for n in range(len(smaps))) + " |")
    print("|---|" + "---:|" * len(smaps))
    for key in ("Rss", "Anonymous", "Pss_File", "Shared_Clean", "Private_Clean", "Private_Dirty"):
        print(f"| {key} | " + " | ".join(f"{values.get(key, 0):.1f}" for values in smaps) + " |")
    for summary in summaries:
        print(
            f"\nWorker {summary['pid']}: traced {_mib(summary['traced'])} MiB "
            f"(tracemalloc's own {_mib(summary['tracemalloc_own'])} MiB)\n"
        )
        print(
            f"{summary['modules']} modules; the most by package: "
            + ", ".join(f"{name} {count}" for name, count in summary["packages"].items())
            + "\n"
        )
        print("| Part | MiB |\n|---|---:|")
        for part, size in summary["by_part"].items():
            print(f"| {part} | {_mib(size)} |")
        info = summary["mallinfo2"]
        if info:
            print(
                f"\nglibc (main arena + mmapped): allocated {_mib(info['uordblks'] + info['hblkhd'])} MiB, "
                f"held free {_mib(info['fordblks'])} MiB, arena {_mib(info['arena'])} MiB, "
                f"mmapped {_mib(info['hblkhd'])} MiB"
            )
        print("\n| Line | MiB |\n|---|---:|")
        for line, size in summary["top_lines"][:15]:
            print(f"| `{line}` | {_mib(size)} |")


if __name__ == "__main__":
    main()
