"""The operator's values as the back office reads them: ids (and the rows they name), whole
numbers, times and durations.

Each parser takes the text as typed (spaces around it ignored) and gives the value, or None or a
`Refused` with the rule, so that every command reads the same text the same way.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from marketplace.backoffice.actions import Refused
from marketplace.catalogue.resources import MAX_ID
from marketplace.models import Resource, User

_ID = re.compile(r"0*[1-9][0-9]{0,9}")
_WHOLE_NUMBER = re.compile(r"[0-9]{1,9}")
_DURATION_PART = re.compile(r"([0-9]{1,9})([smhdw])")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
LONGEST_DURATION_DAYS = 36500
# The largest whole number an option takes (nine digits).
MAX_WHOLE_NUMBER = 999_999_999
# The rows the operator names by id.
Row = TypeVar("Row", Resource, User)


def parse_id(text: str) -> int | None:
    """An id written in digits (leading zeros allowed); None for anything else or beyond every id."""
    digits = text.strip()
    if not _ID.fullmatch(digits):
        return None
    value = int(digits)
    return value if value <= MAX_ID else None


async def locked_by_id(session: AsyncSession, model: type[Row], reference: str, what: str) -> Row:
    """The row of `model` whose id the operator wrote, locked for the transaction; refused when
    the text is no id or names no row."""
    row_id = parse_id(reference)
    row = None
    if row_id is not None:
        row = await session.scalar(select(model).where(model.id == row_id).with_for_update(key_share=True))
    if row is None:
        raise Refused(f"no {what} {reference!r}")
    return row


def whole_number(text: str) -> int | None:
    """A whole number of at most nine digits (ASCII), or None."""
    value = text.strip()
    return int(value) if _WHOLE_NUMBER.fullmatch(value) else None


def parse_time(text: str, what: str) -> datetime:
    """An ISO 8601 time (`Z`, an offset, none meaning UTC, or a bare date at midnight) as the naive
    UTC value the columns store, as the fixture loader reads it."""
    value = text.strip()
    try:
        parsed = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value)
    except ValueError:
        raise Refused(
            f"invalid {what} time {text!r}: ISO 8601, e.g. 2025-06-01T12:00:00Z or 2025-06-01"
        ) from None
    if parsed.tzinfo is not None:
        try:
            parsed = parsed.astimezone(UTC).replace(tzinfo=None)
        except OverflowError:  # an offset that takes the time out of the calendar (year 1 or 9999)
            raise Refused(f"invalid {what} time {text!r}: out of range") from None
    return parsed


def parse_duration(text: str) -> timedelta:
    """`90m`, `48h`, `7d`, `2w`, or a sum such as `1d12h`; more than zero, at most 100 years."""
    compact = text.strip().lower()
    parts = _DURATION_PART.findall(compact)
    if not compact or "".join(number + unit for number, unit in parts) != compact:
        raise Refused(f"invalid duration {text!r}: use a number and a unit (s, m, h, d, w), e.g. 48h or 7d")
    seconds = sum(int(number) * _DURATION_UNITS[unit] for number, unit in parts)
    if seconds <= 0:
        raise Refused(f"invalid duration {text!r}: it must be longer than zero")
    # Longer would reach past the first dates a timestamp can hold (and past any checkout).
    if seconds > LONGEST_DURATION_DAYS * _DURATION_UNITS["d"]:
        raise Refused(f"invalid duration {text!r}: it must be at most {LONGEST_DURATION_DAYS}d (100 years)")
    return timedelta(seconds=seconds)
