"""Payments of resources, and invoices (payments without a resource)."""

from __future__ import annotations

import enum

from sqlalchemy import CheckConstraint, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from marketplace.models.base import Base, Timestamped


class PaymentStatus(enum.StrEnum):
    PENDING = "pending"
    PAID = "paid"
    UNPAID = "unpaid"
    REFUNDED = "refunded"
    DISPUTED = "disputed"
    CANCELLED = "cancelled"


class Payment(Timestamped, Base):
    __tablename__ = "payments"

    id: Mapped[int] = mapped_column(primary_key=True)
    # Public reference: an upper-case ULID.
    uid: Mapped[str] = mapped_column(String(26), unique=True, nullable=False)
    status: Mapped[str] = mapped_column(String(16), default=PaymentStatus.PENDING.value, nullable=False)
    amount_cents: Mapped[int] = mapped_column(Integer, nullable=False)
    currency: Mapped[str] = mapped_column(String(3), default="EUR", nullable=False)
    base_amount_cents: Mapped[int | None] = mapped_column(Integer)
    buyer_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), index=True)
    seller_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), index=True)
    resource_id: Mapped[int | None] = mapped_column(ForeignKey("resources.id"), index=True)
    gift_id: Mapped[int | None] = mapped_column(ForeignKey("gifts.id"), index=True)
    provider: Mapped[str | None] = mapped_column(String(32))
    provider_transaction_id: Mapped[str | None] = mapped_column(String(255), index=True)

    __table_args__ = (
        CheckConstraint(
            "status IN ('pending', 'paid', 'unpaid', 'refunded', 'disputed', 'cancelled')", name="status"
        ),
    )
