"""Public reads spread over PostgreSQL read replicas that are *proven* fresh enough.

With `MARKETPLACE_DATABASE_READ_URLS`, the public reads (`readers.py`) go to the replicas in turn;
writes, the change notices (`changes.py`) and every read of a write path stay on the primary.
A replica serves a read only while all of these hold, else the read goes to the primary:

- Bounded lag. Every `MARKETPLACE_READ_REPLICA_MAX_LAG_SECONDS / 4` each worker asks the primary
  for its WAL position, then each replica for the position it has replayed
  (`pg_last_wal_replay_lsn()`). A replica that has replayed a position the primary had at time T
  is proven current as of T; it serves while T is at most the max lag ago, and an answer read
  from it ages from T, not from the request (`freshness.py`). This runs whatever the change
  feed's state, so a replica that falls behind is noticed within a quarter of the bound even
  while no notice can arrive.
- Catch-up after a notice. When the worker's generation moves (a notice arrived, or the worker
  starts following the changes again), the worker's caches keep what they read under the new
  generation: a replica serves again only once it has replayed the primary's position measured
  after the move (checked every 10 ms meanwhile).
- Monotonic reads. Each worker keeps a floor: the highest WAL position its answers are known to
  include (a replica's replayed position, or the primary's position, as measured before the read;
  raised to the primary's position after a notice). A replica below the floor is skipped, so a
  worker never answers from a replica older than what it has already answered. "Known" is to the
  precision of the checks: an answer may include writes committed after the position measured
  before it.
- Answering. A replica whose read or check fails is set aside (its read is retried once on the
  primary) and its pool is disposed of, so that the next check opens a fresh connection; it serves
  again once a check answers. `marketplace_read_replica_failures_total` counts failures, not
  retries: each failed read, and a failed check of a replica that was answering (the checks of a
  replica known to be down every quarter of the bound are not counted).
- Primary outage. While the primary does not answer the checks, a replica that still answers,
  has replayed at least the primary's last known position and has applied all the WAL it received
  is held current: a primary that is down commits nothing, so the replica misses nothing it could
  have had (a notice still outstanding counts as caught up by it). Reads keep being answered;
  writes fail. This trusts that a primary this worker cannot reach is down, not merely cut off
  from it; a replica never proven against a primary that answered serves nothing.

A server that is not in recovery (a URL naming a primary) has every write: it counts as having
replayed the primary's position at each check.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.database import freshness
from marketplace.database.changes import ChangeFeed
from marketplace.database.freshness import read_proven_as_of
from marketplace.database.readers import Read, Reader, Row, give_back_after_failure
from marketplace.telemetry.logs import start_background
from marketplace.telemetry.metrics import READ_REPLICA_FAILURES, READ_REPLICAS_FAILING

logger = logging.getLogger("marketplace.database.replicas")

# How often a replica behind the floor, but within the lag bound, is asked again after a notice.
CATCH_UP_POLL_SECONDS = 0.01
# Longest a check of one server may take before that server counts as failing.
CHECK_TIMEOUT_SECONDS = 2.0

_PRIMARY_POSITION = "SELECT pg_current_wal_insert_lsn()::text"
# NULL on a server that is not a standby: it has every write.
_REPLAYED = (
    "SELECT CASE WHEN pg_is_in_recovery() THEN COALESCE(pg_last_wal_replay_lsn(), '0/0'::pg_lsn)::text"
    " || ' ' || COALESCE(pg_last_wal_receive_lsn(), '0/0'::pg_lsn)::text END"
)


@functools.cache
def replica_faults() -> tuple[type[BaseException], ...]:
    """What a replica's read raises when the replica, not the request, is at fault: the server is
    gone, restarting or shutting down, a statement was cancelled (a recovery conflict, the statement
    timeout), or no connection could be had in time.

    Replicas are PostgreSQL servers: the driver is imported by the first fault, never by a worker
    on SQLite.
    """
    import asyncpg  # type: ignore[import-untyped]

    return (
        OSError,
        TimeoutError,
        DBAPIError,
        PoolTimeout,
        asyncpg.InterfaceError,
        asyncpg.PostgresConnectionError,
        asyncpg.OperatorInterventionError,
        asyncpg.SerializationError,
    )


def lsn(text: str) -> int:
    """A WAL position (`16/B374D848`) as a number, so that positions compare."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) + int(low, 16)


class Replica:
    """One read replica: its reader, the position it has replayed, and since when it is proven current."""

    def __init__(self, name: str, engine: AsyncEngine, reader: Reader) -> None:
        self.name = name
        self.engine = engine
        self.reader = reader
        # The WAL position it had replayed at the last check that reached it.
        self.position = 0
        # It has replayed everything the primary had committed at this moment (monotonic clock).
        self.proven_at = -math.inf
        # Failing its reads or checks: warned of once, until it answers again.
        self.failing = False
        # Its pooled connections may be dead: the next check starts from a fresh pool.
        self._stale_pool = False

    def failed(self, error: BaseException, *, read: bool) -> None:
        if read or not self.failing:
            READ_REPLICA_FAILURES.inc()
        self._stale_pool = True
        if not self.failing:
            self.failing = True
            READ_REPLICAS_FAILING.inc()
            logger.warning(
                "read replica %s failed (%s): reads go to the primary until it answers", self.name, error
            )

    def answered(self) -> None:
        if self.failing:
            self.failing = False
            READ_REPLICAS_FAILING.dec()
            logger.info("read replica %s answers again", self.name)

    async def replayed(self) -> tuple[int, int] | None:
        """The WAL positions it has replayed and received; None when it is not a standby (it has every write)."""
        if self._stale_pool:
            self._stale_pool = False
            await self.engine.dispose()
        text = await _fetch_value(self.engine, _REPLAYED)
        if text is None:
            return None
        replayed, received = text.split()
        return lsn(replayed), lsn(received)


class ReplicaReader:
    """A `Reader` that sends each read to a replica proven fresh enough in turn, else to the primary."""

    def __init__(
        self,
        primary: Reader,
        primary_engine: AsyncEngine,
        replicas: Sequence[Replica],
        changes: ChangeFeed,
        *,
        max_lag_seconds: float = 1.0,
        clock: Callable[[], float] = freshness.clock,
    ) -> None:
        self.primary = primary
        self.primary_engine = primary_engine
        self.replicas = tuple(replicas)
        self.changes = changes
        self.max_lag = max_lag_seconds
        self.interval = max_lag_seconds / 4
        self._clock = clock
        self._turn = 0
        self._generation: object = _UNCHECKED
        # Generation moves seen, and how many of them a check has turned into a floor.
        self._catch_ups_requested = 0
        self._catch_ups_done = 0
        # The highest WAL position this worker's answers are known to include.
        self.floor = 0
        # The primary's last known position, and (time, position) of the recent checks.
        self.primary_position = 0
        self.primary_answering = True
        self._history: deque[tuple[float, int]] = deque()
        self._checks = 0
        self._checked = asyncio.Condition()
        self._wake = asyncio.Event()
        self._monitor: asyncio.Task[None] | None = None

    async def point(self, read: Read, *values: Any) -> Sequence[Row]:
        return await self._read(lambda reader: reader.point, read, values)

    async def scan(self, read: Read, *values: Any) -> Sequence[Row]:
        return await self._read(lambda reader: reader.scan, read, values)

    async def _read(self, method: _Method, read: Read, values: tuple[Any, ...]) -> Sequence[Row]:
        replica = self._choose()
        if replica is not None:
            position = replica.position
            # What it answers holds the changes committed by then, not by the request's start.
            read_proven_as_of(replica.proven_at)
            try:
                rows = await method(replica.reader)(read, *values)
            except replica_faults() as error:
                replica.failed(error, read=True)
                self._wake.set()
            else:
                if position > self.floor:
                    self.floor = position
                return rows
        known = self.primary_position
        try:
            rows = await method(self.primary)(read, *values)
        except replica_faults():
            # The primary may have just gone down: once a check has seen it, a replica may serve.
            replica = await self._after_a_check()
            if replica is None:
                raise
            read_proven_as_of(replica.proven_at)
            return await method(replica.reader)(read, *values)
        if known > self.floor:
            self.floor = known
        return rows

    async def _after_a_check(self) -> Replica | None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
                await self.checked()
        return self._choose()

    def _choose(self) -> Replica | None:
        self._start_monitor()
        generation = self.changes.generation()
        if generation != self._generation:
            self._generation = generation
            # Losing the feed announces nothing; a notice or following again does.
            if generation is not None:
                self._catch_ups_requested += 1
                self._wake.set()
        if self._catch_ups_requested != self._catch_ups_done:
            return None
        oldest = self._clock() - self.max_lag
        count = len(self.replicas)
        for _ in range(count):
            replica = self.replicas[self._turn]
            self._turn = (self._turn + 1) % count
            if not replica.failing and replica.proven_at >= oldest and replica.position >= self.floor:
                return replica
        return None

    def serving(self) -> bool:
        """Whether some replica may serve a read now (ignoring an outstanding catch-up)."""
        oldest = self._clock() - self.max_lag
        return any(
            not replica.failing and replica.proven_at >= oldest and replica.position >= self.floor
            for replica in self.replicas
        )

    def problems(self) -> list[str]:
        """The replicas that do not serve reads now, and why."""
        oldest = self._clock() - self.max_lag
        found: list[str] = []
        for replica in self.replicas:
            if replica.failing:
                found.append(f"read replica {replica.name}: failing, its reads go to the primary")
            elif replica.proven_at < oldest:
                found.append(
                    f"read replica {replica.name}: not proven within {self.max_lag:g} s of the primary,"
                    " its reads go to the primary"
                )
        return found

    @property
    def ever_checked(self) -> bool:
        return self._checks > 0

    async def checked(self) -> None:
        """Wait until a check that started after this call has ended."""
        self._start_monitor()
        async with self._checked:
            target = self._checks + 2  # the check under way may have started before this call
            self._wake.set()
            await self._checked.wait_for(lambda: self._checks >= target)

    def _start_monitor(self) -> None:
        if self._monitor is None or self._monitor.done():
            self._monitor = start_background(self._watch())

    async def _watch(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let the watch end: reads would stay on the primary for good
                logger.exception("checking the read replicas failed")
            pause = CATCH_UP_POLL_SECONDS if self._catching_up() else self.interval
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await self._wake.wait()

    def _catching_up(self) -> bool:
        oldest = self._clock() - self.max_lag
        return any(
            not replica.failing and replica.proven_at >= oldest and replica.position < self.floor
            for replica in self.replicas
        )

    async def check(self) -> None:
        """Measure the primary's position, then each replica's: who is proven current as of when."""
        requested = self._catch_ups_requested
        started = self._clock()
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
                position = lsn(await _fetch_value(self.primary_engine, _PRIMARY_POSITION))
        except Exception as error:  # the primary's own faults show on the requests that use it
            if self.primary_answering:
                logger.warning(
                    "the primary does not answer (%s): replicas that have replayed its last position"
                    " keep serving reads",
                    error,
                )
            self.primary_answering = False
            # A notice before the outage cannot be matched to a position any more: the replicas
            # held current (below) have everything the primary sent them.
            self._catch_ups_done = requested
        else:
            if not self.primary_answering:
                logger.info("the primary answers again")
            self.primary_answering = True
            self.primary_position = position
            self._history.append((started, position))
            while self._history and self._history[0][0] < started - 2 * self.max_lag:
                self._history.popleft()
            if requested != self._catch_ups_done:
                self.floor = max(self.floor, position)
                self._catch_ups_done = requested
        await asyncio.gather(*(self._check_replica(replica, started) for replica in self.replicas))
        async with self._checked:
            self._checks += 1
            self._checked.notify_all()

    async def _check_replica(self, replica: Replica, started: float) -> None:
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
                positions = await replica.replayed()
        except Exception as error:  # a replica that is down waits for the next check
            replica.failed(error, read=False)
            return
        replica.answered()
        if positions is None:  # not a standby
            replayed = received = max(replica.position, self.primary_position)
        else:
            replayed, received = positions
        replica.position = replayed
        if not self.primary_answering:
            # Held current: it has applied all the WAL it received, and at least the primary's
            # last known position (only a primary seen answering has one).
            if self._history and replayed >= max(self.primary_position, received):
                replica.proven_at = started
            return
        for measured_at, primary_position in reversed(self._history):
            if replayed >= primary_position:
                replica.proven_at = max(replica.proven_at, measured_at)
                return

    def close(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
        self.primary.close()
        for replica in self.replicas:
            replica.reader.close()


_UNCHECKED = object()
# Which of a reader's two ways to read a request uses.
_Method = Callable[[Reader], Callable[..., Awaitable[Sequence[Row]]]]


async def _fetch_value(engine: AsyncEngine, statement: str) -> Any:
    """One value, on a pooled connection; a connection found closed is dropped, not put back."""
    pooled = await engine.raw_connection()
    connection = pooled.driver_connection
    assert connection is not None
    try:
        value = await connection.fetchval(statement)
    except BaseException as error:
        await give_back_after_failure(pooled, error)
        raise
    pooled.close()
    return value
