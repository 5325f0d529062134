"""The production profile over real HTTP: several serving processes on one PostgreSQL and one Redis
behave as one service, and a Redis outage does not stop the answers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from marketplace.health import REDIS_DEGRADED
from tests.catalogue import catalogue
from tests.live import MARKETPLACE, free_port, stop, wait_until_up
from tests.profiles import (
    POSTGRES_ADMIN_URL,
    REDIS_URL,
    postgres_admin,
    require_postgresql,
    require_redis,
    require_service,
    unique_name,
)
from tests.upstream import FakeUpstream


@pytest.fixture
def production_env(tmp_path: Path, upstream: FakeUpstream) -> Iterator[dict[str, str]]:
    """Environment of a service on a fresh PostgreSQL database and a private Redis key prefix,
    migrated and loaded with the test catalogue through the command line."""
    require_postgresql()
    require_redis()
    name = unique_name("mp_prod")
    postgres_admin(f'CREATE DATABASE "{name}"')
    database_url = POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MARKETPLACE_")},
        "MARKETPLACE_DATABASE_URL": database_url,
        "MARKETPLACE_REDIS_URL": REDIS_URL,
        "MARKETPLACE_REDIS_PREFIX": name + ":",
        "MARKETPLACE_CHAT_API_URL": f"{upstream.url}/chat-api",
        "MARKETPLACE_STATS_API_URL": f"{upstream.url}/stats-api",
        "MARKETPLACE_STATS_PAGE_URL": "https://stats.example/plugin",
        "MARKETPLACE_APP_KEY": "production-profile-test",
    }
    fixture = tmp_path / "catalogue.json"
    fixture.write_text(json.dumps(catalogue()), encoding="utf-8")
    for command in (["migrate"], ["load", str(fixture)]):
        subprocess.run(
            [MARKETPLACE, *command], env=env, cwd=tmp_path, check=True, capture_output=True, timeout=60
        )
    try:
        yield env
    finally:
        postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def serve(env: dict[str, str], cwd: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [MARKETPLACE, "serve", "--port", str(port), "--no-access-log", *extra],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(base_url)
    except AssertionError:
        stop(process)
        raise
    return process, base_url


def test_two_workers_admit_exactly_120_requests_per_window_between_them(
    production_env: dict[str, str], tmp_path: Path
) -> None:
    process, base_url = serve(production_env, tmp_path, "--workers", "2")
    try:
        statuses = []
        for _ in range(130):
            # A new connection per request, so that both workers take their share.
            with httpx.Client(timeout=10.0) as fresh:
                statuses.append(fresh.get(f"{base_url}/api/v1/resource/1").status_code)
        assert statuses.count(200) == 120
        assert statuses.count(429) == 10
        assert statuses[:120] == [200] * 120
    finally:
        stop(process)


def test_group_limit_and_caches_are_shared_between_instances(
    production_env: dict[str, str], tmp_path: Path, upstream: FakeUpstream
) -> None:
    upstream.answer_json(
        "/stats-api/1234", {"id": 1234, "name": "Eco Plugin", "software": {"id": 1, "url": "bukkit"}}
    )
    first, first_url = serve(production_env, tmp_path)
    second, second_url = serve(production_env, tmp_path)
    try:
        fetched = httpx.get(f"{first_url}/api/v1/stats/url/1", timeout=10.0)
        shared = httpx.get(f"{second_url}/api/v1/stats/url/1", timeout=10.0)
        assert fetched.status_code == shared.status_code == 200
        assert shared.text == fetched.text == "https://stats.example/plugin/bukkit/Eco%20Plugin/1234"
        assert upstream.calls["/stats-api/1234"] == 1

        statuses = [
            httpx.get(f"{(first_url, second_url)[i % 2]}/api/v1/resource/1", timeout=10.0).status_code
            for i in range(120)
        ]
        # Two requests were counted above: 118 more pass, the rest of the window is refused on both.
        assert statuses.count(200) == 118
        assert statuses.count(429) == 2
        assert httpx.get(f"{first_url}/api/v1/resource/1", timeout=10.0).status_code == 429
        assert httpx.get(f"{second_url}/api/v1/resource/1", timeout=10.0).status_code == 429
    finally:
        stop(first)
        stop(second)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A Redis server of the test's own, which the test may pause or kill."""
    binary = shutil.which("redis-server")
    if binary is None:
        require_service("redis-server (binary)", "127.0.0.1", 1)
    port = free_port()
    process = subprocess.Popen(
        [
            str(binary),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.05)
    try:
        yield process, f"redis://127.0.0.1:{port}/0"
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
        process.wait(timeout=5)


def test_answers_keep_coming_while_redis_is_blocked_or_down(
    production_env: dict[str, str], tmp_path: Path, private_redis: tuple[subprocess.Popen[bytes], str]
) -> None:
    redis_process, redis_url = private_redis
    env = {**production_env, "MARKETPLACE_REDIS_URL": redis_url}
    process, base_url = serve(env, tmp_path)
    try:
        with httpx.Client(base_url=base_url, timeout=10.0) as http:
            assert http.get("/api/v1/resource/1").headers["X-RateLimit-Remaining"] == "119"
            redis_process.send_signal(signal.SIGSTOP)  # blocked: connections hang
            blocked = [http.get("/api/v1/resource/1") for _ in range(20)]
            assert [r.status_code for r in blocked] == [200] * 20
            assert all(r.json()["id"] == 1 for r in blocked)
            # The API still answers, so the instance stays in the load balancer: 200, Redis named as degraded.
            health = http.get("/up")
            assert health.status_code == 200
            assert health.json() == {
                "status": "degraded",
                "checks": {"database": "ok", "redis": "failing", "changes": "ok", "webhooks": "ok"},
                "degraded": [REDIS_DEGRADED],
            }
            redis_process.send_signal(signal.SIGCONT)
            redis_process.kill()  # down: connections refused
            redis_process.wait(timeout=5)
            down = [http.get("/api/v1/resource/search") for _ in range(20)]
            assert [r.status_code for r in down] == [200] * 20
    finally:
        stop(process)


def test_service_recovers_by_itself_after_its_database_connections_drop(
    production_env: dict[str, str], tmp_path: Path
) -> None:
    process, base_url = serve(production_env, tmp_path)
    database = production_env["MARKETPLACE_DATABASE_URL"].rsplit("/", 1)[1]
    try:
        with httpx.Client(base_url=base_url, timeout=10.0) as http:
            assert http.get("/api/v1/resource/1").status_code == 200
            # What a PostgreSQL restart does to a running service: every connection is cut.
            postgres_admin(
                f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'"
            )
            answers = [http.get("/api/v1/resource/1") for _ in range(5)]
            for answer in answers:
                assert answer.status_code in (200, 500)
                if answer.status_code == 500:
                    assert answer.content == b'{"message":"Server Error"}'
                    assert answer.headers["X-Service-Api-Version"] == "1"
            assert answers[-1].status_code == 200
            # The change feed's connection was cut too: it is replaced and proven again in seconds.
            for _ in range(50):
                health = http.get("/up")
                if health.json()["status"] == "ok":
                    break
                time.sleep(0.1)
            assert (health.status_code, health.json()) == (
                200,
                {
                    "status": "ok",
                    "checks": {"database": "ok", "redis": "ok", "changes": "ok", "webhooks": "ok"},
                    "degraded": [],
                },
            )
    finally:
        stop(process)
