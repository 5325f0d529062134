"""Activity log: what was done to whom, through which route or by which operator, from which
(hashed) address; for the back office's changes, what the row was before and after."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from marketplace.models.base import Base, utcnow


class Activity(Base):
    __tablename__ = "activity_log"

    id: Mapped[int] = mapped_column(primary_key=True)
    event: Mapped[str] = mapped_column(String(64), index=True, nullable=False)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), index=True)
    resource_id: Mapped[int | None] = mapped_column(
        ForeignKey("resources.id", ondelete="SET NULL"), index=True
    )
    access_id: Mapped[int | None] = mapped_column(ForeignKey("accesses.id", ondelete="SET NULL"))
    via: Mapped[str | None] = mapped_column(String(64), index=True)
    # Who did it, for what an operator does outside the API (`--by`, or the system user).
    actor: Mapped[str | None] = mapped_column(String(255), index=True)
    # HMAC-SHA256 of the client address; the raw address is never stored.
    ip_hash: Mapped[str | None] = mapped_column(String(64))
    properties: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=utcnow, index=True, nullable=False)
