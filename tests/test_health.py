"""`GET /up` tells the truth: 200 whenever the API can answer, and every degraded part named."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx
from sqlalchemy.engine import make_url

from marketplace.config import Settings
from marketplace.database.changes import PostgresChangeFeed
from marketplace.health import changes_degraded
from marketplace.services import Services
from tests.profiles import postgresql_only, unique_name
from tests.test_worker_cache import asyncpg_dsn, name_of


@postgresql_only
async def test_up_names_changes_as_degraded_while_probe_notices_do_not_come_back(
    client: httpx.AsyncClient, services: Services, settings: Settings
) -> None:
    elsewhere = unique_name("mp_elsewhere")
    admin = await asyncpg.connect(asyncpg_dsn(settings))
    await admin.execute(f'CREATE DATABASE "{elsewhere}"')
    # A worker listening where the writers' notices never go (another database of the server).
    listening_elsewhere = PostgresChangeFeed(
        make_url(settings.database_url).set(database=elsewhere), services.engine, 5.0
    )
    await services.worker_cache.changes.close()
    services.worker_cache.changes = listening_elsewhere
    try:
        async with asyncio.timeout(10):
            await listening_elsewhere.proven()
        health = await client.get("/up")
        assert health.status_code == 200
        assert health.json()["status"] == "degraded"
        assert health.json()["checks"]["changes"] == "failing"
        assert health.json()["degraded"] == [changes_degraded(settings.worker_cache_max_age_seconds)]
        # The API answers all the while.
        assert await name_of(client)
    finally:
        await listening_elsewhere.close()
        await admin.execute(f'DROP DATABASE "{elsewhere}" WITH (FORCE)')
        await admin.close()
