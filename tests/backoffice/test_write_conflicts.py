"""Operators and the API never deadlock: each operator write that locks the rows the bot's grant
writes, forced into the interleaving that deadlocked (explicit steps, not chance), on both
profiles; then rounds of both at once. The bot never gets a 500, the operator at worst one
refusal line (marketplace/database/conflicts.py)."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import httpx
import pytest
from sqlalchemy import make_url, select
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.models import Access, Payment
from tests.backoffice.conftest import BackOffice, CommandResult
from tests.catalogue import MEMBER_CHAT_ID, OWNER_CHAT_ID, PAID_UID
from tests.conftest import GRANT_SECRET, Loader
from tests.interleavings import finished_or_waiting, pauses
from tests.profiles import sqlite_only

ALICE_ID = 1  # OWNER_CHAT_ID; no access to resource 7
BOB_ID = 2  # MEMBER_CHAT_ID; revoked gift access 4 to resource 8, purchase access 1 to resource 1
PENDING_UID = "01J9C0NF11CTPAYMENT0000000"
# Words of a driver error or a traceback, never in an operator's refusal.
DRIVER_WORDS = ("Traceback", "sqlalchemy", "asyncpg", "sqlite3", "Error", "deadlock", "locked")
# The bot's grant stops before its activity entry, once it wrote the access.
BOT_LOGS = r"INSERT INTO activity_log"
# An operator's action stops before it locks (reads, on SQLite) the resource, the user's row held.
OPERATOR_LOCKS_RESOURCE = r"FROM resources\s+WHERE resources\.id = "
OPERATOR_LOGS = r"INSERT INTO activity_log"


@pytest.fixture
async def pending_payment(api: httpx.AsyncClient, load: Loader) -> str:
    """Bob's pending payment for resource 8, whose access he had as a gift (revoked since)."""
    payment = {
        "id": 30,
        "uid": PENDING_UID,
        "status": "pending",
        "amount_cents": 500,
        "buyer_id": BOB_ID,
        "seller_id": 1,
        "resource_id": 8,
    }
    await load({"payments": [payment]})
    return PENDING_UID


def grant(api: httpx.AsyncClient, chat_id: str, resource_id: int) -> asyncio.Task[httpx.Response]:
    return asyncio.create_task(
        api.post(f"/api/v1/chat/{chat_id}/apply/{resource_id}", json={"custom_password": GRANT_SECRET})
    )


def assert_answered(answer: httpx.Response) -> None:
    """The bot's grant answered as the contract says: ok or ko, never a 500."""
    assert answer.status_code == 200, answer.content
    assert answer.json()["message"] in ("ok", "ko")


def assert_done_or_refused(result: CommandResult) -> None:
    """The operator's command succeeded, or was refused in one line: no traceback, no driver text."""
    if result.exit_code == 0:
        assert result.stderr == ""
        return
    assert (result.exit_code, result.stdout) == (1, "")
    [line] = result.stderr.splitlines()
    assert line.startswith("marketplace: ")
    assert not any(word in line for word in DRIVER_WORDS), line


async def accesses(engine: AsyncEngine, user_id: int, resource_id: int) -> list[Access]:
    async with engine.connect() as connection:
        rows = await connection.execute(
            select(Access).where(Access.user_id == user_id, Access.resource_id == resource_id)
        )
        return list(rows)  # type: ignore[arg-type]


async def operator_first(
    back_office: BackOffice,
    api: httpx.AsyncClient,
    pattern: str,
    command: tuple[str, ...],
    bot: tuple[str, int],
) -> tuple[httpx.Response, CommandResult]:
    """The command runs to `pattern` and stops; the bot's grant runs until done or waiting for a
    lock; then the command goes on."""
    with pauses() as armed:
        stop = armed.at("operator", pattern)
        operating = asyncio.create_task(back_office(*command))
        await stop.wait_reached()
        granting = grant(api, *bot)
        await finished_or_waiting(granting, back_office.settings.database_url)
        stop.resume()
        return await granting, await operating


async def bot_first(
    back_office: BackOffice, api: httpx.AsyncClient, command: tuple[str, ...], bot: tuple[str, int]
) -> tuple[httpx.Response, CommandResult]:
    """The bot's grant writes the access and stops before its activity entry; the command runs
    until done or waiting for a lock; then the grant goes on."""
    with pauses() as armed:
        stop = armed.at("api", BOT_LOGS)
        granting = grant(api, *bot)
        await stop.wait_reached()
        operating: asyncio.Task[Any] = asyncio.create_task(back_office(*command))
        await finished_or_waiting(operating, back_office.settings.database_url)
        stop.resume()
        return await granting, await operating


async def test_an_operator_grant_holding_the_user_never_deadlocks_the_bots_grant_of_a_new_access(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    answer, result = await operator_first(
        back_office,
        api,
        OPERATOR_LOCKS_RESOURCE,
        ("accesses", "grant", str(ALICE_ID), "7"),
        (OWNER_CHAT_ID, 7),
    )
    assert_answered(answer)
    assert_done_or_refused(result)
    # Exactly one of them granted it.
    assert (answer.json()["message"] == "ok") != (result.exit_code == 0)
    [access] = await accesses(engine, ALICE_ID, 7)
    assert not access.revoked


async def test_an_operator_grant_never_deadlocks_the_bots_reactivation(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    answer, result = await bot_first(
        back_office, api, ("accesses", "grant", str(BOB_ID), "8"), (MEMBER_CHAT_ID, 8)
    )
    assert_answered(answer)
    assert_done_or_refused(result)
    assert (answer.json()["message"] == "ok") != (result.exit_code == 0)
    [access] = await accesses(engine, BOB_ID, 8)
    assert not access.revoked


async def test_an_operator_revoke_never_deadlocks_the_bots_reactivation(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    answer, result = await bot_first(
        back_office, api, ("accesses", "revoke", str(BOB_ID), "8"), (MEMBER_CHAT_ID, 8)
    )
    assert_answered(answer)
    assert_done_or_refused(result)
    [access] = await accesses(engine, BOB_ID, 8)
    # The revoke came after the grant, or found nothing to revoke.
    assert access.revoked == (result.exit_code == 0)


@pytest.mark.parametrize("first", ["bot", "operator"])
async def test_a_payment_confirmed_never_deadlocks_the_bots_grant_of_the_same_access(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine, pending_payment: str, first: str
) -> None:
    command = ("payments", "confirm", pending_payment)
    if first == "bot":
        answer, result = await bot_first(back_office, api, command, (MEMBER_CHAT_ID, 8))
    else:
        answer, result = await operator_first(back_office, api, OPERATOR_LOGS, command, (MEMBER_CHAT_ID, 8))
    assert_answered(answer)
    assert_done_or_refused(result)
    [access] = await accesses(engine, BOB_ID, 8)
    assert not access.revoked
    async with engine.connect() as connection:
        status = await connection.scalar(select(Payment.status).where(Payment.uid == pending_payment))
    assert status == ("paid" if result.exit_code == 0 else "pending")


@pytest.mark.parametrize("verb", ["refund", "dispute"])
async def test_a_payment_refunded_or_disputed_never_deadlocks_the_bots_grant(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine, verb: str
) -> None:
    answer, result = await operator_first(
        back_office, api, OPERATOR_LOGS, ("payments", verb, PAID_UID), (MEMBER_CHAT_ID, 1)
    )
    assert_answered(answer)
    assert_done_or_refused(result)
    assert result.exit_code == 0
    assert len(await accesses(engine, BOB_ID, 1)) == 1


async def test_a_user_banned_never_deadlocks_the_bots_grant(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    answer, result = await operator_first(
        back_office, api, OPERATOR_LOGS, ("users", "ban", str(ALICE_ID)), (OWNER_CHAT_ID, 7)
    )
    assert_answered(answer)
    assert answer.json()["message"] == "ok"
    assert_done_or_refused(result)
    assert result.exit_code == 0
    assert len(await accesses(engine, ALICE_ID, 7)) == 1


# Each round: a command and the bot's grant it races, started together.
RACES: list[tuple[tuple[str, ...], tuple[str, int]]] = [
    (("accesses", "grant", str(ALICE_ID), "7"), (OWNER_CHAT_ID, 7)),
    (("accesses", "revoke", str(ALICE_ID), "7"), (OWNER_CHAT_ID, 7)),
    (("accesses", "grant", str(BOB_ID), "8"), (MEMBER_CHAT_ID, 8)),
    (("accesses", "revoke", str(BOB_ID), "8"), (MEMBER_CHAT_ID, 8)),
    (("payments", "confirm", PENDING_UID), (MEMBER_CHAT_ID, 8)),
    (("accesses", "revoke", str(BOB_ID), "8"), (MEMBER_CHAT_ID, 8)),
    (("users", "ban", str(ALICE_ID)), (OWNER_CHAT_ID, 2)),
]


async def test_operators_racing_the_bot_give_no_500_and_no_traceback(
    back_office: BackOffice, api: httpx.AsyncClient, pending_payment: str
) -> None:
    """Rounds of a command and the bot's grants at once: whatever the timing, the contract's
    answers and one-line refusals only."""
    for command, bot in RACES:
        operating = asyncio.create_task(back_office(*command))
        answers = [await grant(api, *bot)]
        while not operating.done() and len(answers) < 500:
            answers.append(await grant(api, *bot))
        result = await operating
        for answer in answers:
            assert_answered(answer)
        assert_done_or_refused(result)


@sqlite_only
async def test_an_operator_write_that_finds_the_database_locked_is_one_refusal_line(
    back_office: BackOffice, api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer holds SQLite's write lock past the command's wait: one line, exit 1, no
    driver text."""
    monkeypatch.setattr("marketplace.database.engine.COMMAND_LOCK_WAIT_SECONDS", 0.2)
    database = make_url(back_office.settings.database_url).database
    assert database is not None
    holder = sqlite3.connect(database, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        result = await back_office("accesses", "grant", str(ALICE_ID), "7")
    finally:
        holder.close()
    assert_done_or_refused(result)
    assert result.stderr == (
        "marketplace: the change conflicted with concurrent changes (1 attempt); nothing was written;"
        " run the command again\n"
    )
