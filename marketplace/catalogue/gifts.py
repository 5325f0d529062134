"""Gift codes: how codes are compared, lookup by code, and whether a code can be applied now.

Codes are matched without regard to case (the original ran on a case-insensitive collation) and
to Unicode normalisation: `gift_code_key` is the one comparison, computed in Python wherever a code
is created, loaded, imported or looked up, stored beside the code (`gifts.code_key`, unique) and
compared as stored. The database's `lower()` never decides, since it differs between databases and
from Python's (they lower a final capital sigma to different letters). The code itself keeps the
spelling it was issued with, and is what answers show.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import String, bindparam, select

from marketplace.catalogue.members import storable
from marketplace.database.readers import Read, Reader
from marketplace.models import Gift

# Longest gift code stored.
CODE_LENGTH = 32


def gift_code_key(code: str) -> str:
    """What two codes are compared by: the same key means the same code. NFC, case folded (`ß` and
    `SS`, `ς` and `Σ` fold alike), then NFC again, since folding may undo a composition."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", code).casefold())


# A character composes from at most four (NFD): longer text cannot be a code of 32 once composed.
_LONGEST_SPELLING = 4 * CODE_LENGTH


def code_key_of(text: str) -> str | None:
    """The key of a caller's text, or None when no stored code can have it: a NUL, or more than
    32 characters once composed (NFC), which is not even looked up."""
    if not storable(text, _LONGEST_SPELLING):
        return None
    composed = unicodedata.normalize("NFC", text)
    if len(composed) > CODE_LENGTH:
        return None
    return gift_code_key(composed)


GIFT_BY_CODE = Read(
    select(
        Gift.code, Gift.percentage, Gift.enabled, Gift.starts_at, Gift.expires_at, Gift.max_uses, Gift.uses
    ).where(Gift.code_key == bindparam("code_key", None, type_=String)),
    "code_key",
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
    """The gift whose code is `code` without regard to case or normalisation."""
    key = code_key_of(code)
    if key is None:
        return None
    rows = await reader.point(GIFT_BY_CODE, key)
    return GiftTerms(*rows[0]) if rows else None


def is_applicable(gift: GiftTerms, now: datetime) -> bool:
    """Enabled, started (if a start is set), not expired (if an expiry is set), quota not exhausted."""
    return (
        gift.enabled
        and (gift.starts_at is None or gift.starts_at <= now)
        and (gift.expires_at is None or gift.expires_at > now)
        and (gift.max_uses is None or gift.uses < gift.max_uses)
    )
