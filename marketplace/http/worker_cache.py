"""Each worker's cache of encoded answers to the public catalogue reads.

An answer is kept as its final bytes, keyed by route name, path and raw query string, until a
change it depends on (`changes.py`). An answer of one resource (its card, versions, current
version: `keep(..., resource_id=)`) depends on the rows of that resource only; every other answer
(search pages, user names, authors) on every change, since a page lists many resources and a
change to a user may rename what it shows. So a grant drops the granted resource's answers and
the pages, not the other resources' answers. A change that names nothing (`EVERYTHING`), or a
feed that cannot say what moved its generation, drops everything. An answer is kept under the
generation seen *before* it was read, and not kept when a change it depends on came meanwhile. Whatever the notices do, an answer is
not served once its as-of time is older than the maximum age (`freshness.py`). Bounded in
entries and bytes (least recently used first out); answers and keys beyond a size are not kept.

Only 200 answers of routes marked `cached` are kept; the limiters run before every lookup.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from starlette.responses import Response
from starlette.types import Send

from marketplace.database import freshness
from marketplace.database.changes import RESOURCE_COLUMNS, Change, ChangeFeed, ChangeHistory
from marketplace.database.freshness import Stamp
from marketplace.telemetry.metrics import WORKER_CACHE_BYTES, WORKER_CACHE_LOOKUPS

CacheKey = tuple[str, str, bytes]

# Longest path plus query string kept (a key is held as long as its answer).
MAX_KEY_BYTES = 1024
# An entry's bookkeeping beyond its bytes, counted against the byte budget.
_ENTRY_OVERHEAD_BYTES = 200

_HIT = WORKER_CACHE_LOOKUPS.labels("hit")
_MISS = WORKER_CACHE_LOOKUPS.labels("miss")
_EXPIRED = WORKER_CACHE_LOOKUPS.labels("expired")
_OFF = WORKER_CACHE_LOOKUPS.labels("off")


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    body: bytes
    raw_headers: tuple[tuple[bytes, bytes], ...]
    # Not served once this is older than the cache's maximum age (`freshness.py`).
    as_of: float
    # The one resource the answer depends on; None: it depends on every change.
    resource_id: int | None = None

    async def send(self, send: Send, more_headers: list[tuple[bytes, bytes]]) -> None:
        """Send the cached answer, with `more_headers` after its own."""
        await send(
            {"type": "http.response.start", "status": 200, "headers": [*self.raw_headers, *more_headers]}
        )
        await send({"type": "http.response.body", "body": self.body})


class WorkerCache:
    def __init__(
        self,
        changes: ChangeFeed,
        *,
        max_entries: int,
        max_bytes: int,
        max_age_seconds: float = math.inf,
        clock: Callable[[], float] = freshness.clock,
    ) -> None:
        self.changes = changes
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_age_seconds = max_age_seconds
        self.clock = clock
        self.enabled = max_entries > 0 and max_bytes > 0
        self._entries: OrderedDict[CacheKey, CachedAnswer] = OrderedDict()
        self._bytes = 0
        self._generation: int | None = None
        # The keys of the answers of each resource, and of the answers that depend on every change.
        self._by_resource: dict[int, set[CacheKey]] = {}
        self._across: set[CacheKey] = set()

    def generation(self) -> int | None:
        """The current generation, dropping what the changes since the last one touch; None:
        neither read nor keep."""
        if not self.enabled:
            return None
        current = self.changes.generation()
        if current != self._generation:
            changes = self._changes_since(self._generation)
            if changes is None or any(change.is_everything for change in changes):
                self.clear()
            else:
                self._drop_touched(changes)
            self._generation = current
        return current

    def _changes_since(self, generation: int | None) -> Sequence[Change] | None:
        if generation is None or not isinstance(self.changes, ChangeHistory):
            return None
        return self.changes.changes_since(generation)

    def _drop_touched(self, changes: Sequence[Change]) -> None:
        for key in list(self._across):
            self._drop(key, self._entries[key])
        for change in changes:
            if change.table not in RESOURCE_COLUMNS:
                continue
            if change.resource_ids is None:
                self.clear()
                return
            for resource_id in change.resource_ids:
                for key in list(self._by_resource.get(resource_id, ())):
                    self._drop(key, self._entries[key])

    def lookup(self, key: CacheKey) -> tuple[CachedAnswer | None, Stamp | None]:
        """The answer cached for `key`, and the stamp to keep a fresh answer under (None: don't)."""
        generation = self.generation()
        if generation is None:
            if self.enabled:
                _OFF.inc()
            return None, None
        now = self.clock()
        found = self._entries.get(key)
        if found is None:
            _MISS.inc()
            return None, Stamp(generation, now)
        if now - found.as_of > self.max_age_seconds:
            self._drop(key, found)
            _EXPIRED.inc()
            return None, Stamp(generation, now)
        self._entries.move_to_end(key)
        _HIT.inc()
        return found, None

    def keep(
        self, key: CacheKey, stamp: Stamp, response: Response, *, resource_id: int | None = None
    ) -> None:
        """Keep a 200 answer read under `stamp`, unless a change it depends on came meanwhile.

        `resource_id`: the one resource the answer depends on (None: it depends on every change).
        """
        if response.status_code != 200:
            return
        if self.generation() != stamp.generation:
            changes = self._changes_since(stamp.generation)
            if changes is None or any(touches(change, resource_id) for change in changes):
                return
        as_of = stamp.kept_as_of()
        if self.clock() - as_of > self.max_age_seconds:
            return
        answer = CachedAnswer(bytes(response.body), tuple(response.raw_headers), as_of, resource_id)
        size = _size(key, answer)
        # One answer never takes more than a sixteenth of the budget: big pages are not worth it.
        if len(key[1]) + len(key[2]) > MAX_KEY_BYTES or size > self.max_bytes // 16:
            return
        previous = self._entries.get(key)
        if previous is not None:
            self._drop(key, previous)
        self._entries[key] = answer
        self._bytes += size
        if resource_id is None:
            self._across.add(key)
        else:
            self._by_resource.setdefault(resource_id, set()).add(key)
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            old_key, old = self._entries.popitem(last=False)
            self._bytes -= _size(old_key, old)
            self._unindex(old_key, old)
        WORKER_CACHE_BYTES.set(self._bytes)

    def _drop(self, key: CacheKey, answer: CachedAnswer) -> None:
        del self._entries[key]
        self._bytes -= _size(key, answer)
        self._unindex(key, answer)
        WORKER_CACHE_BYTES.set(self._bytes)

    def _unindex(self, key: CacheKey, answer: CachedAnswer) -> None:
        if answer.resource_id is None:
            self._across.discard(key)
            return
        keys = self._by_resource.get(answer.resource_id)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_resource[answer.resource_id]

    def clear(self) -> None:
        self._by_resource.clear()
        self._across.clear()
        if self._entries:
            self._entries.clear()
            self._bytes = 0
            WORKER_CACHE_BYTES.set(0)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    async def close(self) -> None:
        self.clear()
        await self.changes.close()


def touches(change: Change, resource_id: int | None) -> bool:
    """Whether `change` may change an answer of `resource_id` (None: an answer across resources)."""
    if change.is_everything or resource_id is None:
        return True
    if change.table not in RESOURCE_COLUMNS:
        return False
    return change.resource_ids is None or resource_id in change.resource_ids


def _size(key: CacheKey, answer: CachedAnswer) -> int:
    return len(answer.body) + len(key[1]) + len(key[2]) + _ENTRY_OVERHEAD_BYTES
