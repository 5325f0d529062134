"""Alembic environment: runs migrations on the connection handed over by `marketplace migrate`, or,
through the `alembic` tool, on the configured database with the service's own async engine."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

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
    import asyncio

    from marketplace.config import Settings
    from marketplace.database.engine import create_engine

    async def run() -> None:
        engine = create_engine(Settings())
        async with engine.begin() as connection:
            await connection.run_sync(_run)
        await engine.dispose()

    asyncio.run(run())


run_migrations_online()
