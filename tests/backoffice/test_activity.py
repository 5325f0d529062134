"""`marketplace activity`: the log of the back office's commands and of the API's grants, filtered,
as lines or JSON, on both profiles; reading it writes nothing."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import insert, update
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.backoffice.events import EVENTS
from marketplace.models import Activity, Resource, utcnow
from tests.backoffice.conftest import BackOffice
from tests.catalogue import MEMBER_CHAT_ID, PAID_UID
from tests.conftest import GRANT_SECRET, Loader

NEW_CHAT_ID = "666666666666666666"
# The first two entries are moved back in time, so that time filters can tell them apart.
FIRST_AT = "2024-05-01T10:00:00Z"
SECOND_AT = "2024-05-02T10:00:00Z"


@dataclass(frozen=True)
class History:
    """Five entries, oldest first: what each command printed (`--json`), the API's grant by id."""

    granted: dict[str, Any]  # accesses grant 2 2, by alice, on FIRST_AT
    banned: dict[str, Any]  # users ban 6, by bob, on SECOND_AT
    api_grant_id: int  # the API's grant of resource 8 to user 2 (its revoked access 4), now
    revoked: dict[str, Any]  # accesses revoke 2 1, by alice, now
    linked: dict[str, Any]  # users link-chat 6, by bob, now

    @property
    def ids(self) -> dict[str, int]:
        return {
            "granted": self.granted["activity_id"],
            "banned": self.banned["activity_id"],
            "api grant": self.api_grant_id,
            "revoked": self.revoked["activity_id"],
            "linked": self.linked["activity_id"],
        }


@pytest.fixture
async def history(back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine) -> History:
    async def run(*args: str) -> dict[str, Any]:
        [change] = (await back_office.ok(*args, "--json")).objects
        return change

    granted = await run("accesses", "grant", "2", "2", "--by", "alice")
    banned = await run("users", "ban", "6", "--by", "bob")
    answer = await api.post(f"/api/v1/chat/{MEMBER_CHAT_ID}/apply/8", json={"custom_password": GRANT_SECRET})
    assert answer.json() == {"message": "ok"}
    revoked = await run("accesses", "revoke", "2", "1", "--by", "alice")
    linked = await run("users", "link-chat", "6", NEW_CHAT_ID, "--by", "bob")
    api_grant_id = banned["activity_id"] + 1
    assert revoked["activity_id"] == api_grant_id + 1
    async with engine.begin() as connection:
        for entry, at in ((granted, FIRST_AT), (banned, SECOND_AT)):
            await connection.execute(
                update(Activity)
                .where(Activity.id == entry["activity_id"])
                .values(created_at=datetime.fromisoformat(at[:-1]))
            )
    return History(granted, banned, api_grant_id, revoked, linked)


async def read(back_office: BackOffice, *options: str) -> list[dict[str, Any]]:
    """`marketplace activity OPTIONS --json`: one object per entry."""
    return (await back_office.ok("activity", *options, "--json")).objects


async def read_ids(back_office: BackOffice, *options: str) -> list[int]:
    return [entry["id"] for entry in await read(back_office, *options)]


async def test_activity_prints_one_line_per_entry_newest_first(
    back_office: BackOffice, history: History
) -> None:
    ids = history.ids
    at = {entry["id"]: entry["at"] for entry in await read(back_office)}

    result = await back_office.ok("activity")

    assert result.lines == [
        f"{at[ids['linked']]}  #{ids['linked']}  chat_account.linked  by bob"
        f"  user 6 (alicia): chat account {NEW_CHAT_ID} linked",
        f"{at[ids['revoked']]}  #{ids['revoked']}  access.revoked  by alice"
        "  access 1: resource 1 (Économie/Pro) revoked from user 2 (bob)",
        f"{at[ids['api grant']]}  #{ids['api grant']}  access.granted  via api.v1.chat.grant"
        "  access 4: resource 8 (Half Price) granted to user 2 (bob)",
        f"{SECOND_AT}  #{ids['banned']}  user.banned  by bob  user 6 (alicia): banned",
        f"{FIRST_AT}  #{ids['granted']}  access.granted  by alice"
        "  access 5: resource 2 (Unlisted Utility) granted to user 2 (bob)",
    ]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", moment) for moment in at.values())


async def test_activity_json_holds_every_column_of_a_back_office_entry_as_the_command_reported_it(
    back_office: BackOffice, history: History
) -> None:
    entries = {entry["id"]: entry for entry in await read(back_office)}

    revoked = entries[history.revoked["activity_id"]]

    assert revoked == {
        "id": history.revoked["activity_id"],
        "at": history.revoked["at"],
        "action": "access.revoked",
        "by": "alice",
        "via": "marketplace accesses revoke",
        "user_id": 2,
        "resource_id": 1,
        "access_id": 1,
        "ip_hash": None,
        "subject": history.revoked["subject"],
        "before": history.revoked["before"],
        "after": history.revoked["after"],
        "effects": [],
        "summary": history.revoked["summary"],
    }
    assert list(revoked)[:13] == list(entries[history.ids["api grant"]])[:13]
    linked = entries[history.linked["activity_id"]]
    assert (linked["action"], linked["user_id"], linked["resource_id"], linked["access_id"]) == (
        "chat_account.linked",
        6,
        None,
        None,
    )
    assert (linked["before"], linked["after"]) == ({"chat": None}, {"chat": NEW_CHAT_ID})


async def test_activity_json_of_an_api_grant_holds_its_route_hashed_address_and_properties(
    back_office: BackOffice, history: History
) -> None:
    [entry] = [entry for entry in await read(back_office) if entry["id"] == history.ids["api grant"]]

    assert list(entry) == [
        "id",
        "at",
        "action",
        "by",
        "via",
        "user_id",
        "resource_id",
        "access_id",
        "ip_hash",
        "subject",
        "before",
        "after",
        "effects",
        "source",
        "summary",
    ]
    assert re.fullmatch(r"[0-9a-f]{64}", entry["ip_hash"])
    assert {key: value for key, value in entry.items() if key not in ("at", "ip_hash")} == {
        "id": history.ids["api grant"],
        "action": "access.granted",
        "by": None,
        "via": "api.v1.chat.grant",
        "user_id": 2,
        "resource_id": 8,
        "access_id": 4,
        "subject": None,
        "before": None,
        "after": None,
        "effects": [],
        "source": "manual",
        "summary": "access 4: resource 8 (Half Price) granted to user 2 (bob)",
    }


async def test_activity_filters_by_user_resource_and_operator(
    back_office: BackOffice, history: History
) -> None:
    ids = history.ids
    cases = {
        ("--user", "2"): ["revoked", "api grant", "granted"],
        ("--user", "0006"): ["linked", "banned"],
        ("--user", "1"): [],
        ("--resource", "8"): ["api grant"],
        ("--resource", "2"): ["granted"],
        ("--resource", "7"): [],
        ("--by", "alice"): ["revoked", "granted"],
        ("--by", "api.v1.chat.grant"): ["api grant"],
        ("--user", "2", "--resource", "1"): ["revoked"],
        ("--user", "6", "--by", "alice"): [],
    }
    for options, expected in cases.items():
        assert await read_ids(back_office, *options) == [ids[name] for name in expected], options


async def test_activity_filters_by_an_exact_action_or_a_prefix_of_actions(
    back_office: BackOffice, history: History
) -> None:
    ids = history.ids
    cases = {
        "access.granted": ["api grant", "granted"],
        "access.revoked": ["revoked"],
        "access.": ["revoked", "api grant", "granted"],
        "access.*": ["revoked", "api grant", "granted"],
        "user.*": ["banned"],
        "chat_account.linked": ["linked"],
        "chat_account.*": ["linked"],
        # A family the log holds no entry of yet.
        "payment.*": [],
        "payment.dispute_won": [],
    }
    for action, expected in cases.items():
        assert await read_ids(back_office, "--action", action) == [ids[name] for name in expected], action
    combined = await read_ids(back_office, "--action", "access.*", "--user", "2", "--resource", "8")
    assert combined == [ids["api grant"]]


async def test_activity_filters_by_time_in_iso_8601_or_as_a_duration_ago(
    back_office: BackOffice, history: History
) -> None:
    ids = history.ids
    recent = ["linked", "revoked", "api grant"]
    cases = {
        ("--since", "2024-05-02"): [*recent, "banned"],
        # --since is inclusive, --until exclusive.
        ("--since", SECOND_AT): [*recent, "banned"],
        ("--since", "2024-05-02T12:00:01+02:00"): recent,
        ("--since", "2024-05-02T10:00:01"): recent,
        ("--until", SECOND_AT): ["granted"],
        ("--until", "2024-05-02"): ["granted"],
        ("--since", "2024-05-01", "--until", "2024-05-03"): ["banned", "granted"],
        ("--since", "1h"): recent,
        ("--since", "1d12h"): recent,
        ("--until", "7d"): ["banned", "granted"],
        ("--since", "2099-01-01"): [],
        ("--user", "6", "--since", "1h"): ["linked"],
        ("--action", "access.*", "--until", "1h"): ["granted"],
    }
    for options, expected in cases.items():
        assert await read_ids(back_office, *options) == [ids[name] for name in expected], options


async def test_activity_limit_keeps_the_newest_entries_or_with_oldest_first_the_oldest(
    back_office: BackOffice, history: History
) -> None:
    ids = history.ids
    cases = {
        ("--limit", "2"): ["linked", "revoked"],
        ("--limit", "1", "--user", "2"): ["revoked"],
        ("--oldest-first",): ["granted", "banned", "api grant", "revoked", "linked"],
        ("--oldest-first", "--limit", "2"): ["granted", "banned"],
        ("--oldest-first", "--since", "1h", "--limit", "1"): ["api grant"],
        ("--oldest-first", "--action", "access.*"): ["granted", "api grant", "revoked"],
    }
    for options, expected in cases.items():
        assert await read_ids(back_office, *options) == [ids[name] for name in expected], options
    assert len((await back_office.ok("activity", "--limit", "3")).lines) == 3


async def test_activity_shows_fifty_entries_unless_told_otherwise(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    async with engine.begin() as connection:
        await connection.execute(
            insert(Activity),
            [{"event": "user.banned", "user_id": 2, "created_at": utcnow()} for _ in range(60)],
        )

    entries = await read(back_office)

    assert len(entries) == 50
    assert [entry["id"] for entry in entries] == sorted((entry["id"] for entry in entries), reverse=True)
    assert entries[0]["id"] - entries[-1]["id"] == 49
    assert len(await read(back_office, "--limit", "60")) == 60


async def test_activity_with_no_matching_entry_says_so_in_text_and_prints_nothing_in_json(
    back_office: BackOffice, history: History
) -> None:
    assert (await back_office.ok("activity", "--user", "5")).lines == ["no activity matches"]
    assert (await back_office.ok("activity", "--user", "5", "--json")).lines == []


async def test_reading_the_activity_writes_nothing_not_even_an_entry(
    back_office: BackOffice, history: History
) -> None:
    before = await back_office.snapshot()

    await back_office.ok("activity", "--json")
    await back_office.ok("activity", "--action", "access.*", "--since", "1d")

    assert await back_office.snapshot() == before


async def test_activity_refuses_an_invalid_filter_in_one_line(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    time_rule = "use ISO 8601 (2024-05-01T10:00:00Z, 2024-05-01) or a duration ago (24h, 7d)"
    id_rule = "a whole number from 1 to 2147483647"
    refusals = {
        ("--user", "bob"): f"--user: invalid id 'bob': {id_rule}",
        ("--user", "0"): f"--user: invalid id '0': {id_rule}",
        ("--resource", "2147483648"): f"--resource: invalid id '2147483648': {id_rule}",
        ("--since", "yesterday"): f"--since: invalid time 'yesterday': {time_rule}",
        ("--until", "2024-13-01"): f"--until: invalid time '2024-13-01': {time_rule}",
        ("--since", "0h"): f"--since: invalid time '0h': {time_rule}",
        ("--since", "2024-05-02", "--until", "2024-05-01"): (
            "--since 2024-05-02 is not before --until 2024-05-01: no entry can match"
        ),
        ("--since", "1h", "--until", "2h"): "--since 1h is not before --until 2h: no entry can match",
        ("--limit", "0"): "--limit: invalid count '0': a whole number from 1 to 999999999",
        ("--limit", "ten"): "--limit: invalid count 'ten': a whole number from 1 to 999999999",
        ("--by", " "): "--by: invalid name ' ': 1 to 255 characters",
    }
    for options, message in refusals.items():
        assert await back_office.refused("activity", *options) == f"marketplace: {message}", options


async def test_activity_refuses_an_unknown_event_as_a_usage_error_naming_the_known_events(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    known = (
        f"one of {', '.join(EVENTS)},"
        " or a family (payment.*, access.*, resource.*, gift.*, user.*, chat_account.*, webhook.*)"
    )
    # A family ends with a dot, so `acc.*` names no event of `access.`; without one, an exact event.
    for action in ("payment.refundd", "payments.*", "acc.*", "access", "payment.**", "*", "", "pay ment"):
        result = await back_office("activity", "--action", action)

        assert (result.exit_code, result.stdout) == (2, ""), action
        assert result.stderr.splitlines() == [
            f"marketplace: Invalid value for '--action': unknown event {action!r}: {known}"
            " (see `marketplace activity --help`)"
        ]


# Payments of alicia (user 6) beside the catalogue's: a purchase and an invoice to move, and a
# checkout abandoned long ago.
PURCHASE_UID, INVOICE_UID, ABANDONED_UID = (f"01J9ACT1V1TY{number:014d}" for number in (30, 31, 32))


def every_event_document() -> dict[str, Any]:
    def payment(payment_id: int, uid: str, resource_id: int | None, **more: Any) -> dict[str, Any]:
        return {
            "id": payment_id,
            "uid": uid,
            "status": "pending",
            "amount_cents": 1250,
            "buyer_id": 6,
            "seller_id": 2,
            "resource_id": resource_id,
            **more,
        }

    return {
        "payments": [
            payment(30, PURCHASE_UID, 8),
            payment(31, INVOICE_UID, None),
            payment(32, ABANDONED_UID, 8, created_at="2020-01-01T00:00:00Z"),
        ]
    }


# Every change the log holds, in order: the command (or the API's grant), its event, and the line
# it is reported with, which names what changed.
EVERY_CHANGE: list[tuple[tuple[str, ...], str, str]] = [
    (
        ("payments", "confirm", PURCHASE_UID),
        "payment.confirmed",
        f"payment {PURCHASE_UID}: pending -> paid; access 5 granted",
    ),
    (
        ("payments", "refund", PURCHASE_UID),
        "payment.refunded",
        f"payment {PURCHASE_UID}: paid -> refunded; access 5 revoked",
    ),
    (("payments", "fail", INVOICE_UID), "payment.failed", f"payment {INVOICE_UID}: pending -> unpaid"),
    (("payments", "cancel", INVOICE_UID), "payment.cancelled", f"payment {INVOICE_UID}: unpaid -> cancelled"),
    (
        ("payments", "prune-checkouts", "--older-than", "48h"),
        "payment.cancelled",
        f"payment {ABANDONED_UID}: pending -> cancelled (checkout of 2020-01-01T00:00:00Z)",
    ),
    (
        ("payments", "dispute", PAID_UID),
        "payment.disputed",
        f"payment {PAID_UID}: paid -> disputed; access 1 revoked",
    ),
    (
        ("payments", "win", PAID_UID),
        "payment.dispute_won",
        f"payment {PAID_UID}: disputed -> paid (dispute won); access 1 reactivated",
    ),
    (
        ("payments", "dispute", PAID_UID),
        "payment.disputed",
        f"payment {PAID_UID}: paid -> disputed; access 1 revoked",
    ),
    (
        ("payments", "lose", PAID_UID),
        "payment.dispute_lost",
        f"payment {PAID_UID}: disputed -> refunded (dispute lost)",
    ),
    (
        ("accesses", "grant", "6", "2"),
        "access.granted",
        "access 6: resource 2 (Unlisted Utility) granted to user 6 (alicia)",
    ),
    (
        ("accesses", "revoke", "6", "2"),
        "access.revoked",
        "access 6: resource 2 (Unlisted Utility) revoked from user 6 (alicia)",
    ),
    ((), "access.granted", "access 4: resource 8 (Half Price) granted to user 2 (bob)"),
    (
        ("resources", "status", "3", "published"),
        "resource.status_changed",
        "resource 3 (Draft Thing): draft -> published",
    ),
    (("resources", "soft-delete", "3"), "resource.deleted", "resource 3 (Draft Thing): deleted"),
    (
        ("resources", "restore", "3"),
        "resource.restored",
        "resource 3 (Draft Thing): restored (status published)",
    ),
    (
        ("resources", "release", "1", "--version", "3.0.0", "--title", "Third"),
        "resource.version_released",
        "resource 1 (Économie/Pro): version 3.0.0 released (id 13), current version 1.1.0 -> 3.0.0",
    ),
    (
        ("resources", "release", "1", "--version", "3.1.0", "--title", "Fourth", "--no-promote"),
        "resource.version_released",
        "resource 1 (Économie/Pro): version 3.1.0 released (id 14), current version stays 3.0.0",
    ),
    (
        ("resources", "promote", "1", "3.1.0"),
        "resource.version_promoted",
        "resource 1 (Économie/Pro): current version 3.0.0 -> 3.1.0 (id 14)",
    ),
    (
        ("resources", "stats-id", "1", "987"),
        "resource.stats_id_changed",
        "resource 1 (Économie/Pro): stats id 1234 -> 987",
    ),
    (
        ("gifts", "create", "SPRING", "--percentage", "15", "--resource", "7"),
        "gift.created",
        "gift SPRING (id 6): created, 15% off resource 7 (Free Chat)",
    ),
    (("gifts", "disable", "welcome10"), "gift.disabled", "gift WELCOME10 (id 1): disabled"),
    (("gifts", "enable", "OFF"), "gift.enabled", "gift OFF (id 2): enabled"),
    (("users", "ban", "6"), "user.banned", "user 6 (alicia): banned"),
    (("users", "unban", "6"), "user.unbanned", "user 6 (alicia): no longer banned"),
    (("users", "close", "6"), "user.closed", "user 6 (alicia): closed"),
    (("users", "reopen", "6"), "user.reopened", "user 6 (alicia): no longer closed"),
    (("users", "soft-delete", "6"), "user.deleted", "user 6 (alicia): soft-deleted"),
    (("users", "restore", "6"), "user.restored", "user 6 (alicia): no longer soft-deleted"),
    (
        ("users", "link-chat", "6", NEW_CHAT_ID),
        "chat_account.linked",
        f"user 6 (alicia): chat account {NEW_CHAT_ID} linked",
    ),
    (
        ("users", "unlink-chat", "6"),
        "chat_account.unlinked",
        f"user 6 (alicia): chat account {NEW_CHAT_ID} unlinked",
    ),
]


async def test_every_event_reads_on_its_own_as_the_command_reported_it(
    back_office: BackOffice, api: httpx.AsyncClient, load: Loader
) -> None:
    await load(every_event_document())
    for command, _, summary in EVERY_CHANGE:
        if not command:
            answer = await api.post(
                f"/api/v1/chat/{MEMBER_CHAT_ID}/apply/8", json={"custom_password": GRANT_SECRET}
            )
            assert answer.json() == {"message": "ok"}
            continue
        # The line the command prints is the one the log keeps.
        assert (await back_office.ok(*command, "--by", "tester")).lines == [summary], command

    entries = await read(back_office, "--oldest-first")
    lines = (await back_office.ok("activity", "--oldest-first")).lines

    assert [(entry["action"], entry["summary"]) for entry in entries] == [
        (event, summary) for _, event, summary in EVERY_CHANGE
    ]
    assert lines == [
        f"{entry['at']}  #{entry['id']}  {entry['action']}"
        f"  {'via api.v1.chat.grant' if entry['by'] is None else 'by tester'}  {entry['summary']}"
        for entry in entries
    ]
    # The webhooks' own events, whose lines name secrets' and deliveries' ids made by the commands,
    # are pinned the same way in tests/backoffice/test_webhooks.py.
    assert sorted({event for _, event, _ in EVERY_CHANGE}) == sorted(
        event for event in EVENTS if not event.startswith("webhook.")
    )


async def test_an_entry_written_without_its_line_is_told_in_words_with_what_it_names(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    created = {"code": "SPRING", "percentage": 15, "enabled": True}
    stored: list[tuple[str, str | None, str | None, int | None, int | None, int | None, Any]] = [
        # A release not made current: the current version did not change, a version was created.
        (
            "resource.version_released",
            "alice",
            "marketplace resources release",
            1,
            1,
            None,
            {
                "subject": {"resource": 1, "version": 13},
                "before": {"current_version": "1.1.0"},
                "after": {"current_version": "1.1.0"},
                "effects": [
                    {"version": 13, "change": "created", "before": None, "after": {"version": "3.0"}}
                ],
            },
        ),
        (
            "gift.disabled",
            "alice",
            "marketplace gifts disable",
            2,
            None,
            None,
            {
                "subject": {"gift": "SPRING"},
                "before": {"enabled": True},
                "after": {"enabled": False},
                "effects": [],
            },
        ),
        (
            "gift.created",
            "alice",
            "marketplace gifts create",
            None,
            None,
            None,
            {"subject": {"gift": "SPRING"}, "before": None, "after": created, "effects": []},
        ),
        (
            "access.granted",
            None,
            "api.v1.chat.grant",
            2,
            8,
            4,
            {"via": "api.v1.chat.grant", "source": "manual"},
        ),
        ("user.banned", None, None, 2, None, None, None),
    ]
    async with engine.begin() as connection:
        for event, actor, via, user_id, resource_id, access_id, properties in stored:
            await connection.execute(
                insert(Activity).values(
                    event=event,
                    actor=actor,
                    via=via,
                    user_id=user_id,
                    resource_id=resource_id,
                    access_id=access_id,
                    properties=properties,
                    created_at=datetime(2024, 5, 1, 10),
                )
            )

    lines = (await back_office.ok("activity", "--oldest-first")).lines

    assert [line.split("  ", 3)[3] for line in lines] == [
        "by alice  resource 1, version 13: version released; version 13 created",
        "by alice  gift SPRING: disabled, enabled true -> false",
        "by alice  gift SPRING: created, code=SPRING percentage=15 enabled=true",
        "via api.v1.chat.grant  user 2, resource 8, access 4: granted (source=manual)",
        "via ?  user 2: banned",
    ]


async def test_an_activity_line_shows_a_control_character_of_a_stored_name_as_its_escape(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    async with engine.begin() as connection:
        await connection.execute(update(Resource).where(Resource.id == 3).values(name="Draft\nThing\x1b[2J"))

    printed = (await back_office.ok("resources", "status", "3", "published")).lines
    lines = (await back_office.ok("activity")).lines

    assert printed == ["resource 3 (Draft\\nThing\\x1b[2J): draft -> published"]
    assert len(lines) == 1
    assert lines[0].split("  ")[2] == "resource.status_changed"
    assert lines[0].split("  ", 4)[4] == "resource 3 (Draft\\nThing\\x1b[2J): draft -> published"
