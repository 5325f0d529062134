"""The outbox: events written by the database in the transaction of their change, and dispatched
into one delivery per subscription that wants them (migration 0009, `marketplace/webhooks/outbox.py`)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.config import Settings
from marketplace.models import utcnow
from marketplace.services import Services
from tests.catalogue import catalogue
from tests.conftest import Loader
from tests.webhooks.support import deliveries, dispatch, events_written, execute, release, subscribe

HOOK = "http://127.0.0.1:9/hook"


@pytest.fixture
async def stocked(services: Services, load: Loader) -> AsyncEngine:
    """The engine of the profile's database, on the standard test catalogue."""
    await load(catalogue())
    return services.engine


async def test_no_event_is_written_while_no_subscription_is_enabled(stocked: AsyncEngine) -> None:
    await subscribe(stocked, HOOK, enabled=False)
    await release(stocked, 1, 100, "9.0")
    assert await events_written(stocked) == []


async def test_an_event_exists_only_if_its_change_was_committed(stocked: AsyncEngine) -> None:
    await subscribe(stocked, HOOK)
    async with stocked.connect() as connection:
        transaction = await connection.begin()
        await connection.execute(
            text(
                "INSERT INTO versions (id, resource_id, version, title, download, created_at, updated_at) "
                "VALUES (100, 1, '9.0', '', 0, '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
            )
        )
        await transaction.rollback()
    assert await events_written(stocked) == []
    await release(stocked, 1, 100, "9.0")
    assert await events_written(stocked) == [("release.published", 1, None, 100, None, None)]


async def test_each_change_an_operators_sql_makes_is_its_event(stocked: AsyncEngine) -> None:
    await subscribe(stocked, HOOK)
    await release(stocked, 7, 100, "2.0")
    await execute(stocked, "UPDATE resources SET status = 'unlisted' WHERE id = 7")
    await execute(stocked, "UPDATE resources SET deleted_at = '2026-01-02 00:00:00' WHERE id = 7")
    await execute(stocked, "UPDATE resources SET deleted_at = NULL WHERE id = 7")
    await execute(stocked, "UPDATE resources SET download = download + 1 WHERE id = 7")
    await execute(stocked, "UPDATE payments SET status = 'refunded' WHERE id = 1")
    await execute(stocked, "UPDATE accesses SET revoked = TRUE WHERE id = 3")
    await execute(stocked, "UPDATE accesses SET revoked = FALSE WHERE id = 3")
    await execute(
        stocked,
        "INSERT INTO accesses (id, user_id, resource_id, source, revoked, created_at, updated_at) "
        "VALUES (50, 6, 8, 'manual', FALSE, '2026-01-01 00:00:00', '2026-01-01 00:00:00')",
    )
    await execute(stocked, "DELETE FROM accesses WHERE id = 50")
    await execute(stocked, "DELETE FROM accesses WHERE id = 4")  # already revoked: nothing is lost
    assert await events_written(stocked) == [
        ("release.published", 7, None, 100, None, None),
        ("resource.status_changed", 7, None, 7, "published", "unlisted"),
        ("resource.status_changed", 7, None, 7, "unlisted", "deleted"),
        ("resource.status_changed", 7, None, 7, "deleted", "unlisted"),
        ("payment.status_changed", 1, 2, 1, "paid", "refunded"),
        ("access.revoked", 7, 2, 3, None, "manual"),
        ("access.granted", 7, 2, 3, None, "manual"),
        ("access.granted", 8, 6, 50, None, "manual"),
        ("access.revoked", 8, 6, 50, None, "manual"),
    ]


async def test_one_statement_of_many_rows_writes_an_event_per_row(stocked: AsyncEngine) -> None:
    await subscribe(stocked, HOOK)
    await execute(stocked, "UPDATE resources SET status = 'draft' WHERE id IN (7, 8)")
    assert await events_written(stocked) == [
        ("resource.status_changed", 7, None, 7, "published", "draft"),
        ("resource.status_changed", 8, None, 8, "published", "draft"),
    ]


async def test_dispatch_makes_one_delivery_per_subscription_that_wants_the_event(
    stocked: AsyncEngine, settings: Settings
) -> None:
    everything = await subscribe(stocked, HOOK)
    releases = await subscribe(stocked, HOOK, events="release.published")
    payments = await subscribe(stocked, HOOK, events="payment.status_changed")
    await subscribe(stocked, HOOK, enabled=False)
    await release(stocked, 1, 100, "9.0")
    assert await dispatch(stocked, settings) == 1
    assert sorted(delivery.subscription_id for delivery in await deliveries(stocked)) == [
        everything,
        releases,
    ]
    assert payments not in {delivery.subscription_id for delivery in await deliveries(stocked)}
    assert await dispatch(stocked, settings) == 0, "an event is dispatched once"
    assert len(await deliveries(stocked)) == 2


async def test_a_subscription_to_a_resource_or_an_author_gets_only_their_events(
    stocked: AsyncEngine, settings: Settings
) -> None:
    of_resource_8 = await subscribe(stocked, HOOK, resource_id=8)
    of_author_1 = await subscribe(stocked, HOOK, author_id=1)
    await release(stocked, 1, 100, "9.0")  # author 1
    await release(stocked, 8, 101, "2.0")  # author 2
    await execute(stocked, "UPDATE payments SET status = 'refunded' WHERE id = 1")  # resource 1
    await dispatch(stocked, settings)
    wanted = {
        (
            delivery.subscription_id,
            delivery.event,
            json.loads(delivery.body)["data"].get("resource", {}).get("id"),
        )
        for delivery in await deliveries(stocked)
    }
    assert wanted == {
        (of_author_1, "release.published", 1),
        (of_author_1, "payment.status_changed", 1),
        (of_resource_8, "release.published", 8),
    }


async def test_releases_of_hidden_resources_are_not_news_and_unlisted_ones_only_to_their_subscribers(
    stocked: AsyncEngine, settings: Settings
) -> None:
    everyone = await subscribe(stocked, HOOK, events="release.published")
    of_unlisted = await subscribe(stocked, HOOK, events="release.published", resource_id=2)
    of_draft = await subscribe(stocked, HOOK, events="release.published", resource_id=3)
    await release(stocked, 2, 100, "1.0")  # unlisted
    await release(stocked, 3, 101, "1.0")  # draft
    await release(stocked, 6, 102, "1.0")  # soft-deleted
    await release(stocked, 7, 103, "1.0")  # published
    await dispatch(stocked, settings)
    got = {
        (delivery.subscription_id, json.loads(delivery.body)["data"]["version"]["id"])
        for delivery in await deliveries(stocked)
    }
    assert got == {(everyone, 103), (of_unlisted, 100)}
    assert of_draft not in {subscription for subscription, _ in got}


async def test_a_release_body_names_the_resource_its_card_and_the_version(
    stocked: AsyncEngine, settings: Settings
) -> None:
    await subscribe(stocked, HOOK, events="release.published")
    await release(stocked, 7, 100, "2.0-beta", "Faster / <safer>")
    await dispatch(stocked, settings)
    (delivery,) = await deliveries(stocked)
    body = json.loads(delivery.body)
    assert list(body) == ["id", "event", "created_at", "data"]
    assert body["event"] == "release.published"
    assert body["id"].isdigit()
    assert body["data"]["resource"] == {
        "id": 7,
        "name": "Free Chat",
        "status": "published",
        "author": {"id": 2, "name": "bob"},
        "url": "http://marketplace.test/api/v1/resource/7",
    }
    assert body["data"]["version"]["version"] == "2.0-beta"
    assert body["data"]["version"]["title"] == "Faster / <safer>"
    # The service's one JSON encoder: ASCII only, `/` escaped.
    assert "\\/api\\/v1\\/resource\\/7" in delivery.body


async def test_an_access_body_names_the_member_and_their_chat_account(
    stocked: AsyncEngine, settings: Settings
) -> None:
    await subscribe(stocked, HOOK, events="access.revoked")
    await execute(stocked, "UPDATE accesses SET revoked = TRUE WHERE id = 1")
    await dispatch(stocked, settings)
    (delivery,) = await deliveries(stocked)
    data = json.loads(delivery.body)["data"]
    assert data["access"] == {
        "id": 1,
        "user_id": 2,
        "plugin_id": 1,
        "payment_id": 1,
        "source": "purchase",
        "active": False,
    }
    assert data["member"] == {"id": 2, "name": "bob", settings.platform_names.chat: "111111111111111111"}


async def test_a_payment_body_tells_its_status_before_and_after(
    stocked: AsyncEngine, settings: Settings
) -> None:
    await subscribe(stocked, HOOK, events="payment.status_changed")
    await execute(stocked, "UPDATE payments SET status = 'disputed' WHERE id = 1")
    await dispatch(stocked, settings)
    (delivery,) = await deliveries(stocked)
    data = json.loads(delivery.body)["data"]
    assert (data["from"], data["to"], data["payment"]["status"]) == ("paid", "disputed", "disputed")
    assert data["payment"]["uid"] == "01HZY3J1Q8Y5ZQ4W2B7C9D0E1F"


async def test_a_release_dated_more_than_a_day_before_its_event_is_history_not_news(
    stocked: AsyncEngine, settings: Settings
) -> None:
    await subscribe(stocked, HOOK, events="release.published")
    for version_id, hours_ago in ((100, 25), (101, 23)):
        await execute(
            stocked,
            "INSERT INTO versions (id, resource_id, version, title, download, created_at, updated_at) "
            "VALUES (:id, 7, :number, '', 0, :at, :at)",
            id=version_id,
            number=f"{hours_ago}.0",
            at=utcnow() - timedelta(hours=hours_ago),
        )
    await dispatch(stocked, settings)
    assert [json.loads(delivery.body)["data"]["version"]["id"] for delivery in await deliveries(stocked)] == [
        101
    ]


async def test_no_event_is_written_that_no_enabled_subscription_names(stocked: AsyncEngine) -> None:
    await subscribe(stocked, HOOK, events="payment.status_changed")
    await subscribe(stocked, HOOK, events="release.published", enabled=False)
    await release(stocked, 7, 100, "2.0")
    await execute(stocked, "UPDATE accesses SET revoked = TRUE WHERE id = 3")
    await execute(stocked, "UPDATE resources SET status = 'draft' WHERE id = 7")
    await execute(stocked, "UPDATE payments SET status = 'refunded' WHERE id = 1")
    assert [kind for kind, *_ in await events_written(stocked)] == ["payment.status_changed"]


async def test_a_removed_subscriptions_id_and_a_pruned_events_id_are_never_given_again(
    stocked: AsyncEngine,
) -> None:
    first = await subscribe(stocked, HOOK, events="release.published")
    await release(stocked, 7, 100, "2.0")
    await execute(stocked, "DELETE FROM webhook_events")
    await execute(stocked, f"DELETE FROM webhook_subscriptions WHERE id = {first}")
    second = await subscribe(stocked, HOOK, events="release.published")
    await release(stocked, 7, 101, "2.1")
    async with stocked.connect() as connection:
        event_id = (await connection.execute(text("SELECT id FROM webhook_events"))).scalar_one()
    assert second > first
    assert event_id > 1
