"""Alembic environment: runs migrations on a synchronous connection handed over by the caller,
or on the configured database URL (with its sync driver) when run through the `alembic` tool."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from marketplace.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    from marketplace.config import Settings
    from marketplace.db import sync_url

    engine = create_engine(sync_url(Settings().database_url))
    with engine.begin() as connection:
        _run(connection)


run_migrations_online()
