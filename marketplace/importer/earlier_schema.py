"""The earlier platform's tables as it created them on MariaDB/MySQL (column lists from its
documentation), used to build sample and test databases in that shape."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
)

earlier_metadata = MetaData()

Table(
    "users",
    earlier_metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(255)),
    Column("email", String(255)),
    Column("avatar", String(255)),
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
)
Table("categories", earlier_metadata, Column("id", Integer, primary_key=True), Column("name", String(255)))
Table(
    "plugins",
    earlier_metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(255)),
    Column("price", Integer),
    Column("image", String(16)),
    Column("description", Text),
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
    Column("tag", String(255)),
    Column("user_id", Integer),
    Column("is_display", SmallInteger),
    Column("file", String(255)),
    Column("version_id", Integer),
    Column("deleted", SmallInteger),
    Column("category_id", Integer),
    Column("is_pending", SmallInteger),
    Column("unique_id", String(64)),
    Column("is_unique", SmallInteger),
    Column("stats_id", String(32)),
)
Table(
    "versions",
    earlier_metadata,
    Column("id", Integer, primary_key=True),
    Column("version", String(64)),
    Column("plugin_id", Integer),
    Column("download", BigInteger),
    Column("title", String(255)),
    Column("extension", String(16)),
    Column("description", Text),
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
    Column("file", String(255)),
)
Table(
    "chat_accounts",
    earlier_metadata,
    Column("id", Integer, primary_key=True),
    Column("user_id", Integer),
    Column("chat_id", String(64)),
    Column("access_token", String(255)),
    Column("refresh_token", String(255)),
    Column("expired_at", DateTime),
    Column("username", String(255)),
    Column("email", String(255)),
    Column("discriminator", String(8)),
    Column("avatar", String(255)),
    Column("is_valid", SmallInteger),
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
)
Table(
    "gifts",
    earlier_metadata,
    Column("id", Integer, primary_key=True),
    Column("code", String(64)),
    Column("plugin_id", Integer),
    Column("promotion", Integer),
    Column("used", Integer),
    Column("max_use", Integer),
    Column("active", SmallInteger),
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
)
Table(
    "payments",
    earlier_metadata,
    Column("id", Integer, primary_key=True),
    Column("user_id", Integer),
    Column("provider_id", String(255)),
    Column("uid", String(64)),
    Column("status", String(16)),
    Column("price", Integer),
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
    Column("gift_id", Integer),
    Column("type", SmallInteger),
    Column("content_id", Integer),
)
Table(
    "accesses",
    earlier_metadata,
    Column("id", Integer, primary_key=True),
    Column("user_id", Integer),
    Column("plugin_id", Integer),
    Column("payment_id", Integer),
    Column("created_at", DateTime),
    Column("updated_at", DateTime),
)
Table(
    "licences",
    earlier_metadata,
    Column("id", Integer, primary_key=True),
    Column("key", String(15)),
    Column("plugin_id", Integer),
    Column("expired_at", DateTime),
)
