"""The freshness bound: no kept answer or count is served past its maximum age, whatever the notices do.

And the change feed proves itself: a worker whose probe notices do not come back says so (a
warning without any request's id, a metric, `/up`), while its cache keeps serving within the bound.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg
import httpx
import pytest
from sqlalchemy.engine import make_url

from marketplace.config import Settings
from marketplace.database.changes import PostgresChangeFeed
from marketplace.database.engine import create_engine
from marketplace.database.freshness import Stamp, answer_ended, answer_started, read_proven_as_of
from marketplace.database.readers import GenerationCounts
from marketplace.http.worker_cache import WorkerCache
from marketplace.services import Services, listen_url
from marketplace.telemetry.logs import REQUEST_ID
from marketplace.telemetry.metrics import CHANGE_FEED_UP, WORKER_CACHE_LOOKUPS
from tests.api.helpers import recorded_statements
from tests.profiles import postgresql_only, unique_name
from tests.test_worker_cache import FixedFeed, answer, asyncpg_dsn, key, name_of, until_following

MAX_AGE = 60.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_kept_answer_is_not_served_past_its_maximum_age() -> None:
    clock = FakeClock()
    cache = WorkerCache(
        FixedFeed(), max_entries=10, max_bytes=64 * 1024, max_age_seconds=MAX_AGE, clock=clock
    )
    _, stamp = cache.lookup(key(1))
    assert stamp is not None
    cache.keep(key(1), stamp, answer(10))
    clock.now += MAX_AGE
    assert cache.lookup(key(1))[0] is not None
    expired_before = WORKER_CACHE_LOOKUPS.labels("expired")._value.get()
    clock.now += 0.001
    found, fresh_stamp = cache.lookup(key(1))
    assert found is None
    assert fresh_stamp == Stamp(1, clock.now)
    assert len(cache) == 0
    assert WORKER_CACHE_LOOKUPS.labels("expired")._value.get() == expired_before + 1


def test_an_answer_ages_from_the_oldest_read_it_was_built_from() -> None:
    clock = FakeClock()
    cache = WorkerCache(
        FixedFeed(), max_entries=10, max_bytes=64 * 1024, max_age_seconds=MAX_AGE, clock=clock
    )
    _, stamp = cache.lookup(key(1))
    assert stamp is not None
    building = answer_started(stamp.as_of)
    try:
        read_proven_as_of(clock.now - 50)  # e.g. a replica proven current 50 s ago
        cache.keep(key(1), stamp, answer(10))
    finally:
        answer_ended(building)
    clock.now += 10
    assert cache.lookup(key(1))[0] is not None
    clock.now += 0.001
    assert cache.lookup(key(1))[0] is None


def test_an_answer_already_past_its_maximum_age_is_not_kept() -> None:
    clock = FakeClock()
    cache = WorkerCache(
        FixedFeed(), max_entries=10, max_bytes=64 * 1024, max_age_seconds=MAX_AGE, clock=clock
    )
    _, stamp = cache.lookup(key(1))
    assert stamp is not None
    clock.now += MAX_AGE + 1  # a read that took longer than the bound
    cache.keep(key(1), stamp, answer(10))
    assert len(cache) == 0


def test_a_kept_count_is_not_used_past_its_maximum_age_and_ages_the_answer_built_from_it() -> None:
    clock = FakeClock()
    counts = GenerationCounts(FixedFeed(), max_age_seconds=MAX_AGE, clock=clock)
    _, stamp = counts.get("q")
    assert stamp is not None
    counts.keep("q", stamp, 42)
    clock.now += 30
    building = answer_started(clock.now)
    try:
        assert counts.get("q") == (42, None)
        answer_stamp = Stamp(1, clock.now)
        # The page built with the count is as old as the count.
        assert answer_stamp.kept_as_of() == clock.now - 30
    finally:
        answer_ended(building)
    clock.now += MAX_AGE
    found, fresh_stamp = counts.get("q")
    assert found is None
    assert fresh_stamp == Stamp(1, clock.now)


async def test_a_kept_answer_is_read_again_once_older_than_the_maximum_age(
    client: httpx.AsyncClient, services: Services
) -> None:
    await until_following(services)
    clock = FakeClock()
    services.worker_cache.clock = clock
    await name_of(client)
    clock.now += services.settings.worker_cache_max_age_seconds
    with recorded_statements(services.engine) as statements:
        await name_of(client)
    assert statements == []
    clock.now += 0.001
    with recorded_statements(services.engine) as statements:
        await name_of(client)
    assert statements != []


def test_the_default_maximum_age_is_at_most_a_minute() -> None:
    assert 0 < Settings(_env_file=None).worker_cache_max_age_seconds <= 60  # type: ignore[call-arg]


@postgresql_only
async def test_a_change_that_sends_no_notice_is_served_within_the_maximum_age(
    client: httpx.AsyncClient, services: Services, settings: Settings
) -> None:
    await until_following(services)
    clock = FakeClock()
    services.worker_cache.clock = clock
    assert await name_of(client) != "Restored Without Triggers"
    outside = await asyncpg.connect(asyncpg_dsn(settings))
    try:
        # As `pg_restore --disable-triggers` or a logical-replication apply worker write: no notice.
        await outside.execute("SET session_replication_role = replica")
        await outside.execute("UPDATE resources SET name = 'Restored Without Triggers' WHERE id = 1")
    finally:
        await outside.close()
    await asyncio.sleep(0.2)
    assert await name_of(client) != "Restored Without Triggers"
    clock.now += services.settings.worker_cache_max_age_seconds + 0.001
    assert await name_of(client) == "Restored Without Triggers"


@postgresql_only
async def test_a_feed_whose_probe_notices_do_not_come_back_counts_as_down(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # Listening on another database of the same server: the connection works, notices never come.
    elsewhere = unique_name("mp_elsewhere")
    admin = await asyncpg.connect(asyncpg_dsn(settings))
    await admin.execute(f'CREATE DATABASE "{elsewhere}"')
    engine = create_engine(settings)
    feed = PostgresChangeFeed(make_url(settings.database_url).set(database=elsewhere), engine, 5.0)
    try:
        with caplog.at_level(logging.WARNING, logger="marketplace.database.changes"):
            request_id = REQUEST_ID.set("a-request-that-started-the-feed")
            try:
                generation = feed.generation()
            finally:
                REQUEST_ID.reset(request_id)
            async with asyncio.timeout(10):
                assert await feed.proven() is False
        assert CHANGE_FEED_UP._value.get() == 0
        warnings = [record for record in caplog.records if record.name == "marketplace.database.changes"]
        assert len(warnings) == 1
        assert "probe notice did not come back" in warnings[0].getMessage()
        # Background work logs outside any request.
        assert getattr(warnings[0], "request_id", "-") == "-"
        # Not proven, yet the generation holds: the cache keeps serving within its maximum age.
        assert feed.generation() == generation
    finally:
        await feed.close()
        await engine.dispose()
        await admin.execute(f'DROP DATABASE "{elsewhere}" WITH (FORCE)')
        await admin.close()


@postgresql_only
async def test_a_feed_proven_by_its_probe_counts_as_up(settings: Settings) -> None:
    engine = create_engine(settings)
    feed = PostgresChangeFeed(make_url(listen_url(settings)), engine, 5.0)
    try:
        feed.generation()
        async with asyncio.timeout(10):
            assert await feed.proven() is True
        assert CHANGE_FEED_UP._value.get() == 1
    finally:
        await feed.close()
        await engine.dispose()
