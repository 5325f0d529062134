"""Change notices that name what changed: the table and the resources it touched

PostgreSQL: the statement triggers of 0003 notified with an empty payload ("something changed").
They are replaced by statement triggers that read the statement's transition tables and notify
`table:ids` (the resources the rows belong to, `RESOURCE_COLUMNS` of marketplace/database/changes.py),
`table:*` beyond `MAX_NAMED_RESOURCES` ids, `table:` for a table that belongs to no resource, and
an empty payload (everything) for a TRUNCATE. Each also appends its payload to the transaction's
`marketplace.changes` setting, which the service's own writer reads before committing.

SQLite: `PRAGMA data_version` says only that another connection committed. Row triggers write each
change into `change_log` (table, resource id) inside the writing transaction; workers read it past
the last id they saw. Every thousandth row trims the log to its last 10,000 rows; a worker that
falls further behind sees a gap in the ids and takes it as "everything changed".

Revision ID: 0008
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# The tables of 0003, with the column naming the resource a row belongs to (None: no resource).
TABLES: dict[str, str | None] = {
    "categories": None,
    "users": None,
    "chat_accounts": None,
    "resources": "id",
    "versions": "resource_id",
    "reviews": "resource_id",
    "gifts": None,
    "payments": None,
    "accesses": "resource_id",
    "activity_log": None,
}
# Kept equal to marketplace.database.changes.MAX_NAMED_RESOURCES (a migration does not import the
# service's modules that may change after it).
MAX_NAMED_RESOURCES = 500
LOG_KEPT_ROWS = 10_000

_POSTGRESQL_FUNCTION = f"""
CREATE OR REPLACE FUNCTION marketplace_notice_of_statement() RETURNS trigger AS $$
DECLARE
    touched_sql text;
    counted bigint;
    ids text;
    notice text;
    marked text;
    collected text;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        notice := '';
    ELSIF TG_NARGS = 0 THEN
        notice := TG_TABLE_NAME || ':';
    ELSE
        IF TG_OP = 'INSERT' THEN
            touched_sql := format('SELECT %1$I AS rid FROM new_rows', TG_ARGV[0]);
        ELSIF TG_OP = 'DELETE' THEN
            touched_sql := format('SELECT %1$I AS rid FROM old_rows', TG_ARGV[0]);
        ELSE
            touched_sql := format(
                'SELECT %1$I AS rid FROM new_rows UNION ALL SELECT %1$I FROM old_rows', TG_ARGV[0]
            );
        END IF;
        EXECUTE 'SELECT count(*), string_agg(rid::text, '','' ORDER BY rid) FROM '
            || '(SELECT DISTINCT rid FROM (' || touched_sql || ') AS touched '
            || 'WHERE rid IS NOT NULL LIMIT {MAX_NAMED_RESOURCES + 1}) AS named'
            INTO counted, ids;
        IF counted > {MAX_NAMED_RESOURCES} THEN
            notice := TG_TABLE_NAME || ':*';
        ELSE
            notice := TG_TABLE_NAME || ':' || coalesce(ids, '');
        END IF;
    END IF;
    -- A statement that touched no row still notifies (naming no resource): a writing transaction
    -- always sends a notice.
    PERFORM pg_notify('marketplace_changes', notice);
    marked := CASE WHEN notice = '' THEN '!' ELSE notice END;
    collected := coalesce(current_setting('marketplace.changes', true), '');
    IF collected = '' THEN
        collected := marked;
    ELSIF collected <> '!' THEN
        collected := collected || ';' || marked;
        -- A transaction too large to name its changes changed everything.
        IF length(collected) > 7000 THEN
            collected := '!';
        END IF;
    END IF;
    PERFORM set_config('marketplace.changes', collected, true);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
"""


def _postgresql_triggers(table: str, column: str | None) -> list[str]:
    function = "marketplace_notice_of_statement"
    argument = f"'{column}'" if column else ""
    if column is None:
        return [
            f"CREATE TRIGGER {table}_notice AFTER INSERT OR UPDATE OR DELETE ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
        ]
    # Transition tables allow one event per trigger.
    return [
        f"CREATE TRIGGER {table}_notice_insert AFTER INSERT ON {table} REFERENCING NEW TABLE AS new_rows "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {function}({argument})",
        f"CREATE TRIGGER {table}_notice_update AFTER UPDATE ON {table} "
        f"REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {function}({argument})",
        f"CREATE TRIGGER {table}_notice_delete AFTER DELETE ON {table} REFERENCING OLD TABLE AS old_rows "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {function}({argument})",
    ]


def _postgresql_trigger_names(table: str, column: str | None) -> list[str]:
    if column is None:
        return [f"{table}_notice"]
    return [f"{table}_notice_insert", f"{table}_notice_update", f"{table}_notice_delete"]


def _sqlite_triggers(table: str, column: str | None) -> list[str]:
    new = f"NEW.{column}" if column else "NULL"
    old = f"OLD.{column}" if column else "NULL"
    log = "INSERT INTO change_log (table_name, resource_id) VALUES"
    return [
        f"CREATE TRIGGER {table}_logged_insert AFTER INSERT ON {table} "
        f"BEGIN {log} ('{table}', {new}); END",
        f"CREATE TRIGGER {table}_logged_update AFTER UPDATE ON {table} "
        f"BEGIN {log} ('{table}', {new}); {log} ('{table}', {old}); END",
        f"CREATE TRIGGER {table}_logged_delete AFTER DELETE ON {table} "
        f"BEGIN {log} ('{table}', {old}); END",
    ]


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        for table in TABLES:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_notify_change ON {table}")
        op.execute("DROP FUNCTION IF EXISTS marketplace_notify_change()")
        op.execute(_POSTGRESQL_FUNCTION)
        for table, column in TABLES.items():
            for statement in _postgresql_triggers(table, column):
                op.execute(statement)
            op.execute(
                f"CREATE TRIGGER {table}_notice_truncate AFTER TRUNCATE ON {table} "
                "FOR EACH STATEMENT EXECUTE FUNCTION marketplace_notice_of_statement()"
            )
    elif dialect == "sqlite":
        op.execute(
            "CREATE TABLE change_log (id INTEGER PRIMARY KEY AUTOINCREMENT, "
            "table_name VARCHAR(64) NOT NULL, resource_id INTEGER)"
        )
        op.execute(
            "CREATE TRIGGER change_log_trimmed AFTER INSERT ON change_log "
            f"WHEN NEW.id % 1000 = 0 BEGIN DELETE FROM change_log WHERE id <= NEW.id - {LOG_KEPT_ROWS}; END"
        )
        for table, column in TABLES.items():
            for statement in _sqlite_triggers(table, column):
                op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        for table, column in TABLES.items():
            for name in [*_postgresql_trigger_names(table, column), f"{table}_notice_truncate"]:
                op.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
        op.execute("DROP FUNCTION IF EXISTS marketplace_notice_of_statement()")
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
    elif dialect == "sqlite":
        for table in TABLES:
            for event in ("insert", "update", "delete"):
                op.execute(f"DROP TRIGGER IF EXISTS {table}_logged_{event}")
        op.execute("DROP TABLE IF EXISTS change_log")
