"""One back-office action: one transaction, an activity-log entry per change, or a refusal.

An action reads what it changes with a row lock (PostgreSQL; SQLite serialises its writers), taken
in the lock order of `marketplace/database/conflicts.py`, checks that the change is allowed, writes it and
describes it as a `Change`: what it acted on, the row's fields before and after. `perform` logs each change under the operator's name in the same
transaction and commits; a `Refused` action rolls back, so a refusal writes nothing.

The service's workers see the commit at once: every transaction that writes announces itself
(`marketplace/database/changes.py`), which drops their cached answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.sql import Executable

from marketplace.database.conflicts import retrying
from marketplace.database.engine import session_factory
from marketplace.models import Activity, utcnow


class Refused(Exception):
    """The action may not happen (unknown row, illegal transition, invalid value): its one-line reason."""


@dataclass(frozen=True)
class Change:
    """One change an action made, as the activity log and the operator's report tell it."""

    event: str
    # One sentence that reads on its own: what changed, named (a payment's ULID, a gift's code, a
    # user's or a resource's id and name, a version's number and id), and how, in words where a
    # state has no before or no after. Printed by the command and by `marketplace activity`.
    summary: str
    subject: Mapping[str, Any]
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None
    user_id: int | None = None
    resource_id: int | None = None
    access_id: int | None = None
    # Other changes the action made to reach this one (an access granted with a payment).
    effects: Sequence[Mapping[str, Any]] = field(default_factory=tuple)


@dataclass(frozen=True)
class Logged:
    """A change once written: its activity-log entry."""

    activity_id: int
    by: str
    at: datetime
    change: Change

    def as_json(self) -> dict[str, Any]:
        return {
            "activity_id": self.activity_id,
            "action": self.change.event,
            "by": self.by,
            "at": timestamp(self.at),
            "subject": dict(self.change.subject),
            "before": plain(self.change.before),
            "after": plain(self.change.after),
            "effects": [plain(effect) for effect in self.change.effects],
            "summary": self.change.summary,
        }


Action = Callable[[AsyncSession], Awaitable[Sequence[Change]]]


async def perform(engine: AsyncEngine, action: Action, *, by: str, via: str) -> list[Logged]:
    """Run `action` in one transaction and log each of its changes as done by `by` through `via`;
    a transaction that meets a concurrent write is run again whole (`marketplace/database/conflicts.py`),
    and `WriteConflict` after the last attempt."""
    return await retrying(lambda: _perform_once(engine, action, by=by, via=via))


async def _perform_once(engine: AsyncEngine, action: Action, *, by: str, via: str) -> list[Logged]:
    async with session_factory(engine)() as session:
        try:
            changes = await action(session)
            now = utcnow()
            entries = [
                Activity(
                    event=change.event,
                    user_id=change.user_id,
                    resource_id=change.resource_id,
                    access_id=change.access_id,
                    via=via,
                    actor=by,
                    properties={
                        "subject": plain(change.subject),
                        "before": plain(change.before),
                        "after": plain(change.after),
                        "effects": [plain(effect) for effect in change.effects],
                        # The line the command printed, so that the log reads as it did.
                        "summary": change.summary,
                    },
                    created_at=now,
                )
                for change in changes
            ]
            session.add_all(entries)
            await session.flush()
            await session.commit()
        except BaseException:
            await session.rollback()
            raise
    return [Logged(entry.id, by, now, change) for entry, change in zip(entries, changes, strict=True)]


async def write_as_read(session: AsyncSession, statement: Executable, what: str) -> None:
    """Run a write whose conditions say the row is as it was read; when it changes no row, someone
    changed it meanwhile, and the action is refused (the transaction rolls back)."""
    result = await session.execute(statement)
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise Refused(f"{what} changed meanwhile; run the command again")


def timestamp(value: datetime) -> str:
    """A stored (naive UTC) time as the operator reads it: ISO 8601 with `Z`."""
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def plain(values: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Field values as JSON holds them: times in ISO 8601, prices as decimal strings."""
    if values is None:
        return None
    return {key: _plain_value(value) for key, value in values.items()}


def _plain_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return timestamp(value)
    if isinstance(value, Decimal):
        return str(value)
    return value
