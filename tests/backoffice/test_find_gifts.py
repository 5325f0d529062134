"""`marketplace gifts list` and `show`: finding a gift code without SQL, on both profiles."""

from __future__ import annotations

import pytest

from tests.backoffice.conftest import BackOffice
from tests.backoffice.finding import listed, shop, shown
from tests.conftest import Loader


@pytest.fixture(autouse=True)
async def loaded(load: Loader) -> None:
    await load(shop())


async def codes(back_office: BackOffice, *options: str) -> list[str]:
    return [row["code"] for row in await listed(back_office, "gifts", "list", *options)]


async def test_gifts_list_every_code_newest_first(back_office: BackOffice) -> None:
    # Loaded in one transaction: one creation time, so the newest id first.
    assert await codes(back_office) == ["Tools25", "USEDUP", "LATER", "OLD", "OFF", "WELCOME10"]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (("--seller", "2"), ["Tools25", "USEDUP", "OLD"]),
        # Enabled, started, not expired, uses left: as the API applies them.
        (("--active",), ["Tools25", "WELCOME10"]),
    ],
)
async def test_gifts_list_filter_keeps_what_it_names(
    back_office: BackOffice, options: tuple[str, ...], expected: list[str]
) -> None:
    assert await codes(back_office, *options) == expected


async def test_gifts_list_filters_combine(back_office: BackOffice) -> None:
    assert await codes(back_office, "--seller", "1", "--active") == ["WELCOME10"]
    assert await codes(back_office, "--seller", "3", "--active") == []


async def test_gifts_list_limit_keeps_the_newest(back_office: BackOffice) -> None:
    assert await codes(back_office, "--limit", "1", "--seller", "1") == ["LATER"]


async def test_gifts_list_follows_a_disabled_code(back_office: BackOffice) -> None:
    await back_office.ok("gifts", "disable", "welcome10")
    assert await codes(back_office, "--active") == ["Tools25"]


async def test_gifts_show_every_stored_field(back_office: BackOffice) -> None:
    assert await shown(back_office, "gifts", "show", "tools25") == {
        "code": "Tools25",
        "id": 6,
        "code_key": "tools25",
        "percentage": 25,
        "enabled": True,
        "active": True,
        "uses": 4,
        "quota": 10,
        "starts_at": "2024-01-01T00:00:00Z",
        "expires_at": "2999-01-01T00:00:00Z",
        "seller_id": 2,
        "seller_name": "alicia",
        "resource_id": 2,
        "resource_name": "Pro Tools",
        "created_at": (await shown(back_office, "gifts", "show", "TOOLS25"))["created_at"],
        "updated_at": (await shown(back_office, "gifts", "show", "TOOLS25"))["updated_at"],
    }


async def test_gifts_show_text_is_field_value_lines(back_office: BackOffice) -> None:
    result = await back_office.ok("gifts", "show", "USEDUP")
    assert result.lines[:2] == ["code           USEDUP", "id             5"]
    assert "quota          3" in result.lines
    assert "active         no" in result.lines
    assert "starts_at      -" in result.lines


@pytest.mark.parametrize("code", ["NOPE", "a/b"])
async def test_gifts_show_of_an_unknown_code_is_refused(back_office: BackOffice, code: str) -> None:
    assert await back_office.refused("gifts", "show", code) == f"marketplace: no gift code {code!r}"
    assert (await back_office("gifts", "show", code)).exit_code == 1
