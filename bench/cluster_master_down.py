"""How many requests the limiters count on a Redis Cluster with one master of three down.

Starts a disposable 3-master cluster (`scripts/topology/redis-cluster`, on `--base-port`), stops
one master and waits until the others mark it failed, then sends `--requests` requests to a
limited route, each from another client address (`X-Forwarded-For`), a few at a time as under
load, through the app in process on an empty SQLite database. A request is counted when its
`X-RateLimit-Remaining` is one below the limit; a limiter that failed open counts nothing and
leaves it at the limit. Prints the counted and uncounted requests, then stops the cluster.

    python bench/cluster_master_down.py --base-port 7200 --requests 200 --full-coverage no
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from redis.crc import key_slot

from marketplace.api.v1 import api_limits
from marketplace.app import build_app
from marketplace.config import Settings
from marketplace.database.engine import create_engine
from marketplace.migrations.runner import upgrade_to_head
from marketplace.services import build_services

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "topology" / "redis-cluster"
ROUTE = "/api/v1/resource/1"
PREFIX = "bench:"
LIMIT = 120  # the group's limiter (marketplace.api.v1.api_limits)


def topology(command: str, *args: str, base_port: int, full_coverage: str) -> None:
    env = {
        **os.environ,
        "REDIS_CLUSTER_BASE_PORT": str(base_port),
        "REDIS_CLUSTER_FULL_COVERAGE": full_coverage,
        "REDIS_CLUSTER_NODE_TIMEOUT_MS": "1000",
    }
    subprocess.run([str(SCRIPT), command, *args], env=env, check=True, stdout=subprocess.DEVNULL)


def wait_until_marked_failed(port: int, dead_port: int) -> None:
    for _ in range(200):
        nodes = subprocess.run(
            ["redis-cli", "-p", str(port), "cluster", "nodes"], capture_output=True, text=True, check=True
        ).stdout
        if any(
            f":{dead_port}@" in line and " fail " in f" {line} ".replace(",", " ")
            for line in nodes.splitlines()
        ):
            return
        time.sleep(0.1)
    raise SystemExit(f"node {dead_port} was never marked failed")


def address(number: int) -> str:
    return f"198.51.{number // 250}.{number % 250 + 1}"


def on_the_stopped_master(prefix: str, requests: int) -> int:
    """How many of the addresses have their limiter key in the stopped master's slots."""
    stopped = range(10923, 16384)  # the third master's slots, as `redis-cli --cluster create` assigns them
    return sum(
        key_slot((prefix + api_limits(address(number), {})[0].key).encode("utf-8")) in stopped
        for number in range(requests)
    )


async def measure(base_port: int, requests: int, concurrency: int, workdir: Path) -> tuple[int, int]:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        database_url=f"sqlite:///{workdir / 'bench.db'}",
        redis_url=f"redis+cluster://127.0.0.1:{base_port}",
        redis_prefix=PREFIX,
        app_key="bench",
        access_log=False,
    )
    engine = create_engine(settings)
    await upgrade_to_head(engine)
    await engine.dispose()
    services = build_services(settings)
    counted = uncounted = 0
    try:
        transport = httpx.ASGITransport(app=build_app(services=services))
        async with httpx.AsyncClient(transport=transport, base_url="http://marketplace.test") as http:
            addresses = iter(address(number) for number in range(requests))

            async def client() -> None:
                nonlocal counted, uncounted
                for client_address in addresses:
                    answer = await http.get(ROUTE, headers={"X-Forwarded-For": client_address})
                    if answer.headers.get("X-RateLimit-Remaining") == str(LIMIT - 1):
                        counted += 1
                    else:
                        uncounted += 1

            await asyncio.gather(*(client() for _ in range(concurrency)))
    finally:
        await services.close()
    return counted, uncounted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-port", type=int, default=7200)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--full-coverage", choices=["yes", "no"], default="no")
    options = parser.parse_args()
    ports = dict(base_port=options.base_port, full_coverage=options.full_coverage)
    topology("start", **ports)
    try:
        topology("stop-node", "2", **ports)
        wait_until_marked_failed(options.base_port, options.base_port + 2)
        with tempfile.TemporaryDirectory() as workdir:
            counted, uncounted = asyncio.run(
                measure(options.base_port, options.requests, options.concurrency, Path(workdir))
            )
    finally:
        topology("stop", **ports)
    print(
        f"counted {counted} of {counted + uncounted}, uncounted {uncounted}"
        f" ({on_the_stopped_master(PREFIX, options.requests)} have their key on the stopped master)"
    )


if __name__ == "__main__":
    main()
