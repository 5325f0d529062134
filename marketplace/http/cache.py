"""TTL cache of encoded upstream answers over the shared store, one upstream call per key at a time.

Only successes are cached, as final bytes, so that a hit costs one store read and no encoding.
Concurrent misses of one key share a single call: within a process they await the same task;
across processes a short claim in the store lets one process call while the others poll the
store for its answer, for at most the upstream timeout (then they answer as for a failure).

Every store operation here is on one key, valid anywhere on a Redis Cluster; an answer and its
claim still share a hash tag (the answer's digest), so they live on the same node.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable

from marketplace.stores import Store
from marketplace.telemetry.metrics import CACHE_LOOKUPS

Produce = Callable[[], Awaitable[bytes | None]]


def cache_key(namespace: str, *parts: str) -> str:
    """The store key of an answer; any text has one, as for `limits.limit_key`."""
    digest = hashlib.sha1("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
    return f"cache:{namespace}:{{{digest}}}"


class AnswerCache:
    POLL_SECONDS = 0.05

    def __init__(self, store: Store, wait_seconds: float) -> None:
        self.store = store
        # How long a miss may wait for another process's call: the upstream timeout and a margin.
        self.wait_seconds = wait_seconds
        self._flights: dict[str, asyncio.Task[bytes | None]] = {}

    async def remember(
        self, namespace: str, parts: tuple[str, ...], ttl_seconds: int, produce: Produce
    ) -> bytes | None:
        """The cached bytes, else `produce()`'s (stored when not None, a success)."""
        key = cache_key(namespace, *parts)
        cached = await self.store.get(key)
        if cached is not None:
            CACHE_LOOKUPS.labels(namespace, "hit").inc()
            return cached
        CACHE_LOOKUPS.labels(namespace, "miss").inc()
        flight = self._flights.get(key)
        if flight is None:
            flight = asyncio.ensure_future(self._fill(key, ttl_seconds, produce))
            self._flights[key] = flight
            flight.add_done_callback(lambda done: self._land(key, done))
        # Shielded: a caller that goes away does not cancel the call the others wait for.
        return await asyncio.shield(flight)

    def _land(self, key: str, flight: asyncio.Task[bytes | None]) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if not flight.cancelled():
            flight.exception()  # retrieved, so that a failure nobody awaited is not reported twice

    async def _fill(self, key: str, ttl_seconds: int, produce: Produce) -> bytes | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_seconds
        claim_key = "claim:" + key
        while True:
            token = await self.store.claim(claim_key, self.wait_seconds)
            if token is not None:
                try:
                    fresh = await produce()
                    if fresh is not None:
                        await self.store.put(key, fresh, ttl_seconds)
                    return fresh
                finally:
                    await self.store.release(claim_key, token)
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(self.POLL_SECONDS)
            cached = await self.store.get(key)
            if cached is not None:
                return cached
