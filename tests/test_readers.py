"""The public reads: one prebuilt statement each, no ORM, SQLite point reads on the loop's thread,
the search total counted once per generation of the data."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import httpx
import pytest
from sqlalchemy import event, text

from marketplace.config import Settings
from marketplace.database.engine import create_engine
from marketplace.database.freshness import Stamp
from marketplace.database.readers import SCAN_CACHE_KIB, SCAN_CONNECTIONS, GenerationCounts, SqliteReader
from marketplace.fixtures.loader import load_document
from marketplace.models import Base
from marketplace.services import Services, build_services
from marketplace.telemetry.metrics import DB_POOL_IN_USE
from tests.api.helpers import recorded_statements
from tests.catalogue import PAID_UID, catalogue
from tests.conftest import make_client
from tests.profiles import postgres_admin, postgresql_only, sqlite_only

T = TypeVar("T")

# Every GET read of the catalogue, members, gifts and payments.
PUBLIC_READS = (
    "/api/v1/resource/search",
    "/api/v1/resource/search?q=chat&size=2&page=1",
    "/api/v1/resource/user?name=ali",
    "/api/v1/resource/versions/1",
    "/api/v1/resource/version/1",
    "/api/v1/resource/1",
    "/api/v1/author/1",
    "/api/v1/gift/WELCOME10",
    f"/api/v1/payment/{PAID_UID}",
)
COUNT_OF_RESOURCES = "count(resources.id)"
# A committed write reaches this worker within this bound (PostgreSQL: a notice).
CHANGE_BOUND_SECONDS = 2.0


@pytest.fixture
async def uncached(settings: Settings) -> AsyncIterator[tuple[Services, httpx.AsyncClient]]:
    """The app on the test catalogue with no answer cache, so that every request reads."""
    services = build_services(settings.model_copy(update={"worker_cache_max_entries": 0}))
    await load_document(services.engine, catalogue())
    try:
        async with make_client(services) as client:
            # PostgreSQL follows changes once its first probe notice has come back.
            services.worker_cache.changes.generation()
            async with asyncio.timeout(10):
                await services.worker_cache.changes.proven()
            yield services, client
    finally:
        await services.close()


async def counts_run(services: Services, client: httpx.AsyncClient, path: str) -> tuple[int, httpx.Response]:
    """How many counts of resources a request ran, and its answer."""
    with recorded_statements(services.engine) as statements:
        answer = await client.get(path)
    return sum(COUNT_OF_RESOURCES in statement for statement in statements), answer


async def write_elsewhere(settings: Settings, statement: str) -> None:
    engine = create_engine(settings)
    try:
        async with engine.begin() as connection:
            await connection.execute(text(statement))
    finally:
        await engine.dispose()


async def test_search_total_is_counted_once_per_generation(
    uncached: tuple[Services, httpx.AsyncClient], settings: Settings
) -> None:
    services, client = uncached
    first = [await counts_run(services, client, f"/api/v1/resource/search?page={n}") for n in (1, 2, 1)]
    assert [counted for counted, _ in first] == [1, 0, 0]
    total = first[0][1].json()["total"]
    assert [answer.json()["total"] for _, answer in first] == [total] * 3

    await write_elsewhere(settings, "UPDATE resources SET status = 'draft' WHERE id = 8")
    for _ in range(int(CHANGE_BOUND_SECONDS / 0.01)):
        counted, answer = await counts_run(services, client, "/api/v1/resource/search")
        if counted:
            break
        await asyncio.sleep(0.01)
    assert counted == 1
    assert answer.json()["total"] == total - 1


async def test_a_search_filter_total_is_counted_once_per_filter_and_generation(
    uncached: tuple[Services, httpx.AsyncClient],
) -> None:
    services, client = uncached
    runs = [
        await counts_run(services, client, f"/api/v1/resource/search?{query}")
        for query in ("q=chat", "q=chat&page=2", "q=half", "q=chat&size=1")
    ]
    assert [counted for counted, _ in runs] == [1, 0, 1, 0]
    assert [answer.json()["total"] for _, answer in runs] == [1, 1, 1, 1]


def test_a_count_read_while_the_data_changed_is_not_kept() -> None:
    class Feed:
        current: int | None = 1

        def generation(self) -> int | None:
            return self.current

        def local_change(self) -> None:
            return None

        async def close(self) -> None:
            return None

    feed = Feed()
    counts = GenerationCounts(feed, max_entries=2, clock=lambda: 5.0)
    assert counts.get("listed") == (None, Stamp(1, 5.0))
    feed.current = 2  # a write committed while the count was read
    counts.keep("listed", Stamp(1, 5.0), 10)
    assert counts.get("listed") == (None, Stamp(2, 5.0))
    counts.keep("listed", Stamp(2, 5.0), 9)
    assert counts.get("listed") == (9, None)
    for key in ("a", "b"):
        counts.keep(key, Stamp(2, 5.0), 1)
    assert len(counts) == 2 and counts.get("listed") == (None, Stamp(2, 5.0))  # bounded, oldest first out
    feed.current = None  # changes cannot be followed: nothing is kept
    assert counts.get("a") == (None, None)


async def test_public_reads_load_no_orm_entity_and_open_no_session(
    uncached: tuple[Services, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    services, client = uncached
    loaded: list[object] = []

    def record(target: object, _context: Any) -> None:
        loaded.append(target)

    def no_session() -> None:
        raise AssertionError("a read route opened an ORM session")

    monkeypatch.setattr(services, "sessions", no_session)
    event.listen(Base, "load", record, propagate=True)
    try:
        for path in PUBLIC_READS:
            with recorded_statements(services.engine) as statements:
                response = await client.get(path)
            assert response.status_code == 200, path
            assert statements, path
    finally:
        event.remove(Base, "load", record)
    assert loaded == []


@sqlite_only
async def test_point_reads_on_sqlite_stay_on_the_event_loop_thread(
    uncached: tuple[Services, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    services, client = uncached
    reader = services.reads.reader
    assert isinstance(reader, SqliteReader)
    threads: list[int] = []
    handed_off: list[object] = []
    reader.loop_connection().connection.set_trace_callback(lambda _sql: threads.append(threading.get_ident()))
    real_to_thread = asyncio.to_thread

    async def to_thread(function: Callable[..., T], *args: Any) -> T:
        handed_off.append(function)
        return await real_to_thread(function, *args)

    monkeypatch.setattr(asyncio, "to_thread", to_thread)
    await client.get("/api/v1/resource/search")  # the listing's total, counted once, is a scan
    handed_off.clear()
    for path in PUBLIC_READS:
        if "?" in path:
            continue
        threads.clear()
        assert (await client.get(path)).status_code == 200, path
        assert threads and set(threads) == {threading.get_ident()}, path
    assert handed_off == []
    # A pattern filter may walk every row: it leaves the loop.
    assert (await client.get("/api/v1/resource/search?q=chat")).status_code == 200
    assert handed_off


@sqlite_only
async def test_sqlite_scans_share_at_most_scan_connections_whatever_their_number(
    uncached: tuple[Services, httpx.AsyncClient],
) -> None:
    services, client = uncached
    reader = services.reads.reader
    assert isinstance(reader, SqliteReader)
    # Pattern filters are scans; each answer is read (no answer cache), many of them at once.
    answers = await asyncio.gather(
        *(client.get(f"/api/v1/resource/search?q=chat{number % 7}") for number in range(24))
    )
    assert {answer.status_code for answer in answers} == {200}
    assert 1 <= len(reader.scan_connections) <= SCAN_CONNECTIONS


@sqlite_only
async def test_sqlite_scan_connections_keep_a_small_page_cache(
    uncached: tuple[Services, httpx.AsyncClient],
) -> None:
    services, client = uncached
    reader = services.reads.reader
    assert isinstance(reader, SqliteReader)
    assert (await client.get("/api/v1/resource/search?q=chat")).status_code == 200
    for scanning in reader.scan_connections:
        assert scanning.connection.execute("PRAGMA cache_size").fetchone() == (-SCAN_CACHE_KIB,)


@postgresql_only
async def test_postgresql_reads_take_and_return_a_pooled_connection(
    uncached: tuple[Services, httpx.AsyncClient],
) -> None:
    services, client = uncached
    checkouts: list[object] = []

    def checked_out(*_args: Any) -> None:
        checkouts.append(_args)

    in_use = DB_POOL_IN_USE._value.get()
    event.listen(services.engine.sync_engine, "checkout", checked_out)
    try:
        for path in PUBLIC_READS:
            assert (await client.get(path)).status_code == 200, path
    finally:
        event.remove(services.engine.sync_engine, "checkout", checked_out)
    assert len(checkouts) >= len(PUBLIC_READS)
    assert DB_POOL_IN_USE._value.get() == in_use


@postgresql_only
async def test_a_connection_the_server_closed_is_replaced_before_a_read(
    uncached: tuple[Services, httpx.AsyncClient], settings: Settings
) -> None:
    services, client = uncached
    assert (await client.get("/api/v1/resource/1")).status_code == 200
    database = services.engine.url.database
    # What a PostgreSQL restart does to the pool: every connection is cut (the listener too).
    terminate = f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'"
    await asyncio.to_thread(postgres_admin, terminate)
    await asyncio.sleep(0.2)  # the driver learns of the closed sockets from the event loop
    assert (await client.get("/api/v1/resource/1")).status_code == 200


@postgresql_only
async def test_concurrent_reads_hold_at_most_the_pools_steady_connections(
    uncached: tuple[Services, httpx.AsyncClient],
) -> None:
    services, _client = uncached
    connects: list[object] = []

    def connected(*args: Any) -> None:
        connects.append(args)

    event.listen(services.engine.sync_engine, "connect", connected)
    try:
        # Several times the pool at once, each from its own address (no limiter refusal).
        clients = [make_client(services, client_ip=f"10.9.0.{n}") for n in range(60)]
        answers = await asyncio.gather(*(client.get("/api/v1/resource/1") for client in clients))
        for client in clients:
            await client.aclose()
    finally:
        event.remove(services.engine.sync_engine, "connect", connected)
    assert {answer.status_code for answer in answers} == {200}
    # Without the bound, the reads beyond the pool open overflow connections, closed on return.
    assert len(connects) <= services.settings.db_pool_size
