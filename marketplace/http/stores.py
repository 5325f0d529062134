"""Where limiter counters and cached answers live, behind one small interface.

`MemoryStore` serves one process (the embedded default). A shared store (Redis) gives the same
semantics across processes and machines.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Protocol

from redis.exceptions import RedisError

logger = logging.getLogger("marketplace.stores")


@dataclass(frozen=True, slots=True)
class WindowHit:
    """The outcome of one limiter check on a fixed window."""

    allowed: bool
    # Hits counted in the window, this one included when allowed.
    count: int
    # Seconds until the window ends (whole seconds, at least 0).
    retry_after: int


class Store(Protocol):
    async def hit(self, key: str, max_attempts: int, decay_seconds: int) -> WindowHit:
        """Refuse when the window's count has reached `max_attempts`, else count this hit.

        A window starts at the key's first hit and lasts `decay_seconds`.
        """
        ...

    async def get(self, key: str) -> bytes | None: ...

    async def put(self, key: str, value: bytes, ttl_seconds: int) -> None: ...

    async def close(self) -> None: ...


class MemoryStore:
    """In-process counters and cache; correct for a single worker process only."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or time.time
        self._windows: dict[str, tuple[int, float]] = {}
        self._cache: dict[str, tuple[bytes, float]] = {}
        self._next_sweep = 0.0

    async def hit(self, key: str, max_attempts: int, decay_seconds: int) -> WindowHit:
        now = self._clock()
        self._sweep(now)
        count, ends_at = self._windows.get(key, (0, 0.0))
        if ends_at <= now:
            count, ends_at = 0, now + decay_seconds
        retry_after = max(0, math.ceil(ends_at - now))
        if count >= max_attempts:
            return WindowHit(allowed=False, count=count, retry_after=retry_after)
        count += 1
        self._windows[key] = (count, ends_at)
        return WindowHit(allowed=True, count=count, retry_after=retry_after)

    async def get(self, key: str) -> bytes | None:
        entry = self._cache.get(key)
        if entry is None:
            return None
        value, expires_at = entry
        if expires_at <= self._clock():
            self._cache.pop(key, None)
            return None
        return value

    async def put(self, key: str, value: bytes, ttl_seconds: int) -> None:
        self._cache[key] = (value, self._clock() + ttl_seconds)

    async def close(self) -> None:
        self._windows.clear()
        self._cache.clear()

    def _sweep(self, now: float) -> None:
        # Expired windows and entries are dropped once a minute so that memory stays bounded.
        if now < self._next_sweep:
            return
        self._next_sweep = now + 60
        self._windows = {k: v for k, v in self._windows.items() if v[1] > now}
        self._cache = {k: v for k, v in self._cache.items() if v[1] > now}


class Clock(Protocol):
    def __call__(self) -> float: ...


# One round trip per limiter check: refuse when the window is full, else count the hit; the first
# hit of a key starts its window (the key's expiry). Returns {allowed, count, milliseconds left}.
_HIT_SCRIPT = """
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('SET', KEYS[1], 1, 'PX', ARGV[2])
  return {1, 1, tonumber(ARGV[2])}
end
if count >= tonumber(ARGV[1]) then
  return {0, count, ttl}
end
count = redis.call('INCR', KEYS[1])
return {1, count, ttl}
"""


class RedisStore:
    """Counters and cache in Redis, shared by every process and machine of the service.

    Redis faults never fail a request: while Redis is unreachable, limiters admit every request
    and the cache misses, a warning is logged at most once a minute, and Redis is not asked again
    for a short pause so that each request does not wait for a timeout.
    """

    RETRY_PAUSE_SECONDS = 2.0
    WARNING_INTERVAL_SECONDS = 60.0

    def __init__(self, url: str, prefix: str = "marketplace:") -> None:
        from redis.asyncio import Redis

        self._redis = Redis.from_url(
            url,
            socket_connect_timeout=0.5,
            socket_timeout=0.5,
            health_check_interval=30,
            retry_on_timeout=False,
        )
        self._prefix = prefix
        self._script = self._redis.register_script(_HIT_SCRIPT)
        self._paused_until = 0.0
        self._last_warning = 0.0

    def _available(self) -> bool:
        return time.monotonic() >= self._paused_until

    def _failed(self, error: Exception) -> None:
        now = time.monotonic()
        self._paused_until = now + self.RETRY_PAUSE_SECONDS
        if now - self._last_warning >= self.WARNING_INTERVAL_SECONDS or self._last_warning == 0.0:
            self._last_warning = now
            logger.warning("Redis unavailable (%s): limiters and caches bypassed", error)

    async def hit(self, key: str, max_attempts: int, decay_seconds: int) -> WindowHit:
        if self._available():
            try:
                allowed, count, left_ms = await self._script(
                    keys=[self._prefix + key], args=[max_attempts, decay_seconds * 1000]
                )
                return WindowHit(
                    allowed=bool(allowed),
                    count=int(count),
                    retry_after=max(0, math.ceil(int(left_ms) / 1000)),
                )
            except (RedisError, OSError) as error:
                self._failed(error)
        return WindowHit(allowed=True, count=0, retry_after=decay_seconds)

    async def get(self, key: str) -> bytes | None:
        if not self._available():
            return None
        try:
            value = await self._redis.get(self._prefix + key)
        except (RedisError, OSError) as error:
            self._failed(error)
            return None
        if value is None:
            return None
        return value if isinstance(value, bytes) else str(value).encode("utf-8")

    async def put(self, key: str, value: bytes, ttl_seconds: int) -> None:
        if not self._available():
            return
        try:
            await self._redis.set(self._prefix + key, value, ex=ttl_seconds)
        except (RedisError, OSError) as error:
            self._failed(error)

    async def ping(self) -> None:
        """Raises when Redis does not answer (health checks)."""
        await self._redis.ping()

    async def close(self) -> None:
        await self._redis.aclose()
