"""TTL cache of encoded upstream answers, over the shared store.

Only successes are cached, as final bytes, so that a hit costs one store read and no encoding.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable

from marketplace.http.stores import Store


def cache_key(namespace: str, *parts: str) -> str:
    digest = hashlib.sha1("\x00".join(parts).encode("utf-8")).hexdigest()
    return f"cache:{namespace}:{digest}"


async def remember(
    store: Store, key: str, ttl_seconds: int, produce: Callable[[], Awaitable[bytes | None]]
) -> bytes | None:
    """The cached bytes under `key`, else `produce()`'s, stored when not None (a success)."""
    cached = await store.get(key)
    if cached is not None:
        return cached
    fresh = await produce()
    if fresh is not None:
        await store.put(key, fresh, ttl_seconds)
    return fresh
