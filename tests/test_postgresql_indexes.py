"""On PostgreSQL, the search filter and the user-name prefix lookup are served by indexes."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.catalogue.members import names_starting_with
from marketplace.catalogue.resources import search_published
from marketplace.services import Services
from tests.profiles import postgresql_only


async def _large_catalogue(engine: AsyncEngine) -> None:
    """Enough rows that the planner weighs indexes as it would in production."""
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO users (id, name, closed, banned, created_at, updated_at) "
                "SELECT g, 'user' || g, false, false, now(), now() FROM generate_series(1, 20000) g"
            )
        )
        await connection.execute(
            text(
                "INSERT INTO resources (id, user_id, name, tag, description, price, status, slug, download, "
                "created_at, updated_at) SELECT g, g, 'Plugin ' || g, 'Tagline ' || g, '', 0, 'published', "
                "'plugin-' || g, 0, now(), now() FROM generate_series(1, 20000) g"
            )
        )
        await connection.execute(text("ANALYZE users"))
        await connection.execute(text("ANALYZE resources"))


async def _plan(engine: AsyncEngine, statement: str) -> str:
    await _large_catalogue(engine)
    async with engine.connect() as connection:
        # Only to keep the test small: on a catalogue this size a sequential scan still costs less.
        await connection.execute(text("SET enable_seqscan = off"))
        rows = (await connection.execute(text(f"EXPLAIN {statement}"))).scalars().all()
    return "\n".join(rows)


@postgresql_only
async def test_search_filter_uses_the_trigram_indexes(services: Services) -> None:
    plan = await _plan(
        services.engine,
        "SELECT count(id) FROM resources WHERE status = 'published' AND deleted_at IS NULL "
        "AND (name ILIKE '%economy%' OR tag ILIKE '%economy%')",
    )
    assert "ix_resources_name_trgm" in plan and "ix_resources_tag_trgm" in plan
    # The statement the service runs works on the same schema.
    assert (await search_published(services.reads, q="economy", page=1, per_page=15)).total == 0


@postgresql_only
async def test_user_name_prefix_lookup_uses_an_index(services: Services) -> None:
    plan = await _plan(
        services.engine,
        "SELECT name FROM users WHERE deleted_at IS NULL AND lower(name) LIKE lower('ali' || '%')",
    )
    assert "ix_users_lower_name_pattern" in plan
    assert await names_starting_with(services.reads.reader, "ali") == []


@postgresql_only
async def test_the_user_name_lookup_reads_only_the_prefix_range_in_a_generic_plan(services: Services) -> None:
    from marketplace.catalogue.members import NAMES_STARTING_WITH, _name_range
    from marketplace.database.readers import PreparedRead

    await _large_catalogue(services.engine)
    prepared = PreparedRead.compile(NAMES_STARTING_WITH, services.engine.dialect, convert_columns=False)
    arguments = prepared.arguments(("ali%", *_name_range("ali")))
    pooled = await services.engine.raw_connection()
    try:
        connection = pooled.driver_connection
        assert connection is not None
        # The plan the driver's prepared statement gets once PostgreSQL stops planning per value.
        await connection.execute("SET plan_cache_mode = force_generic_plan")
        await connection.execute(f"PREPARE names_lookup AS {prepared.sql}")
        literals = ", ".join("'" + str(value).replace("'", "''") + "'" for value in arguments)
        plan = "\n".join(
            row[0] for row in await connection.fetch(f"EXPLAIN EXECUTE names_lookup({literals})")
        )
        await connection.execute("DEALLOCATE names_lookup")
        await connection.execute("RESET plan_cache_mode")
    finally:
        pooled.close()
    assert "ix_users_lower_name_pattern" in plan and "~>=~" in plan
    expected = ["user1", "user10", "user100", "user1000", *(f"user1000{n}" for n in range(6))]
    assert await names_starting_with(services.reads.reader, "USER1") == expected
