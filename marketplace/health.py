"""`GET /up`: whether this worker can answer the API, and what of it is degraded.

Outside `/api`, for load balancers and orchestrators. The database is required: without it the API
cannot answer, and `/up` says 503. The shared store (Redis) is not: while it is down the API still
answers (limiters admit every request, caches miss), so `/up` stays 200 and names the store under
`degraded`, with what that costs. The same holds for the change feed on PostgreSQL: while notices
do not reach the worker, its kept answers may be as old as their maximum age. Each part of the
answer is named in `checks` and, when it is not ok, in `degraded` (`database`, `redis`, `changes`).

Each probe is bounded so that a hung dependency still gives an answer. A connection the database
closed (a restart) fails only its first use: the database check tries once more on a fresh
connection before it reports anything, as the API's own reads do.

The webhook delivery queue (`webhooks`) is late when some work has been due longer than
`MARKETPLACE_WEBHOOKS_LATE_AFTER_SECONDS` (`webhooks/worker.py`, `QueueState`): deliveries are not
keeping up, or no worker delivers. A receiver that fails does not make the queue late: its
deliveries wait for their retries. A late queue is named under `degraded`; the API still answers.

With read replicas, `checks` has a `replicas` entry and `degraded` names each replica that does not
serve reads (failing, or not proven fresh: `replicas.py`). While the primary does not answer but a
replica serves reads, `/up` stays 200: reads are answered, writes fail.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, PendingRollbackError
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from marketplace.database.replicas import ReplicaReader
from marketplace.http.json import JsonAnswer
from marketplace.services import Services
from marketplace.webhooks.worker import queue_state

logger = logging.getLogger("marketplace.health")

PROBE_TIMEOUT_SECONDS = 2.0
REDIS_DEGRADED = "redis: rate limits are not enforced and upstream answers are not cached"
# Tries of the database check: a connection cut by a restart fails once, and is replaced.
DATABASE_TRIES = 2


def changes_degraded(max_age_seconds: float) -> str:
    return (
        "changes: notices of other processes' writes do not reach this worker; "
        f"its answers may be up to {max_age_seconds:g} s old"
    )


class ChangesNotProven(Exception):
    pass


PRIMARY_DEGRADED = "database: the primary does not answer: writes fail, reads are answered by read replicas"


def webhooks_late(waited_seconds: float, late_after_seconds: float) -> str:
    return (
        f"webhooks: a delivery has been due for {waited_seconds:.0f} s (late after {late_after_seconds:g} s): "
        "release news and other events reach their receivers late"
    )


class HealthCheck:
    def __init__(self, services: Services) -> None:
        self.services = services

    async def _database(self) -> None:
        for attempt in range(DATABASE_TRIES):
            try:
                async with self.services.engine.connect() as connection:
                    await connection.execute(text("SELECT 1"))
                return
            except DBAPIError as error:
                # The pool drops a connection found cut; the next try gets a new one.
                if attempt + 1 == DATABASE_TRIES or not error.connection_invalidated:
                    raise
            except PendingRollbackError:
                if attempt + 1 == DATABASE_TRIES:
                    raise

    async def _changes(self) -> None:
        if await self.services.worker_cache.changes.proven() is False:
            raise ChangesNotProven("its probe notices do not come back")

    async def _webhooks(self, checks: dict[str, str], degraded: list[str]) -> None:
        late_after = self.services.settings.webhooks_late_after_seconds
        waited: list[float] = []

        async def read() -> None:
            waited.append((await queue_state(self.services.engine)).oldest_due_seconds)

        if not await self._probe("webhooks", read):
            checks["webhooks"] = "unknown"
        elif waited[0] > late_after:
            checks["webhooks"] = "late"
            degraded.append(webhooks_late(waited[0], late_after))
        else:
            checks["webhooks"] = "ok"

    async def _redis(self) -> None:
        # A write, not a PING: a cluster missing a master or refusing commands (CLUSTERDOWN), or a
        # read-only replica, still answers PING but cannot count.
        await self.services.store.check_counting()

    async def _replicas(self, replicas: ReplicaReader, checks: dict[str, str], degraded: list[str]) -> bool:
        """Name the replicas that do not serve reads; whether any does."""
        if not replicas.ever_checked:
            await self._probe("replicas", replicas.checked)
        problems = replicas.problems()
        serving = replicas.serving()
        checks["replicas"] = "ok" if not problems else "degraded" if serving else "failing"
        degraded.extend(problems)
        return serving

    async def _probe(self, name: str, probe: Callable[[], Awaitable[None]]) -> bool:
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):
                await probe()
        except Exception as error:  # any failure of a dependency is reported, not raised
            logger.warning("health check: %s failed: %s", name, error)
            return False
        return True

    async def report(self) -> tuple[int, dict[str, object]]:
        """The status code and body: 200 while the API can answer, with the degraded parts named."""
        database_ok = await self._probe("database", self._database)
        checks = {"database": "ok" if database_ok else "failing"}
        primary_ok = database_ok
        degraded: list[str] = []
        if self.services.settings.redis_url:
            redis_ok = await self._probe("redis", self._redis)
            checks["redis"] = "ok" if redis_ok else "failing"
            if not redis_ok:
                degraded.append(REDIS_DEGRADED)
        if self.services.engine.dialect.name == "postgresql":
            changes_ok = await self._probe("changes", self._changes)
            checks["changes"] = "ok" if changes_ok else "failing"
            if not changes_ok:
                degraded.append(changes_degraded(self.services.settings.worker_cache_max_age_seconds))
        replicas = self.services.reads.reader
        if isinstance(replicas, ReplicaReader):
            replicas_serve = await self._replicas(replicas, checks, degraded)
            if not database_ok and replicas_serve:
                degraded.insert(0, PRIMARY_DEGRADED)
                database_ok = True
        if primary_ok:
            await self._webhooks(checks, degraded)
        if not database_ok:
            return 503, {"status": "failing", "checks": checks, "degraded": degraded}
        return 200, {"status": "degraded" if degraded else "ok", "checks": checks, "degraded": degraded}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response: Response
        if scope["method"] not in ("GET", "HEAD"):
            response = JsonAnswer(
                {"message": "Method Not Allowed"}, status_code=405, headers={"Allow": "GET, HEAD"}
            )
        else:
            status, body = await self.report()
            response = JsonAnswer(body, status_code=status, headers={"Cache-Control": "no-store"})
        await response(scope, receive, send)
