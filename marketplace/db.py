"""Database URLs, the async engine and the session factory."""

from __future__ import annotations

from collections.abc import Iterable
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

from marketplace.config import Settings

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


def _parse(raw: str) -> URL:
    try:
        return make_url(raw)
    except Exception as error:  # SQLAlchemy raises ArgumentError, and ValueError on bad ports
        raise DatabaseUrlError(f"invalid database URL {raw!r}: {error}") from None


def create_engine(settings: Settings) -> AsyncEngine:
    url = async_url(settings.database_url)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        folder = Path(url.database).expanduser().resolve().parent
        if not folder.is_dir():
            raise DatabaseUrlError(
                f"cannot open the SQLite database {url.database!r}: folder {folder} does not exist"
            )
    options: dict[str, Any] = {}
    if url.get_backend_name() == "sqlite":
        # Writers wait for each other instead of failing at once with "database is locked".
        options["connect_args"] = {"timeout": 30}
    else:
        options.update(
            pool_size=settings.db_pool_size,
            max_overflow=settings.db_max_overflow,
            # No ping per checkout (a round trip per request): a connection found dead fails the
            # request in flight and invalidates the whole pool, so the next requests reconnect.
            pool_pre_ping=False,
            pool_recycle=1800,
        )
    engine = create_async_engine(url, **options)
    if url.get_backend_name() == "sqlite":
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


def _unicode_lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # SQLite's own lower() folds ASCII only; lookups that ignore case (search, user names, gift
    # codes) must fold every letter, as on PostgreSQL. Deterministic, so expression indexes on
    # lower() stay valid: every connection of the service, migrations included, uses this one.
    dbapi_connection.create_function("lower", 1, _unicode_lower, deterministic=True)
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


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
