"""Released builds of a resource."""

from __future__ import annotations

from sqlalchemy import BigInteger, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from marketplace.models.base import Base, Timestamped


class Version(Timestamped, Base):
    __tablename__ = "versions"

    id: Mapped[int] = mapped_column(primary_key=True)
    resource_id: Mapped[int] = mapped_column(
        ForeignKey("resources.id", ondelete="CASCADE"), index=True, nullable=False
    )
    version: Mapped[str] = mapped_column(String(32), nullable=False)
    title: Mapped[str] = mapped_column(String(255), default="", nullable=False)
    download: Mapped[int] = mapped_column(BigInteger, default=0, nullable=False)
    # Never exposed by the API.
    changelog: Mapped[str | None] = mapped_column(Text)
    file_name: Mapped[str | None] = mapped_column(String(255))
    file_size: Mapped[int | None] = mapped_column(BigInteger)
    checksum: Mapped[str | None] = mapped_column(String(128))

    # The release feeds read the newest releases first (migration 0010).
    __table_args__ = (Index("ix_versions_created_at_id", "created_at", "id"),)
