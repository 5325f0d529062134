"""What only a real server shows, sent as raw bytes over real sockets: paths an HTTP client would
normalise or refuse, bodies too large or too slow, heads that never end, and the memory and
connections a hostile client can take."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from marketplace.config import Settings
from marketplace.serving import MAX_HEAD_BYTES
from tests.catalogue import MEMBER_CHAT_ID
from tests.conftest import GRANT_SECRET
from tests.live import (
    LiveServer,
    body_of,
    environment,
    exchange,
    load_catalogue,
    read_answer,
    running_service,
    standalone_settings,
    status_of,
)

READ_TIMEOUT = 1.0
SECRET_BYTES = b"top secret database bytes"


@pytest.fixture(scope="module")
def live(migrated_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One server for the module (starting one takes seconds), on a copy of the migrated database."""
    root = tmp_path_factory.mktemp("live")
    settings = standalone_settings(
        root, migrated_template, read_timeout_seconds=READ_TIMEOUT, db_pool_size=1, db_max_overflow=0
    )
    load_catalogue(settings)
    storage = root / "storage"
    (storage / "images").mkdir(parents=True)
    (storage / "images" / "1.png").write_bytes(b"\x89PNG icon")
    # A file beside the storage folder that no path may reach.
    (root / "secret.txt").write_bytes(SECRET_BYTES)
    (storage / "images" / "escape.png").symlink_to(root / "secret.txt")
    with running_service(environment(settings), root) as server:
        yield server


def get(path: bytes, *headers: bytes) -> bytes:
    return (
        b"GET "
        + path
        + b" HTTP/1.1\r\nHost: marketplace.test\r\n"
        + b"".join(h + b"\r\n" for h in headers)
        + b"\r\n"
    )


@pytest.mark.parametrize(
    "path",
    [
        b"/storage/../secret.txt",
        b"/storage/images/../../secret.txt",
        b"/storage/%2e%2e/secret.txt",
        b"/storage/..%2Fsecret.txt",
        b"/storage/images/..%2F..%2Fsecret.txt",
        b"/storage/%2E%2E%5Csecret.txt",
        b"/storage//etc/passwd",
        b"/storage/images/escape.png",
        b"/storage/images/%00.png",
        b"/storage/" + b"../" * 50 + b"etc/passwd",
    ],
)
def test_no_path_leaves_the_storage_folder(live: LiveServer, path: bytes) -> None:
    answer = exchange(live.port, get(path))
    assert status_of(answer) == 404, answer[:200]
    assert SECRET_BYTES not in answer and b"root:" not in answer


def test_files_of_the_storage_folder_are_served(live: LiveServer) -> None:
    answer = exchange(live.port, get(b"/storage/images/1.png"))
    assert (status_of(answer), body_of(answer)) == (200, b"\x89PNG icon")


@pytest.mark.parametrize(
    "path",
    [
        b"/api/v1/resource/" + b"9" * 60_000,
        b"/api/v1/gift/" + b"A" * 60_000,
        b"/api/v1/resource/search?size=" + b"9" * 60_000,
        b"/storage/" + b"a" * 60_000,
    ],
)
def test_very_long_request_lines_are_answered_without_a_server_error(live: LiveServer, path: bytes) -> None:
    answer = exchange(live.port, get(path))
    assert status_of(answer) < 500, answer[:200]


def test_a_request_head_over_the_bound_is_refused_with_431(live: LiveServer) -> None:
    header = b"X-Padding: " + b"a" * 8000
    with socket.create_connection(("127.0.0.1", live.port), timeout=10) as connection:
        connection.sendall(b"GET /api/v1/resource/1 HTTP/1.1\r\nHost: marketplace.test\r\n")
        try:
            for _ in range(MAX_HEAD_BYTES // len(header) + 2):
                connection.sendall(header + b"\r\n")
        except OSError:
            pass  # the server may close before all is sent
        answer = read_answer(connection, 10)
    assert status_of(answer) == 431


def test_a_request_head_that_never_ends_is_closed_after_the_read_timeout(live: LiveServer) -> None:
    with socket.create_connection(("127.0.0.1", live.port), timeout=10) as connection:
        connection.sendall(b"GET /api/v1/resource/1 HTTP/1.1\r\nHost: marketplace.test\r\nX-Slow: a")
        answer = read_answer(connection, 10)
    assert status_of(answer) == 408


def test_a_connection_that_sends_nothing_is_closed(live: LiveServer) -> None:
    with socket.create_connection(("127.0.0.1", live.port), timeout=10) as connection:
        assert read_answer(connection, 10) == b""


def test_a_body_declared_too_large_is_refused_before_it_is_sent(live: LiveServer) -> None:
    head = (
        b"POST /api/v1/chat HTTP/1.1\r\nHost: marketplace.test\r\nContent-Type: application/json\r\n"
        b"Content-Length: 419430400\r\n\r\n"
    )
    answer = exchange(live.port, head)
    assert (status_of(answer), body_of(answer)) == (413, b'{"message":"The POST data is too large."}')
    assert b"x-service-api-version: 1" in answer.lower()


def worker_memory_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_large_chunked_body_is_refused_at_the_cap_and_memory_stays_flat(live: LiveServer) -> None:
    before = worker_memory_kib(live.process.pid)
    chunk = b"x" * 65536
    with socket.create_connection(("127.0.0.1", live.port), timeout=10) as connection:
        connection.sendall(
            b"POST /api/v1/chat HTTP/1.1\r\nHost: marketplace.test\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        sent = 0
        try:
            while sent < 100 * 1024 * 1024:
                connection.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except OSError:
            pass  # refused and closed
        answer = read_answer(connection, 10)
    assert status_of(answer) == 413
    assert sent < 100 * 1024 * 1024
    assert worker_memory_kib(live.process.pid) - before < 32 * 1024


def test_a_body_that_does_not_arrive_in_time_is_408(live: LiveServer) -> None:
    with socket.create_connection(("127.0.0.1", live.port), timeout=10) as connection:
        connection.sendall(
            b"POST /api/v1/chat HTTP/1.1\r\nHost: marketplace.test\r\nContent-Type: application/json\r\n"
            b'Content-Length: 40\r\n\r\n{"chat":'
        )
        answer = read_answer(connection, 10)
    assert (status_of(answer), body_of(answer)) == (408, b'{"message":"Request Timeout."}')


def test_slow_grant_bodies_hold_no_database_connection(live: LiveServer) -> None:
    # The pool has one connection. Clients that send their grant body slowly must not take it.
    body = f"custom_password={GRANT_SECRET}".encode()
    slow = []
    for _ in range(3):
        connection = socket.create_connection(("127.0.0.1", live.port), timeout=10)
        connection.sendall(
            b"POST /api/v1/chat/"
            + MEMBER_CHAT_ID.encode()
            + b"/apply/8 HTTP/1.1\r\nHost: marketplace.test\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body[:3])
        )
        slow.append(connection)
    try:
        time.sleep(0.2)
        with httpx.Client(base_url=live.base_url, timeout=READ_TIMEOUT / 2) as http:
            for _ in range(3):
                assert http.get("/api/v1/resource/1").status_code == 200
    finally:
        for connection in slow:
            connection.close()


def test_many_concurrent_slow_clients_leave_the_service_answering(live: LiveServer) -> None:
    stop = threading.Event()
    connections: list[socket.socket] = []

    def trickle() -> None:
        for _ in range(50):
            try:
                connection = socket.create_connection(("127.0.0.1", live.port), timeout=5)
                connection.sendall(b"GET /api/v1/resource/1 HTTP/1.1\r\nHost: x\r\n")
                connections.append(connection)
            except OSError:
                return
        stop.wait(READ_TIMEOUT * 3)

    thread = threading.Thread(target=trickle)
    thread.start()
    try:
        time.sleep(0.3)
        with httpx.Client(base_url=live.base_url, timeout=5) as http:
            assert http.get("/api/v1/resource/1").status_code == 200
    finally:
        stop.set()
        thread.join()
        for connection in connections:
            connection.close()


# The UTF-8 form of the lone surrogate U+D800 (invalid UTF-8), and what a UTF-8 decoder that
# replaces makes of it: three U+FFFD.
LONE_SURROGATE = b"%ED%A0%80"
REPLACED = b"%EF%BF%BD" * 3


# Each target with the parameter in place of {}: path parameters of each kind and query values.
TARGETS = [
    (b"POST", b"/api/v1/licence/{}"),
    (b"GET", b"/api/v1/gift/{}"),
    (b"GET", b"/api/v1/resource/{}"),
    (b"GET", b"/api/v1/resource/user?name={}"),
    (b"GET", b"/api/v1/resource/search?q={}"),
    (b"POST", b"/api/v1/chat/{}"),
    (b"GET", b"/api/v1/chat/{}"),
    (b"GET", b"/api/v1/stats/url/{}"),
    (b"GET", b"/api/v1/stats/1/{}"),
]


def test_a_lone_surrogate_in_a_path_or_query_is_read_as_replacement_characters(
    settings: Settings, tmp_path: Path
) -> None:
    """No HTTP input reaches the service as text holding a lone surrogate, the one text a limiter or
    cache key could not be encoded from (limits.limit_key, cache.cache_key): uvicorn decodes a path's
    percent-escapes as UTF-8 replacing what is invalid (U+FFFD), the query string and form fields
    are decoded the same way (http/input.py), headers (X-Forwarded-For, the client address) as
    latin-1, and a JSON body's `\\ud800` escapes are refused (http/input.py). So a lone surrogate's
    UTF-8 bytes in a path parameter or the query are answered as three U+FFFD would be, never with a
    server error; on the PostgreSQL + Redis profile they reach the limiter keys Redis counts."""
    load_catalogue(settings)
    with running_service(environment(settings, MARKETPLACE_ACCESS_LOG="false"), tmp_path) as server:

        def answer(method: bytes, target: bytes) -> tuple[int, bytes]:
            head = b" HTTP/1.1\r\nHost: marketplace.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            raw = exchange(server.port, method + b" " + target + head)
            return status_of(raw), body_of(raw)

        for method, target in TARGETS:
            surrogate = answer(method, target.replace(b"{}", LONE_SURROGATE))
            replaced = answer(method, target.replace(b"{}", REPLACED))
            assert surrogate[0] < 500, (target, surrogate)
            assert surrogate == replaced, target
