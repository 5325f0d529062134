"""The public reads' statements, run without the ORM on the cheapest connection of each database.

A `Read` is a Core select built once from the models. Each worker's `Reader` compiles it once for
its database (SQL text, the order of its parameters, the conversions of its columns) and runs it
with plain values, giving plain rows: no session, no entity, no per-statement compilation.

- PostgreSQL: a connection of the engine's pool (so its bounds and metrics hold), the statement
  sent through the driver itself, which prepares it once per connection. Reads run in autocommit:
  no BEGIN/ROLLBACK, and nothing to reset when the connection goes back.
- SQLite (a file): point reads run on a read-only connection of the worker's own, in the event
  loop's thread: sub-millisecond lookups cost less than handing them to a thread. Scans (`LIKE`
  filters, counts, deep pages) run in a thread, at most `SCAN_CONNECTIONS` at once, each on one of
  as many scan connections with a small page cache (`SCAN_CACHE_KIB`). WAL mode, so a read never
  waits for a writer.
- SQLite in memory: no second connection can see the data, so reads go through the engine.

Every connection bounds each statement by the configured statement timeout, as the engine does.

`Reads` bundles a worker's reader with its `GenerationCounts`: exact counts kept until the data
changes (`changes.py`), so that listing pages costs no count per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sqlite3
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

from sqlalchemy import QueuePool, Select, event
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.util import greenlet_spawn

from marketplace.database import freshness
from marketplace.database.changes import ChangeFeed
from marketplace.database.engine import DEADLINE_CHECK_STEPS, unicode_lower
from marketplace.database.freshness import Stamp

Row = Sequence[Any]
AnySelect = Select[*tuple[Any, ...]]
ColumnProcessor = Callable[[Any], Any]

# A point read on the event loop's thread waits at most this long for a lock (in WAL mode only a
# recovery or a truncating checkpoint takes one): a longer wait would stall every request.
LOOP_LOCK_WAIT_MS = 100
# Counts of `q` searches kept per generation (the listing's count is one more).
MAX_KEPT_COUNTS = 512
# SQLite scans running at once in a worker, each on a scan connection of its own while it runs, and
# the page cache of each such connection. A scan walks a table larger than any cache, so the cache holds little it
# can reuse, and more scans than cores only queue for the interpreter (`lower()` is Python): the
# default executor's 6 threads with SQLite's 2 MB caches cost a worker 14-19 MiB of a 200,000-resource
# catalogue's scans, 2 connections of 512 KiB about 5 (bench/HISTORY.md, "Where a worker's memory goes").
SCAN_CONNECTIONS = 2
SCAN_CACHE_KIB = 512


# Per engine, who is told of each statement its reader runs (the SQL, before it runs): tests and
# diagnostics. Empty in service, where checking it costs one truth test per read.
_OBSERVERS: weakref.WeakKeyDictionary[Any, list[Callable[[str], None]]] = weakref.WeakKeyDictionary()


def _observers_of(engine: AsyncEngine) -> list[Callable[[str], None]]:
    return _OBSERVERS.setdefault(engine.sync_engine, [])


@contextlib.contextmanager
def observed_reads(engine: AsyncEngine, observer: Callable[[str], None]) -> Iterator[None]:
    """Tell `observer` the SQL of each read run on `engine`'s reader inside the block."""
    observers = _observers_of(engine)
    observers.append(observer)
    try:
        yield
    finally:
        observers.remove(observer)


class Read:
    """A select built once; `parameters` names its bind parameters in the order callers pass them.

    `variants` gives another select for a named database (`sqlite`, `postgresql`) where that one
    runs a different statement better; a parameter the variant in use does not have is ignored.
    """

    __slots__ = ("parameters", "statement", "variants")

    def __init__(
        self, statement: AnySelect, *parameters: str, variants: Mapping[str, AnySelect] | None = None
    ) -> None:
        self.statement = statement
        self.parameters = parameters
        self.variants = dict(variants or {})

    def statement_for(self, dialect_name: str) -> AnySelect:
        return self.variants.get(dialect_name, self.statement)


@dataclass(frozen=True, slots=True)
class PreparedRead:
    """A `Read` compiled for one database: its SQL and how to bind values and convert columns."""

    sql: str
    # Per placeholder, an index into the caller's values followed by the statement's constants.
    order: tuple[int, ...]
    constants: tuple[Any, ...]
    # Columns the driver does not return as the models' Python types (SQLite's dates and decimals).
    processors: tuple[tuple[int, ColumnProcessor], ...]

    @classmethod
    def compile(cls, read: Read, dialect: Dialect, *, convert_columns: bool) -> PreparedRead:
        statement = read.statement_for(dialect.name)
        # Every parameter has a placeholder value, so that `IN` lists can be rendered once here.
        compiled = statement.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
        names = list(compiled.positiontup or ())
        constant_names = [name for name in dict.fromkeys(names) if name not in read.parameters]
        unknown = set(read.parameters) - set(names)
        if unknown and not read.variants:
            raise ValueError(f"parameters {sorted(unknown)} are not in the statement")
        index = {name: i for i, name in enumerate((*read.parameters, *constant_names))}
        constants = tuple(compiled.params[name] for name in constant_names)
        processors: list[tuple[int, ColumnProcessor]] = []
        if convert_columns:
            for position, column in enumerate(statement.selected_columns):
                processor = column.type.dialect_impl(dialect).result_processor(dialect, None)
                if processor is not None:
                    processors.append((position, processor))
        return cls(str(compiled), tuple(index[name] for name in names), constants, tuple(processors))

    def arguments(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        every = values + self.constants
        return tuple([every[i] for i in self.order])

    def rows(self, fetched: Sequence[Row]) -> Sequence[Row]:
        if not self.processors:
            return fetched
        converted: list[Row] = []
        for row in fetched:
            values = list(row)
            for position, processor in self.processors:
                values[position] = processor(values[position])
            converted.append(values)
        return converted


class Reader(Protocol):
    async def point(self, read: Read, *values: Any) -> Sequence[Row]:
        """Rows of a read that looks up a few rows by an index."""

    async def scan(self, read: Read, *values: Any) -> Sequence[Row]:
        """Rows of a read that may walk many rows (pattern filters, counts, deep pages)."""

    def close(self) -> None: ...


class _Prepared:
    """Each read compiled once, on its first use, for the reader's database."""

    def __init__(self, engine: AsyncEngine, *, convert_columns: bool) -> None:
        self._dialect = engine.dialect
        self._convert_columns = convert_columns
        self._compiled: dict[Read, PreparedRead] = {}
        self._observers = _observers_of(engine)

    def __call__(self, read: Read) -> PreparedRead:
        """The read compiled, when it is about to run."""
        found = self._compiled.get(read)
        if found is None:
            found = PreparedRead.compile(read, self._dialect, convert_columns=self._convert_columns)
            self._compiled[read] = found
        if self._observers:
            for observer in self._observers:
                observer(found.sql)
        return found


async def give_back_after_failure(pooled: PoolProxiedConnection, error: BaseException) -> None:
    """Return a pooled asyncpg connection whose statement failed: dropped if it is closed (or was
    abandoned mid-statement), else put back, in the greenlet, since its reset may need the server."""
    connection = pooled.driver_connection
    assert connection is not None
    if isinstance(error, asyncio.CancelledError):
        # A statement abandoned mid-way leaves the connection in an unknown state.
        connection.terminate()
    if connection.is_closed():
        await greenlet_spawn(pooled.invalidate, error)
    else:
        await greenlet_spawn(pooled.close)


class PostgresReader:
    """Reads through the asyncpg connection of a pooled connection, which prepares each statement once."""

    def __init__(
        self, engine: AsyncEngine, *, cancel_after: float | None = None, read_slots: int | None = None
    ) -> None:
        self._engine = engine
        # Behind a transaction-mode pooler the server has no statement timeout for a read (database/engine.py):
        # the driver cancels it on the server at this bound.
        self._cancel_after = cancel_after
        # asyncpg returns every column as the models' Python types already.
        self._prepared = _Prepared(engine, convert_columns=False)
        # Reads hold at most `read_slots` of the pool's connections at once (by default all):
        # the rest stay free for writes. Waiting for a slot is bounded like waiting for the pool.
        pool = engine.sync_engine.pool
        slots = read_slots if read_slots is not None else pool.size() if isinstance(pool, QueuePool) else None
        self._slots = asyncio.Semaphore(slots) if slots is not None else None
        self._slot_wait = pool.timeout() if isinstance(pool, QueuePool) else None

    async def point(self, read: Read, *values: Any) -> Sequence[Row]:
        if self._slots is None:
            return await self._read(read, values)
        if self._slots.locked():
            try:
                async with asyncio.timeout(self._slot_wait):
                    await self._slots.acquire()
            except TimeoutError:
                raise PoolTimeout("no database connection for a read within the pool timeout") from None
        else:
            await self._slots.acquire()  # a free slot: taken at once, no timer to arm per read
        try:
            return await self._read(read, values)
        finally:
            self._slots.release()

    async def _read(self, read: Read, values: tuple[Any, ...]) -> Sequence[Row]:
        prepared = self._prepared(read)
        pooled = await self._checkout()
        connection = pooled.driver_connection
        assert connection is not None
        try:
            rows: Sequence[Row] = await connection.fetch(
                prepared.sql, *prepared.arguments(values), timeout=self._cancel_after
            )
        except BaseException as error:
            await give_back_after_failure(pooled, error)
            raise
        pooled.close()
        return rows

    scan = point

    async def _checkout(self) -> PoolProxiedConnection:
        # A connection the server closed (a restart) is known closed without a round trip: it is
        # replaced here rather than failing a request.
        pool = self._engine.sync_engine.pool
        for _ in range(pool.size() + 1 if isinstance(pool, QueuePool) else 2):
            pooled = await self._engine.raw_connection()
            connection = pooled.driver_connection
            if connection is not None and not connection.is_closed():
                return pooled
            await greenlet_spawn(pooled.invalidate)
        return await self._engine.raw_connection()

    def close(self) -> None:
        return None


class SqliteReadConnection:
    """A read-only connection to a SQLite file with the engine's `lower()` and statement bound."""

    def __init__(
        self, path: str, *, statement_timeout: float | None, lock_wait_ms: int, cache_kib: int | None = None
    ) -> None:
        # Read-write without creating, then read-only by pragma: `mode=ro` cannot open a WAL database
        # whose shared-memory file another process has not created yet.
        self._connection = sqlite3.connect(
            f"file:{quote(path)}?mode=rw", uri=True, isolation_level=None, check_same_thread=False
        )
        self._connection.create_function("lower", 1, unicode_lower, deterministic=True)
        self._connection.execute("PRAGMA query_only=ON")
        self._connection.execute(f"PRAGMA busy_timeout={lock_wait_ms}")
        if cache_kib is not None:
            self._connection.execute(f"PRAGMA cache_size=-{cache_kib}")
        self._timeout = statement_timeout
        self._deadline = math.inf
        if statement_timeout is not None:
            self._connection.set_progress_handler(self._past_deadline, DEADLINE_CHECK_STEPS)

    def _past_deadline(self) -> int:
        # A non-zero answer makes SQLite abort the statement ("interrupted").
        return 1 if time.monotonic() > self._deadline else 0

    def fetch(self, prepared: PreparedRead, values: tuple[Any, ...]) -> Sequence[Row]:
        if self._timeout is not None:
            self._deadline = time.monotonic() + self._timeout
        try:
            # fetchall() steps the statement to its end, which ends its read transaction.
            rows = self._connection.execute(prepared.sql, prepared.arguments(values)).fetchall()
        finally:
            self._deadline = math.inf
        return prepared.rows(rows)

    @property
    def connection(self) -> sqlite3.Connection:
        return self._connection

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._connection.close()


class SqliteReader:
    """Point reads in the event loop's thread, scans in a worker thread; connections opened lazily."""

    def __init__(self, engine: AsyncEngine, path: str, statement_timeout: float | None) -> None:
        self._path = path
        self._timeout = statement_timeout
        self._prepared = _Prepared(engine, convert_columns=True)
        self._loop_connection: SqliteReadConnection | None = None
        # Every scan connection opened, and those no scan is using; the semaphore bounds both.
        self._scan_connections: list[SqliteReadConnection] = []
        self._idle_scan_connections: list[SqliteReadConnection] = []
        self._lock = threading.Lock()
        self._scans = asyncio.Semaphore(SCAN_CONNECTIONS)

    def loop_connection(self) -> SqliteReadConnection:
        if self._loop_connection is None:
            self._loop_connection = SqliteReadConnection(
                self._path, statement_timeout=self._timeout, lock_wait_ms=LOOP_LOCK_WAIT_MS
            )
        return self._loop_connection

    async def point(self, read: Read, *values: Any) -> Sequence[Row]:
        return self.loop_connection().fetch(self._prepared(read), values)

    async def scan(self, read: Read, *values: Any) -> Sequence[Row]:
        async with self._scans:
            return await asyncio.to_thread(self._scan_in_thread, self._prepared(read), values)

    def _scan_in_thread(self, prepared: PreparedRead, values: tuple[Any, ...]) -> Sequence[Row]:
        with self._lock:
            connection = self._idle_scan_connections.pop() if self._idle_scan_connections else None
        if connection is None:
            lock_wait_ms = math.ceil((self._timeout or 0) * 1000)
            connection = SqliteReadConnection(
                self._path,
                statement_timeout=self._timeout,
                lock_wait_ms=lock_wait_ms,
                cache_kib=SCAN_CACHE_KIB,
            )
            with self._lock:
                self._scan_connections.append(connection)
        try:
            return connection.fetch(prepared, values)
        finally:
            with self._lock:
                if connection in self._scan_connections:
                    self._idle_scan_connections.append(connection)

    @property
    def scan_connections(self) -> tuple[SqliteReadConnection, ...]:
        """The scan connections opened so far."""
        with self._lock:
            return tuple(self._scan_connections)

    def close(self) -> None:
        if self._loop_connection is not None:
            self._loop_connection.close()
            self._loop_connection = None
        with self._lock:
            opened, self._scan_connections = self._scan_connections, []
            self._idle_scan_connections = []
        for connection in opened:
            connection.close()


class EngineReader:
    """Reads through the engine's own connections (an in-memory SQLite database has no other)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._prepared = _Prepared(engine, convert_columns=True)

    async def point(self, read: Read, *values: Any) -> Sequence[Row]:
        prepared = self._prepared(read)
        async with self._engine.connect() as connection:
            result = await connection.exec_driver_sql(prepared.sql, prepared.arguments(values))
            return prepared.rows([tuple(row) for row in result])

    scan = point

    def close(self) -> None:
        return None


def build_reader(
    engine: AsyncEngine,
    statement_timeout: float | None,
    *,
    pooled: bool = False,
    read_slots: int | None = None,
) -> Reader:
    """The reader of `engine`'s database; `pooled`: PostgreSQL through a transaction-mode pooler."""
    url = engine.url
    reader: Reader
    if url.get_backend_name() == "postgresql":
        reader = PostgresReader(
            engine, cancel_after=statement_timeout if pooled else None, read_slots=read_slots
        )
    elif url.database in (None, "", ":memory:") or url.query.get("mode") == "memory":
        reader = EngineReader(engine)
    else:
        reader = SqliteReader(engine, url.database, statement_timeout)

    def disposed(*_args: Any) -> None:
        reader.close()

    # The worker's own connections close with the engine's pool (the reader reopens them if used again).
    event.listen(engine.sync_engine, "engine_disposed", disposed)
    return reader


class GenerationCounts:
    """Exact counts read under one generation of the data, kept until the generation moves.

    A count is kept under the generation seen *before* it was read, and only if no change was
    announced meanwhile, so a count never outlives a write it may have missed; nor is it used once
    its as-of time is older than the maximum age (`freshness.py`). An answer built with a kept
    count is as old as the count. No generation (the changes cannot be followed): nothing is kept.
    """

    def __init__(
        self,
        changes: ChangeFeed,
        max_entries: int = MAX_KEPT_COUNTS,
        *,
        max_age_seconds: float = math.inf,
        clock: Callable[[], float] = freshness.clock,
    ) -> None:
        self._changes = changes
        self._max_entries = max_entries
        self._max_age_seconds = max_age_seconds
        self.clock = clock
        self._generation: int | None = None
        # key -> (count, as-of time)
        self._counts: OrderedDict[Hashable, tuple[int, float]] = OrderedDict()

    def generation(self) -> int | None:
        current = self._changes.generation()
        if current != self._generation:
            self._counts.clear()
            self._generation = current
        return current

    def get(self, key: Hashable) -> tuple[int | None, Stamp | None]:
        """The count kept for `key` (None when none is), and the stamp to keep a fresh one under."""
        generation = self.generation()
        if generation is None:
            return None, None
        now = self.clock()
        found = self._counts.get(key)
        if found is None:
            return None, Stamp(generation, now)
        count, as_of = found
        if now - as_of > self._max_age_seconds:
            del self._counts[key]
            return None, Stamp(generation, now)
        self._counts.move_to_end(key)
        freshness.read_proven_as_of(as_of)
        return count, None

    def keep(self, key: Hashable, stamp: Stamp, count: int) -> None:
        if self.generation() != stamp.generation:
            return
        self._counts[key] = (count, stamp.kept_as_of())
        self._counts.move_to_end(key)
        while len(self._counts) > self._max_entries:
            self._counts.popitem(last=False)

    def __len__(self) -> int:
        return len(self._counts)


class SearchTotals:
    """Totals of text searches, each kept with the search generation it was counted under.

    The search generation is a number in the database (`search_generation`, migration 0007) that
    triggers move on every write that can change which resources a search finds, and on no other
    (a download, a purchase, a review leave it). A total is counted in the same statement that
    reads the generation, so the two come from one snapshot; it answers while the generation the
    caller has just read is that one. Writes elsewhere in the database do not drop it, as they do
    the listing's count (`GenerationCounts`).
    """

    def __init__(self, max_entries: int = MAX_KEPT_COUNTS) -> None:
        self._max_entries = max_entries
        # key -> (search generation, total, what else was counted with it)
        self._totals: OrderedDict[Hashable, tuple[int, int, int]] = OrderedDict()

    def get(self, key: Hashable, generation: int) -> tuple[int, int] | None:
        """The total kept for `key` and what was counted with it, if counted under `generation`."""
        found = self._totals.get(key)
        if found is None or found[0] != generation:
            return None
        self._totals.move_to_end(key)
        return found[1], found[2]

    def keep(self, key: Hashable, generation: int, total: int, beside: int) -> None:
        self._totals[key] = (generation, total, beside)
        self._totals.move_to_end(key)
        while len(self._totals) > self._max_entries:
            self._totals.popitem(last=False)

    def __len__(self) -> int:
        return len(self._totals)


@dataclass(frozen=True, slots=True)
class Reads:
    """A worker's reader, the counts it keeps, and its database (`sqlite`, `postgresql`), by which
    a read may choose the index it asks before running (text search)."""

    reader: Reader
    counts: GenerationCounts
    dialect_name: str
    search_totals: SearchTotals = field(default_factory=SearchTotals)
