"""The service's Prometheus metrics and their exposition at `GET /metrics`.

With several worker processes (`serve --workers N`), `serve` points `PROMETHEUS_MULTIPROC_DIR` at
a fresh folder before any worker starts: every worker then writes its values there, and whichever
worker answers a scrape sums them all. Without it (one process, tests) the default registry is
used.

In both modes the `process_*` series are each live worker's own, labelled by `pid`: the worker that
answers a scrape reads them from the kernel (`/proc`, Linux) for itself and for its siblings under
the same supervisor, found by the files they keep in the shared folder. Nothing is sampled on the
request path, and a worker gone (even killed) is gone from the next scrape, its live gauges too.

The request path's counts (requests and their durations, the protocol's answers) are kept in
plain numbers and added to their metrics in batches (`tally.py`); an exposition adds its worker's
pending ones first.

Every known label value (limiters, caches, upstreams, outcomes) has its series from the worker's
start, at 0, so that `rate()` and alerts see the first event.

Labels never carry caller-chosen text: routes are route names (or a fixed category for paths no
route claims), statuses are numbers, limiters and caches are the service's own names.
"""

from __future__ import annotations

import glob
import os
import platform
from collections.abc import Iterable, Sequence
from importlib import metadata

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    PROCESS_COLLECTOR,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
    multiprocess,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from marketplace.telemetry import MULTIPROCESS_DIR_VARIABLE, WORKERS_VARIABLE
from marketplace.telemetry.tally import TALLY

CONTENT_TYPE = CONTENT_TYPE_LATEST

REQUESTS = Counter(
    "marketplace_http_requests_total",
    "Answered HTTP requests, by route name, method and status.",
    ["route", "method", "status"],
)
REQUEST_DURATION = Histogram(
    "marketplace_http_request_duration_seconds",
    "Time from the request's arrival to the end of its answer, by route name and status.",
    ["route", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
ACCESS_LOG_DROPPED = Counter(
    "marketplace_access_log_dropped_total",
    "Log lines (nearly all of them access lines) dropped because the worker already held "
    "10000 lines its standard error had not taken.",
)
REFUSED_HEADS = Counter(
    "marketplace_http_refused_heads_total",
    "Connections closed by the server before a request reached the service: a head over 64 KiB "
    "(431) or not complete in time (408).",
    ["status"],
)
REFUSED_CONNECTIONS = Counter(
    "marketplace_http_refused_connections_total",
    "Connections closed as soon as accepted, before a byte was read, because the worker held "
    "MARKETPLACE_MAX_CONNECTIONS already.",
)
BODY_BUDGET_WAITS = Counter(
    "marketplace_http_body_budget_waits_total",
    "Request bodies that had to wait for room under MARKETPLACE_MAX_BUFFERED_BODY_BYTES, by "
    "outcome (granted; timed_out: answered 408, or the request ended while it waited).",
    ["outcome"],
)
LIMITER_REFUSALS = Counter(
    "marketplace_rate_limit_refusals_total",
    "Requests refused with 429, by the limiter that refused them.",
    ["limiter"],
)
CACHE_LOOKUPS = Counter(
    "marketplace_cache_lookups_total",
    "Lookups of cached upstream answers, by cache and outcome (hit, miss).",
    ["cache", "outcome"],
)
UPSTREAM_CALLS = Counter(
    "marketplace_upstream_calls_total",
    "Calls to upstream services, by upstream and outcome "
    "(ok, not_found, error_status, timeout, network_error, invalid_body, too_large).",
    ["upstream", "outcome"],
)
UPSTREAM_DURATION = Histogram(
    "marketplace_upstream_call_duration_seconds",
    "Duration of upstream calls, by upstream.",
    ["upstream"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
WORKER_CACHE_LOOKUPS = Counter(
    "marketplace_worker_cache_lookups_total",
    "Lookups in the workers' caches of encoded catalogue answers, by outcome (hit, miss, expired: "
    "kept past the maximum age, off: no cache at that moment).",
    ["outcome"],
)
WEBHOOK_DELIVERIES = Counter(
    "marketplace_webhook_deliveries_total",
    "Webhook delivery attempts recorded by the serving workers, by event and outcome (delivered; "
    "failed: to be retried; given_up: failed at the end of its retry window).",
    ["event", "outcome"],
)
WEBHOOK_OUTCOMES = ("delivered", "failed", "given_up")
WEBHOOK_DELIVERY_LATENCY = Histogram(
    "marketplace_webhook_delivery_latency_seconds",
    "Time from an event's change to its delivery's success, by event.",
    ["event"],
    buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0, 86400.0),
)
WEBHOOK_QUEUE_DEPTH = Gauge(
    "marketplace_webhook_queue_depth",
    "Webhook work not done yet, read from the database at scrape time: events not yet dispatched "
    "(stage=events) and deliveries of enabled subscriptions not yet delivered (stage=deliveries, "
    "those waiting for a retry included).",
    ["stage"],
    multiprocess_mode="livemostrecent",
)
WEBHOOK_OLDEST_PENDING = Gauge(
    "marketplace_webhook_oldest_pending_seconds",
    "How long the oldest webhook work has been due, read at scrape time: an event not yet "
    "dispatched, or a delivery past its due time (not one waiting for its retry); 0 when none is.",
    multiprocess_mode="livemostrecent",
)
WORKER_CACHE_BYTES = Gauge(
    "marketplace_worker_cache_bytes",
    "Bytes held by the workers' caches of encoded answers (summed over live workers).",
    multiprocess_mode="livesum",
)
CHANGE_FEED_UP = Gauge(
    "marketplace_change_feed_up",
    "Workers whose change feed on PostgreSQL is proven (their own probe notice came back); a "
    "worker without it serves kept answers only within their maximum age.",
    multiprocess_mode="livesum",
)
DB_POOL_IN_USE = Gauge(
    "marketplace_db_pool_connections_in_use",
    "Database connections checked out of the pools (summed over live workers).",
    multiprocess_mode="livesum",
)
DB_POOL_CAPACITY = Gauge(
    "marketplace_db_pool_capacity",
    "Connections the pools may open (pool size plus overflow, summed over live workers).",
    multiprocess_mode="livesum",
)
DB_POOL_TIMEOUTS = Counter(
    "marketplace_db_pool_timeouts_total",
    "Requests that found no free database connection within the pool timeout.",
)
DB_WRITE_CONFLICTS = Counter(
    "marketplace_db_write_conflicts_total",
    "Write transactions the database refused for a conflict with a concurrent one (deadlock, "
    "serialization failure, SQLite busy), by outcome: retried, or given up after the last attempt.",
    ["outcome"],
)
READ_REPLICA_FAILURES = Counter(
    "marketplace_read_replica_failures_total",
    "Failed reads of read replicas, and replicas found failing by a check; their reads go to the primary meanwhile.",
)
READ_REPLICAS_FAILING = Gauge(
    "marketplace_read_replicas_failing",
    "Read replicas set aside as failing, until a check finds them answering again (summed over live "
    "workers: each worker judges each replica).",
    multiprocess_mode="livesum",
)
STORE_ERRORS = Counter(
    "marketplace_store_errors_total",
    "Failed calls to the shared store (Redis); limiters admit and caches miss meanwhile.",
)


BUILD_INFO = Gauge(
    "marketplace_build_info",
    "Always 1: the running package's version, the Python version, the database kind "
    "(sqlite, postgresql) and whether Redis is configured (yes, no).",
    ["version", "python", "database", "redis"],
    multiprocess_mode="livemax",
)
WORKERS_CONFIGURED = Gauge(
    "marketplace_workers_configured",
    "Worker processes the server of this host was started with (serve --workers); compare with the "
    "number of pids in process_start_time_seconds.",
    multiprocess_mode="livemax",
)

# The outcomes each labelled counter knows; every one has a series from the start.
REFUSED_HEAD_STATUSES = ("408", "431")
BODY_BUDGET_OUTCOMES = ("granted", "timed_out")
CACHE_OUTCOMES = ("hit", "miss")
UPSTREAM_OUTCOMES = (
    "ok",
    "not_found",
    "error_status",
    "timeout",
    "network_error",
    "invalid_body",
    "too_large",
)
WORKER_CACHE_OUTCOMES = ("hit", "miss", "expired", "off")
WRITE_CONFLICT_OUTCOMES = ("retried", "gave_up")


def package_version() -> str:
    try:
        return metadata.version("marketplace")
    except metadata.PackageNotFoundError:
        return "unknown"


def start_worker(
    *,
    database: str,
    redis: bool,
    limiters: Sequence[str],
    caches: Sequence[str],
    upstreams: Sequence[str],
    webhook_events: Sequence[str] = (),
) -> None:
    """Publish this worker's build information, and a 0 for every known label combination."""
    BUILD_INFO.labels(package_version(), platform.python_version(), database, "yes" if redis else "no").set(1)
    WORKERS_CONFIGURED.set(int(os.environ.get(WORKERS_VARIABLE) or 1))
    for status in REFUSED_HEAD_STATUSES:
        REFUSED_HEADS.labels(status)
    for outcome in BODY_BUDGET_OUTCOMES:
        BODY_BUDGET_WAITS.labels(outcome)
    for limiter in limiters:
        LIMITER_REFUSALS.labels(limiter)
    for cache in caches:
        for outcome in CACHE_OUTCOMES:
            CACHE_LOOKUPS.labels(cache, outcome)
    for upstream in upstreams:
        UPSTREAM_DURATION.labels(upstream)
        for outcome in UPSTREAM_OUTCOMES:
            UPSTREAM_CALLS.labels(upstream, outcome)
    for outcome in WORKER_CACHE_OUTCOMES:
        WORKER_CACHE_LOOKUPS.labels(outcome)
    for outcome in WRITE_CONFLICT_OUTCOMES:
        DB_WRITE_CONFLICTS.labels(outcome)
    for event in webhook_events:
        WEBHOOK_DELIVERY_LATENCY.labels(event)
        for outcome in WEBHOOK_OUTCOMES:
            WEBHOOK_DELIVERIES.labels(event, outcome)
    for stage in ("events", "deliveries"):
        WEBHOOK_QUEUE_DEPTH.labels(stage)


class WorkerProcesses(Collector):
    """The `process_*` series (CPU seconds, resident and virtual memory, start time, open and
    maximum file descriptors) of every live worker of this server, labelled by `pid`."""

    def __init__(self) -> None:
        self._pid: int = os.getpid()
        self._reader = ProcessCollector(pid=lambda: self._pid, registry=None)

    def describe(self) -> Iterable[Metric]:
        return []  # registering must not read the workers' figures

    def collect(self) -> Iterable[Metric]:
        merged: dict[str, Metric] = {}
        for pid in self.worker_pids():
            self._pid = pid
            for family in self._reader.collect():
                into = merged.setdefault(family.name, Metric(family.name, family.documentation, family.type))
                for found in family.samples:
                    into.add_sample(found.name, {**found.labels, "pid": str(pid)}, found.value)
        return merged.values()

    def worker_pids(self) -> list[int]:
        """This process, and with a shared folder its live siblings that keep files there. The live
        gauges of a process that died without saying so (killed) are dropped on the way."""
        own = os.getpid()
        folder = multiprocess_dir()
        if folder is None or not os.path.isdir("/proc/self"):
            return [own]
        supervisor = os.getppid()
        pids = {own}
        seen = {own}
        for path in glob.glob(os.path.join(folder, "*.db")):
            name = os.path.basename(path)[: -len(".db")]
            try:
                pid = int(name.rsplit("_", 1)[-1])
            except ValueError:
                continue
            if pid in seen:
                continue
            seen.add(pid)
            parent = _parent_pid(pid)
            if parent is None:
                multiprocess.mark_process_dead(pid, folder)  # type: ignore[no-untyped-call]
            elif parent == supervisor:
                pids.add(pid)
        return sorted(pids)


def _parent_pid(pid: int) -> int | None:
    """The parent of a running process; None when there is no such process (or it is a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[-1].split()
    except OSError:
        return None
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[1])


WORKER_PROCESSES = WorkerProcesses()
# The same `process_*` series, labelled by pid, whether or not the workers share a folder.
REGISTRY.unregister(PROCESS_COLLECTOR)
REGISTRY.register(WORKER_PROCESSES)


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROCESS_DIR_VARIABLE) or None


def exposition() -> bytes:
    """The text format of every metric, summed over worker processes when there are several."""
    TALLY.fold()
    if multiprocess_dir() is None:
        return generate_latest(REGISTRY)
    registry = CollectorRegistry()
    registry.register(WORKER_PROCESSES)
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return generate_latest(registry)


def worker_stopped() -> None:
    """Drop this worker's live gauges (pool usage) so that they stop counting in the sums."""
    TALLY.fold()
    if multiprocess_dir() is not None:
        multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]
