"""Payments looked up by their public reference."""

from __future__ import annotations

import re
from typing import NamedTuple

from sqlalchemy import String, bindparam, select

from marketplace.database.readers import Read, Reader
from marketplace.models import Payment

# 26 Crockford base-32 characters, the first at most 7 (a ULID's 128-bit bound).
_ULID = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$", re.IGNORECASE)

PAYMENT_BY_UID = Read(
    select(Payment.uid, Payment.status, Payment.amount_cents, Payment.currency).where(
        Payment.uid == bindparam("uid", None, type_=String)
    ),
    "uid",
)


class PublicPayment(NamedTuple):
    """A payment as its status route shows it."""

    uid: str
    status: str
    amount_cents: int
    currency: str


def is_ulid(value: str) -> bool:
    return _ULID.match(value) is not None


async def payment_by_uid(reader: Reader, uid: str) -> PublicPayment | None:
    """The payment with this ULID (compared upper-case, as generated); None for a non-ULID without a query."""
    if not is_ulid(uid):
        return None
    rows = await reader.point(PAYMENT_BY_UID, uid.upper())
    return PublicPayment(*rows[0]) if rows else None
