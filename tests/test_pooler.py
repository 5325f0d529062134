"""The service through a transaction-mode pooler (PgBouncer, `scripts/topology/pgbouncer`): reads,
writes and the back office work, statements stay bounded, prepared statements never meet on a shared
server connection, and the change feed listens on its direct URL."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import asyncpg
import pytest
from pydantic import ValidationError
from sqlalchemy import literal_column, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.config import Settings
from marketplace.database.changes import CHANNEL
from marketplace.database.engine import create_engine
from marketplace.database.readers import Read
from marketplace.fixtures.loader import load_document
from marketplace.services import Services, build_services
from tests.backoffice.conftest import BackOffice
from tests.catalogue import MEMBER_CHAT_ID, catalogue
from tests.conftest import GRANT_SECRET, make_client
from tests.profiles import postgresql_only, require_pooler, sqlite_only, through_pooler

BOUND = 0.5
# Far longer than every bound above: a statement still running then was not bounded.
PATIENCE = 15.0
# More clients at once than the pooler has server connections per database (default_pool_size 20).
CLIENTS = 40

READ_PATHS = (
    "/api/v1/resource/1",
    "/api/v1/resource/2",
    "/api/v1/resource/versions/1",
    "/api/v1/resource/version/1",
    "/api/v1/resource/search",
    "/api/v1/resource/user?name=bob",
    "/api/v1/author/1",
    "/api/v1/gift/WELCOME10",
    "/api/v1/author/5",
)


@pytest.fixture
def pooled(settings: Settings) -> Settings:
    """The test's settings with its database reached through the pooler, the LISTEN direct."""
    require_pooler()
    direct = settings.database_listen_url or settings.database_url
    return settings.model_copy(update=through_pooler(direct))


@pytest.fixture
async def pooled_services(pooled: Settings) -> AsyncIterator[Services]:
    built = build_services(pooled)
    await load_document(built.engine, catalogue())
    yield built
    await built.close()


def direct_dsn(settings: Settings) -> str:
    assert settings.database_listen_url is not None
    return settings.database_listen_url


@postgresql_only
async def test_reads_writes_and_the_back_office_work_through_a_transaction_pooler(
    pooled_services: Services, pooled: Settings
) -> None:
    async with make_client(pooled_services) as client:
        answers = await asyncio.gather(
            *(
                client.get(path, headers={"X-Forwarded-For": f"10.0.{n}.{i}"})
                for n in range(4)
                for i, path in enumerate(READ_PATHS)
            )
        )
        assert [answer.status_code for answer in answers] == [200] * len(answers)
        granted = await client.post(
            f"/api/v1/chat/{MEMBER_CHAT_ID}/apply/2",
            json={"custom_password": GRANT_SECRET},
            headers={"X-Forwarded-For": "10.1.0.1"},
        )
        assert granted.status_code == 200
        result = await BackOffice(pooled).ok("users", "ban", "2", "--json")
        assert [change["action"] for change in result.objects] == ["user.banned"]
        async with pooled_services.sessions() as session:
            banned = await session.scalar(text("SELECT banned FROM users WHERE id = 2"))
        assert banned is True


@postgresql_only
async def test_the_statement_timeout_is_enforced_through_the_pooler(pooled: Settings) -> None:
    services = build_services(pooled.model_copy(update={"db_statement_timeout_seconds": BOUND}))
    try:
        # In a transaction: the server's own bound, set for the transaction only.
        async with services.engine.connect() as connection:
            with pytest.raises(DBAPIError, match="canceling statement due to statement timeout"):
                await asyncio.wait_for(connection.execute(text("SELECT pg_sleep(30)")), PATIENCE)
        # A public read (no transaction): the driver cancels it on the server at the bound.
        sleep = Read(select(literal_column("pg_sleep(31)")))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(services.reads.reader.point(sleep), PATIENCE)
        admin = await asyncpg.connect(direct_dsn(pooled))
        try:
            for _ in range(int(PATIENCE / 0.05)):
                running = await admin.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(31)%' AND pid <> $1",
                    admin.get_server_pid(),
                )
                if running == 0:
                    break
                await asyncio.sleep(0.05)
            assert running == 0, "the read went on running on the server"
        finally:
            await admin.close()
        # Session state never leaks to the pooler's other clients: the bound was the transaction's.
        async with services.engine.connect() as connection:
            await connection.commit()
        async with services.sessions() as session:
            assert await session.scalar(text("SHOW statement_timeout")) == "0"
    finally:
        await services.close()


async def distinct_queries(engine: AsyncEngine, client: int) -> list[int]:
    """Statements of their own text on one connection, in and out of transactions."""
    answers = []
    async with engine.connect() as connection:
        for n in range(3):
            answers.append(int(await connection.scalar(text(f"SELECT {client} * 10 + {n} AS value_{n}"))))
        await connection.commit()
    async with engine.connect() as connection:
        autocommit = await connection.execution_options(isolation_level="AUTOCOMMIT")
        for n in range(3, 6):
            answers.append(int(await autocommit.scalar(text(f"SELECT {client} * 10 + {n} AS value_{n}"))))
    return answers


@postgresql_only
async def test_prepared_statements_never_collide_through_few_server_connections(pooled: Settings) -> None:
    engine = create_engine(pooled.model_copy(update={"db_pool_size": CLIENTS, "db_max_overflow": 0}))
    try:
        for _ in range(3):
            answers = await asyncio.gather(*(distinct_queries(engine, client) for client in range(CLIENTS)))
            assert answers == [[client * 10 + n for n in range(6)] for client in range(CLIENTS)]
    finally:
        await engine.dispose()


@postgresql_only
async def test_public_reads_never_collide_through_few_server_connections(pooled_services: Services) -> None:
    reads = [Read(select(literal_column(f"{n}").label(f"value_{n}"))) for n in range(CLIENTS)]
    reader = pooled_services.reads.reader
    for _ in range(3):
        rows = await asyncio.gather(*(reader.point(read) for read in reads))
        assert [row[0][0] for row in rows] == list(range(CLIENTS))


async def until_following(services: Services) -> int:
    for _ in range(500):
        generation = services.worker_cache.generation()
        if generation is not None:
            return generation
        await asyncio.sleep(0.01)
    raise AssertionError("the worker never followed the database's changes")


@postgresql_only
async def test_the_change_feed_listens_on_the_listen_url(pooled_services: Services, pooled: Settings) -> None:
    before = await until_following(pooled_services)
    notifier = await asyncpg.connect(direct_dsn(pooled))
    try:
        await notifier.execute(f"NOTIFY {CHANNEL}")
    finally:
        await notifier.close()
    for _ in range(500):
        if pooled_services.worker_cache.generation() != before:
            break
        await asyncio.sleep(0.01)
    assert pooled_services.worker_cache.generation() != before, "the notice never reached the worker"


@postgresql_only
async def test_a_transaction_pooler_without_a_listen_url_is_warned_of_at_start(
    pooled: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="marketplace"):
        services = build_services(pooled.model_copy(update={"database_listen_url": None}))
        await services.close()
        with_listen_url = build_services(pooled)
        await with_listen_url.close()
    warnings = [record.getMessage() for record in caplog.records if "LISTEN_URL" in record.getMessage()]
    assert len(warnings) == 1
    assert "cannot be delivered through a transaction-mode pooler" in warnings[0]


@sqlite_only
def test_the_pooler_setting_and_the_listen_url_are_checked(settings: Settings) -> None:
    assert Settings.model_fields["database_pooler"].default == "none"
    assert Settings.model_fields["database_listen_url"].default is None
    with pytest.raises(ValidationError, match="database_pooler"):
        Settings(_env_file=None, database_pooler="session")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="PostgreSQL URL"):
        Settings(_env_file=None, database_listen_url="sqlite:///x.db")  # type: ignore[call-arg]
