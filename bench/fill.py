"""Writes a generated catalogue (`catalogue.py`) into a database through the service's own schema.

The schema comes from `marketplace migrate` of the checkout being measured; the rows go in by bulk:
`COPY` on PostgreSQL (foreign-key triggers off for the session, secondary indexes built after the
rows, as a restore does, the kept counts made from the copied rows), one transaction of
`executemany` on SQLite (its triggers keep the counts). Sequences move past the ids,
statistics are gathered (`ANALYZE`), and a marker records what was filled, so that the next run
finds the same catalogue and keeps it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.catalogue import GENERATOR_VERSION, TABLES, Catalogue, Row

# Written in this order: referenced rows first.
FILL_ORDER = ("categories", "users", "chat_accounts", "resources", "versions", "reviews", "accesses")
# The kept counts of each resource (migration 0006), which triggers keep as rows are written: the
# triggers are off while PostgreSQL copies, so the counts are made once from the copied rows (a
# schema without the table, an older checkout's, skips this).
RECOUNT_POSTGRESQL = """
INSERT INTO resource_counts (resource_id, purchases, rating_sum, rating_count)
SELECT resource_id, SUM(purchases), SUM(rating_sum), SUM(rating_count) FROM (
    SELECT resource_id, COUNT(*) AS purchases, 0 AS rating_sum, 0 AS rating_count
    FROM accesses WHERE source = 'purchase' AND NOT revoked GROUP BY resource_id
    UNION ALL
    SELECT resource_id, 0, SUM(rating), COUNT(*) FROM reviews GROUP BY resource_id
) AS counted
GROUP BY resource_id
"""


@dataclass(frozen=True)
class Filled:
    """What a fill left in the database (or found there, when the catalogue was kept)."""

    counts: dict[str, int]
    seconds: float
    kept: bool


def marker(catalogue: Catalogue) -> str:
    return json.dumps(
        {"generator": GENERATOR_VERSION, "seed": catalogue.seed, "resources": catalogue.size.resources},
        sort_keys=True,
    )


def migrate(database_url: str, source: Path, workdir: Path) -> None:
    """`marketplace migrate` of the checkout in `source`, on `database_url`."""
    env = service_environment(source, {"MARKETPLACE_DATABASE_URL": database_url})
    done = subprocess.run(
        [*marketplace_command(), "migrate"], env=env, cwd=workdir, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"marketplace migrate failed: {done.stderr.strip()}")


def marketplace_command() -> list[str]:
    """The `marketplace` command of this environment (its package comes from PYTHONPATH first)."""
    script = Path(sys.executable).with_name("marketplace")
    return [str(script)] if script.exists() else [sys.executable, "-m", "marketplace.cli"]


def service_environment(source: Path, settings: dict[str, str]) -> dict[str, str]:
    """The environment of a `marketplace` process of the checkout in `source`: no inherited
    `MARKETPLACE_*` setting, only the ones given."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MARKETPLACE_")}
    env["PYTHONPATH"] = str(source.resolve())
    env.update(settings)
    return env


def _sqlite_text(moment: datetime) -> str:
    # As SQLAlchemy stores a DateTime in SQLite.
    return moment.isoformat(" ", "microseconds")


def _sqlite_rows(rows: Iterator[Row]) -> Iterator[Row]:
    """Rows with the values SQLite stores: timestamps as text, amounts as floats, booleans as 0/1."""
    converters: dict[type, Callable[[Any], object]] = {datetime: _sqlite_text, Decimal: float, bool: int}
    fixes: dict[int, Callable[[Any], object]] = {}
    for row in rows:
        for position, value in enumerate(row):
            if position not in fixes and type(value) in converters:
                fixes[position] = converters[type(value)]
        if not fixes:
            yield row
            continue
        values = list(row)
        for position, convert in fixes.items():
            if values[position] is not None:
                values[position] = convert(values[position])
        yield tuple(values)


def _unicode_lower(value: Any) -> Any:
    # The service's own lower() (marketplace/database/engine.py): expression indexes on lower(name) must agree.
    return value.lower() if isinstance(value, str) else value


def _check_columns(table: str, stored: dict[str, bool]) -> None:
    """Every column the table requires is one the catalogue fills. `stored`: column -> required
    (NOT NULL without a default)."""
    filled = set(TABLES[table].columns)
    unknown = filled - set(stored)
    if unknown:
        raise SystemExit(f"{table} has no column {', '.join(sorted(unknown))}: update bench/catalogue.py")
    missing = [column for column, required in stored.items() if required and column not in filled]
    if missing:
        raise SystemExit(
            f"{table}.{', '.join(missing)} is required and not filled: update bench/catalogue.py"
        )


def sqlite_marker_path(path: Path) -> Path:
    return path.with_name(path.name + ".filled")


def fill_sqlite(
    path: Path, catalogue: Catalogue, source: Path, *, refill: bool, progress: Callable[[str], None]
) -> Filled:
    """The catalogue in the SQLite database at `path`, kept if an earlier fill left the same one."""
    started = time.monotonic()
    mark = sqlite_marker_path(path)
    if not refill and path.exists() and mark.exists() and mark.read_text() == marker(catalogue):
        migrate(f"sqlite:///{path}", source, path.parent)
        return Filled(sqlite_counts(path), time.monotonic() - started, kept=True)
    for stale in (path, mark, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        stale.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    migrate(f"sqlite:///{path}", source, path.parent)
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.create_function("lower", 1, _unicode_lower, deterministic=True)
        for pragma in ("journal_mode=OFF", "synchronous=OFF", "foreign_keys=OFF", "cache_size=-262144"):
            connection.execute(f"PRAGMA {pragma}")
        indexes = connection.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
            f"AND tbl_name IN ({', '.join('?' * len(FILL_ORDER))})",
            FILL_ORDER,
        ).fetchall()
        connection.execute("BEGIN")
        for name, _sql in indexes:
            connection.execute(f'DROP INDEX "{name}"')
        for table in FILL_ORDER:
            info = connection.execute(f'PRAGMA table_info("{table}")').fetchall()
            _check_columns(table, {row[1]: bool(row[3]) and row[4] is None and not row[5] for row in info})
            columns = TABLES[table].columns
            statement = (
                f'INSERT INTO "{table}" ({", ".join(columns)}) VALUES ({", ".join("?" * len(columns))})'
            )
            table_started = time.monotonic()
            connection.executemany(statement, _sqlite_rows(catalogue.rows(table)))
            progress(f"{table}: {time.monotonic() - table_started:.1f} s")
        for _name, sql in indexes:
            connection.execute(sql)
        connection.execute("COMMIT")
        connection.execute("ANALYZE")
        connection.execute("PRAGMA journal_mode=WAL")
    finally:
        connection.close()
    mark.write_text(marker(catalogue))
    return Filled(sqlite_counts(path), time.monotonic() - started, kept=False)


def sqlite_counts(path: Path) -> dict[str, int]:
    connection = sqlite3.connect(path)
    try:
        return {
            table: int(connection.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
            for table in FILL_ORDER
        }
    finally:
        connection.close()


def fill_postgresql(
    admin_url: str,
    database: str,
    catalogue: Catalogue,
    source: Path,
    workdir: Path,
    *,
    refill: bool,
    progress: Callable[[str], None],
) -> Filled:
    """The catalogue in the PostgreSQL database `database` (created from `admin_url`'s server)."""
    return asyncio.run(
        _fill_postgresql(admin_url, database, catalogue, source, workdir, refill=refill, progress=progress)
    )


def database_url(admin_url: str, database: str) -> str:
    """`admin_url` naming `database` instead of its own."""
    base, _, _old = admin_url.rpartition("/")
    return f"{base}/{database}"


async def _fill_postgresql(
    admin_url: str,
    database: str,
    catalogue: Catalogue,
    source: Path,
    workdir: Path,
    *,
    refill: bool,
    progress: Callable[[str], None],
) -> Filled:
    import asyncpg  # type: ignore[import-untyped]

    started = time.monotonic()
    url = database_url(admin_url, database)
    admin = await asyncpg.connect(admin_url)
    try:
        found = await admin.fetchval(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1", database
        )
        if found is not None and found == marker(catalogue) and not refill:
            migrate(url, source, workdir)
            return Filled(await postgresql_counts(url), time.monotonic() - started, kept=True)
        await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{database}"')
    finally:
        await admin.close()
    migrate(url, source, workdir)
    connection = await asyncpg.connect(url)
    try:
        # Rows are consistent by construction: no foreign-key checks (nor change notices) per row.
        await connection.execute("SET session_replication_role = replica")
        await connection.execute("SET maintenance_work_mem = '512MB'")
        await connection.execute("SET synchronous_commit = off")
        indexes = await connection.fetch(
            """
            SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS definition
            FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
            WHERE t.relname = ANY($1::text[])
              AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
            """,
            list(FILL_ORDER),
        )
        for index in indexes:
            await connection.execute(f"DROP INDEX {index['name']}")
        for table in FILL_ORDER:
            stored = await connection.fetch(
                "SELECT column_name, is_nullable = 'NO' AND column_default IS NULL AS required "
                "FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1",
                table,
            )
            _check_columns(table, {row["column_name"]: row["required"] for row in stored})
            table_started = time.monotonic()
            await connection.copy_records_to_table(
                table, records=catalogue.rows(table), columns=list(TABLES[table].columns)
            )
            progress(f"{table}: {time.monotonic() - table_started:.1f} s")
        if await connection.fetchval("SELECT to_regclass('resource_counts') IS NOT NULL"):
            counts_started = time.monotonic()
            await connection.execute("DELETE FROM resource_counts")
            await connection.execute(RECOUNT_POSTGRESQL)
            progress(f"resource_counts: {time.monotonic() - counts_started:.1f} s")
        index_started = time.monotonic()
        await asyncio.gather(*(_build_index(url, index["definition"]) for index in indexes))
        progress(f"{len(indexes)} secondary indexes: {time.monotonic() - index_started:.1f} s")
        for table in FILL_ORDER:
            await connection.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"COALESCE((SELECT MAX(id) FROM {table}), 0) + 1, false)"
            )
        await connection.execute("ANALYZE")
        await connection.execute(f"COMMENT ON DATABASE \"{database}\" IS '{marker(catalogue)}'")
    finally:
        await connection.close()
    return Filled(await postgresql_counts(url), time.monotonic() - started, kept=False)


async def _build_index(url: str, definition: str) -> None:
    import asyncpg

    connection = await asyncpg.connect(url)
    try:
        await connection.execute("SET maintenance_work_mem = '256MB'")
        await connection.execute(definition)
    finally:
        await connection.close()


async def postgresql_counts(url: str) -> dict[str, int]:
    import asyncpg

    connection = await asyncpg.connect(url)
    try:
        return {
            table: int(await connection.fetchval(f"SELECT count(*) FROM {table}")) for table in FILL_ORDER
        }
    finally:
        await connection.close()
