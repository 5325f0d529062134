"""The bounds of a worker's connections, over real sockets: TLS handshakes within the read timeout,
a cap on open connections, a budget for the request bodies held at once, and the head cap on every
request of a keep-alive connection, pipelined or not."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from marketplace.config import Settings
from marketplace.serving import MAX_HEAD_BYTES
from tests.live import (
    LiveServer,
    environment,
    free_port,
    read_answer,
    running_service,
    standalone_settings,
    status_of,
    stop,
)
from tests.test_serve_operations import key_pair, serve_https, wait_for_https

__all__ = ["key_pair"]  # the certificate fixture, used here too

READ_TIMEOUT = 1.0


def settings_for(root: Path, migrated_template: Path, **changes: object) -> Settings:
    return standalone_settings(root, migrated_template, **changes)


def closed_by_server(connection: socket.socket, within_seconds: float) -> bool:
    """Whether the server closes the connection (having sent nothing) within the delay."""
    connection.settimeout(within_seconds)
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def answers_on(connection: socket.socket, timeout: float) -> list[int]:
    """The statuses of every answer the server sends until it closes or is silent."""
    connection.settimeout(timeout)
    received = b""
    while True:
        try:
            chunk = connection.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        received += chunk
    return [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", received)]


def metric_value(base_url: str, name: str) -> float:
    lines = httpx.get(f"{base_url}/metrics").text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name))


def test_a_tls_handshake_not_done_within_the_read_timeout_is_closed(
    migrated_template: Path, tmp_path: Path, key_pair: tuple[Path, Path]
) -> None:
    certificate, key = key_pair
    settings = settings_for(tmp_path, migrated_template, read_timeout_seconds=READ_TIMEOUT)
    port = free_port()
    process = serve_https(environment(settings), tmp_path, port, certificate, key)
    try:
        with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=False) as client:
            wait_for_https(client)
        with socket.create_connection(("127.0.0.1", port)) as silent:
            # The event loop's own handshake timeout is 60 s.
            assert closed_by_server(silent, READ_TIMEOUT + 9)
        with socket.create_connection(("127.0.0.1", port)) as partial:
            partial.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, no more
            assert closed_by_server(partial, READ_TIMEOUT + 9)
    finally:
        stop(process)


@pytest.fixture
def capped(migrated_template: Path, tmp_path: Path) -> Iterator[LiveServer]:
    settings = settings_for(
        tmp_path,
        migrated_template,
        max_connections=4,
        read_timeout_seconds=30,
        max_body_bytes=100_000,
        max_buffered_body_bytes=100_000,
    )
    with running_service(environment(settings), tmp_path) as server:
        yield server


def test_connections_past_the_cap_are_closed_at_once(capped: LiveServer) -> None:
    held = [socket.create_connection(("127.0.0.1", capped.port)) for _ in range(4)]
    try:
        time.sleep(0.3)
        with socket.create_connection(("127.0.0.1", capped.port)) as extra:
            assert closed_by_server(extra, 5)
    finally:
        for connection in held:
            connection.close()
    time.sleep(0.3)
    assert httpx.get(f"{capped.base_url}/up").status_code == 200
    assert metric_value(capped.base_url, "marketplace_http_refused_connections_total") >= 1
    assert "connection cap reached" in capped.output()


def post_head(length: int) -> bytes:
    return (
        b"POST /api/v1/chat HTTP/1.1\r\nHost: marketplace.test\r\n"
        b"Content-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n" % length
    )


def test_a_body_past_the_workers_budget_waits_for_room(capped: LiveServer) -> None:
    # The budget holds one body of 100,000 bytes: a second waits until the first one's room is free.
    first = socket.create_connection(("127.0.0.1", capped.port))
    second = socket.create_connection(("127.0.0.1", capped.port))
    try:
        first.sendall(post_head(100_000) + b"x" * 1000)  # stalls, holding its room
        time.sleep(0.3)
        second.sendall(post_head(100_000) + b"y" * 100_000)
        assert answers_on(second, 1.0) == []  # no room yet: nothing read, nothing answered
        first.close()  # its room is given back
        answer = read_answer(second, 10)
        assert status_of(answer) < 500
        assert status_of(answer) not in (408, 413)
    finally:
        first.close()
        second.close()
    assert metric_value(capped.base_url, 'marketplace_http_body_budget_waits_total{outcome="granted"}') >= 1


@pytest.fixture(scope="module")
def live(migrated_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("pipelined")
    settings = standalone_settings(root, migrated_template, read_timeout_seconds=5)
    with running_service(environment(settings), root) as server:
        yield server


def test_a_pipelined_second_head_over_64_kib_is_refused_with_431(live: LiveServer) -> None:
    first = b"GET /up HTTP/1.1\r\nHost: marketplace.test\r\n\r\n"
    second = (
        b"GET /up HTTP/1.1\r\nHost: marketplace.test\r\nX-Padding: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", live.port)) as connection:
        connection.sendall(first + second)
        assert answers_on(connection, 5) == [200, 431]


def test_a_pipelined_head_after_a_body_is_counted_from_its_first_byte(live: LiveServer) -> None:
    body = b"\r\n\r\n" * 30_000  # a body of empty lines, larger than a head may be
    first = post_head(len(body)).replace(b"/api/v1/chat", b"/up") + body
    second = (
        b"GET /up HTTP/1.1\r\nHost: marketplace.test\r\nX-Padding: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", live.port)) as connection:
        connection.sendall(first + second)
        statuses = answers_on(connection, 5)
    assert statuses[-1] == 431
    assert len(statuses) == 2 and statuses[0] != 431


def test_pipelined_heads_under_the_cap_are_all_answered(live: LiveServer) -> None:
    request = b"GET /up HTTP/1.1\r\nHost: marketplace.test\r\nX-Padding: " + b"a" * 40_000 + b"\r\n\r\n"
    with socket.create_connection(("127.0.0.1", live.port)) as connection:
        connection.sendall(
            request * 3 + b"GET /up HTTP/1.1\r\nHost: marketplace.test\r\nConnection: close\r\n\r\n"
        )
        assert answers_on(connection, 5) == [200, 200, 200, 200]
