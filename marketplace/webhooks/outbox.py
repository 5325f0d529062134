"""Dispatching the outbox: each event the triggers wrote becomes a delivery per subscription that
wants it, with the body it will carry.

One transaction claims a batch of undispatched events (oldest first; `FOR UPDATE SKIP LOCKED` on
PostgreSQL, so that workers on every host take different events and none waits for another),
marks them dispatched, reads the rows they name and writes the deliveries. A worker that dies
before committing leaves the events undispatched for the next; one that commits has written every
delivery: no event is dispatched twice, none is lost.

Who wants what:

- the subscription names the event, and is enabled;
- `--resource`: only events of that resource; `--author`: only events of that author's resources;
- `release.published` reaches subscriptions without `--resource` only for a published resource
  (as the public feeds list them), and a `--resource` subscription for a visible one (published
  or unlisted): releases of drafts, pending, rejected or deleted resources are not news;
- nor is a release dated more than `RELEASE_NEWS_SECONDS` before its event was written: an import
  of the earlier platform or a backfill writes its versions with their own dates, and its events
  (the outbox covers the importer and `load` like every writer), but old releases are history.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from ulid import ULID

from marketplace.models import (
    PUBLIC_STATUSES,
    Access,
    ChatAccount,
    DeliveryState,
    Payment,
    Resource,
    ResourceStatus,
    User,
    Version,
    WebhookDelivery,
    WebhookEvent,
    WebhookSubscription,
)
from marketplace.webhooks import events
from marketplace.webhooks.payloads import (
    AccessFacts,
    BodyContext,
    EventFacts,
    MemberFacts,
    PaymentFacts,
    ResourceFacts,
    VersionFacts,
    body_for,
)

BATCH = 100
# How old a version may be, when its event is written, and still be news.
RELEASE_NEWS_SECONDS = 86400.0


def precise_now() -> datetime:
    """Now as the webhook tables store it: naive UTC, to the microsecond (retries are timed finer
    than the catalogue's seconds)."""
    return datetime.now(UTC).replace(tzinfo=None)


async def dispatch_events(engine: AsyncEngine, context: BodyContext, *, batch: int = BATCH) -> int:
    """Dispatch up to `batch` events; how many were dispatched."""
    async with engine.begin() as connection:
        claimed = await _claim_events(connection, batch)
        if not claimed:
            return 0
        facts = await read_facts(connection, claimed)
        subscriptions = (
            await connection.execute(
                select(
                    WebhookSubscription.id,
                    WebhookSubscription.events,
                    WebhookSubscription.resource_id,
                    WebhookSubscription.author_id,
                    WebhookSubscription.format,
                ).where(WebhookSubscription.enabled.is_(True))
            )
        ).all()
        deliveries = list(_deliveries(facts, subscriptions, context))
        if deliveries:
            await connection.execute(insert(WebhookDelivery), deliveries)
    return len(claimed)


async def _claim_events(connection: AsyncConnection, batch: int) -> list[Any]:
    # Materialised once, as in `delivery.claim_due`: never more than `batch`, each claimed once.
    undispatched = (
        select(WebhookEvent.id)
        .where(WebhookEvent.dispatched_at.is_(None))
        .order_by(WebhookEvent.id)
        .limit(batch)
        .with_for_update(skip_locked=True)
        .cte("undispatched")
        .prefix_with("MATERIALIZED")
    )
    claimed = await connection.execute(
        update(WebhookEvent)
        .where(WebhookEvent.id == undispatched.c.id, WebhookEvent.dispatched_at.is_(None))
        .values(dispatched_at=precise_now())
        .returning(
            WebhookEvent.id,
            WebhookEvent.kind,
            WebhookEvent.resource_id,
            WebhookEvent.user_id,
            WebhookEvent.subject_id,
            WebhookEvent.old_value,
            WebhookEvent.new_value,
            WebhookEvent.created_at,
        )
    )
    return sorted(claimed.all(), key=lambda row: row.id)


def _deliveries(
    facts: Iterable[EventFacts], subscriptions: Sequence[Any], context: BodyContext
) -> Iterable[dict[str, Any]]:
    for event in facts:
        for subscription in subscriptions:
            if wants(subscription, event):
                yield new_delivery(subscription.id, event, body_for(event, subscription.format, context))


def new_delivery(
    subscription_id: int, event: EventFacts, body: bytes, *, redelivery_of: int | None = None
) -> dict[str, Any]:
    now = precise_now()
    return {
        "uid": str(ULID()),
        "subscription_id": subscription_id,
        "event_id": event.event_id,
        "event": event.kind,
        "body": body.decode("ascii"),
        "state": DeliveryState.PENDING.value,
        "attempts": 0,
        "next_attempt_at": now,
        "redelivery_of": redelivery_of,
        "created_at": now,
    }


def wants(subscription: Any, event: EventFacts) -> bool:
    if event.kind not in events.events_of(subscription.events):
        return False
    resource = event.resource
    if subscription.resource_id is not None and (resource is None or resource.id != subscription.resource_id):
        return False
    if subscription.author_id is not None and (
        resource is None or resource.user_id != subscription.author_id
    ):
        return False
    if event.kind == events.RELEASE_PUBLISHED:
        if resource is None:
            return False
        version = event.version
        if (
            version is not None
            and (event.created_at - version.created_at).total_seconds() > RELEASE_NEWS_SECONDS
        ):
            return False
        if subscription.resource_id is None:
            return resource.status == ResourceStatus.PUBLISHED.value
        return resource.status in PUBLIC_STATUSES
    return True


async def read_facts(connection: AsyncConnection, claimed: Sequence[Any]) -> list[EventFacts]:
    """The events with the rows they name, read in a few statements for the whole batch."""
    resource_ids = {row.resource_id for row in claimed if row.resource_id is not None}
    version_ids = _subjects(claimed, events.RELEASE_PUBLISHED)
    payment_ids = _subjects(claimed, events.PAYMENT_STATUS_CHANGED)
    access_ids = _subjects(claimed, events.ACCESS_GRANTED) | _subjects(claimed, events.ACCESS_REVOKED)
    member_ids = {row.user_id for row in claimed if row.user_id is not None}

    resources: dict[int, ResourceFacts] = {}
    if resource_ids:
        for found in await connection.execute(
            select(
                Resource.id, Resource.name, Resource.user_id, Resource.status, Resource.deleted_at, User.name
            )
            .join(User, User.id == Resource.user_id)
            .where(Resource.id.in_(resource_ids))
        ):
            shown = "deleted" if found.deleted_at is not None else found.status
            resources[found.id] = ResourceFacts(found.id, found[1], found.user_id, found[5], shown)
    versions: dict[int, VersionFacts] = {}
    if version_ids:
        for version in await connection.execute(
            select(Version.id, Version.version, Version.title, Version.created_at).where(
                Version.id.in_(version_ids)
            )
        ):
            versions[version.id] = VersionFacts(
                version.id, version.version, version.title, version.created_at
            )
    payments: dict[int, PaymentFacts] = {}
    if payment_ids:
        for payment in await connection.execute(
            select(Payment.id, Payment.uid, Payment.status, Payment.amount_cents, Payment.currency).where(
                Payment.id.in_(payment_ids)
            )
        ):
            payments[payment.id] = PaymentFacts(
                payment.id, payment.uid, payment.status, payment.amount_cents, payment.currency
            )
    accesses: dict[int, AccessFacts] = {}
    if access_ids:
        for access in await connection.execute(
            select(
                Access.id,
                Access.user_id,
                Access.resource_id,
                Access.payment_id,
                Access.source,
                Access.revoked,
            ).where(Access.id.in_(access_ids))
        ):
            accesses[access.id] = AccessFacts(
                access.id,
                access.user_id,
                access.resource_id,
                access.payment_id,
                access.source,
                bool(access.revoked),
            )
    members: dict[int, MemberFacts] = {}
    if member_ids:
        chat_ids: dict[int, str] = {}
        for account in await connection.execute(
            select(ChatAccount.user_id, ChatAccount.chat_id)
            .where(ChatAccount.user_id.in_(member_ids))
            .order_by(ChatAccount.id)
        ):
            chat_ids.setdefault(account.user_id, account.chat_id)
        for user in await connection.execute(select(User.id, User.name).where(User.id.in_(member_ids))):
            members[user.id] = MemberFacts(user.id, user.name, chat_ids.get(user.id))

    facts = []
    for row in claimed:
        subject = row.subject_id
        facts.append(
            EventFacts(
                event_id=row.id,
                kind=row.kind,
                created_at=row.created_at,
                resource=resources.get(row.resource_id) if row.resource_id is not None else None,
                version=versions.get(subject) if row.kind == events.RELEASE_PUBLISHED else None,
                payment=payments.get(subject) if row.kind == events.PAYMENT_STATUS_CHANGED else None,
                access=_access(row, accesses) if row.kind.startswith("access.") else None,
                member=members.get(row.user_id) if row.user_id is not None else None,
                old_value=row.old_value,
                new_value=row.new_value,
            )
        )
    return facts


def _access(row: Any, accesses: dict[int, AccessFacts]) -> AccessFacts | None:
    """The access an event names; one deleted since is told from what the trigger kept of it."""
    found = accesses.get(row.subject_id)
    if found is not None or row.subject_id is None:
        return found
    return AccessFacts(row.subject_id, row.user_id, row.resource_id, None, row.new_value or "", True)


def _subjects(claimed: Sequence[Any], kind: str) -> set[int]:
    return {row.subject_id for row in claimed if row.kind == kind and row.subject_id is not None}
