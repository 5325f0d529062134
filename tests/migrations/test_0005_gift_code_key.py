"""Migration 0005: every existing gift code gets its comparison key, on both profiles."""

from __future__ import annotations

import unicodedata

import pytest
from alembic import command
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.config import Settings
from marketplace.database.engine import create_engine
from marketplace.migrations.runner import alembic_config, current_revision

CAFE_NFD = unicodedata.normalize("NFD", "Café")
BEFORE = "0004"


async def migrate(engine: AsyncEngine, revision: str, *, down: bool = False) -> None:
    def run(connection: Connection) -> None:
        config = alembic_config()
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)

    async with engine.begin() as connection:
        await connection.run_sync(run)


async def insert_gifts(engine: AsyncEngine, *codes: str) -> None:
    async with engine.begin() as connection:
        for number, code in enumerate(codes, start=1):
            await connection.execute(
                text(
                    "INSERT INTO gifts (id, code, percentage, enabled, uses, created_at, updated_at)"
                    " VALUES (:id, :code, 10, true, 0, '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
                ),
                {"id": number, "code": code},
            )


@pytest.fixture
async def engine(database_url: str) -> AsyncEngine:
    """The test's database taken back to the schema before the key (it was migrated to head)."""
    engine = create_engine(Settings(_env_file=None, database_url=database_url))  # type: ignore[call-arg]
    await migrate(engine, BEFORE, down=True)
    yield engine  # type: ignore[misc]
    await engine.dispose()


async def test_the_migration_fills_the_key_of_every_existing_code(engine: AsyncEngine) -> None:
    await insert_gifts(engine, "ΟΔΟΣ", CAFE_NFD, "WELCOME10", "Straße")
    await migrate(engine, "head")
    async with engine.connect() as connection:
        rows = (await connection.execute(text("SELECT code, code_key FROM gifts ORDER BY id"))).all()
    assert [tuple(row) for row in rows] == [
        ("ΟΔΟΣ", "οδοσ"),
        (CAFE_NFD, unicodedata.normalize("NFC", "café")),
        ("WELCOME10", "welcome10"),
        ("Straße", "strasse"),
    ]


async def test_the_migration_stops_on_codes_that_become_one_and_changes_nothing(
    engine: AsyncEngine,
) -> None:
    await insert_gifts(engine, unicodedata.normalize("NFC", "Café"), CAFE_NFD.upper())
    with pytest.raises(RuntimeError, match="differ only in case or Unicode normalisation"):
        await migrate(engine, "head")
    assert await current_revision(engine) == BEFORE
    async with engine.connect() as connection:
        assert (await connection.execute(text("SELECT count(*) FROM gifts"))).scalar_one() == 2
