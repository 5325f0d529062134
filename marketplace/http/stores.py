"""Where limiter counters and cached answers live, behind one small interface.

`MemoryStore` serves one process (the embedded default). A shared store (Redis) gives the same
semantics across processes and machines.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Protocol


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
