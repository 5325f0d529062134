"""Gift codes issued outside the API: creating one, enabling and disabling it.

| Action | Changes | Refused when |
|---|---|---|
| create | a new gift code | code invalid or taken (codes ignore case); percentage not 1..100; a time not ISO 8601 or the expiry not after the start; quota below 1; resource or seller unknown, seller deleted, resource of another seller |
| enable | `enabled` true | unknown code; already enabled |
| disable | `enabled` false | unknown code; already disabled |

A code is found as the API finds it (`GET /gift/{code}`): by its key, without regard to case or
Unicode normalisation (`catalogue.gifts.gift_code_key`); so codes are unique by that key. A code restricted
to a resource belongs to that resource's author unless a seller is named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from marketplace.backoffice import events
from marketplace.backoffice.actions import Change, Refused, timestamp, write_as_read
from marketplace.backoffice.resources import locked_resource
from marketplace.backoffice.values import MAX_WHOLE_NUMBER, parse_id, parse_time, whole_number
from marketplace.catalogue.gifts import CODE_LENGTH, code_key_of, gift_code_key
from marketplace.models import Gift, User

# The API trims what it receives and reads the code from one path segment: a code with spaces at
# either end, a `/` or a control character could never be checked.
_CODE = re.compile(rf"(?=\S)[^/\x00-\x1f\x7f]{{1,{CODE_LENGTH}}}(?<=\S)")


@dataclass(frozen=True)
class NewGift:
    """A gift code to create, as the operator gives it (text, checked by `create_gift`)."""

    code: str
    percentage: str
    starts_at: str | None = None
    expires_at: str | None = None
    quota: str | None = None
    resource: str | None = None
    seller: str | None = None
    enabled: bool = True


async def create_gift(session: AsyncSession, new: NewGift) -> Change:
    """Issue a gift code; it applies to one resource, to every resource of a seller, or to all."""
    code = new.code
    if not _CODE.fullmatch(code) or code in (".", ".."):
        raise Refused(
            f"invalid gift code {code!r}: 1 to {CODE_LENGTH} characters,"
            " no space at either end, no '/' or control character, not '.' or '..'"
        )
    percentage = whole_number(new.percentage)
    if percentage is None or not 1 <= percentage <= 100:
        raise Refused(f"invalid percentage {new.percentage!r}: a whole number from 1 to 100")
    starts_at = parse_time(new.starts_at, "start") if new.starts_at is not None else None
    expires_at = parse_time(new.expires_at, "expiry") if new.expires_at is not None else None
    if starts_at is not None and expires_at is not None and expires_at <= starts_at:
        raise Refused(
            f"the expiry ({timestamp(expires_at)}) must be after the start ({timestamp(starts_at)})"
        )
    max_uses = whole_number(new.quota) if new.quota is not None else None
    if new.quota is not None and (max_uses is None or max_uses < 1):
        raise Refused(
            f"invalid quota {new.quota!r}: a whole number from 1 to {MAX_WHOLE_NUMBER} (omit it for no quota)"
        )
    seller = await _seller(session, new.seller) if new.seller is not None else None
    seller_id = seller.id if seller is not None else None
    resource_id = None
    # What the code applies to, as the log names it.
    scope = f"every resource of user {seller.id} ({seller.name})" if seller is not None else "every resource"
    if new.resource is not None:
        resource = await locked_resource(session, new.resource)
        if seller_id is not None and resource.user_id != seller_id:
            raise Refused(
                f"resource {resource.id} belongs to user {resource.user_id}, not to seller {seller_id}"
            )
        resource_id, seller_id = resource.id, resource.user_id
        scope = f"resource {resource.id} ({resource.name})"
    code_key = gift_code_key(code)
    clash = await session.scalar(select(Gift.code).where(Gift.code_key == code_key).limit(1))
    if clash is not None:
        raise Refused(f"gift code {code!r} is taken: {clash} exists already (codes ignore case)")
    fields = {
        "code": code,
        "percentage": percentage,
        "enabled": new.enabled,
        "starts_at": starts_at,
        "expires_at": expires_at,
        "max_uses": max_uses,
        "seller_id": seller_id,
        "resource_id": resource_id,
    }
    gift = Gift(uses=0, code_key=code_key, **fields)
    session.add(gift)
    try:
        await session.flush()
    except IntegrityError:
        raise Refused(f"gift code {code!r} was taken meanwhile (codes ignore case)") from None
    return Change(
        event=events.GIFT_CREATED,
        summary=f"gift {code} (id {gift.id}): created, {percentage}% off {scope}"
        + ("" if new.enabled else ", disabled"),
        subject={"gift": code},
        before=None,
        after=fields,
        user_id=seller_id,
        resource_id=resource_id,
    )


async def set_enabled(session: AsyncSession, code: str, enabled: bool) -> Change:
    """Enable or disable the gift code (looked up as the API does, by its key)."""
    gift = None
    code_key = code_key_of(code)
    if code_key is not None:
        gift = await session.scalar(
            select(Gift).where(Gift.code_key == code_key).with_for_update(key_share=True)
        )
    if gift is None:
        raise Refused(f"no gift code {code!r}")
    state = "enabled" if enabled else "disabled"
    if gift.enabled == enabled:
        raise Refused(f"gift {gift.code} is already {state}")
    await write_as_read(
        session,
        update(Gift).where(Gift.id == gift.id, Gift.enabled.is_(not enabled)).values(enabled=enabled),
        f"gift {gift.code}",
    )
    return Change(
        event=events.GIFT_ENABLED if enabled else events.GIFT_DISABLED,
        summary=f"gift {gift.code} (id {gift.id}): {state}",
        subject={"gift": gift.code},
        before={"enabled": not enabled},
        after={"enabled": enabled},
        user_id=gift.seller_id,
        resource_id=gift.resource_id,
    )


async def _seller(session: AsyncSession, reference: str) -> User:
    user_id = parse_id(reference)
    seller = None
    if user_id is not None:
        seller = await session.get(User, user_id)
    if seller is None:
        raise Refused(f"no user {reference!r}")
    if seller.deleted_at is not None:
        raise Refused(f"user {seller.id} is deleted: a deleted account issues no gift code")
    return seller
