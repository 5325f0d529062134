"""Each worker's cache of encoded catalogue answers: hits, invalidation by every writer, bounds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from starlette.responses import Response

from marketplace.config import Settings
from marketplace.database.changes import CHANNEL, PostgresChangeFeed
from marketplace.database.engine import create_engine
from marketplace.database.freshness import Stamp
from marketplace.fixtures.loader import load_document
from marketplace.http.worker_cache import MAX_KEY_BYTES, WorkerCache
from marketplace.services import Services, build_services
from marketplace.telemetry.metrics import WORKER_CACHE_LOOKUPS
from tests.api.helpers import recorded_statements
from tests.catalogue import OWNER_CHAT_ID, catalogue
from tests.conftest import GRANT_SECRET, make_client
from tests.profiles import postgresql_only

# A committed write reaches every worker's cache within this bound (PostgreSQL: a notice).
CHANGE_BOUND_SECONDS = 0.05


def lookups(outcome: str) -> float:
    return float(WORKER_CACHE_LOOKUPS.labels(outcome)._value.get())


async def until_following(services: Services) -> None:
    """Wait until the worker follows changes (PostgreSQL: its first probe notice came back)."""
    assert services.worker_cache.generation() is not None
    async with asyncio.timeout(10):
        assert await services.worker_cache.changes.proven() in (True, None)


async def rename_elsewhere(settings: Settings, resource_id: int, name: str) -> None:
    """Another process's write: a connection of an engine of its own, committed."""
    engine = create_engine(settings)
    try:
        async with engine.begin() as connection:
            await connection.execute(
                text("UPDATE resources SET name = :name WHERE id = :id"), {"name": name, "id": resource_id}
            )
    finally:
        await engine.dispose()


@pytest.fixture
async def workers(settings: Settings) -> AsyncIterator[list[tuple[Services, httpx.AsyncClient]]]:
    """Two workers of one service (two sets of services on one database), catalogue loaded."""
    built = [build_services(settings), build_services(settings)]
    await load_document(built[0].engine, catalogue())
    clients = [make_client(services) for services in built]
    try:
        for services in built:
            await until_following(services)
        yield list(zip(built, clients, strict=True))
    finally:
        for client in clients:
            await client.aclose()
        for services in built:
            await services.close()


async def name_of(client: httpx.AsyncClient, resource_id: int = 1) -> str:
    response = await client.get(f"/api/v1/resource/{resource_id}")
    assert response.status_code == 200
    return str(response.json()["name"])


async def grant_to_owner(client: httpx.AsyncClient) -> None:
    granted = await client.post(
        f"/api/v1/chat/{OWNER_CHAT_ID}/apply/1", json={"custom_password": GRANT_SECRET}
    )
    assert granted.status_code == 200


async def reads_the_database(services: Services, client: httpx.AsyncClient) -> bool:
    """Whether reading the card runs a statement (it is not answered from the cache)."""
    with recorded_statements(services.engine) as statements:
        await name_of(client)
    return statements != []


async def test_a_repeated_catalogue_read_is_answered_without_the_database(
    client: httpx.AsyncClient, services: Services
) -> None:
    await until_following(services)
    first = await client.get("/api/v1/resource/1")
    with recorded_statements(services.engine) as statements:
        again = await client.get("/api/v1/resource/1")
    assert statements == []
    assert (again.status_code, again.content) == (first.status_code, first.content)
    assert again.headers["content-type"] == first.headers["content-type"]
    assert again.headers["content-length"] == first.headers["content-length"]


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/resource/version/1",
        "/api/v1/resource/versions/1",
        "/api/v1/resource/1",
        "/api/v1/resource/search?size=2&page=1",
        "/api/v1/resource/user?name=a",
        "/api/v1/author/1",
    ],
)
async def test_every_public_catalogue_read_is_kept(
    client: httpx.AsyncClient, services: Services, path: str
) -> None:
    await until_following(services)
    first = await client.get(path)
    assert first.status_code == 200
    with recorded_statements(services.engine) as statements:
        again = await client.get(path)
    assert statements == []
    assert again.content == first.content


async def test_a_cached_answer_still_passes_the_limiters(
    client: httpx.AsyncClient, services: Services
) -> None:
    await until_following(services)
    remaining = [
        int((await client.get("/api/v1/resource/1")).headers["x-ratelimit-remaining"]) for _ in range(3)
    ]
    assert remaining == [remaining[0], remaining[0] - 1, remaining[0] - 2]


async def test_answers_other_than_200_are_not_kept(client: httpx.AsyncClient, services: Services) -> None:
    await until_following(services)
    assert (await client.get("/api/v1/resource/3")).status_code == 404
    with recorded_statements(services.engine) as statements:
        assert (await client.get("/api/v1/resource/3")).status_code == 404
    assert statements != []


async def test_another_processs_write_is_seen_by_every_worker_within_the_bound(
    workers: list[tuple[Services, httpx.AsyncClient]], settings: Settings
) -> None:
    for _services, client in workers:
        await name_of(client)
        await name_of(client)  # cached now
    await rename_elsewhere(settings, 1, "Renamed Elsewhere")
    await asyncio.sleep(CHANGE_BOUND_SECONDS)
    assert [await name_of(client) for _services, client in workers] == ["Renamed Elsewhere"] * 2


async def test_a_grant_empties_its_workers_cache_at_once_and_the_others_within_the_bound(
    workers: list[tuple[Services, httpx.AsyncClient]],
) -> None:
    for _services, client in workers:
        await name_of(client)  # cached now
    (granting_services, granting), (other_services, other) = workers
    await grant_to_owner(granting)
    assert await reads_the_database(granting_services, granting)
    await asyncio.sleep(CHANGE_BOUND_SECONDS)
    assert await reads_the_database(other_services, other)


@postgresql_only
async def test_a_workers_own_commit_empties_its_cache_without_waiting_for_the_notice(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(PostgresChangeFeed, "_changed", lambda _feed, *_args: None)
    services = build_services(settings)
    try:
        await load_document(services.engine, catalogue())
        async with make_client(services) as client:
            await until_following(services)
            await name_of(client)
            await grant_to_owner(client)
            assert await reads_the_database(services, client)
    finally:
        await services.close()


async def test_loading_a_fixture_document_reaches_the_workers(
    workers: list[tuple[Services, httpx.AsyncClient]], settings: Settings
) -> None:
    for _services, client in workers:
        await name_of(client)
    document = catalogue()
    document["resources"][0]["name"] = "Reloaded"
    engine = create_engine(settings)
    try:
        await load_document(engine, document)
    finally:
        await engine.dispose()
    await asyncio.sleep(CHANGE_BOUND_SECONDS)
    assert [await name_of(client) for _services, client in workers] == ["Reloaded"] * 2


def asyncpg_dsn(settings: Settings) -> str:
    """A direct connection to the test's database (a pooler in between would deliver no notice)."""
    url = settings.database_listen_url or settings.database_url
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@postgresql_only
async def test_a_transaction_that_wrote_sends_one_notice_and_a_read_sends_none(settings: Settings) -> None:
    listener = await asyncpg.connect(asyncpg_dsn(settings))
    notices: list[str] = []
    await listener.add_listener(CHANNEL, lambda _connection, _pid, channel, _payload: notices.append(channel))
    engine = create_engine(settings)
    try:
        async with engine.begin() as connection:
            await connection.execute(text("SELECT count(*) FROM resources"))
        async with engine.begin() as connection:
            await connection.execute(text("UPDATE resources SET name = name WHERE id = 1"))
            await connection.execute(text("UPDATE resources SET tag = tag WHERE id = 1"))
        async with engine.connect() as connection:
            await connection.execute(text("UPDATE resources SET name = 'never' WHERE id = 1"))
            await connection.rollback()
        await asyncio.sleep(0.2)
        assert notices == [CHANNEL]
    finally:
        await engine.dispose()
        await listener.close()


@postgresql_only
async def test_a_write_made_outside_the_service_reaches_the_workers(
    workers: list[tuple[Services, httpx.AsyncClient]], settings: Settings
) -> None:
    for _services, client in workers:
        await name_of(client)
    outside = await asyncpg.connect(asyncpg_dsn(settings))
    try:
        await outside.execute("UPDATE resources SET name = 'Edited By Hand' WHERE id = 1")
    finally:
        await outside.close()
    await asyncio.sleep(CHANGE_BOUND_SECONDS)
    assert [await name_of(client) for _services, client in workers] == ["Edited By Hand"] * 2


@postgresql_only
async def test_a_lost_change_feed_keeps_the_cache_serving_and_starts_afresh_when_back(
    client: httpx.AsyncClient, services: Services, settings: Settings
) -> None:
    await until_following(services)
    await name_of(client)
    admin = await asyncpg.connect(asyncpg_dsn(settings))
    try:
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
        )
        # A write made while nobody listens: within the maximum age, the kept answer still serves.
        await admin.execute("UPDATE resources SET name = 'Unannounced' WHERE id = 1")
        with recorded_statements(services.engine) as statements:
            assert await name_of(client) != "Unannounced"
        assert statements == []
    finally:
        await admin.close()
    # Listening again, proven by a probe: a new generation, since notices may have been missed.
    kept_under = services.worker_cache.changes.generation()
    for _ in range(200):
        if services.worker_cache.changes.generation() != kept_under:
            break
        await asyncio.sleep(0.05)
    assert await name_of(client) == "Unannounced"


class FixedFeed:
    def __init__(self) -> None:
        self.current: int | None = 1

    def generation(self) -> int | None:
        return self.current

    def local_change(self) -> None:
        if self.current is not None:
            self.current += 1

    async def proven(self) -> bool | None:
        return None

    async def close(self) -> None:
        return None


def answer(size: int) -> Response:
    return Response(b"x" * size, media_type="application/json")


def key(n: int) -> tuple[str, str, bytes]:
    return ("route", f"/api/v1/resource/{n}", b"")


def test_the_cache_keeps_at_most_its_entries_and_bytes() -> None:
    cache = WorkerCache(FixedFeed(), max_entries=50, max_bytes=64 * 1024)
    for n in range(1000):
        _, generation = cache.lookup(key(n))
        assert generation is not None
        cache.keep(key(n), generation, answer(2000))
    assert len(cache) <= 50
    assert cache.size_bytes <= 64 * 1024
    # The most recently kept are the ones left.
    assert cache.lookup(key(999))[0] is not None
    assert cache.lookup(key(0))[0] is None


def test_answers_too_large_for_the_budget_or_keys_too_long_are_not_kept() -> None:
    cache = WorkerCache(FixedFeed(), max_entries=50, max_bytes=64 * 1024)
    cache.keep(key(1), Stamp(1, 0.0), answer(64 * 1024 // 16))
    long_key = ("route", "/api/v1/resource/search", b"q=" + b"a" * MAX_KEY_BYTES)
    cache.keep(long_key, Stamp(1, 0.0), answer(10))
    assert len(cache) == 0


def test_an_answer_read_while_the_data_changed_is_not_kept() -> None:
    feed = FixedFeed()
    cache = WorkerCache(feed, max_entries=50, max_bytes=64 * 1024)
    _, generation = cache.lookup(key(1))
    assert generation is not None
    feed.local_change()  # a commit lands while the answer is read
    cache.keep(key(1), generation, answer(10))
    assert cache.lookup(key(1))[0] is None


def test_a_new_generation_drops_every_answer() -> None:
    feed = FixedFeed()
    cache = WorkerCache(feed, max_entries=50, max_bytes=64 * 1024)
    for n in range(10):
        cache.keep(key(n), Stamp(1, 0.0), answer(10))
    assert len(cache) == 10
    feed.local_change()
    assert cache.lookup(key(1))[0] is None
    assert len(cache) == 0
    assert cache.size_bytes == 0


def test_without_a_generation_nothing_is_read_or_kept() -> None:
    feed = FixedFeed()
    cache = WorkerCache(feed, max_entries=50, max_bytes=64 * 1024)
    cache.keep(key(1), Stamp(1, 0.0), answer(10))
    feed.current = None
    assert cache.lookup(key(1)) == (None, None)


def test_a_cache_of_zero_entries_is_off() -> None:
    cache = WorkerCache(FixedFeed(), max_entries=0, max_bytes=64 * 1024)
    assert cache.lookup(key(1)) == (None, None)


async def test_the_cache_can_be_turned_off_by_setting(settings: Settings) -> None:
    services = build_services(settings.model_copy(update={"worker_cache_max_entries": 0}))
    try:
        await load_document(services.engine, catalogue())
        async with make_client(services) as client:
            await client.get("/api/v1/resource/1")
            with recorded_statements(services.engine) as statements:
                await client.get("/api/v1/resource/1")
        assert statements != []
    finally:
        await services.close()
