"""A stalled database gives the contract's 500 quickly: statements, lock waits, connecting and
waiting for a pooled connection are all bounded by settings (the commands' engine is not)."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
from collections.abc import Iterator

import pytest
from sqlalchemy import literal_column, select, text
from sqlalchemy.exc import DBAPIError, OperationalError

from marketplace.config import Settings
from marketplace.database.engine import create_engine
from marketplace.database.readers import Read
from marketplace.fixtures.loader import load_document
from marketplace.services import build_services
from marketplace.telemetry.metrics import DB_POOL_TIMEOUTS
from tests.catalogue import MEMBER_CHAT_ID, catalogue
from tests.conftest import GRANT_SECRET, make_client
from tests.profiles import postgresql_only, sqlite_only

SERVER_ERROR = b'{"message":"Server Error"}'
BOUND = 0.5
# Far longer than every bound above: a request still waiting then was not bounded.
PATIENCE = 15.0


@pytest.fixture
def bounded(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "db_statement_timeout_seconds": BOUND,
            "db_pool_timeout_seconds": BOUND,
            "db_connect_timeout_seconds": BOUND,
        }
    )


def test_defaults_bound_every_wait() -> None:
    fields = Settings.model_fields
    assert fields["db_statement_timeout_seconds"].default == 5.0
    assert fields["db_connect_timeout_seconds"].default == 5.0
    assert fields["db_pool_timeout_seconds"].default == 2.0


@postgresql_only
async def test_a_locked_table_gives_the_contracts_500_instead_of_waiting(bounded: Settings) -> None:
    services = build_services(bounded)
    holder = create_engine(bounded)
    try:
        await load_document(services.engine, catalogue())
        async with holder.connect() as locking:
            await locking.execute(text("BEGIN"))
            await locking.execute(text("LOCK TABLE resources IN ACCESS EXCLUSIVE MODE"))
            async with make_client(services) as client:
                response = await asyncio.wait_for(client.get("/api/v1/resource/1"), PATIENCE)
            await locking.execute(text("ROLLBACK"))
        assert (response.status_code, response.content) == (500, SERVER_ERROR)
        async with make_client(services, client_ip="10.0.0.2") as client:
            assert (await client.get("/api/v1/resource/1")).status_code == 200
    finally:
        await holder.dispose()
        await services.close()


@postgresql_only
async def test_a_long_statement_is_cancelled_by_the_server(bounded: Settings) -> None:
    services = build_services(bounded)
    try:
        async with services.engine.connect() as connection:
            with pytest.raises(DBAPIError, match="statement timeout"):
                await asyncio.wait_for(connection.execute(text("SELECT pg_sleep(30)")), PATIENCE)
    finally:
        await services.close()


@postgresql_only
async def test_the_commands_engine_runs_statements_without_the_bound(bounded: Settings) -> None:
    engine = create_engine(bounded)
    try:
        async with engine.connect() as connection:
            await connection.execute(text(f"SELECT pg_sleep({BOUND * 2})"))
    finally:
        await engine.dispose()


async def test_no_free_connection_gives_the_contracts_500_within_the_pool_timeout(
    bounded: Settings, profile: str
) -> None:
    single = bounded.model_copy(update={"db_pool_size": 1, "db_max_overflow": 0})
    services = build_services(single)
    timeouts_before = DB_POOL_TIMEOUTS._value.get()
    try:
        await load_document(services.engine, catalogue())
        async with services.engine.connect():  # the pool's only connection, held
            async with make_client(services) as client:
                if profile == "postgresql":
                    request = client.get("/api/v1/resource/1")
                else:  # SQLite reads need no pooled connection; the grant writes through one
                    request = client.post(
                        f"/api/v1/chat/{MEMBER_CHAT_ID}/apply/8", data={"custom_password": GRANT_SECRET}
                    )
                response = await asyncio.wait_for(request, PATIENCE)
        assert (response.status_code, response.content) == (500, SERVER_ERROR)
        assert response.headers["x-ratelimit-limit"] == "120"
        assert DB_POOL_TIMEOUTS._value.get() == timeouts_before + 1
    finally:
        await services.close()


@sqlite_only
async def test_sqlite_reads_are_answered_while_every_pooled_connection_is_held(bounded: Settings) -> None:
    single = bounded.model_copy(update={"db_pool_size": 1, "db_max_overflow": 0})
    services = build_services(single)
    try:
        await load_document(services.engine, catalogue())
        async with services.engine.connect(), make_client(services) as client:
            for path in ("/api/v1/resource/1", "/api/v1/resource/search?q=a", "/api/v1/resource/user?name=a"):
                response = await asyncio.wait_for(client.get(path), PATIENCE)
                assert response.status_code == 200, path
    finally:
        await services.close()


@sqlite_only
async def test_a_long_read_on_the_sqlite_read_connection_is_interrupted(bounded: Settings) -> None:
    services = build_services(bounded)
    endless = select(literal_column("count(*)")).select_from(
        text("(WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT x FROM n)")
    )
    try:
        reader = services.reads.reader
        for run in (reader.point, reader.scan):
            with pytest.raises(sqlite3.OperationalError, match="interrupted"):
                await asyncio.wait_for(run(Read(endless)), PATIENCE)
            # The deadline is per statement: the next one runs in full.
            assert await run(Read(select(literal_column("1")))) == [(1,)]
    finally:
        await services.close()


@sqlite_only
async def test_a_write_lock_held_elsewhere_gives_the_grant_the_contracts_500(bounded: Settings) -> None:
    services = build_services(bounded)
    holder = create_engine(bounded)
    try:
        await load_document(services.engine, catalogue())
        async with holder.connect() as locking:
            await locking.execute(text("BEGIN IMMEDIATE"))
            async with make_client(services) as client:
                response = await asyncio.wait_for(
                    client.post(
                        f"/api/v1/chat/{MEMBER_CHAT_ID}/apply/8", data={"custom_password": GRANT_SECRET}
                    ),
                    PATIENCE,
                )
            await locking.execute(text("ROLLBACK"))
        assert (response.status_code, response.content) == (500, SERVER_ERROR)
    finally:
        await holder.dispose()
        await services.close()


@sqlite_only
async def test_a_long_sqlite_statement_is_interrupted(bounded: Settings) -> None:
    engine = create_engine(bounded, statement_timeout=BOUND)
    endless = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT count(*) FROM n"
    try:
        async with engine.connect() as connection:
            with pytest.raises(OperationalError, match="interrupted"):
                await asyncio.wait_for(connection.execute(text(endless)), PATIENCE)
            # The deadline is per statement: the next one runs in full.
            assert (await connection.execute(text("SELECT 1"))).scalar_one() == 1
    finally:
        await engine.dispose()


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never says a word (a database that hangs)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield int(listener.getsockname()[1])


@postgresql_only
async def test_a_database_that_never_answers_the_connect_gives_the_contracts_500(
    bounded: Settings, silent_server: int
) -> None:
    hung = bounded.model_copy(
        update={"database_url": f"postgresql://postgres@127.0.0.1:{silent_server}/hung"}
    )
    services = build_services(hung)
    try:
        async with make_client(services) as client:
            response = await asyncio.wait_for(client.get("/api/v1/resource/1"), PATIENCE)
        assert (response.status_code, response.content) == (500, SERVER_ERROR)
    finally:
        await services.close()


@postgresql_only
async def test_up_says_503_when_the_database_never_answers(bounded: Settings, silent_server: int) -> None:
    hung = bounded.model_copy(
        update={"database_url": f"postgresql://postgres@127.0.0.1:{silent_server}/hung"}
    )
    services = build_services(hung)
    try:
        async with make_client(services) as client:
            response = await asyncio.wait_for(client.get("/up"), PATIENCE)
        assert response.status_code == 503
        assert response.json()["checks"]["database"] == "failing"
    finally:
        await services.close()
