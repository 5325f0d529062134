"""Payments looked up by their public reference."""

from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from marketplace.models import Payment

# 26 Crockford base-32 characters, the first at most 7 (a ULID's 128-bit bound).
_ULID = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$", re.IGNORECASE)


def is_ulid(value: str) -> bool:
    return _ULID.match(value) is not None


async def payment_by_uid(session: AsyncSession, uid: str) -> Payment | None:
    """The payment with this ULID (compared upper-case, as generated); None for a non-ULID without a query."""
    if not is_ulid(uid):
        return None
    result = await session.execute(select(Payment).where(Payment.uid == uid.upper()))
    return result.scalar_one_or_none()
