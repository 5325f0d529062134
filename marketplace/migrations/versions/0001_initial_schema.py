"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.create_table(
        "categories",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_categories")),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("email", sa.String(length=255), nullable=True),
        sa.Column("avatar", sa.String(length=255), nullable=True),
        sa.Column("closed", sa.Boolean(), nullable=False),
        sa.Column("banned", sa.Boolean(), nullable=False),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
    )
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.create_index("ix_users_name", ["name"], unique=False)

    op.create_table(
        "chat_accounts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("chat_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_chat_accounts_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chat_accounts")),
        sa.UniqueConstraint("chat_id", name=op.f("uq_chat_accounts_chat_id")),
    )
    with op.batch_alter_table("chat_accounts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_chat_accounts_user_id"), ["user_id"], unique=False)

    op.create_table(
        "resources",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("category_id", sa.Integer(), nullable=True),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("tag", sa.String(length=160), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("price", sa.Numeric(precision=10, scale=2), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("deleted_at", sa.DateTime(), nullable=True),
        sa.Column("unique_id", sa.String(length=32), nullable=True),
        sa.Column("stats_id", sa.String(length=20), nullable=True),
        sa.Column("icon", sa.String(length=255), nullable=True),
        sa.Column("slug", sa.String(length=255), nullable=False),
        sa.Column("download", sa.BigInteger(), nullable=False),
        sa.Column("current_version_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.CheckConstraint(
            "status IN ('published', 'unlisted', 'draft', 'pending', 'rejected')",
            name=op.f("ck_resources_status"),
        ),
        sa.ForeignKeyConstraint(
            ["category_id"], ["categories.id"], name=op.f("fk_resources_category_id_categories")
        ),
        # The current-version pointer references `versions`, created below: its key is added after it
        # (SQLite checks references only when rows are written, so the key is declared inline there).
        *(
            [
                sa.ForeignKeyConstraint(
                    ["current_version_id"],
                    ["versions.id"],
                    name=op.f("fk_resources_current_version_id_versions"),
                    ondelete="SET NULL",
                )
            ]
            if sqlite
            else []
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_resources_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_resources")),
        sa.UniqueConstraint("unique_id", name=op.f("uq_resources_unique_id")),
    )
    with op.batch_alter_table("resources", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_resources_category_id"), ["category_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_resources_current_version_id"), ["current_version_id"], unique=False
        )
        batch_op.create_index("ix_resources_status_id", ["status", "id"], unique=False)
        batch_op.create_index(batch_op.f("ix_resources_user_id"), ["user_id"], unique=False)

    op.create_table(
        "gifts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("code", sa.String(length=32), nullable=False),
        sa.Column("percentage", sa.SmallInteger(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("starts_at", sa.DateTime(), nullable=True),
        sa.Column("expires_at", sa.DateTime(), nullable=True),
        sa.Column("max_uses", sa.Integer(), nullable=True),
        sa.Column("uses", sa.Integer(), nullable=False),
        sa.Column("seller_id", sa.Integer(), nullable=True),
        sa.Column("resource_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.CheckConstraint("percentage BETWEEN 1 AND 100", name=op.f("ck_gifts_percentage")),
        sa.ForeignKeyConstraint(
            ["resource_id"], ["resources.id"], name=op.f("fk_gifts_resource_id_resources"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["seller_id"], ["users.id"], name=op.f("fk_gifts_seller_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gifts")),
    )
    with op.batch_alter_table("gifts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gifts_resource_id"), ["resource_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_gifts_seller_id"), ["seller_id"], unique=False)

    op.create_table(
        "reviews",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("resource_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("rating", sa.SmallInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.CheckConstraint("rating BETWEEN 1 AND 5", name=op.f("ck_reviews_rating")),
        sa.ForeignKeyConstraint(
            ["resource_id"],
            ["resources.id"],
            name=op.f("fk_reviews_resource_id_resources"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_reviews_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reviews")),
    )
    with op.batch_alter_table("reviews", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_reviews_resource_id"), ["resource_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_reviews_user_id"), ["user_id"], unique=False)

    op.create_table(
        "versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("resource_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(length=32), nullable=False),
        sa.Column("title", sa.String(length=255), nullable=False),
        sa.Column("download", sa.BigInteger(), nullable=False),
        sa.Column("changelog", sa.Text(), nullable=True),
        sa.Column("file_name", sa.String(length=255), nullable=True),
        sa.Column("file_size", sa.BigInteger(), nullable=True),
        sa.Column("checksum", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["resource_id"],
            ["resources.id"],
            name=op.f("fk_versions_resource_id_resources"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_versions")),
    )
    with op.batch_alter_table("versions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_versions_resource_id"), ["resource_id"], unique=False)

    op.create_table(
        "payments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uid", sa.String(length=26), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("amount_cents", sa.Integer(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("base_amount_cents", sa.Integer(), nullable=True),
        sa.Column("buyer_id", sa.Integer(), nullable=True),
        sa.Column("seller_id", sa.Integer(), nullable=True),
        sa.Column("resource_id", sa.Integer(), nullable=True),
        sa.Column("gift_id", sa.Integer(), nullable=True),
        sa.Column("provider", sa.String(length=32), nullable=True),
        sa.Column("provider_transaction_id", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.CheckConstraint(
            "status IN ('pending', 'paid', 'unpaid', 'refunded', 'disputed', 'cancelled')",
            name=op.f("ck_payments_status"),
        ),
        sa.ForeignKeyConstraint(["buyer_id"], ["users.id"], name=op.f("fk_payments_buyer_id_users")),
        sa.ForeignKeyConstraint(["gift_id"], ["gifts.id"], name=op.f("fk_payments_gift_id_gifts")),
        sa.ForeignKeyConstraint(
            ["resource_id"], ["resources.id"], name=op.f("fk_payments_resource_id_resources")
        ),
        sa.ForeignKeyConstraint(["seller_id"], ["users.id"], name=op.f("fk_payments_seller_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_payments")),
        sa.UniqueConstraint("uid", name=op.f("uq_payments_uid")),
    )
    with op.batch_alter_table("payments", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_payments_buyer_id"), ["buyer_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_payments_gift_id"), ["gift_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_payments_provider_transaction_id"), ["provider_transaction_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_payments_resource_id"), ["resource_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_payments_seller_id"), ["seller_id"], unique=False)

    op.create_table(
        "accesses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("resource_id", sa.Integer(), nullable=False),
        sa.Column("payment_id", sa.Integer(), nullable=True),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("revoked", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.CheckConstraint("source IN ('purchase', 'manual', 'gift')", name=op.f("ck_accesses_source")),
        sa.ForeignKeyConstraint(
            ["payment_id"], ["payments.id"], name=op.f("fk_accesses_payment_id_payments"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["resource_id"],
            ["resources.id"],
            name=op.f("fk_accesses_resource_id_resources"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_accesses_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_accesses")),
        sa.UniqueConstraint("user_id", "resource_id", name=op.f("uq_accesses_user_id_resource_id")),
    )
    with op.batch_alter_table("accesses", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_accesses_payment_id"), ["payment_id"], unique=False)
        batch_op.create_index(
            "ix_accesses_resource_id_source_revoked", ["resource_id", "source", "revoked"], unique=False
        )

    op.create_table(
        "activity_log",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("event", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("resource_id", sa.Integer(), nullable=True),
        sa.Column("access_id", sa.Integer(), nullable=True),
        sa.Column("via", sa.String(length=64), nullable=True),
        sa.Column("ip_hash", sa.String(length=64), nullable=True),
        sa.Column("properties", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["access_id"],
            ["accesses.id"],
            name=op.f("fk_activity_log_access_id_accesses"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["resource_id"],
            ["resources.id"],
            name=op.f("fk_activity_log_resource_id_resources"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_activity_log_user_id_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_activity_log")),
    )
    with op.batch_alter_table("activity_log", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_activity_log_event"), ["event"], unique=False)
        batch_op.create_index(batch_op.f("ix_activity_log_resource_id"), ["resource_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_activity_log_user_id"), ["user_id"], unique=False)

    if not sqlite:
        op.create_foreign_key(
            op.f("fk_resources_current_version_id_versions"),
            "resources",
            "versions",
            ["current_version_id"],
            ["id"],
            ondelete="SET NULL",
        )
    # Case-insensitive lookups: user-name prefix and gift codes (unique without regard to case).
    op.create_index("ix_users_lower_name", "users", [sa.text("lower(name)")], unique=False)
    op.create_index("uq_gifts_lower_code", "gifts", [sa.text("lower(code)")], unique=True)


def downgrade() -> None:
    op.drop_index("uq_gifts_lower_code", table_name="gifts")
    op.drop_index("ix_users_lower_name", table_name="users")
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint(op.f("fk_resources_current_version_id_versions"), "resources", type_="foreignkey")
    with op.batch_alter_table("activity_log", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_activity_log_user_id"))
        batch_op.drop_index(batch_op.f("ix_activity_log_resource_id"))
        batch_op.drop_index(batch_op.f("ix_activity_log_event"))

    op.drop_table("activity_log")
    with op.batch_alter_table("accesses", schema=None) as batch_op:
        batch_op.drop_index("ix_accesses_resource_id_source_revoked")
        batch_op.drop_index(batch_op.f("ix_accesses_payment_id"))

    op.drop_table("accesses")
    with op.batch_alter_table("payments", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_payments_seller_id"))
        batch_op.drop_index(batch_op.f("ix_payments_resource_id"))
        batch_op.drop_index(batch_op.f("ix_payments_provider_transaction_id"))
        batch_op.drop_index(batch_op.f("ix_payments_gift_id"))
        batch_op.drop_index(batch_op.f("ix_payments_buyer_id"))

    op.drop_table("payments")
    with op.batch_alter_table("versions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_versions_resource_id"))

    op.drop_table("versions")
    with op.batch_alter_table("reviews", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_reviews_user_id"))
        batch_op.drop_index(batch_op.f("ix_reviews_resource_id"))

    op.drop_table("reviews")
    with op.batch_alter_table("gifts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gifts_seller_id"))
        batch_op.drop_index(batch_op.f("ix_gifts_resource_id"))

    op.drop_table("gifts")
    with op.batch_alter_table("resources", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_resources_user_id"))
        batch_op.drop_index("ix_resources_status_id")
        batch_op.drop_index(batch_op.f("ix_resources_current_version_id"))
        batch_op.drop_index(batch_op.f("ix_resources_category_id"))

    op.drop_table("resources")
    with op.batch_alter_table("chat_accounts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_chat_accounts_user_id"))

    op.drop_table("chat_accounts")
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_index("ix_users_name")

    op.drop_table("users")
    op.drop_table("categories")
