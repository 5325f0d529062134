"""A real `marketplace serve` process for tests that need real HTTP: raw bytes on a socket, several
workers, slow clients, the server's own logs."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from marketplace.config import Settings
from marketplace.database.engine import create_engine
from marketplace.fixtures.loader import load_document
from tests.catalogue import catalogue

MARKETPLACE = str(Path(sys.executable).with_name("marketplace"))
START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 15.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_up(base_url: str, deadline_seconds: float = START_TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base_url}/up", timeout=1.0).status_code in (200, 503):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{base_url} did not start within {deadline_seconds} s")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def standalone_settings(root: Path, migrated_template: Path, **changes: Any) -> Settings:
    """Settings of a service of its own in `root`: a copy of the migrated SQLite database, its own
    storage folder, upstreams on a port nothing listens on, and `changes`."""
    from tests.conftest import GRANT_SECRET
    from tests.upstream import closed_port_url

    shutil.copyfile(migrated_template, root / "marketplace.db")
    values: dict[str, Any] = {
        "database_url": f"sqlite:///{root / 'marketplace.db'}",
        "storage_dir": str(root / "storage"),
        "chat_api_url": closed_port_url(),
        "stats_api_url": closed_port_url(),
        "chat_grant_secret": GRANT_SECRET,
        "app_key": "test-key",
        **changes,
    }
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def load_catalogue(settings: Settings) -> None:
    """The test catalogue loaded into the settings' database, from a loop and engine of its own."""

    async def load() -> None:
        engine = create_engine(settings)
        try:
            await load_document(engine, catalogue())
        finally:
            await engine.dispose()

    asyncio.run(load())


def environment(settings: Settings, **overrides: str) -> dict[str, str]:
    """The process environment that configures a service as `settings` does (nothing from ours)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("MARKETPLACE_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    for name, value in settings.model_dump().items():
        if value is not None:
            env[f"MARKETPLACE_{name.upper()}"] = str(value).lower() if isinstance(value, bool) else str(value)
    env.update(overrides)
    return env


@dataclass
class LiveServer:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@contextmanager
def running_service(env: dict[str, str], workdir: Path, *serve_args: str) -> Iterator[LiveServer]:
    """`marketplace serve` on a free port, its standard output and error kept in a file; stopped after."""
    port = free_port()
    log = workdir / f"serve-{port}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [MARKETPLACE, "serve", "--port", str(port), *serve_args],
            env=env,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    server = LiveServer(process, port, log)
    try:
        try:
            wait_until_up(server.base_url)
        except AssertionError:
            raise AssertionError(f"the server did not start:\n{server.output()}") from None
        yield server
    finally:
        stop(process)


def exchange(port: int, request: bytes, *, timeout: float = 10.0) -> bytes:
    """Send raw bytes on a fresh connection and read the answer until the server closes or is silent."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
        connection.sendall(request)
        return read_answer(connection, timeout)


def read_answer(connection: socket.socket, timeout: float) -> bytes:
    """What the server sends until it closes the connection, or a whole answer has come."""
    connection.settimeout(timeout)
    received = b""
    while True:
        try:
            chunk = connection.recv(65536)
        except TimeoutError:
            return received
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk
        head, separator, body = received.partition(b"\r\n\r\n")
        if separator:
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length" and len(body) >= int(value.strip()):
                    return received


def status_of(answer: bytes) -> int:
    """The status code of a raw HTTP answer."""
    return int(answer.split(b" ", 2)[1])


def body_of(answer: bytes) -> bytes:
    return answer.partition(b"\r\n\r\n")[2]
