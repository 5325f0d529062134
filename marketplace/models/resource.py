"""Resources (plugins) sold or given away on the marketplace."""

from __future__ import annotations

import enum
from datetime import datetime
from decimal import Decimal

from sqlalchemy import BigInteger, CheckConstraint, DateTime, ForeignKey, Index, Numeric, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from marketplace.models.base import Base, Timestamped


class ResourceStatus(enum.StrEnum):
    PUBLISHED = "published"
    UNLISTED = "unlisted"
    DRAFT = "draft"
    PENDING = "pending"
    REJECTED = "rejected"


# Statuses an anonymous caller may resolve by id; search lists only the first.
PUBLIC_STATUSES = (ResourceStatus.PUBLISHED.value, ResourceStatus.UNLISTED.value)


class Resource(Timestamped, Base):
    __tablename__ = "resources"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True, nullable=False)
    category_id: Mapped[int | None] = mapped_column(ForeignKey("categories.id"), index=True)
    name: Mapped[str] = mapped_column(String(255), nullable=False)
    tag: Mapped[str] = mapped_column(String(160), default="", nullable=False)
    description: Mapped[str] = mapped_column(Text, default="", nullable=False)
    price: Mapped[Decimal] = mapped_column(Numeric(10, 2), default=Decimal("0"), nullable=False)
    status: Mapped[str] = mapped_column(String(16), default=ResourceStatus.PUBLISHED.value, nullable=False)
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime())
    unique_id: Mapped[str | None] = mapped_column(String(32), unique=True)
    stats_id: Mapped[str | None] = mapped_column(String(20))
    icon: Mapped[str | None] = mapped_column(String(255))
    slug: Mapped[str] = mapped_column(String(255), default="", nullable=False)
    download: Mapped[int] = mapped_column(BigInteger, default=0, nullable=False)
    current_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("versions.id", use_alter=True, ondelete="SET NULL"), index=True
    )

    __table_args__ = (
        CheckConstraint("status IN ('published', 'unlisted', 'draft', 'pending', 'rejected')", name="status"),
        # Search walks published, not deleted rows in id order.
        Index("ix_resources_status_id", "status", "id"),
    )
