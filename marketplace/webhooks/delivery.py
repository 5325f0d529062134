"""Sending a delivery: the claim, the signed POST, the outcome and the retries.

1. **Claim.** One statement takes up to N due deliveries of enabled subscriptions (`FOR UPDATE
   SKIP LOCKED` on PostgreSQL, so that workers on every host take different ones; SQLite has one
   writer at a time), counts the attempt and moves each one's due time a lease ahead, under a
   claim token of its own. While the lease runs no other worker takes it.
2. **Send** (`sending.py`): the body made at dispatch, signed now (`signing.py`), to the
   subscription's URL, within 5 s.
3. **Record**, only under the same claim: delivered; or failed, and due again after a backoff
   that doubles from `MARKETPLACE_WEBHOOKS_RETRY_BASE_SECONDS` up to the maximum, with jitter
   (half the delay fixed, half drawn), until the retry window since its first attempt has passed
   (then `failed` for good). A worker that dies before recording leaves the lease to lapse, and
   the delivery is sent again: repeated, with the same delivery id, never lost.

A subscription remembers when its current run of failures began; any success ends the run. A
subscription whose failures have lasted the whole retry window is disabled, with its reason, a
warning in the log and an activity-log entry; its pending deliveries wait, and resume if an
operator enables it again.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine
from ulid import ULID

from marketplace.models import Activity, DeliveryState, WebhookDelivery, WebhookEvent, WebhookSubscription
from marketplace.telemetry.metrics import WEBHOOK_DELIVERIES, WEBHOOK_DELIVERY_LATENCY
from marketplace.webhooks import events
from marketplace.webhooks.outbox import precise_now
from marketplace.webhooks.sealing import SecretUnreadable, unseal
from marketplace.webhooks.signing import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, signature_header

if TYPE_CHECKING:
    import httpx

    from marketplace.config import Settings
    from marketplace.webhooks.sending import Sent

logger = logging.getLogger("marketplace.webhooks")

# The longest a receiver may take to connect and answer.
SEND_TIMEOUT_SECONDS = 5.0
USER_AGENT = "marketplace-webhooks/1.0"
# Who the activity log names for what delivery itself does.
SYSTEM_ACTOR = "marketplace"
VIA = "webhook delivery"


@dataclass(frozen=True)
class DeliveryPolicy:
    """How deliveries are retried, leased and allowed, from the settings."""

    retry_base_seconds: float
    retry_max_seconds: float
    window_seconds: float
    lease_seconds: float
    allow_private: bool
    secret_key: str | None

    @classmethod
    def from_settings(cls, settings: Settings) -> DeliveryPolicy:
        return cls(
            retry_base_seconds=settings.webhooks_retry_base_seconds,
            retry_max_seconds=settings.webhooks_retry_max_seconds,
            window_seconds=settings.webhooks_retry_window_seconds,
            lease_seconds=settings.webhooks_lease_seconds,
            allow_private=settings.webhooks_allow_private,
            secret_key=settings.webhooks_secret_key,
        )

    def backoff_seconds(self, attempts: int) -> float:
        """The wait after the `attempts`-th failed attempt: doubling, capped, half of it drawn."""
        ceiling = min(self.retry_base_seconds * 2 ** min(attempts - 1, 40), self.retry_max_seconds)
        return float(ceiling / 2 + random.uniform(0, ceiling / 2))


@dataclass(frozen=True)
class Claimed:
    """A delivery this worker holds the claim of, with what sending it needs."""

    id: int
    uid: str
    event: str
    body: bytes
    attempts: int
    first_attempt_at: datetime
    claim: str
    event_created_at: datetime | None
    subscription_id: int
    url: str
    stored_secret: str
    # A manual redelivery: its latency says nothing of how fast changes reach receivers.
    redelivery: bool = False


async def claim_due(engine: AsyncEngine, policy: DeliveryPolicy, limit: int) -> list[Claimed]:
    """Claim up to `limit` due deliveries of enabled subscriptions, oldest due first."""
    now = precise_now()
    claim = str(ULID())
    # Materialised once: a subquery under IN may be run again by the planner, and each run of a
    # SKIP LOCKED query may pick other rows (claiming more than `limit`).
    due = (
        select(WebhookDelivery.id)
        .join(WebhookSubscription, WebhookSubscription.id == WebhookDelivery.subscription_id)
        .where(
            WebhookDelivery.state == DeliveryState.PENDING.value,
            WebhookDelivery.next_attempt_at <= now,
            WebhookSubscription.enabled.is_(True),
        )
        .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.id)
        .limit(limit)
        .with_for_update(of=WebhookDelivery, skip_locked=True)
        .cte("due")
        .prefix_with("MATERIALIZED")
    )
    async with engine.begin() as connection:
        rows = (
            await connection.execute(
                update(WebhookDelivery)
                .where(
                    WebhookDelivery.id == due.c.id,
                    WebhookDelivery.state == DeliveryState.PENDING.value,
                    WebhookDelivery.next_attempt_at <= now,
                )
                .values(
                    next_attempt_at=now + timedelta(seconds=policy.lease_seconds),
                    claim=claim,
                    attempts=WebhookDelivery.attempts + 1,
                    last_attempt_at=now,
                    first_attempt_at=func.coalesce(WebhookDelivery.first_attempt_at, now),
                )
                .returning(
                    WebhookDelivery.id,
                    WebhookDelivery.uid,
                    WebhookDelivery.event,
                    WebhookDelivery.body,
                    WebhookDelivery.attempts,
                    WebhookDelivery.first_attempt_at,
                    WebhookDelivery.subscription_id,
                    WebhookDelivery.event_id,
                    WebhookDelivery.redelivery_of,
                )
            )
        ).all()
        if not rows:
            return []
        subscriptions = {
            row.id: row
            for row in await connection.execute(
                select(WebhookSubscription.id, WebhookSubscription.url, WebhookSubscription.secret).where(
                    WebhookSubscription.id.in_({row.subscription_id for row in rows})
                )
            )
        }
        created = {
            row.id: row.created_at
            for row in await connection.execute(
                select(WebhookEvent.id, WebhookEvent.created_at).where(
                    WebhookEvent.id.in_({row.event_id for row in rows})
                )
            )
        }
    return [
        Claimed(
            id=row.id,
            uid=row.uid,
            event=row.event,
            body=row.body.encode("utf-8"),
            attempts=row.attempts,
            first_attempt_at=row.first_attempt_at or now,
            claim=claim,
            event_created_at=created.get(row.event_id),
            subscription_id=row.subscription_id,
            url=subscriptions[row.subscription_id].url,
            stored_secret=subscriptions[row.subscription_id].secret,
            redelivery=row.redelivery_of is not None,
        )
        for row in sorted(rows, key=lambda row: row.id)
    ]


def signed_headers(secret: str, event: str, delivery_uid: str, body: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        EVENT_HEADER: event,
        DELIVERY_HEADER: delivery_uid,
        SIGNATURE_HEADER: signature_header(secret, body),
    }


async def send(
    client: httpx.AsyncClient,
    *,
    url: str,
    stored_secret: str,
    event: str,
    delivery_uid: str,
    body: bytes,
    policy: DeliveryPolicy,
) -> Sent:
    """POST one delivery, signed; never raises for what the receiver or the network does."""
    from marketplace.webhooks.sending import Sent, post

    try:
        secret = unseal(stored_secret, policy.secret_key)
    except SecretUnreadable as error:
        return Sent(status=None, error=f"cannot sign: {error}", response_excerpt="", duration_seconds=0.0)
    return await post(
        client,
        url,
        body,
        signed_headers(secret, event, delivery_uid, body),
        allow_private=policy.allow_private,
        timeout_seconds=SEND_TIMEOUT_SECONDS,
    )


async def record(engine: AsyncEngine, claimed: Claimed, sent: Sent, policy: DeliveryPolicy) -> str | None:
    """Record what the attempt gave, under its claim; the outcome (`delivered`, `failed`,
    `given_up`), or None when the claim had lapsed and another worker holds the delivery."""
    now = precise_now()
    details: dict[str, Any] = {
        "last_status": sent.status,
        "last_error": _cut(sent.error, 255),
        "last_response": _cut(sent.response_excerpt, 1000),
        "claim": None,
    }
    mine = (WebhookDelivery.id == claimed.id, WebhookDelivery.claim == claimed.claim)
    async with engine.begin() as connection:
        if sent.ok:
            outcome = "delivered"
            done = await connection.execute(
                update(WebhookDelivery)
                .where(*mine)
                .values(state=DeliveryState.DELIVERED.value, delivered_at=now, **details)
            )
            if done.rowcount:
                await connection.execute(
                    update(WebhookSubscription)
                    .where(
                        WebhookSubscription.id == claimed.subscription_id,
                        WebhookSubscription.failing_since.is_not(None),
                    )
                    .values(failing_since=None)
                )
        else:
            given_up = (now - claimed.first_attempt_at).total_seconds() >= policy.window_seconds
            outcome = "given_up" if given_up else "failed"
            done = await connection.execute(
                update(WebhookDelivery)
                .where(*mine)
                .values(
                    state=DeliveryState.FAILED.value if given_up else DeliveryState.PENDING.value,
                    next_attempt_at=now + timedelta(seconds=policy.backoff_seconds(claimed.attempts)),
                    **details,
                )
            )
            if done.rowcount:
                await _note_failure(connection, claimed.subscription_id, now, policy)
    if not done.rowcount:
        logger.info("webhook delivery %s: its claim lapsed before its outcome was recorded", claimed.uid)
        return None
    WEBHOOK_DELIVERIES.labels(claimed.event, outcome).inc()
    if outcome == "delivered" and claimed.event_created_at is not None and not claimed.redelivery:
        WEBHOOK_DELIVERY_LATENCY.labels(claimed.event).observe(
            max(0.0, (now - claimed.event_created_at).total_seconds())
        )
    if outcome == "given_up":
        logger.warning(
            "webhook delivery %s (%s) to subscription %s given up after %s attempts: %s",
            claimed.uid,
            claimed.event,
            claimed.subscription_id,
            claimed.attempts,
            sent.error,
        )
    return outcome


async def _note_failure(connection: Any, subscription_id: int, now: datetime, policy: DeliveryPolicy) -> None:
    """Begin or continue the subscription's run of failures; disable it once the run has lasted
    the whole retry window."""
    await connection.execute(
        update(WebhookSubscription)
        .where(WebhookSubscription.id == subscription_id, WebhookSubscription.failing_since.is_(None))
        .values(failing_since=now)
    )
    row = (
        await connection.execute(
            select(
                WebhookSubscription.failing_since,
                WebhookSubscription.url,
                WebhookSubscription.author_id,
                WebhookSubscription.resource_id,
            ).where(WebhookSubscription.id == subscription_id, WebhookSubscription.enabled.is_(True))
        )
    ).first()
    if row is None or row.failing_since is None:
        return
    if (now - row.failing_since).total_seconds() < policy.window_seconds:
        return
    since = row.failing_since.strftime("%Y-%m-%dT%H:%M:%SZ")
    reason = f"every delivery failed since {since} ({policy.window_seconds / 3600:g} h)"
    disabled = await connection.execute(
        update(WebhookSubscription)
        .where(WebhookSubscription.id == subscription_id, WebhookSubscription.enabled.is_(True))
        .values(enabled=False, disabled_reason=reason, updated_at=now.replace(microsecond=0))
    )
    if not disabled.rowcount:
        return
    summary = f"webhook {subscription_id} ({row.url}): disabled, {reason}"
    await connection.execute(
        insert(Activity).values(
            event=events.SUBSCRIPTION_DISABLED,
            user_id=row.author_id,
            resource_id=row.resource_id,
            via=VIA,
            actor=SYSTEM_ACTOR,
            properties={
                "subject": {"webhook": subscription_id},
                "before": {"enabled": True},
                "after": {"enabled": False, "disabled_reason": reason},
                "effects": [],
                "summary": summary,
            },
            created_at=now.replace(microsecond=0),
        )
    )
    logger.warning("%s", summary)


def _cut(text: str | None, limit: int) -> str | None:
    if text is None:
        return None
    # A text column: PostgreSQL refuses NUL in it, and a receiver's answer may hold any byte.
    text = text.replace("\x00", "\ufffd")
    return text if len(text) <= limit else text[: limit - 1] + "…"
