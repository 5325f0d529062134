"""Granting a resource to a member by hand (the chat bot's grant endpoint).

At most one access row exists per member and resource (a unique constraint). A grant creates the
row, or reactivates a revoked one; an active one is left as it is. The grant writes before it
reads anything (an insert that yields on conflict, then a conditional update), so concurrent
grants of the same pair serialise on the row and exactly one of them reports a change. Before it
writes, it locks the member's and the resource's rows `FOR KEY SHARE`, in the lock order of
`marketplace/database/conflicts.py`, so that it takes no lock on them after the access's.
"""

from __future__ import annotations

import enum

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from marketplace.database.engine import dialect_insert
from marketplace.models import Access, AccessSource, Activity, Resource, User, utcnow

GRANTED_EVENT = "access.granted"


class GrantOutcome(enum.Enum):
    GRANTED = "ok"
    ALREADY_OWNED = "ko"


async def grant_access(
    session: AsyncSession, *, user_id: int, resource_id: int, via: str, ip_hash: str
) -> GrantOutcome:
    """Give the member an active manual access to the resource, logging each grant that changes anything."""
    now = utcnow()
    access_id = await activate_manual_access(session, user_id=user_id, resource_id=resource_id)
    if access_id is None:
        await session.rollback()
        return GrantOutcome.ALREADY_OWNED
    names = (
        await session.execute(
            select(
                select(User.name).where(User.id == user_id).scalar_subquery(),
                select(Resource.name).where(Resource.id == resource_id).scalar_subquery(),
            )
        )
    ).one()
    summary = granted_summary(access_id, user_id, names[0], resource_id, names[1], "granted")
    session.add(
        Activity(
            event=GRANTED_EVENT,
            user_id=user_id,
            resource_id=resource_id,
            access_id=access_id,
            via=via,
            ip_hash=ip_hash,
            properties={"via": via, "source": AccessSource.MANUAL.value, "summary": summary},
            created_at=now,
        )
    )
    await session.commit()
    return GrantOutcome.GRANTED


async def activate_manual_access(session: AsyncSession, *, user_id: int, resource_id: int) -> int | None:
    """The grant's write, without commit or log: create the access, or reactivate a revoked one, as
    manual and without a payment; the access id, or None when an active access exists (nothing written)."""
    now = utcnow()
    # The locks the foreign-key checks of the insert (and of the activity entry) would take after
    # the access's, taken first (a no-op on SQLite, which serialises its writers).
    await session.execute(
        select(User.id).where(User.id == user_id).with_for_update(read=True, key_share=True)
    )
    await session.execute(
        select(Resource.id).where(Resource.id == resource_id).with_for_update(read=True, key_share=True)
    )
    insert = dialect_insert(session.get_bind().dialect.name)
    created = await session.execute(
        insert(Access)
        .values(
            user_id=user_id,
            resource_id=resource_id,
            payment_id=None,
            source=AccessSource.MANUAL.value,
            revoked=False,
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["user_id", "resource_id"])
        .returning(Access.id)
    )
    access_id: int | None = created.scalar_one_or_none()
    if access_id is None:
        # A reactivated access is a manual grant: not a sale, whatever it was before.
        reactivated = await session.execute(
            update(Access)
            .where(Access.user_id == user_id, Access.resource_id == resource_id, Access.revoked.is_(True))
            .values(revoked=False, source=AccessSource.MANUAL.value, payment_id=None, updated_at=now)
            .returning(Access.id)
        )
        access_id = reactivated.scalar_one_or_none()
    return access_id


def granted_summary(
    access_id: int, user_id: int, user_name: str, resource_id: int, resource_name: str, verb: str
) -> str:
    """The activity log's sentence for a grant, the API's and the back office's alike."""
    return (
        f"access {access_id}: resource {resource_id} ({resource_name}) {verb} to user {user_id} ({user_name})"
    )
