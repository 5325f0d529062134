"""Outgoing webhooks: subscriptions, an outbox of events written by triggers, deliveries

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27

Every change a webhook tells of becomes a row of `webhook_events` in the transaction that makes
the change, written by triggers so that every writer is covered: the API's grant, the back office,
`marketplace load`, the importer and an operator's own SQL alike. Nothing is written while no
enabled subscription names the event (the triggers look first), so a catalogue without webhooks
pays one look-up in a table of a few rows per statement (PostgreSQL) or row (SQLite).

| Table | Change | Event |
|---|---|---|
| versions | a row inserted | `release.published` (resource, version) |
| resources | the status changes, or the row is soft-deleted or restored (status `deleted`) | `resource.status_changed` (before, after) |
| payments | the status changes | `payment.status_changed` (before, after; the buyer) |
| accesses | a row inserted active, or `revoked` set false | `access.granted` (the member, the source) |
| accesses | `revoked` set true, or an active row deleted | `access.revoked` |

PostgreSQL: statement triggers reading the statement's transition tables (one insert per
statement, whatever its number of rows), like those of 0006 and 0008. SQLite: row triggers.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None



def _wanted(pattern: str) -> str:
    """Whether an enabled subscription names an event like `pattern` (event names are no part of
    one another, `access.%` is both access events)."""
    return f"EXISTS (SELECT 1 FROM webhook_subscriptions WHERE enabled AND events LIKE '%{pattern}%')"


# What each table's events are called, for the check.
_WANTED = {
    "versions": _wanted("release.published"),
    "resources": _wanted("resource.status_changed"),
    "payments": _wanted("payment.status_changed"),
    "accesses": _wanted("access."),
}
_EVENT_COLUMNS = "(kind, resource_id, user_id, subject_id, old_value, new_value, created_at)"

# A resource's status as its events tell it: a soft-deleted one is `deleted`.
_SHOWN_STATUS = "CASE WHEN {row}.deleted_at IS NULL THEN {row}.status ELSE 'deleted' END"

# --- PostgreSQL: one function per table, run once per statement --------------------------------

_PG_NOW = "(now() AT TIME ZONE 'UTC')"

_POSTGRESQL_FUNCTIONS = {
    "versions": (
        "INSERT",
        f"""
        INSERT INTO webhook_events {_EVENT_COLUMNS}
        SELECT 'release.published', n.resource_id, NULL, n.id, NULL, NULL, {_PG_NOW}
        FROM new_rows AS n ORDER BY n.id;
        """,
    ),
    "resources": (
        "UPDATE",
        f"""
        INSERT INTO webhook_events {_EVENT_COLUMNS}
        SELECT 'resource.status_changed', n.id, NULL, n.id,
            {_SHOWN_STATUS.format(row="o")}, {_SHOWN_STATUS.format(row="n")}, {_PG_NOW}
        FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
        WHERE {_SHOWN_STATUS.format(row="o")} IS DISTINCT FROM {_SHOWN_STATUS.format(row="n")}
        ORDER BY n.id;
        """,
    ),
    "payments": (
        "UPDATE",
        f"""
        INSERT INTO webhook_events {_EVENT_COLUMNS}
        SELECT 'payment.status_changed', n.resource_id, n.buyer_id, n.id, o.status, n.status, {_PG_NOW}
        FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
        WHERE o.status IS DISTINCT FROM n.status
        ORDER BY n.id;
        """,
    ),
    "accesses_insert": (
        "INSERT",
        f"""
        INSERT INTO webhook_events {_EVENT_COLUMNS}
        SELECT 'access.granted', n.resource_id, n.user_id, n.id, NULL, n.source, {_PG_NOW}
        FROM new_rows AS n WHERE NOT n.revoked ORDER BY n.id;
        """,
    ),
    "accesses_update": (
        "UPDATE",
        f"""
        INSERT INTO webhook_events {_EVENT_COLUMNS}
        SELECT CASE WHEN n.revoked THEN 'access.revoked' ELSE 'access.granted' END,
            n.resource_id, n.user_id, n.id, NULL, n.source, {_PG_NOW}
        FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
        WHERE o.revoked IS DISTINCT FROM n.revoked
        ORDER BY n.id;
        """,
    ),
    "accesses_delete": (
        "DELETE",
        f"""
        INSERT INTO webhook_events {_EVENT_COLUMNS}
        SELECT 'access.revoked', o.resource_id, o.user_id, o.id, NULL, o.source, {_PG_NOW}
        FROM old_rows AS o WHERE NOT o.revoked ORDER BY o.id;
        """,
    ),
}


def _postgresql_function(name: str, body: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION marketplace_webhook_{name}() RETURNS trigger AS $$
BEGIN
    IF {_WANTED[name.split("_", 1)[0]]} THEN
        {body}
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
"""


def _postgresql_trigger(name: str, operation: str) -> str:
    table = name.split("_", 1)[0]
    transition = {
        "INSERT": "REFERENCING NEW TABLE AS new_rows",
        "UPDATE": "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows",
        "DELETE": "REFERENCING OLD TABLE AS old_rows",
    }[operation]
    return (
        f"CREATE TRIGGER {name}_webhook_event AFTER {operation} ON {table} {transition} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION marketplace_webhook_{name}()"
    )


# --- SQLite: row triggers ------------------------------------------------------------------------

_SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f', 'now')"


def _sqlite_event(values: str) -> str:
    return f"INSERT INTO webhook_events {_EVENT_COLUMNS} VALUES ({values}, {_SQLITE_NOW});"


_SQLITE_TRIGGERS = {
    "versions_webhook_event": (
        "AFTER INSERT ON versions",
        _WANTED["versions"],
        _sqlite_event("'release.published', NEW.resource_id, NULL, NEW.id, NULL, NULL"),
    ),
    "resources_webhook_event": (
        "AFTER UPDATE OF status, deleted_at ON resources",
        f"({_SHOWN_STATUS.format(row='OLD')}) IS NOT ({_SHOWN_STATUS.format(row='NEW')}) AND {_WANTED['resources']}",
        _sqlite_event(
            f"'resource.status_changed', NEW.id, NULL, NEW.id, "
            f"{_SHOWN_STATUS.format(row='OLD')}, {_SHOWN_STATUS.format(row='NEW')}"
        ),
    ),
    "payments_webhook_event": (
        "AFTER UPDATE OF status ON payments",
        f"OLD.status IS NOT NEW.status AND {_WANTED['payments']}",
        _sqlite_event("'payment.status_changed', NEW.resource_id, NEW.buyer_id, NEW.id, OLD.status, NEW.status"),
    ),
    "accesses_insert_webhook_event": (
        "AFTER INSERT ON accesses",
        f"NOT NEW.revoked AND {_WANTED['accesses']}",
        _sqlite_event("'access.granted', NEW.resource_id, NEW.user_id, NEW.id, NULL, NEW.source"),
    ),
    "accesses_update_webhook_event": (
        "AFTER UPDATE OF revoked ON accesses",
        f"OLD.revoked IS NOT NEW.revoked AND {_WANTED['accesses']}",
        _sqlite_event(
            "CASE WHEN NEW.revoked THEN 'access.revoked' ELSE 'access.granted' END, "
            "NEW.resource_id, NEW.user_id, NEW.id, NULL, NEW.source"
        ),
    ),
    "accesses_delete_webhook_event": (
        "AFTER DELETE ON accesses",
        f"NOT OLD.revoked AND {_WANTED['accesses']}",
        _sqlite_event("'access.revoked', OLD.resource_id, OLD.user_id, OLD.id, NULL, OLD.source"),
    ),
}


def _timestamps() -> list[sa.Column[object]]:
    return [
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
    ]


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    event_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "webhook_subscriptions",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("url", sa.String(2000), nullable=False),
        sa.Column("events", sa.String(255), nullable=False),
        sa.Column("resource_id", sa.Integer(), nullable=True),
        sa.Column("author_id", sa.Integer(), nullable=True),
        sa.Column("format", sa.String(8), nullable=False),
        sa.Column("secret", sa.String(255), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("failing_since", sa.DateTime(), nullable=True),
        sa.Column("disabled_reason", sa.String(255), nullable=True),
        *_timestamps(),
        sa.ForeignKeyConstraint(
            ["resource_id"],
            ["resources.id"],
            name="fk_webhook_subscriptions_resource_id_resources",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["author_id"], ["users.id"], name="fk_webhook_subscriptions_author_id_users", ondelete="CASCADE"
        ),
        sa.CheckConstraint("format IN ('json', 'chat')", name="ck_webhook_subscriptions_format"),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_subscriptions"),
        # Ids are never used twice (SQLite would reuse the largest one after a delete): the
        # activity log and the receivers name subscriptions and events by them.
        sqlite_autoincrement=True,
    )
    op.create_table(
        "webhook_events",
        sa.Column("id", event_id, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("resource_id", sa.Integer(), nullable=True),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("subject_id", sa.Integer(), nullable=True),
        sa.Column("old_value", sa.String(16), nullable=True),
        sa.Column("new_value", sa.String(16), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("dispatched_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_events"),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_webhook_events_undispatched",
        "webhook_events",
        ["id"],
        postgresql_where=sa.text("dispatched_at IS NULL"),
        sqlite_where=sa.text("dispatched_at IS NULL"),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("uid", sa.String(26), nullable=False),
        sa.Column("subscription_id", sa.Integer(), nullable=False),
        sa.Column("event_id", event_id, nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(), nullable=False),
        sa.Column("claim", sa.String(26), nullable=True),
        sa.Column("first_attempt_at", sa.DateTime(), nullable=True),
        sa.Column("last_attempt_at", sa.DateTime(), nullable=True),
        sa.Column("delivered_at", sa.DateTime(), nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(255), nullable=True),
        sa.Column("last_response", sa.String(1000), nullable=True),
        sa.Column("redelivery_of", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["webhook_subscriptions.id"],
            name="fk_webhook_deliveries_subscription_id_webhook_subscriptions",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["webhook_events.id"],
            name="fk_webhook_deliveries_event_id_webhook_events",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["redelivery_of"],
            ["webhook_deliveries.id"],
            name="fk_webhook_deliveries_redelivery_of_webhook_deliveries",
            ondelete="SET NULL",
        ),
        sa.CheckConstraint("state IN ('pending', 'delivered', 'failed')", name="ck_webhook_deliveries_state"),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_deliveries"),
        sa.UniqueConstraint("uid", name="uq_webhook_deliveries_uid"),
    )
    op.create_index("ix_webhook_deliveries_event_id", "webhook_deliveries", ["event_id"])
    op.create_index(
        "ix_webhook_deliveries_due",
        "webhook_deliveries",
        ["next_attempt_at"],
        postgresql_where=sa.text("state = 'pending'"),
        sqlite_where=sa.text("state = 'pending'"),
    )
    op.create_index(
        "ix_webhook_deliveries_subscription_id_id", "webhook_deliveries", ["subscription_id", "id"]
    )
    # Deleting a delivery sets its redeliveries' `redelivery_of` to null: found by this index, not a
    # scan of the table per deleted row (pruning deletes a thousand at once).
    op.create_index(
        "ix_webhook_deliveries_redelivery_of",
        "webhook_deliveries",
        ["redelivery_of"],
        postgresql_where=sa.text("redelivery_of IS NOT NULL"),
        sqlite_where=sa.text("redelivery_of IS NOT NULL"),
    )
    if dialect == "postgresql":
        for name, (operation, body) in _POSTGRESQL_FUNCTIONS.items():
            op.execute(_postgresql_function(name, body))
            op.execute(_postgresql_trigger(name, operation))
    elif dialect == "sqlite":
        for name, (when, condition, body) in _SQLITE_TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {when} FOR EACH ROW WHEN {condition} BEGIN {body} END")


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        for name in _POSTGRESQL_FUNCTIONS:
            table = name.split("_", 1)[0]
            op.execute(f"DROP TRIGGER IF EXISTS {name}_webhook_event ON {table}")
            op.execute(f"DROP FUNCTION IF EXISTS marketplace_webhook_{name}()")
    elif dialect == "sqlite":
        for name in _SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_events")
    op.drop_table("webhook_subscriptions")
