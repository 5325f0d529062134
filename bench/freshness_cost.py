"""What the bound on a kept answer's age costs: hit ratio, CPU and rate for each maximum age.

Each worker keeps encoded answers of the catalogue reads (`marketplace/http/worker_cache.py`),
not served once older than `MARKETPLACE_WORKER_CACHE_MAX_AGE_SECONDS` (`marketplace/freshness.py`);
an expired entry is a miss (`marketplace_worker_cache_lookups_total{outcome="expired"}`). This run
fills a SQLite catalogue (`catalogue.py`, `fill.py`), then for each maximum age serves it with
`marketplace serve --workers 2` and sends, at a fixed offered rate (`paced.lua`), version checks
(`GET /api/v1/resource/version/{id}`) and resource cards (`GET /api/v1/resource/{id}`) naming
visible resources drawn uniformly, each route to a server of its own, both at once: a warm-up at
least as long as the longest bounded age (so that the bound is at work in the measured window),
then the measured seconds. It reads the service's own lookups (`/metrics`) and the CPU of its
process tree (`/proc`) over the measured seconds.

Why the age matters, in the steady state: a worker that gets a share s of the requests sees each
key at `r = s * rate / keys` per second; a miss keeps an answer that serves `r * age` requests on
average before it expires, and the next request misses again, so the hit ratio tends to
`r*age / (1 + r*age)` (without a bound, to 1). From a cold start it climbs towards that;
`hit_ratio_from_cold` gives the ratio expected over the measured window, printed beside the
measured one. The workers' shares are read from their CPU time over the window (the kernel
spreads wrk's connections unevenly over them).

The ages run in an order alternating both ends of the list (none, 1 s, 60 s, 10 s, 30 s), so
that the drift of a shared machine does not line up with the age; the two routes of one age run
at the same time, so that they share it.

    .venv/bin/python bench/freshness_cost.py                  # about 11 minutes
    .venv/bin/python bench/freshness_cost.py --seconds 5 --warmup 2 --resources 2000   # a try
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

if not __package__:
    # Run as a script: the repository, not bench/, first on the path.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench.catalogue import Catalogue, Size
from bench.fill import fill_sqlite, marketplace_command, service_environment
from bench.harness import metric_deltas
from bench.request_mix import API, sqlite_population
from bench.servers import Server, cpu_seconds, free_port
from bench.wrk_run import WrkResult, run_wrk

REPOSITORY = Path(__file__).resolve().parent.parent
# A maximum age at or above this is reported as no bound at all.
NO_BOUND = 1e6
DEFAULT_AGES = (1e9, 60.0, 30.0, 10.0, 1.0)
ROUTE_PATHS = {"version": f"{API}/resource/version/{{}}", "card": f"{API}/resource/{{}}"}


def say(message: str) -> None:
    print(f"[freshness {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def age_label(max_age: float) -> str:
    return "none" if max_age >= NO_BOUND else f"{max_age:g} s"


@dataclass(frozen=True)
class Lookups:
    """Outcomes of the workers' answer-cache lookups over a window."""

    hit: float = 0.0
    miss: float = 0.0
    expired: float = 0.0
    off: float = 0.0

    @classmethod
    def from_outcomes(cls, outcomes: dict[str, float]) -> Lookups:
        return cls(
            hit=outcomes.get("hit", 0.0),
            miss=outcomes.get("miss", 0.0),
            expired=outcomes.get("expired", 0.0),
            off=outcomes.get("off", 0.0),
        )

    @property
    def total(self) -> float:
        return self.hit + self.miss + self.expired + self.off

    @property
    def hit_ratio(self) -> float:
        return self.hit / self.total if self.total else float("nan")

    @property
    def expired_share(self) -> float:
        return self.expired / self.total if self.total else float("nan")


def per_key_rate(rate: float, keys: int, share: float) -> float:
    """Requests per second a worker getting `share` of the requests sees for one key, the keys
    drawn uniformly (each worker keeps its own answers)."""
    return share * rate / keys


def shares(cpu_before: dict[int, float], cpu_after: dict[int, float]) -> list[float]:
    """Each worker's share of the work over a window, from its CPU seconds before and after (an
    even split when nothing was measured)."""
    spent = [max(0.0, cpu_after.get(pid, 0.0) - before) for pid, before in cpu_before.items()]
    total = sum(spent)
    if not total:
        return [1.0 / len(cpu_before)] * len(cpu_before) if cpu_before else [1.0]
    return [part / total for part in spent]


def steady_hit_ratio(key_rate: float, max_age: float) -> float:
    """The long-run hit ratio of one key requested at `key_rate` (Poisson): a miss keeps an answer
    that serves `key_rate * max_age` requests on average before it expires."""
    if max_age >= NO_BOUND:
        return 1.0
    kept = key_rate * max_age
    return kept / (1.0 + kept)


def hit_ratio_from_cold(
    key_rate: float, max_age: float, start: float, end: float, *, warmup_rate: float | None = None
) -> float:
    """The hit ratio expected over [start, end] seconds after the first request, the cache empty
    at 0 and each key requested (Poisson) at `warmup_rate` until `start`, at `key_rate` after
    (`warmup_rate` None: `key_rate` all along).

    A request hits when a miss kept an answer within `max_age` before it. Keeping misses come at
    r(t)·(1 - p(t)), where p(t), the chance that an answer kept within the last `max_age` is
    there, is the integral of those misses over (t - age, t] (two never fall in one such span).
    """
    if end <= start:
        raise ValueError("the window must end after it starts")
    early = key_rate if warmup_rate is None else warmup_rate
    if max_age >= end:
        # Nothing expires within the window: a request hits when the key was asked before.
        asked_before = 1.0 - math.exp(-early * start)
        if key_rate == 0:
            return asked_before
        span = key_rate * (end - start)
        return 1.0 - (1.0 - asked_before) * (1.0 - math.exp(-span)) / span
    step = min(max_age / 50.0, 0.05)
    lag = max(1, round(max_age / step))
    kept = [0.0]  # ∫ of the keeping misses from 0 to each step
    hits_sum = 0.0
    counted = 0
    for index in range(math.ceil(end / step) + 1):
        t = index * step
        there = kept[index] - (kept[index - lag] if index >= lag else 0.0)
        rate = early if t < start else key_rate
        kept.append(kept[index] + step * rate * (1.0 - there))
        if t >= start:
            hits_sum += there
            counted += 1
    return hits_sum / counted if counted else float("nan")


def expected_hit_ratios(
    worker_shares: Sequence[float],
    rate: float,
    keys: int,
    max_age: float,
    window: tuple[float, float],
    warmup_shares: Sequence[float] | None = None,
) -> tuple[float, float]:
    """The hit ratio expected over `window` from a cold start, and in the long run, over workers
    getting these shares of `rate` (each request counts once, so each worker weighs its share).
    Each wrk run opens its connections anew: the warm-up may have split them otherwise."""
    early = worker_shares if warmup_shares is None else warmup_shares
    from_cold = sum(
        share
        * hit_ratio_from_cold(
            per_key_rate(rate, keys, share),
            max_age,
            *window,
            warmup_rate=per_key_rate(rate, keys, warmup_share),
        )
        for share, warmup_share in zip(worker_shares, early, strict=True)
    )
    steady = sum(
        share * steady_hit_ratio(per_key_rate(rate, keys, share), max_age) for share in worker_shares
    )
    return from_cold, steady


def alternating(items: Sequence[float]) -> list[float]:
    """The items from both ends in turn (a, e, b, d, c), so that no trend of the list lines up
    with the order they run in."""
    order: list[float] = []
    low, high = 0, len(items) - 1
    while low <= high:
        order.append(items[low])
        if high != low:
            order.append(items[high])
        low, high = low + 1, high - 1
    return order


@dataclass
class Measured:
    """One route under one maximum age, over the measured window."""

    max_age: float
    route: str
    result: WrkResult
    cpu_seconds: float
    lookups: Lookups
    statuses: dict[str, int]
    # Seconds since the route's first request (its warm-up's), when the window opened and closed.
    window: tuple[float, float]
    # Each worker's share of the requests over the window (from its CPU time).
    worker_shares: list[float] = field(default_factory=list)
    warmup_shares: list[float] = field(default_factory=list)
    predicted: float = float("nan")
    steady: float = float("nan")

    @property
    def requests(self) -> int:
        """The API answers the service counted (wrk misses those running when it stops)."""
        return sum(self.statuses.values()) or self.result.requests

    @property
    def cpu_us(self) -> float:
        return self.cpu_seconds * 1e6 / self.requests if self.requests else float("nan")

    @property
    def errors(self) -> int:
        refused = sum(count for status, count in self.statuses.items() if not status.startswith(("2", "3")))
        return refused + self.result.socket_errors


@dataclass
class Report:
    resources: int
    keys: int
    rate: float
    workers: int
    seconds: int
    warmup: int
    connections: int
    measured: list[Measured] = field(default_factory=list)
    took: float = 0.0


def render(report: Report) -> str:
    """The results as a Markdown table per route, the CPU relative to the unbounded setting."""
    lines = [
        f"SQLite, in-process store, `serve --workers {report.workers}`; {report.resources:,} resources "
        f"({report.keys:,} visible, drawn uniformly); {report.rate:g} requests/s offered by wrk "
        f"({report.connections} connections); {report.warmup} s warm-up then {report.seconds} s measured "
        f"per route and age; {report.took / 60:.1f} minutes in all. Per-key rate seen by a worker "
        f"getting an even share: {per_key_rate(report.rate, report.keys, 1 / report.workers):.4f}/s. "
        "Expected hit ratios weigh each worker by its share of the CPU over the warm-up and the window "
        "(shown: warm-up, then window).",
        "",
    ]
    for route in ROUTE_PATHS:
        rows = sorted((m for m in report.measured if m.route == route), key=lambda m: -m.max_age)
        if not rows:
            continue
        unbounded = next((m for m in rows if m.max_age >= NO_BOUND), None)
        even = per_key_rate(report.rate, report.keys, 1 / report.workers)
        lines += [
            f"`{route}` ({ROUTE_PATHS[route].format('{id}')})",
            "",
            "| max age | hit ratio | expired | expected from cold | long run | long run, even split | req/s "
            "| CPU µs/request | CPU vs none | worker shares | errors |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for m in rows:
            relative = m.cpu_us / unbounded.cpu_us if unbounded and unbounded.cpu_us else float("nan")
            lines.append(
                f"| {age_label(m.max_age)} | {m.lookups.hit_ratio:.3f} | {m.lookups.expired_share:.3f} "
                f"| {m.predicted:.3f} | {m.steady:.3f} | {steady_hit_ratio(even, m.max_age):.3f} "
                f"| {m.result.rate:,.0f} | {m.cpu_us:,.0f} "
                f"| {relative:.2f} | {_shares_text(m)} | {m.errors} |"
            )
        lines.append("")
    return "\n".join(lines)


def _shares_text(measured: Measured) -> str:
    window = "/".join(f"{share:.2f}" for share in measured.worker_shares)
    if not measured.warmup_shares:
        return window
    return "/".join(f"{share:.2f}" for share in measured.warmup_shares) + " → " + window


def _service(url: str, workdir: Path, workers: int, max_age: float, log: Path) -> Server:
    port = free_port()
    settings = {
        "MARKETPLACE_DATABASE_URL": url,
        "MARKETPLACE_APP_KEY": "bench",
        "MARKETPLACE_STORAGE_DIR": str(workdir / "storage"),
        "MARKETPLACE_LOG_FORMAT": "text",
        "MARKETPLACE_LOG_LEVEL": "error",
        "MARKETPLACE_WORKER_CACHE_MAX_AGE_SECONDS": f"{max_age:g}",
    }
    command = [
        *marketplace_command(),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--no-access-log",
    ]
    env = service_environment(REPOSITORY, settings)
    return Server("service", command, env, port, workdir, "/up", log)


def _measure_route(
    service: Server,
    route: str,
    max_age: float,
    request_file: Path,
    arguments: argparse.Namespace,
    seed: int,
) -> Measured:
    workers = service.workers()
    workers_started = {pid: cpu_seconds(pid) for pid in workers}
    began = time.monotonic()
    if arguments.warmup:
        run_wrk(
            service.port,
            request_file,
            seconds=arguments.warmup,
            connections=arguments.connections,
            seed=seed,
            rate=arguments.rate,
        )
    before, cpu = service.metrics(), service.cpu_seconds()
    workers_before = {pid: cpu_seconds(pid) for pid in workers}
    opened = time.monotonic() - began
    result = run_wrk(
        service.port,
        request_file,
        seconds=arguments.seconds,
        connections=arguments.connections,
        seed=seed + 1,
        rate=arguments.rate,
    )
    cpu = service.cpu_seconds() - cpu
    workers_after = {pid: cpu_seconds(pid) for pid in workers}
    closed = time.monotonic() - began
    statuses, outcomes = metric_deltas(before, service.metrics())
    return Measured(
        max_age=max_age,
        route=route,
        result=result,
        cpu_seconds=cpu,
        lookups=Lookups.from_outcomes(outcomes),
        statuses=statuses,
        window=(opened, closed),
        worker_shares=shares(workers_before, workers_after),
        warmup_shares=shares(workers_started, workers_before),
    )


def run(arguments: argparse.Namespace) -> Report:
    started = time.monotonic()
    workdir: Path = arguments.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"catalogue-{arguments.resources}.db"
    say(f"catalogue of {arguments.resources:,} resources in {path}")
    fill_sqlite(
        path,
        Catalogue(Size(arguments.resources), seed=arguments.seed),
        REPOSITORY,
        refill=False,
        progress=say,
    )
    keys = sqlite_population(path).visible_ids
    files = {}
    for route, template in ROUTE_PATHS.items():
        # Every visible resource once: `paced.lua` draws a line uniformly.
        files[route] = workdir / f"freshness-{route}-{arguments.resources}.txt"
        files[route].write_text("".join(f"GET {template.format(rid)}\n" for rid in keys))
    report = Report(
        resources=arguments.resources,
        keys=len(keys),
        rate=arguments.rate,
        workers=arguments.workers,
        seconds=arguments.seconds,
        warmup=arguments.warmup,
        connections=arguments.connections,
    )
    seed = arguments.seed
    for turn, max_age in enumerate(alternating(arguments.ages)):
        routes = list(arguments.routes) if turn % 2 == 0 else list(arguments.routes)[::-1]
        # Each route on a server of its own, both loaded at once: each has its own metrics and
        # process tree, and the two share whatever the machine is doing.
        servers = {
            route: _service(
                f"sqlite:///{path}",
                workdir,
                arguments.workers,
                max_age,
                workdir / f"server-freshness-{route}-{age_label(max_age).replace(' ', '')}.log",
            )
            for route in routes
        }
        seed += 2
        try:
            for server in servers.values():
                server.start()
            with ThreadPoolExecutor(len(routes)) as pool:
                running = [
                    pool.submit(_measure_route, servers[route], route, max_age, files[route], arguments, seed)
                    for route in routes
                ]
                measured_routes = [future.result() for future in running]
        finally:
            for server in servers.values():
                server.stop()
        for measured in measured_routes:
            measured.predicted, measured.steady = expected_hit_ratios(
                measured.worker_shares,
                arguments.rate,
                len(keys),
                max_age,
                measured.window,
                measured.warmup_shares,
            )
            report.measured.append(measured)
            say(
                f"max age {age_label(max_age)}, {measured.route}: hit ratio "
                f"{measured.lookups.hit_ratio:.3f} (expected {measured.predicted:.3f}, worker shares "
                f"{_shares_text(measured)}), "
                f"{measured.result.rate:,.0f} req/s, {measured.cpu_us:,.0f} µs CPU/request, "
                f"{measured.errors} errors"
            )
    report.took = time.monotonic() - started
    return report


def _ages(text: str) -> tuple[float, ...]:
    return tuple(float(part) for part in text.split(",") if part)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--resources", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=600.0, help="requests/s offered")
    parser.add_argument("--seconds", type=int, default=60, help="measured seconds per route and age")
    parser.add_argument(
        "--warmup", type=int, default=60, help="seconds of load before the measured ones (≥ the longest age)"
    )
    parser.add_argument(
        "--ages", type=_ages, default=DEFAULT_AGES, help=f"max ages, seconds (≥ {NO_BOUND:g}: none)"
    )
    parser.add_argument("--routes", type=lambda text: tuple(text.split(",")), default=tuple(ROUTE_PATHS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "marketplace-bench")
    parser.add_argument("--out", type=Path, help="also write the tables to this file")
    arguments = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    unknown = set(arguments.routes) - set(ROUTE_PATHS)
    if unknown:
        raise SystemExit(f"unknown route(s): {', '.join(sorted(unknown))}; known: {', '.join(ROUTE_PATHS)}")
    report = run(arguments)
    text = render(report)
    print(text)
    if arguments.out:
        arguments.out.write_text(text + "\n")
    if any(m.errors for m in report.measured):
        raise SystemExit("some requests failed: see the errors column")


if __name__ == "__main__":
    main()
