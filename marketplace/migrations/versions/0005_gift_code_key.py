"""Gift codes compared by a key computed in Python (NFC, case folded), stored and unique

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25

The unique index on lower(code) compared codes as each database lowers them, which differs
between PostgreSQL and Python (a final capital sigma) and ignores Unicode normalisation (`Café`
composed and decomposed were two codes). Every existing row gets its key here; codes that share a
key would be one code from now on, so the upgrade stops and names them rather than pick one.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from alembic import op
from alembic.operations import BatchOperations

# The service's own comparison: the key written here is the one its lookups compute.
from marketplace.catalogue.gifts import gift_code_key

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_gifts = sa.table("gifts", sa.column("id", sa.Integer), sa.column("code", sa.String), sa.column("code_key", sa.String))


def upgrade() -> None:
    with op.batch_alter_table("gifts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("code_key", sa.String(length=96), nullable=True))
    connection = op.get_bind()
    rows = connection.execute(sa.select(_gifts.c.id, _gifts.c.code).order_by(_gifts.c.id)).all()
    owners: dict[str, str] = {}
    clashes: list[str] = []
    for gift_id, code in rows:
        key = gift_code_key(code)
        if key in owners:
            clashes.append(f"{code!r} (id {gift_id}) is the code {owners[key]}")
            continue
        owners[key] = f"{code!r}"
        connection.execute(sa.update(_gifts).where(_gifts.c.id == gift_id).values(code_key=key))
    if clashes:
        raise RuntimeError(
            "gift codes that differ only in case or Unicode normalisation: "
            + "; ".join(clashes)
            + " (rename or delete one of each, then migrate again)"
        )
    op.drop_index("uq_gifts_lower_code", table_name="gifts")
    with _rebuilt_gifts() as batch_op:
        batch_op.alter_column("code_key", existing_type=sa.String(length=96), nullable=False)
        batch_op.create_index("uq_gifts_code_key", ["code_key"], unique=True)


def downgrade() -> None:
    with _rebuilt_gifts() as batch_op:
        batch_op.drop_index("uq_gifts_code_key")
        batch_op.drop_column("code_key")
    op.create_index("uq_gifts_lower_code", "gifts", [sa.text("lower(code)")], unique=True)


@contextmanager
def _rebuilt_gifts() -> Iterator[BatchOperations]:
    """The gifts table's batch of changes. SQLite rebuilds the table, reflecting the tables it refers
    to; the expression index on users' names cannot be reflected, and need not be (users is kept)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Skipped unsupported reflection", sa.exc.SAWarning)
        with op.batch_alter_table("gifts", schema=None) as batch_op:
            yield batch_op
