"""Members' accesses granted and revoked by hand, outside the API.

A grant follows the rules of the API's own grant (`marketplace/catalogue/access_grants.py`): one
access row per member and resource, created or, when revoked, reactivated; either way a manual
access without a payment, whatever it was before. It goes to an account that is neither closed
nor soft-deleted (the API finds no such member), for a resource that is not deleted, whatever its
status (an operator may give a tester a draft). Unlike the API, which answers "ko" and changes
nothing, the back office refuses a grant of an access that is already active, so that the log
holds only real changes. A revoke keeps the row (its source and payment tell the story) and
takes the resource out of the member's access lists and, for a purchase, out of `purchases`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from marketplace.backoffice import events
from marketplace.backoffice.actions import Change, Refused, write_as_read
from marketplace.backoffice.resources import locked_resource
from marketplace.backoffice.users import described, locked_user
from marketplace.catalogue.access_grants import activate_manual_access, granted_summary
from marketplace.models import Access, AccessSource, Resource, User, utcnow


async def grant(session: AsyncSession, user_reference: str, resource_reference: str) -> Change:
    """Give the user an active manual access to the resource; refused when one is active already."""
    user = await locked_user(session, user_reference)
    if user.deleted_at is not None or user.closed:
        state = "soft-deleted" if user.deleted_at is not None else "closed"
        raise Refused(f"cannot grant to {described(user)}: the account is {state}")
    resource = await locked_resource(session, resource_reference)
    if resource.deleted_at is not None:
        raise Refused(f"cannot grant resource {resource.id} ({resource.name}): it is deleted")
    access = await _locked_access(session, user, resource)
    if access is not None and not access.revoked:
        raise Refused(
            f"{described(user)} already has an active access to resource {resource.id}"
            f" (access {access.id}, {access.source})"
        )
    before = access_fields(access) if access is not None else None
    access_id = await activate_manual_access(session, user_id=user.id, resource_id=resource.id)
    if access_id is None:
        raise Refused(f"the access of {described(user)} to resource {resource.id} changed meanwhile")
    after = {"source": AccessSource.MANUAL.value, "payment_id": None, "revoked": False}
    verb = "granted" if access is None else "reactivated"
    return Change(
        event=events.ACCESS_GRANTED,
        summary=granted_summary(access_id, user.id, user.name, resource.id, resource.name, verb),
        subject={"access": access_id, "user": user.id, "resource": resource.id},
        before=before,
        after=after,
        user_id=user.id,
        resource_id=resource.id,
        access_id=access_id,
    )


async def revoke(session: AsyncSession, user_reference: str, resource_reference: str) -> Change:
    """Revoke the user's active access to the resource; refused when there is none."""
    user = await locked_user(session, user_reference)
    resource = await locked_resource(session, resource_reference)
    access = await _locked_access(session, user, resource)
    if access is None or access.revoked:
        raise Refused(f"{described(user)} has no active access to resource {resource.id}")
    before = access_fields(access)
    await write_as_read(
        session,
        update(Access)
        .where(Access.id == access.id, Access.revoked.is_(False))
        .values(revoked=True, updated_at=utcnow()),
        f"access {access.id}",
    )
    return Change(
        event=events.ACCESS_REVOKED,
        summary=f"access {access.id}: resource {resource.id} ({resource.name}) revoked from {described(user)}",
        subject={"access": access.id, "user": user.id, "resource": resource.id},
        before=before,
        after={**before, "revoked": True},
        user_id=user.id,
        resource_id=resource.id,
        access_id=access.id,
    )


async def _locked_access(session: AsyncSession, user: User, resource: Resource) -> Access | None:
    return await session.scalar(
        select(Access)
        .where(Access.user_id == user.id, Access.resource_id == resource.id)
        .with_for_update(key_share=True)
    )


def access_fields(access: Access) -> dict[str, Any]:
    """What the log shows of an access before and after a change."""
    return {"source": access.source, "payment_id": access.payment_id, "revoked": access.revoked}
