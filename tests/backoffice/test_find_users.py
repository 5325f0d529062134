"""`marketplace users list` and `show`: finding an account without SQL, on both profiles."""

from __future__ import annotations

import pytest

from tests.backoffice.conftest import BackOffice
from tests.backoffice.finding import CHAT_OF_ALICE, CHAT_OF_ALICIA, P1, P2, listed, shop, shown
from tests.conftest import Loader


@pytest.fixture(autouse=True)
async def loaded(load: Loader) -> None:
    await load(shop())


async def ids(back_office: BackOffice, *options: str) -> list[int]:
    return [row["id"] for row in await listed(back_office, "users", "list", *options)]


async def test_users_list_every_account_newest_first_soft_deleted_included(back_office: BackOffice) -> None:
    assert await ids(back_office) == [8, 7, 6, 5, 4, 2, 3, 1]


async def test_users_list_row_shows_states_and_chat_account(back_office: BackOffice) -> None:
    rows = {row["id"]: row for row in await listed(back_office, "users", "list")}
    assert rows[2] == {
        "id": 2,
        "name": "alicia",
        "chat": CHAT_OF_ALICIA,
        "banned": False,
        "closed": False,
        "deleted_at": None,
        "created_at": "2024-03-01T00:00:00Z",
    }
    assert rows[8]["deleted_at"] is not None
    assert rows[6]["chat"] is None


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (("--name", "ali"), [2, 1]),
        (("--name", "ALICI"), [2]),
        # LIKE's wildcards in a prefix are characters like any other.
        (("--name", "carol_"), [4]),
        (("--name", "dan%"), [6]),
        (("--name", "%"), []),
        (("--chat", CHAT_OF_ALICE), [1]),
        (("--chat", "999"), []),
        (("--banned",), [7, 6, 3]),
        (("--closed",), [6, 4]),
    ],
)
async def test_users_list_filter_keeps_what_it_names(
    back_office: BackOffice, options: tuple[str, ...], expected: list[int]
) -> None:
    assert await ids(back_office, *options) == expected


async def test_users_list_filters_combine(back_office: BackOffice) -> None:
    assert await ids(back_office, "--banned", "--closed") == [6]
    assert await ids(back_office, "--banned", "--name", "dan") == [7, 6]
    assert await ids(back_office, "--chat", CHAT_OF_ALICIA, "--name", "ali") == [2]
    assert await ids(back_office, "--chat", CHAT_OF_ALICIA, "--banned") == []


async def test_users_list_limit_keeps_the_newest(back_office: BackOffice) -> None:
    assert await ids(back_office, "--limit", "3") == [8, 7, 6]


async def test_users_show_account_chat_accesses_resources_and_payments(back_office: BackOffice) -> None:
    found = await shown(back_office, "users", "show", "2")
    assert {key: found[key] for key in ("id", "name", "email", "banned", "closed", "deleted_at")} == {
        "id": 2,
        "name": "alicia",
        "email": None,
        "banned": False,
        "closed": False,
        "deleted_at": None,
    }
    assert [account["chat_id"] for account in found["chat_accounts"]] == [CHAT_OF_ALICIA]
    assert [(access["id"], access["source"], access["revoked"]) for access in found["accesses"]] == [
        (5, "purchase", True),
        (1, "purchase", False),
        (3, "manual", False),
    ]
    assert [resource["id"] for resource in found["resources"]] == [5, 2]
    assert [(payment["uid"], payment["status"]) for payment in found["payments"]] == [
        (P2, "refunded"),
        (P1, "paid"),
    ]


async def test_users_show_text_marks_empty_sections(back_office: BackOffice) -> None:
    result = await back_office.ok("users", "show", "7")
    assert result.lines[:2] == ["id          7", "name        Danny"]
    assert "banned      yes" in result.lines
    assert result.stdout.endswith("payments (0)\n(none)\n")
    assert result.stdout.count("(none)") == 4


@pytest.mark.parametrize("user", ["99", "x", "0"])
async def test_users_show_of_an_unknown_user_is_refused(back_office: BackOffice, user: str) -> None:
    assert await back_office.refused("users", "show", user) == f"marketplace: no user {user!r}"
    assert (await back_office("users", "show", user)).exit_code == 1
