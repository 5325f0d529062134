"""`marketplace payments list` and `show`: finding a payment without SQL, on both profiles."""

from __future__ import annotations

import pytest

from tests.backoffice.conftest import BackOffice
from tests.backoffice.finding import P1, P2, P3, P4, P5, UNKNOWN_UID, columns, listed, shop, shown
from tests.conftest import Loader


@pytest.fixture(autouse=True)
async def loaded(load: Loader) -> None:
    await load(shop())


async def uids(back_office: BackOffice, *options: str) -> list[str]:
    return [row["uid"] for row in await listed(back_office, "payments", "list", *options)]


async def test_payments_list_every_payment_newest_first(back_office: BackOffice) -> None:
    assert await uids(back_office) == [P5, P3, P2, P1, P4]


async def test_payments_list_row_names_buyer_and_resource(back_office: BackOffice) -> None:
    [row] = await listed(back_office, "payments", "list", "--status", "refunded")
    assert row == {
        "uid": P2,
        "status": "refunded",
        "amount": "10.00",
        "currency": "USD",
        "buyer_id": 2,
        "buyer_name": "alicia",
        "resource_id": 1,
        "resource_name": "Économie Pro",
        "created_at": "2024-06-01T10:00:00Z",
    }


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (("--status", "paid"), [P1, P4]),
        (("--status", " PAID "), [P1, P4]),
        (("--user", "2"), [P2, P1]),
        (("--resource", "1"), [P2, P1, P4]),
        (("--since", "2024-06-01T10:00:00Z"), [P5, P3, P2]),
        (("--until", "2024-06-01T10:00:00Z"), [P1, P4]),
        (("--since", "2024-05-01", "--until", "2024-07-01T10:00:00+00:00"), [P2, P1]),
    ],
)
async def test_payments_list_filter_keeps_what_it_names(
    back_office: BackOffice, options: tuple[str, ...], expected: list[str]
) -> None:
    assert await uids(back_office, *options) == expected


async def test_payments_list_filters_combine(back_office: BackOffice) -> None:
    assert await uids(back_office, "--status", "paid", "--resource", "1", "--user", "3") == [P4]
    assert await uids(back_office, "--status", "paid", "--since", "2024-04-15") == [P1]


async def test_payments_list_since_takes_a_duration_ago(back_office: BackOffice) -> None:
    # Every payment is older than a day, none older than 100 years ago.
    assert await uids(back_office, "--since", "1d") == []
    assert await uids(back_office, "--since", "36500d") == [P5, P3, P2, P1, P4]


async def test_payments_list_limit_keeps_the_newest(back_office: BackOffice) -> None:
    assert await uids(back_office, "--limit", "2") == [P5, P3]
    assert await uids(back_office, "--limit", "2", "--status", "paid") == [P1, P4]


async def test_payments_list_text_is_aligned_columns(back_office: BackOffice) -> None:
    result = await back_office.ok("payments", "list", "--resource", "1")
    table = columns(result.lines)
    assert table[0] == [
        "UID",
        "STATUS",
        "AMOUNT",
        "CURRENCY",
        "BUYER_ID",
        "BUYER_NAME",
        "RESOURCE_ID",
        "RESOURCE_NAME",
        "CREATED_AT",
    ]
    assert [row[:5] for row in table[1:]] == [
        [P2, "refunded", "10.00", "USD", "2"],
        [P1, "paid", "9.99", "EUR", "2"],
        [P4, "paid", "9.99", "EUR", "3"],
    ]


async def test_payments_show_the_payment_its_buyer_resource_access_and_log(back_office: BackOffice) -> None:
    await back_office.ok("payments", "confirm", P3, "--by", "alice")
    found = await shown(back_office, "payments", "show", P3.lower())
    assert {key: found[key] for key in ("uid", "status", "buyer_id", "seller_id", "resource_id")} == {
        "uid": P3,
        "status": "paid",
        "buyer_id": 3,
        "seller_id": 2,
        "resource_id": 2,
    }
    assert (found["buyer_name"], found["seller_name"], found["resource_name"]) == (
        "Bob\nEvil",
        "alicia",
        "Pro Tools",
    )
    [access] = found["accesses"]
    assert (access["user_id"], access["resource_id"], access["source"], access["revoked"]) == (
        3,
        2,
        "purchase",
        False,
    )
    [entry] = found["activity"]
    assert (entry["action"], entry["by"], entry["subject"]) == ("payment.confirmed", "alice", {"payment": P3})


async def test_payments_show_only_this_payments_log_entries(back_office: BackOffice) -> None:
    # P1 and P2: the same buyer and resource; each shows its own entries.
    await back_office.ok("payments", "refund", P1)
    assert [entry["action"] for entry in (await shown(back_office, "payments", "show", P1))["activity"]] == [
        "payment.refunded"
    ]
    assert (await shown(back_office, "payments", "show", P2))["activity"] == []


async def test_payments_show_text_is_fields_then_sections(back_office: BackOffice) -> None:
    result = await back_office.ok("payments", "show", P1)
    assert result.lines[0] == f"uid                      {P1}"
    assert "provider_transaction_id  PAYID-123" in result.lines
    assert "buyer_name               alicia" in result.lines
    sections = [line for line in result.lines if line.startswith(("accesses (", "activity ("))]
    assert sections == ["accesses (1)", "activity (0)"]
    assert result.lines[-1] == "(none)"


@pytest.mark.parametrize("uid", [UNKNOWN_UID, "not-a-ulid"])
async def test_payments_show_of_an_unknown_uid_is_refused(back_office: BackOffice, uid: str) -> None:
    assert await back_office.refused("payments", "show", uid) == f"marketplace: no payment {uid!r}"
    assert (await back_office("payments", "show", uid)).exit_code == 1
