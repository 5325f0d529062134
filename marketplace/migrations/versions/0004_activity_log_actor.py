"""Activity log: who did it (the back office's operator), and reads by operator, route and time

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("activity_log", schema=None) as batch_op:
        batch_op.add_column(sa.Column("actor", sa.String(length=255), nullable=True))
        batch_op.create_index(batch_op.f("ix_activity_log_created_at"), ["created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_activity_log_actor"), ["actor"], unique=False)
        batch_op.create_index(batch_op.f("ix_activity_log_via"), ["via"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("activity_log", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_activity_log_via"))
        batch_op.drop_index(batch_op.f("ix_activity_log_actor"))
        batch_op.drop_index(batch_op.f("ix_activity_log_created_at"))
        batch_op.drop_column("actor")
