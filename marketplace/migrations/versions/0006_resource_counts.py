"""Kept counts: each resource's purchases and ratings in `resource_counts`, kept by triggers

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

A search page printed the purchases, the average rating and the number of reviews of each card by
counting `accesses` and `reviews` per row and per request. They are now kept in a table of their
own, one row per resource, written by triggers on those two tables (on PostgreSQL statement
triggers reading the statement's transition tables, on SQLite row triggers), so that every writer
keeps them, the service's and an operator's SQL alike. The rules are the ones the counting queries had:

- `purchases`: accesses whose source is `purchase` and that are not revoked;
- `rating_sum`, `rating_count`: every review of the resource (the average is derived at read time).

A side table rather than columns on `resources`: a grant or a review then rewrites a narrow row
with one index, not the resource's wide row and its every index (the trigram indexes among them),
and the resource's own writes never wait on a sale.

An increment inserts the resource's row when it has none; a decrement only updates (the row exists,
since whatever it undoes was counted), so that rows deleted with their resource never recreate one.
The counts are filled from the existing rows here. On SQLite a later batch migration that rebuilds
`accesses` or `reviews` drops their triggers with the table: it must create them again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


# SQLite's row triggers: what each one runs, and under which condition.


def _purchase(row: str) -> str:
    """The condition under which an access row counts as a purchase."""
    return f"{row}.source = 'purchase' AND NOT {row}.revoked"


_ADD_PURCHASE = (
    "INSERT INTO resource_counts (resource_id, purchases) VALUES (NEW.resource_id, 1) "
    "ON CONFLICT (resource_id) DO UPDATE SET purchases = resource_counts.purchases + 1"
)
_REMOVE_PURCHASE = "UPDATE resource_counts SET purchases = purchases - 1 WHERE resource_id = OLD.resource_id"
_ADD_REVIEW = (
    "INSERT INTO resource_counts (resource_id, rating_sum, rating_count) VALUES (NEW.resource_id, NEW.rating, 1) "
    "ON CONFLICT (resource_id) DO UPDATE SET rating_sum = resource_counts.rating_sum + NEW.rating, "
    "rating_count = resource_counts.rating_count + 1"
)
_REMOVE_REVIEW = (
    "UPDATE resource_counts SET rating_sum = rating_sum - OLD.rating, rating_count = rating_count - 1 "
    "WHERE resource_id = OLD.resource_id"
)
# The updates that can move a count; others (a timestamp, a payment link) fire nothing. SQLite
# spells IS DISTINCT FROM as IS NOT.
_ACCESS_COUNT_CHANGED = (
    "OLD.source IS NOT NEW.source OR OLD.revoked IS NOT NEW.revoked OR OLD.resource_id IS NOT NEW.resource_id"
)
_REVIEW_COUNT_CHANGED = "OLD.rating IS NOT NEW.rating OR OLD.resource_id IS NOT NEW.resource_id"

# Every resource with something to count, from the rows as they are.
_FILL = """
INSERT INTO resource_counts (resource_id, purchases, rating_sum, rating_count)
SELECT resource_id, SUM(purchases), SUM(rating_sum), SUM(rating_count) FROM (
    SELECT resource_id, COUNT(*) AS purchases, 0 AS rating_sum, 0 AS rating_count
    FROM accesses WHERE source = 'purchase' AND NOT revoked GROUP BY resource_id
    UNION ALL
    SELECT resource_id, 0, SUM(rating), COUNT(*) FROM reviews GROUP BY resource_id
) AS counted
GROUP BY resource_id
"""


def upgrade() -> None:
    op.create_table(
        "resource_counts",
        sa.Column("resource_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("purchases", sa.Integer(), server_default="0", nullable=False),
        sa.Column("rating_sum", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("rating_count", sa.Integer(), server_default="0", nullable=False),
        sa.ForeignKeyConstraint(
            ["resource_id"],
            ["resources.id"],
            name=op.f("fk_resource_counts_resource_id_resources"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("resource_id", name=op.f("pk_resource_counts")),
    )
    if op.get_bind().dialect.name == "postgresql":
        _create_postgresql_triggers()
    else:
        _create_sqlite_triggers()
    op.execute(_FILL)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in ("accesses", "reviews"):
            for event in ("insert", "update", "delete", "truncate"):
                op.execute(f"DROP TRIGGER IF EXISTS {table}_resource_counts_{event} ON {table}")
        for function in ("count_accesses", "count_reviews", "zero_counts"):
            op.execute(f"DROP FUNCTION IF EXISTS resource_counts_{function}()")
    else:
        for table in ("accesses", "reviews"):
            for trigger in ("insert", "delete", "update_removes", "update_adds"):
                op.execute(f"DROP TRIGGER IF EXISTS {table}_resource_counts_{trigger}")
    op.drop_table("resource_counts")


# Per counted table: each row's share of the counts, from a transition table of the statement, and
# the columns it adds to (PostgreSQL's statement triggers).
_COUNTED_ROWS = {
    "accesses": (
        "SELECT resource_id, {sign}1 AS purchases FROM {rows} WHERE source = 'purchase' AND NOT revoked",
        ("purchases",),
    ),
    "reviews": (
        "SELECT resource_id, {sign}rating AS rating_sum, {sign}1 AS rating_count FROM {rows}",
        ("rating_sum", "rating_count"),
    ),
}


def _create_postgresql_triggers() -> None:
    # Statement triggers reading the statement's transition tables: a statement writing many rows
    # (COPY, INSERT ... SELECT, an import's batch, a cascade) adjusts each resource's row once, in
    # resource order, instead of once per row; row triggers made a bulk load quadratic, each
    # update of a row walking the versions the same transaction had made of it.
    for table, (counted_rows, columns) in _COUNTED_ROWS.items():
        sums = ", ".join(f"SUM({column}) AS {column}" for column in columns)
        changed = " OR ".join(f"SUM({column}) <> 0" for column in columns)
        added = ", ".join(f"{column} = resource_counts.{column} + EXCLUDED.{column}" for column in columns)
        removed = ", ".join(f"{column} = resource_counts.{column} - removed.{column}" for column in columns)
        upsert = (
            f"INSERT INTO resource_counts (resource_id, {', '.join(columns)}) "
            f"SELECT resource_id, {sums} FROM ({{rows}}) AS changed GROUP BY resource_id HAVING {changed} "
            f"ORDER BY resource_id ON CONFLICT (resource_id) DO UPDATE SET {added}"
        )
        op.execute(
            f"""
            CREATE FUNCTION resource_counts_count_{table}() RETURNS trigger AS $$
            BEGIN
                IF TG_OP = 'INSERT' THEN
                    {upsert.format(rows=counted_rows.format(sign="", rows="added"))};
                ELSIF TG_OP = 'UPDATE' THEN
                    {upsert.format(rows=counted_rows.format(sign="", rows="added") + " UNION ALL " + counted_rows.format(sign="-", rows="removed"))};
                ELSE
                    -- Only an update: the rows of a deleted resource may go with it, and must not
                    -- come back.
                    UPDATE resource_counts SET {removed}
                    FROM (SELECT resource_id, {sums} FROM ({counted_rows.format(sign="", rows="removed")}) AS gone
                          GROUP BY resource_id) AS removed
                    WHERE resource_counts.resource_id = removed.resource_id;
                END IF;
                RETURN NULL;
            END;
            $$ LANGUAGE plpgsql
            """
        )
    # TRUNCATE fires no row trigger: the counts of the emptied table go back to zero at once.
    op.execute(
        """
        CREATE FUNCTION resource_counts_zero_counts() RETURNS trigger AS $$
        BEGIN
            IF TG_TABLE_NAME = 'accesses' THEN
                UPDATE resource_counts SET purchases = 0 WHERE purchases <> 0;
            ELSE
                UPDATE resource_counts SET rating_sum = 0, rating_count = 0 WHERE rating_count <> 0;
            END IF;
            RETURN NULL;
        END;
        $$ LANGUAGE plpgsql
        """
    )
    for table in _COUNTED_ROWS:
        for event, transition_tables in (
            ("INSERT", "NEW TABLE AS added"),
            ("UPDATE", "OLD TABLE AS removed NEW TABLE AS added"),
            ("DELETE", "OLD TABLE AS removed"),
        ):
            op.execute(
                f"CREATE TRIGGER {table}_resource_counts_{event.lower()} AFTER {event} ON {table} "
                f"REFERENCING {transition_tables} FOR EACH STATEMENT EXECUTE FUNCTION resource_counts_count_{table}()"
            )
        op.execute(
            f"CREATE TRIGGER {table}_resource_counts_truncate AFTER TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION resource_counts_zero_counts()"
        )


def _create_sqlite_triggers() -> None:
    # SQLite has no trigger functions, no IF and no statement triggers: one row trigger per event
    # and direction, each guarded by its WHEN.
    for table, when_removed, remove, when_added, add, changed in (
        (
            "accesses",
            _purchase("OLD"),
            _REMOVE_PURCHASE,
            _purchase("NEW"),
            _ADD_PURCHASE,
            _ACCESS_COUNT_CHANGED,
        ),
        ("reviews", "1", _REMOVE_REVIEW, "1", _ADD_REVIEW, _REVIEW_COUNT_CHANGED),
    ):
        for trigger, event, when, body in (
            ("insert", "INSERT", when_added, add),
            ("delete", "DELETE", when_removed, remove),
            ("update_removes", "UPDATE", f"({changed}) AND ({when_removed})", remove),
            ("update_adds", "UPDATE", f"({changed}) AND ({when_added})", add),
        ):
            op.execute(
                f"CREATE TRIGGER {table}_resource_counts_{trigger} AFTER {event} ON {table} "
                f"WHEN {when} BEGIN {body}; END"
            )
