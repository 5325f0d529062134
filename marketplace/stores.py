"""Where limiter counters, cached answers and short claims live, behind one small interface.

`MemoryStore` serves one process (the embedded default) in bounded memory. `RedisStore` gives the
same semantics across processes and machines.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from redis.exceptions import RedisError

from marketplace.telemetry.metrics import STORE_ERRORS

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

    async def claim(self, key: str, ttl_seconds: float) -> str | None:
        """A token when nobody else holds `key` (held until released or `ttl_seconds` pass), else None."""
        ...

    async def release(self, key: str, token: str) -> None:
        """Give up a claim, if `token` still holds it."""
        ...

    async def ping(self) -> None:
        """Raise when the store cannot be reached (health checks)."""
        ...

    async def close(self) -> None: ...


class Clock(Protocol):
    def __call__(self) -> float: ...


class MemoryStore:
    """In-process counters, cache and claims; correct for a single worker process only.

    Memory is bounded whatever the number of clients. At most `max_keys` windows are kept exactly;
    beyond that the oldest window is folded into a fixed table of slots (by hash of its key) that
    keeps, per slot, the highest count and the latest end of the windows folded into it. A key that
    comes back resumes from its slot: it may be refused early (it shares the slot's count) but never
    gets more than its budget. Cached answers are dropped least recently used first beyond
    `max_keys` entries or `max_cache_bytes`.
    """

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        max_keys: int = 100_000,
        max_cache_bytes: int = 32 * 1024 * 1024,
        overflow_slots: int = 65_536,
    ) -> None:
        if overflow_slots & (overflow_slots - 1):
            raise ValueError("overflow_slots must be a power of two")
        self._clock = clock or time.time
        self.max_keys = max(1, max_keys)
        self.max_cache_bytes = max_cache_bytes
        # key -> (count, window end); ordered by window start, so the front holds the oldest.
        self._windows: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._slot_mask = overflow_slots - 1
        self._slot_counts = [0] * overflow_slots
        self._slot_ends = [0.0] * overflow_slots
        self._cache: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        self._cache_bytes = 0
        self._claims: dict[str, tuple[str, float]] = {}

    @property
    def window_count(self) -> int:
        return len(self._windows)

    @property
    def cache_bytes(self) -> int:
        return self._cache_bytes

    async def hit(self, key: str, max_attempts: int, decay_seconds: int) -> WindowHit:
        now = self._clock()
        self._drop_expired_windows(now)
        window = self._windows.get(key)
        if window is None or window[1] <= now:
            if window is not None:
                del self._windows[key]
            count, ends_at = self._folded(key, now, decay_seconds)
        else:
            count, ends_at = window
        retry_after = max(0, math.ceil(ends_at - now))
        if count >= max_attempts:
            return WindowHit(allowed=False, count=count, retry_after=retry_after)
        count += 1
        if key not in self._windows:
            self._make_room()
        self._windows[key] = (count, ends_at)
        return WindowHit(allowed=True, count=count, retry_after=retry_after)

    def _drop_expired_windows(self, now: float) -> None:
        # A little sweeping per hit keeps expired windows from piling up, at constant cost.
        for _ in range(2):
            if not self._windows:
                return
            oldest = next(iter(self._windows))
            if self._windows[oldest][1] > now:
                return
            del self._windows[oldest]

    def _make_room(self) -> None:
        while len(self._windows) >= self.max_keys:
            key, (count, ends_at) = self._windows.popitem(last=False)
            slot = hash(key) & self._slot_mask
            if self._slot_ends[slot] <= self._clock():
                self._slot_counts[slot], self._slot_ends[slot] = count, ends_at
            else:
                self._slot_counts[slot] = max(self._slot_counts[slot], count)
                self._slot_ends[slot] = max(self._slot_ends[slot], ends_at)

    def _folded(self, key: str, now: float, decay_seconds: int) -> tuple[int, float]:
        """Where a key without a live window starts: its slot's count if the slot is live, else anew."""
        slot = hash(key) & self._slot_mask
        if self._slot_ends[slot] > now:
            return self._slot_counts[slot], self._slot_ends[slot]
        return 0, now + decay_seconds

    async def get(self, key: str) -> bytes | None:
        entry = self._cache.get(key)
        if entry is None:
            return None
        value, expires_at = entry
        if expires_at <= self._clock():
            self._forget(key)
            return None
        self._cache.move_to_end(key)
        return value

    async def put(self, key: str, value: bytes, ttl_seconds: int) -> None:
        if len(value) > self.max_cache_bytes:
            return
        self._forget(key)
        self._cache[key] = (value, self._clock() + ttl_seconds)
        self._cache_bytes += len(value)
        while len(self._cache) > self.max_keys or self._cache_bytes > self.max_cache_bytes:
            self._forget(next(iter(self._cache)))

    def _forget(self, key: str) -> None:
        entry = self._cache.pop(key, None)
        if entry is not None:
            self._cache_bytes -= len(entry[0])

    async def claim(self, key: str, ttl_seconds: float) -> str | None:
        now = self._clock()
        held = self._claims.get(key)
        if held is not None and held[1] > now:
            return None
        token = secrets.token_hex(8)
        self._claims[key] = (token, now + ttl_seconds)
        return token

    async def release(self, key: str, token: str) -> None:
        held = self._claims.get(key)
        if held is not None and held[0] == token:
            del self._claims[key]

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        self._windows.clear()
        self._cache.clear()
        self._cache_bytes = 0
        self._claims.clear()


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

# Deletes a claim only if the token still holds it (a claim that expired may belong to another).
_RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisStore:
    """Counters, cache and claims in Redis, shared by every process and machine of the service.

    Redis faults never fail a request: while Redis is unreachable, limiters admit every request,
    the cache misses and every claim is granted; a warning is logged at most once a minute, each
    failure is counted, and Redis is not asked again for a short pause so that each request does
    not wait for a timeout.
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
        self._hit_script = self._redis.register_script(_HIT_SCRIPT)
        self._release_script = self._redis.register_script(_RELEASE_SCRIPT)
        self._paused_until = 0.0
        self._last_warning = 0.0

    def _available(self) -> bool:
        return time.monotonic() >= self._paused_until

    def _failed(self, error: Exception) -> None:
        STORE_ERRORS.inc()
        now = time.monotonic()
        self._paused_until = now + self.RETRY_PAUSE_SECONDS
        if now - self._last_warning >= self.WARNING_INTERVAL_SECONDS or self._last_warning == 0.0:
            self._last_warning = now
            logger.warning("Redis unavailable (%s): limiters and caches bypassed", error)

    async def hit(self, key: str, max_attempts: int, decay_seconds: int) -> WindowHit:
        if self._available():
            try:
                allowed, count, left_ms = await self._hit_script(
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

    async def claim(self, key: str, ttl_seconds: float) -> str | None:
        token = secrets.token_hex(8)
        if not self._available():
            return token
        try:
            won = await self._redis.set(
                self._prefix + key, token, nx=True, px=max(1, int(ttl_seconds * 1000))
            )
        except (RedisError, OSError) as error:
            self._failed(error)
            return token
        return token if won else None

    async def release(self, key: str, token: str) -> None:
        if not self._available():
            return
        try:
            await self._release_script(keys=[self._prefix + key], args=[token])
        except (RedisError, OSError) as error:
            self._failed(error)

    async def ping(self) -> None:
        await self._redis.ping()

    async def close(self) -> None:
        await self._redis.aclose()
