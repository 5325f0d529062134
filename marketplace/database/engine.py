"""Database URLs, the async engine and the session factory."""

from __future__ import annotations

import math
import re
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.util import await_only

from marketplace.config import Settings
from marketplace.database.changes import announce_commits

_ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
}


class DatabaseUrlError(ValueError):
    """The configured database URL names no database the service can run on."""


def async_url(raw: str) -> URL:
    """The URL with the async driver the service uses; plain `sqlite:///` and `postgresql://` are accepted."""
    url = _parse(raw)
    backend = url.get_backend_name()
    if backend not in _ASYNC_DRIVERS:
        raise DatabaseUrlError(f"unsupported database {backend!r}: use sqlite or postgresql")
    if "+" in url.drivername and url.get_driver_name() in ("aiosqlite", "asyncpg"):
        return url
    return url.set(drivername=_ASYNC_DRIVERS[backend])


# The password part of `scheme://user:password@host`, for URLs too broken to parse.
_URL_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def masked_url(raw: str) -> str:
    """The URL with its password replaced by `***`, fit for messages and logs."""
    return _URL_PASSWORD.sub(r"\1***@", raw)


def sqlite_file(raw: str) -> Path | None:
    """The file of a SQLite database URL; None for another database or an in-memory one."""
    url = async_url(raw)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database).expanduser()


def _parse(raw: str) -> URL:
    try:
        return make_url(raw)
    except Exception as error:  # SQLAlchemy raises ArgumentError, and ValueError on bad ports
        raise DatabaseUrlError(
            f"invalid database URL {masked_url(raw)!r}: {masked_url(str(error))}"
        ) from None


# Writers of the command line (load, import) wait this long for each other's locks on SQLite.
COMMAND_LOCK_WAIT_SECONDS = 30.0


def create_engine(settings: Settings, *, statement_timeout: float | None = None) -> AsyncEngine:
    """The engine of the configured database.

    `statement_timeout` bounds each statement of the engine, lock waits included (the serving
    process passes its setting; the commands run unbounded). Connecting and waiting for a pooled
    connection are bounded by their settings in every case.
    """
    url = async_url(settings.database_url)
    database_file = sqlite_file(settings.database_url)
    if database_file is not None:
        folder = database_file.resolve().parent
        if not folder.is_dir():
            raise DatabaseUrlError(
                f"cannot open the SQLite database {url.database!r}: folder {folder} does not exist"
            )
    options: dict[str, Any] = {}
    if url.get_backend_name() == "sqlite":
        lock_wait = statement_timeout if statement_timeout is not None else COMMAND_LOCK_WAIT_SECONDS
        # Writers wait for each other (up to the bound) instead of failing at once with "database is locked".
        options["connect_args"] = {"timeout": lock_wait}
        if url.database not in (None, "", ":memory:"):
            options.update(
                pool_size=settings.db_pool_size,
                max_overflow=settings.db_max_overflow,
                pool_timeout=settings.db_pool_timeout_seconds,
            )
    else:
        pooled = settings.database_pooler == "transaction"
        connect_args: dict[str, Any] = {"timeout": settings.db_connect_timeout_seconds}
        if pooled:
            connect_args.update(TRANSACTION_POOLER_CONNECT_ARGS)
        if statement_timeout is not None:
            # The server cancels a statement (or a lock wait) past the bound; the client gives up a
            # little later should the server itself not answer.
            if not pooled:
                connect_args["server_settings"] = {
                    "statement_timeout": str(math.ceil(statement_timeout * 1000))
                }
            connect_args["command_timeout"] = statement_timeout + 1.0
        options.update(
            connect_args=connect_args,
            # Every connection is kept once opened, none closed on its return: closing an asyncpg
            # connection needs the event loop, which a reader giving one back outside SQLAlchemy's
            # greenlet does not have, and a connection per burst would be churn. The public reads
            # take at most `db_pool_size` of them (readers.py); writes may take the rest.
            pool_size=settings.db_pool_size + settings.db_max_overflow,
            max_overflow=0,
            pool_timeout=settings.db_pool_timeout_seconds,
            # No ping per checkout (a round trip per request): a connection found dead fails the
            # request in flight and invalidates the whole pool, so the next requests reconnect.
            pool_pre_ping=False,
            pool_recycle=1800,
        )
    engine = create_async_engine(url, **options)
    announce_commits(engine)
    if url.get_backend_name() == "sqlite":
        _prepare_sqlite(engine, statement_timeout)
    elif settings.database_pooler == "transaction" and statement_timeout is not None:
        _bound_each_transaction(engine, statement_timeout)
    return engine


def unnamed_statement() -> str:
    """The name of each statement SQLAlchemy prepares behind a pooler: none (the unnamed statement)."""
    return ""


# Behind a transaction-mode pooler each transaction, and each statement outside one, may run on
# another server connection that other clients share, so the driver keeps nothing on a server
# connection that it would look for again:
# - no statement cache (asyncpg's and SQLAlchemy's): a cached statement lives on one server;
# - no statement names: asyncpg numbers its statements from 1 on every connection, so two clients'
#   `__asyncpg_stmt_1__` meet on one server ("already exists"); a name of its own per statement
#   (a uuid) does not meet another, but outside a transaction it is parsed in one exchange and
#   bound in the next, which may reach another server ("does not exist"), and it stays on its
#   server until that closes. Unnamed, asyncpg parses a statement again with its bind, in one
#   exchange: nothing outlives it, on any server;
# - no startup parameter the pooler refuses (`server_settings`): see `_bound_each_transaction`.
# This holds whether or not the pooler tracks prepared statements itself (PgBouncer 1.21+
# `max_prepared_statements`), which passes unnamed statements through as they are.
TRANSACTION_POOLER_CONNECT_ARGS: dict[str, Any] = {
    "statement_cache_size": 0,
    "prepared_statement_cache_size": 0,
    "prepared_statement_name_func": unnamed_statement,
}


def _bound_each_transaction(engine: AsyncEngine, statement_timeout: float) -> None:
    """`SET LOCAL statement_timeout` first in each transaction: through a transaction-mode pooler
    a session's setting would leak to the pooler's other clients, and startup parameters are refused.

    Statements outside a transaction (the public reads, autocommit sessions) are cancelled by the
    client instead: asyncpg sends the server a cancel request at its timeout, which the pooler
    forwards to the server connection running the statement.
    """
    set_bound = f"SET LOCAL statement_timeout = {math.ceil(statement_timeout * 1000)}"

    def bound_transaction(connection: Any) -> None:
        dbapi_connection = connection.connection.dbapi_connection
        if dbapi_connection is None or dbapi_connection.autocommit:
            return
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(set_bound)
        finally:
            cursor.close()

    event.listen(engine.sync_engine, "begin", bound_transaction)


@asynccontextmanager
async def engine_for(settings: Settings) -> AsyncIterator[AsyncEngine]:
    """An engine of the configured database for one command, disposed of afterwards."""
    engine = create_engine(settings)
    try:
        yield engine
    finally:
        await engine.dispose()


def unicode_lower(value: Any) -> Any:
    """`lower()` of every SQLite connection of the service: folds every letter, not ASCII only."""
    return value.lower() if isinstance(value, str) else value


# SQLite calls the statement deadline check every this many virtual-machine steps.
DEADLINE_CHECK_STEPS = 1000


def _prepare_sqlite(engine: AsyncEngine, statement_timeout: float | None) -> None:
    lock_wait_ms = math.ceil((statement_timeout or COMMAND_LOCK_WAIT_SECONDS) * 1000)

    def on_connect(dbapi_connection: Any, record: Any) -> None:
        # SQLite's own lower() folds ASCII only; lookups that ignore case (search, user names, gift
        # codes) must fold every letter, as on PostgreSQL. Deterministic, so expression indexes on
        # lower() stay valid: every connection of the service, migrations included, uses this one.
        dbapi_connection.create_function("lower", 1, unicode_lower, deterministic=True)
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={lock_wait_ms}")
        cursor.close()
        if statement_timeout is not None:
            deadline = [math.inf]
            record.info["statement_deadline"] = deadline

            def past_deadline() -> int:
                # A non-zero answer makes SQLite abort the statement ("interrupted").
                return 1 if time.monotonic() > deadline[0] else 0

            await_only(
                dbapi_connection.driver_connection.set_progress_handler(past_deadline, DEADLINE_CHECK_STEPS)
            )

    event.listen(engine.sync_engine, "connect", on_connect)
    if statement_timeout is None:
        return

    def start_statement(connection: Any, *_args: Any) -> None:
        deadline = connection.connection.info.get("statement_deadline")
        if deadline is not None:
            deadline[0] = time.monotonic() + statement_timeout

    def end_statement(connection: Any, *_args: Any) -> None:
        deadline = connection.connection.info.get("statement_deadline")
        if deadline is not None:
            deadline[0] = math.inf

    event.listen(engine.sync_engine, "before_cursor_execute", start_statement)
    event.listen(engine.sync_engine, "after_cursor_execute", end_statement)


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


def dialect_insert(dialect_name: str) -> Any:
    """The `insert` construct with ON CONFLICT support of the named dialect (sqlite or postgresql)."""
    if dialect_name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert


async def advance_id_sequences(connection: AsyncConnection, tables: Iterable[str]) -> None:
    """Move PostgreSQL id sequences past the ids written explicitly (SQLite uses max(id) + 1 by itself)."""
    if connection.dialect.name != "postgresql":
        return
    for table in tables:
        await connection.execute(
            text(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"COALESCE((SELECT MAX(id) FROM {table}), 0) + 1, false)"
            )
        )
