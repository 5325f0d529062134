"""`marketplace gifts ...`: issuing, enabling and disabling gift codes, on both profiles.

In the test catalogue WELCOME10 is enabled and active, OFF is disabled; user 3 is deleted;
resource 7 belongs to user 2.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.models import Activity
from tests.backoffice.conftest import BackOffice

LOGGED_KEYS = {"activity_id", "action", "by", "at", "subject", "before", "after", "effects", "summary"}


def only_change(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [change] = objects
    assert set(change) == LOGGED_KEYS
    return change


async def check(api: httpx.AsyncClient, code: str) -> Any:
    response = await api.get(f"/api/v1/gift/{code}")
    assert response.status_code == 200
    return response.json()


async def logged_row(engine: AsyncEngine, activity_id: int) -> tuple[Any, ...]:
    """The activity-log entry's event, resource, user and actor."""
    columns = (Activity.event, Activity.resource_id, Activity.user_id, Activity.actor)
    async with engine.connect() as connection:
        row = (await connection.execute(select(*columns).where(Activity.id == activity_id))).one()
    return tuple(row)


# --- create ---------------------------------------------------------------------------------


async def test_create_issues_a_code_the_api_checks_active(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    assert (await api.get("/api/v1/gift/Summer25")).status_code == 404
    result = await back_office.ok(
        "gifts", "create", "Summer25", "--percentage", "25", "--by", "alice", "--json"
    )
    change = only_change(result.objects)
    assert change["action"] == "gift.created"
    assert change["by"] == "alice"
    assert change["subject"] == {"gift": "Summer25"}
    assert change["before"] is None
    assert change["after"] == {
        "code": "Summer25",
        "percentage": 25,
        "enabled": True,
        "starts_at": None,
        "expires_at": None,
        "max_uses": None,
        "seller_id": None,
        "resource_id": None,
    }
    assert await check(api, "Summer25") == {"code": "Summer25", "percentage": 25, "active": True}
    assert await check(api, "summer25") == {"code": "Summer25", "percentage": 25, "active": True}
    assert await logged_row(engine, change["activity_id"]) == ("gift.created", None, None, "alice")


async def test_create_stores_times_as_utc_with_quota_and_the_resource_author_as_seller(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    result = await back_office.ok(
        "gifts", "create", "CHAT5", "--percentage", "5", "--starts-at", "2020-01-01T02:00:00+02:00",
        "--expires-at", "2999-01-01", "--quota", "3", "--resource", "7", "--json",
    )  # fmt: skip
    change = only_change(result.objects)
    assert change["after"] == {
        "code": "CHAT5",
        "percentage": 5,
        "enabled": True,
        "starts_at": "2020-01-01T00:00:00Z",
        "expires_at": "2999-01-01T00:00:00Z",
        "max_uses": 3,
        "seller_id": 2,
        "resource_id": 7,
    }
    assert change["summary"] == "gift CHAT5 (id 6): created, 5% off resource 7 (Free Chat)"
    assert await check(api, "CHAT5") == {"code": "CHAT5", "percentage": 5, "active": True}
    assert await logged_row(engine, change["activity_id"]) == ("gift.created", 7, 2, change["by"])


async def test_create_for_a_seller_applies_to_every_resource_of_that_seller(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    result = await back_office.ok("gifts", "create", "BOB15", "--percentage", "15", "--seller", "2")
    assert result.lines == ["gift BOB15 (id 6): created, 15% off every resource of user 2 (bob)"]
    assert await check(api, "BOB15") == {"code": "BOB15", "percentage": 15, "active": True}


async def test_create_disabled_or_not_yet_started_or_expired_checks_inactive(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    await back_office.ok("gifts", "create", "SLEEPING", "--percentage", "10", "--disabled")
    assert await check(api, "SLEEPING") == {"code": "SLEEPING", "percentage": 10, "active": False}
    await back_office.ok(
        "gifts", "create", "FUTURE", "--percentage", "10", "--starts-at", "2999-01-01T00:00:00Z"
    )
    assert (await check(api, "FUTURE"))["active"] is False
    await back_office.ok(
        "gifts", "create", "PAST", "--percentage", "10", "--expires-at", "2020-01-01T00:00:00Z"
    )
    assert (await check(api, "PAST"))["active"] is False


async def test_create_refuses_an_invalid_or_taken_code(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    rule = "1 to 32 characters, no space at either end, no '/' or control character, not '.' or '..'"
    for code in ("", " PADDED", "A/B", "C" * 33, "CODE\n", ".", ".."):
        assert await back_office.refused("gifts", "create", code, "--percentage", "10") == (
            f"marketplace: invalid gift code {code!r}: {rule}"
        )
    assert await back_office.refused("gifts", "create", "welcome10", "--percentage", "10") == (
        "marketplace: gift code 'welcome10' is taken: WELCOME10 exists already (codes ignore case)"
    )


async def test_create_refuses_a_percentage_outside_1_to_100(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    for percentage in ("0", "101", "ten", "-5"):
        assert await back_office.refused("gifts", "create", "NEW", "--percentage", percentage) == (
            f"marketplace: invalid percentage {percentage!r}: a whole number from 1 to 100"
        )


async def test_create_refuses_an_unreadable_time_and_an_expiry_not_after_the_start(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    assert await back_office.refused(
        "gifts", "create", "NEW", "--percentage", "10", "--starts-at", "soon"
    ) == ("marketplace: invalid start time 'soon': ISO 8601, e.g. 2025-06-01T12:00:00Z or 2025-06-01")
    assert (
        await back_office.refused(
            "gifts", "create", "NEW", "--percentage", "10", "--expires-at", "2025-13-01"
        )
        == "marketplace: invalid expiry time '2025-13-01': ISO 8601, e.g. 2025-06-01T12:00:00Z or 2025-06-01"
    )
    assert (
        await back_office.refused(
            "gifts", "create", "NEW", "--percentage", "10", "--starts-at", "0001-01-01T00:00:00+01:00"
        )
        == "marketplace: invalid start time '0001-01-01T00:00:00+01:00': out of range"
    )
    for expiry in ("2030-01-01T00:00:00Z", "2030-01-01T01:00:00+01:00"):
        assert (
            await back_office.refused(
                "gifts",
                "create",
                "NEW",
                "--percentage",
                "10",
                "--starts-at",
                "2030-01-01",
                "--expires-at",
                expiry,
            )
            == "marketplace: the expiry (2030-01-01T00:00:00Z) must be after the start (2030-01-01T00:00:00Z)"
        )


async def test_create_refuses_a_quota_below_one_or_beyond_nine_digits(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    for quota in ("0", "-1", "many", "1000000000"):
        assert await back_office.refused(
            "gifts", "create", "NEW", "--percentage", "10", "--quota", quota
        ) == (
            f"marketplace: invalid quota {quota!r}: a whole number from 1 to 999999999 (omit it for no quota)"
        )


async def test_create_refuses_an_unknown_resource_or_seller_a_deleted_seller_and_another_sellers_resource(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    def create(*options: str) -> tuple[str, ...]:
        return ("gifts", "create", "NEW", "--percentage", "10", *options)

    assert await back_office.refused(*create("--resource", "99")) == "marketplace: no resource '99'"
    assert await back_office.refused(*create("--seller", "99")) == "marketplace: no user '99'"
    assert await back_office.refused(*create("--seller", "3")) == (
        "marketplace: user 3 is deleted: a deleted account issues no gift code"
    )
    assert await back_office.refused(*create("--resource", "7", "--seller", "1")) == (
        "marketplace: resource 7 belongs to user 2, not to seller 1"
    )


# --- enable and disable ---------------------------------------------------------------------


async def test_disable_makes_the_code_check_inactive_and_enable_active_again(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    # The code is found without regard to case, as the API finds it.
    disabled = only_change((await back_office.ok("gifts", "disable", "welcome10", "--json")).objects)
    assert disabled["action"] == "gift.disabled"
    assert disabled["subject"] == {"gift": "WELCOME10"}
    assert (disabled["before"], disabled["after"]) == ({"enabled": True}, {"enabled": False})
    assert await check(api, "WELCOME10") == {"code": "WELCOME10", "percentage": 10, "active": False}

    enabled = only_change((await back_office.ok("gifts", "enable", "WELCOME10", "--json")).objects)
    assert enabled["action"] == "gift.enabled"
    assert (enabled["before"], enabled["after"]) == ({"enabled": False}, {"enabled": True})
    assert (await check(api, "WELCOME10"))["active"] is True


async def test_enable_lets_a_disabled_catalogue_code_apply(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    assert (await check(api, "OFF"))["active"] is False
    assert (await back_office.ok("gifts", "enable", "off")).lines == ["gift OFF (id 2): enabled"]
    assert await check(api, "OFF") == {"code": "OFF", "percentage": 20, "active": True}


async def test_enable_and_disable_refuse_an_unknown_code_and_a_no_op(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    assert await back_office.refused("gifts", "enable", "NOPE") == "marketplace: no gift code 'NOPE'"
    assert (
        await back_office.refused("gifts", "disable", "C" * 33) == f"marketplace: no gift code '{'C' * 33}'"
    )
    assert await back_office.refused("gifts", "enable", "welcome10") == (
        "marketplace: gift WELCOME10 is already enabled"
    )
    assert await back_office.refused("gifts", "disable", "OFF") == "marketplace: gift OFF is already disabled"


# --- codes compared by their key (NFC, case folded) -------------------------------------------


async def test_a_code_is_found_and_taken_without_regard_to_final_sigma_or_normalisation(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    await back_office.ok("gifts", "create", "ΟΔΟΣ", "--percentage", "15")
    assert await check(api, "οδος") == {"code": "ΟΔΟΣ", "percentage": 15, "active": True}
    assert (await back_office.ok("gifts", "disable", "οδοσ")).lines[0].startswith("gift ΟΔΟΣ (id ")
    assert (await check(api, "ΟΔΟΣ"))["active"] is False

    composed, decomposed = unicodedata.normalize("NFC", "Café"), unicodedata.normalize("NFD", "CAFÉ")
    await back_office.ok("gifts", "create", composed, "--percentage", "5")
    refused = await back_office.refused("gifts", "create", decomposed, "--percentage", "5")
    assert refused == (
        f"marketplace: gift code {decomposed!r} is taken: {composed} exists already (codes ignore case)"
    )
    assert await check(api, decomposed) == {"code": composed, "percentage": 5, "active": True}
