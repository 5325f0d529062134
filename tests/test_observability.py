"""What operators see: a JSON access-log line per request with its id (also sent back), warnings
for upstream failures and limiter refusals, no secret in any log, Prometheus metrics (summed over
workers), and `/up` naming what is degraded."""

from __future__ import annotations

import io
import json
import logging
import os
import platform
import re
import select
import threading
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from marketplace.api.v1 import GROUP_LIMITS, LIMITERS, ROUTES
from marketplace.config import Settings
from marketplace.http.observation import MAX_LOGGED_CHARS
from marketplace.telemetry.logs import (
    PIPE_BUF,
    JsonFormatter,
    QueuedLineHandler,
    RequestIdFilter,
    logging_config,
)
from marketplace.telemetry.metrics import ACCESS_LOG_DROPPED
from tests.api.helpers import catalogue_client
from tests.catalogue import MEMBER_CHAT_ID
from tests.conftest import GRANT_SECRET
from tests.profiles import sqlite_only
from tests.upstream import FakeUpstream, closed_port_url

ACCESS_FIELDS = {
    "request_id",
    "method",
    "path",
    "query",
    "route",
    "status",
    "duration_ms",
    "bytes",
    "client_ip",
}
SERVER_ID = "81384788765712384"
WIDGET_PATH = f"/chat-api/guilds/{SERVER_ID}/widget.json"


@pytest.fixture
def caplog(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Captured records, stamped with their request id when written (as the service's handler does)."""
    stamp = RequestIdFilter()
    caplog.handler.addFilter(stamp)
    yield caplog
    caplog.handler.removeFilter(stamp)


def json_lines(records: list[logging.LogRecord]) -> list[dict[str, object]]:
    """The records as the service writes them in JSON format."""
    formatter = JsonFormatter()
    return [json.loads(formatter.format(record)) for record in records]


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return json_lines([record for record in caplog.records if record.name == "marketplace.access"])


@sqlite_only
async def test_each_request_writes_one_json_access_line_with_its_fields(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="marketplace")
    response = await client.get("/api/v1/resource/1?size=3", headers={"X-Forwarded-For": "203.0.113.9"})
    [line] = access_lines(caplog)
    assert ACCESS_FIELDS <= set(line)
    assert {key: line[key] for key in ("method", "path", "query", "route", "status", "client_ip")} == {
        "method": "GET",
        "path": "/api/v1/resource/1",
        "query": "size=3",
        "route": "api.v1.resources.show",
        "status": 200,
        "client_ip": "203.0.113.9",
    }
    assert line["request_id"] == response.headers["x-request-id"]
    assert line["bytes"] == len(response.content)
    assert isinstance(line["duration_ms"], float)
    assert {"time", "level", "logger", "message"} <= set(line)


@sqlite_only
async def test_a_fresh_request_id_is_made_unless_the_caller_sent_a_plain_token(
    client: httpx.AsyncClient,
) -> None:
    made = (await client.get("/api/v1/resource/1")).headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", made)
    assert (await client.get("/api/v1/resource/1")).headers["x-request-id"] != made
    kept = await client.get("/api/v1/resource/1", headers={"X-Request-Id": "lb-7f3a.01:2"})
    assert kept.headers["x-request-id"] == "lb-7f3a.01:2"
    for hostile in ("a b", "x" * 129, "id\u00e9", ""):
        replaced = await client.get("/api/v1/resource/1", headers=[(b"X-Request-Id", hostile.encode())])
        assert re.fullmatch(r"[0-9a-f]{32}", replaced.headers["x-request-id"])


@sqlite_only
async def test_every_answer_carries_its_request_id(client: httpx.AsyncClient) -> None:
    for path in (
        "/api/v1/resource/999",
        "/api/v1/nothing",
        "/storage/none",
        "/up",
        "/metrics",
        "/openapi.json",
    ):
        assert re.fullmatch(r"[0-9a-f]{32}", (await client.get(path)).headers["x-request-id"]), path


@sqlite_only
async def test_secrets_never_reach_a_log(client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    licence_key = "BUYER-LICENCE-KEY-0451"
    await client.post(f"/api/v1/licence/{licence_key}")
    await client.post(
        f"/api/v1/chat/{MEMBER_CHAT_ID}/apply/1?custom_password={GRANT_SECRET}&x=1",
        data={"custom_password": GRANT_SECRET},
    )
    await client.post(
        f"/api/v1/chat/{MEMBER_CHAT_ID}/apply/1?Custom_Password=wrong-guess",
        json={"custom_password": "body-only"},
    )
    # What the service writes (the test's own HTTP client logs the URLs it calls; it is not the service).
    records = [record for record in caplog.records if not record.name.startswith(("httpx", "httpcore"))]
    written = "\n".join(json.dumps(line) for line in json_lines(records))
    written += "\n".join(record.getMessage() for record in records)
    for secret in (licence_key, GRANT_SECRET, GRANT_SECRET.replace(" ", "+"), "wrong-guess", "body-only"):
        assert secret not in written
    lines = access_lines(caplog)
    assert lines[0]["path"] == "/api/v1/licence/[hidden]"
    assert lines[1]["query"] == "custom_password=[hidden]&x=1"


LICENCE_KEY = "BUYER-LICENCE-KEY-0451"


@sqlite_only
@pytest.mark.parametrize(
    ("method", "path", "headers", "body", "status"),
    [
        ("GET", f"/api/v1/licence/{LICENCE_KEY}", {}, b"", 405),
        ("HEAD", f"/api/v1/licence/{LICENCE_KEY}", {}, b"", 405),
        ("PUT", f"/api/v1/licence/{LICENCE_KEY}", {}, b"", 405),
        ("BREW", f"/api/v1/licence/{LICENCE_KEY}", {}, b"", 405),
        ("POST", f"/api/v1/licence/AB%2F{LICENCE_KEY}", {}, b"", 404),
        ("POST", f"/api/v1/licence/{LICENCE_KEY}/extra", {}, b"", 404),
        ("POST", f"/api/v1/LICENCE/{LICENCE_KEY}", {}, b"", 404),
        ("POST", f"/api/v1/licence/line%0A{LICENCE_KEY}", {}, b"", 200),
        ("POST", f"/api/licence/{LICENCE_KEY}", {}, b"", 404),
        (
            "OPTIONS",
            f"/api/v1/licence/{LICENCE_KEY}",
            {"Origin": "https://bot.example", "Access-Control-Request-Method": "POST"},
            b"",
            204,
        ),
        ("POST", f"/api/v1/licence/{LICENCE_KEY}", {}, b"x" * (1024 * 1024 + 1), 413),
    ],
)
async def test_a_licence_key_is_hidden_on_every_method_and_status(
    client: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes,
    status: int,
) -> None:
    caplog.set_level(logging.DEBUG)
    response = await client.request(method, path, headers=headers, content=body)
    assert response.status_code == status
    records = [record for record in caplog.records if not record.name.startswith(("httpx", "httpcore"))]
    written = "\n".join(json.dumps(line) for line in json_lines(records))
    written += "\n".join(record.getMessage() for record in records)
    assert LICENCE_KEY not in written
    [line] = access_lines(caplog)
    assert str(line["path"]).lower().endswith("/licence/[hidden]")
    assert LICENCE_KEY not in (await client.get("/metrics")).text


@sqlite_only
async def test_logged_paths_are_capped_and_cannot_forge_lines(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="marketplace")
    await client.get("/api/v1/gift/" + "A" * 5000 + "?q=" + "b" * 5000)
    await client.get("/api/v1/gift/line%0Aforged%20200")
    long_line, forged = access_lines(caplog)
    assert (
        len(str(long_line["path"])) <= MAX_LOGGED_CHARS and len(str(long_line["query"])) <= MAX_LOGGED_CHARS
    )
    text_line = forged["message"]
    assert "\n" not in str(forged["path"]) and "\n" not in str(text_line)


async def test_upstream_failures_are_warnings_tied_to_their_request(
    client: httpx.AsyncClient, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="marketplace")
    upstream.answer_raw(WIDGET_PATH, b"oops", status=502)
    response = await client.get(f"/api/v1/chat/{SERVER_ID}")
    assert response.status_code == 404
    [warning] = [record for record in caplog.records if record.name == "marketplace.upstream"]
    assert warning.levelno == logging.WARNING
    [line] = json_lines([warning])
    assert line["request_id"] == response.headers["x-request-id"]
    assert "chat upstream answered 502" in str(line["message"])


async def test_an_upstream_saying_no_such_server_is_not_a_failure(
    client: httpx.AsyncClient, upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="marketplace")
    assert (await client.get(f"/api/v1/chat/{SERVER_ID}")).status_code == 404  # upstream answers 404
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


@sqlite_only
async def test_limiter_refusals_are_warnings(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="marketplace")
    for _ in range(61):
        last = await client.get("/api/v1/resource/search")
    assert last.status_code == 429
    [warning] = [record for record in caplog.records if record.name == "marketplace.limits"]
    assert warning.levelno == logging.WARNING
    assert "search limiter refused" in warning.getMessage()


def sample(exposition: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(exposition):
        for found in family.samples:
            if found.name == name and all(found.labels.get(k) == v for k, v in labels.items()):
                return float(found.value)
    return 0.0


async def test_metrics_count_requests_refusals_cache_upstream_and_the_pool(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    before = (await client.get("/metrics")).text
    upstream.answer_json(WIDGET_PATH, {"id": SERVER_ID, "name": "Chat"})
    for _ in range(2):
        await client.get(f"/api/v1/chat/{SERVER_ID}")
    for _ in range(61):
        await client.get("/api/v1/resource/search")
    await client.get("/api/v1/resource/1")
    after = await client.get("/metrics")
    assert after.status_code == 200
    assert after.headers["content-type"].startswith("text/plain")
    text = after.text

    def grew(name: str, **labels: str) -> float:
        return sample(text, name, **labels) - sample(before, name, **labels)

    assert (
        grew("marketplace_http_requests_total", route="api.v1.resources.search", method="GET", status="200")
        == 60
    )
    assert (
        grew("marketplace_http_requests_total", route="api.v1.resources.search", method="GET", status="429")
        == 1
    )
    assert (
        grew("marketplace_http_request_duration_seconds_count", route="api.v1.resources.show", status="200")
        == 1
    )
    assert grew("marketplace_rate_limit_refusals_total", limiter="search") == 1
    assert grew("marketplace_cache_lookups_total", cache="chat-server", outcome="miss") == 1
    assert grew("marketplace_cache_lookups_total", cache="chat-server", outcome="hit") == 1
    assert grew("marketplace_upstream_calls_total", upstream="chat", outcome="ok") == 1
    assert "marketplace_db_pool_connections_in_use" in text
    assert sample(text, "marketplace_db_pool_capacity") >= 20


@sqlite_only
async def test_metrics_labels_never_carry_caller_text(client: httpx.AsyncClient) -> None:
    await client.get("/api/v1/no-such-route-" + "x" * 50)
    await client.request("BREW", "/api/v1/resource/1")
    text = (await client.get("/metrics")).text
    assert "no-such-route" not in text and "BREW" not in text
    assert sample(text, "marketplace_http_requests_total", route="unmatched", method="GET", status="404") >= 1
    assert (
        sample(text, "marketplace_http_requests_total", route="unmatched", method="other", status="405") >= 1
    )


@sqlite_only
async def test_up_is_200_and_names_redis_as_degraded_while_redis_is_down(settings: Settings) -> None:
    redis_down = closed_port_url().replace("http://", "redis://")
    async with catalogue_client(settings, redis_url=redis_down) as client:
        api = await client.get("/api/v1/resource/1")
        health = await client.get("/up")
    assert api.status_code == 200
    assert health.status_code == 200
    assert health.json() == {
        "status": "degraded",
        "checks": {"database": "ok", "redis": "failing", "webhooks": "ok"},
        "degraded": ["redis: rate limits are not enforced and upstream answers are not cached"],
    }


async def test_up_is_ok_with_every_check_named(client: httpx.AsyncClient, settings: Settings) -> None:
    health = await client.get("/up")
    expected = {"database": "ok", "redis": "ok"} if settings.redis_url else {"database": "ok"}
    if settings.database_url.startswith("postgresql"):
        expected["changes"] = "ok"
    expected["webhooks"] = "ok"
    assert (health.status_code, health.json()) == (200, {"status": "ok", "checks": expected, "degraded": []})


def test_the_logging_config_writes_json_or_text_and_silences_the_servers_own_access_log() -> None:
    json_config = logging_config("json", "info")
    assert json_config["formatters"]["service"] == {"()": JsonFormatter}
    assert json_config["loggers"]["uvicorn.access"]["handlers"] == []
    text_config = logging_config("text", "warning")
    assert "%(request_id)s" in text_config["formatters"]["service"]["format"]
    assert text_config["loggers"]["marketplace"]["level"] == "WARNING"


def sample_names(exposition: str) -> set[str]:
    return {found.name for family in text_string_to_metric_families(exposition) for found in family.samples}


def has_series(exposition: str, name: str, **labels: str) -> bool:
    return any(
        found.name == name and all(found.labels.get(k) == v for k, v in labels.items())
        for family in text_string_to_metric_families(exposition)
        for found in family.samples
    )


async def test_build_info_names_the_version_python_database_and_redis(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    text = (await client.get("/metrics")).text
    build = {
        "version": metadata.version("marketplace"),
        "python": platform.python_version(),
        "database": "postgresql" if settings.database_url.startswith("postgresql") else "sqlite",
        "redis": "yes" if settings.redis_url else "no",
    }
    assert has_series(text, "marketplace_build_info", **build)
    assert sample(text, "marketplace_build_info", **build) == 1


async def test_every_limiter_cache_upstream_and_outcome_has_its_series_from_the_start(
    client: httpx.AsyncClient,
) -> None:
    text = (await client.get("/metrics")).text
    expected: list[tuple[str, dict[str, str]]] = [
        *(("marketplace_rate_limit_refusals_total", {"limiter": name}) for name in LIMITERS),
        *(
            ("marketplace_cache_lookups_total", {"cache": cache, "outcome": outcome})
            for cache in ("chat-server", "stats-url", "stats-chart")
            for outcome in ("hit", "miss")
        ),
        *(
            ("marketplace_upstream_calls_total", {"upstream": upstream, "outcome": outcome})
            for upstream in ("chat", "stats")
            for outcome in (
                "ok",
                "not_found",
                "error_status",
                "timeout",
                "network_error",
                "invalid_body",
                "too_large",
            )
        ),
        *(
            ("marketplace_upstream_call_duration_seconds_count", {"upstream": name})
            for name in ("chat", "stats")
        ),
        *(("marketplace_http_refused_heads_total", {"status": status}) for status in ("408", "431")),
        *(
            ("marketplace_http_body_budget_waits_total", {"outcome": name})
            for name in ("granted", "timed_out")
        ),
        *(
            ("marketplace_worker_cache_lookups_total", {"outcome": name})
            for name in ("hit", "miss", "expired", "off")
        ),
        *(("marketplace_db_write_conflicts_total", {"outcome": name}) for name in ("retried", "gave_up")),
    ]
    missing = [(name, labels) for name, labels in expected if not has_series(text, name, **labels)]
    assert missing == []


def test_every_limiter_the_routes_use_is_declared() -> None:
    rules = [*GROUP_LIMITS, *(rule for route in ROUTES for rule in route.limits)]
    used = {limit.name for rule in rules for limit in rule("203.0.113.9", {"key": "K"})}
    assert used == set(LIMITERS)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process figures come from /proc (Linux)")
async def test_a_single_process_has_its_process_series_labelled_by_its_pid(client: httpx.AsyncClient) -> None:
    text = (await client.get("/metrics")).text
    for name in (
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
        "process_open_fds",
    ):
        pids = [
            found.labels.get("pid")
            for family in text_string_to_metric_families(text)
            for found in family.samples
            if found.name == name
        ]
        assert pids == [str(os.getpid())], name
    assert sample(text, "process_resident_memory_bytes") > 0
    assert sample(text, "marketplace_workers_configured") == 1


ALERT_RULES = Path(__file__).parent.parent / "deploy" / "prometheus" / "alerts.yml"
# What Prometheus itself adds to every target.
SCRAPE_SERIES = {"up"}
_PROMQL_WORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
}


def alert_expressions(rules: str) -> list[str]:
    """The `expr` of every rule of a rules file (one line, or a `|` block)."""
    expressions: list[str] = []
    lines = rules.splitlines()
    for number, line in enumerate(lines):
        key, _, value = line.strip().partition(":")
        if key != "expr":
            continue
        if value.strip() != "|":
            expressions.append(value.strip())
            continue
        indent = len(line) - len(line.lstrip())
        block: list[str] = []
        for later in lines[number + 1 :]:
            if len(later) - len(later.lstrip()) <= indent:
                break
            block.append(later.strip())
        expressions.append(" ".join(block))
    return expressions


def series_names(expression: str) -> set[str]:
    """The series a PromQL expression reads: names left once label matchers, ranges, strings,
    grouping labels, functions and operators are taken out."""
    text = re.sub(r'"[^"]*"', "", expression)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for found in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        followed = text[found.end() :].lstrip()
        if found.group() in _PROMQL_WORDS or followed.startswith("("):
            continue
        names.add(found.group())
    return names


async def test_every_series_the_alert_rules_read_is_exported(client: httpx.AsyncClient) -> None:
    await client.get("/api/v1/resource/1")  # the latency histogram has buckets once a request is answered
    exported = sample_names((await client.get("/metrics")).text)
    read = set().union(
        *(series_names(expression) for expression in alert_expressions(ALERT_RULES.read_text()))
    )
    assert {
        "marketplace_http_requests_total",
        "marketplace_change_feed_up",
        "process_start_time_seconds",
    } <= read
    assert sorted(read - exported - SCRAPE_SERIES) == []


def access_record(number: int, query: str = "") -> logging.LogRecord:
    """An access-log record as the recorder writes it (its request id stamped as the filter does)."""
    record = logging.LogRecord("marketplace.access", logging.INFO, __file__, 0, "GET /%s", (number,), None)
    record.fields = {"request_id": f"r{number}", "path": f"/{number}", "query": query}
    record.request_id = f"r{number}"
    return record


def warning_record(text: str) -> logging.LogRecord:
    record = logging.LogRecord("marketplace.upstream", logging.WARNING, __file__, 0, "%s", (text,), None)
    record.request_id = "-"
    return record


class StalledSink(io.StringIO):
    """A standard error nobody reads: its first write waits until released."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.released = threading.Event()
        self.writes: list[str] = []

    def fileno(self) -> int:
        raise io.UnsupportedOperation("no descriptor")

    def write(self, text: str) -> int:
        self.entered.set()
        self.released.wait()
        self.writes.append(text)
        return len(text)


def queued_handler(stream: IO[str], **limits: Any) -> QueuedLineHandler:
    handler = QueuedLineHandler(stream, **limits)
    handler.setFormatter(JsonFormatter())
    return handler


def read_lines(descriptor: int, count: int) -> list[str]:
    """`count` lines from a pipe, waiting for them at most 10 s."""
    received = b""
    deadline = time.monotonic() + 10
    while received.count(b"\n") < count and time.monotonic() < deadline:
        ready, _, _ = select.select([descriptor], [], [], 0.05)
        if ready:
            received += os.read(descriptor, 65536)
    return received.decode("utf-8").splitlines()


def test_queued_log_lines_are_written_without_a_flush_while_the_service_runs() -> None:
    read_end, write_end = os.pipe()
    stream = os.fdopen(write_end, "w")
    handler = queued_handler(stream)
    record = access_record(1)
    try:
        handler.handle(record)
        [line] = read_lines(read_end, 1)
        assert line == JsonFormatter().format(record)
    finally:
        handler.close()
        stream.close()
        os.close(read_end)


def test_queued_log_lines_keep_their_order_warnings_included_and_a_flush_writes_them_all() -> None:
    read_end, write_end = os.pipe()
    stream = os.fdopen(write_end, "w")
    handler = queued_handler(stream, flush_seconds=60.0)
    expected: list[str] = []
    try:
        for number in range(300):
            record = warning_record(f"upstream {number}") if number % 50 == 0 else access_record(number)
            expected.append(JsonFormatter().format(record))
            handler.handle(record)
        handler.flush()
        assert read_lines(read_end, 300) == expected
    finally:
        handler.close()
        stream.close()
        os.close(read_end)


def test_each_write_of_queued_log_lines_holds_whole_lines_within_pipe_buf() -> None:
    sink = StalledSink()
    sink.released.set()
    handler = queued_handler(sink, flush_seconds=60.0)
    for number in range(200):
        handler.handle(access_record(number, query="q=" + "x" * (number * 7 % 900)))
    handler.flush()
    handler.close()
    assert len(sink.writes) > 1
    assert all(text.endswith("\n") and len(text.encode()) <= PIPE_BUF for text in sink.writes)
    lines = "".join(sink.writes).splitlines()
    assert [json.loads(line)["request_id"] for line in lines] == [f"r{number}" for number in range(200)]


def test_a_sink_that_does_not_drain_never_blocks_logging_and_the_dropped_lines_are_counted() -> None:
    sink = StalledSink()
    handler = queued_handler(sink, max_pending_lines=100)
    dropped_before = ACCESS_LOG_DROPPED._value.get()
    handler.handle(access_record(0))
    assert sink.entered.wait(10)  # the writer now waits on the sink with line 0
    for number in range(1, 106):  # lines 1 to 100 wait in the queue; 101 to 105 find it full
        handler.handle(access_record(number))
    assert ACCESS_LOG_DROPPED._value.get() - dropped_before == 5
    sink.released.set()
    handler.flush()
    handler.close()
    lines = "".join(sink.writes).splitlines()
    assert [json.loads(line)["request_id"] for line in lines] == [f"r{number}" for number in range(101)]
