"""`marketplace accesses list`: finding accesses without SQL, on both profiles."""

from __future__ import annotations

import pytest

from tests.backoffice.conftest import BackOffice
from tests.backoffice.finding import P1, listed, shop
from tests.conftest import Loader


@pytest.fixture(autouse=True)
async def loaded(load: Loader) -> None:
    await load(shop())


async def ids(back_office: BackOffice, *options: str) -> list[int]:
    return [row["id"] for row in await listed(back_office, "accesses", "list", *options)]


async def test_accesses_list_every_access_newest_first(back_office: BackOffice) -> None:
    assert await ids(back_office) == [4, 5, 2, 1, 3]


async def test_accesses_list_row_names_user_resource_and_payment(back_office: BackOffice) -> None:
    [row] = await listed(back_office, "accesses", "list", "--user", "2", "--resource", "1")
    assert row == {
        "id": 1,
        "user_id": 2,
        "user_name": "alicia",
        "resource_id": 1,
        "resource_name": "Économie Pro",
        "source": "purchase",
        "revoked": False,
        "payment_uid": P1,
        "created_at": "2024-05-01T10:01:00Z",
        "updated_at": "2024-05-01T10:01:00Z",
    }


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (("--user", "2"), [5, 1, 3]),
        (("--resource", "3"), [4, 5]),
        (("--source", "purchase"), [5, 2, 1]),
        (("--source", "gift"), [4]),
        (("--revoked",), [4, 5]),
    ],
)
async def test_accesses_list_filter_keeps_what_it_names(
    back_office: BackOffice, options: tuple[str, ...], expected: list[int]
) -> None:
    assert await ids(back_office, *options) == expected


async def test_accesses_list_filters_combine(back_office: BackOffice) -> None:
    assert await ids(back_office, "--user", "2", "--source", "purchase") == [5, 1]
    assert await ids(back_office, "--user", "2", "--source", "purchase", "--revoked") == [5]
    assert await ids(back_office, "--resource", "1", "--revoked") == []


async def test_accesses_list_limit_keeps_the_newest(back_office: BackOffice) -> None:
    assert await ids(back_office, "--limit", "2") == [4, 5]


async def test_accesses_list_follows_a_revoke(back_office: BackOffice) -> None:
    await back_office.ok("accesses", "revoke", "2", "1")
    assert await ids(back_office, "--revoked", "--resource", "1") == [1]


async def test_accesses_show_the_access_and_its_log_entries(back_office: BackOffice) -> None:
    await back_office.ok("accesses", "revoke", "2", "1", "--by", "alice")
    found = (await back_office.ok("accesses", "show", "1", "--json")).objects[0]
    assert {
        key: found[key] for key in ("id", "user_name", "resource_id", "source", "revoked", "payment_uid")
    } == {
        "id": 1,
        "user_name": "alicia",
        "resource_id": 1,
        "source": "purchase",
        "revoked": True,
        "payment_uid": P1,
    }
    [entry] = found["activity"]
    assert (entry["action"], entry["by"], entry["access_id"]) == ("access.revoked", "alice", 1)
    text = await back_office.ok("accesses", "show", "1")
    assert text.lines[0] == "id             1"
    assert text.lines[-2] == "activity (1)"


@pytest.mark.parametrize("access", ["99", "x"])
async def test_accesses_show_of_an_unknown_access_is_refused(back_office: BackOffice, access: str) -> None:
    assert await back_office.refused("accesses", "show", access) == f"marketplace: no access {access!r}"
    assert (await back_office("accesses", "show", access)).exit_code == 1
