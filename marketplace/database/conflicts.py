"""Write transactions that meet each other: the lock order that keeps them apart, and the one
retry of those the database refuses anyway.

The lock order, for every transaction that writes (the API's grant and the back office alike):

1. Rows are locked `FOR NO KEY UPDATE`, never `FOR UPDATE`: no write changes a row's id, and
   `FOR UPDATE` would conflict with the `FOR KEY SHARE` lock that PostgreSQL's foreign-key check
   takes on the referenced row of every insert (an access inserted for a user waited for an
   operator's lock on that user, who waited for the access: a deadlock). The one exception is a
   row about to be deleted, which no other row refers to (a chat account unlinked).
2. Exclusive row locks are taken in this order: users, resources, payments, gifts, accesses,
   chat accounts; rows a transaction inserts come after the rows they refer to, and activity-log
   entries last of all.
3. An insert of an access first locks the rows it refers to `FOR KEY SHARE`, user then resource
   (`catalogue/access_grants.py`): PostgreSQL claims the new row's unique slot before its
   foreign-key checks lock the referenced rows, so without this the insert would take its locks
   in the reverse order.

What the order cannot rule out (a lock graph outside the service, a `psql` session, a
serialization failure) is retried here, in one place: `retrying` runs the whole transaction again
on a deadlock (SQLSTATE 40P01), a serialization failure (40001) or SQLite's stale snapshot, at
most `ATTEMPTS` times; SQLite's busy database (its writers wait for each other up to a bound, see
`database/engine.py`) is a conflict given up at once. A transaction is a function that opens its own session, so that a retry
starts from nothing: what the failed attempt wrote was rolled back with it, and its change notice
(sent inside the transaction, `changes.py`) went nowhere. Nothing outside the transaction (an
HTTP answer, an operator's report, a log line) happens before it commits, hence once. After the
last attempt `WriteConflict` says so in one line; `marketplace_db_write_conflicts_total` counts
every conflict met, retried or given up.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError

from marketplace.telemetry.metrics import DB_WRITE_CONFLICTS

T = TypeVar("T")

ATTEMPTS = 3
# Deadlock detected, serialization failure.
CONFLICT_SQLSTATES = frozenset({"40P01", "40001"})
# A short pause before the next attempt, a little longer each time, spread so that the two
# transactions that met do not meet again at once.
BACKOFF_SECONDS = 0.02


class WriteConflict(Exception):
    """A write transaction kept conflicting with concurrent ones; nothing of it was written."""


def is_write_conflict(error: BaseException) -> bool:
    """Whether the database refused the transaction for a concurrent one."""
    if not isinstance(error, DBAPIError):
        return False
    original = error.orig
    if getattr(original, "sqlstate", None) in CONFLICT_SQLSTATES:
        return True
    # SQLITE_BUSY and its extended codes ("database is locked").
    return (
        isinstance(original, sqlite3.OperationalError)
        and _sqlite_code(original) & 0xFF == sqlite3.SQLITE_BUSY
    )


def worth_retrying(error: DBAPIError) -> bool:
    """A conflict another attempt may not meet. SQLite's plain busy is not one: the writer waited
    for the lock the whole bound already (`database/engine.py`); a stale snapshot (BUSY_SNAPSHOT) is."""
    original = error.orig
    if isinstance(original, sqlite3.OperationalError):
        return _sqlite_code(original) == SQLITE_BUSY_SNAPSHOT
    return True


SQLITE_BUSY_SNAPSHOT = 517


def _sqlite_code(error: sqlite3.OperationalError) -> int:
    return int(getattr(error, "sqlite_errorcode", 0) or 0)


async def retrying(transaction: Callable[[], Awaitable[T]], *, attempts: int = ATTEMPTS) -> T:
    """The result of `transaction`, run again when the database refuses it for a write conflict."""
    for attempt in range(1, attempts + 1):
        try:
            return await transaction()
        except DBAPIError as error:
            if not is_write_conflict(error):
                raise
            if attempt == attempts or not worth_retrying(error):
                DB_WRITE_CONFLICTS.labels("gave_up").inc()
                tries = f"{attempt} attempts" if attempt > 1 else "1 attempt"
                raise WriteConflict(
                    f"the change conflicted with concurrent changes ({tries}); nothing was written"
                ) from error
            DB_WRITE_CONFLICTS.labels("retried").inc()
        await asyncio.sleep(random.uniform(0.5, 1.5) * BACKOFF_SECONDS * attempt)
    raise AssertionError("unreachable")
