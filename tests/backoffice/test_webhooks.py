"""`marketplace webhooks ...`: subscriptions added, listed, shown, switched, removed, tested and
their deliveries queued again; and the outbox every writer fills while a subscription is enabled.
On both profiles.

Webhooks here call local receivers, which `MARKETPLACE_WEBHOOKS_ALLOW_PRIVATE=true` allows. In the
test catalogue resource 1 (Économie/Pro, user 1 Alice) has versions up to id 12 and its paid
payment PAID_UID pays for bob's (user 2) access 1; resource 3 is a draft; bob has an active manual
access 3 to resource 7 and a revoked one (4) to resource 8.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.backoffice.actions import timestamp
from marketplace.config import Settings
from marketplace.models import WebhookDelivery, WebhookEvent, WebhookSubscription
from marketplace.webhooks.outbox import dispatch_events
from marketplace.webhooks.payloads import BodyContext
from marketplace.webhooks.sealing import unseal
from marketplace.webhooks.signing import verify
from tests.backoffice.conftest import BackOffice, CommandResult
from tests.catalogue import MEMBER_CHAT_ID, PAID_UID, catalogue
from tests.conftest import GRANT_SECRET
from tests.webhooks.receiver import Receiver, always, failing_first, running_receiver

ALLOW_PRIVATE = "MARKETPLACE_WEBHOOKS_ALLOW_PRIVATE"
SECRET_KEY = "MARKETPLACE_WEBHOOKS_SECRET_KEY"
# Where subscriptions that are never sent to point (nothing delivers during these tests).
HOOK = "http://127.0.0.1:9/hook"
EVERY_EVENT = (
    "release.published",
    "resource.status_changed",
    "payment.status_changed",
    "access.granted",
    "access.revoked",
)
EVERY_EVENT_TEXT = ", ".join(EVERY_EVENT)
UNSET_KEY_NOTE = (
    "marketplace: note: MARKETPLACE_WEBHOOKS_SECRET_KEY is unset, so the secret is stored "
    "unsealed in the database (docs/webhooks.md)"
)
SECRET_SHOWN_ONCE = "The secret is shown only now: keep it where the receiver checks signatures."
LOGGED_KEYS = {"activity_id", "action", "by", "at", "subject", "before", "after", "effects", "summary"}
SECRET = re.compile(r"whsec_[A-Za-z0-9_-]{43}")
MOMENT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
PING_ANSWERED = re.compile(r"HTTP (\d{3}) in \d+\.\d\d s \(delivery ([0-9A-Z]{26})\)")


@pytest.fixture(autouse=True)
def private_destinations(back_office: BackOffice) -> None:
    back_office.environment[ALLOW_PRIVATE] = "true"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver(always(200)) as running:
        yield running


async def add(back_office: BackOffice, url: str, *options: str) -> tuple[int, str]:
    """`webhooks add URL OPTIONS --json`: the new subscription's id and secret."""
    result = await back_office("webhooks", "add", url, *options, "--json")
    assert result.exit_code == 0, result.stderr
    [added] = result.objects
    return added["id"], added["secret"]


async def stored(engine: AsyncEngine, subscription_id: int) -> Row[Any]:
    """The subscription's row as stored."""
    async with engine.connect() as connection:
        return (
            await connection.execute(
                select(WebhookSubscription.__table__).where(WebhookSubscription.id == subscription_id)
            )
        ).one()


async def subscription_ids(engine: AsyncEngine) -> list[int]:
    async with engine.connect() as connection:
        return list(
            (
                await connection.execute(select(WebhookSubscription.id).order_by(WebhookSubscription.id))
            ).scalars()
        )


async def deliveries(engine: AsyncEngine, subscription_id: int | None = None) -> list[Row[Any]]:
    """The deliveries (of one subscription), oldest first."""
    query = select(WebhookDelivery.__table__).order_by(WebhookDelivery.id)
    if subscription_id is not None:
        query = query.where(WebhookDelivery.subscription_id == subscription_id)
    async with engine.connect() as connection:
        return list((await connection.execute(query)).all())


async def outbox(engine: AsyncEngine) -> list[tuple[Any, ...]]:
    """The events the triggers wrote, oldest first: kind, resource, member, subject, before, after."""
    async with engine.connect() as connection:
        rows = await connection.execute(
            select(
                WebhookEvent.kind,
                WebhookEvent.resource_id,
                WebhookEvent.user_id,
                WebhookEvent.subject_id,
                WebhookEvent.old_value,
                WebhookEvent.new_value,
            )
            .where(WebhookEvent.kind != "ping")
            .order_by(WebhookEvent.id)
        )
        return [tuple(row) for row in rows]


async def dispatch(engine: AsyncEngine, settings: Settings) -> None:
    """What a delivery worker does first: each event becomes a delivery per subscription wanting it."""
    await dispatch_events(engine, BodyContext(settings.public_base_url, settings.platform_names))


async def ping(back_office: BackOffice, subscription_id: int) -> CommandResult:
    return await back_office("webhooks", "test", str(subscription_id))


def field_lines(result: CommandResult) -> dict[str, str]:
    """The `field  value` lines a `show` prints before its sections."""
    fields = {}
    for line in result.lines:
        if not line:
            break
        name, _, value = line.partition("  ")
        fields[name] = value.strip()
    return fields


# --- add -----------------------------------------------------------------------------------


async def test_add_prints_the_summary_id_and_secret_once_and_notes_the_unset_key(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    result = await back_office("webhooks", "add", HOOK, "--events", "release.published")

    assert result.exit_code == 0
    summary, id_line, secret_line, note = result.lines
    assert summary == f"webhook 1 ({HOOK}): added, release.published of every resource, format json"
    assert id_line == "id      1"
    assert secret_line.startswith("secret  ")
    secret = secret_line.removeprefix("secret  ")
    assert SECRET.fullmatch(secret)
    assert note == SECRET_SHOWN_ONCE
    assert result.stderr.splitlines() == [UNSET_KEY_NOTE]
    assert (await stored(engine, 1)).secret == f"plain:{secret}"
    # Printed once: neither what the back office reads nor the log shows it again.
    for command in (("webhooks", "list"), ("webhooks", "show", "1", "--json"), ("activity", "--json")):
        assert secret not in (await back_office.ok(*command)).stdout, command


async def test_add_with_a_secret_key_stores_the_secret_sealed_and_prints_no_note(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    key = "the operator's sealing key"
    back_office.environment[SECRET_KEY] = key

    result = await back_office.ok("webhooks", "add", HOOK, "--events", "access.granted")

    secret = result.lines[2].removeprefix("secret  ")
    assert SECRET.fullmatch(secret)
    subscription = await stored(engine, 1)
    assert subscription.secret.startswith("v1:")
    assert secret not in subscription.secret
    assert secret[len("whsec_") :] not in subscription.secret
    assert unseal(subscription.secret, key) == secret


async def test_add_json_prints_one_object_with_the_change_the_id_and_the_secret(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    result = await back_office(
        "webhooks", "add", HOOK, "--events", "access.revoked,release.published", "--resource", "1",
        "--author", "1", "--format", "chat", "--by", "alice", "--json",
    )  # fmt: skip

    assert result.exit_code == 0
    # Standard output stays JSON; the note about the unsealed secret goes to standard error.
    assert result.stderr.startswith("marketplace: note: MARKETPLACE_WEBHOOKS_SECRET_KEY is unset")
    [added] = result.objects
    assert set(added) == LOGGED_KEYS | {"id", "secret"}
    assert SECRET.fullmatch(added["secret"])
    assert {key: added[key] for key in ("id", "action", "by", "subject", "before", "after")} == {
        "id": 1,
        "action": "webhook.added",
        "by": "alice",
        "subject": {"webhook": 1},
        "before": None,
        "after": {
            "url": HOOK,
            "events": "release.published,access.revoked",
            "resource_id": 1,
            "author_id": 1,
            "format": "chat",
            "enabled": True,
        },
    }
    assert added["summary"] == (
        f"webhook 1 ({HOOK}): added, release.published, access.revoked of resource 1 (Économie/Pro), "
        "resources of user 1 (Alice), format chat"
    )


async def test_add_refuses_an_unknown_event_or_none(back_office: BackOffice, api: httpx.AsyncClient) -> None:
    assert await back_office.refused("webhooks", "add", HOOK, "--events", "release.published,nope") == (
        f"marketplace: --events: unknown event 'nope': the events are {EVERY_EVENT_TEXT} (or *)"
    )
    for nothing in ("", ",", " , "):
        assert await back_office.refused("webhooks", "add", HOOK, "--events", nothing) == (
            f"marketplace: --events: name at least one event: {EVERY_EVENT_TEXT}"
        ), nothing


async def test_add_refuses_an_unknown_resource_or_author(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    def add_scoped(*options: str) -> tuple[str, ...]:
        return ("webhooks", "add", HOOK, "--events", "*", *options)

    assert await back_office.refused(*add_scoped("--resource", "99")) == "marketplace: no resource '99'"
    assert await back_office.refused(*add_scoped("--resource", "one")) == "marketplace: no resource 'one'"
    assert await back_office.refused(*add_scoped("--author", "99")) == "marketplace: no user '99'"


async def test_add_refuses_http_and_local_destinations_unless_private_ones_are_allowed(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    del back_office.environment[ALLOW_PRIVATE]
    allows = "webhooks call public addresses only (MARKETPLACE_WEBHOOKS_ALLOW_PRIVATE=true allows it)"
    refusals = {
        "http://hooks.example.com/in": (
            "webhooks call https:// URLs only (http:// needs MARKETPLACE_WEBHOOKS_ALLOW_PRIVATE=true)"
        ),
        "https://169.254.169.254/latest": "169.254.169.254 is a cloud metadata address: webhooks never call it",
        "https://10.0.0.1/in": f"10.0.0.1 is a private address (RFC 1918): {allows}",
        "https://127.0.0.1/in": f"127.0.0.1 is a loopback address: {allows}",
        "https://[::1]/in": f"::1 is a loopback address: {allows}",
        "https://169.254.1.1/in": f"169.254.1.1 is a link-local address: {allows}",
        "https://localhost/in": f"localhost is a local name: {allows}",
    }
    for url, reason in refusals.items():
        assert await back_office.refused("webhooks", "add", url, "--events", "*") == (
            f"marketplace: cannot add {url}: {reason}"
        ), url


async def test_add_refuses_the_metadata_address_even_where_private_ones_are_allowed(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    url = "http://169.254.169.254/latest"
    assert await back_office.refused("webhooks", "add", url, "--events", "*") == (
        f"marketplace: cannot add {url}: 169.254.169.254 is a cloud metadata address: webhooks never call it"
    )


async def test_add_refuses_a_url_with_credentials(back_office: BackOffice, api: httpx.AsyncClient) -> None:
    for url in ("https://user:password@hooks.example.com/in", "http://user@127.0.0.1:9/hook"):
        assert await back_office.refused("webhooks", "add", url, "--events", "*") == (
            f"marketplace: cannot add {url}: a webhook URL may not carry credentials (user:password@)"
        ), url


async def test_add_refuses_a_format_other_than_json_or_chat_as_a_usage_error(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    before = await back_office.snapshot()

    result = await back_office("webhooks", "add", HOOK, "--events", "*", "--format", "xml")

    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "marketplace: Invalid value for '--format': 'xml' is not one of 'json', 'chat'."
        " (see `marketplace webhooks add --help`)"
    ]
    assert await back_office.snapshot() == before


async def test_add_stores_every_event_for_a_star_and_the_events_in_their_canonical_order(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    every, _ = await add(back_office, HOOK, "--events", "*")
    some, _ = await add(back_office, HOOK, "--events", " access.revoked,release.published , access.revoked")

    assert (await stored(engine, every)).events == ",".join(EVERY_EVENT)
    assert (await stored(engine, some)).events == "release.published,access.revoked"
    shown = (await back_office.ok("webhooks", "show", str(every), "--json")).objects[0]
    assert shown["events"] == EVERY_EVENT_TEXT


# --- list and show -------------------------------------------------------------------------


async def test_list_shows_every_subscription_newest_first_with_its_pending_deliveries(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    assert (await back_office.ok("webhooks", "list")).lines == []
    await add(back_office, HOOK, "--events", "resource.status_changed,access.granted")
    await add(back_office, HOOK, "--events", "release.published", "--resource", "1", "--format", "chat")
    await back_office.ok("resources", "status", "3", "published")
    await back_office.ok("accesses", "grant", "6", "2")
    await dispatch(engine, settings)

    text = await back_office.ok("webhooks", "list")
    rows = (await back_office.ok("webhooks", "list", "--json")).objects

    assert [line.split() for line in text.lines] == [
        ["ID", "URL", "EVENTS", "RESOURCE_ID", "AUTHOR_ID", "FORMAT", "ENABLED", "FAILING_SINCE", "PENDING",
         "CREATED_AT"],
        ["2", HOOK, "release.published", "1", "-", "chat", "yes", "-", "0", rows[0]["created_at"]],
        ["1", HOOK, "resource.status_changed,access.granted", "-", "-", "json", "yes", "-", "2",
         rows[1]["created_at"]],
    ]  # fmt: skip
    assert all(MOMENT.fullmatch(row.pop("created_at")) for row in rows)
    assert rows == [
        {
            "id": 2,
            "url": HOOK,
            "events": "release.published",
            "resource_id": 1,
            "author_id": None,
            "format": "chat",
            "enabled": True,
            "failing_since": None,
            "pending": 0,
        },
        {
            "id": 1,
            "url": HOOK,
            "events": "resource.status_changed,access.granted",
            "resource_id": None,
            "author_id": None,
            "format": "json",
            "enabled": True,
            "failing_since": None,
            "pending": 2,
        },
    ]


async def test_list_limit_keeps_the_newest_subscriptions(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    for _ in range(3):
        await add(back_office, HOOK, "--events", "*")

    assert [row["id"] for row in (await back_office.ok("webhooks", "list", "--json")).objects] == [3, 2, 1]
    limited = await back_office.ok("webhooks", "list", "--limit", "2", "--json")
    assert [row["id"] for row in limited.objects] == [3, 2]
    assert len((await back_office.ok("webhooks", "list", "--limit", "1")).lines) == 2


async def test_show_prints_the_fields_the_counts_by_state_and_the_recent_deliveries(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    with running_receiver(failing_first(1)) as receiver:
        subscription, _ = await add(back_office, receiver.url, "--events", "*", "--author", "1")
        failed = await ping(back_office, subscription)
        delivered = await ping(back_office, subscription)
    await back_office.ok("resources", "status", "3", "published")
    await dispatch(engine, settings)
    assert (failed.exit_code, delivered.exit_code) == (1, 0)
    [failed_ping, delivered_ping, pending] = await deliveries(engine, subscription)

    text = await back_office.ok("webhooks", "show", str(subscription))
    [shown] = (await back_office.ok("webhooks", "show", str(subscription), "--json")).objects

    fields = field_lines(text)
    assert list(fields) == [
        "id", "url", "events", "resource_id", "author_id", "format", "enabled", "disabled_reason",
        "failing_since", "secret", "delivered", "pending", "failed", "created_at", "updated_at",
    ]  # fmt: skip
    assert {name: value for name, value in fields.items() if not name.endswith("_at")} == {
        "id": str(subscription),
        "url": receiver.url,
        "events": EVERY_EVENT_TEXT,
        "resource_id": "-",
        "author_id": "1",
        "format": "json",
        "enabled": "yes",
        "disabled_reason": "-",
        "failing_since": "-",
        "secret": "stored unsealed",
        "delivered": "1",
        "pending": "1",
        "failed": "1",
    }
    sections = text.stdout.split("\n\n", 1)[1].splitlines()
    assert sections[0] == "deliveries (3)"
    assert [line.split() for line in sections[1:]] == [
        ["DELIVERY", "EVENT", "STATE", "ATTEMPTS", "LAST_STATUS", "LAST_ERROR", "LAST_ATTEMPT_AT",
         "NEXT_ATTEMPT_AT"],
        [pending.uid, "resource.status_changed", "pending", "0", "-", "-", "-",
         timestamp(pending.next_attempt_at)],
        [delivered_ping.uid, "ping", "delivered", "1", "200", "-", timestamp(delivered_ping.last_attempt_at),
         "-"],
        [failed_ping.uid, "ping", "failed", "1", "500", "HTTP", "500", timestamp(failed_ping.last_attempt_at),
         "-"],
    ]  # fmt: skip
    assert [
        {key: row[key] for key in ("delivery", "event", "state", "attempts", "last_status", "last_error")}
        for row in shown["deliveries"]
    ] == [
        {
            "delivery": pending.uid,
            "event": "resource.status_changed",
            "state": "pending",
            "attempts": 0,
            "last_status": None,
            "last_error": None,
        },
        {
            "delivery": delivered_ping.uid,
            "event": "ping",
            "state": "delivered",
            "attempts": 1,
            "last_status": 200,
            "last_error": None,
        },
        {
            "delivery": failed_ping.uid,
            "event": "ping",
            "state": "failed",
            "attempts": 1,
            "last_status": 500,
            "last_error": "HTTP 500",
        },
    ]
    assert (shown["delivered"], shown["pending"], shown["failed"]) == (1, 1, 1)


async def test_show_tells_whether_the_secret_is_sealed_in_words_never_the_secret(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    unsealed, unsealed_secret = await add(back_office, HOOK, "--events", "*")
    back_office.environment[SECRET_KEY] = "the operator's sealing key"
    sealed, sealed_secret = await add(back_office, HOOK, "--events", "*")

    for subscription, secret, words in (
        (unsealed, unsealed_secret, "stored unsealed"),
        (sealed, sealed_secret, "sealed"),
    ):
        text = await back_office.ok("webhooks", "show", str(subscription))
        [shown] = (await back_office.ok("webhooks", "show", str(subscription), "--json")).objects
        assert field_lines(text)["secret"] == words
        assert shown["secret"] == words
        assert secret not in text.stdout
        assert secret not in json.dumps(shown)


async def test_show_refuses_an_unknown_webhook(back_office: BackOffice, api: httpx.AsyncClient) -> None:
    await add(back_office, HOOK, "--events", "*")

    for reference in ("2", "webhook", "0"):
        assert await back_office.refused("webhooks", "show", reference) == (
            f"marketplace: no webhook {reference!r}"
        )


# --- disable, enable, remove ---------------------------------------------------------------


async def test_disable_and_enable_switch_the_subscription_and_refuse_to_repeat_themselves(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    subscription, _ = await add(back_office, HOOK, "--events", "resource.status_changed")
    await back_office.ok("resources", "status", "3", "published")
    await dispatch(engine, settings)

    assert await back_office.refused("webhooks", "enable", "1") == "marketplace: webhook 1 is already enabled"
    disabled = await back_office.ok("webhooks", "disable", "1", "--json")
    assert await back_office.refused("webhooks", "disable", "1") == (
        "marketplace: webhook 1 is already disabled"
    )
    assert (await stored(engine, subscription)).enabled is False
    enabled = await back_office.ok("webhooks", "enable", "1")

    [change] = disabled.objects
    assert (change["action"], change["subject"], change["before"], change["after"]) == (
        "webhook.disabled",
        {"webhook": 1},
        {"enabled": True, "disabled_reason": None},
        {"enabled": False, "disabled_reason": "disabled by an operator"},
    )
    assert change["summary"] == f"webhook 1 ({HOOK}): disabled; 1 pending deliveries wait"
    assert enabled.lines == [f"webhook 1 ({HOOK}): enabled; 1 pending deliveries resume"]
    assert (await stored(engine, subscription)).enabled is True
    for verb in ("enable", "disable"):
        assert await back_office.refused("webhooks", verb, "2") == "marketplace: no webhook '2'"


async def test_enable_forgets_the_run_of_failures_and_the_reason_it_was_disabled(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    subscription, _ = await add(back_office, HOOK, "--events", "*")
    reason = "every delivery failed since 2026-01-01T00:00:00Z (24 h)"
    async with engine.begin() as connection:
        await connection.execute(
            update(WebhookSubscription)
            .where(WebhookSubscription.id == subscription)
            .values(enabled=False, disabled_reason=reason, failing_since=func.current_timestamp())
        )

    [change] = (await back_office.ok("webhooks", "enable", str(subscription), "--json")).objects

    assert (change["before"], change["after"]) == (
        {"enabled": False, "disabled_reason": reason},
        {"enabled": True, "disabled_reason": None},
    )
    row = await stored(engine, subscription)
    assert (row.enabled, row.failing_since, row.disabled_reason) == (True, None, None)


async def test_a_disabled_subscription_gets_no_new_deliveries(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    enabled, _ = await add(back_office, HOOK, "--events", "*")
    disabled, _ = await add(back_office, HOOK, "--events", "*")
    await back_office.ok("webhooks", "disable", str(disabled))

    await back_office.ok("resources", "status", "3", "published")
    await dispatch(engine, settings)

    assert [row.event for row in await deliveries(engine, enabled)] == ["resource.status_changed"]
    assert await deliveries(engine, disabled) == []


async def test_remove_deletes_the_subscription_and_its_deliveries(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    removed, _ = await add(back_office, HOOK, "--events", "*")
    kept, _ = await add(back_office, HOOK, "--events", "*")
    await back_office.ok("resources", "status", "3", "published")
    await dispatch(engine, settings)

    [change] = (await back_office.ok("webhooks", "remove", str(removed), "--json")).objects

    assert (change["action"], change["subject"], change["after"]) == ("webhook.removed", {"webhook": 1}, None)
    assert change["before"] == {
        "url": HOOK,
        "events": ",".join(EVERY_EVENT),
        "resource_id": None,
        "author_id": None,
        "format": "json",
        "enabled": True,
    }
    assert change["summary"] == f"webhook 1 ({HOOK}): removed; 1 pending deliveries dropped"
    assert await subscription_ids(engine) == [kept]
    assert [row.subscription_id for row in await deliveries(engine)] == [kept]
    assert await back_office.refused("webhooks", "remove", str(removed)) == "marketplace: no webhook '1'"
    assert await back_office.refused("webhooks", "show", str(removed)) == "marketplace: no webhook '1'"


# --- test ----------------------------------------------------------------------------------


async def test_test_sends_a_signed_ping_now_and_records_it_delivered(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine, receiver: Receiver
) -> None:
    subscription, secret = await add(back_office, receiver.url, "--events", "*")

    result = await back_office.ok("webhooks", "test", str(subscription))

    summary, answered = result.lines
    found = PING_ANSWERED.fullmatch(answered)
    assert found is not None, answered
    status, uid = found.groups()
    assert status == "200"
    assert summary == f"webhook 1 ({receiver.url}): ping sent as delivery {uid}"
    [received] = receiver.all()
    assert received.path == "/hook"
    assert (received.event, received.delivery) == ("ping", uid)
    assert received.headers["content-type"] == "application/json"
    assert verify(secret, received.signature, received.body)
    assert not verify(secret + "x", received.signature, received.body)
    body = received.json()
    assert list(body) == ["id", "event", "created_at", "data"]
    assert (body["event"], body["data"]) == ("ping", {"subscription_id": 1, "message": "ping"})
    [delivery] = await deliveries(engine, subscription)
    assert (delivery.uid, delivery.event, delivery.state, delivery.attempts) == (uid, "ping", "delivered", 1)
    assert (delivery.last_status, delivery.last_error, delivery.claim) == (200, None, None)
    assert delivery.delivered_at is not None
    assert delivery.body.encode() == received.body
    assert str(delivery.event_id) == body["id"]


async def test_rotate_secret_prints_a_new_secret_once_and_signs_every_delivery_from_now_on_with_it(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine, receiver: Receiver
) -> None:
    subscription, old_secret = await add(back_office, receiver.url, "--events", "*")

    result = await back_office("webhooks", "rotate-secret", str(subscription), "--by", "alice")

    assert result.exit_code == 0, result.stderr
    summary, shown_id, shown_secret, note = result.lines
    assert summary == (
        f"webhook {subscription} ({receiver.url}): new secret; every delivery from now on is signed with it"
    )
    assert shown_id == f"id      {subscription}"
    new_secret = shown_secret.removeprefix("secret  ")
    assert SECRET.fullmatch(new_secret) and new_secret != old_secret
    assert note == SECRET_SHOWN_ONCE
    assert result.stderr.splitlines() == [UNSET_KEY_NOTE]
    assert unseal((await stored(engine, subscription)).secret, None) == new_secret
    await back_office.ok("webhooks", "test", str(subscription))
    [received] = receiver.all()
    assert verify(new_secret, received.signature, received.body)
    assert not verify(old_secret, received.signature, received.body)
    [entry] = (await back_office.ok("activity", "--action", "webhook.secret_rotated", "--json")).objects
    assert (entry["by"], entry["summary"]) == ("alice", summary)
    assert old_secret not in json.dumps(entry) and new_secret not in json.dumps(entry)


async def test_rotate_secret_refuses_an_unknown_webhook(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    assert await back_office.refused("webhooks", "rotate-secret", "7") == "marketplace: no webhook '7'"


async def test_test_of_a_failing_receiver_exits_1_and_records_the_ping_failed_for_good(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    with running_receiver(always(500)) as receiver:
        subscription, _ = await add(back_office, receiver.url, "--events", "*")

        result = await ping(back_office, subscription)

        assert len(receiver.all()) == 1
    [delivery] = await deliveries(engine, subscription)
    assert result.exit_code == 1
    assert result.lines == [f"webhook 1 ({receiver.url}): ping sent as delivery {delivery.uid}"]
    assert result.stderr.splitlines() == [
        f"marketplace: ping to {receiver.url} failed: HTTP 500 (delivery {delivery.uid})"
    ]
    # A test is not retried: the ping is not pending, and no worker sends it again.
    assert (delivery.state, delivery.attempts, delivery.last_status, delivery.last_error) == (
        "failed",
        1,
        500,
        "HTTP 500",
    )
    assert (delivery.delivered_at, delivery.claim) == (None, None)


async def test_test_of_a_chat_subscription_pings_with_a_chat_message(
    back_office: BackOffice, api: httpx.AsyncClient, receiver: Receiver
) -> None:
    subscription, secret = await add(back_office, receiver.url, "--events", "*", "--format", "chat")

    await back_office.ok("webhooks", "test", str(subscription))

    [received] = receiver.all()
    assert received.event == "ping"
    assert verify(secret, received.signature, received.body)
    message = received.json()
    assert message["content"] == "Webhook test: this channel receives the marketplace's events."
    [embed] = message["embeds"]
    assert (embed["title"], embed["description"]) == ("Ping", f"Subscription {subscription} works.")
    assert message["allowed_mentions"] == {"parse": []}


async def test_test_refuses_an_unknown_webhook(back_office: BackOffice, api: httpx.AsyncClient) -> None:
    assert await back_office.refused("webhooks", "test", "1") == "marketplace: no webhook '1'"


# --- redeliver -----------------------------------------------------------------------------


async def test_redeliver_queues_a_new_pending_delivery_of_the_same_event_and_body(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine, receiver: Receiver
) -> None:
    subscription, _ = await add(back_office, receiver.url, "--events", "*")
    await back_office.ok("webhooks", "test", str(subscription))
    [original] = await deliveries(engine, subscription)

    [change] = (await back_office.ok("webhooks", "redeliver", original.uid.lower(), "--json")).objects

    [_, again] = await deliveries(engine, subscription)
    assert (change["action"], change["subject"], change["before"], change["after"]) == (
        "webhook.redelivered",
        {"delivery": original.uid},
        {"state": "delivered"},
        {"delivery": again.uid, "state": "pending"},
    )
    assert change["summary"] == (
        f"delivery {original.uid} (ping) of webhook 1: queued again as delivery {again.uid}"
    )
    assert again.uid != original.uid
    assert (again.state, again.attempts, again.redelivery_of) == ("pending", 0, original.id)
    assert (again.event_id, again.event, again.body) == (original.event_id, original.event, original.body)
    assert (again.last_status, again.claim, again.first_attempt_at) == (None, None, None)


async def test_redeliver_refuses_a_delivery_still_pending_or_unknown(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine, settings: Settings
) -> None:
    await add(back_office, HOOK, "--events", "*")
    await back_office.ok("resources", "status", "3", "published")
    await dispatch(engine, settings)
    [pending] = await deliveries(engine)

    assert await back_office.refused("webhooks", "redeliver", pending.uid) == (
        f"marketplace: delivery {pending.uid} is still pending"
        f" (next attempt at {timestamp(pending.next_attempt_at)})"
    )
    for unknown in ("01M8FKNEZ3660KKWNNNJAXYAYM", "nope"):
        assert await back_office.refused("webhooks", "redeliver", unknown) == (
            f"marketplace: no delivery {unknown!r}"
        )


# --- the activity log ----------------------------------------------------------------------


async def test_every_change_to_a_webhook_is_logged_under_its_webhook_event(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine, receiver: Receiver
) -> None:
    added = await back_office("webhooks", "add", receiver.url, "--events", "*", "--by", "tester")
    printed = [added.lines[0]]
    for command in (("test", "1"), ("disable", "1"), ("enable", "1")):
        printed.append((await back_office.ok("webhooks", *command, "--by", "tester")).lines[0])
    [ping_delivery] = await deliveries(engine)
    for command in (("redeliver", ping_delivery.uid), ("remove", "1")):
        printed.append((await back_office.ok("webhooks", *command, "--by", "tester")).lines[0])

    lines = (await back_office.ok("activity", "--action", "webhook.", "--oldest-first")).lines
    entries = (await back_office.ok("activity", "--action", "webhook.*", "--oldest-first", "--json")).objects
    added_only = (await back_office.ok("activity", "--action", "webhook.added", "--json")).objects

    assert [line.split("  ", 4)[2:] for line in lines] == [
        [action, "by tester", summary]
        for action, summary in zip(
            (
                "webhook.added",
                "webhook.tested",
                "webhook.disabled",
                "webhook.enabled",
                "webhook.redelivered",
                "webhook.removed",
            ),
            printed,
            strict=True,
        )
    ]
    assert [entry["via"] for entry in entries] == [
        f"marketplace webhooks {verb}" for verb in ("add", "test", "disable", "enable", "redeliver", "remove")
    ]
    assert [entry["id"] for entry in added_only] == [entries[0]["id"]]


# --- the outbox ----------------------------------------------------------------------------


async def test_back_office_changes_write_their_events_to_the_outbox_while_a_subscription_is_enabled(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await add(back_office, HOOK, "--events", "*", "--resource", "7")
    changes: list[tuple[tuple[str, ...], list[tuple[Any, ...]]]] = [
        (
            ("resources", "release", "1", "--version", "3.0.0", "--title", "Third"),
            [("release.published", 1, None, 13, None, None)],
        ),
        (
            ("resources", "status", "3", "published"),
            [("resource.status_changed", 3, None, 3, "draft", "published")],
        ),
        (
            ("resources", "soft-delete", "3"),
            [("resource.status_changed", 3, None, 3, "published", "deleted")],
        ),
        (
            ("payments", "refund", PAID_UID),
            [
                ("payment.status_changed", 1, 2, 1, "paid", "refunded"),
                ("access.revoked", 1, 2, 1, None, "purchase"),
            ],
        ),
        (("accesses", "grant", "6", "2"), [("access.granted", 2, 6, 5, None, "manual")]),
        (("accesses", "revoke", "2", "7"), [("access.revoked", 7, 2, 3, None, "manual")]),
    ]
    # Every event is written, whatever the subscriptions want: dispatching chooses.
    for command, events in changes:
        before = await outbox(engine)
        await back_office.ok(*command)
        assert await outbox(engine) == before + events, command
    # A refused change writes no event.
    await back_office.refused("resources", "status", "5", "rejected")


async def test_nothing_is_written_to_the_outbox_without_an_enabled_subscription(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await back_office.ok("resources", "status", "3", "published")
    await back_office.ok("accesses", "grant", "6", "2")
    subscription, _ = await add(back_office, HOOK, "--events", "*")
    await back_office.ok("webhooks", "disable", str(subscription))
    await back_office.ok("resources", "status", "3", "unlisted")
    await back_office.ok("payments", "refund", PAID_UID)

    assert await outbox(engine) == []

    await back_office.ok("webhooks", "enable", str(subscription))
    await back_office.ok("resources", "status", "3", "draft")
    assert await outbox(engine) == [("resource.status_changed", 3, None, 3, "unlisted", "draft")]


async def test_the_api_grant_writes_access_granted_to_the_outbox(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    await add(back_office, HOOK, "--events", "access.granted")

    answer = await api.post(f"/api/v1/chat/{MEMBER_CHAT_ID}/apply/8", json={"custom_password": GRANT_SECRET})

    assert answer.json() == {"message": "ok"}
    assert await outbox(engine) == [("access.granted", 8, 2, 4, None, "manual")]


def written_document(folder: Path, document: dict[str, Any]) -> str:
    path = folder / "document.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


async def test_loading_a_new_version_writes_release_published_once(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine, tmp_path: Path
) -> None:
    await add(back_office, HOOK, "--events", "release.published")
    document = catalogue()
    document["versions"].append({"id": 20, "resource_id": 7, "version": "1.0", "title": "Loaded"})
    path = written_document(tmp_path, document)

    await back_office.ok("load", path)
    assert await outbox(engine) == [("release.published", 7, None, 20, None, None)]
    # Loading the same document again changes nothing, so tells nothing.
    await back_office.ok("load", path)
    assert await outbox(engine) == [("release.published", 7, None, 20, None, None)]
