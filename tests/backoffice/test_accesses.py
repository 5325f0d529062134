"""`marketplace accesses ...`: manual grants and revokes, seen by the chat bot's routes, on both profiles."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.backoffice.commands.support import system_user
from marketplace.models import Activity
from tests.backoffice.api_reads import access_to, purchases
from tests.backoffice.conftest import BackOffice
from tests.catalogue import MEMBER_CHAT_ID
from tests.conftest import GRANT_SECRET, Loader

MANUAL = {"source": "manual", "payment_id": None, "revoked": False}
# Access 5 is the first one the tests create (the catalogue holds 1 to 4).
NEW_ACCESS_ID = 5
ALICIA_CHAT_ID = "666666666666666666"


async def logged(engine: AsyncEngine) -> list[tuple[Any, ...]]:
    """The activity log: event, actor, via, user, resource, access of each entry, oldest first."""
    async with engine.connect() as connection:
        rows = await connection.execute(
            select(
                Activity.event,
                Activity.actor,
                Activity.via,
                Activity.user_id,
                Activity.resource_id,
                Activity.access_id,
            ).order_by(Activity.id)
        )
        return [tuple(row) for row in rows]


async def test_grant_creates_a_manual_access_that_the_chat_bot_lists(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    assert await access_to(api, 2, MEMBER_CHAT_ID) is None

    result = await back_office.ok("accesses", "grant", "2", "2", "--by", "alice", "--json")

    [change] = result.objects
    assert change["action"] == "access.granted"
    assert change["by"] == "alice"
    assert change["subject"] == {"access": NEW_ACCESS_ID, "user": 2, "resource": 2}
    assert (change["before"], change["after"]) == (None, MANUAL)
    assert (
        change["summary"] == f"access {NEW_ACCESS_ID}: resource 2 (Unlisted Utility) granted to user 2 (bob)"
    )
    access = await access_to(api, 2, MEMBER_CHAT_ID)
    assert access is not None
    assert (access["id"], access["user_id"], access["payment_id"]) == (NEW_ACCESS_ID, 2, None)
    # A manual grant is not a sale.
    assert await purchases(api, 2) == 0
    assert await logged(engine) == [
        ("access.granted", "alice", "marketplace accesses grant", 2, 2, NEW_ACCESS_ID)
    ]


async def test_after_a_grant_the_api_grant_answers_already_owned(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    await back_office.ok("accesses", "grant", "2", "2")

    answer = await api.post(f"/api/v1/chat/{MEMBER_CHAT_ID}/apply/2", json={"custom_password": GRANT_SECRET})

    assert answer.json() == {"message": "ko"}


async def test_grant_reactivates_a_revoked_access_as_a_manual_one_printing_what_it_did(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    # Access 4: the member's gift access to resource 8, revoked.
    assert await access_to(api, 8, MEMBER_CHAT_ID) is None

    result = await back_office.ok("accesses", "grant", "2", "8")

    assert result.lines == ["access 4: resource 8 (Half Price) reactivated to user 2 (bob)"]
    access = await access_to(api, 8, MEMBER_CHAT_ID)
    assert access is not None
    assert (access["id"], access["payment_id"]) == (4, None)


async def test_grant_reactivates_a_revoked_purchase_as_manual_which_purchases_does_not_count(
    back_office: BackOffice, api: httpx.AsyncClient, load: Loader
) -> None:
    # Access 2: alicia's purchase of resource 1 with payment 2, revoked by its refund.
    await load({"chat_accounts": [{"user_id": 6, "chat_id": ALICIA_CHAT_ID}]})
    assert await purchases(api, 1) == 1

    [change] = (await back_office.ok("accesses", "grant", "6", "1", "--json")).objects

    assert change["subject"] == {"access": 2, "user": 6, "resource": 1}
    assert change["before"] == {"source": "purchase", "payment_id": 2, "revoked": True}
    assert change["after"] == MANUAL
    assert change["by"] == system_user()
    access = await access_to(api, 1, ALICIA_CHAT_ID)
    assert access is not None
    assert (access["id"], access["payment_id"]) == (2, None)
    assert await purchases(api, 1) == 1


async def test_grant_refuses_an_unknown_deleted_or_closed_user_an_unknown_or_deleted_resource_and_an_active_access(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    refusals = {
        ("99", "2"): "marketplace: no user '99'",
        ("bob", "2"): "marketplace: no user 'bob'",
        ("0", "2"): "marketplace: no user '0'",
        ("3", "2"): "marketplace: cannot grant to user 3 (Deleted Dave): the account is soft-deleted",
        ("4", "2"): "marketplace: cannot grant to user 4 (Closed Carol): the account is closed",
        ("2", "99"): "marketplace: no resource '99'",
        ("2", "x"): "marketplace: no resource 'x'",
        ("2", "6"): "marketplace: cannot grant resource 6 (Deleted Thing): it is deleted",
        ("2", "1"): (
            "marketplace: user 2 (bob) already has an active access to resource 1 (access 1, purchase)"
        ),
        ("2", "7"): "marketplace: user 2 (bob) already has an active access to resource 7 (access 3, manual)",
    }
    for (user, resource), message in refusals.items():
        assert await back_office.refused("accesses", "grant", user, resource) == message


async def test_revoke_takes_a_purchase_out_of_the_chat_lists_and_of_purchases(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    assert await access_to(api, 1, MEMBER_CHAT_ID) is not None
    assert await purchases(api, 1) == 1

    [change] = (await back_office.ok("accesses", "revoke", "2", "1", "--by", "ops", "--json")).objects

    assert change["action"] == "access.revoked"
    assert change["by"] == "ops"
    assert change["subject"] == {"access": 1, "user": 2, "resource": 1}
    purchase = {"source": "purchase", "payment_id": 1, "revoked": False}
    assert (change["before"], change["after"]) == (purchase, {**purchase, "revoked": True})
    assert await access_to(api, 1, MEMBER_CHAT_ID) is None
    assert await purchases(api, 1) == 0
    assert await logged(engine) == [("access.revoked", "ops", "marketplace accesses revoke", 2, 1, 1)]


async def test_revoke_of_a_manual_access_prints_what_it_did_and_a_grant_brings_it_back(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    result = await back_office.ok("accesses", "revoke", "2", "7")

    assert result.lines == ["access 3: resource 7 (Free Chat) revoked from user 2 (bob)"]
    assert await access_to(api, 7, MEMBER_CHAT_ID) is None
    await back_office.ok("accesses", "grant", "2", "7")
    access = await access_to(api, 7, MEMBER_CHAT_ID)
    assert access is not None and access["id"] == 3


async def test_revoke_refuses_an_unknown_user_or_resource_and_an_access_that_is_not_active(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    refusals = {
        ("99", "1"): "marketplace: no user '99'",
        ("2", "99"): "marketplace: no resource '99'",
        ("2", "2"): "marketplace: user 2 (bob) has no active access to resource 2",
        ("2", "8"): "marketplace: user 2 (bob) has no active access to resource 8",
        ("6", "1"): "marketplace: user 6 (alicia) has no active access to resource 1",
    }
    for (user, resource), message in refusals.items():
        assert await back_office.refused("accesses", "revoke", user, resource) == message
