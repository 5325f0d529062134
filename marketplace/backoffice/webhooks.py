"""Webhook subscriptions, managed by operators: add, enable, disable, remove, redeliver, test;
and what `webhooks list` and `webhooks show` read.

| Action | Changes | Refused when |
|---|---|---|
| add | a new enabled subscription, with a new secret | URL refused (`webhooks/destinations.py`), no event or an unknown one, resource or author unknown |
| enable | `enabled` true; its run of failures forgotten | unknown id; already enabled |
| disable | `enabled` false (its pending deliveries wait) | unknown id; already disabled |
| remove | the subscription and its deliveries deleted | unknown id |
| rotate-secret | a new secret, printed once; every delivery from now on (retries too) is signed with it | unknown id |
| redeliver | a new delivery of the same event and body, due now | unknown delivery; the delivery is still pending |
| test | a `ping` delivery, sent at once by the command | unknown id |

Each is logged in the activity log (`webhook.*` events). The secret is printed by `add` only: it
is stored sealed when `MARKETPLACE_WEBHOOKS_SECRET_KEY` is set (`webhooks/sealing.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import aliased
from ulid import ULID

from marketplace.backoffice.actions import Change, Refused, timestamp, write_as_read
from marketplace.backoffice.finding import Found, NotFound, Section
from marketplace.backoffice.values import parse_id
from marketplace.models import (
    DeliveryState,
    Resource,
    User,
    WebhookDelivery,
    WebhookEvent,
    WebhookSubscription,
    utcnow,
)
from marketplace.webhooks import events
from marketplace.webhooks.events import UnknownEvent, events_of, parse_event_list, stored_event_list
from marketplace.webhooks.outbox import new_delivery, precise_now
from marketplace.webhooks.payloads import BodyContext, EventFacts, body_for

# Deliveries `webhooks show` lists, newest first.
SHOWN_DELIVERIES = 20
PING_CLAIM_SECONDS = 60


@dataclass(frozen=True)
class NewSubscription:
    """A subscription to add, as the operator gives it; the URL already checked."""

    url: str
    events: str
    resource: str | None
    author: str | None
    format: str
    stored_secret: str


def _fields(subscription: WebhookSubscription | Any) -> dict[str, Any]:
    return {
        "url": subscription.url,
        "events": subscription.events,
        "resource_id": subscription.resource_id,
        "author_id": subscription.author_id,
        "format": subscription.format,
        "enabled": subscription.enabled,
    }


async def add_subscription(session: AsyncSession, new: NewSubscription) -> Change:
    try:
        wanted = parse_event_list(new.events)
    except UnknownEvent as error:
        raise Refused(f"--events: {error}") from None
    resource_id = author_id = None
    scope = "every resource"
    if new.resource is not None:
        resource_id = parse_id(new.resource)
        resource = await session.get(Resource, resource_id) if resource_id is not None else None
        if resource is None:
            raise Refused(f"no resource {new.resource!r}")
        scope = f"resource {resource.id} ({resource.name})"
    if new.author is not None:
        author_id = parse_id(new.author)
        author = await session.get(User, author_id) if author_id is not None else None
        if author is None:
            raise Refused(f"no user {new.author!r}")
        scope = (
            scope + ", " if resource_id is not None else ""
        ) + f"resources of user {author.id} ({author.name})"
    subscription = WebhookSubscription(
        url=new.url,
        events=stored_event_list(wanted),
        resource_id=resource_id,
        author_id=author_id,
        format=new.format,
        secret=new.stored_secret,
        enabled=True,
    )
    session.add(subscription)
    await session.flush()
    return Change(
        event=events.SUBSCRIPTION_ADDED,
        summary=f"webhook {subscription.id} ({new.url}): added, {', '.join(wanted)} of {scope}, "
        f"format {new.format}",
        subject={"webhook": subscription.id},
        before=None,
        after=_fields(subscription),
        user_id=author_id,
        resource_id=resource_id,
    )


async def _locked_subscription(session: AsyncSession, reference: str) -> WebhookSubscription:
    subscription_id = parse_id(reference)
    subscription = None
    if subscription_id is not None:
        subscription = await session.scalar(
            select(WebhookSubscription)
            .where(WebhookSubscription.id == subscription_id)
            .with_for_update(key_share=True)
        )
    if subscription is None:
        raise Refused(f"no webhook {reference!r}")
    return subscription


async def set_enabled(session: AsyncSession, reference: str, enabled: bool) -> Change:
    subscription = await _locked_subscription(session, reference)
    state = "enabled" if enabled else "disabled"
    if subscription.enabled == enabled:
        raise Refused(f"webhook {subscription.id} is already {state}")
    before = {"enabled": subscription.enabled, "disabled_reason": subscription.disabled_reason}
    after = {"enabled": enabled, "disabled_reason": None if enabled else "disabled by an operator"}
    values: dict[str, Any] = {**after, "updated_at": utcnow()}
    if enabled:
        # A new start: a run of failures before it does not count towards disabling it again.
        values["failing_since"] = None
    await write_as_read(
        session,
        update(WebhookSubscription)
        .where(WebhookSubscription.id == subscription.id, WebhookSubscription.enabled.is_(not enabled))
        .values(**values),
        f"webhook {subscription.id}",
    )
    pending = await _pending_count(session, subscription.id)
    waiting = f"; {pending} pending deliveries {'resume' if enabled else 'wait'}" if pending else ""
    return Change(
        event=events.SUBSCRIPTION_ENABLED if enabled else events.SUBSCRIPTION_DISABLED,
        summary=f"webhook {subscription.id} ({subscription.url}): {state}{waiting}",
        subject={"webhook": subscription.id},
        before=before,
        after=after,
        user_id=subscription.author_id,
        resource_id=subscription.resource_id,
    )


async def rotate_secret(session: AsyncSession, reference: str, stored_secret: str) -> Change:
    """Replace the subscription's secret (made and sealed by the command, which prints it)."""
    subscription = await _locked_subscription(session, reference)
    await write_as_read(
        session,
        update(WebhookSubscription)
        .where(WebhookSubscription.id == subscription.id, WebhookSubscription.secret == subscription.secret)
        .values(secret=stored_secret, updated_at=utcnow()),
        f"webhook {subscription.id}",
    )
    return Change(
        event=events.SECRET_ROTATED,
        summary=f"webhook {subscription.id} ({subscription.url}): new secret; every delivery from now on is "
        "signed with it",
        subject={"webhook": subscription.id},
        before=None,
        after=None,
        user_id=subscription.author_id,
        resource_id=subscription.resource_id,
    )


async def remove_subscription(session: AsyncSession, reference: str) -> Change:
    subscription = await _locked_subscription(session, reference)
    before = _fields(subscription)
    pending = await _pending_count(session, subscription.id)
    await session.execute(delete(WebhookSubscription).where(WebhookSubscription.id == subscription.id))
    dropped = f"; {pending} pending deliveries dropped" if pending else ""
    return Change(
        event=events.SUBSCRIPTION_REMOVED,
        summary=f"webhook {subscription.id} ({subscription.url}): removed{dropped}",
        subject={"webhook": subscription.id},
        before=before,
        after=None,
        user_id=subscription.author_id,
        resource_id=subscription.resource_id,
    )


async def redeliver(session: AsyncSession, reference: str) -> Change:
    """Queue the delivery `reference` (its id) again: a new delivery, same event and body."""
    original = await session.scalar(
        select(WebhookDelivery).where(WebhookDelivery.uid == reference.strip().upper())
    )
    if original is None:
        raise Refused(f"no delivery {reference!r}")
    if original.state == DeliveryState.PENDING.value:
        raise Refused(
            f"delivery {original.uid} is still pending (next attempt at {timestamp(original.next_attempt_at)})"
        )
    subscription = await session.get(WebhookSubscription, original.subscription_id)
    assert subscription is not None  # deliveries go with their subscription
    event = EventFacts(event_id=original.event_id, kind=original.event, created_at=original.created_at)
    row = new_delivery(subscription.id, event, original.body.encode("utf-8"), redelivery_of=original.id)
    await session.execute(insert(WebhookDelivery).values(**row))
    waits = "" if subscription.enabled else " (the webhook is disabled: it waits until it is enabled)"
    return Change(
        event=events.DELIVERY_REDELIVERED,
        summary=f"delivery {original.uid} ({original.event}) of webhook {subscription.id}: "
        f"queued again as delivery {row['uid']}{waits}",
        subject={"delivery": original.uid},
        before={"state": original.state},
        after={"delivery": row["uid"], "state": DeliveryState.PENDING.value},
        user_id=subscription.author_id,
        resource_id=subscription.resource_id,
    )


@dataclass(frozen=True)
class PingToSend:
    """A test delivery written and claimed by `webhooks test`, which sends it itself."""

    delivery_id: int
    uid: str
    claim: str
    subscription_id: int
    url: str
    stored_secret: str
    body: bytes
    created_at: datetime


async def prepare_ping(
    session: AsyncSession, reference: str, context: BodyContext
) -> tuple[Change, PingToSend]:
    """Write a `ping` event and its delivery, claimed by the command (no worker sends it)."""
    subscription = await _locked_subscription(session, reference)
    now = precise_now()
    event_id = (
        await session.execute(
            insert(WebhookEvent)
            .values(kind=events.PING, subject_id=subscription.id, created_at=now, dispatched_at=now)
            .returning(WebhookEvent.id)
        )
    ).scalar_one()
    facts = EventFacts(event_id=event_id, kind=events.PING, created_at=now, subscription_id=subscription.id)
    body = body_for(facts, subscription.format, context)
    row = new_delivery(subscription.id, facts, body)
    claim = str(ULID())
    # Claimed by the command for longer than a send takes: no worker sends it meanwhile.
    row.update(
        attempts=1,
        claim=claim,
        first_attempt_at=now,
        last_attempt_at=now,
        next_attempt_at=now + timedelta(seconds=PING_CLAIM_SECONDS),
    )
    delivery_id = (
        await session.execute(insert(WebhookDelivery).values(**row).returning(WebhookDelivery.id))
    ).scalar_one()
    change = Change(
        event=events.SUBSCRIPTION_TESTED,
        summary=f"webhook {subscription.id} ({subscription.url}): ping sent as delivery {row['uid']}",
        subject={"webhook": subscription.id},
        before=None,
        after={"delivery": row["uid"]},
        user_id=subscription.author_id,
        resource_id=subscription.resource_id,
    )
    ping = PingToSend(
        delivery_id, row["uid"], claim, subscription.id, subscription.url, subscription.secret, body, now
    )
    return change, ping


async def record_ping(
    connection: AsyncConnection, ping: PingToSend, *, ok: bool, details: dict[str, Any]
) -> None:
    """A ping's outcome, final either way: a test is not retried."""
    now = precise_now()
    await connection.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == ping.delivery_id, WebhookDelivery.claim == ping.claim)
        .values(
            state=DeliveryState.DELIVERED.value if ok else DeliveryState.FAILED.value,
            delivered_at=now if ok else None,
            next_attempt_at=now,
            claim=None,
            **details,
        )
    )


async def _pending_count(session: AsyncSession, subscription_id: int) -> int:
    return int(
        await session.scalar(
            select(func.count())
            .select_from(WebhookDelivery)
            .where(
                WebhookDelivery.subscription_id == subscription_id,
                WebhookDelivery.state == DeliveryState.PENDING.value,
            )
        )
        or 0
    )


# --- find and show -------------------------------------------------------------------------------


async def list_subscriptions(connection: AsyncConnection, limit: int) -> list[dict[str, Any]]:
    pending = (
        select(WebhookDelivery.subscription_id, func.count().label("pending"))
        .where(WebhookDelivery.state == DeliveryState.PENDING.value)
        .group_by(WebhookDelivery.subscription_id)
        .subquery()
    )
    rows = await connection.execute(
        select(WebhookSubscription, func.coalesce(pending.c.pending, 0).label("pending"))
        .outerjoin(pending, pending.c.subscription_id == WebhookSubscription.id)
        .order_by(WebhookSubscription.id.desc())
        .limit(limit)
    )
    return [
        {
            "id": row.id,
            "url": row.url,
            "events": row.events,
            "resource_id": row.resource_id,
            "author_id": row.author_id,
            "format": row.format,
            "enabled": row.enabled,
            "failing_since": _time(row.failing_since),
            "pending": int(row.pending),
            "created_at": timestamp(row.created_at),
        }
        for row in rows
    ]


async def show_subscription(connection: AsyncConnection, reference: str) -> Found:
    subscription_id = parse_id(reference)
    row = None
    if subscription_id is not None:
        row = (
            await connection.execute(
                select(WebhookSubscription).where(WebhookSubscription.id == subscription_id)
            )
        ).one_or_none()
    if row is None:
        raise NotFound(f"no webhook {reference!r}")
    # A connection's rows hold the columns, not an ORM object.
    subscription = row
    counts = dict(
        (
            await connection.execute(
                select(WebhookDelivery.state, func.count())
                .where(WebhookDelivery.subscription_id == subscription.id)
                .group_by(WebhookDelivery.state)
            )
        ).all()
    )
    repeated = aliased(WebhookDelivery)
    deliveries = await connection.execute(
        select(WebhookDelivery, repeated.uid.label("repeated_uid"))
        .outerjoin(repeated, repeated.id == WebhookDelivery.redelivery_of)
        .where(WebhookDelivery.subscription_id == subscription.id)
        .order_by(WebhookDelivery.id.desc())
        .limit(SHOWN_DELIVERIES)
    )
    recent = [
        {
            "delivery": delivery.uid,
            "event": delivery.event,
            "state": delivery.state,
            "attempts": delivery.attempts,
            "last_status": delivery.last_status,
            "last_error": delivery.last_error,
            "last_attempt_at": _time(delivery.last_attempt_at),
            "next_attempt_at": _time(delivery.next_attempt_at)
            if delivery.state == DeliveryState.PENDING.value
            else None,
            "delivered_at": _time(delivery.delivered_at),
            # The delivery it repeats, by the id operators see.
            "redelivery_of": delivery.repeated_uid,
            # The start of the receiver's last answer (`--json`).
            "last_response": delivery.last_response,
        }
        for delivery in deliveries
    ]
    return Found(
        {
            "id": subscription.id,
            "url": subscription.url,
            "events": ", ".join(events_of(subscription.events)),
            "resource_id": subscription.resource_id,
            "author_id": subscription.author_id,
            "format": subscription.format,
            "enabled": subscription.enabled,
            "disabled_reason": subscription.disabled_reason,
            "failing_since": _time(subscription.failing_since),
            "secret": "sealed" if subscription.secret.startswith("v1:") else "stored unsealed",
            "delivered": int(counts.get(DeliveryState.DELIVERED.value, 0)),
            "pending": int(counts.get(DeliveryState.PENDING.value, 0)),
            "failed": int(counts.get(DeliveryState.FAILED.value, 0)),
            "created_at": timestamp(subscription.created_at),
            "updated_at": timestamp(subscription.updated_at),
        },
        (
            Section(
                "deliveries",
                recent,
                text_columns=(
                    "delivery",
                    "event",
                    "state",
                    "attempts",
                    "last_status",
                    "last_error",
                    "last_attempt_at",
                    "next_attempt_at",
                ),
            ),
        ),
    )


def _time(value: datetime | None) -> str | None:
    return None if value is None else timestamp(value)
