"""A PostgreSQL primary and its streaming standby (scripts/topology/postgresql-standby), for tests.

`MARKETPLACE_TEST_STANDBY_PRIMARY_URL` and `MARKETPLACE_TEST_STANDBY_URL` (the script's `env`) name
them; unset or not answering, the tests that need them are skipped with the reason (a failure under
MARKETPLACE_REQUIRE_SERVICES=1). A database is created on the primary once per test run, migrated
and loaded with the test catalogue; the standby has it by replication. A test that stops a node
or pauses the standby's replay gets both back, streaming, before the next test runs.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from marketplace.config import Settings
from marketplace.database.engine import create_engine
from marketplace.fixtures.loader import load_document
from marketplace.migrations.runner import upgrade_to_head
from tests.catalogue import catalogue
from tests.profiles import require_service, services_required, unique_name

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "topology" / "postgresql-standby"
PRIMARY_ADMIN_URL = os.environ.get("MARKETPLACE_TEST_STANDBY_PRIMARY_URL", "")
STANDBY_ADMIN_URL = os.environ.get("MARKETPLACE_TEST_STANDBY_URL", "")
# How long the standby may take to replay the test database, or to stream again after a restart.
REPLICATION_PATIENCE_SECONDS = 30.0


def dsn(url: str) -> str:
    """A URL as asyncpg takes it."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def fetch_value(url: str, statement: str) -> object:
    connection = await asyncpg.connect(dsn(url), timeout=5)
    try:
        return await connection.fetchval(statement)
    finally:
        await connection.close()


@dataclass(frozen=True)
class StandbyTopology:
    """The two nodes: administration URLs, and how to stop, start and slow them."""

    primary_url: str
    standby_url: str

    def stop_node(self, node: str) -> None:
        subprocess.run([str(SCRIPT), "stop-node", node], check=True, capture_output=True)

    def start_node(self, node: str) -> None:
        subprocess.run([str(SCRIPT), "start-node", node], check=True, capture_output=True)

    def restart_node(self, node: str) -> None:
        """A fast shutdown and a start: every connection to the node is cut."""
        subprocess.run([str(SCRIPT), "restart-node", node], check=True, capture_output=True)

    async def pause_replay(self) -> None:
        """The standby keeps receiving WAL but applies none of it: it falls behind for real."""
        await fetch_value(self.standby_url, "SELECT pg_wal_replay_pause()")

    async def resume_replay(self) -> None:
        await fetch_value(self.standby_url, "SELECT pg_wal_replay_resume()")

    async def replayed(self, *, database_on_standby: str | None = None) -> None:
        """Wait until the standby has replayed everything the primary has now."""
        position = await fetch_value(self.primary_url, "SELECT pg_current_wal_insert_lsn()::text")
        query = f"SELECT pg_last_wal_replay_lsn() >= '{position}'::pg_lsn"
        url = database_on_standby or self.standby_url
        for _ in range(int(REPLICATION_PATIENCE_SECONDS / 0.05)):
            try:
                if await fetch_value(url, query):
                    return
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                pass  # starting up, or the database not replayed yet
            await asyncio.sleep(0.05)
        raise AssertionError(f"the standby did not replay {position} in time")

    async def restore(self) -> None:
        """Both nodes running, the standby replaying and caught up."""
        self.start_node("primary")
        self.start_node("standby")
        for _ in range(int(REPLICATION_PATIENCE_SECONDS / 0.1)):
            try:
                if await fetch_value(self.standby_url, "SELECT pg_is_wal_replay_paused()"):
                    await self.resume_replay()
                streaming = await fetch_value(
                    self.primary_url, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
                )
                if streaming == 1:
                    break
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                pass
            await asyncio.sleep(0.1)
        await self.replayed()


@dataclass(frozen=True)
class StandbyDatabase:
    """The test run's database: on the primary, and the same database on the standby."""

    primary_url: str
    standby_url: str


@pytest.fixture(scope="session")
def standby_topology() -> StandbyTopology:
    if not PRIMARY_ADMIN_URL or not STANDBY_ADMIN_URL:
        message = (
            "no PostgreSQL standby topology: run scripts/topology/postgresql-standby start and export"
            " its env (MARKETPLACE_TEST_STANDBY_PRIMARY_URL, MARKETPLACE_TEST_STANDBY_URL)"
        )
        if services_required():
            pytest.fail(f"{message} (MARKETPLACE_REQUIRE_SERVICES=1)")
        pytest.skip(message)
    for url in (PRIMARY_ADMIN_URL, STANDBY_ADMIN_URL):
        parsed = make_url(url)
        require_service("PostgreSQL standby topology", parsed.host or "127.0.0.1", parsed.port or 5432)
    return StandbyTopology(PRIMARY_ADMIN_URL, STANDBY_ADMIN_URL)


@pytest.fixture(scope="session")
def standby_database(standby_topology: StandbyTopology) -> Iterator[StandbyDatabase]:
    name = unique_name("mp_standby")
    primary = make_url(standby_topology.primary_url).set(database=name).render_as_string(hide_password=False)
    standby = make_url(standby_topology.standby_url).set(database=name).render_as_string(hide_password=False)

    async def create() -> None:
        await fetch_value(standby_topology.primary_url, f'CREATE DATABASE "{name}"')
        engine = create_engine(Settings(_env_file=None, database_url=primary))  # type: ignore[call-arg]
        try:
            await upgrade_to_head(engine)
            await load_document(engine, catalogue())
        finally:
            await engine.dispose()
        await standby_topology.replayed(database_on_standby=standby)

    async def drop() -> None:
        await standby_topology.restore()
        await fetch_value(standby_topology.primary_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    asyncio.run(create())
    yield StandbyDatabase(primary, standby)
    asyncio.run(drop())


@pytest.fixture
def standby(
    standby_topology: StandbyTopology, standby_database: StandbyDatabase
) -> Iterator[StandbyTopology]:
    """The topology, restored after the test whatever the test did to its nodes."""
    yield standby_topology
    asyncio.run(standby_topology.restore())
