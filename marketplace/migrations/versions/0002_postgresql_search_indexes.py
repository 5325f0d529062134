"""PostgreSQL search indexes: trigram indexes for the `q` filter, a pattern index for name prefixes

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # Search filters name and tagline by case-insensitive substring (ILIKE '%q%'): only trigram
    # indexes serve that on a large catalogue.
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    op.execute("CREATE INDEX IF NOT EXISTS ix_resources_name_trgm ON resources USING gin (name gin_trgm_ops)")
    op.execute("CREATE INDEX IF NOT EXISTS ix_resources_tag_trgm ON resources USING gin (tag gin_trgm_ops)")
    # The user-name lookup is lower(name) LIKE 'prefix%': a pattern-ops index serves it in any locale.
    op.execute("CREATE INDEX IF NOT EXISTS ix_users_lower_name_pattern ON users (lower(name) text_pattern_ops)")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP INDEX IF EXISTS ix_users_lower_name_pattern")
    op.execute("DROP INDEX IF EXISTS ix_resources_tag_trgm")
    op.execute("DROP INDEX IF EXISTS ix_resources_name_trgm")
