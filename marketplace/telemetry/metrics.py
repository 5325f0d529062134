"""The service's Prometheus metrics and their exposition at `GET /metrics`.

With several worker processes (`serve --workers N`), `serve` points `PROMETHEUS_MULTIPROC_DIR` at
a fresh folder before any worker starts: every worker then writes its values there, and whichever
worker answers a scrape sums them all. Without it (one process, tests) the default registry is
used, with the process collectors.

Labels never carry caller-chosen text: routes are route names (or a fixed category for paths no
route claims), statuses are numbers, limiters and caches are the service's own names.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from marketplace.telemetry import MULTIPROCESS_DIR_VARIABLE

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
    "outcome (granted; timed_out: answered 408; gone: the client left).",
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
STORE_ERRORS = Counter(
    "marketplace_store_errors_total",
    "Failed calls to the shared store (Redis); limiters admit and caches miss meanwhile.",
)


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROCESS_DIR_VARIABLE) or None


def exposition() -> bytes:
    """The text format of every metric, summed over worker processes when there are several."""
    if multiprocess_dir() is None:
        return generate_latest(REGISTRY)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return generate_latest(registry)


def worker_stopped() -> None:
    """Drop this worker's live gauges (pool usage) so that they stop counting in the sums."""
    if multiprocess_dir() is not None:
        multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]
