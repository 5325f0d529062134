"""Gift codes: lookup by code and whether a code can be applied now."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from sqlalchemy import String, bindparam, func, select

from marketplace.catalogue.members import storable
from marketplace.models import Gift
from marketplace.readers import Read, Reader

# Longest gift code stored.
CODE_LENGTH = 32

# Codes are unique without regard to case (the index on lower(code)).
GIFT_BY_CODE = Read(
    select(
        Gift.code, Gift.percentage, Gift.enabled, Gift.starts_at, Gift.expires_at, Gift.max_uses, Gift.uses
    ).where(func.lower(Gift.code) == bindparam("code", None, type_=String)),
    "code",
)


class GiftTerms(NamedTuple):
    """What a gift check shows and decides on."""

    code: str
    percentage: int
    enabled: bool
    starts_at: datetime | None
    expires_at: datetime | None
    max_uses: int | None
    uses: int


async def gift_by_code(reader: Reader, code: str) -> GiftTerms | None:
    """The gift whose code equals `code`, ignoring case."""
    if not storable(code, CODE_LENGTH):
        return None
    rows = await reader.point(GIFT_BY_CODE, code.lower())
    return GiftTerms(*rows[0]) if rows else None


def is_applicable(gift: GiftTerms, now: datetime) -> bool:
    """Enabled, started (if a start is set), not expired (if an expiry is set), quota not exhausted."""
    return (
        gift.enabled
        and (gift.starts_at is None or gift.starts_at <= now)
        and (gift.expires_at is None or gift.expires_at > now)
        and (gift.max_uses is None or gift.uses < gift.max_uses)
    )
