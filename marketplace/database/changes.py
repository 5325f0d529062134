"""Committed changes to the database, announced by every writer and followed by every worker.

The workers' caches of encoded answers (`http/worker_cache.py`) are valid for one *generation* of
the data. A writer on any process or host announces its commits; each worker follows them and
moves to a new generation, which drops what it cached. This is the fast path (milliseconds); the
maximum age of kept answers (`freshness.py`) bounds what a change that comes without a notice, or
a notice that is lost, can cost.

- PostgreSQL: every transaction that wrote sends `NOTIFY marketplace_changes` inside itself (so
  the notice goes out exactly when, and only if, the commit happens); each worker `LISTEN`s on a
  connection of its own and proves, every few seconds, that its own probe notice comes back.
- SQLite: `PRAGMA data_version` on a connection of the worker's own changes whenever another
  connection (of any process) commits; each worker reads it every 10 ms at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import secrets
import sqlite3
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import quote

from sqlalchemy import event
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.telemetry.logs import start_background

logger = logging.getLogger("marketplace.database.changes")

CHANNEL = "marketplace_changes"
_NOTIFY = f"SELECT pg_notify('{CHANNEL}', '')"
# A worker's probe notice, on a channel of its own.
PROBE_STATEMENT = "SELECT pg_notify($1, '')"
# Statements that change nothing; anything else counts as a write (erring towards a notice).
_READ_ONLY_PREFIXES = ("SELECT", "SHOW", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "SET ")
_WROTE = "marketplace_wrote"
_COMMITTED_WRITE = "marketplace_committed_write"

# How often a worker proves that notices reach it, and how long its probe notice may take to come
# back, so that a connection that died without a word (a half-open socket) is found within seconds.
HEARTBEAT_SECONDS = 5.0
PROBE_TIMEOUT_SECONDS = 2.0
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

    async def proven(self) -> bool | None:
        """Whether other processes' changes are known to reach this worker (None: no feed to prove)."""

    async def close(self) -> None: ...


class NoChangeFeed:
    """For databases no other connection can watch (in-memory SQLite): never a generation."""

    def generation(self) -> int | None:
        return None

    def local_change(self) -> None:
        return None

    async def proven(self) -> bool | None:
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

    async def proven(self) -> bool | None:
        # Every commit of every process moves the counter: nothing can get past it unseen.
        return None

    def _drop(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(sqlite3.Error):
                self._connection.close()
            self._connection = None

    async def close(self) -> None:
        self._drop()


class PostgresChangeFeed:
    """A `LISTEN` connection of this worker's own, which must prove that notices reach it.

    Every `HEARTBEAT_SECONDS` the worker sends a probe notice on a channel of its own through the
    main engine (the path the writers' notices take, a pooler included) and waits for it on its
    listening connection. Only a probe that came back proves the feed: a connection that answers
    queries but gets no notices (one through a transaction-mode pooler, one on another server)
    does not count. While the feed is not proven, the worker keeps serving what it cached within
    the maximum age (`freshness.py`), warns once, and says so in `/up` and
    `marketplace_change_feed_up`. When the feed is proven again, a new generation starts: what
    was committed while it was not is unknown.
    """

    def __init__(self, listen_url: URL, engine: AsyncEngine, connect_timeout: float) -> None:
        self._dsn = listen_url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._engine = engine
        self._connect_timeout = connect_timeout
        self._probe_channel = f"{CHANNEL}_probe_{os.getpid()}_{secrets.token_hex(4)}"
        self._generation = 0
        self._proven = False
        self._task: asyncio.Task[None] | None = None
        # Set once the first verdict (proven or not) is known, for `/up` right after the start.
        self._verdict: asyncio.Event | None = None
        self._probe_came_back: asyncio.Event | None = None
        # Between a failure and the next proof (its warning is written once).
        self._in_outage = False
        self._closing = False
        # Set when the listening connection ends, or to end it at shutdown.
        self._lost: asyncio.Event | None = None

    def generation(self) -> int:
        self._start()
        return self._generation

    def _start(self) -> None:
        if self._closing or (self._task is not None and not self._task.done()):
            return
        self._verdict = self._verdict or asyncio.Event()
        self._task = start_background(self._follow())

    async def proven(self) -> bool | None:
        """Whether notices reach this worker, once the first probe has given its verdict."""
        self._start()
        assert self._verdict is not None
        await self._verdict.wait()
        return self._proven

    def _changed(self, *_args: Any) -> None:
        self._generation += 1

    def _probe_arrived(self, *_args: Any) -> None:
        if self._probe_came_back is not None:
            self._probe_came_back.set()

    def local_change(self) -> None:
        self._generation += 1

    async def _follow(self) -> None:
        while not self._closing:
            was_proven = self._proven
            try:
                await self._listen_until_lost()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self._not_proven(f"{type(error).__name__}: {error}")
            # A connection lost after it was proven (a restart, a pooler's recycling) is replaced
            # at once; failing attempts are repeated every second.
            if not was_proven:
                await asyncio.sleep(RECONNECT_DELAY_SECONDS)

    async def _listen_until_lost(self) -> None:
        import asyncpg  # type: ignore[import-untyped]  # the driver, loaded where PostgreSQL is used

        lost = self._lost = asyncio.Event()
        connection = await asyncpg.connect(self._dsn, timeout=self._connect_timeout)
        try:
            connection.add_termination_listener(lambda _connection: lost.set())
            await connection.add_listener(CHANNEL, self._changed)
            await connection.add_listener(self._probe_channel, self._probe_arrived)
            while not lost.is_set() and not self._closing:
                failure = await self._probe()
                if failure is not None:
                    # Listen afresh: a connection that missed its probe may miss notices too.
                    self._not_proven(failure)
                    return
                self._proven_now()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lost.wait(), HEARTBEAT_SECONDS)
            if not self._closing:
                self._not_proven("the listening connection was lost")
        finally:
            connection.terminate()

    async def _probe(self) -> str | None:
        """Send a probe notice through the main engine; None when it came back in time, else why not."""
        came_back = self._probe_came_back = asyncio.Event()
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):
                async with self._engine.connect() as connection:
                    await connection.exec_driver_sql(PROBE_STATEMENT, (self._probe_channel,))
                    await connection.commit()
                await came_back.wait()
        except TimeoutError:
            return f"a probe notice did not come back within {PROBE_TIMEOUT_SECONDS:g} s"
        except Exception as error:  # the probe could not be sent: the feed is not proven
            return f"a probe notice could not be sent: {type(error).__name__}: {error}"
        finally:
            self._probe_came_back = None
        return None

    def _proven_now(self) -> None:
        if not self._proven:
            # Whatever was committed while the feed was not proven is unknown: start afresh.
            self._generation += 1
            if self._in_outage:
                logger.info("database change notices arrive again")
            self._in_outage = False
            self._set_proven(True)

    def _not_proven(self, reason: str) -> None:
        # Once per outage, not once per retry: the retries go on every second meanwhile.
        if not self._in_outage:
            logger.warning(
                "database change notices are not arriving (%s): cached answers are served for at "
                "most their maximum age until they do",
                reason,
            )
        self._in_outage = True
        self._set_proven(False)

    def _set_proven(self, proven: bool) -> None:
        # Imported here, not with the module: the command line imports this module (through database/engine.py)
        # before `serve` decides where metric values go, which their first import fixes.
        from marketplace.telemetry.metrics import CHANGE_FEED_UP

        self._proven = proven
        CHANGE_FEED_UP.set(1 if proven else 0)
        if self._verdict is not None:
            self._verdict.set()

    async def close(self) -> None:
        self._closing = True
        if self._lost is not None:
            self._lost.set()
        if self._task is not None:
            self._task.cancel()
            # The loop also ends by itself at its next turn: a cancellation that a driver or a
            # timeout racing it swallows must not hold the shutdown.
            await asyncio.wait({self._task}, timeout=PROBE_TIMEOUT_SECONDS + HEARTBEAT_SECONDS)
            self._task = None


def change_feed_for(
    url: URL, engine: AsyncEngine, connect_timeout: float, *, listen_url: URL | None = None
) -> ChangeFeed:
    """The feed for the database at `url`; on PostgreSQL, listening at `listen_url` if given."""
    if url.get_backend_name() == "postgresql":
        return PostgresChangeFeed(listen_url or url, engine, connect_timeout)
    if url.database in (None, "", ":memory:") or url.query.get("mode") == "memory":
        return NoChangeFeed()
    return SqliteChangeFeed(url.database)
