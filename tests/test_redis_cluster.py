"""Partial Redis failures: a dead cluster master lifts the limits of its own keys only, and `/up`
says redis is failing whenever the store cannot count (a dead master, a cluster refusing commands,
a read-only replica), even though PING is still answered.

Tests that stop a node do it on a disposable cluster of their own (`scripts/topology/redis-cluster`
on other ports), never on the shared one named by MARKETPLACE_TEST_REDIS_CLUSTER_URL.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from marketplace.api.v1 import api_limits
from marketplace.config import Settings
from marketplace.health import REDIS_DEGRADED
from marketplace.http.limits import enforce
from marketplace.stores import RedisStore
from marketplace.telemetry.metrics import STORE_ERRORS
from tests.api.helpers import catalogue_client
from tests.profiles import redis_cluster_url, services_required, unique_name

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "topology" / "redis-cluster"


def redis_named_degraded(status: int, body: dict[str, Any]) -> bool:
    """`/up` answering, with redis failing and named under `degraded` (other checks aside)."""
    return (
        status == 200
        and body["status"] == "degraded"
        and body["checks"]["redis"] == "failing"
        and REDIS_DEGRADED in body["degraded"]
    )


def require_redis_server() -> None:
    if shutil.which("redis-server") and shutil.which("redis-cli"):
        return
    message = "redis-server is not installed (apt-get install redis-server)"
    if services_required():
        pytest.fail(f"{message} (MARKETPLACE_REQUIRE_SERVICES=1)")
    pytest.skip(message)


def free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_base_port() -> int:
    """Three consecutive free ports, and their cluster bus ports (10000 above)."""
    for base in range(7300, 8000, 10):
        if all(free(port) and free(port + 10000) for port in range(base, base + 3)):
            return base
    raise RuntimeError("no free ports for a disposable Redis Cluster")


class DisposableCluster:
    """A 3-master cluster of the test's own: masters 0, 1, 2 on `base_port` and the next two ports.

    Masters keep serving their own slots while another is down (cluster-require-full-coverage no).
    """

    def __init__(self, directory: Path) -> None:
        self.base_port = free_base_port()
        self.url = f"redis+cluster://127.0.0.1:{self.base_port}"
        self._env = {
            **os.environ,
            "REDIS_CLUSTER_BASE_PORT": str(self.base_port),
            "REDIS_CLUSTER_DIR": str(directory),
            "REDIS_CLUSTER_FULL_COVERAGE": "no",
            "REDIS_CLUSTER_NODE_TIMEOUT_MS": "1000",
        }

    def topology(self, *args: str) -> None:
        subprocess.run([str(SCRIPT), *args], env=self._env, check=True, capture_output=True, timeout=60)

    def cli(self, node: int, *args: str) -> str:
        command = ["redis-cli", "-p", str(self.base_port + node), *args]
        return subprocess.run(command, check=True, capture_output=True, text=True, timeout=10).stdout

    def slots_of(self, node: int) -> set[int]:
        port = f":{self.base_port + node}@"
        line = next(line for line in self.cli(0, "cluster", "nodes").splitlines() if port in line)
        slots: set[int] = set()
        for part in line.split()[8:]:
            first, _, last = part.partition("-")
            slots.update(range(int(first), int(last or first) + 1))
        return slots

    def wait_for_state(self, node: int, state: str) -> None:
        for _ in range(100):
            if f"cluster_state:{state}" in self.cli(node, "cluster", "info"):
                return
            time.sleep(0.1)
        raise AssertionError(f"node {node} never reached cluster_state:{state}")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DisposableCluster]:
    redis_cluster_url()  # the machine runs cluster tests (skipped, or failing when required, without)
    require_redis_server()
    disposable = DisposableCluster(tmp_path / "redis-cluster")
    disposable.topology("start")
    try:
        yield disposable
    finally:
        disposable.topology("stop")


@pytest.fixture
async def cluster_store(cluster: DisposableCluster) -> AsyncIterator[RedisStore]:
    store = RedisStore(cluster.url, prefix=unique_name("mp_test") + ":")
    yield store
    await store.close()


async def test_with_a_master_down_limits_are_still_counted_for_keys_on_the_live_masters(
    cluster: DisposableCluster, cluster_store: RedisStore
) -> None:
    cluster.topology("stop-node", "2")
    dead_slots = cluster.slots_of(2)
    addresses = [f"198.51.100.{number}" for number in range(1, 91)]
    errors = STORE_ERRORS._value.get()
    for _ in range(2):
        # Concurrent requests: their script calls share one turn of the event loop.
        counted = await asyncio.gather(
            *(enforce(cluster_store, api_limits(address, {})) for address in addresses)
        )
    remaining = {address: entry[0].remaining for address, entry in zip(addresses, counted, strict=True)}
    on_dead = {
        address
        for address in addresses
        if key_slot((cluster_store._prefix + api_limits(address, {})[0].key).encode("utf-8")) in dead_slots
    }
    assert 0 < len(on_dead) < len(addresses)
    # Counted twice on the live masters; failing open, counting nothing, on the dead one.
    assert {address: left for address, left in remaining.items() if address not in on_dead} == {
        address: 118 for address in addresses if address not in on_dead
    }
    assert {remaining[address] for address in on_dead} == {120}
    assert STORE_ERRORS._value.get() - errors >= 1


async def test_a_dead_master_pauses_only_its_own_keys(
    cluster: DisposableCluster, cluster_store: RedisStore
) -> None:
    dead_slots = cluster.slots_of(2)
    keys = [f"key-{number}" for number in range(60)]
    dead = [key for key in keys if key_slot((cluster_store._prefix + key).encode("utf-8")) in dead_slots]
    live = [key for key in keys if key not in dead]
    await cluster_store.hit(live[0], 10, 60)  # the topology is known
    cluster.topology("stop-node", "2")
    assert (await cluster_store.hit(dead[0], 10, 60)).count == 0
    # Within the dead master's pause, the others' keys are still counted, one by one.
    for key in live[:5]:
        assert (await cluster_store.hit(key, 10, 60)).count == (2 if key == live[0] else 1)
    await cluster_store.put("cached", b"answer", 60)
    assert await cluster_store.get("cached") == (
        None if key_slot((cluster_store._prefix + "cached").encode("utf-8")) in dead_slots else b"answer"
    )


async def test_up_says_redis_is_failing_while_a_cluster_master_is_down(
    cluster: DisposableCluster, settings: Settings
) -> None:
    async with catalogue_client(settings, redis_url=cluster.url) as client:
        assert (await client.get("/up")).json()["checks"]["redis"] == "ok"
        cluster.topology("stop-node", "2")
        health = await client.get("/up")
        api = await client.get("/api/v1/resource/1")
    assert redis_named_degraded(health.status_code, health.json())
    assert api.status_code == 200


async def test_up_says_redis_is_failing_while_the_cluster_refuses_commands(
    cluster: DisposableCluster, settings: Settings
) -> None:
    # Master 2 forgets one of its slots while the others still route it there: with full coverage
    # required, it answers CLUSTERDOWN to every command but PING, and the client still sees all
    # slots covered.
    cluster.cli(2, "config", "set", "cluster-require-full-coverage", "yes")
    cluster.cli(2, "cluster", "delslots", "16383")
    cluster.wait_for_state(2, "fail")
    async with catalogue_client(settings, redis_url=cluster.url) as client:
        health = await client.get("/up")
        api = await client.get("/api/v1/resource/1")
    assert "CLUSTERDOWN" in cluster.cli(2, "set", "{x}", "1")
    assert [cluster.cli(node, "ping").strip() for node in range(3)] == ["PONG"] * 3
    assert redis_named_degraded(health.status_code, health.json())
    assert api.status_code == 200


@pytest.fixture
def read_only_replica(tmp_path: Path) -> Iterator[str]:
    """A Redis of the test's own, replica of a master that does not exist: it answers PING and
    reads, and refuses writes."""
    require_redis_server()
    port = next(port for port in range(7900, 8000) if free(port))
    master = next(port for port in range(8000, 8100) if free(port))
    subprocess.run(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--daemonize", "yes",
         "--dir", str(tmp_path), "--save", "", "--appendonly", "no",
         "--replicaof", "127.0.0.1", str(master)],
        check=True, capture_output=True, timeout=10,
    )  # fmt: skip
    try:
        for _ in range(50):
            if not free(port):
                break
            time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"], capture_output=True, timeout=10)


async def test_up_says_redis_is_failing_on_a_read_only_replica(
    read_only_replica: str, settings: Settings
) -> None:
    async with catalogue_client(settings, redis_url=read_only_replica) as client:
        health = await client.get("/up")
    assert redis_named_degraded(health.status_code, health.json())


async def test_up_is_ok_on_a_healthy_cluster(settings: Settings) -> None:
    async with catalogue_client(settings, redis_url=redis_cluster_url()) as client:
        health = await client.get("/up")
    assert health.status_code == 200
    assert health.json()["checks"]["redis"] == "ok"
    assert REDIS_DEGRADED not in health.json()["degraded"]
