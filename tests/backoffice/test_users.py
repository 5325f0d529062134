"""`marketplace users ...`: account states and linked chat accounts, seen through the API, on both profiles."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.models import Activity
from tests.backoffice.conftest import BackOffice
from tests.catalogue import CLOSED_MEMBER_CHAT_ID, DELETED_MEMBER_CHAT_ID, MEMBER_CHAT_ID
from tests.conftest import Loader

NEW_CHAT_ID = "666666666666666666"


async def author(api: httpx.AsyncClient, user_id: int) -> dict[str, Any] | None:
    """The author object, or None when the API answers 404."""
    answer = await api.get(f"/api/v1/author/{user_id}")
    assert answer.status_code in (200, 404)
    found: dict[str, Any] | None = answer.json() if answer.status_code == 200 else None
    return found


async def chat_member(api: httpx.AsyncClient, chat_id: str) -> dict[str, Any] | None:
    """The member both chat routes find by this chat account (they must agree), or None (404)."""
    member = await api.post(f"/api/v1/chat/{chat_id}")
    listed = await api.post("/api/v1/chat", json={"chat": chat_id})
    assert member.status_code == listed.status_code
    assert member.status_code in (200, 404)
    if member.status_code == 404:
        return None
    found: dict[str, Any] = member.json()["user"]
    return found


async def names(api: httpx.AsyncClient, prefix: str) -> list[str]:
    answer = await api.get("/api/v1/resource/user", params={"name": prefix})
    assert answer.status_code == 200
    return [item["name"] for item in answer.json()]


async def logged(engine: AsyncEngine) -> list[tuple[Any, ...]]:
    """The activity log: event, actor, via, user and resource of each entry, oldest first."""
    async with engine.connect() as connection:
        rows = await connection.execute(
            select(
                Activity.event, Activity.actor, Activity.via, Activity.user_id, Activity.resource_id
            ).order_by(Activity.id)
        )
        return [tuple(row) for row in rows]


async def test_ban_is_logged_but_the_api_shows_a_banned_user_as_before(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    shown = await author(api, 2)
    member = await chat_member(api, MEMBER_CHAT_ID)
    assert shown is not None and member is not None

    [change] = (await back_office.ok("users", "ban", "2", "--by", "alice", "--json")).objects

    assert change["action"] == "user.banned"
    assert (change["subject"], change["before"], change["after"]) == (
        {"user": 2},
        {"banned": False},
        {"banned": True},
    )
    assert change["summary"] == "user 2 (bob): banned"
    # The contract filters no route on a ban: `/author/{user}` binds "no ban or role filter".
    assert await author(api, 2) == shown
    assert await chat_member(api, MEMBER_CHAT_ID) == member
    assert "bob" in await names(api, "bo")
    assert await logged(engine) == [("user.banned", "alice", "marketplace users ban", 2, None)]


async def test_unban_lifts_the_ban_of_a_banned_user(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    [change] = (await back_office.ok("users", "unban", "5", "--json")).objects

    assert (change["action"], change["before"], change["after"]) == (
        "user.unbanned",
        {"banned": True},
        {"banned": False},
    )
    assert change["summary"] == "user 5 (Banned Ben): no longer banned"
    assert await author(api, 5) == {"id": 5, "chat": None, "name": "Banned Ben"}
    [(event, _, via, user_id, _)] = await logged(engine)
    assert (event, via, user_id) == ("user.unbanned", "marketplace users unban", 5)


async def test_close_hides_the_author_and_the_chat_member_but_not_the_name(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    [change] = (await back_office.ok("users", "close", "2", "--json")).objects

    assert change["action"] == "user.closed"
    assert (change["before"], change["after"]) == ({"closed": False}, {"closed": True})
    assert await author(api, 2) is None
    assert await chat_member(api, MEMBER_CHAT_ID) is None
    # Only soft-deleted accounts leave the user-name lookup.
    assert "bob" in await names(api, "bo")
    [(event, _, via, user_id, _)] = await logged(engine)
    assert (event, via, user_id) == ("user.closed", "marketplace users close", 2)


async def test_reopen_shows_a_closed_author_and_chat_member_again(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    assert await author(api, 4) is None

    [change] = (await back_office.ok("users", "reopen", "4", "--json")).objects

    assert (change["action"], change["before"], change["after"]) == (
        "user.reopened",
        {"closed": True},
        {"closed": False},
    )
    assert await author(api, 4) == {"id": 4, "chat": CLOSED_MEMBER_CHAT_ID, "name": "Closed Carol"}
    member = await chat_member(api, CLOSED_MEMBER_CHAT_ID)
    assert member is not None and member["id"] == 4
    [(event, _, _, user_id, _)] = await logged(engine)
    assert (event, user_id) == ("user.reopened", 4)


async def test_soft_delete_hides_the_user_from_the_author_the_chat_member_and_the_name_lookup(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    [change] = (await back_office.ok("users", "soft-delete", "2", "--json")).objects

    assert change["action"] == "user.deleted"
    assert change["before"] == {"deleted_at": None}
    assert change["after"] == {"deleted_at": change["at"]}
    assert change["summary"] == "user 2 (bob): soft-deleted"
    assert await author(api, 2) is None
    assert await chat_member(api, MEMBER_CHAT_ID) is None
    assert "bob" not in await names(api, "bo")
    [(event, _, via, user_id, _)] = await logged(engine)
    assert (event, via, user_id) == ("user.deleted", "marketplace users soft-delete", 2)


async def test_restore_brings_a_soft_deleted_user_back_everywhere(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    assert await author(api, 3) is None

    [change] = (await back_office.ok("users", "restore", "3", "--json")).objects

    assert change["action"] == "user.restored"
    assert change["before"]["deleted_at"] is not None
    assert change["after"] == {"deleted_at": None}
    assert await author(api, 3) == {"id": 3, "chat": DELETED_MEMBER_CHAT_ID, "name": "Deleted Dave"}
    member = await chat_member(api, DELETED_MEMBER_CHAT_ID)
    assert member is not None and member["id"] == 3
    assert "Deleted Dave" in await names(api, "Del")
    [(event, _, _, user_id, _)] = await logged(engine)
    assert (event, user_id) == ("user.restored", 3)


@pytest.mark.parametrize(
    ("verb", "user", "message"),
    [
        ("ban", "5", "cannot ban user 5 (Banned Ben): it is already banned"),
        ("unban", "2", "cannot unban user 2 (bob): it is not banned"),
        ("close", "4", "cannot close user 4 (Closed Carol): it is already closed"),
        ("reopen", "2", "cannot reopen user 2 (bob): it is not closed"),
        ("soft-delete", "3", "cannot soft-delete user 3 (Deleted Dave): it is already soft-deleted"),
        ("restore", "2", "cannot restore user 2 (bob): it is not soft-deleted"),
    ],
)
async def test_an_account_state_change_refuses_an_unknown_user_and_a_change_to_the_state_it_has(
    back_office: BackOffice, api: httpx.AsyncClient, verb: str, user: str, message: str
) -> None:
    assert await back_office.refused("users", verb, user) == f"marketplace: {message}"
    assert await back_office.refused("users", verb, "99") == "marketplace: no user '99'"
    assert await back_office.refused("users", verb, "bob") == "marketplace: no user 'bob'"


async def test_link_chat_shows_the_chat_account_on_the_author_and_the_chat_bot_finds_the_member(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    assert await chat_member(api, NEW_CHAT_ID) is None

    [change] = (await back_office.ok("users", "link-chat", "6", NEW_CHAT_ID, "--by", "ops", "--json")).objects

    assert change["action"] == "chat_account.linked"
    assert (change["subject"], change["before"], change["after"]) == (
        {"user": 6},
        {"chat": None},
        {"chat": NEW_CHAT_ID},
    )
    assert change["summary"] == f"user 6 (alicia): chat account {NEW_CHAT_ID} linked"
    assert await author(api, 6) == {"id": 6, "chat": NEW_CHAT_ID, "name": "alicia"}
    member = await chat_member(api, NEW_CHAT_ID)
    assert member is not None and (member["id"], member["name"]) == (6, "alicia")
    assert await logged(engine) == [("chat_account.linked", "ops", "marketplace users link-chat", 6, None)]


async def test_unlink_chat_clears_the_author_chat_and_the_chat_bot_no_longer_finds_the_member(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    result = await back_office.ok("users", "unlink-chat", "2", "--json")

    [change] = result.objects
    assert change["action"] == "chat_account.unlinked"
    assert (change["subject"], change["before"], change["after"]) == (
        {"user": 2},
        {"chat": MEMBER_CHAT_ID},
        {"chat": None},
    )
    assert await author(api, 2) == {"id": 2, "chat": None, "name": "bob"}
    assert await chat_member(api, MEMBER_CHAT_ID) is None
    assert await logged(engine) == [
        ("chat_account.unlinked", change["by"], "marketplace users unlink-chat", 2, None)
    ]


async def test_a_user_links_another_chat_account_once_the_first_is_unlinked(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    assert (await back_office.ok("users", "unlink-chat", "2")).lines == [
        f"user 2 (bob): chat account {MEMBER_CHAT_ID} unlinked"
    ]
    assert (await back_office.ok("users", "link-chat", "2", NEW_CHAT_ID)).lines == [
        f"user 2 (bob): chat account {NEW_CHAT_ID} linked"
    ]

    assert await author(api, 2) == {"id": 2, "chat": NEW_CHAT_ID, "name": "bob"}
    member = await chat_member(api, NEW_CHAT_ID)
    assert member is not None and member["id"] == 2
    # The chat account let go may now be linked to someone else.
    await back_office.ok("users", "link-chat", "6", MEMBER_CHAT_ID)
    member = await chat_member(api, MEMBER_CHAT_ID)
    assert member is not None and member["id"] == 6


async def test_link_chat_refuses_an_invalid_chat_id_one_linked_already_a_linked_user_and_an_unknown_user(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    snowflake = "a snowflake, 1 to 32 digits (0-9)"
    refusals = {
        ("6", "12ab"): f"invalid chat id '12ab': {snowflake}",
        ("6", ""): f"invalid chat id '': {snowflake}",
        ("6", "12 34"): f"invalid chat id '12 34': {snowflake}",
        ("6", "1" * 33): f"invalid chat id '{'1' * 33}': {snowflake}",
        ("6", "١٢٣"): f"invalid chat id '١٢٣': {snowflake}",
        ("6", MEMBER_CHAT_ID): (
            f"chat account {MEMBER_CHAT_ID} is already linked to user 2 (bob);"
            " run `marketplace users unlink-chat 2` first"
        ),
        # A soft-deleted user's account stays linked: the API hides it, restore brings it back.
        ("6", DELETED_MEMBER_CHAT_ID): (
            f"chat account {DELETED_MEMBER_CHAT_ID} is already linked to user 3 (Deleted Dave);"
            " run `marketplace users unlink-chat 3` first"
        ),
        ("2", NEW_CHAT_ID): (
            f"user 2 (bob) already has chat account {MEMBER_CHAT_ID} linked;"
            " run `marketplace users unlink-chat 2` first"
        ),
        ("99", NEW_CHAT_ID): "no user '99'",
    }
    for (user, chat_id), message in refusals.items():
        assert await back_office.refused("users", "link-chat", user, chat_id) == f"marketplace: {message}"


async def test_unlink_chat_refuses_a_user_without_a_chat_account_and_an_unknown_user(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    assert (
        await back_office.refused("users", "unlink-chat", "6")
        == "marketplace: user 6 (alicia) has no linked chat account"
    )
    assert await back_office.refused("users", "unlink-chat", "99") == "marketplace: no user '99'"


async def test_a_stored_name_with_control_characters_is_printed_on_one_line(
    back_office: BackOffice, api: httpx.AsyncClient, load: Loader
) -> None:
    await load({"users": [{"id": 9, "name": "Evil\nLine\x1b[2J"}]})
    banned = await back_office.ok("users", "ban", "9")
    assert banned.lines == ["user 9 (Evil\\nLine\\x1b[2J): banned"]
    line = await back_office.refused("users", "ban", "9")
    assert line == "marketplace: cannot ban user 9 (Evil\\nLine\\x1b[2J): it is already banned"
