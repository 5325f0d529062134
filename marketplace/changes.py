"""Committed changes to the database, announced by every writer and followed by every worker.

The workers' caches of encoded answers (`http/worker_cache.py`) are valid for one *generation* of
the data. A writer on any process or host announces its commits; each worker follows them and
moves to a new generation, which drops what it cached. A worker that cannot follow the changes
has no generation (None) and serves nothing from its cache until it can again.

- PostgreSQL: every transaction that wrote sends `NOTIFY marketplace_changes` inside itself (so
  the notice goes out exactly when, and only if, the commit happens); each worker `LISTEN`s on a
  connection of its own, and a lost connection disables its cache until it is back.
- SQLite: `PRAGMA data_version` on a connection of the worker's own changes whenever another
  connection (of any process) commits; each worker reads it every 10 ms at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import sqlite3
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import quote

from sqlalchemy import event
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

logger = logging.getLogger("marketplace.changes")

CHANNEL = "marketplace_changes"
_NOTIFY = f"SELECT pg_notify('{CHANNEL}', '')"
# Statements that change nothing; anything else counts as a write (erring towards a notice).
_READ_ONLY_PREFIXES = ("SELECT", "SHOW", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "SET ")
_WROTE = "marketplace_wrote"
_COMMITTED_WRITE = "marketplace_committed_write"

# How often a listening connection is checked, and how long a check may take, so that a
# connection that died without a word (a half-open socket) is found within seconds.
HEARTBEAT_SECONDS = 5.0
HEARTBEAT_TIMEOUT_SECONDS = 2.0
RECONNECT_DELAY_SECONDS = 1.0
# How stale a SQLite worker's view of other processes' commits may be.
SQLITE_CHECK_SECONDS = 0.01


def announce_commits(engine: AsyncEngine) -> None:
    """Make every transaction of `engine` that wrote announce its commit.

    On PostgreSQL to every listener, by a notice sent inside the transaction; on SQLite the
    readers see the change counter move by themselves. In both, the connection is marked, so that
    the worker that wrote learns of it when the connection returns to its pool.
    """
    notify = engine.dialect.name == "postgresql"

    def note_write(connection: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if not statement.lstrip()[:9].upper().startswith(_READ_ONLY_PREFIXES):
            connection.info[_WROTE] = True

    def announce_before_commit(connection: Any) -> None:
        # Still inside the transaction: the notice is delivered if, and when, it commits.
        if connection.info.pop(_WROTE, False):
            if notify:
                connection.exec_driver_sql(_NOTIFY)
            connection.info[_COMMITTED_WRITE] = True

    def forget_writes(connection: Any) -> None:
        connection.info.pop(_WROTE, None)

    event.listen(engine.sync_engine, "after_cursor_execute", note_write)
    event.listen(engine.sync_engine, "commit", announce_before_commit)
    event.listen(engine.sync_engine, "rollback", forget_writes)


def follow_own_commits(engine: AsyncEngine, feed: ChangeFeed) -> None:
    """Tell `feed` of the commits of this worker's own engine as soon as they are done.

    The notice reaches this worker's listener too, but a moment later: a client that reads right
    after its own write (a grant, then the card's purchases) must not get the cached card meanwhile.
    The connection goes back to the pool after its commit and before the answer is sent.
    """

    def checked_in(_dbapi_connection: Any, record: Any) -> None:
        if record is not None and record.info.pop(_COMMITTED_WRITE, False):
            feed.local_change()

    event.listen(engine.sync_engine.pool, "checkin", checked_in)


class ChangeFeed(Protocol):
    def generation(self) -> int | None:
        """The data's generation as this worker knows it; None while changes cannot be followed."""

    def local_change(self) -> None:
        """This worker committed a change (its notice to the other workers is on its way)."""

    async def close(self) -> None: ...


class NoChangeFeed:
    """For databases no other connection can watch (in-memory SQLite): never a generation."""

    def generation(self) -> int | None:
        return None

    def local_change(self) -> None:
        return None

    async def close(self) -> None:
        return None


class SqliteChangeFeed:
    """`PRAGMA data_version` of a connection of this worker's own, read in the event loop's thread.

    The counter moves when any other connection (of any process) commits. Read at most every
    `SQLITE_CHECK_SECONDS` (each read costs several µs, a tenth of a cached answer); this worker's
    own commits count at once.
    """

    def __init__(self, path: str, clock: Callable[[], float] = time.monotonic) -> None:
        # Read-write without creating: a missing file means no generation, not an empty database.
        self._uri = f"file:{quote(path)}?mode=rw"
        self._connection: sqlite3.Connection | None = None
        self._clock = clock
        self._data_version: int | None = None
        self._next_check = -math.inf
        self._local_changes = 0

    def generation(self) -> int | None:
        now = self._clock()
        if now >= self._next_check:
            self._data_version = self._read_data_version()
            self._next_check = now + SQLITE_CHECK_SECONDS
        if self._data_version is None:
            return None
        # Both only grow: their sum moves whenever either does.
        return self._data_version + self._local_changes

    def _read_data_version(self) -> int | None:
        try:
            if self._connection is None:
                self._connection = sqlite3.connect(
                    self._uri, uri=True, isolation_level=None, check_same_thread=False
                )
            row = self._connection.execute("PRAGMA data_version").fetchone()
        except sqlite3.Error:
            self._drop()
            return None
        return int(row[0])

    def local_change(self) -> None:
        self._local_changes += 1

    def _drop(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(sqlite3.Error):
                self._connection.close()
            self._connection = None

    async def close(self) -> None:
        self._drop()


class PostgresChangeFeed:
    """A `LISTEN` connection of this worker's own, started with the first lookup, kept alive.

    Each notice and each (re)connection starts a new generation: what was cached before a gap in
    listening may be stale.
    """

    def __init__(self, url: URL, connect_timeout: float) -> None:
        self._dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._connect_timeout = connect_timeout
        self._generation = 0
        self._listening = False
        self._task: asyncio.Task[None] | None = None
        # Between a failure and the next successful LISTEN (its warning is written once).
        self._in_outage = False

    def generation(self) -> int | None:
        if self._task is None or self._task.done():
            self._listening = False
            self._task = asyncio.get_running_loop().create_task(self._follow())
        return self._generation if self._listening else None

    def _changed(self, *_args: Any) -> None:
        self._generation += 1

    def local_change(self) -> None:
        self._generation += 1

    async def _follow(self) -> None:
        while True:
            try:
                await self._listen_until_lost()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                # Once per outage, not once per retry: the retries go on every second meanwhile.
                if not self._in_outage:
                    logger.warning("cannot follow database changes, worker cache off: %s", error)
                self._in_outage = True
            self._set_listening(False)
            await asyncio.sleep(RECONNECT_DELAY_SECONDS)

    async def _listen_until_lost(self) -> None:
        import asyncpg  # type: ignore[import-untyped]  # the driver, loaded where PostgreSQL is used

        lost = asyncio.Event()
        connection = await asyncpg.connect(self._dsn, timeout=self._connect_timeout)
        try:
            connection.add_termination_listener(lambda _connection: lost.set())
            await connection.add_listener(CHANNEL, self._changed)
            # Whatever was committed while nobody listened is unknown: start afresh.
            self._generation += 1
            self._set_listening(True)
            if self._in_outage:
                logger.info("following database changes again, worker cache on")
                self._in_outage = False
            while not lost.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lost.wait(), HEARTBEAT_SECONDS)
                if not lost.is_set():
                    await connection.fetchval("SELECT 1", timeout=HEARTBEAT_TIMEOUT_SECONDS)
            logger.warning("the connection following database changes was lost, worker cache off")
            self._in_outage = True
        finally:
            self._set_listening(False)
            connection.terminate()

    def _set_listening(self, listening: bool) -> None:
        # Imported here, not with the module: the command line imports this module (through db.py)
        # before `serve` decides where metric values go, which their first import fixes.
        from marketplace.telemetry.metrics import CHANGE_FEED_UP

        self._listening = listening
        CHANGE_FEED_UP.set(1 if listening else 0)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def change_feed_for(url: URL, connect_timeout: float) -> ChangeFeed:
    if url.get_backend_name() == "postgresql":
        return PostgresChangeFeed(url, connect_timeout)
    if url.database in (None, "", ":memory:") or url.query.get("mode") == "memory":
        return NoChangeFeed()
    return SqliteChangeFeed(url.database)
