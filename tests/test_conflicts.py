"""Write conflicts (marketplace/database/conflicts.py): a transaction the database refuses for a concurrent
one is run again whole, a bounded number of times, and counted."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.database.conflicts import ATTEMPTS, WriteConflict, retrying
from marketplace.database.engine import session_factory
from marketplace.models import User
from tests.catalogue import catalogue
from tests.conftest import Loader
from tests.profiles import postgresql_only


def conflicts(outcome: str) -> float:
    return REGISTRY.get_sample_value("marketplace_db_write_conflicts_total", {"outcome": outcome}) or 0.0


async def wait_for_a_lock_waiter(database_url: str) -> None:
    connection = await asyncpg.connect(database_url)
    try:
        for _ in range(1500):
            waiting = await connection.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if waiting:
                return
            await asyncio.sleep(0.02)
    finally:
        await connection.close()
    raise AssertionError("nobody waited for a lock")


@postgresql_only
async def test_a_deadlocked_transaction_is_run_again_whole_and_counted(
    engine: AsyncEngine, load: Loader, database_url: str
) -> None:
    """The transaction locks user 1 then user 2; another locks user 2 then user 1, every time in
    the order that makes the transaction the deadlock's victim (it waits first)."""
    await load(catalogue())
    first_holds, other_holds = asyncio.Event(), asyncio.Event()
    attempts = 0
    retried_before = conflicts("retried")

    async def transaction() -> int:
        nonlocal attempts
        attempts += 1
        async with session_factory(engine)() as session:
            await session.execute(update(User).where(User.id == 1).values(name=f"attempt {attempts}"))
            if attempts == 1:
                first_holds.set()
                await other_holds.wait()
            await session.execute(update(User).where(User.id == 2).values(name=f"attempt {attempts}"))
            await session.commit()
        return attempts

    async def other() -> None:
        async with engine.connect() as connection:
            await first_holds.wait()
            await connection.execute(update(User).where(User.id == 2).values(name="other"))
            other_holds.set()
            await wait_for_a_lock_waiter(database_url)
            await connection.execute(update(User).where(User.id == 1).values(name="other"))
            await connection.commit()

    done, _ = await asyncio.gather(retrying(transaction), other())
    assert done == 2
    assert conflicts("retried") == retried_before + 1
    async with engine.connect() as connection:
        names = (
            await connection.scalars(select(User.name).where(User.id.in_((1, 2))).order_by(User.id))
        ).all()
    # The second attempt ran whole, after the other transaction.
    assert names == ["attempt 2", "attempt 2"]


@postgresql_only
async def test_a_transaction_that_keeps_conflicting_is_given_up_after_the_last_attempt(
    engine: AsyncEngine, load: Loader
) -> None:
    await load(catalogue())
    given_up_before = conflicts("gave_up")
    attempts = 0

    async def transaction() -> None:
        nonlocal attempts
        attempts += 1
        async with session_factory(engine)() as session:
            # A serialization failure, as the server raises it.
            await session.execute(
                text("DO $$ BEGIN RAISE EXCEPTION 'could not serialize' USING ERRCODE = '40001'; END $$")
            )

    with pytest.raises(WriteConflict, match=rf"\({ATTEMPTS} attempts\); nothing was written"):
        await retrying(transaction)
    assert attempts == ATTEMPTS
    assert conflicts("gave_up") == given_up_before + 1


async def test_an_error_that_is_no_conflict_is_not_run_again(engine: AsyncEngine, load: Loader) -> None:
    await load(catalogue())
    attempts = 0

    async def transaction() -> None:
        nonlocal attempts
        attempts += 1
        async with session_factory(engine)() as session:
            session.add(User(id=1, name="taken id"))
            await session.commit()

    with pytest.raises(IntegrityError):
        await retrying(transaction)
    assert attempts == 1
