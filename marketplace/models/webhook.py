"""Outgoing webhooks: the subscriptions, the outbox of events and each event's deliveries.

`webhook_events` is written by the database alone: triggers on `versions`, `resources`,
`payments` and `accesses` (migration 0009) add a row in the transaction of the change, whoever
makes it, while an enabled subscription exists. The application only reads the rows and marks
them dispatched (`marketplace/webhooks/outbox.py`), which turns each into a delivery per
subscription that wants it.
"""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from marketplace.models.base import Base, Timestamped

# An autoincrementing 64-bit id on PostgreSQL; SQLite's rowid is already 64 bits.
_EVENT_ID = BigInteger().with_variant(Integer(), "sqlite")


class DeliveryState(enum.StrEnum):
    # Waiting for its next attempt (or leased to a worker until `next_attempt_at`).
    PENDING = "pending"
    DELIVERED = "delivered"
    # Given up: its retries lasted their whole window, or it was a test ping that failed.
    FAILED = "failed"


class SubscriptionFormat(enum.StrEnum):
    JSON = "json"
    CHAT = "chat"


class WebhookSubscription(Timestamped, Base):
    __tablename__ = "webhook_subscriptions"

    id: Mapped[int] = mapped_column(primary_key=True)
    url: Mapped[str] = mapped_column(String(2000), nullable=False)
    # The event names it wants, comma-separated (`marketplace/webhooks/events.py`).
    events: Mapped[str] = mapped_column(String(255), nullable=False)
    # Only events of this resource, or of this author's resources; neither: every event.
    resource_id: Mapped[int | None] = mapped_column(ForeignKey("resources.id", ondelete="CASCADE"))
    author_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    format: Mapped[str] = mapped_column(String(8), default=SubscriptionFormat.JSON.value, nullable=False)
    # The signing secret as stored: encrypted under MARKETPLACE_WEBHOOKS_SECRET_KEY when it is set
    # (`marketplace/webhooks/sealing.py`).
    secret: Mapped[str] = mapped_column(String(255), nullable=False)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, nullable=False)
    # The first failure since its last success; a subscription failing for a whole retry window
    # is disabled.
    failing_since: Mapped[datetime | None] = mapped_column(DateTime())
    disabled_reason: Mapped[str | None] = mapped_column(String(255))

    __table_args__ = (
        CheckConstraint("format IN ('json', 'chat')", name="format"),
        # Ids are never used twice (migration 0009).
        {"sqlite_autoincrement": True},
    )


class WebhookEvent(Base):
    __tablename__ = "webhook_events"

    id: Mapped[int] = mapped_column(_EVENT_ID, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    # What the event is about, as the trigger saw the row: the resource, the member (a payment's
    # buyer, an access's holder), the row itself (a version, payment, access or resource id) and
    # the status before and after.
    resource_id: Mapped[int | None] = mapped_column(Integer)
    user_id: Mapped[int | None] = mapped_column(Integer)
    subject_id: Mapped[int | None] = mapped_column(Integer)
    old_value: Mapped[str | None] = mapped_column(String(16))
    new_value: Mapped[str | None] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
    # Null until a worker has made its deliveries.
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime())

    __table_args__ = (
        Index(
            "ix_webhook_events_undispatched",
            "id",
            postgresql_where=text("dispatched_at IS NULL"),
            sqlite_where=text("dispatched_at IS NULL"),
        ),
        {"sqlite_autoincrement": True},
    )


class WebhookDelivery(Base):
    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(primary_key=True)
    # The id receivers deduplicate by (`X-Marketplace-Delivery`): the same on every attempt.
    uid: Mapped[str] = mapped_column(String(26), unique=True, nullable=False)
    subscription_id: Mapped[int] = mapped_column(
        ForeignKey("webhook_subscriptions.id", ondelete="CASCADE"), nullable=False
    )
    event_id: Mapped[int] = mapped_column(
        _EVENT_ID, ForeignKey("webhook_events.id", ondelete="CASCADE"), index=True, nullable=False
    )
    event: Mapped[str] = mapped_column(String(32), nullable=False)
    # The body sent on every attempt, made once when the event was dispatched.
    body: Mapped[str] = mapped_column(Text, nullable=False)
    state: Mapped[str] = mapped_column(String(16), default=DeliveryState.PENDING.value, nullable=False)
    attempts: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    # When it is due; while a worker sends it, when that worker's claim lapses.
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)
    # The claim of the worker sending it: only that claim may record the outcome.
    claim: Mapped[str | None] = mapped_column(String(26))
    first_attempt_at: Mapped[datetime | None] = mapped_column(DateTime())
    last_attempt_at: Mapped[datetime | None] = mapped_column(DateTime())
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime())
    last_status: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(String(255))
    last_response: Mapped[str | None] = mapped_column(String(1000))
    redelivery_of: Mapped[int | None] = mapped_column(
        ForeignKey("webhook_deliveries.id", ondelete="SET NULL")
    )
    created_at: Mapped[datetime] = mapped_column(DateTime(), nullable=False)

    __table_args__ = (
        CheckConstraint("state IN ('pending', 'delivered', 'failed')", name="state"),
        Index(
            "ix_webhook_deliveries_due",
            "next_attempt_at",
            postgresql_where=text("state = 'pending'"),
            sqlite_where=text("state = 'pending'"),
        ),
        Index("ix_webhook_deliveries_subscription_id_id", "subscription_id", "id"),
        Index(
            "ix_webhook_deliveries_redelivery_of",
            "redelivery_of",
            postgresql_where=text("redelivery_of IS NOT NULL"),
            sqlite_where=text("redelivery_of IS NOT NULL"),
        ),
    )
