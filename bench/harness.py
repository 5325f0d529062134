"""The load runs behind `bench/run.py`: fill, serve the ceiling and the service, measure, report.

For each profile (SQLite with the in-process store; PostgreSQL with Redis) and worker count, the
ceiling (`reference_app.py`), the service with its default settings (access log on, as
`marketplace serve` runs) and the same service with `--no-access-log` run side by side under the
same uvicorn; each route is measured in rounds, ceiling then service then service without access
log (A B C A B C), so that a noisy machine's drift falls on all alike. The service's cost comes from `/proc` (CPU of its process tree, RSS of each worker)
and from its own `/metrics` (statuses, answer-cache hits).
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench import hotspots
from bench.catalogue import Catalogue, Size
from bench.fill import (
    Filled,
    database_url,
    fill_postgresql,
    fill_sqlite,
    marketplace_command,
    service_environment,
)
from bench.request_mix import (
    ROUTES,
    Population,
    postgresql_population,
    sqlite_population,
    write_request_file,
)
from bench.servers import DatabaseCpu, Server, free_port
from bench.wrk_run import WrkResult, run_wrk

BENCH = Path(__file__).resolve().parent
PROFILES = ("sqlite", "postgresql")
PROFILE_TITLES = {"sqlite": "SQLite, in-process store", "postgresql": "PostgreSQL + Redis"}


@dataclass(frozen=True)
class Options:
    profiles: tuple[str, ...]
    resources: int
    seconds: int
    rounds: int
    warmup: int
    workers: tuple[int, ...]
    connections: int
    threads: int
    routes: tuple[str, ...]
    profile_routes: tuple[str, ...]
    sizes: tuple[int, ...]
    matrix: bool
    source: Path
    workdir: Path
    postgres_url: str
    redis_url: str
    refill: bool
    seed: int
    request_lines: int
    env: dict[str, str]
    command_line: str
    # Also the service with `--no-access-log`, beside the one with its default settings.
    access_log_comparison: bool = True
    # PostgreSQL catalogues are the databases `<prefix>_<resources>`.
    database_prefix: str = "marketplace_bench"


@dataclass
class RouteResult:
    profile: str
    workers: int
    route: str
    # The service as `marketplace serve` runs it by default (True), or with `--no-access-log`.
    access_log: bool = True
    ceiling: list[WrkResult] = field(default_factory=list)
    service: list[WrkResult] = field(default_factory=list)
    ceiling_cpu_us: list[float] = field(default_factory=list)
    service_cpu_us: list[float] = field(default_factory=list)
    store_cpu_us: list[float] = field(default_factory=list)
    worker_rss_mib: list[float] = field(default_factory=list)
    supervisor_rss_mib: float | None = None
    statuses: dict[str, int] = field(default_factory=dict)
    cache: dict[str, float] = field(default_factory=dict)
    # Access lines the service wrote during the measured rounds (read from its output).
    access_lines: int = 0

    @property
    def rate(self) -> float:
        """The service's median rate."""
        return statistics.median(run.rate for run in self.service) if self.service else float("nan")

    @property
    def ratio(self) -> float:
        """Median of each round's service rate over the ceiling's rate of the same round."""
        pairs = [s.rate / c.rate for s, c in zip(self.service, self.ceiling, strict=True) if c.rate]
        return statistics.median(pairs) if pairs else float("nan")

    def median(self, runs: list[WrkResult], value: Callable[[WrkResult], float]) -> float:
        """The median over the runs that had an answer (a run without any has no latency)."""
        answered = [value(run) for run in runs if run.requests]
        return statistics.median(answered) if answered else float("nan")

    @property
    def errors(self) -> int:
        """Failed connections, and answers other than 2xx/3xx: as the service counted them when it
        could tell (wrk misses the answers still running when it stops), else as wrk saw them."""
        sockets = sum(run.socket_errors for run in self.service)
        if self.statuses:
            return sockets + sum(
                count for status, count in self.statuses.items() if not status.startswith(("2", "3"))
            )
        return sockets + sum(run.status_errors for run in self.service)

    @property
    def requests(self) -> int:
        return sum(run.requests for run in self.service)

    @property
    def cache_hit_ratio(self) -> float | None:
        lookups = sum(self.cache.values())
        return self.cache.get("hit", 0.0) / lookups if lookups else None


@dataclass
class SizeResult:
    resources: int
    filled: Filled
    single: list[WrkResult] = field(default_factory=list)
    loaded: list[WrkResult] = field(default_factory=list)
    service_cpu_us: list[float] = field(default_factory=list)
    store_cpu_us: list[float] = field(default_factory=list)
    errors: int = 0


@dataclass
class ProfileRun:
    name: str
    filled: Filled


@dataclass
class Run:
    options: Options
    started: datetime
    environment: dict[str, str]
    profiles: list[ProfileRun] = field(default_factory=list)
    routes: list[RouteResult] = field(default_factory=list)
    hotspots: list[tuple[str, int, str, hotspots.Hotspots]] = field(default_factory=list)
    sizes: list[SizeResult] = field(default_factory=list)
    seconds: float = 0.0


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class StoreCpu:
    """CPU time of the PostgreSQL processes serving one database, and of Redis."""

    def __init__(self, url: str | None, redis_url: str | None) -> None:
        self.database = DatabaseCpu(url.rsplit("/", 1)[1]) if url else None
        self.redis_url = redis_url
        self._redis = 0.0

    def _redis_seconds(self) -> float:
        if not self.redis_url:
            return 0.0
        import redis

        info = redis.Redis.from_url(self.redis_url).info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def start(self) -> None:
        if self.database is not None:
            self.database.start()
        self._redis = self._redis_seconds()

    def used(self) -> float:
        spent = self._redis_seconds() - self._redis
        if self.database is not None:
            spent += self.database.used()
        return spent


def _ceiling(options: Options, workers: int, log: Path) -> Server:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "reference_app:app",
        "--app-dir",
        str(BENCH),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--no-access-log",
        "--log-level",
        "warning",
    ]
    env = service_environment(options.source, {})
    return Server("ceiling", command, env, port, options.workdir, "/", log)


def service_server(
    options: Options,
    profile: str,
    url: str,
    workers: int,
    log: Path,
    extra: dict[str, str] | None = None,
    *,
    access_log: bool = True,
) -> Server:
    """`marketplace serve` with the service's default settings (JSON log lines at level info on
    standard error, the access log on unless `access_log` is false), drained as a log collector
    would; only what the run needs is set: the database, Redis, the key of client hashes."""
    port = free_port()
    settings = {
        "MARKETPLACE_DATABASE_URL": url,
        "MARKETPLACE_APP_KEY": "bench",
        "MARKETPLACE_STORAGE_DIR": str(options.workdir / "storage"),
    }
    # Several workers share their limits and caches in Redis (`serve` refuses them without it).
    if profile == "postgresql" or workers > 1:
        settings["MARKETPLACE_REDIS_URL"] = options.redis_url
        settings["MARKETPLACE_REDIS_PREFIX"] = f"bench-{os.getpid()}-{port}:"
    settings.update(extra or {})
    settings.update(options.env)
    command = [
        *marketplace_command(),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        *([] if access_log else ["--no-access-log"]),
    ]
    env = service_environment(options.source, settings)
    name = "service" if access_log else "service --no-access-log"
    return Server(name, command, env, port, options.workdir, "/up", log, drained=True)


def _forget_redis_keys(redis_url: str, server: Server) -> None:
    prefix = server.env.get("MARKETPLACE_REDIS_PREFIX")
    if not prefix:
        return
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start : start + 1000])


def metric_deltas(
    before: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    after: dict[tuple[str, tuple[tuple[str, str], ...]], float],
) -> tuple[dict[str, int], dict[str, float]]:
    """Statuses of the API's answers and outcomes of answer-cache lookups between two scrapes."""
    statuses: dict[str, int] = {}
    cache: dict[str, float] = {}
    for (name, labels), value in after.items():
        change = value - before.get((name, labels), 0.0)
        if not change:
            continue
        label = dict(labels)
        if name == "marketplace_http_requests_total" and label.get("route") != "metrics":
            statuses[label.get("status", "?")] = statuses.get(label.get("status", "?"), 0) + int(change)
        elif name == "marketplace_worker_cache_lookups_total":
            cache[label.get("outcome", "?")] = cache.get(label.get("outcome", "?"), 0.0) + change
    return statuses, cache


def fill_catalogue(options: Options, profile: str, resources: int) -> tuple[str, Filled, Population]:
    """The catalogue of `resources` resources in the profile's database: its URL, the fill, and
    what requests may name."""
    catalogue = Catalogue(Size(resources), seed=options.seed)
    say(f"{profile}: catalogue of {resources:,} resources")
    if profile == "sqlite":
        path = options.workdir / f"catalogue-{resources}.db"
        filled = fill_sqlite(path, catalogue, options.source, refill=options.refill, progress=say)
        url = f"sqlite:///{path}"
        population = sqlite_population(path)
    else:
        name = f"{options.database_prefix}_{resources}"
        filled = fill_postgresql(
            options.postgres_url,
            name,
            catalogue,
            options.source,
            options.workdir,
            refill=options.refill,
            progress=say,
        )
        url = database_url(options.postgres_url, name)
        population = postgresql_population(url)
    say(
        f"{profile}: {'kept the catalogue already filled' if filled.kept else 'filled'} in "
        f"{filled.seconds:.1f} s: "
        + ", ".join(f"{count:,} {table}" for table, count in filled.counts.items())
    )
    return url, filled, population


def _per_request(seconds: float, result: WrkResult) -> float:
    return seconds * 1e6 / result.requests if result.requests else float("nan")


def _measure(
    server: Server, request_file: Path, options: Options, seconds: int, connections: int, seed: int
) -> tuple[WrkResult, float]:
    before = server.cpu_seconds()
    result = run_wrk(
        server.port,
        request_file,
        seconds=seconds,
        connections=connections,
        threads=options.threads,
        seed=seed,
    )
    return result, _per_request(server.cpu_seconds() - before, result)


def _measure_profile(options: Options, run: Run, profile: str) -> None:
    url, filled, population = fill_catalogue(options, profile, options.resources)
    run.profiles.append(ProfileRun(profile, filled))
    requests_dir = options.workdir / f"requests-{profile}-{options.resources}"
    requests_dir.mkdir(parents=True, exist_ok=True)
    files = {
        name: write_request_file(
            ROUTES[name],
            population,
            requests_dir / f"{name}.txt",
            count=options.request_lines,
            seed=options.seed,
        )
        for name in options.routes
    }
    store = StoreCpu(
        url if profile == "postgresql" else None, options.redis_url if profile == "postgresql" else None
    )
    seed = options.seed
    for workers in options.workers:
        log = options.workdir / f"server-{profile}-{workers}.log"
        ceiling = _ceiling(options, workers, log)
        services = [service_server(options, profile, url, workers, log)]
        if options.access_log_comparison:
            services.append(service_server(options, profile, url, workers, log, access_log=False))
        try:
            for server in (ceiling, *services):
                server.start()
            for name in options.routes:
                results = [
                    RouteResult(profile, workers, name, access_log=index == 0)
                    for index in range(len(services))
                ]
                if options.warmup:
                    for server in (ceiling, *services):
                        run_wrk(
                            server.port,
                            files[name],
                            seconds=options.warmup,
                            connections=options.connections,
                            threads=options.threads,
                            seed=seed,
                        )
                for _ in range(options.rounds):
                    seed += 1
                    ceiling_run, ceiling_cpu = _measure(
                        ceiling, files[name], options, options.seconds, options.connections, seed
                    )
                    for service, result in zip(services, results, strict=True):
                        result.ceiling.append(ceiling_run)
                        result.ceiling_cpu_us.append(ceiling_cpu)
                        _measure_service(service, result, store, files[name], options, seed)
                for service, result in zip(services, results, strict=True):
                    result.worker_rss_mib, result.supervisor_rss_mib = service.memory()
                    run.routes.append(result)
                    say(
                        f"{profile}, {workers} worker(s), {name}"
                        f"{'' if result.access_log else ', --no-access-log'}: {result.rate:,.0f} "
                        f"req/s, ratio {result.ratio:.3f}, p99 {result.median(result.service, lambda r: r.p99_ms):.1f} ms, "
                        f"{result.errors} errors"
                    )
            if workers == options.workers[0]:
                for name in options.profile_routes:
                    if name in files:
                        run.hotspots.append(
                            (profile, workers, name, _hotspots(services[0], files[name], options))
                        )
        finally:
            for server in (*services, ceiling):
                server.stop()
            for server in services:
                _forget_redis_keys(options.redis_url, server)


def _measure_service(
    service: Server, result: RouteResult, store: StoreCpu, request_file: Path, options: Options, seed: int
) -> None:
    """One measured round of the service: wrk's figures, CPU per request (its own, and PostgreSQL's
    and Redis's), and the statuses, cache lookups and access lines it counted meanwhile."""
    before = service.metrics()
    lines_before = service.access_lines
    store.start()
    measured, cpu = _measure(service, request_file, options, options.seconds, options.connections, seed)
    if result.profile == "postgresql":
        result.store_cpu_us.append(_per_request(store.used(), measured))
    statuses, cache = metric_deltas(before, service.metrics())
    for key, value in statuses.items():
        result.statuses[key] = result.statuses.get(key, 0) + value
    for key, change in cache.items():
        result.cache[key] = result.cache.get(key, 0.0) + change
    result.service.append(measured)
    result.service_cpu_us.append(cpu)
    result.access_lines += service.access_lines - lines_before


def _hotspots(service: Server, request_file: Path, options: Options) -> hotspots.Hotspots:
    output = options.workdir / f"py-spy-{service.port}-{request_file.stem}.txt"
    seconds = max(2, options.seconds)
    sampler = hotspots.record(service.pid, seconds, output)
    time.sleep(0.5)
    run_wrk(
        service.port, request_file, seconds=seconds, connections=options.connections, threads=options.threads
    )
    sampler.wait(timeout=seconds + 30)
    found = hotspots.summarise(output.read_text() if output.exists() else "")
    say(f"profiled {request_file.stem}: {found.samples} samples")
    return found


def _measure_sizes(options: Options, run: Run) -> None:
    workers = options.workers[0]
    for resources in options.sizes:
        url, filled, population = fill_catalogue(options, "postgresql", resources)
        result = SizeResult(resources, filled)
        request_file = write_request_file(
            ROUTES["search-q"],
            population,
            options.workdir / f"search-q-{resources}.txt",
            count=options.request_lines,
            seed=options.seed,
        )
        log = options.workdir / f"server-sizes-{resources}.log"
        # No answer cache: each request reaches the database, whatever was asked before.
        service = service_server(
            options, "postgresql", url, workers, log, {"MARKETPLACE_WORKER_CACHE_MAX_ENTRIES": "0"}
        )
        store = StoreCpu(url, None)
        try:
            service.start()
            if options.warmup:
                run_wrk(service.port, request_file, seconds=options.warmup, connections=options.connections)
            for round_number in range(options.rounds):
                seed = options.seed + round_number
                single, _cpu = _measure(service, request_file, options, options.seconds, 1, seed)
                result.single.append(single)
                store.start()
                loaded, cpu = _measure(
                    service, request_file, options, options.seconds, options.connections, seed
                )
                result.store_cpu_us.append(_per_request(store.used(), loaded))
                result.loaded.append(loaded)
                result.service_cpu_us.append(cpu)
                result.errors += single.errors + loaded.errors
        finally:
            service.stop()
            _forget_redis_keys(options.redis_url, service)
        run.sizes.append(result)
        say(
            f"q search on {resources:,} resources: p95 {statistics.median(r.p95_ms for r in result.single):.1f} ms "
            f"(1 connection), {statistics.median(r.rate for r in result.loaded):,.0f} req/s "
            f"({options.connections} connections)"
        )


def _version_of(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (
        (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr).strip() else "?"
    )


def _environment(options: Options) -> dict[str, str]:
    from importlib.metadata import version

    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    source = str(options.source)
    revision = _version_of(["git", "-C", source, "rev-parse", "--short", "HEAD"])
    if revision != "?" and not revision.startswith("fatal"):
        dirty = _version_of(["git", "-C", source, "status", "--porcelain", "--", "marketplace"])
        source += f" (commit {revision}{', with uncommitted changes' if dirty not in ('?', '') else ''})"
    found = {
        "Source": source,
        "Machine": f"{os.cpu_count()} CPUs ({cpu}), {platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "uvicorn": version("uvicorn"),
        "wrk": _version_of(["wrk", "-v"]).split(" [")[0],
    }
    if "sqlite" in options.profiles:
        import sqlite3

        found["SQLite"] = sqlite3.sqlite_version
    if "postgresql" in options.profiles or options.sizes:
        found["PostgreSQL"] = _version_of(["psql", "--version"])
        try:
            import redis

            found["Redis"] = str(redis.Redis.from_url(options.redis_url).info("server")["redis_version"])
        except Exception:  # the report says it could not tell; the run itself will fail if it matters
            found["Redis"] = "?"
    return found


def execute(options: Options) -> Run:
    options.workdir.mkdir(parents=True, exist_ok=True)
    run = Run(options, datetime.now(UTC), _environment(options))
    started = time.monotonic()
    if options.matrix:
        for profile in options.profiles:
            _measure_profile(options, run, profile)
    if options.sizes:
        _measure_sizes(options, run)
    run.seconds = time.monotonic() - started
    return run


def planned_seconds(options: Options) -> float:
    """A rough duration of the measurements (fills and start-ups not counted)."""
    servers = 3 if options.access_log_comparison else 2
    per_route = servers * (options.warmup + options.rounds * options.seconds)
    matrix = len(options.profiles) * len(options.workers) * len(options.routes) * per_route
    profiled = len(options.profiles) * len(options.profile_routes) * max(2, options.seconds)
    sizes = len(options.sizes) * (options.warmup + 2 * options.rounds * options.seconds)
    return (matrix + profiled if options.matrix else 0) + sizes


def remove_workdir(workdir: Path) -> None:
    shutil.rmtree(workdir, ignore_errors=True)
