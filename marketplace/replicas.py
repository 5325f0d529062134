"""Public reads spread over PostgreSQL read replicas, never older than the changes a worker has seen.

With `MARKETPLACE_DATABASE_READ_URLS`, the public reads (`readers.py`) go to the replicas in turn;
writes, the change notices (`changes.py`) and every read of a write path stay on the primary.

A replica lags the primary by its replay delay. The worker's caches keep what they read under the
generation of the data they saw before reading, so a read must not come from a replica that has
not replayed the writes announced up to that generation. Hence: when the generation moves (a
notice arrived, or the worker starts following the changes), the worker asks the primary for its
WAL position once, and a replica serves reads again only after it has reported replaying that
position (`pg_last_wal_replay_lsn()`, polled every 10 ms while it is behind). Until then reads go
to the primary, which has everything. A replica that fails a read is set aside until it answers
the catch-up check again; that read is retried once on the primary. A server that is not in
recovery (a URL naming a primary) counts as caught up.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.changes import ChangeFeed
from marketplace.readers import Read, Reader, Row
from marketplace.telemetry.metrics import READ_REPLICA_FAILURES

logger = logging.getLogger("marketplace.replicas")

# How often a replica behind the primary's position is asked again.
CATCH_UP_POLL_SECONDS = 0.01
# How often a replica that failed is asked again.
FAILED_POLL_SECONDS = 1.0

_PRIMARY_POSITION = "SELECT pg_current_wal_lsn()::text"
# NULL on a server that is not a standby: it has every write.
_REPLAYED = "SELECT COALESCE(pg_last_wal_replay_lsn() >= CAST($1::text AS pg_lsn), true)"


class Replica:
    """One read replica: its reader, and whether it has replayed the generation's position."""

    def __init__(self, name: str, engine: AsyncEngine, reader: Reader) -> None:
        self.name = name
        self.engine = engine
        self.reader = reader
        self.caught_up = False
        # Failing its reads or checks: warned of once, until it answers again.
        self.failing = False

    def failed(self, error: BaseException) -> None:
        READ_REPLICA_FAILURES.inc()
        if not self.failing:
            self.failing = True
            logger.warning(
                "read replica %s failed (%s): reads go to the primary until it answers", self.name, error
            )

    def answered(self) -> None:
        if self.failing:
            self.failing = False
            logger.info("read replica %s answers again", self.name)

    async def replayed(self, position: str) -> bool:
        pooled = await self.engine.raw_connection()
        try:
            connection = pooled.driver_connection
            assert connection is not None
            return bool(await connection.fetchval(_REPLAYED, position))
        finally:
            pooled.close()


class ReplicaReader:
    """A `Reader` that sends each read to a caught-up replica in turn, else to the primary."""

    def __init__(
        self, primary: Reader, primary_engine: AsyncEngine, replicas: Sequence[Replica], changes: ChangeFeed
    ) -> None:
        self.primary = primary
        self.primary_engine = primary_engine
        self.replicas = tuple(replicas)
        self.changes = changes
        self._turns = itertools.cycle(range(len(self.replicas)))
        # The generation the replicas' flags were checked for; a fresh worker has checked none.
        self._generation: object = _UNCHECKED
        self._follower: asyncio.Task[None] | None = None

    async def point(self, read: Read, *values: Any) -> Sequence[Row]:
        return await self._read(lambda reader: reader.point, read, values)

    async def scan(self, read: Read, *values: Any) -> Sequence[Row]:
        return await self._read(lambda reader: reader.scan, read, values)

    async def _read(self, method: _Method, read: Read, values: tuple[Any, ...]) -> Sequence[Row]:
        replica = self._choose()
        if replica is not None:
            try:
                return await method(replica.reader)(read, *values)
            except (OSError, ConnectionError) as error:
                self._set_aside(replica, error)
        return await method(self.primary)(read, *values)

    def _choose(self) -> Replica | None:
        generation = self.changes.generation()
        if generation != self._generation:
            self._generation = generation
            for replica in self.replicas:
                replica.caught_up = False
            self._follow(generation)
        for _ in self.replicas:
            replica = self.replicas[next(self._turns)]
            if replica.caught_up:
                return replica
        return None

    def _set_aside(self, replica: Replica, error: BaseException) -> None:
        replica.failed(error)
        replica.caught_up = False
        self._follow(self._generation)

    def _follow(self, generation: object) -> None:
        if self._follower is not None and not self._follower.done():
            self._follower.cancel()
        self._follower = asyncio.get_running_loop().create_task(self._catch_up(generation))

    async def _catch_up(self, generation: object) -> None:
        """Mark each replica caught up once it has replayed the primary's position of now."""
        position: str | None = None
        warned = False
        while position is None:
            try:
                position = await _primary_position(self.primary_engine)
            except Exception as error:  # the primary's own faults show on the requests that use it
                if not warned:
                    warned = True
                    logger.warning("cannot read the primary's WAL position (%s); replicas wait", error)
                await asyncio.sleep(FAILED_POLL_SECONDS)
        behind = [replica for replica in self.replicas if not replica.caught_up]
        while behind and self._generation == generation:
            pause = CATCH_UP_POLL_SECONDS
            for replica in list(behind):
                try:
                    replayed = await replica.replayed(position)
                except Exception as error:  # a replica that is down waits for the next poll
                    pause = FAILED_POLL_SECONDS
                    replica.failed(error)
                    continue
                replica.answered()
                if replayed:
                    replica.caught_up = self._generation == generation
                    behind.remove(replica)
            if behind:
                await asyncio.sleep(pause)

    def close(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
        self.primary.close()
        for replica in self.replicas:
            replica.reader.close()


_UNCHECKED = object()
# Which of a reader's two ways to read a request uses.
_Method = Callable[[Reader], Callable[..., Awaitable[Sequence[Row]]]]


async def _primary_position(engine: AsyncEngine) -> str:
    pooled = await engine.raw_connection()
    try:
        connection = pooled.driver_connection
        assert connection is not None
        return str(await connection.fetchval(_PRIMARY_POSITION))
    finally:
        pooled.close()
