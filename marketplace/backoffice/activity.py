"""Reading the activity log: the entries of the API and of the back office, filtered, newest first.

Nothing here writes, and reading the log is not itself logged. Entries come newest first unless
asked otherwise, and each read is answered from one index (event, user, resource, time or id)
that gives its entries in that order, so that it stops after the entries it prints even on a
large log.

A line reads on its own: it ends with the sentence the change was reported with, which names what
changed (`actions.Change.summary`, kept with the entry); an entry written before the log kept
them is told from its fields, in words where a state has no before or no after. `--action` takes
the events of `marketplace/backoffice/events.py` and their families, and no other.

A filter on an event prefix (`payment.*`) first lists the events the log holds, one index probe
each, and then reads those events exactly: a `LIKE` on the event could use no index under
PostgreSQL's default collation.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, UnaryExpression, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import InstrumentedAttribute

from marketplace.backoffice.actions import Refused, timestamp
from marketplace.backoffice.events import EVENTS
from marketplace.backoffice.values import parse_duration, parse_id
from marketplace.backoffice.values import parse_time as iso_time
from marketplace.models import Activity, utcnow

DEFAULT_LIMIT = 50
_LIMIT = re.compile(r"0*[1-9][0-9]{0,8}")
# The properties the back office writes; an API entry may carry others, shown beside them.
_CHANGE_PROPERTIES = ("subject", "before", "after", "effects")


@dataclass(frozen=True)
class ActivityQuery:
    """Which entries to read, in which order and how many."""

    user_id: int | None = None
    resource_id: int | None = None
    event: str | None = None
    event_prefix: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    by: str | None = None
    limit: int = DEFAULT_LIMIT
    oldest_first: bool = False

    @classmethod
    def from_options(
        cls,
        *,
        user: str | None,
        resource: str | None,
        action: str | None,
        since: str | None,
        until: str | None,
        by: str | None,
        limit: str | None,
        oldest_first: bool,
    ) -> ActivityQuery:
        """The query the command's options ask for; refused, naming the option, when one is invalid."""
        now = utcnow()
        event, event_prefix = parse_action(action) if action is not None else (None, None)
        lower = parse_time(since, now, "--since") if since is not None else None
        upper = parse_time(until, now, "--until") if until is not None else None
        if lower is not None and upper is not None and lower >= upper:
            raise Refused(f"--since {since} is not before --until {until}: no entry can match")
        return cls(
            user_id=_parse_filter_id(user, "--user") if user is not None else None,
            resource_id=_parse_filter_id(resource, "--resource") if resource is not None else None,
            event=event,
            event_prefix=event_prefix,
            since=lower,
            until=upper,
            by=_parse_by(by) if by is not None else None,
            limit=parse_limit(limit) if limit is not None else DEFAULT_LIMIT,
            oldest_first=oldest_first,
        )


@dataclass(frozen=True)
class Entry:
    """One entry of the log as stored."""

    id: int
    at: datetime
    event: str
    actor: str | None
    via: str | None
    user_id: int | None
    resource_id: int | None
    access_id: int | None
    ip_hash: str | None
    properties: Mapping[str, Any]

    def as_json(self) -> dict[str, Any]:
        """Every column, the back office's change (subject, before, after, effects), then any other
        property the entry carries."""
        properties = self.properties
        columns: dict[str, Any] = {
            "id": self.id,
            "at": timestamp(self.at),
            "action": self.event,
            "by": self.actor,
            "via": self.via,
            "user_id": self.user_id,
            "resource_id": self.resource_id,
            "access_id": self.access_id,
            "ip_hash": self.ip_hash,
            "subject": properties.get("subject"),
            "before": properties.get("before"),
            "after": properties.get("after"),
            "effects": properties.get("effects") or [],
        }
        others = {key: value for key, value in properties.items() if key not in columns}
        return {**columns, **others}

    def as_line(self) -> str:
        """The entry on one line that reads on its own: when, which entry, what, who, and the
        sentence the change was reported with (it names what changed)."""
        who = f"by {self.actor}" if self.actor is not None else f"via {self.via or '?'}"
        return "  ".join((timestamp(self.at), f"#{self.id}", self.event, who, self._sentence()))

    def _sentence(self) -> str:
        summary = self.properties.get("summary")
        if isinstance(summary, str) and summary:
            return summary
        return self._described()

    def _described(self) -> str:
        """An entry written without its sentence (before the log kept them): what it names, what
        happened in words, and the fields that changed."""
        properties = self.properties
        subject = properties.get("subject")
        named = subject if isinstance(subject, Mapping) and subject else self._columns()
        what = ", ".join(f"{key} {_value(value)}" for key, value in named.items()) or "entry"
        happened = self.event.rpartition(".")[2].replace("_", " ")
        before, after = _mapping(properties.get("before")), _mapping(properties.get("after"))
        text = f"{what}: {happened}"
        if before is None and after is None:
            # An API entry: no before and after, only what it noted (the access's source).
            noted = {
                key: value
                for key, value in properties.items()
                if key not in ("via", "summary", *_CHANGE_PROPERTIES)
            }
            if noted:
                text += f" ({_fields(noted)})"
        elif before is None and after is not None:
            text += f", {_fields(after)}"
        elif before is not None and after is None:
            text += f", was {_fields(before)}"
        elif before is not None and after is not None:
            changed = [key for key in {**before, **after} if before.get(key) != after.get(key)]
            text += "".join(
                f", {key} {_value(before.get(key))} -> {_value(after.get(key))}" for key in changed
            )
        for effect in properties.get("effects") or []:
            kind = next((key for key in ("access", "version") if key in effect), None)
            if kind is not None:
                text += f"; {kind} {_value(effect[kind])} {effect.get('change', 'changed')}"
        return text

    def _columns(self) -> dict[str, Any]:
        columns = {"user": self.user_id, "resource": self.resource_id, "access": self.access_id}
        return {key: value for key, value in columns.items() if value is not None}


async def read_activity(engine: AsyncEngine, query: ActivityQuery) -> AsyncIterator[Entry]:
    """The entries `query` selects, in its order, read as they are printed."""
    async with engine.connect() as connection:
        events: list[str] | None = None
        if query.event_prefix is not None:
            logged = (await connection.execute(_LOGGED_EVENTS)).scalars()
            events = [event for event in logged if event is not None and event.startswith(query.event_prefix)]
            if not events:
                return
        result = await connection.stream(_statement(query, events))
        async for row in result:
            yield Entry(
                id=row.id,
                at=row.created_at,
                event=row.event,
                actor=row.actor,
                via=row.via,
                user_id=row.user_id,
                resource_id=row.resource_id,
                access_id=row.access_id,
                ip_hash=row.ip_hash,
                properties=row.properties or {},
            )


class UnknownEvent(Refused):
    """`--action` names no event the log holds: a mistyped option, not an empty answer."""


def parse_action(text: str) -> tuple[str | None, str | None]:
    """`--action`: a known event (`payment.refunded`) or a family of them, a prefix ending with
    `.` or `.*` (`payment.*`); (event, None) or (None, prefix)."""
    value = text.strip()
    stem = value[:-2] if value.endswith(".*") else value[:-1] if value.endswith(".") else None
    if stem is not None:
        prefix = stem + "."
        if any(event.startswith(prefix) for event in EVENTS):
            return None, prefix
    elif value in EVENTS:
        return value, None
    families = dict.fromkeys(event.partition(".")[0] + ".*" for event in EVENTS)
    raise UnknownEvent(
        f"unknown event {text!r}: one of {', '.join(EVENTS)}, or a family ({', '.join(families)})"
    )


def parse_time(text: str, now: datetime, option: str) -> datetime:
    """An ISO 8601 time (`2024-05-01T10:00:00Z`, with an offset, or a bare date; without a zone it
    is UTC) or a duration ago (`24h`, `7d`); as the naive UTC value stored."""
    try:
        return iso_time(text, option)
    except (Refused, OverflowError):
        pass
    try:
        return now - parse_duration(text)
    except (Refused, OverflowError):
        raise Refused(
            f"{option}: invalid time {text!r}: use ISO 8601 (2024-05-01T10:00:00Z, 2024-05-01)"
            " or a duration ago (24h, 7d)"
        ) from None


def parse_limit(text: str) -> int:
    value = text.strip()
    if not _LIMIT.fullmatch(value):
        raise Refused(f"--limit: invalid count {text!r}: a whole number from 1 to 999999999")
    return int(value)


def _parse_filter_id(text: str, option: str) -> int:
    value = parse_id(text)
    if value is None:
        raise Refused(f"{option}: invalid id {text!r}: a whole number from 1 to 2147483647")
    return value


def _parse_by(text: str) -> str:
    value = text.strip()
    if not value or len(value) > 255:
        raise Refused(f"--by: invalid name {text!r}: 1 to 255 characters")
    return value


def _statement(query: ActivityQuery, events: list[str] | None) -> Select[Any]:
    conditions: list[ColumnElement[bool]] = []
    if query.user_id is not None:
        conditions.append(Activity.user_id == query.user_id)
    if query.resource_id is not None:
        conditions.append(Activity.resource_id == query.resource_id)
    if query.event is not None:
        conditions.append(Activity.event == query.event)
    if events is not None:
        conditions.append(Activity.event.in_(events))
    by_time = not conditions and (query.since is not None or query.until is not None)
    if query.since is not None:
        conditions.append(Activity.created_at >= query.since)
    if query.until is not None:
        conditions.append(Activity.created_at < query.until)
    if query.by is not None:
        # Who did it: the operator, or for the API's own entries the route.
        conditions.append(
            or_(Activity.actor == query.by, and_(Activity.actor.is_(None), Activity.via == query.by))
        )
    return (
        select(
            Activity.id,
            Activity.created_at,
            Activity.event,
            Activity.actor,
            Activity.via,
            Activity.user_id,
            Activity.resource_id,
            Activity.access_id,
            Activity.ip_hash,
            Activity.properties,
        )
        .where(*conditions)
        .order_by(*_order(query, by_time=by_time))
        .limit(query.limit)
    )


def _order(query: ActivityQuery, *, by_time: bool) -> tuple[UnaryExpression[Any], ...]:
    # The log is written in time order: ids and times sort the entries alike (bar two transactions
    # of the same second committing out of order). Each read is ordered by the index that selects
    # its entries, so that it stops after `limit` of them: the time index for a time range, the
    # event, user or resource index otherwise (on SQLite, each such index is ordered by id within
    # a value; PostgreSQL chooses its plan from its statistics in either case).
    keys: tuple[InstrumentedAttribute[Any], ...] = (
        (Activity.created_at, Activity.id) if by_time else (Activity.id,)
    )
    return tuple(key.asc() if query.oldest_first else key.desc() for key in keys)


def _logged_events() -> Select[Any]:
    # A loose index scan: from the smallest event, each step reads the next one from the index.
    walk = select(func.min(Activity.event).label("event")).cte("logged_events", recursive=True)
    following = select(func.min(Activity.event)).where(Activity.event > walk.c.event).scalar_subquery()
    walk = walk.union_all(select(following).where(walk.c.event.is_not(None)))
    return select(walk.c.event)


_LOGGED_EVENTS = _logged_events()


def _mapping(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def _fields(values: Mapping[str, Any]) -> str:
    return " ".join(f"{key}={_value(value)}" for key, value in values.items())


def _value(value: Any) -> str:
    if isinstance(value, str) and value and not any(character.isspace() for character in value):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
