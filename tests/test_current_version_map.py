"""The version map and the change notices that name what changed.

Every worker answers the update check from its map of every visible resource, with the bytes the
database route gives; a notice drops only what the change touches; a lost feed, a change too large
to name and a change past the maximum age fall back to reading the database.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.config import Settings
from marketplace.database.changes import (
    CHANNEL,
    EVERYTHING,
    MAX_NAMED_RESOURCES,
    Change,
    PostgresChangeFeed,
    SqliteChangeFeed,
)
from marketplace.database.engine import create_engine
from marketplace.fixtures.loader import load_document
from marketplace.services import Services, build_services
from tests.api.helpers import recorded_statements
from tests.catalogue import OWNER_CHAT_ID, catalogue
from tests.conftest import GRANT_SECRET, make_client
from tests.profiles import postgresql_only
from tests.test_freshness import FakeClock
from tests.test_worker_cache import CHANGE_BOUND_SECONDS, asyncpg_dsn, rename_elsewhere

# Every case of the update check: published, unlisted, hidden statuses, deleted, unknown, a pointer
# to another resource's version, no version, a number beyond ASCII, ids spelt otherwise, not ids.
UPDATE_CHECK_PATHS = [
    f"/api/v1/resource/version/{segment}"
    for segment in (*map(str, range(0, 12)), "00001", "007", "99999", "2147483647", "2147483648", "1x", "abc")
]


def version_catalogue() -> dict[str, Any]:
    document = catalogue()
    resources = {resource["id"]: resource for resource in document["resources"]}
    resources[8]["version_id"] = 13
    document["resources"].append(
        {"id": 9, "user_id": 2, "name": "Ninth", "status": "unlisted", "version_id": 14}
    )
    document["versions"] += [
        {"id": 13, "resource_id": 8, "version": "2.0-ü/β 😀", "title": "Unicode"},
        {"id": 14, "resource_id": 9, "version": "0.9", "title": "Unlisted"},
    ]
    return document


async def load_version_catalogue(engine: AsyncEngine) -> None:
    await load_document(engine, version_catalogue())
    async with engine.begin() as connection:
        # Free Chat names a version of another resource: no release, as the database route says.
        await connection.execute(text("UPDATE resources SET current_version_id = 10 WHERE id = 7"))


async def answers(client: httpx.AsyncClient, paths: list[str]) -> list[tuple[int, str, str, bytes]]:
    found = []
    for path in paths:
        response = await client.get(path)
        found.append(
            (
                response.status_code,
                response.headers["content-type"],
                response.headers["content-length"],
                response.content,
            )
        )
    return found


async def started(settings: Settings, *, load: bool = True, clock: FakeClock | None = None) -> Services:
    services = build_services(settings)
    if clock is not None:
        services.current_versions.clock = clock
    if load:
        await load_version_catalogue(services.engine)
    async with asyncio.timeout(10):
        assert await services.worker_cache.changes.proven() in (True, None)
        await services.current_versions.loaded()
    return services


@pytest.fixture
async def workers(settings: Settings) -> AsyncIterator[list[tuple[Services, httpx.AsyncClient]]]:
    """Two workers of one service on one database, the catalogue loaded and both maps built."""
    first = await started(settings)
    built = [first, await started(settings, load=False)]
    clients = [make_client(services) for services in built]
    try:
        yield list(zip(built, clients, strict=True))
    finally:
        for client in clients:
            await client.aclose()
        for services in built:
            await services.close()


async def reads_database(services: Services, client: httpx.AsyncClient, path: str) -> bool:
    with recorded_statements(services.engine) as statements:
        assert (await client.get(path)).status_code in (200, 404)
    return statements != []


async def caught_up(services: Services) -> None:
    async with asyncio.timeout(10):
        await services.current_versions.caught_up()


async def test_the_version_map_answers_every_visibility_case_as_the_database_does(
    settings: Settings,
) -> None:
    reading = build_services(settings.model_copy(update={"current_version_map": False}))
    try:
        await load_version_catalogue(reading.engine)
        async with make_client(reading) as client:
            expected = await answers(client, UPDATE_CHECK_PATHS)
    finally:
        await reading.close()
    mapped = await started(settings, load=False)
    try:
        async with make_client(mapped) as client:
            with recorded_statements(mapped.engine) as statements:
                found = await answers(client, UPDATE_CHECK_PATHS)
        assert statements == []
        assert found == expected
        assert found[8][3] == "2.0-ü/β 😀".encode()
        assert found[7][3] == b"(soon)"
    finally:
        await mapped.close()


async def test_a_version_answer_reflects_a_release_within_the_notice_time(
    workers: list[tuple[Services, httpx.AsyncClient]], settings: Settings
) -> None:
    for _services, client in workers:
        assert (await client.get("/api/v1/resource/version/1")).content == b"1.1.0"
    engine = create_engine(settings)
    try:
        async with engine.begin() as connection:
            await connection.execute(text("UPDATE resources SET current_version_id = 12 WHERE id = 1"))
    finally:
        await engine.dispose()
    await asyncio.sleep(CHANGE_BOUND_SECONDS)
    for services, client in workers:
        assert (await client.get("/api/v1/resource/version/1")).content == b"2.0.0-beta"
        await caught_up(services)
        # Read again into the map: answered without the database.
        assert not await reads_database(services, client, "/api/v1/resource/version/1")
        assert (await client.get("/api/v1/resource/version/1")).content == b"2.0.0-beta"


async def grant_to_owner(client: httpx.AsyncClient) -> None:
    granted = await client.post(
        f"/api/v1/chat/{OWNER_CHAT_ID}/apply/1", json={"custom_password": GRANT_SECRET}
    )
    assert granted.status_code == 200


async def test_a_grant_does_not_drop_unrelated_cached_answers(
    workers: list[tuple[Services, httpx.AsyncClient]],
) -> None:
    unrelated = ["/api/v1/resource/7", "/api/v1/resource/versions/8", "/api/v1/resource/8"]
    for _services, client in workers:
        for path in [*unrelated, "/api/v1/resource/1"]:
            await client.get(path)
    (granting_services, granting), (other_services, other) = workers
    await grant_to_owner(granting)
    await asyncio.sleep(CHANGE_BOUND_SECONDS)
    for services, client in ((granting_services, granting), (other_services, other)):
        assert [await reads_database(services, client, path) for path in unrelated] == [False] * 3
        # The granted resource's card counts the access anew.
        assert await reads_database(services, client, "/api/v1/resource/1")


@postgresql_only
async def test_a_workers_own_grant_drops_only_what_it_touched_without_waiting_for_the_notice(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(PostgresChangeFeed, "_changed", lambda _feed, *_args: None)
    services = await started(settings)
    try:
        async with make_client(services) as client:
            await client.get("/api/v1/resource/1")
            await client.get("/api/v1/resource/7")
            await grant_to_owner(client)
            assert await reads_database(services, client, "/api/v1/resource/1")
            assert not await reads_database(services, client, "/api/v1/resource/7")
    finally:
        await services.close()


async def test_a_change_named_in_a_notice_drops_exactly_the_affected_entries(
    workers: list[tuple[Services, httpx.AsyncClient]], settings: Settings
) -> None:
    touched = ["/api/v1/resource/7", "/api/v1/resource/versions/7"]
    # Pages list many resources and may show the renamed one: any change drops them.
    pages = ["/api/v1/resource/search?size=2&page=1", "/api/v1/author/1"]
    kept = ["/api/v1/resource/1", "/api/v1/resource/versions/1", "/api/v1/resource/8"]
    for _services, client in workers:
        for path in [*touched, *pages, *kept]:
            await client.get(path)
    reads_before = [services.current_versions.reads for services, _client in workers]
    await rename_elsewhere(settings, 7, "Renamed Seven")
    await asyncio.sleep(CHANGE_BOUND_SECONDS)
    for (services, client), before in zip(workers, reads_before, strict=True):
        assert [await reads_database(services, client, path) for path in kept] == [False] * 3
        assert [await reads_database(services, client, path) for path in touched] == [True] * 2
        assert [await reads_database(services, client, path) for path in pages] == [True] * 2
        await caught_up(services)
        # One range of the map read again (the one holding resource 7), not the whole map.
        assert services.current_versions.reads == before + 1
        assert not await reads_database(services, client, "/api/v1/resource/version/7")


async def test_an_oversized_transaction_falls_back_to_dropping_all(
    workers: list[tuple[Services, httpx.AsyncClient]], settings: Settings
) -> None:
    for _services, client in workers:
        await client.get("/api/v1/resource/8")
    engine = create_engine(settings)
    try:
        async with engine.begin() as connection:
            # More resources than a notice names (PostgreSQL) or a worker reads from the log at once (SQLite).
            await connection.execute(
                text(
                    "WITH RECURSIVE n(i) AS (SELECT 1000 UNION ALL SELECT i + 1 FROM n WHERE i < 2100) "
                    "INSERT INTO resources (id, user_id, name, tag, description, price, status, slug, "
                    "download, created_at, updated_at) "
                    "SELECT i, 1, 'Bulk', '', '', 0, 'published', 'bulk', 0, "
                    "'2024-01-01 00:00:00', '2024-01-01 00:00:00' FROM n"
                )
            )
    finally:
        await engine.dispose()
    await asyncio.sleep(CHANGE_BOUND_SECONDS)
    for services, client in workers:
        assert await reads_database(services, client, "/api/v1/resource/8")
        await caught_up(services)
        assert (await client.get("/api/v1/resource/version/2000")).content == b"(soon)"
        assert not await reads_database(services, client, "/api/v1/resource/version/2000")


@postgresql_only
async def test_a_statement_touching_more_resources_than_a_notice_names_notifies_every_resource(
    settings: Settings,
) -> None:
    services = await started(settings)
    listener = await asyncpg.connect(asyncpg_dsn(settings))
    payloads: list[str] = []
    await listener.add_listener(
        CHANNEL, lambda _connection, _pid, _channel, payload: payloads.append(payload)
    )
    try:
        async with services.engine.begin() as connection:
            await connection.execute(text("UPDATE resources SET download = download + 1 WHERE id IN (1, 7)"))
        async with services.engine.begin() as connection:
            await connection.execute(
                text(
                    "INSERT INTO resources (id, user_id, name, tag, description, price, status, slug, "
                    "download, created_at, updated_at) SELECT i, 1, 'Bulk', '', '', 0, 'published', "
                    f"'bulk', 0, now(), now() FROM generate_series(1000, {1000 + MAX_NAMED_RESOURCES}) AS i"
                )
            )
        await asyncio.sleep(0.2)
        assert payloads == ["resources:1,7", "resources:*"]
    finally:
        await listener.close()
        await services.close()


async def test_writes_by_raw_sql_elsewhere_are_seen(
    workers: list[tuple[Services, httpx.AsyncClient]], settings: Settings, profile: str
) -> None:
    for _services, client in workers:
        await client.get("/api/v1/resource/version/1")
        await client.get("/api/v1/resource/8")
    statement = "UPDATE versions SET version = '1.1.1-hotfix' WHERE id = 11"
    if profile == "postgresql":
        outside = await asyncpg.connect(asyncpg_dsn(settings))
        try:
            await outside.execute(statement)
        finally:
            await outside.close()
    else:
        path = make_url(settings.database_url).database
        assert path is not None
        raw = sqlite3.connect(path)
        try:
            raw.execute(statement)
            raw.commit()
        finally:
            raw.close()
    await asyncio.sleep(CHANGE_BOUND_SECONDS)
    for services, client in workers:
        assert (await client.get("/api/v1/resource/version/1")).content == b"1.1.1-hotfix"
        # Named by the database's triggers: the other resources' answers stay.
        assert not await reads_database(services, client, "/api/v1/resource/8")


@postgresql_only
async def test_a_lost_feed_falls_back_to_the_maximum_age_and_reads_everything_when_back(
    settings: Settings,
) -> None:
    clock = FakeClock()
    services = await started(settings, clock=clock)
    try:
        async with make_client(services) as client:
            admin = await asyncpg.connect(asyncpg_dsn(settings))
            try:
                kept_under = services.worker_cache.changes.generation()
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
                )
                await admin.execute("UPDATE resources SET current_version_id = 12 WHERE id = 1")
            finally:
                await admin.close()
            # Nobody listened: within the maximum age the map still answers what it read.
            assert (await client.get("/api/v1/resource/version/1")).content == b"1.1.0"
            # Listening again: a new generation, and the whole map is read again.
            for _ in range(200):
                if services.worker_cache.changes.generation() != kept_under:
                    break
                await asyncio.sleep(0.05)
            assert (await client.get("/api/v1/resource/version/1")).content == b"2.0.0-beta"
    finally:
        await services.close()


async def test_a_lost_feed_makes_the_update_check_read_the_database(
    settings: Settings, profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    services = await started(settings, clock=clock)
    try:
        async with make_client(services) as client:
            assert not await reads_database(services, client, "/api/v1/resource/version/1")
            if profile == "postgresql":
                # Not proven: the map keeps answering within its maximum age (the test above);
                # past it, the route reads the database.
                clock.now += settings.worker_cache_max_age_seconds + 0.001
            else:
                monkeypatch.setattr(SqliteChangeFeed, "_read_data_version", lambda _feed: None)
                await asyncio.sleep(0.02)
            assert await reads_database(services, client, "/api/v1/resource/version/1")
            assert (await client.get("/api/v1/resource/version/1")).content == b"1.1.0"
    finally:
        await services.close()


async def test_a_version_map_entry_is_not_served_past_its_maximum_age(settings: Settings) -> None:
    clock = FakeClock()
    services = await started(settings, clock=clock)
    try:
        async with make_client(services) as client:
            assert not await reads_database(services, client, "/api/v1/resource/version/3")
            clock.now += settings.worker_cache_max_age_seconds + 0.001
            assert await reads_database(services, client, "/api/v1/resource/version/3")
            assert (await client.get("/api/v1/resource/version/3")).status_code == 404
    finally:
        await services.close()


@postgresql_only
async def test_a_release_committed_without_a_notice_is_answered_within_the_maximum_age(
    settings: Settings,
) -> None:
    clock = FakeClock()
    services = await started(settings, clock=clock)
    try:
        async with make_client(services) as client:
            outside = await asyncpg.connect(asyncpg_dsn(settings))
            try:
                await outside.execute("SET session_replication_role = replica")
                await outside.execute("UPDATE resources SET current_version_id = 12 WHERE id = 1")
            finally:
                await outside.close()
            await asyncio.sleep(0.2)
            assert (await client.get("/api/v1/resource/version/1")).content == b"1.1.0"
            clock.now += settings.worker_cache_max_age_seconds + 0.001
            assert (await client.get("/api/v1/resource/version/1")).content == b"2.0.0-beta"
    finally:
        await services.close()


def test_a_notice_payload_names_its_table_and_resources() -> None:
    assert Change.from_payload("resources:7,1") == Change("resources", frozenset({1, 7}))
    assert Change.from_payload("versions:*") == Change("versions", None)
    assert Change.from_payload("users:") == Change("users", frozenset())
    assert Change.from_payload("") == EVERYTHING
    assert Change.from_payload("resources:1,x") == EVERYTHING
    assert Change("accesses", frozenset({3, 2})).payload() == "accesses:2,3"
