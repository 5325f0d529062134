"""Gift (discount) codes issued by sellers."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    SmallInteger,
    String,
)
from sqlalchemy.orm import Mapped, mapped_column

from marketplace.models.base import Base, Timestamped


class Gift(Timestamped, Base):
    __tablename__ = "gifts"

    id: Mapped[int] = mapped_column(primary_key=True)
    code: Mapped[str] = mapped_column(String(32), nullable=False)
    # What codes are compared by: `catalogue.gifts.gift_code_key(code)`, written with the code;
    # case folding may write up to three characters for one.
    code_key: Mapped[str] = mapped_column(String(96), nullable=False)
    percentage: Mapped[int] = mapped_column(SmallInteger, nullable=False)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, nullable=False)
    starts_at: Mapped[datetime | None] = mapped_column(DateTime())
    expires_at: Mapped[datetime | None] = mapped_column(DateTime())
    max_uses: Mapped[int | None] = mapped_column(Integer)
    uses: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    seller_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), index=True)
    # Null: the code applies to every resource of the seller.
    resource_id: Mapped[int | None] = mapped_column(
        ForeignKey("resources.id", ondelete="CASCADE"), index=True
    )

    __table_args__ = (
        CheckConstraint("percentage BETWEEN 1 AND 100", name="percentage"),
        # Codes are looked up by their key, so they are unique by it.
        Index("uq_gifts_code_key", code_key, unique=True),
    )
