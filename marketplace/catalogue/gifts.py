"""Gift codes: lookup by code and whether a code can be applied now."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from marketplace.catalogue.members import storable
from marketplace.models import Gift

# Longest gift code stored.
CODE_LENGTH = 32


async def gift_by_code(session: AsyncSession, code: str) -> Gift | None:
    """The gift whose code equals `code`, ignoring case."""
    if not storable(code, CODE_LENGTH):
        return None
    result = await session.execute(select(Gift).where(func.lower(Gift.code) == code.lower()))
    return result.scalars().first()


def is_applicable(gift: Gift, now: datetime) -> bool:
    """Enabled, started (if a start is set), not expired (if an expiry is set), quota not exhausted."""
    return (
        gift.enabled
        and (gift.starts_at is None or gift.starts_at <= now)
        and (gift.expires_at is None or gift.expires_at > now)
        and (gift.max_uses is None or gift.uses < gift.max_uses)
    )
