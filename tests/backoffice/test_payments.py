"""`marketplace payments ...`: the payment transitions made outside the API, on both profiles."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import UTC, datetime, timedelta
from itertools import product
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.backoffice.commands.support import system_user
from marketplace.models import Access, Activity, Payment
from tests.backoffice.api_reads import access_to, member_accesses, purchases
from tests.backoffice.conftest import CHANGE_BOUND_SECONDS, BackOffice, CommandResult
from tests.catalogue import MEMBER_CHAT_ID, PAID_UID
from tests.conftest import Loader
from tests.interleavings import each_finished_or_waiting
from tests.profiles import postgresql_only

VERBS = ("confirm", "fail", "refund", "dispute", "win", "lose", "cancel")
STATUSES = ("pending", "paid", "unpaid", "refunded", "disputed", "cancelled")

# The transition table of the back office (marketplace/backoffice/payments.py), written out again.
ALLOWED = {
    ("confirm", "pending"): "paid",
    ("confirm", "unpaid"): "paid",
    ("fail", "pending"): "unpaid",
    ("refund", "paid"): "refunded",
    ("dispute", "paid"): "disputed",
    ("win", "disputed"): "paid",
    ("lose", "disputed"): "refunded",
    ("cancel", "pending"): "cancelled",
    ("cancel", "unpaid"): "cancelled",
}
REFUSED = [pair for pair in product(VERBS, STATUSES) if pair not in ALLOWED]
APPLIES_TO = {
    "confirm": "pending or unpaid",
    "fail": "pending",
    "refund": "paid",
    "dispute": "paid",
    "win": "disputed",
    "lose": "disputed",
    "cancel": "pending or unpaid",
}
EVENTS = {
    "confirm": "payment.confirmed",
    "fail": "payment.failed",
    "refund": "payment.refunded",
    "dispute": "payment.disputed",
    "win": "payment.dispute_won",
    "lose": "payment.dispute_lost",
    "cancel": "payment.cancelled",
}

BUYER_ID = 20
BUYER_CHAT_ID = "555555555555555555"


def uid(number: int) -> str:
    return f"01J9PAYMENT{number:015d}"


# One payment of the buyer in each status, each for a resource of its own (ids: payment = resource).
PAYMENT_IN = {status: 20 + index for index, status in enumerate(STATUSES)}
# The buyer's access paid by the `paid` payment (refunded and disputed ones revoked theirs).
PAID_ACCESS_ID = 20
DISPUTED_ACCESS_ID = 22
INVOICE_ID = 26
# The buyer's access to resource 26 was revoked with a refund; payment 28 buys it again.
REFUNDED_EARLIER_ID, REPURCHASE_ID, REVOKED_ACCESS_ID, REPURCHASED_RESOURCE_ID = 27, 28, 23, 26
# The buyer was granted resource 27 by hand; payment 29 buys it.
PURCHASE_OF_MANUAL_ID, MANUAL_ACCESS_ID, MANUAL_RESOURCE_ID = 29, 24, 27


def payments_document() -> dict[str, Any]:
    """A chat-linked buyer with a payment in every status, an invoice, and purchases of resources
    the buyer already had access to (revoked, or granted by hand)."""

    def payment(payment_id: int, status: str, resource_id: int | None) -> dict[str, Any]:
        return {
            "id": payment_id,
            "uid": uid(payment_id),
            "status": status,
            "amount_cents": 500,
            "buyer_id": BUYER_ID,
            "seller_id": 1,
            "resource_id": resource_id,
        }

    def purchase(access_id: int, resource_id: int, payment_id: int, revoked: bool) -> dict[str, Any]:
        return {
            "id": access_id,
            "user_id": BUYER_ID,
            "resource_id": resource_id,
            "payment_id": payment_id,
            "source": "purchase",
            "revoked": revoked,
        }

    paid_by = {status: PAYMENT_IN[status] for status in ("paid", "refunded", "disputed")}
    return {
        "users": [{"id": BUYER_ID, "name": "Buyer Bea"}],
        "chat_accounts": [{"user_id": BUYER_ID, "chat_id": BUYER_CHAT_ID}],
        "resources": [
            {"id": resource_id, "user_id": 1, "name": f"Paid Thing {resource_id}", "price": "5.00"}
            for resource_id in range(20, 28)
        ],
        "payments": [
            *(payment(payment_id, status, payment_id) for status, payment_id in PAYMENT_IN.items()),
            payment(INVOICE_ID, "pending", None),
            payment(REFUNDED_EARLIER_ID, "refunded", REPURCHASED_RESOURCE_ID),
            payment(REPURCHASE_ID, "pending", REPURCHASED_RESOURCE_ID),
            payment(PURCHASE_OF_MANUAL_ID, "pending", MANUAL_RESOURCE_ID),
        ],
        "accesses": [
            purchase(PAID_ACCESS_ID, paid_by["paid"], paid_by["paid"], revoked=False),
            purchase(21, paid_by["refunded"], paid_by["refunded"], revoked=True),
            purchase(DISPUTED_ACCESS_ID, paid_by["disputed"], paid_by["disputed"], revoked=True),
            purchase(REVOKED_ACCESS_ID, REPURCHASED_RESOURCE_ID, REFUNDED_EARLIER_ID, revoked=True),
            {
                "id": MANUAL_ACCESS_ID,
                "user_id": BUYER_ID,
                "resource_id": MANUAL_RESOURCE_ID,
                "source": "manual",
            },
        ],
    }


@pytest.fixture
async def payments_api(api: httpx.AsyncClient, load: Loader) -> httpx.AsyncClient:
    """The API on the standard catalogue and the buyer's payments."""
    await load(payments_document())
    return api


async def payment_status(api: httpx.AsyncClient, payment_uid: str) -> str:
    answer = await api.get(f"/api/v1/payment/{payment_uid}")
    assert answer.status_code == 200
    status: str = answer.json()["status"]
    return status


async def logged(engine: AsyncEngine) -> list[tuple[int, str, str | None, str | None, Any]]:
    """The activity log's entries: id, event, actor, via, properties."""
    async with engine.connect() as connection:
        rows = await connection.execute(
            select(Activity.id, Activity.event, Activity.actor, Activity.via, Activity.properties).order_by(
                Activity.id
            )
        )
        return [(row[0], row[1], row[2], row[3], row[4]) for row in rows]


async def access_rows(engine: AsyncEngine, resource_id: int) -> list[int]:
    """The ids of the buyer's access rows to the resource, revoked or not."""
    async with engine.connect() as connection:
        rows = await connection.execute(
            select(Access.id).where(Access.user_id == BUYER_ID, Access.resource_id == resource_id)
        )
        return list(rows.scalars())


def at(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_refund_moves_a_paid_payment_to_refunded_and_revokes_its_access(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    assert (await api.get(f"/api/v1/payment/{PAID_UID}")).json()["status"] == "paid"
    assert await access_to(api, 1, MEMBER_CHAT_ID) is not None
    assert await purchases(api, 1) == 1
    result = await back_office.ok("payments", "refund", PAID_UID, "--by", "alice", "--json")
    [change] = result.objects
    assert change["action"] == "payment.refunded"
    assert change["by"] == "alice"
    assert (change["before"], change["after"]) == ({"status": "paid"}, {"status": "refunded"})
    assert change["effects"] == [
        {
            "access": 1,
            "change": "revoked",
            "before": {"source": "purchase", "payment_id": 1, "revoked": False},
            "after": {"source": "purchase", "payment_id": 1, "revoked": True},
        }
    ]
    assert (await api.get(f"/api/v1/payment/{PAID_UID}")).json()["status"] == "refunded"
    assert await access_to(api, 1, MEMBER_CHAT_ID) is None
    assert await purchases(api, 1) == 0


@pytest.mark.parametrize("output", ["json-by", "json", "text"])
@pytest.mark.parametrize(("verb", "status"), list(ALLOWED))
async def test_an_allowed_transition_is_reported_and_shows_its_new_status_in_the_api(
    back_office: BackOffice, payments_api: httpx.AsyncClient, verb: str, status: str, output: str
) -> None:
    payment_id = PAYMENT_IN[status]
    target = ALLOWED[verb, status]
    options = {"json-by": ["--json", "--by", "  ops-team "], "json": ["--json"], "text": []}[output]

    result = await back_office.ok("payments", verb, uid(payment_id), *options)

    # The access the transition grants (confirm, win) or revokes (refund, dispute), as reported;
    # a lost dispute leaves the access the dispute revoked as it is.
    access_change: dict[str, Any] | None = None
    if verb == "confirm":
        granted = await access_to(payments_api, payment_id, BUYER_CHAT_ID)
        assert granted is not None
        purchase = {"source": "purchase", "payment_id": payment_id, "revoked": False}
        access_change = {"access": granted["id"], "change": "granted", "before": None, "after": purchase}
    elif verb in ("refund", "dispute"):
        paid = {"source": "purchase", "payment_id": payment_id, "revoked": False}
        access_change = {
            "access": PAID_ACCESS_ID,
            "change": "revoked",
            "before": paid,
            "after": {**paid, "revoked": True},
        }
    elif verb == "win":
        revoked = {"source": "purchase", "payment_id": payment_id, "revoked": True}
        access_change = {
            "access": DISPUTED_ACCESS_ID,
            "change": "reactivated",
            "before": revoked,
            "after": {**revoked, "revoked": False},
        }
    summary = f"payment {uid(payment_id)}: {status} -> {target}"
    if verb in ("win", "lose"):
        summary += f" (dispute {'won' if verb == 'win' else 'lost'})"
    if access_change is not None:
        summary += f"; access {access_change['access']} {access_change['change']}"

    if output == "text":
        assert result.lines == [summary]
    else:
        [change] = result.objects
        assert change["action"] == EVENTS[verb]
        assert change["by"] == ("ops-team" if output == "json-by" else system_user())
        assert change["subject"] == {"payment": uid(payment_id)}
        assert (change["before"], change["after"]) == ({"status": status}, {"status": target})
        assert change["effects"] == ([access_change] if access_change else [])
        assert change["summary"] == summary
        assert isinstance(change["activity_id"], int)
    assert await payment_status(payments_api, uid(payment_id)) == target


async def test_the_activity_entry_holds_the_operator_the_command_and_the_change(
    back_office: BackOffice, payments_api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    [change] = (
        await back_office.ok("payments", "confirm", uid(PAYMENT_IN["pending"]), "--by", "ops", "--json")
    ).objects
    [(activity_id, event, actor, via, properties)] = await logged(engine)
    assert (activity_id, event, actor, via) == (
        change["activity_id"],
        "payment.confirmed",
        "ops",
        "marketplace payments confirm",
    )
    assert properties == {key: change[key] for key in ("subject", "before", "after", "effects", "summary")}


@pytest.mark.parametrize("status", ["pending", "unpaid"])
async def test_confirm_grants_the_buyer_a_purchase_the_chat_bot_lists_and_purchases_counts(
    back_office: BackOffice, payments_api: httpx.AsyncClient, status: str
) -> None:
    payment_id = PAYMENT_IN[status]
    assert await access_to(payments_api, payment_id, BUYER_CHAT_ID) is None
    assert await purchases(payments_api, payment_id) == 0

    await back_office.ok("payments", "confirm", uid(payment_id))

    access = await access_to(payments_api, payment_id, BUYER_CHAT_ID)
    assert access is not None
    assert (access["user_id"], access["payment_id"]) == (BUYER_ID, payment_id)
    assert await purchases(payments_api, payment_id) == 1
    listed = await payments_api.post("/api/v1/chat", json={"chat": BUYER_CHAT_ID})
    assert access in listed.json()


async def test_confirm_reactivates_a_revoked_access_as_a_purchase_of_the_payment(
    back_office: BackOffice, payments_api: httpx.AsyncClient
) -> None:
    assert await access_to(payments_api, REPURCHASED_RESOURCE_ID, BUYER_CHAT_ID) is None
    assert await purchases(payments_api, REPURCHASED_RESOURCE_ID) == 0

    [change] = (await back_office.ok("payments", "confirm", uid(REPURCHASE_ID), "--json")).objects

    assert change["effects"] == [
        {
            "access": REVOKED_ACCESS_ID,
            "change": "reactivated",
            "before": {"source": "purchase", "payment_id": REFUNDED_EARLIER_ID, "revoked": True},
            "after": {"source": "purchase", "payment_id": REPURCHASE_ID, "revoked": False},
        }
    ]
    access = await access_to(payments_api, REPURCHASED_RESOURCE_ID, BUYER_CHAT_ID)
    assert access is not None
    assert (access["id"], access["payment_id"]) == (REVOKED_ACCESS_ID, REPURCHASE_ID)
    assert await purchases(payments_api, REPURCHASED_RESOURCE_ID) == 1


async def test_confirm_turns_a_manual_access_into_a_purchase_backed_by_the_payment(
    back_office: BackOffice, payments_api: httpx.AsyncClient
) -> None:
    manual = await access_to(payments_api, MANUAL_RESOURCE_ID, BUYER_CHAT_ID)
    assert manual is not None and manual["payment_id"] is None
    # A manual grant is not a sale.
    assert await purchases(payments_api, MANUAL_RESOURCE_ID) == 0

    result = await back_office.ok("payments", "confirm", uid(PURCHASE_OF_MANUAL_ID))

    assert result.lines == [
        f"payment {uid(PURCHASE_OF_MANUAL_ID)}: pending -> paid;"
        f" access {MANUAL_ACCESS_ID} now backed by this payment"
    ]
    access = await access_to(payments_api, MANUAL_RESOURCE_ID, BUYER_CHAT_ID)
    assert access is not None
    assert (access["id"], access["payment_id"]) == (MANUAL_ACCESS_ID, PURCHASE_OF_MANUAL_ID)
    assert await purchases(payments_api, MANUAL_RESOURCE_ID) == 1


@pytest.mark.parametrize("verb", ["refund", "dispute"])
async def test_refund_and_dispute_revoke_the_access_the_payment_paid_for(
    back_office: BackOffice, payments_api: httpx.AsyncClient, verb: str
) -> None:
    resource_id = PAYMENT_IN["paid"]
    paid_for = await access_to(payments_api, resource_id, BUYER_CHAT_ID)
    assert paid_for is not None and paid_for["id"] == PAID_ACCESS_ID
    assert await purchases(payments_api, resource_id) == 1

    await back_office.ok("payments", verb, uid(PAYMENT_IN["paid"]))

    assert await access_to(payments_api, resource_id, BUYER_CHAT_ID) is None
    assert await purchases(payments_api, resource_id) == 0
    listed = await payments_api.post("/api/v1/chat", json={"chat": BUYER_CHAT_ID})
    assert PAID_ACCESS_ID not in [access["id"] for access in listed.json()]


async def test_an_invoice_changes_status_without_any_access(
    back_office: BackOffice, payments_api: httpx.AsyncClient
) -> None:
    accesses = await member_accesses(payments_api, BUYER_CHAT_ID)

    [confirmed] = (await back_office.ok("payments", "confirm", uid(INVOICE_ID), "--json")).objects
    assert confirmed["effects"] == []
    assert confirmed["summary"] == f"payment {uid(INVOICE_ID)}: pending -> paid"
    assert await payment_status(payments_api, uid(INVOICE_ID)) == "paid"
    assert await member_accesses(payments_api, BUYER_CHAT_ID) == accesses

    [refunded] = (await back_office.ok("payments", "refund", uid(INVOICE_ID), "--json")).objects
    assert refunded["effects"] == []
    assert await payment_status(payments_api, uid(INVOICE_ID)) == "refunded"
    assert await member_accesses(payments_api, BUYER_CHAT_ID) == accesses


@pytest.mark.parametrize(("verb", "status"), REFUSED)
async def test_a_verb_refuses_every_status_it_does_not_apply_to(
    back_office: BackOffice, payments_api: httpx.AsyncClient, verb: str, status: str
) -> None:
    payment_uid = uid(PAYMENT_IN[status])
    line = await back_office.refused("payments", verb, payment_uid, "--json")
    assert line == (
        f"marketplace: cannot {verb} payment {payment_uid}: it is {status}"
        f" ({verb} applies to {APPLIES_TO[verb]} payments)"
    )
    assert await payment_status(payments_api, payment_uid) == status


async def test_a_payment_takes_one_transition_only_once(
    back_office: BackOffice, payments_api: httpx.AsyncClient
) -> None:
    payment_uid = uid(PAYMENT_IN["pending"])
    await back_office.ok("payments", "confirm", payment_uid)
    line = await back_office.refused("payments", "confirm", payment_uid)
    assert line == (
        f"marketplace: cannot confirm payment {payment_uid}: it is paid (confirm applies to pending or unpaid payments)"
    )


@pytest.mark.parametrize("verb", VERBS)
async def test_an_unknown_payment_is_refused(
    back_office: BackOffice, payments_api: httpx.AsyncClient, verb: str
) -> None:
    unknown = uid(999)
    assert (await payments_api.get(f"/api/v1/payment/{unknown}")).status_code == 404
    assert await back_office.refused("payments", verb, unknown) == f"marketplace: no payment '{unknown}'"


@pytest.mark.parametrize(
    "reference",
    [
        "not-a-ulid",
        # A payment's numeric id and its provider transaction id are not its reference.
        "1",
        "PAYID-123",
        uid(20) + "0",
        "8" + uid(20)[1:],
        "",
    ],
)
async def test_a_malformed_payment_reference_is_refused(
    back_office: BackOffice, payments_api: httpx.AsyncClient, reference: str
) -> None:
    assert (
        await back_office.refused("payments", "confirm", reference)
        == f"marketplace: no payment {reference!r}"
    )


async def test_a_payment_reference_is_read_in_any_case(
    back_office: BackOffice, payments_api: httpx.AsyncClient
) -> None:
    payment_uid = uid(PAYMENT_IN["pending"])
    [change] = (await back_office.ok("payments", "fail", f" {payment_uid.lower()} ", "--json")).objects
    assert change["subject"] == {"payment": payment_uid}
    assert await payment_status(payments_api, payment_uid) == "unpaid"


# Checkouts around a 48-hour cutoff: ids 40 and 41 are older, 42 is younger, the others are not pending.
OLD, RECENT = timedelta(hours=50), timedelta(hours=46)


def checkouts_document(now: datetime) -> dict[str, Any]:
    def payment(payment_id: int, status: str, age: timedelta) -> dict[str, Any]:
        return {
            "id": payment_id,
            "uid": uid(payment_id),
            "status": status,
            "amount_cents": 500,
            "buyer_id": BUYER_ID,
            "resource_id": 20,
            "created_at": at(now - age),
        }

    return {
        "users": [{"id": BUYER_ID, "name": "Buyer Bea"}],
        "resources": [{"id": 20, "user_id": 1, "name": "Paid Thing 20", "price": "5.00"}],
        "payments": [
            payment(40, "pending", timedelta(days=400)),
            payment(41, "pending", OLD),
            payment(42, "pending", RECENT),
            payment(43, "unpaid", OLD),
            payment(44, "paid", OLD),
            payment(45, "cancelled", OLD),
        ],
    }


@pytest.fixture
async def checkouts(api: httpx.AsyncClient, load: Loader) -> datetime:
    """The API on the standard catalogue and the checkouts; the time they are dated from."""
    now = datetime.now(UTC).replace(microsecond=0)
    await load(checkouts_document(now))
    return now


async def statuses(api: httpx.AsyncClient) -> dict[int, str]:
    return {payment_id: await payment_status(api, uid(payment_id)) for payment_id in range(40, 46)}


async def test_prune_checkouts_cancels_the_pending_payments_created_before_the_cutoff(
    back_office: BackOffice, api: httpx.AsyncClient, checkouts: datetime, engine: AsyncEngine
) -> None:
    result = await back_office.ok(
        "payments", "prune-checkouts", "--older-than", "48h", "--by", "cron", "--json"
    )

    assert [change["subject"] for change in result.objects] == [{"payment": uid(40)}, {"payment": uid(41)}]
    for change in result.objects:
        assert (change["action"], change["by"]) == ("payment.cancelled", "cron")
        assert (change["before"], change["after"], change["effects"]) == (
            {"status": "pending"},
            {"status": "cancelled"},
            [],
        )
    assert await statuses(api) == {
        40: "cancelled",
        41: "cancelled",
        42: "pending",
        43: "unpaid",
        44: "paid",
        45: "cancelled",
    }
    entries = await logged(engine)
    assert [(entry[0], entry[1], entry[2], entry[3]) for entry in entries] == [
        (change["activity_id"], "payment.cancelled", "cron", "marketplace payments prune-checkouts")
        for change in result.objects
    ]


async def test_prune_checkouts_prints_a_line_per_cancelled_checkout(
    back_office: BackOffice, api: httpx.AsyncClient, checkouts: datetime
) -> None:
    result = await back_office.ok("payments", "prune-checkouts", "--older-than", "2d")
    assert result.lines == [
        f"payment {uid(40)}: pending -> cancelled (checkout of {at(checkouts - timedelta(days=400))})",
        f"payment {uid(41)}: pending -> cancelled (checkout of {at(checkouts - OLD)})",
    ]


@pytest.mark.parametrize(
    ("duration", "cancelled"),
    [
        ("2d", [40, 41]),
        ("1d12h", [40, 41, 42]),
        ("2d1h", [40, 41]),
        ("2880m", [40, 41]),
        ("3d", [40]),
    ],
)
async def test_prune_checkouts_cutoff_follows_the_duration(
    back_office: BackOffice, api: httpx.AsyncClient, checkouts: datetime, duration: str, cancelled: list[int]
) -> None:
    result = await back_office.ok("payments", "prune-checkouts", "--older-than", duration, "--json")
    assert [change["subject"]["payment"] for change in result.objects] == [uid(n) for n in cancelled]
    for payment_id in (40, 41, 42):
        assert await payment_status(api, uid(payment_id)) == (
            "cancelled" if payment_id in cancelled else "pending"
        )


@pytest.mark.parametrize(("as_json", "report"), [(True, '{"changes": 0}'), (False, "nothing to change")])
async def test_prune_checkouts_without_an_abandoned_checkout_writes_nothing(
    back_office: BackOffice, api: httpx.AsyncClient, checkouts: datetime, as_json: bool, report: str
) -> None:
    before = await back_office.snapshot()
    result = await back_office.ok(
        "payments", "prune-checkouts", "--older-than", "36500d", *(["--json"] if as_json else [])
    )
    assert result.lines == [report]
    assert await back_office.snapshot() == before


@pytest.mark.parametrize(
    ("duration", "reason"),
    [
        ("0h", "it must be longer than zero"),
        ("0d0h", "it must be longer than zero"),
        ("abc", "use a number and a unit (s, m, h, d, w), e.g. 48h or 7d"),
        ("5x", "use a number and a unit (s, m, h, d, w), e.g. 48h or 7d"),
        ("48", "use a number and a unit (s, m, h, d, w), e.g. 48h or 7d"),
        ("", "use a number and a unit (s, m, h, d, w), e.g. 48h or 7d"),
        ("-1d", "use a number and a unit (s, m, h, d, w), e.g. 48h or 7d"),
        ("1.5d", "use a number and a unit (s, m, h, d, w), e.g. 48h or 7d"),
        ("36501d", "it must be at most 36500d (100 years)"),
        ("999999999w", "it must be at most 36500d (100 years)"),
    ],
)
async def test_prune_checkouts_refuses_an_invalid_duration(
    back_office: BackOffice, api: httpx.AsyncClient, checkouts: datetime, duration: str, reason: str
) -> None:
    line = await back_office.refused("payments", "prune-checkouts", f"--older-than={duration}", "--json")
    assert line == f"marketplace: --older-than: invalid duration {duration!r}: {reason}"


async def marketplace_process(back_office: BackOffice, *args: str) -> CommandResult:
    """`marketplace ARGS...` in a process of its own, as two operators run it at once.

    Concurrent commands cannot share the in-process runner of `back_office`, which swaps the
    interpreter's standard streams for each command.
    """
    environment = {name: value for name, value in os.environ.items() if not name.startswith("MARKETPLACE_")}
    environment |= {name: value for name, value in back_office.environment.items() if value is not None}
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("marketplace")),
        *args,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await process.communicate()
    await asyncio.sleep(CHANGE_BOUND_SECONDS)
    assert process.returncode is not None
    return CommandResult(process.returncode, stdout.decode(), stderr.decode())


# SQLite cannot tell who waits for its lock: long enough for a command to start and read what it
# changes (about a second each, on two cores). On PostgreSQL the tests wait for the lock waits.
SQLITE_STARTUP_SECONDS = 3.0


async def run_together(
    back_office: BackOffice, engine: AsyncEngine, payment_id: int, *commands: tuple[str, ...]
) -> list[CommandResult]:
    """The commands started at once while an open transaction holds the payment (the row on
    PostgreSQL, every write on SQLite), so that each reads it before any of them may write."""
    async with engine.connect() as connection:
        await connection.execute(
            update(Payment).where(Payment.id == payment_id).values(amount_cents=Payment.amount_cents)
        )
        running = [asyncio.create_task(marketplace_process(back_office, *command)) for command in commands]
        await each_finished_or_waiting(
            running, back_office.settings.database_url, sqlite_moment=SQLITE_STARTUP_SECONDS
        )
        await connection.rollback()
    return await asyncio.gather(*running)


async def test_two_concurrent_confirms_of_one_payment_give_one_success_and_one_access(
    back_office: BackOffice, payments_api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    payment_uid = uid(PAYMENT_IN["pending"])
    confirm = ("payments", "confirm", payment_uid, "--json")
    results = await run_together(back_office, engine, PAYMENT_IN["pending"], confirm, confirm)

    [won] = [result for result in results if result.exit_code == 0]
    [lost] = [result for result in results if result.exit_code != 0]
    [change] = won.objects
    [granted] = change["effects"]
    assert granted["change"] == "granted"
    assert lost.stdout == ""
    # PostgreSQL: the second waits for the row lock, then reads `paid`. SQLite: the second read
    # `pending` before the first committed, and its conditional write finds the row moved.
    assert lost.stderr in (
        f"marketplace: cannot confirm payment {payment_uid}: it is paid"
        " (confirm applies to pending or unpaid payments)\n",
        f"marketplace: payment {payment_uid} changed meanwhile; run the command again\n",
    )
    assert await payment_status(payments_api, payment_uid) == "paid"
    assert await access_rows(engine, PAYMENT_IN["pending"]) == [granted["access"]]
    assert [entry[1] for entry in await logged(engine)] == ["payment.confirmed"]


@postgresql_only
async def test_an_access_created_while_a_confirm_grants_it_is_a_refusal_not_an_error(
    back_office: BackOffice, payments_api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """Another payment of the same buyer and resource confirmed at the same moment: the command
    finds no access, the other transaction's new row then holds the unique pair."""
    resource_id = PAYMENT_IN["pending"]
    async with engine.connect() as connection:
        await connection.execute(
            insert(Access).values(
                user_id=BUYER_ID,
                resource_id=resource_id,
                source="manual",
                created_at=datetime(2024, 1, 1),
                updated_at=datetime(2024, 1, 1),
            )
        )
        confirming = asyncio.create_task(
            marketplace_process(back_office, "payments", "confirm", uid(resource_id))
        )
        # The command's insert waits for this transaction's row of the unique pair.
        await each_finished_or_waiting(
            [confirming], back_office.settings.database_url, sqlite_moment=SQLITE_STARTUP_SECONDS
        )
        await connection.commit()
    result = await confirming
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        f"marketplace: the access of user {BUYER_ID} to resource {resource_id} was created meanwhile;"
        " run the command again\n"
    )
    assert await payment_status(payments_api, uid(resource_id)) == "pending"
    assert await logged(engine) == []


async def test_a_checkout_confirmed_while_checkouts_are_pruned_ends_paid_or_cancelled_never_both(
    back_office: BackOffice, api: httpx.AsyncClient, checkouts: datetime, engine: AsyncEngine
) -> None:
    confirmed, pruned = await run_together(
        back_office,
        engine,
        41,
        ("payments", "confirm", uid(41), "--json"),
        ("payments", "prune-checkouts", "--older-than", "48h", "--json"),
    )

    assert pruned.exit_code == 0, pruned.stderr
    cancelled = [change["subject"]["payment"] for change in pruned.objects]
    events = [entry[1] for entry in await logged(engine)]
    if confirmed.exit_code == 0:
        assert cancelled == [uid(40)]
        assert await payment_status(api, uid(41)) == "paid"
        assert len(await access_rows(engine, 20)) == 1
        assert sorted(events) == ["payment.cancelled", "payment.confirmed"]
    else:
        assert confirmed.stderr in (
            f"marketplace: cannot confirm payment {uid(41)}: it is cancelled"
            " (confirm applies to pending or unpaid payments)\n",
            f"marketplace: payment {uid(41)} changed meanwhile; run the command again\n",
        )
        assert cancelled == [uid(40), uid(41)]
        assert await payment_status(api, uid(41)) == "cancelled"
        assert await access_rows(engine, 20) == []
        assert events == ["payment.cancelled", "payment.cancelled"]


@pytest.mark.parametrize("operator", ["x" * 256, "eve\nmallory", "eve\x1b[2J"])
async def test_an_operator_name_longer_than_255_characters_or_not_printable_is_refused(
    back_office: BackOffice, payments_api: httpx.AsyncClient, operator: str
) -> None:
    line = await back_office.refused("payments", "confirm", uid(PAYMENT_IN["pending"]), "--by", operator)
    assert line == "marketplace: --by: at most 255 printable characters"


SECOND_PURCHASE_UID = uid(30)


@pytest.fixture
async def bought_twice(api: httpx.AsyncClient, load: Loader) -> httpx.AsyncClient:
    """The member's resource 1, paid by the catalogue's payment, and a second, pending payment of it."""
    second = {
        "id": 30,
        "uid": SECOND_PURCHASE_UID,
        "status": "pending",
        "amount_cents": 999,
        "buyer_id": 2,
        "seller_id": 1,
        "resource_id": 1,
    }
    await load({"payments": [second]})
    return api


async def test_a_second_payment_of_an_owned_resource_leaves_the_access_to_the_first(
    back_office: BackOffice, bought_twice: httpx.AsyncClient
) -> None:
    [confirmed] = (await back_office.ok("payments", "confirm", SECOND_PURCHASE_UID, "--json")).objects
    [effect] = confirmed["effects"]
    assert effect["change"] == f"kept (paid by payment {PAID_UID})"
    assert effect["before"] == effect["after"] == {"source": "purchase", "payment_id": 1, "revoked": False}
    await back_office.ok("payments", "refund", SECOND_PURCHASE_UID)
    access = await access_to(bought_twice, 1, MEMBER_CHAT_ID)
    assert access is not None and access["payment_id"] == 1
    await back_office.ok("payments", "refund", PAID_UID)
    assert await access_to(bought_twice, 1, MEMBER_CHAT_ID) is None


async def test_refunding_the_payment_behind_an_access_moves_it_to_the_other_paid_payment(
    back_office: BackOffice, bought_twice: httpx.AsyncClient
) -> None:
    await back_office.ok("payments", "confirm", SECOND_PURCHASE_UID)
    [refunded] = (await back_office.ok("payments", "refund", PAID_UID, "--json")).objects
    [effect] = refunded["effects"]
    assert effect["change"] == f"kept (paid by payment {SECOND_PURCHASE_UID})"
    assert effect["after"] == {"source": "purchase", "payment_id": 30, "revoked": False}
    access = await access_to(bought_twice, 1, MEMBER_CHAT_ID)
    assert access is not None and access["payment_id"] == 30
    assert await purchases(bought_twice, 1) == 1
    await back_office.ok("payments", "dispute", SECOND_PURCHASE_UID)
    assert await access_to(bought_twice, 1, MEMBER_CHAT_ID) is None
    assert await purchases(bought_twice, 1) == 0


async def test_a_dispute_won_gives_the_buyer_the_access_back_as_the_purchase_it_was(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    before = await access_to(api, 1, MEMBER_CHAT_ID)
    assert before is not None and before["payment_id"] == 1
    await back_office.ok("payments", "dispute", PAID_UID)
    assert await access_to(api, 1, MEMBER_CHAT_ID) is None
    assert await purchases(api, 1) == 0
    assert await payment_status(api, PAID_UID) == "disputed"

    [change] = (await back_office.ok("payments", "win", PAID_UID, "--by", "alice", "--json")).objects

    assert (change["action"], change["before"], change["after"]) == (
        "payment.dispute_won",
        {"status": "disputed"},
        {"status": "paid"},
    )
    assert change["effects"] == [
        {
            "access": 1,
            "change": "reactivated",
            "before": {"source": "purchase", "payment_id": 1, "revoked": True},
            "after": {"source": "purchase", "payment_id": 1, "revoked": False},
        }
    ]
    assert change["summary"] == f"payment {PAID_UID}: disputed -> paid (dispute won); access 1 reactivated"
    assert await payment_status(api, PAID_UID) == "paid"
    # The same access, a purchase again: both chat routes list it, the card counts the sale.
    after = await access_to(api, 1, MEMBER_CHAT_ID)
    assert after is not None
    # Only the time of the change differs.
    assert {**after, "updated_at": None} == {**before, "updated_at": None}
    assert await purchases(api, 1) == 1
    async with engine.connect() as connection:
        source = await connection.scalar(select(Access.source).where(Access.id == 1))
    assert source == "purchase"


async def test_a_dispute_lost_refunds_the_payment_and_the_access_stays_revoked(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    await back_office.ok("payments", "dispute", PAID_UID)

    [change] = (await back_office.ok("payments", "lose", PAID_UID, "--by", "alice", "--json")).objects

    assert (change["action"], change["before"], change["after"], change["effects"]) == (
        "payment.dispute_lost",
        {"status": "disputed"},
        {"status": "refunded"},
        [],
    )
    assert change["summary"] == f"payment {PAID_UID}: disputed -> refunded (dispute lost)"
    assert await payment_status(api, PAID_UID) == "refunded"
    assert await access_to(api, 1, MEMBER_CHAT_ID) is None
    assert await purchases(api, 1) == 0
    # Settled: neither outcome applies again, and a refunded payment is not disputed.
    for verb in ("win", "lose", "dispute"):
        line = await back_office.refused("payments", verb, PAID_UID)
        assert line.startswith(f"marketplace: cannot {verb} payment {PAID_UID}: it is refunded"), verb


async def test_a_dispute_won_while_another_payment_pays_for_the_access_leaves_it_with_that_payment(
    back_office: BackOffice, payments_api: httpx.AsyncClient, load: Loader
) -> None:
    # The buyer paid again for the resource of the disputed payment while the dispute ran.
    disputed_id = PAYMENT_IN["disputed"]
    await load(
        {
            "payments": [
                {
                    "id": 40,
                    "uid": uid(40),
                    "status": "paid",
                    "amount_cents": 500,
                    "buyer_id": BUYER_ID,
                    "resource_id": disputed_id,
                }
            ],
            "accesses": [
                {
                    "id": DISPUTED_ACCESS_ID,
                    "user_id": BUYER_ID,
                    "resource_id": disputed_id,
                    "payment_id": 40,
                    "source": "purchase",
                }
            ],
        }
    )

    [change] = (await back_office.ok("payments", "win", uid(disputed_id), "--json")).objects

    assert change["effects"][0]["change"] == f"kept (paid by payment {uid(40)})"
    access = await access_to(payments_api, disputed_id, BUYER_CHAT_ID)
    assert access is not None
    assert (access["id"], access["payment_id"]) == (DISPUTED_ACCESS_ID, 40)
    assert await purchases(payments_api, disputed_id) == 1
