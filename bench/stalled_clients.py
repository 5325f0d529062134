"""Worker memory and connection lifetimes under stalled HTTPS clients.

Starts `marketplace serve` over HTTPS (a self-signed certificate, a fresh SQLite database), then:

- `bodies`: CLIENTS clients complete the TLS handshake, declare a 1 MiB body, send most of it
  slowly and stall;
- `idle`: CLIENTS clients open a TCP connection to the HTTPS port and never start the handshake.

Prints, per scenario: the worker's RSS at start, its peak while the clients hold on, its RSS one
minute after they are gone, and (idle) how long the server held the connections. Run it against
other source code with `--source DIR` (that tree's `marketplace` package is served).

    .venv/bin/python -m bench.stalled_clients [--clients 1000] [--source /path/to/checkout]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

BODY_BYTES = 1024 * 1024
SENT_BEFORE_STALL = 960 * 1024
SLICE = 64 * 1024
AFTERWARDS_SECONDS = 60.0


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.running = True

    def run(self) -> None:
        while self.running:
            self.peak = max(self.peak, rss_kib(self.pid))
            time.sleep(0.1)


def make_key_pair(folder: Path) -> tuple[Path, Path]:
    certificate, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(certificate)),
        ],
        check=True,
        capture_output=True,
    )
    return certificate, key


def start_server(folder: Path, port: int, source: str | None) -> subprocess.Popen[bytes]:
    certificate, key = make_key_pair(folder)
    env = {name: value for name, value in os.environ.items() if not name.startswith("MARKETPLACE_")}
    env.update(
        MARKETPLACE_DATABASE_URL=f"sqlite:///{folder / 'marketplace.db'}",
        MARKETPLACE_STORAGE_DIR=str(folder / "storage"),
        MARKETPLACE_APP_KEY="bench",
        MARKETPLACE_ACCESS_LOG="false",
        MARKETPLACE_LOG_LEVEL="error",
        MARKETPLACE_SSL_CERTFILE=str(certificate),
        MARKETPLACE_SSL_KEYFILE=str(key),
    )
    if source:
        env["PYTHONPATH"] = source
    command = [sys.executable, "-m", "marketplace.cli"]
    subprocess.run([*command, "migrate"], env=env, cwd=folder, check=True, capture_output=True)
    server = subprocess.Popen([*command, "serve", "--port", str(port)], env=env, cwd=folder)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"https://127.0.0.1:{port}/up", verify=False, timeout=1)
            return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("the server did not start")


async def stalled_body(port: int, context: ssl.SSLContext, release: asyncio.Event) -> str:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    except (OSError, ssl.SSLError):
        return "refused"
    try:
        writer.write(
            b"POST /api/v1/chat HTTP/1.1\r\nHost: bench\r\nContent-Type: application/octet-stream\r\n"
            b"Content-Length: %d\r\n\r\n" % BODY_BYTES
        )
        sent = 0
        while sent < SENT_BEFORE_STALL and not release.is_set():
            writer.write(b"x" * SLICE)
            sent += SLICE
            await writer.drain()
            await asyncio.sleep(0.2)
        await release.wait()
        return "stalled"
    except (OSError, ssl.SSLError):
        return "closed"
    finally:
        writer.close()


async def idle_connection(port: int) -> float | None:
    """Seconds until the server closes a connection that never handshakes (None: not accepted)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return None
    started = time.monotonic()
    try:
        await asyncio.wait_for(reader.read(1), 120)
    except (OSError, TimeoutError):
        pass
    writer.close()
    return time.monotonic() - started


async def run_bodies(port: int, clients: int, hold_seconds: float) -> dict[str, int]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    release = asyncio.Event()
    tasks = [asyncio.ensure_future(stalled_body(port, context, release)) for _ in range(clients)]
    await asyncio.sleep(hold_seconds)
    release.set()
    outcomes = await asyncio.gather(*tasks)
    return {outcome: outcomes.count(outcome) for outcome in set(outcomes)}


async def run_idle(port: int, clients: int) -> list[float]:
    held = await asyncio.gather(*(idle_connection(port) for _ in range(clients)))
    return [seconds for seconds in held if seconds is not None]


def measure(scenario: str, clients: int, source: str | None) -> None:
    folder = Path(tempfile.mkdtemp(prefix="stalled-"))
    port = free_port()
    server = start_server(folder, port, source)
    try:
        sampler = RssSampler(server.pid)
        start = rss_kib(server.pid)
        sampler.start()
        began = time.monotonic()
        if scenario == "bodies":
            outcomes = asyncio.run(run_bodies(port, clients, hold_seconds=15))
            detail = f"clients: {outcomes}"
        else:
            held = asyncio.run(run_idle(port, clients))
            detail = (
                f"held {len(held)} connections: median {statistics.median(held):.1f} s, max {max(held):.1f} s"
                if held
                else "no connection accepted"
            )
        sampler.running = False
        gone = time.monotonic() - began
        time.sleep(AFTERWARDS_SECONDS)
        later = rss_kib(server.pid)
        print(
            f"{scenario}: {clients} clients over {gone:.0f} s; RSS start {start // 1024} MiB, "
            f"peak {sampler.peak // 1024} MiB, one minute after {later // 1024} MiB; {detail}",
            flush=True,
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--source", help="serve the marketplace package of this checkout")
    parser.add_argument("--scenario", choices=["bodies", "idle", "both"], default="both")
    arguments = parser.parse_args()
    # Every client is a socket here and one in the server, which inherits the limit.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    for scenario in ("bodies", "idle") if arguments.scenario == "both" else (arguments.scenario,):
        measure(scenario, arguments.clients, arguments.source)


if __name__ == "__main__":
    main()
