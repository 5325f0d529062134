"""`GET /up`: whether this worker can reach its database (and Redis, when configured).

Outside `/api`, for load balancers and orchestrators: 200 when every dependency answers, else 503
naming what failed. Each probe is bounded so that a hung dependency still gives an answer.
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy import text
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from marketplace.http.json import JsonAnswer
from marketplace.http.stores import RedisStore
from marketplace.services import Services

logger = logging.getLogger("marketplace.health")

PROBE_TIMEOUT_SECONDS = 2.0


class HealthCheck:
    def __init__(self, services: Services) -> None:
        self.services = services

    async def _database(self) -> None:
        async with self.services.engine.connect() as connection:
            await connection.execute(text("SELECT 1"))

    async def _redis(self) -> None:
        store = self.services.store
        if isinstance(store, RedisStore):
            await store.ping()

    async def report(self) -> tuple[bool, dict[str, str]]:
        checks: dict[str, str] = {}
        healthy = True
        probes = {"database": self._database}
        if self.services.settings.redis_url:
            probes["redis"] = self._redis
        for name, probe in probes.items():
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):
                    await probe()
                checks[name] = "ok"
            except Exception as error:  # any failure of a dependency is reported, not raised
                logger.warning("health check: %s failed: %s", name, error)
                checks[name] = "failing"
                healthy = False
        return healthy, checks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response: Response
        if scope["method"] not in ("GET", "HEAD"):
            response = JsonAnswer(
                {"message": "Method Not Allowed"}, status_code=405, headers={"Allow": "GET, HEAD"}
            )
        else:
            healthy, checks = await self.report()
            response = JsonAnswer(
                {"status": "ok" if healthy else "failing", "checks": checks},
                status_code=200 if healthy else 503,
            )
        await response(scope, receive, send)
