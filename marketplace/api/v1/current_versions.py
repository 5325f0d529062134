"""Each worker's map of every visible resource to its current version's answer: the update check
(`GET /resource/version/{id}`) answered with no database read.

Built at the worker's start in ranges of `RANGE_IDS` ids (one read each, the visibility and the
version number as the database route decides them: `VISIBLE_CURRENT_VERSIONS`), while the route
answers from the database until a range is in. Compact: one 32-bit slot per id (the index of its
answer, or not visible, or unknown) and one prebuilt answer per distinct version number, so that
200,000 resources take about a megabyte.

Kept current by the change notices (`changes.py`): a change to a resource's row or its versions
marks its slot unknown (the route reads the database for it) and its range is read again; a
change that names nothing marks every slot unknown and the whole map is read again.

Freshness (`freshness.py`): a range is as old as its last read and is not used once older than
the maximum age. Ranges are read again, oldest first, once `REFRESH_SHARE` of the maximum age has
passed, so that a change committed without a notice is seen within the bound as by every other
answer. While notices do not arrive (the feed is not proven), ranges keep serving within the
bound; when they arrive again, everything is read again (the feed announces `EVERYTHING`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from array import array
from collections.abc import Callable, Sequence

from starlette.responses import Response

from marketplace.catalogue.resources import (
    HIGHEST_RESOURCE_ID,
    MAX_ID,
    NO_RELEASE_TEXT,
    VISIBLE_CURRENT_VERSIONS,
)
from marketplace.database import freshness
from marketplace.database.changes import Change, ChangeFeed, ChangeHistory
from marketplace.database.freshness import answer_as_of, answer_ended, answer_started
from marketplace.database.readers import Reader
from marketplace.http.json import TextAnswer
from marketplace.http.worker_cache import CachedAnswer
from marketplace.telemetry.logs import start_background

logger = logging.getLogger("marketplace.catalogue.current_versions")

# Ids per range read at once (and per freshness stamp).
RANGE_SHIFT = 12
RANGE_IDS = 1 << RANGE_SHIFT
# Ids the map covers beyond the highest at its start (new resources), before it must grow.
GROWTH_IDS = 1 << 16
# A catalogue whose ids are this much sparser than its rows is not mapped (the route reads it).
MAX_IDS_PER_RESOURCE = 8
# A range is read again once this share of the maximum age has passed since its last read.
REFRESH_SHARE = 0.8
# The changes that touch a resource's current version answer.
_VERSION_TABLES = ("resources", "versions")

# The ids beyond the ranges the map covers, read as one more range.
BEYOND = -1

CLOSE_TIMEOUT_SECONDS = 5.0
# How long the build waits for the change feed's first verdict.
FIRST_VERDICT_SECONDS = 10.0

_NOT_VISIBLE = 0
_UNKNOWN = 1
_FIRST_ANSWER = 2


class NotVisible:
    """The resource is not visible to anonymous callers (or does not exist): the route's 404."""


NOT_VISIBLE = NotVisible()


class CurrentVersionMap:
    def __init__(
        self,
        reader: Reader,
        changes: ChangeFeed,
        *,
        max_age_seconds: float,
        enabled: bool = True,
        clock: Callable[[], float] = freshness.clock,
    ) -> None:
        self._reader = reader
        self._changes = changes
        self.max_age_seconds = max_age_seconds
        self.enabled = enabled and isinstance(changes, ChangeHistory)
        self.clock = clock
        # Per id: _NOT_VISIBLE, _UNKNOWN, or the index of its answer in `_answers`.
        self._slots = array("I")
        # Per range: when its last read began (what it read holds every change committed by then).
        self._range_as_of = array("d")
        self._answers: list[CachedAnswer | None] = [None, None]
        self._answer_index: dict[str, int] = {}
        # When the ids beyond the covered ranges were last read, and the visible ones found there or
        # named by a notice, which the map cannot hold (the catalogue would be too sparse).
        self._beyond_as_of = -math.inf
        self._uncovered: set[int] = set()
        self._generation: int | None = None
        # Ranges to read again before any refresh (changes named them).
        self._dirty: set[int] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._loaded: asyncio.Event | None = None
        # Ranges read so far (each read of one range counts one).
        self.reads = 0
        self._reading = False
        self._closing = False

    # The route's side

    def answer(self, resource_id: int) -> CachedAnswer | NotVisible | None:
        """The current version answer of `resource_id`; None when the map cannot say (read it)."""
        if not self.enabled or not self._follow():
            return None
        if resource_id >= len(self._slots):
            if resource_id in self._uncovered or self.clock() - self._beyond_as_of > self.max_age_seconds:
                return None
            return NOT_VISIBLE
        slot = self._slots[resource_id]
        if slot == _UNKNOWN:
            return None
        if self.clock() - self._range_as_of[resource_id >> RANGE_SHIFT] > self.max_age_seconds:
            self._wake.set()
            return None
        if slot == _NOT_VISIBLE:
            return NOT_VISIBLE
        return self._answers[slot]

    def _follow(self) -> bool:
        """Apply the changes since the last look; False while changes cannot be followed."""
        current = self._changes.generation()
        if current is None:
            return False
        if current != self._generation:
            changes = self._since(self._generation)
            self._generation = current
            if changes is None:
                self._forget_everything()
            else:
                self._apply(changes)
        return True

    def _since(self, generation: int | None) -> Sequence[Change] | None:
        if generation is None or not isinstance(self._changes, ChangeHistory):
            return None
        return self._changes.changes_since(generation)

    def _apply(self, changes: Sequence[Change]) -> None:
        for change in changes:
            if change.is_everything or (change.table in _VERSION_TABLES and change.resource_ids is None):
                self._forget_everything()
                return
            if change.table not in _VERSION_TABLES:
                continue
            for resource_id in change.resource_ids or ():
                self._mark_unknown(resource_id)

    def _mark_unknown(self, resource_id: int) -> None:
        if resource_id >= len(self._slots):
            self._grow(resource_id + 1)
            if resource_id >= len(self._slots):
                self._uncovered.add(resource_id)
                return
        self._slots[resource_id] = _UNKNOWN
        self._dirty.add(resource_id >> RANGE_SHIFT)
        self._wake.set()

    def _forget_everything(self) -> None:
        for index in range(len(self._range_as_of)):
            self._range_as_of[index] = -math.inf
        self._beyond_as_of = -math.inf
        self._dirty.update(range(len(self._range_as_of)))
        self._dirty.add(BEYOND)
        self._wake.set()

    def _grow(self, ids: int) -> None:
        """Cover ids below `ids` (when the catalogue stays dense enough to map)."""
        if ids > MAX_IDS_PER_RESOURCE * max(self._count, 1) + GROWTH_IDS:
            return
        ids = ((ids + GROWTH_IDS) >> RANGE_SHIFT << RANGE_SHIFT) + RANGE_IDS
        self._slots.extend([_UNKNOWN] * (ids - len(self._slots)))
        ranges = ids >> RANGE_SHIFT
        self._range_as_of.extend([-math.inf] * (ranges - len(self._range_as_of)))

    # Reading

    def start(self) -> None:
        """Start building and following the map (once the event loop runs)."""
        if not self.enabled or self._task is not None:
            return
        self._loaded = asyncio.Event()
        self._task = start_background(self._keep_current())

    async def loaded(self) -> None:
        """Wait until every range was read once."""
        self.start()
        if self._loaded is not None:
            await self._loaded.wait()

    async def caught_up(self) -> None:
        """Wait until every change seen so far is read into the map."""
        while True:
            self._follow()
            unread = self._beyond_as_of == -math.inf or any(a == -math.inf for a in self._range_as_of)
            if not (self._dirty or self._reading or unread):
                return
            self._wake.set()
            await asyncio.sleep(0.01)

    # Resources counted at the start: how far the map may grow and stay dense.
    _count = 0

    async def _keep_current(self) -> None:
        while not self._closing:
            try:
                began = self.clock()
                await self._build()
                if self.enabled:
                    logger.info(
                        "current version map built: %d visible resources, %d distinct answers, in %.2f s",
                        len(self),
                        len(self._answers) - _FIRST_ANSWER,
                        self.clock() - began,
                    )
                break
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("the current version map could not be read; the route reads the database")
                await asyncio.sleep(1.0)
        assert self._loaded is not None
        self._loaded.set()
        while not self._closing:
            try:
                await self._refresh_due()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("a range of the current version map could not be read again")
                await asyncio.sleep(1.0)

    async def _build(self) -> None:
        # Built once the feed has its first verdict: proving it announces that everything may
        # have changed, which would send the ranges read before it to be read again.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FIRST_VERDICT_SECONDS):
                await self._changes.proven()
        rows = await self._reader.scan(HIGHEST_RESOURCE_ID)
        highest, count = int(rows[0][0] or 0), int(rows[0][1] or 0)
        self._count = count
        if highest > MAX_IDS_PER_RESOURCE * max(count, 1) + GROWTH_IDS:
            logger.warning(
                "resource ids are too sparse to map current versions (%d rows up to id %d); the "
                "update check reads the database",
                count,
                highest,
            )
            self.enabled = False
            return
        self._grow(highest + 1)
        self._follow()
        for range_index in range(len(self._range_as_of)):
            await self._read_range(range_index)
        await self._read_range(BEYOND)
        # What changed while building is read before the map counts as built.
        while self._dirty and not self._closing:
            await self._read_range(min(self._dirty))

    async def _refresh_due(self) -> None:
        """Read the dirty ranges, then the oldest one once it is due; else wait until it is."""
        self._follow()
        if self._dirty:
            await self._read_range(min(self._dirty))
            return
        oldest = BEYOND
        oldest_as_of = self._beyond_as_of
        if self._range_as_of:
            first = min(range(len(self._range_as_of)), key=self._range_as_of.__getitem__)
            if self._range_as_of[first] < oldest_as_of:
                oldest, oldest_as_of = first, self._range_as_of[first]
        due = oldest_as_of + self.max_age_seconds * REFRESH_SHARE - self.clock()
        if due <= 0:
            await self._read_range(oldest)
        else:
            await self._sleep(due)

    async def _sleep(self, seconds: float) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    async def _read_range(self, range_index: int) -> None:
        self._dirty.discard(range_index)
        if not self._follow():
            await asyncio.sleep(0.1)
            self._dirty.add(range_index)
            return
        generation = self._generation
        if range_index == BEYOND:
            first, end = len(self._slots), MAX_ID + 1
        else:
            first = range_index << RANGE_SHIFT
            end = first + RANGE_IDS
        started = self.clock()
        building = answer_started(started)
        self._reading = True
        try:
            rows = await self._reader.scan(VISIBLE_CURRENT_VERSIONS, first, end - 1)
            # A replica proven current only as of an earlier moment lowers what the rows hold.
            as_of = answer_as_of() or started
        finally:
            self._reading = False
            answer_ended(building)
        self.reads += 1
        assert generation is not None
        changes = self._since(generation)
        self._follow()
        if changes is None or any(
            change.is_everything or (change.table in _VERSION_TABLES and change.resource_ids is None)
            for change in changes
        ):
            # Everything may have changed while reading: read it again.
            self._dirty.add(range_index)
            return
        if range_index == BEYOND:
            self._uncovered = set()
            for resource_id, _number in rows:
                # Found without a notice: grown into the map and read with its range.
                self._mark_unknown(resource_id)
            self._apply(changes)
            self._beyond_as_of = as_of
            return
        slots = self._slots
        end = min(end, len(slots))
        for resource_id in range(first, end):
            slots[resource_id] = _NOT_VISIBLE
        for resource_id, number in rows:
            if resource_id < end:
                slots[resource_id] = self._answer_slot(number if number is not None else NO_RELEASE_TEXT)
        # What changed while reading may be missing from the rows: unknown until read again.
        for change in changes:
            if change.table in _VERSION_TABLES:
                for resource_id in change.resource_ids or ():
                    if first <= resource_id < end:
                        self._mark_unknown(resource_id)
        self._range_as_of[range_index] = as_of
        # Let the requests in between the ranges of a long build or refresh.
        await asyncio.sleep(0)

    def _answer_slot(self, number: str) -> int:
        found = self._answer_index.get(number)
        if found is None:
            response: Response = TextAnswer(number)
            found = len(self._answers)
            self._answers.append(CachedAnswer(bytes(response.body), tuple(response.raw_headers), 0.0))
            self._answer_index[number] = found
        return found

    def __len__(self) -> int:
        """Resources known visible."""
        return sum(1 for slot in self._slots if slot >= _FIRST_ANSWER)

    async def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            # The loop also ends by itself at its next turn: a cancellation that a driver or a
            # timeout racing it swallows must not hold the shutdown.
            await asyncio.wait({self._task}, timeout=CLOSE_TIMEOUT_SECONDS)
            self._task = None
