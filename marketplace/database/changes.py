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

A notice names what changed (`Change`): the table, and the resources whose own answers it touches
(`RESOURCE_COLUMNS`), so that a worker drops those answers only, not every answer it keeps. Each
change moves the generation by one, and `changes_since` tells a cache which changes a generation
move stands for; `EVERYTHING` (a notice that names nothing, or too much, or a feed that was not
followed for a while) empties every cache, as every change did before.

- PostgreSQL: statement triggers (migration 0008) send `table:ids` in the notice's payload, at
  most `MAX_NAMED_RESOURCES` ids (beyond, `table:*`: every resource of the table), and collect the
  same in a transaction-local setting, which the service's own writer reads before it commits: the
  worker that wrote drops exactly what it changed at once, without waiting for its notice.
- SQLite: `PRAGMA data_version` says only *that* another connection committed. Row triggers
  (migration 0008) write each change into the `change_log` table in the writing transaction; a
  worker whose counter moved reads the log past the last id it saw. Ids follow the commit order
  (SQLite has one writer at a time), so a gap (the log trimmed past what the worker saw) means
  changes were missed: everything changed.
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
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable
from urllib.parse import quote

from sqlalchemy import event
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.telemetry.logs import start_background

logger = logging.getLogger("marketplace.database.changes")

CHANNEL = "marketplace_changes"
# Sent by the service's own writer only for a transaction no trigger named: everything changed.
_NOTIFY = f"SELECT pg_notify('{CHANNEL}', '')"
# What the triggers of the transaction collected (`;`-separated payloads), read before its commit.
TRANSACTION_CHANGES_SETTING = "marketplace.changes"
_READ_TRANSACTION_CHANGES = f"SELECT current_setting('{TRANSACTION_CHANGES_SETTING}', true)"
# In that setting, a change that names nothing (a TRUNCATE): the payload of EVERYTHING is empty.
EVERYTHING_MARK = "!"
_TRANSACTION_CHANGES = "marketplace_transaction_changes"
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

# Tables whose rows belong to one resource, by the column naming it: a change to them touches that
# resource's own answers (its card, versions, current version). A change to any other table
# touches no resource's own answer, only what lists or names across resources and users.
RESOURCE_COLUMNS = {
    "resources": "id",
    "versions": "resource_id",
    "accesses": "resource_id",
    "reviews": "resource_id",
}
# More ids than this in one statement are not named: the notice says every resource of the table.
# 500 ids of 10 digits stay far below PostgreSQL's 8000-byte payload limit.
MAX_NAMED_RESOURCES = 500
# How many changes a feed remembers for the caches that have not looked since.
CHANGE_HISTORY = 4096
# Change-log rows read at once by a SQLite worker; more than this unread is taken as everything.
SQLITE_LOG_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Change:
    """One committed change as its notice names it.

    `table` is empty when unknown; `resource_ids` None means any resource (unknown or too many),
    an empty set no resource's own answers (a table that belongs to no resource).
    """

    table: str
    resource_ids: frozenset[int] | None

    @property
    def is_everything(self) -> bool:
        return self.table == ""

    def payload(self) -> str:
        if self.is_everything:
            return ""
        if self.resource_ids is None:
            return f"{self.table}:*"
        return f"{self.table}:{','.join(str(i) for i in sorted(self.resource_ids))}"

    @classmethod
    def from_payload(cls, payload: str) -> Change:
        """The change a notice's payload names; anything unreadable is everything."""
        table, colon, ids = payload.partition(":")
        if not colon or not table:
            return EVERYTHING
        if ids == "*":
            return cls(table, None)
        try:
            return cls(table, frozenset(int(i) for i in ids.split(",") if i))
        except ValueError:
            return EVERYTHING


EVERYTHING = Change("", None)


def changes_of_setting(collected: str | None) -> list[Change] | None:
    """The changes a transaction's triggers collected; None when no trigger named any."""
    if not collected:
        return None
    return [
        EVERYTHING if part == EVERYTHING_MARK else Change.from_payload(part) for part in collected.split(";")
    ]


@runtime_checkable
class ChangeHistory(Protocol):
    def changes_since(self, generation: int) -> Sequence[Change] | None:
        """The changes that moved the generation past `generation`; None when not known."""


class _History:
    """The last changes, each with the generation it moved to."""

    def __init__(self) -> None:
        self.generation = 0
        self._changes: deque[tuple[int, Change]] = deque(maxlen=CHANGE_HISTORY)

    def add(self, changes: Iterable[Change]) -> None:
        for change in changes:
            self.generation += 1
            self._changes.append((self.generation, change))

    def since(self, generation: int) -> Sequence[Change] | None:
        if generation == self.generation:
            return ()
        if generation > self.generation or not self._changes or self._changes[0][0] > generation + 1:
            return None
        return [change for moved_to, change in self._changes if moved_to > generation]


# An execution option for writes that no answer reads (the webhook outbox and its deliveries): a
# transaction that made only such writes announces nothing, so that delivering webhooks never
# empties a worker's cache.
UNANNOUNCED = "marketplace_unannounced"


def unannounced(engine: AsyncEngine) -> AsyncEngine:
    """`engine`, its pool shared, for transactions whose writes answer no read."""
    return engine.execution_options(**{UNANNOUNCED: True})


def announce_commits(engine: AsyncEngine) -> None:
    """Make every transaction of `engine` that wrote announce its commit.

    On PostgreSQL to every listener, by a notice sent inside the transaction; on SQLite the
    readers see the change counter move by themselves. In both, the connection is marked, so that
    the worker that wrote learns of it when the connection returns to its pool.
    """
    notify = engine.dialect.name == "postgresql"

    def note_write(connection: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if connection.get_execution_options().get(UNANNOUNCED):
            return
        if not statement.lstrip()[:9].upper().startswith(_READ_ONLY_PREFIXES):
            connection.info[_WROTE] = True

    def announce_before_commit(connection: Any) -> None:
        # Still inside the transaction: the notice is delivered if, and when, it commits.
        if connection.info.pop(_WROTE, False):
            named: list[Change] | None = None
            if notify:
                collected = connection.exec_driver_sql(_READ_TRANSACTION_CHANGES).scalar()
                named = changes_of_setting(collected)
                # The triggers sent their notices; a write no trigger saw announces everything.
                if named is None:
                    connection.exec_driver_sql(_NOTIFY)
            connection.info[_COMMITTED_WRITE] = True
            connection.info[_TRANSACTION_CHANGES] = named

    def forget_writes(connection: Any) -> None:
        connection.info.pop(_WROTE, None)
        connection.info.pop(_TRANSACTION_CHANGES, None)

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
            feed.local_change(record.info.pop(_TRANSACTION_CHANGES, None))

    event.listen(engine.sync_engine.pool, "checkin", checked_in)


class ChangeFeed(Protocol):
    def generation(self) -> int | None:
        """The data's generation as this worker knows it; None while changes cannot be followed."""

    def local_change(self, changes: Sequence[Change] | None = None) -> None:
        """This worker committed `changes` (None: unknown), its notice to the others on its way."""

    async def proven(self) -> bool | None:
        """Whether other processes' changes are known to reach this worker (None: no feed to prove)."""

    async def close(self) -> None: ...


class NoChangeFeed:
    """For databases no other connection can watch (in-memory SQLite): never a generation."""

    def generation(self) -> int | None:
        return None

    def local_change(self, changes: Sequence[Change] | None = None) -> None:
        return None

    async def proven(self) -> bool | None:
        return None

    async def close(self) -> None:
        return None


class SqliteChangeFeed:
    """`PRAGMA data_version` of a connection of this worker's own, read in the event loop's thread.

    The counter moves when any other connection (of any process) commits. Read at most every
    `SQLITE_CHECK_SECONDS` (each read costs several µs, a tenth of a cached answer); this worker's
    own commits are looked for at once. When it moved, the change log (`change_log`, written by the
    triggers of migration 0008) names what changed; a database without it changes everything.
    """

    def __init__(self, path: str, clock: Callable[[], float] = time.monotonic) -> None:
        # Read-write without creating: a missing file means no generation, not an empty database.
        self._uri = f"file:{quote(path)}?mode=rw"
        self._connection: sqlite3.Connection | None = None
        self._clock = clock
        self._data_version: int | None = None
        self._next_check = -math.inf
        self._history = _History()
        # The last change-log id seen; None before the first look (or without a log).
        self._last_logged: int | None = None

    def generation(self) -> int | None:
        now = self._clock()
        if now >= self._next_check:
            self._next_check = now + SQLITE_CHECK_SECONDS
            data_version = self._read_data_version()
            if data_version is None:
                self._data_version = None
                self._last_logged = None
                return None
            if self._data_version is None:
                # Following (again): what was committed meanwhile is unknown.
                self._history.add([EVERYTHING])
                self._last_logged = self._read_last_logged()
            elif data_version != self._data_version:
                self._history.add(self._logged_changes())
            self._data_version = data_version
        if self._data_version is None:
            return None
        return self._history.generation

    def changes_since(self, generation: int) -> Sequence[Change] | None:
        return self._history.since(generation)

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

    def _read_last_logged(self) -> int | None:
        assert self._connection is not None
        try:
            row = self._connection.execute("SELECT max(id) FROM change_log").fetchone()
        except sqlite3.Error:
            return None
        return int(row[0] or 0)

    def _logged_changes(self) -> list[Change]:
        """What the log holds past the last id seen (a commit that logged nothing changed nothing)."""
        assert self._connection is not None
        if self._last_logged is None:
            self._last_logged = self._read_last_logged()
            return [EVERYTHING]
        try:
            rows = self._connection.execute(
                "SELECT id, table_name, resource_id FROM change_log WHERE id > ? ORDER BY id LIMIT ?",
                (self._last_logged, SQLITE_LOG_BATCH + 1),
            ).fetchall()
        except sqlite3.Error:
            self._last_logged = None
            return [EVERYTHING]
        if not rows:
            return []
        if rows[0][0] != self._last_logged + 1 or len(rows) > SQLITE_LOG_BATCH:
            # Trimmed past what this worker saw, or too much at once: read afresh.
            self._last_logged = self._read_last_logged()
            return [EVERYTHING]
        self._last_logged = int(rows[-1][0])
        named: dict[str, set[int]] = {}
        for _id, table, resource_id in rows:
            ids = named.setdefault(table, set())
            if resource_id is not None:
                ids.add(int(resource_id))
        return [Change(table, frozenset(ids)) for table, ids in named.items()]

    def local_change(self, changes: Sequence[Change] | None = None) -> None:
        # The log holds what this worker wrote: look at once rather than within the check interval.
        self._next_check = -math.inf

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
        self._history = _History()
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
        return self._history.generation

    def changes_since(self, generation: int) -> Sequence[Change] | None:
        return self._history.since(generation)

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

    def _changed(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        self._history.add([Change.from_payload(payload)])

    def _probe_arrived(self, *_args: Any) -> None:
        if self._probe_came_back is not None:
            self._probe_came_back.set()

    def local_change(self, changes: Sequence[Change] | None = None) -> None:
        self._history.add(changes if changes is not None else [EVERYTHING])

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
            self._history.add([EVERYTHING])
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
