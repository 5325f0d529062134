"""Search's `q` filter read through the text indexes (catalogue/text_search.py, migration 0007)
gives exactly the rows, order and totals of the plain substring condition, on both profiles."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, func, or_, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.catalogue.resources import search_published
from marketplace.catalogue.text_search import prefilter_for, walks_the_listing
from marketplace.config import Settings
from marketplace.database.readers import GenerationCounts, Reads, observed_reads
from marketplace.models import Resource, ResourceStatus
from marketplace.services import Services, build_services
from tests.profiles import sqlite_only

# Letters whose case folds differently across databases and Python (the Kelvin sign lowers to
# ASCII `k`, dotted capital I to two characters, a final sigma by its place), LIKE's own
# metacharacters, and separators, so that words, case and patterns meet.
ALPHABET = "aAbBkKrRtT019 \u00e9\u00c9\u00df\u0130\u212a\u03a3\u03c3\u03c2-.'\"%_\\<>&"

# Words of letters and digits (which PostgreSQL's word index answers) and words of anything.
words = st.one_of(
    st.text(alphabet="aAbBkKrRtT019", min_size=1, max_size=6),
    st.text(alphabet=ALPHABET, min_size=1, max_size=6),
)


@st.composite
def catalogues(draw: st.DrawFn) -> list[tuple[str, str, str, bool]]:
    """Resources (name, tagline, status, deleted) whose texts reuse a few words, repeated."""
    vocabulary = draw(st.lists(words, min_size=1, max_size=4))
    separators = st.sampled_from([" ", "", "-", ", ", "_", "%"])

    def phrase() -> st.SearchStrategy[str]:
        return st.lists(st.tuples(st.sampled_from(vocabulary), separators), max_size=4).map(
            lambda parts: "".join(word + separator for word, separator in parts).strip()
        )

    rows = st.tuples(
        phrase().filter(bool),
        phrase(),
        st.sampled_from(["published", "published", "published", "unlisted", "draft"]),
        st.booleans(),
    )
    return draw(st.lists(rows, max_size=12))


@st.composite
def queries(draw: st.DrawFn, catalogue: list[tuple[str, str, str, bool]]) -> str:
    """What a caller types: a word or a piece of one of the texts (whole, a prefix, inside), in
    another case, or anything."""
    texts = [text for row in catalogue for text in row[:2] if text] or ["x"]
    # Half of the time a run of ASCII letters and digits: a word, or a piece of one.
    runs = [run for text in texts for run in re.findall("[A-Za-z0-9]+", text)]
    chosen = draw(st.sampled_from(runs if runs and draw(st.booleans()) else texts))
    start = draw(st.integers(0, len(chosen) - 1))
    end = draw(st.integers(start + 1, len(chosen)))
    piece = draw(st.sampled_from([chosen[start:end], chosen[:end], chosen, draw(words)]))
    piece = draw(st.sampled_from([piece, piece.upper(), piece.lower(), piece.swapcase()]))
    # What the handler passes on: trimmed, at most 80 characters, never empty.
    return piece.strip()[:80] or "a"


class SearchBed:
    """One database of the profile, reused by every generated catalogue: rows replaced each time."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.engine: AsyncEngine = services.engine

    async def replace_catalogue(self, catalogue: list[tuple[str, str, str, bool]]) -> None:
        async with self.engine.begin() as connection:
            await connection.execute(text("DELETE FROM resources"))
            for number, (name, tag, status, deleted) in enumerate(catalogue, start=1):
                await connection.execute(
                    text(
                        "INSERT INTO resources (id, user_id, name, tag, description, price, status, slug, "
                        "download, created_at, updated_at, deleted_at) VALUES (:id, 1, :name, :tag, '', 0, "
                        ":status, :slug, 0, '2026-01-01 00:00:00', '2026-01-01 00:00:00', "
                        + ("'2026-01-02 00:00:00'" if deleted else "NULL")
                        + ")"
                    ),
                    {"id": number, "name": name, "tag": tag, "status": status, "slug": f"r-{number}"},
                )

    async def oracle(self, q: str) -> list[int]:
        """The search's rows as the plain query finds them: `ILIKE '%q%'` on name or tagline."""
        pattern = f"%{q}%"
        statement = (
            select(Resource.id)
            .where(
                Resource.status == ResourceStatus.PUBLISHED.value,
                Resource.deleted_at.is_(None),
                or_(Resource.name.ilike(pattern), Resource.tag.ilike(pattern)),
            )
            .order_by(Resource.id)
        )
        async with self.engine.connect() as connection:
            return list((await connection.execute(statement)).scalars())

    def reads(self) -> Reads:
        # Counts kept from nothing for each catalogue, so that a total kept for the previous one
        # cannot answer for this one.
        kept = self.services.reads
        return Reads(kept.reader, GenerationCounts(_OneGeneration()), kept.dialect_name)  # type: ignore[arg-type]


class _OneGeneration:
    def generation(self) -> int | None:
        return 1


@pytest.fixture
def search_bed(settings: Settings) -> Iterator[tuple[asyncio.AbstractEventLoop, SearchBed]]:
    loop = asyncio.new_event_loop()
    services = build_services(settings)

    async def with_a_user() -> None:
        async with services.engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO users (id, name, closed, banned, created_at, updated_at) "
                    "VALUES (1, 'author', false, false, '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
                )
            )

    loop.run_until_complete(with_a_user())
    try:
        yield loop, SearchBed(services)
    finally:
        loop.run_until_complete(services.close())
        loop.close()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_text_search_answers_exactly_the_rows_order_and_total_of_the_substring_condition(
    search_bed: tuple[asyncio.AbstractEventLoop, SearchBed], data: st.DataObject
) -> None:
    loop, bed = search_bed
    catalogue = data.draw(catalogues(), label="catalogue")
    searches = data.draw(
        st.lists(st.tuples(queries(catalogue), st.integers(1, 4), st.integers(1, 5)), min_size=1, max_size=4),
        label="searches",
    )

    async def check() -> None:
        await bed.replace_catalogue(catalogue)
        reads = bed.reads()
        for q, page, per_page in searches:
            expected = await bed.oracle(q)
            found = await search_published(reads, q=q, page=page, per_page=per_page)
            offset = (page - 1) * per_page
            assert found.total == len(expected), (q, found.total, expected)
            assert [card.id for card in found.rows] == expected[offset : offset + per_page], (
                q,
                page,
                per_page,
            )

    loop.run_until_complete(check())


def _resource(number: int, name: str, tag: str = "") -> dict[str, Any]:
    return {
        "id": number,
        "user_id": 1,
        "name": name,
        "tag": tag,
        "description": "",
        "price": 0,
        "status": "published",
        "slug": f"r-{number}",
        "download": 0,
    }


async def _insert(engine: AsyncEngine, *rows: dict[str, Any]) -> None:
    async with engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO users (id, name, closed, banned, created_at, updated_at) "
                "SELECT 1, 'author', false, false, '2026-01-01 00:00:00', '2026-01-01 00:00:00' "
                "WHERE NOT EXISTS (SELECT 1 FROM users WHERE id = 1)"
            )
        )
        for row in rows:
            await connection.execute(
                text(
                    "INSERT INTO resources (id, user_id, name, tag, description, price, status, slug, download, "
                    "created_at, updated_at) VALUES (:id, :user_id, :name, :tag, :description, :price, :status, "
                    ":slug, :download, '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
                ),
                row,
            )


async def test_a_word_query_is_looked_up_in_the_text_index_and_finds_it_inside_longer_words(
    services: Services,
) -> None:
    await _insert(
        services.engine,
        _resource(1, "Party Games", "for servers"),
        _resource(2, "Chat", "an ART plugin"),
        _resource(3, "Shop", "no match here"),
    )
    seen: list[str] = []
    with observed_reads(services.engine, seen.append):
        found = await search_published(services.reads, q="art", page=1, per_page=15)
    assert [card.id for card in found.rows] == [1, 2] and found.total == 2
    index = "resource_search_suffixes" if services.reads.dialect_name == "postgresql" else "resource_search"
    assert any(index in statement for statement in seen)


async def test_a_query_shorter_than_a_trigram_reads_no_text_index_on_sqlite(services: Services) -> None:
    await _insert(services.engine, _resource(1, "Ab"), _resource(2, "b a"))
    seen: list[str] = []
    with observed_reads(services.engine, seen.append):
        found = await search_published(services.reads, q="a%b", page=1, per_page=15)
    assert [card.id for card in found.rows] == [1] and found.total == 1
    if services.reads.dialect_name == "sqlite":
        assert not any("resource_search" in statement for statement in seen)


# PostgreSQL's text index is an expression index: it has no rows of its own to keep.
@sqlite_only
async def test_the_sqlite_text_table_follows_inserts_updates_and_deletes_of_resources(
    services: Services,
) -> None:
    await _insert(services.engine, _resource(1, "Économie", "Banque"), _resource(2, "Other"))
    async with services.engine.begin() as connection:
        await connection.execute(text("UPDATE resources SET name = 'Renamed ÉTÉ', tag = 'x' WHERE id = 2"))
        await connection.execute(text("DELETE FROM resources WHERE id = 1"))
        rows = (
            await connection.execute(text("SELECT rowid, name, tag FROM resource_search ORDER BY rowid"))
        ).all()
    # Lowered by the service's lower(), which folds every letter, as the search condition does.
    assert [tuple(row) for row in rows] == [(2, "renamed été", "x")]
    found = await search_published(services.reads, q="été", page=1, per_page=15)
    assert [card.id for card in found.rows] == [2]


async def test_a_page_of_dense_matches_walks_the_listing_and_one_of_sparse_matches_is_collected(
    services: Services,
) -> None:
    await _insert(services.engine, *(_resource(n, f"Shop {n}" if n != 40 else "Bank") for n in range(1, 41)))
    seen: list[str] = []
    with observed_reads(services.engine, seen.append):
        dense = await search_published(services.reads, q="shop", page=1, per_page=5)
        dense_page = [statement for statement in seen if "LIMIT" in statement][-1]
        sparse = await search_published(services.reads, q="bank", page=1, per_page=5)
        sparse_page = [statement for statement in seen if "LIMIT" in statement][-1]
    assert [card.id for card in dense.rows] == [1, 2, 3, 4, 5] and dense.total == 39
    assert [card.id for card in sparse.rows] == [40] and sparse.total == 1
    # The page's ids in the primary key's order (walked), or in `id + 0`, sorted after collecting.
    assert "+" not in dense_page.split("ORDER BY")[1]
    assert "+" in sparse_page.split("ORDER BY")[1]


def test_walking_the_listing_is_chosen_when_it_reads_fewer_rows_than_collecting() -> None:
    # 15 rows of a listing of 200,000: a word in 1 row of 20 is walked (300 rows read, not
    # 10,000); a word in 50 rows is collected (50 rows, not 60,000).
    assert walks_the_listing(matching=10_000, listed=200_000, rows_needed=15)
    assert not walks_the_listing(matching=50, listed=200_000, rows_needed=15)
    assert not walks_the_listing(matching=0, listed=200_000, rows_needed=15)


def test_what_each_text_index_is_asked() -> None:
    assert prefilter_for("postgresql", "Shop") == "'shop':*"
    assert prefilter_for("postgresql", "shop plugin") is None
    assert prefilter_for("postgresql", "caf\u00e9") is None
    # SQLite: each literal run of 3 characters or more of the lowered pattern, `"` written twice.
    assert prefilter_for("sqlite", 'AB%c"DE_fg') == '"c""de"'
    assert prefilter_for("sqlite", 'xAB%c"DE_fg') == '"xab" AND "c""de"'
    assert prefilter_for("sqlite", "ab%cd") is None


def _migrate(revision: str, *, down: bool = False) -> Any:
    from alembic import command

    from marketplace.migrations.runner import alembic_config

    def run(connection: Connection) -> None:
        config = alembic_config()
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)

    return run


async def test_migration_0007_indexes_the_resources_already_there_and_its_downgrade_removes_the_index(
    services: Services,
) -> None:
    engine = services.engine
    async with engine.begin() as connection:
        await connection.run_sync(_migrate("0005", down=True))
    await _insert(engine, _resource(1, "Party", "x"), _resource(2, "Bank", "y"))
    async with engine.begin() as connection:
        await connection.run_sync(_migrate("0007"))
    found = await search_published(services.reads, q="art", page=1, per_page=15)
    assert [card.id for card in found.rows] == [1]
    async with engine.begin() as connection:
        if engine.dialect.name == "sqlite":
            indexed = (await connection.execute(text("SELECT count(*) FROM resource_search"))).scalar_one()
            assert indexed == 2
        await connection.run_sync(_migrate("0005", down=True))
        if engine.dialect.name == "sqlite":
            left = "SELECT count(*) FROM sqlite_master WHERE name LIKE 'resource_search%'"
        else:
            left = "SELECT count(*) FROM pg_class WHERE relname = 'ix_resources_search_suffixes'"
        assert (await connection.execute(text(left))).scalar_one() == 0
        assert (
            await connection.execute(select(func.count()).select_from(Resource.__table__))
        ).scalar_one() == 2


async def _searched(services: Services, q: str) -> tuple[int, int]:
    """How many counts of resources a search ran, and its total."""
    seen: list[str] = []
    with observed_reads(services.engine, seen.append):
        found = await search_published(services.reads, q=q, page=1, per_page=15)
    return sum("count(resources.id)" in statement for statement in seen), found.total


async def _write(engine: AsyncEngine, statement: str) -> None:
    async with engine.begin() as connection:
        await connection.execute(text(statement))
    # Long enough for any worker to have seen the commit (SQLite checks every 10 ms).
    await asyncio.sleep(0.3)


async def test_a_search_total_is_kept_through_writes_that_change_no_search_and_counted_again_after_one_that_does(
    services: Services,
) -> None:
    engine = services.engine
    await _insert(engine, _resource(1, "Shop One"), _resource(2, "Shop Two"), _resource(3, "Bank"))
    assert await _searched(services, "shop") == (1, 2)
    assert await _searched(services, "shop") == (0, 2)
    # Counters and other tables: what searches find is the same.
    await _write(engine, "UPDATE resources SET download = download + 1")
    await _write(engine, "UPDATE users SET name = 'renamed' WHERE id = 1")
    assert await _searched(services, "shop") == (0, 2)
    await _write(engine, "UPDATE resources SET name = 'Shop Three' WHERE id = 3")
    assert await _searched(services, "shop") == (1, 3)
    await _write(engine, "UPDATE resources SET status = 'draft' WHERE id = 1")
    assert await _searched(services, "shop") == (1, 2)
    await _write(engine, "UPDATE resources SET deleted_at = updated_at WHERE id = 2")
    assert await _searched(services, "shop") == (1, 1)
    await _write(engine, "DELETE FROM resources WHERE id = 3")
    assert await _searched(services, "shop") == (1, 0)
