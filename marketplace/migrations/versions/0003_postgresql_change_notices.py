"""PostgreSQL change notices: every statement that changes a table notifies `marketplace_changes`

The service's own writers already notify (marketplace/database/changes.py); the triggers make writes from
anywhere else (psql, another tool) reach the workers' caches too. PostgreSQL delivers one notice
per transaction for identical ones, so a transaction costs one notice however many rows it writes.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TABLES = (
    "categories",
    "users",
    "chat_accounts",
    "resources",
    "versions",
    "reviews",
    "gifts",
    "payments",
    "accesses",
    "activity_log",
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        """
        CREATE OR REPLACE FUNCTION marketplace_notify_change() RETURNS trigger AS $$
        BEGIN
            PERFORM pg_notify('marketplace_changes', '');
            RETURN NULL;
        END;
        $$ LANGUAGE plpgsql
        """
    )
    for table in TABLES:
        op.execute(
            f"CREATE TRIGGER {table}_notify_change AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE "
            f"ON {table} FOR EACH STATEMENT EXECUTE FUNCTION marketplace_notify_change()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.execute(f"DROP TRIGGER IF EXISTS {table}_notify_change ON {table}")
    op.execute("DROP FUNCTION IF EXISTS marketplace_notify_change()")
