"""Read replicas against a real PostgreSQL streaming standby (tests/topology.py).

Each test renames resource 1 on the primary and sees, from the answers and from the reads each
database ran, which database served: the standby lags for real when its replay is paused, and
nodes are stopped and started for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from marketplace.config import Settings
from marketplace.database.changes import NoChangeFeed
from marketplace.database.readers import observed_reads
from marketplace.database.replicas import ReplicaReader
from marketplace.health import PRIMARY_DEGRADED
from marketplace.services import Services, build_services
from marketplace.telemetry.metrics import READ_REPLICA_FAILURES
from tests.catalogue import OWNER_CHAT_ID
from tests.conftest import GRANT_SECRET, make_client
from tests.topology import StandbyDatabase, StandbyTopology, dsn
from tests.upstream import FakeUpstream

SERVER_ERROR = b'{"message":"Server Error"}'
# How long a behaviour that depends on the replicas' checks may take to show (a generous bound).
PATIENCE_SECONDS = 15.0
_names = itertools.count()
# Each read from an address of its own: the limiters are not what these tests are about.
_addresses = itertools.count(1)


def fresh_address() -> dict[str, str]:
    number = next(_addresses)
    return {"X-Forwarded-For": f"10.{number >> 16 & 255}.{number >> 8 & 255}.{number & 255}"}


def fresh_name(label: str) -> str:
    return f"{label} {next(_names)}"


class Worker:
    """One worker of the service on the standby topology, its answer cache off."""

    def __init__(self, services: Services, client: httpx.AsyncClient) -> None:
        self.services = services
        self.client = client
        reader = services.reads.reader
        assert isinstance(reader, ReplicaReader)
        self.reader = reader
        self.standby_reads = 0

    def count_standby_read(self, _sql: str) -> None:
        self.standby_reads += 1

    async def name(self) -> str:
        answer = await self.client.get("/api/v1/resource/1", headers=fresh_address())
        assert answer.status_code == 200, answer.text
        return str(answer.json()["name"])

    async def until_named(self, expected: str) -> None:
        for _ in range(int(PATIENCE_SECONDS / 0.05)):
            if await self.name() == expected:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"resource 1 never read as {expected!r}")

    async def until_the_standby_serves(self) -> None:
        for _ in range(int(PATIENCE_SECONDS / 0.05)):
            before = self.standby_reads
            await self.name()
            if self.standby_reads > before:
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the standby never served a read")


@contextlib.asynccontextmanager
async def serving(
    database: StandbyDatabase, upstream: FakeUpstream, tmp_path: Path, **update: object
) -> AsyncIterator[Worker]:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        database_url=database.primary_url,
        database_read_urls=database.standby_url,
        base_url="http://marketplace.test",
        chat_api_url=f"{upstream.url}/chat-api",
        stats_api_url=f"{upstream.url}/stats-api",
        storage_dir=str(tmp_path / "storage"),
        chat_grant_secret=GRANT_SECRET,
        app_key="test-key",
        worker_cache_max_entries=0,
        db_connect_timeout_seconds=1.0,
    ).model_copy(update=update)
    services = build_services(settings)
    services.worker_cache.enabled = False
    try:
        async with make_client(services) as client:
            worker = Worker(services, client)
            with observed_reads(worker.reader.replicas[0].engine, worker.count_standby_read):
                yield worker
    finally:
        await services.close()


async def rename_quietly(database: StandbyDatabase, name: str) -> None:
    """A write on the primary that announces nothing (an operator's psql, a job of another service)."""
    connection = await asyncpg.connect(dsn(database.primary_url))
    try:
        await connection.execute("UPDATE resources SET name = $1 WHERE id = 1", name)
    finally:
        await connection.close()


async def rename_announced(worker: Worker, name: str) -> None:
    """A write through the service's primary engine, announced to every worker."""
    from sqlalchemy import text

    async with worker.services.write_sessions() as session, session.begin():
        await session.execute(text("UPDATE resources SET name = :name WHERE id = 1"), {"name": name})


async def test_a_replica_that_falls_behind_stops_serving_while_the_change_feed_is_down(
    standby: StandbyTopology, standby_database: StandbyDatabase, upstream: FakeUpstream, tmp_path: Path
) -> None:
    before = fresh_name("Before The Lag")
    await rename_quietly(standby_database, before)
    await standby.replayed()
    async with serving(standby_database, upstream, tmp_path, read_replica_max_lag_seconds=0.5) as worker:
        worker.reader.changes = NoChangeFeed()  # no notice can arrive: only the lag checks can tell
        await worker.until_named(before)
        await worker.until_the_standby_serves()
        await standby.pause_replay()
        after = fresh_name("After The Lag")
        await rename_quietly(standby_database, after)
        await worker.until_named(after)
        assert [await worker.name() for _ in range(5)] == [after] * 5
        health = await worker.client.get("/up")
        assert health.status_code == 200
        assert health.json()["checks"]["replicas"] == "failing"
        assert any("not proven within 0.5 s" in problem for problem in health.json()["degraded"])
        await standby.resume_replay()
        await worker.until_the_standby_serves()
        assert await worker.name() == after


async def test_a_replica_restarted_while_a_write_lands_serves_again_and_its_failures_are_counted_once(
    standby: StandbyTopology, standby_database: StandbyDatabase, upstream: FakeUpstream, tmp_path: Path
) -> None:
    async with serving(standby_database, upstream, tmp_path) as worker:
        await worker.until_the_standby_serves()
        standby.stop_node("standby")
        failures = READ_REPLICA_FAILURES._value.get()
        written = fresh_name("Written While The Standby Was Down")
        await rename_announced(worker, written)
        names = []
        for _ in range(30):
            names.append(await worker.name())
            await asyncio.sleep(0.1)
        assert set(names) == {written}
        # One failure episode, with at most one failed read: not a count per retry.
        assert READ_REPLICA_FAILURES._value.get() - failures <= 2
        health = await worker.client.get("/up")
        assert (health.status_code, health.json()["checks"]["replicas"]) == (200, "failing")
        assert any("failing" in problem for problem in health.json()["degraded"])
        standby.start_node("standby")
        await worker.until_the_standby_serves()
        assert await worker.name() == written
        assert (await worker.client.get("/up")).json()["checks"]["replicas"] == "ok"


async def test_a_worker_never_answers_older_than_what_it_has_already_answered(
    standby: StandbyTopology, standby_database: StandbyDatabase, upstream: FakeUpstream, tmp_path: Path
) -> None:
    before = fresh_name("Before")
    await rename_quietly(standby_database, before)
    await standby.replayed()
    # Two replicas: the standby, and the primary's database itself (it has every write).
    read_urls = f"{standby_database.standby_url},{standby_database.primary_url}"
    async with serving(
        standby_database, upstream, tmp_path, database_read_urls=read_urls, read_replica_max_lag_seconds=4.0
    ) as worker:
        worker.reader.changes = NoChangeFeed()  # no notice: only the floor keeps the reads in order
        await worker.until_named(before)
        await worker.until_the_standby_serves()
        await standby.pause_replay()
        after = fresh_name("After")
        await rename_quietly(standby_database, after)  # unannounced: the standby stays within the bound
        await asyncio.sleep(1.5)  # a check of the replicas has measured the write
        names = [await worker.name() for _ in range(20)]
        assert after in names
        assert before not in names[names.index(after) :]


async def test_reads_are_answered_by_the_standby_while_the_primary_is_down_and_everything_recovers(
    standby: StandbyTopology,
    standby_database: StandbyDatabase,
    upstream: FakeUpstream,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    grant = f"/api/v1/chat/{OWNER_CHAT_ID}/apply/1"
    async with serving(standby_database, upstream, tmp_path) as worker:
        await worker.until_the_standby_serves()
        assert (await worker.client.post(grant, json={"custom_password": GRANT_SECRET})).status_code == 200
        standby.stop_node("primary")
        statuses = []
        for _ in range(20):
            for path in ("/api/v1/resource/1", "/api/v1/resource/version/1"):
                statuses.append((await worker.client.get(path, headers=fresh_address())).status_code)
            await asyncio.sleep(0.1)
        assert set(statuses) == {200}
        health = await worker.client.get("/up")
        assert health.status_code == 200
        assert health.json()["checks"]["database"] == "failing"
        assert PRIMARY_DEGRADED in health.json()["degraded"]
        refused = await worker.client.post(grant, json={"custom_password": GRANT_SECRET})
        assert (refused.status_code, refused.content) == (500, SERVER_ERROR)
        standby.start_node("primary")
        for _ in range(int(PATIENCE_SECONDS / 0.2)):
            answer = await worker.client.post(
                grant, json={"custom_password": GRANT_SECRET}, headers=fresh_address()
            )
            if answer.status_code == 200:
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError("no grant succeeded after the primary came back")
        after = fresh_name("After The Outage")
        await rename_announced(worker, after)
        await worker.until_named(after)
        await worker.until_the_standby_serves()
        # The change feed is proven again within seconds of the primary's return.
        for _ in range(int(PATIENCE_SECONDS / 0.2)):
            checks = (await worker.client.get("/up")).json()["checks"]
            if checks.get("changes") == "ok":
                break
            await asyncio.sleep(0.2)
        assert checks == {"database": "ok", "changes": "ok", "replicas": "ok", "webhooks": "ok"}
    assert "Can't reconnect until invalid transaction is rolled back" not in caplog.text
