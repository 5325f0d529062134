"""`marketplace serve` as operators run it: its log format and level, and metrics that add up
over several worker processes."""

from __future__ import annotations

import json
import os
import platform
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from marketplace.cli import served_base_url
from marketplace.config import Settings
from tests.catalogue import MEMBER_CHAT_ID, OWNER_CHAT_ID
from tests.conftest import GRANT_SECRET
from tests.live import (
    MARKETPLACE,
    environment,
    free_port,
    load_catalogue,
    running_service,
    standalone_settings,
    stop,
)
from tests.profiles import REDIS_URL, require_redis, unique_name


@pytest.fixture
def operator_settings(migrated_template: Path, tmp_path: Path) -> Settings:
    settings = standalone_settings(tmp_path, migrated_template)
    load_catalogue(settings)
    return settings


def with_redis(settings: Settings) -> Settings:
    """`settings` with the Redis that several workers share limits and caches in (a key prefix of
    their own)."""
    require_redis()
    return settings.model_copy(update={"redis_url": REDIS_URL, "redis_prefix": unique_name("mp_test") + ":"})


def wait_for_lines(log: Path, needle: str, deadline_seconds: float = 10.0) -> list[str]:
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        if any(needle in line for line in lines):
            return lines
        time.sleep(0.05)
    raise AssertionError(f"no line with {needle!r} in {log}")


def test_a_single_worker_serves_its_metrics(operator_settings: Settings, tmp_path: Path) -> None:
    with running_service(environment(operator_settings), tmp_path) as server:
        for _ in range(3):
            httpx.get(f"{server.base_url}/api/v1/resource/1")
        scrape = httpx.get(f"{server.base_url}/metrics")
    show = {"route": "api.v1.resources.show", "method": "GET", "status": "200"}
    assert sample(scrape.text, "marketplace_http_requests_total", **show) == 3
    assert sample(scrape.text, "marketplace_db_pool_capacity") == 20


def test_serve_writes_json_lines_by_default(operator_settings: Settings, tmp_path: Path) -> None:
    with running_service(environment(operator_settings), tmp_path) as server:
        answer = httpx.get(f"{server.base_url}/api/v1/resource/1?size=2")
        lines = wait_for_lines(server.log, "api.v1.resources.show")
    records = [json.loads(line) for line in lines]  # every line is JSON, the server's own included
    [access] = [record for record in records if record.get("route") == "api.v1.resources.show"]
    assert access["request_id"] == answer.headers["x-request-id"]
    assert (access["status"], access["path"], access["query"]) == (200, "/api/v1/resource/1", "size=2")
    assert any(record["logger"].startswith("uvicorn") for record in records)


def test_serve_writes_text_with_log_format_text(operator_settings: Settings, tmp_path: Path) -> None:
    with running_service(environment(operator_settings), tmp_path, "--log-format", "text") as server:
        answer = httpx.get(f"{server.base_url}/api/v1/resource/1")
        lines = wait_for_lines(server.log, "api.v1.resources.show")
    [access] = [line for line in lines if "api.v1.resources.show" in line]
    assert f"[{answer.headers['x-request-id']}]" in access
    assert "GET /api/v1/resource/1 200" in access
    assert not access.startswith("{")


def test_serve_log_level_warning_leaves_out_the_access_log(
    operator_settings: Settings, tmp_path: Path
) -> None:
    with running_service(environment(operator_settings), tmp_path, "--log-level", "warning") as server:
        for _ in range(61):
            httpx.get(f"{server.base_url}/api/v1/resource/search")
        lines = wait_for_lines(server.log, "search limiter refused")
    assert not [line for line in lines if "marketplace.access" in line]


def test_an_invalid_setting_is_one_line_naming_it(operator_settings: Settings, tmp_path: Path) -> None:

    env = environment(operator_settings, MARKETPLACE_TRUSTED_PROXIES="10.0.0.0/40")
    result = subprocess.run(
        [MARKETPLACE, "serve"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "marketplace: invalid setting MARKETPLACE_TRUSTED_PROXIES: Value error, not an address or CIDR: '10.0.0.0/40'"
    ]


def sample(exposition: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(exposition):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return float(found.value)
    return 0.0


def test_metrics_add_up_over_several_workers(operator_settings: Settings, tmp_path: Path) -> None:
    with running_service(environment(with_redis(operator_settings)), tmp_path, "--workers", "2") as server:
        for _ in range(30):
            # A new connection each time, so that both workers answer some.
            with httpx.Client(base_url=server.base_url) as fresh:
                assert fresh.get("/api/v1/resource/1").status_code == 200
        for _ in range(8):
            with httpx.Client(base_url=server.base_url) as fresh:
                scrape = fresh.get("/metrics")
            assert scrape.status_code == 200
            # Whichever worker answers the scrape, it reports every worker's requests...
            show = {"route": "api.v1.resources.show", "method": "GET", "status": "200"}
            assert sample(scrape.text, "marketplace_http_requests_total", **show) == 30
            # ...and both workers' pools (10 + 10 connections each by default).
            assert sample(scrape.text, "marketplace_db_pool_capacity") == 40


def _mapped_files(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps", encoding="utf-8") as maps:
        return {line.split()[-1] for line in maps if "/" in line}


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/<pid>/maps (Linux)")
def test_the_supervisor_of_several_workers_does_not_load_the_application(
    operator_settings: Settings, tmp_path: Path
) -> None:
    with running_service(environment(with_redis(operator_settings)), tmp_path, "--workers", "2") as server:
        assert httpx.get(f"{server.base_url}/api/v1/resource/1").status_code == 200
        supervisor = _mapped_files(server.process.pid)
    # Compiled parts of the settings' validation and of the database drivers: a worker maps them,
    # the supervisor must not.
    heavy = [
        path for path in supervisor if "pydantic_core" in path or "sqlalchemy" in path or "asyncpg" in path
    ]
    assert heavy == []
    assert any("httptools" in path for path in supervisor)  # it did map what it runs


# `marketplace serve` up to the point where the server would start, in a process of its own: it then
# prints the migration tooling's modules that the process serving the one worker has loaded.
_SERVE_AND_LIST_MIGRATION_MODULES = """
import sys
import uvicorn
from marketplace.cli import main

def instead_of_serving(*args, **kwargs):
    print(sorted(name for name in sys.modules if name.split(".")[0] == "alembic"))

uvicorn.run = instead_of_serving
main(["serve", "--port", sys.argv[1]], standalone_mode=False)
"""


def test_a_single_worker_serves_without_the_migration_tooling_loaded(
    operator_settings: Settings, tmp_path: Path
) -> None:
    """The schema check before serving runs in a short-lived process, so that the one worker's
    process does not keep Alembic's modules (about 9 MiB of a worker's memory)."""
    checked = subprocess.run(
        [sys.executable, "-c", _SERVE_AND_LIST_MIGRATION_MODULES, str(free_port())],
        env=environment(operator_settings),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip().splitlines()[-1] == "[]"


def test_several_workers_refuse_to_start_on_an_invalid_setting_with_one_line(
    operator_settings: Settings, tmp_path: Path
) -> None:

    line = refusal_of_serve(
        environment(operator_settings, MARKETPLACE_LOG_LEVEL="loud"), tmp_path, "--workers", "2"
    )
    assert line.startswith("marketplace: invalid setting MARKETPLACE_LOG_LEVEL: ")


@pytest.fixture
def key_pair(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM), made by the openssl command."""
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (it makes the test certificate)")
    certificate, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(certificate),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return certificate, key


def serve_https(
    env: dict[str, str], workdir: Path, port: int, certificate: Path, key: Path, workers: str = "1"
) -> subprocess.Popen[bytes]:
    """`marketplace serve` over HTTPS with the key pair, on `port`."""
    return subprocess.Popen(
        [
            MARKETPLACE,
            "serve",
            "--port",
            str(port),
            "--workers",
            workers,
            "--ssl-certfile",
            str(certificate),
            "--ssl-keyfile",
            str(key),
        ],
        env=env,
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_for_https(client: httpx.Client) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            client.get("/up")
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_answers_over_https_with_the_given_certificate_and_key(
    operator_settings: Settings, tmp_path: Path, key_pair: tuple[Path, Path], workers: str
) -> None:
    certificate, key = key_pair
    port = free_port()
    settings = operator_settings if workers == "1" else with_redis(operator_settings)
    process = serve_https(environment(settings), tmp_path, port, certificate, key, workers)
    trusted = ssl.create_default_context(cafile=str(certificate))
    try:
        with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=trusted, timeout=2.0) as client:
            wait_for_https(client)
            answer = client.get("/api/v1/resource/version/1")
            assert answer.status_code == 200
            assert answer.headers["x-service-api-version"] == "1"
            with pytest.raises(httpx.TransportError):
                httpx.get(f"http://127.0.0.1:{port}/up", timeout=2.0).raise_for_status()
    finally:
        stop(process)


def test_the_bot_reaches_its_platforms_paths_over_https_when_the_names_are_configured(
    operator_settings: Settings, tmp_path: Path, key_pair: tuple[Path, Path]
) -> None:
    certificate, key = key_pair
    env = environment(operator_settings, MARKETPLACE_CHAT_NAME="discord", MARKETPLACE_STATS_NAME="bstats")
    trusted = ssl.create_default_context(cafile=str(certificate))
    port = free_port()
    process = serve_https(env, tmp_path, port, certificate, key)
    try:
        with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=trusted, timeout=5.0) as bot:
            wait_for_https(bot)
            member = bot.post(f"/api/v1/discord/{MEMBER_CHAT_ID}")
            assert member.status_code == 200
            assert member.json()["user"]["name"] == "bob"
            granted = bot.post(
                f"/api/v1/discord/{MEMBER_CHAT_ID}/apply/8", json={"custom_password": GRANT_SECRET}
            )
            assert granted.content == b'{"message":"ok"}'
            owned = bot.post("/api/v1/discord", json={"discord": MEMBER_CHAT_ID}).json()
            assert 8 in [access["plugin_id"] for access in owned]
            assert bot.get("/api/v1/author/1").json() == {"id": 1, "discord": OWNER_CHAT_ID, "name": "Alice"}
            assert bot.get("/api/v1/bstats/3/players").status_code == 404
            assert bot.post(f"/api/v1/chat/{MEMBER_CHAT_ID}").status_code == 404
    finally:
        stop(process)


def test_a_platform_name_that_collides_with_a_route_is_refused_at_start_up(
    operator_settings: Settings, tmp_path: Path
) -> None:
    line = refusal_of_serve(environment(operator_settings, MARKETPLACE_CHAT_NAME="resource"), tmp_path)
    assert line.startswith("marketplace: invalid setting MARKETPLACE_CHAT_NAME: ")
    assert "'resource' is already a segment of the API's paths" in line


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"MARKETPLACE_SSL_CERTFILE": "cert.pem"},
            "invalid setting MARKETPLACE_SSL_KEYFILE: Value error, set both",
        ),
        (
            {"MARKETPLACE_SSL_CERTFILE": "missing.pem", "MARKETPLACE_SSL_KEYFILE": "missing-key.pem"},
            "cannot read MARKETPLACE_SSL_CERTFILE missing.pem: No such file or directory",
        ),
    ],
)
def test_a_certificate_without_a_usable_key_is_refused_in_one_line(
    operator_settings: Settings, tmp_path: Path, changes: dict[str, str], message: str
) -> None:

    line = refusal_of_serve(environment(operator_settings, **changes), tmp_path)
    assert line.startswith("marketplace: " + message)


def refusal_of_serve(env: dict[str, str], workdir: Path, *serve_args: str) -> str:
    """The one line `marketplace serve` exits 1 with (it fails the test to start at all)."""
    result = subprocess.run(
        [MARKETPLACE, "serve", *serve_args],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    return line


def labelled_values(exposition: str, name: str, label: str) -> dict[str, float]:
    """The samples of one series name, by the value of one of their labels."""
    return {
        found.labels[label]: float(found.value)
        for family in text_string_to_metric_families(exposition)
        for found in family.samples
        if found.name == name
    }


def parent_pid(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return int(stat.read().rsplit(b")", 1)[-1].split()[1])


def scrape_until(base_url: str, done: Callable[[str], bool], deadline_seconds: float = 30.0) -> str:
    """A scrape (each on a fresh connection, so that any worker may answer) for which `done` holds."""
    deadline = time.monotonic() + deadline_seconds
    while True:
        with httpx.Client(base_url=base_url) as fresh:
            text = fresh.get("/metrics").text
        if done(text) or time.monotonic() > deadline:
            return text
        time.sleep(0.2)


PROCESS_SERIES = (
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_start_time_seconds",
    "process_open_fds",
    "process_max_fds",
)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process figures come from /proc (Linux)")
def test_each_worker_has_its_own_process_series_labelled_by_pid(
    operator_settings: Settings, tmp_path: Path
) -> None:
    with running_service(environment(with_redis(operator_settings)), tmp_path, "--workers", "2") as server:

        def both_workers(text: str) -> bool:
            return len(labelled_values(text, "process_start_time_seconds", "pid")) == 2

        scrapes = [scrape_until(server.base_url, both_workers) for _ in range(6)]
        workers = {int(pid) for pid in labelled_values(scrapes[0], "process_start_time_seconds", "pid")}
        supervisor = server.process.pid
        assert [parent_pid(pid) for pid in sorted(workers)] == [supervisor, supervisor]
    for text in scrapes:  # whichever worker answered
        for name in PROCESS_SERIES:
            by_pid = labelled_values(text, name, "pid")
            assert {int(pid) for pid in by_pid} == workers, name
        assert all(rss > 0 for rss in labelled_values(text, "process_resident_memory_bytes", "pid").values())
        assert sample(text, "marketplace_workers_configured") == 2


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process figures come from /proc (Linux)")
def test_a_killed_workers_series_are_gone_from_the_next_scrape(
    operator_settings: Settings, tmp_path: Path
) -> None:
    with running_service(environment(with_redis(operator_settings)), tmp_path, "--workers", "2") as server:

        def pids(text: str) -> set[str]:
            return set(labelled_values(text, "process_start_time_seconds", "pid"))

        first = pids(scrape_until(server.base_url, lambda text: len(pids(text)) == 2))
        killed = min(first)
        os.kill(int(killed), signal.SIGKILL)

        # The supervisor starts a new worker in its place; the killed one never shows again.
        def replaced(text: str) -> bool:
            return len(pids(text) - first) == 1 and sample(text, "marketplace_db_pool_capacity") >= 40

        text = scrape_until(server.base_url, replaced)
        assert replaced(text)
        assert killed not in pids(text) and len(pids(text)) == 2
        # Its live gauges went with it: the pools of two workers, not three.
        assert sample(text, "marketplace_db_pool_capacity") == 40


def test_a_fresh_server_has_every_limiter_series_at_zero_and_its_build_info(
    operator_settings: Settings, tmp_path: Path
) -> None:
    with running_service(environment(with_redis(operator_settings)), tmp_path, "--workers", "2") as server:
        text = scrape_until(
            server.base_url, lambda text: len(labelled_values(text, "process_start_time_seconds", "pid")) == 2
        )
    assert labelled_values(text, "marketplace_rate_limit_refusals_total", "limiter") == {
        "api": 0,
        "search": 0,
        "licence_key": 0,
        "licence_ip": 0,
        "feeds": 0,
    }
    assert sample(text, "marketplace_db_write_conflicts_total", outcome="gave_up") == 0
    assert 'marketplace_db_write_conflicts_total{outcome="gave_up"}' in text
    [build] = [
        found
        for family in text_string_to_metric_families(text)
        for found in family.samples
        if found.name == "marketplace_build_info"
    ]
    assert build.value == 1
    assert build.labels == {
        "version": metadata.version("marketplace"),
        "python": platform.python_version(),
        "database": "sqlite",
        "redis": "yes",
    }


def refusal_of(env: dict[str, str], workdir: Path, *serve_args: str, exit_code: int) -> str:
    result = subprocess.run(
        [MARKETPLACE, "serve", *serve_args],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == exit_code, result.stderr
    [line] = result.stderr.splitlines()
    return line


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_busy_port_is_refused_in_one_line(
    operator_settings: Settings, tmp_path: Path, workers: str
) -> None:
    settings = operator_settings if workers == "1" else with_redis(operator_settings)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]

        line = refusal_of(
            environment(settings), tmp_path, "--port", str(port), "--workers", workers, exit_code=1
        )

    assert line == (
        f"marketplace: cannot listen on 127.0.0.1:{port}: Address already in use"
        " (another process listens there: stop it or choose another --port)"
    )


@pytest.mark.parametrize(
    ("given", "missing"), [("--ssl-keyfile", "--ssl-certfile"), ("--ssl-certfile", "--ssl-keyfile")]
)
def test_half_a_key_pair_is_a_usage_error_naming_the_option_typed(
    operator_settings: Settings, tmp_path: Path, given: str, missing: str
) -> None:
    variable = "MARKETPLACE_" + missing.removeprefix("--").replace("-", "_").upper()

    line = refusal_of(environment(operator_settings), tmp_path, given, "some.pem", exit_code=2)

    assert line == (
        f"marketplace: {given} needs {missing} too (or {variable}): HTTPS takes both"
        " (see `marketplace serve --help`)"
    )


def test_a_missing_certificate_file_is_refused_naming_the_option(
    operator_settings: Settings, tmp_path: Path, key_pair: tuple[Path, Path]
) -> None:
    _, key = key_pair
    args = ("--ssl-certfile", "missing.pem", "--ssl-keyfile", str(key))

    line = refusal_of(environment(operator_settings), tmp_path, *args, exit_code=1)

    assert line == "marketplace: cannot read --ssl-certfile missing.pem: No such file or directory"


def test_several_workers_without_redis_are_refused_in_one_line(
    operator_settings: Settings, tmp_path: Path
) -> None:
    line = refusal_of(environment(operator_settings), tmp_path, "--workers", "3", exit_code=1)

    assert line == (
        "marketplace: --workers 3 needs MARKETPLACE_REDIS_URL: without Redis each worker would keep"
        " its own limits and caches"
    )


def logo_of_resource_1(client: httpx.Client) -> str:
    return str(client.get("/api/v1/resource/1").json()["logo"])


def test_without_a_base_url_the_urls_follow_the_served_address(
    operator_settings: Settings, tmp_path: Path
) -> None:
    env = environment(operator_settings)
    del env["MARKETPLACE_BASE_URL"]
    with running_service(env, tmp_path) as server, httpx.Client(base_url=server.base_url) as client:
        assert logo_of_resource_1(client).startswith(f"http://127.0.0.1:{server.port}/storage/")
        next_page = client.get("/api/v1/resource/search?size=1").json()["next_page_url"]
        assert next_page.startswith(f"http://127.0.0.1:{server.port}/api/v1/resource/search?")


def test_without_a_base_url_the_urls_are_https_under_tls(
    operator_settings: Settings, tmp_path: Path, key_pair: tuple[Path, Path]
) -> None:
    certificate, key = key_pair
    env = environment(operator_settings)
    del env["MARKETPLACE_BASE_URL"]
    port = free_port()
    process = serve_https(env, tmp_path, port, certificate, key)
    trusted = ssl.create_default_context(cafile=str(certificate))
    try:
        with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=trusted, timeout=5.0) as client:
            wait_for_https(client)
            assert logo_of_resource_1(client) == f"https://127.0.0.1:{port}/storage/images/1.png"
    finally:
        stop(process)


def test_a_set_base_url_wins_over_the_served_address(operator_settings: Settings, tmp_path: Path) -> None:
    env = environment(operator_settings, MARKETPLACE_BASE_URL="https://market.example")
    with running_service(env, tmp_path) as server, httpx.Client(base_url=server.base_url) as client:
        assert logo_of_resource_1(client) == "https://market.example/storage/images/1.png"


@pytest.mark.parametrize(
    ("host", "port", "tls", "expected"),
    [
        ("127.0.0.1", 9000, False, "http://127.0.0.1:9000"),
        ("::1", 9000, True, "https://[::1]:9000"),
        ("example.test", 443, True, "https://example.test"),
        ("example.test", 80, False, "http://example.test"),
        ("0.0.0.0", 8000, False, f"http://{socket.gethostname()}:8000"),
        ("::", 8443, True, f"https://{socket.gethostname()}:8443"),
    ],
)
def test_the_served_base_url_names_a_reachable_address(
    host: str, port: int, tls: bool, expected: str
) -> None:
    assert served_base_url(host, port, tls=tls) == expected


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
# The requests of these tests go to a path no route answers: the API's rate limit would refuse them.
def test_every_access_line_of_a_burst_is_written_after_a_graceful_stop(
    operator_settings: Settings, tmp_path: Path, stop_signal: signal.Signals
) -> None:
    sent = [f"burst-{number}" for number in range(300)]
    with running_service(environment(operator_settings), tmp_path) as server:
        with httpx.Client(base_url=server.base_url) as client:
            for request_id in sent:
                assert client.get("/burst", headers={"X-Request-Id": request_id}).status_code == 404
        server.process.send_signal(stop_signal)
        # The server ends as the signal would end it, once it has stopped gracefully.
        assert server.process.wait(timeout=60) in (0, -stop_signal)
        records = [json.loads(line) for line in server.output().splitlines()]
    written = [record["request_id"] for record in records if record.get("path") == "/burst"]
    assert written == sent
    assert records[-1]["message"].startswith("Finished server process")


def serve_into_a_pipe(
    env: dict[str, str], workdir: Path, port: int, *serve_args: str
) -> subprocess.Popen[bytes]:
    """`marketplace serve` on `port`, its standard output and error a pipe the caller reads (or not)."""
    return subprocess.Popen(
        [MARKETPLACE, "serve", "--port", str(port), *serve_args],
        env=env,
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def wait_until_answering(base_url: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{base_url}/up", timeout=5)
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_standard_error_nobody_reads_never_holds_up_requests(
    operator_settings: Settings, tmp_path: Path
) -> None:
    port = free_port()
    process = serve_into_a_pipe(environment(operator_settings), tmp_path, port)
    assert process.stdout is not None
    try:
        wait_until_answering(f"http://127.0.0.1:{port}")
        long_query = "q=" + "x" * 900  # about 1.2 KB a line: the pipe's 64 KiB hold some 50
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            for _ in range(400):
                assert client.get(f"/stalled?{long_query}").status_code == 404
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=60)[0].decode("utf-8")
    written = [json.loads(line) for line in output.splitlines()]
    assert len([record for record in written if record.get("path") == "/stalled"]) == 400


def test_two_workers_sharing_a_pipe_write_whole_lines(operator_settings: Settings, tmp_path: Path) -> None:
    port = free_port()
    process = serve_into_a_pipe(environment(with_redis(operator_settings)), tmp_path, port, "--workers", "2")
    assert process.stdout is not None
    chunks: list[bytes] = []
    descriptor = process.stdout.fileno()
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: os.read(descriptor, 65536), b"")))
    reader.start()
    sent = [f"pair-{number}" for number in range(400)]

    def fetch(request_id: str) -> int:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as fresh:
            query = "q=" + "y" * (len(request_id) * 97 % 900)
            return fresh.get(f"/pair?{query}", headers={"X-Request-Id": request_id}).status_code

    try:
        wait_until_answering(f"http://127.0.0.1:{port}")
        with ThreadPoolExecutor(max_workers=16) as pool:
            assert set(pool.map(fetch, sent)) == {404}
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        reader.join(timeout=30)
        process.stdout.close()
    records = [json.loads(line) for line in b"".join(chunks).decode("utf-8").splitlines()]
    access = [record for record in records if record.get("path") == "/pair"]
    assert sorted(record["request_id"] for record in access) == sorted(sent)
