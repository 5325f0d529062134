"""Read replicas: the public reads go to them, never older than the changes a worker has seen.

The "replica" here is a copy of the primary's database in which one resource has another name, so
that each answer shows which database served it. A copy is not in recovery, so it counts as caught
up unless a test holds it back. Tests against a real streaming standby: test_replica_standby.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import cast

import asyncpg
import httpx
import pytest
from pydantic import ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.config import Settings
from marketplace.database.engine import create_engine
from marketplace.database.readers import PostgresReader, Reader
from marketplace.database.replicas import Replica, ReplicaReader
from marketplace.fixtures.loader import load_document
from marketplace.services import Services, build_services
from marketplace.telemetry.metrics import READ_REPLICA_FAILURES, READ_REPLICAS_FAILING
from tests.catalogue import catalogue
from tests.conftest import make_client
from tests.profiles import POSTGRES_ADMIN_URL, postgresql_only, unique_name
from tests.test_worker_cache import rename_elsewhere, until_following

PRIMARY_NAME = "Name On The Primary"
REPLICA_NAME = "Name On The Replica"


def dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def admin(statement: str) -> None:
    connection = await asyncpg.connect(POSTGRES_ADMIN_URL)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@pytest.fixture
async def replica_url(settings: Settings) -> AsyncIterator[str]:
    """A copy of the primary's loaded database, resource 1 renamed in each."""
    engine = create_engine(settings)
    try:
        await load_document(engine, catalogue())
    finally:
        await engine.dispose()
    await rename_elsewhere(settings, 1, PRIMARY_NAME)
    primary = make_url(settings.database_url)
    name = unique_name("mp_replica")
    # A pooler in between keeps idle server connections to the primary's database; a template must have none.
    await admin(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE datname = '{primary.database}' AND pid <> pg_backend_pid()"
    )
    await admin(f'CREATE DATABASE "{name}" TEMPLATE "{primary.database}"')
    url = primary.set(database=name).render_as_string(hide_password=False)
    copy = await asyncpg.connect(dsn(url))
    try:
        await copy.execute("UPDATE resources SET name = $1 WHERE id = 1", REPLICA_NAME)
    finally:
        await copy.close()
    yield url
    await admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def replicated(
    settings: Settings, replica_url: str
) -> AsyncIterator[tuple[Services, httpx.AsyncClient]]:
    """A worker reading from the replica, its answer cache off so that every read reaches a database."""
    services = build_services(
        settings.model_copy(update={"database_read_urls": replica_url, "worker_cache_max_entries": 0})
    )
    services.worker_cache.enabled = False
    async with make_client(services) as client:
        yield services, client
    await services.close()


def replica_reader(services: Services) -> ReplicaReader:
    reader = services.reads.reader
    assert isinstance(reader, ReplicaReader)
    return reader


async def name_of(client: httpx.AsyncClient) -> str:
    answer = await client.get("/api/v1/resource/1")
    assert answer.status_code == 200
    return str(answer.json()["name"])


async def until_named(client: httpx.AsyncClient, expected: str, seconds: float = 2.0) -> None:
    for _ in range(int(seconds / 0.05)):
        if await name_of(client) == expected:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"resource 1 never read as {expected!r}")


@postgresql_only
async def test_public_reads_go_to_a_replica_that_has_caught_up(
    replicated: tuple[Services, httpx.AsyncClient],
) -> None:
    _services, client = replicated
    await until_named(client, REPLICA_NAME)
    assert [await name_of(client) for _ in range(5)] == [REPLICA_NAME] * 5


@postgresql_only
async def test_reads_stay_on_the_primary_until_the_replica_replays_the_announced_changes(
    replicated: tuple[Services, httpx.AsyncClient], settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    services, client = replicated
    await until_named(client, REPLICA_NAME)
    replayed = asyncio.Event()
    real_replayed = Replica.replayed

    async def held_back(self: Replica) -> tuple[int, int] | None:
        # A standby that has replayed nothing, until released.
        return await real_replayed(self) if replayed.is_set() else (0, 0)

    monkeypatch.setattr(Replica, "replayed", held_back)
    await rename_elsewhere(settings, 1, "Renamed On The Primary")  # a write announced by the primary
    await until_named(client, "Renamed On The Primary")
    assert [await name_of(client) for _ in range(5)] == ["Renamed On The Primary"] * 5
    reader = replica_reader(services)
    assert all(replica.position < reader.floor for replica in reader.replicas)
    replayed.set()
    await until_named(client, REPLICA_NAME)


@postgresql_only
async def test_a_failing_replica_is_set_aside_and_its_read_answered_by_the_primary(
    settings: Settings, replica_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    services = build_services(settings.model_copy(update={"database_read_urls": replica_url}))
    services.worker_cache.enabled = False
    try:
        async with make_client(services) as client:
            await until_named(client, REPLICA_NAME)
            # The replica's server goes away: nothing listens where it was.
            replica = replica_reader(services).replicas[0]
            gone = create_engine(
                settings.model_copy(update={"database_url": "postgresql://postgres@127.0.0.1:1/gone"})
            )
            replica.engine, replica.reader = gone, PostgresReader(gone)
            failures = READ_REPLICA_FAILURES._value.get()
            try:
                answers = [await client.get("/api/v1/resource/1") for _ in range(3)]
            finally:
                await gone.dispose()
            assert [answer.status_code for answer in answers] == [200, 200, 200]
            assert {answer.json()["name"] for answer in answers} == {PRIMARY_NAME}
            assert replica.failing
            assert "read replica" in caplog.text
            assert caplog.text.count("reads go to the primary until it answers") == 1  # once per outage
            assert READ_REPLICA_FAILURES._value.get() > failures
    finally:
        await services.close()


def test_read_replicas_need_a_postgresql_primary_and_postgresql_urls() -> None:
    with pytest.raises(ValidationError, match="need a PostgreSQL MARKETPLACE_DATABASE_URL"):
        Settings(
            _env_file=None,  # type: ignore[call-arg]
            database_url="sqlite:///./x.db",
            database_read_urls="postgresql://replica/db",
        )
    with pytest.raises(ValidationError, match="read replicas are PostgreSQL URLs"):
        Settings(
            _env_file=None,  # type: ignore[call-arg]
            database_url="postgresql://primary/db",
            database_read_urls="postgresql://replica/db, sqlite:///./x.db",
        )
    parsed = Settings(
        _env_file=None,  # type: ignore[call-arg]
        database_url="postgresql://primary/db",
        database_read_urls=" postgresql://one/db ,postgresql://two/db,",
    )
    assert parsed.read_urls == ("postgresql://one/db", "postgresql://two/db")


def test_the_replica_lag_bound_is_a_positive_number_of_seconds() -> None:
    assert Settings(_env_file=None).read_replica_max_lag_seconds == 1.0  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="greater than 0"):
        Settings(_env_file=None, read_replica_max_lag_seconds=0)  # type: ignore[call-arg]


@postgresql_only
async def test_an_answer_read_from_a_replica_is_kept_as_old_as_the_replicas_proof(
    settings: Settings, replica_url: str
) -> None:
    # A long lag bound: one check proves the replica, and no other check moves its proof meanwhile.
    services = build_services(
        settings.model_copy(update={"database_read_urls": replica_url, "read_replica_max_lag_seconds": 40})
    )
    try:
        async with make_client(services) as client:
            reader = replica_reader(services)
            await until_following(services)
            # The first read after the feed's proof waits for a catch-up check; then replicas serve.
            assert (await client.get("/api/v1/resource/2")).status_code == 200
            await reader.checked()
            services.worker_cache.clear()
            proven_at = reader.replicas[0].proven_at
            requested_at = time.monotonic()
            assert await name_of(client) == REPLICA_NAME
            assert reader.replicas[0].proven_at == proven_at
            [kept] = services.worker_cache._entries.values()
            assert kept.as_of == proven_at < requested_at
    finally:
        await services.close()


def test_a_replica_set_aside_counts_in_the_failing_gauge_until_it_answers_again() -> None:
    replica = Replica("replica-a", cast(AsyncEngine, None), cast(Reader, None))
    before = READ_REPLICAS_FAILING._value.get()
    replica.failed(OSError("connection refused"), read=True)
    replica.failed(OSError("connection refused"), read=False)
    assert READ_REPLICAS_FAILING._value.get() == before + 1
    replica.answered()
    replica.answered()
    assert READ_REPLICAS_FAILING._value.get() == before
