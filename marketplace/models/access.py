"""Members' accesses to resources: bought, granted by hand or through a gift."""

from __future__ import annotations

import enum

from sqlalchemy import Boolean, CheckConstraint, ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from marketplace.models.base import Base, Timestamped


class AccessSource(enum.StrEnum):
    PURCHASE = "purchase"
    MANUAL = "manual"
    GIFT = "gift"


class Access(Timestamped, Base):
    __tablename__ = "accesses"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), nullable=False)
    resource_id: Mapped[int] = mapped_column(ForeignKey("resources.id", ondelete="CASCADE"), nullable=False)
    payment_id: Mapped[int | None] = mapped_column(ForeignKey("payments.id", ondelete="SET NULL"), index=True)
    source: Mapped[str] = mapped_column(String(16), default=AccessSource.MANUAL.value, nullable=False)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)

    __table_args__ = (
        # One row per member and resource: a grant reactivates a revoked row instead of adding one.
        UniqueConstraint("user_id", "resource_id"),
        CheckConstraint("source IN ('purchase', 'manual', 'gift')", name="source"),
        # `purchases` of a resource counts its unrevoked purchase rows.
        Index("ix_accesses_resource_id_source_revoked", "resource_id", "source", "revoked"),
    )
