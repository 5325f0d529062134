"""Reading an earlier-platform database through any SQLAlchemy URL (MariaDB/MySQL or SQLite).

Rows are streamed in batches as raw driver values (no type conversion on the way, so that one
malformed value cannot stop the stream); mapping parses them leniently.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.engine import URL, make_url

from marketplace.database.engine import masked_url

# The earlier platform's tables, by default name.
EARLIER_TABLES = (
    "users",
    "categories",
    "plugins",
    "versions",
    "chat_accounts",
    "gifts",
    "payments",
    "accesses",
)

BATCH_ROWS = 5000


class SourceError(ValueError):
    """The earlier database cannot be read as given (bad URL, missing table, unreachable)."""


def source_url(raw: str) -> URL:
    try:
        url = make_url(raw)
    except Exception as error:  # ArgumentError, ValueError
        raise SourceError(f"invalid source URL {masked_url(raw)!r}: {masked_url(str(error))}") from None
    backend = url.get_backend_name()
    if backend in ("mysql", "mariadb") and "+" not in url.drivername:
        # The pure-Python driver of the `mysql` extra.
        url = url.set(drivername=f"{backend}+pymysql")
    return url


def parse_table_overrides(pairs: tuple[str, ...]) -> dict[str, str]:
    """`NAME=ACTUAL` pairs (e.g. `plugins=resources`) as a map from earlier name to actual name."""
    overrides: dict[str, str] = {}
    for pair in pairs:
        name, sep, actual = pair.partition("=")
        if not sep or not name or not actual:
            raise SourceError(f"--table takes NAME=ACTUAL, not {pair!r}")
        if name not in EARLIER_TABLES:
            raise SourceError(f"--table: unknown earlier table {name!r} (known: {', '.join(EARLIER_TABLES)})")
        overrides[name] = actual
    return overrides


class EarlierDatabase:
    def __init__(self, url: str, overrides: Mapping[str, str] | None = None) -> None:
        try:
            self.engine: Engine = create_engine(source_url(url))
        except ModuleNotFoundError as missing:
            raise SourceError(
                f"reading this database needs the {missing.name} driver: pip install 'marketplace[mysql]'"
            ) from None
        self.names = {name: (overrides or {}).get(name, name) for name in EARLIER_TABLES}
        try:
            inspector = inspect(self.engine)
            existing = set(inspector.get_table_names())
        except Exception as error:  # driver errors: unreachable server, bad credentials, not a database
            raise SourceError(f"cannot read the earlier database: {_first_line(error)}") from None
        self.columns: dict[str, set[str]] = {}
        for name, actual in self.names.items():
            if actual not in existing:
                raise SourceError(f"the earlier database has no table {actual!r} (for {name})")
            self.columns[name] = {column["name"] for column in inspector.get_columns(actual)}

    def _quoted(self, name: str) -> str:
        return str(self.engine.dialect.identifier_preparer.quote(self.names[name]))

    def count(self, name: str) -> int:
        with self.engine.connect() as connection:
            return int(connection.execute(text(f"SELECT COUNT(*) FROM {self._quoted(name)}")).scalar_one())

    def batches(self, name: str) -> Iterator[list[dict[str, Any]]]:
        """The table's rows in id order, in batches, each row a dict of raw column values."""
        order = " ORDER BY id" if "id" in self.columns[name] else ""
        with self.engine.connect().execution_options(stream_results=True, yield_per=BATCH_ROWS) as connection:
            result = connection.execute(text(f"SELECT * FROM {self._quoted(name)}{order}"))
            for partition in result.mappings().partitions(BATCH_ROWS):
                yield [dict(row) for row in partition]

    def close(self) -> None:
        self.engine.dispose()


def _first_line(error: BaseException) -> str:
    text_ = str(getattr(error, "orig", None) or error).strip()
    return text_.splitlines()[0] if text_ else type(error).__name__
