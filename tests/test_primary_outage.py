"""The primary's outage and restart, on a real PostgreSQL (the standby topology's primary).

While the primary is down, a worker's kept answers keep answering within their maximum age, and
`/up` says 200 over a restart: a check connection cut by the restart is replaced, not reported.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from marketplace.config import Settings
from marketplace.services import Services, build_services
from tests.catalogue import OWNER_CHAT_ID
from tests.conftest import GRANT_SECRET, make_client
from tests.topology import StandbyDatabase, StandbyTopology
from tests.upstream import FakeUpstream

SERVER_ERROR = b'{"message":"Server Error"}'
_addresses = itertools.count(1)


def fresh_address() -> dict[str, str]:
    """A client address of its own, so that no limiter refuses a test's many requests."""
    n = next(_addresses)
    return {"X-Forwarded-For": f"10.77.{n // 250}.{n % 250 + 1}"}


@asynccontextmanager
async def primary_only(
    database: StandbyDatabase, upstream: FakeUpstream, tmp_path: Path
) -> AsyncIterator[tuple[Services, httpx.AsyncClient]]:
    """A worker on the primary alone (no replica), its answer cache on."""
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        database_url=database.primary_url,
        base_url="http://marketplace.test",
        chat_api_url=f"{upstream.url}/chat-api",
        stats_api_url=f"{upstream.url}/stats-api",
        storage_dir=str(tmp_path / "storage"),
        chat_grant_secret=GRANT_SECRET,
        app_key="test-key",
        db_connect_timeout_seconds=1.0,
    )
    services = build_services(settings)
    try:
        async with make_client(services) as client:
            services.worker_cache.changes.generation()
            async with asyncio.timeout(10):
                assert await services.worker_cache.changes.proven()
            yield services, client
    finally:
        await services.close()


PATHS = ("/api/v1/resource/1", "/api/v1/resource/version/1", "/api/v1/resource/search?size=2")


async def test_kept_answers_keep_answering_while_the_primary_is_down(
    standby: StandbyTopology, standby_database: StandbyDatabase, upstream: FakeUpstream, tmp_path: Path
) -> None:
    async with primary_only(standby_database, upstream, tmp_path) as (_services, client):
        before = {path: (await client.get(path, headers=fresh_address())).content for path in PATHS}
        standby.stop_node("primary")
        for _ in range(10):
            for path in PATHS:
                answer = await client.get(path, headers=fresh_address())
                assert (answer.status_code, answer.content) == (200, before[path])
            await asyncio.sleep(0.1)
        # What was never kept needs the database: the contract's 500, and so does a write.
        assert (await client.get("/api/v1/resource/2", headers=fresh_address())).status_code == 500
        grant = await client.post(
            f"/api/v1/chat/{OWNER_CHAT_ID}/apply/1",
            json={"custom_password": GRANT_SECRET},
            headers=fresh_address(),
        )
        assert (grant.status_code, grant.content) == (500, SERVER_ERROR)


async def test_up_says_200_with_the_database_ok_right_after_a_primary_restart(
    standby: StandbyTopology, standby_database: StandbyDatabase, upstream: FakeUpstream, tmp_path: Path
) -> None:
    async with primary_only(standby_database, upstream, tmp_path) as (_services, client):
        assert (await client.get("/up")).json()["checks"]["database"] == "ok"
        standby.restart_node("primary")
        for _ in range(5):
            health = await client.get("/up")
            assert health.status_code == 200
            assert health.json()["checks"]["database"] == "ok"
        assert (await client.get("/api/v1/resource/1", headers=fresh_address())).status_code == 200
