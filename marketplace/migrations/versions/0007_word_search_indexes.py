"""Indexes that find the resources whose name or tagline holds a text, without reading every row

Revision ID: 0007
Revises: 0005
Create Date: 2026-11-25

Search keeps its meaning (`q` is a case-insensitive substring of the name or the tagline, `%` and
`_` widening it): these indexes only narrow the rows the exact condition is then checked on
(`marketplace/catalogue/text_search.py`).

- PostgreSQL: a full-text index of every suffix of every word of the lowered name and tagline
  (a word: a run of ASCII letters and digits). A word `w` holds a query word `q` exactly when one
  of its suffixes starts with `q`, so the prefix query `'q':*` finds every row holding `q`, even
  inside a longer word (`art` in `party`), from one range of the index.
- SQLite: an FTS5 table of the lowered name and tagline with the trigram tokenizer, case
  sensitive since the text is already lowered by the service's own `lower()`, so that it folds
  case exactly as the search condition does. Triggers keep it in step with `resources`.

`search_generation` holds one number, moved by triggers on every write that can change which
resources a search finds (a resource added or removed, its name, tagline, status or deletion
changed) and by no other: the totals of searches are kept until it moves (`readers.py`).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# The expression the PostgreSQL index is built on; the search reads it by calling the same function.
_POSTGRESQL_FUNCTION = """
CREATE OR REPLACE FUNCTION resource_search_suffixes(name text, tag text) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(array_to_tsvector(array_agg(DISTINCT substr(word, start))), ''::tsvector)
    FROM regexp_split_to_table(lower(name || ' ' || tag), '[^a-z0-9]+') AS word,
         generate_series(1, length(word)) AS start
    WHERE word <> ''
$$
"""

_POSTGRESQL_GENERATION = (
    """
    CREATE OR REPLACE FUNCTION search_generation_moves() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE search_generation SET value = value + 1 WHERE id = 1;
        RETURN NULL;
    END
    $$
    """,
    # Once per statement: a bulk change moves it once.
    """
    CREATE TRIGGER search_generation_after_write
    AFTER INSERT OR DELETE OR TRUNCATE OR UPDATE OF id, name, tag, status, deleted_at ON resources
    FOR EACH STATEMENT EXECUTE FUNCTION search_generation_moves()
    """,
)

_MOVE_GENERATION = "UPDATE search_generation SET value = value + 1 WHERE id = 1;"

_SQLITE_TRIGGERS = (
    f"""
    CREATE TRIGGER resource_search_after_insert AFTER INSERT ON resources BEGIN
        INSERT INTO resource_search (rowid, name, tag) VALUES (new.id, lower(new.name), lower(new.tag));
        {_MOVE_GENERATION}
    END
    """,
    f"""
    CREATE TRIGGER resource_search_after_update AFTER UPDATE OF id, name, tag ON resources BEGIN
        DELETE FROM resource_search WHERE rowid = old.id;
        INSERT INTO resource_search (rowid, name, tag) VALUES (new.id, lower(new.name), lower(new.tag));
        {_MOVE_GENERATION}
    END
    """,
    f"""
    CREATE TRIGGER resource_search_after_listing_change AFTER UPDATE OF status, deleted_at ON resources BEGIN
        {_MOVE_GENERATION}
    END
    """,
    f"""
    CREATE TRIGGER resource_search_after_delete AFTER DELETE ON resources BEGIN
        DELETE FROM resource_search WHERE rowid = old.id;
        {_MOVE_GENERATION}
    END
    """,
)


def upgrade() -> None:
    op.create_table(
        "search_generation",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("value", sa.BigInteger, nullable=False),
    )
    op.execute("INSERT INTO search_generation (id, value) VALUES (1, 0)")
    if op.get_bind().dialect.name == "postgresql":
        for statement in _POSTGRESQL_GENERATION:
            op.execute(statement)
        op.execute(_POSTGRESQL_FUNCTION)
        op.execute(
            "CREATE INDEX IF NOT EXISTS ix_resources_search_suffixes ON resources "
            "USING gin (resource_search_suffixes(name, tag))"
        )
        return
    # lower() here is the service's (database/engine.py), registered on every connection it opens.
    op.execute(
        "CREATE VIRTUAL TABLE resource_search USING fts5(name, tag, tokenize = 'trigram case_sensitive 1')"
    )
    op.execute(
        "INSERT INTO resource_search (rowid, name, tag) SELECT id, lower(name), lower(tag) FROM resources"
    )
    for trigger in _SQLITE_TRIGGERS:
        op.execute(trigger)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS search_generation_after_write ON resources")
        op.execute("DROP FUNCTION IF EXISTS search_generation_moves()")
        op.execute("DROP INDEX IF EXISTS ix_resources_search_suffixes")
        op.execute("DROP FUNCTION IF EXISTS resource_search_suffixes(text, text)")
    else:
        for name in (
            "resource_search_after_delete",
            "resource_search_after_listing_change",
            "resource_search_after_update",
            "resource_search_after_insert",
        ):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute("DROP TABLE IF EXISTS resource_search")
    op.drop_table("search_generation")
