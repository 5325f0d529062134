"""Sending deliveries: signed bodies, claims, retries with backoff, giving up, disabling a failing
subscription, and what delivery leaves alone (`marketplace/webhooks/delivery.py`)."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.config import Settings
from marketplace.database.engine import create_engine
from marketplace.models import Activity, WebhookSubscription
from marketplace.services import Services
from marketplace.webhooks.delivery import claim_due, record
from marketplace.webhooks.sealing import seal, unseal
from marketplace.webhooks.sending import Sent
from marketplace.webhooks.signing import verify
from marketplace.webhooks.worker import WebhookDeliverer, prune
from tests.catalogue import catalogue
from tests.conftest import Loader
from tests.webhooks.receiver import always, failing_first, running_receiver
from tests.webhooks.support import (
    SECRET,
    age,
    deliver_due,
    deliveries,
    dispatch,
    events_written,
    execute,
    policy,
    release,
    subscribe,
)


@pytest.fixture
async def stocked(services: Services, load: Loader) -> AsyncEngine:
    """The engine of the profile's database, on the standard test catalogue."""
    await load(catalogue())
    return services.engine


async def test_a_delivery_is_a_signed_post_of_its_body_with_its_ids(
    stocked: AsyncEngine, settings: Settings
) -> None:
    with running_receiver() as receiver:
        await subscribe(stocked, receiver.url, events="release.published")
        await release(stocked, 7, 100, "2.0")
        await dispatch(stocked, settings)
        assert await deliver_due(stocked, policy()) == ["delivered"]
        (got,) = receiver.answered()
    (delivery,) = await deliveries(stocked)
    assert got.body == delivery.body.encode()
    assert got.event == "release.published"
    assert got.delivery == delivery.uid
    assert got.headers["content-type"] == "application/json"
    assert verify(SECRET, got.signature, got.body)
    assert not verify("another secret", got.signature, got.body)
    assert (delivery.state, delivery.attempts, delivery.last_status) == ("delivered", 1, 200)


async def test_a_receiver_failing_five_times_then_succeeding_gets_the_event_once_as_a_success(
    stocked: AsyncEngine, settings: Settings
) -> None:
    with running_receiver(failing_first(5)) as receiver:
        await subscribe(stocked, receiver.url, events="release.published")
        await release(stocked, 7, 100, "2.0")
        await dispatch(stocked, settings)
        outcomes: list[str | None] = []
        for _ in range(200):
            outcomes += await deliver_due(stocked, policy())
            if "delivered" in outcomes:
                break
            await asyncio.sleep(0.01)
        for _ in range(5):  # nothing is sent after the success
            outcomes += await deliver_due(stocked, policy())
            await asyncio.sleep(0.03)
        received = receiver.all()
    assert outcomes == ["failed"] * 5 + ["delivered"]
    assert [one.status for one in received] == [500] * 5 + [200]
    assert len({one.delivery for one in received}) == 1, "every attempt carries the same delivery id"
    (delivery,) = await deliveries(stocked)
    assert (delivery.state, delivery.attempts) == ("delivered", 6)


async def test_a_failed_attempt_waits_its_backoff_before_the_next() -> None:
    rules = policy(retry_base_seconds=10.0, retry_max_seconds=3600.0)
    for attempts, ceiling in [
        (1, 10.0),
        (2, 20.0),
        (3, 40.0),
        (8, 1280.0),
        (9, 2560.0),
        (10, 3600.0),
        (60, 3600.0),
    ]:
        waits = [rules.backoff_seconds(attempts) for _ in range(200)]
        assert all(ceiling / 2 <= wait <= ceiling for wait in waits), (attempts, min(waits), max(waits))
        assert len(set(waits)) > 1, "jitter: the waits differ"


async def test_a_failed_delivery_is_not_sent_again_before_its_backoff(
    stocked: AsyncEngine, settings: Settings
) -> None:
    with running_receiver(always(503)) as receiver:
        await subscribe(stocked, receiver.url, events="release.published")
        await release(stocked, 7, 100, "2.0")
        await dispatch(stocked, settings)
        slow = policy(retry_base_seconds=60.0, retry_max_seconds=60.0)
        assert await deliver_due(stocked, slow) == ["failed"]
        assert await deliver_due(stocked, slow) == []
        assert len(receiver.all()) == 1
    (delivery,) = await deliveries(stocked)
    assert (delivery.state, delivery.last_status, delivery.last_error) == ("pending", 503, "HTTP 503")


async def test_a_delivery_failing_past_its_retry_window_is_given_up(
    stocked: AsyncEngine, settings: Settings
) -> None:
    with running_receiver(always(500)) as receiver:
        await subscribe(stocked, receiver.url, events="release.published")
        await release(stocked, 7, 100, "2.0")
        await dispatch(stocked, settings)
        assert await deliver_due(stocked, policy()) == ["failed"]
        await age(stocked, "webhook_deliveries", "first_attempt_at", 3601)
        await age(stocked, "webhook_deliveries", "next_attempt_at", 3601)
        assert await deliver_due(stocked, policy()) == ["given_up"]
        await age(stocked, "webhook_deliveries", "next_attempt_at", 3601)
        assert await deliver_due(stocked, policy()) == []
    (delivery,) = await deliveries(stocked)
    assert delivery.state == "failed"


async def test_a_subscription_failing_for_a_whole_window_is_disabled_logged_and_recorded(
    stocked: AsyncEngine, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    with running_receiver(always(500)) as receiver:
        subscription = await subscribe(stocked, receiver.url, events="release.published")
        await release(stocked, 7, 100, "2.0")
        await release(stocked, 8, 101, "2.0")
        await dispatch(stocked, settings)
        assert await deliver_due(stocked, policy(), limit=1) == ["failed"]
        await age(stocked, "webhook_subscriptions", "failing_since", 3601)
        await age(stocked, "webhook_deliveries", "next_attempt_at", 10)
        with caplog.at_level(logging.WARNING, logger="marketplace.webhooks"):
            assert await deliver_due(stocked, policy(), limit=1) == ["failed"]
        await age(stocked, "webhook_deliveries", "next_attempt_at", 10)
        assert await deliver_due(stocked, policy()) == [], "a disabled subscription's deliveries wait"
    async with stocked.connect() as connection:
        enabled, reason = (
            await connection.execute(
                select(WebhookSubscription.enabled, WebhookSubscription.disabled_reason).where(
                    WebhookSubscription.id == subscription
                )
            )
        ).one()
        logged = (await connection.execute(select(Activity.event, Activity.actor, Activity.properties))).all()
    assert not enabled
    assert reason is not None and reason.startswith("every delivery failed since ")
    assert [(event, actor) for event, actor, _ in logged] == [("webhook.disabled", "marketplace")]
    assert logged[0][2]["summary"].startswith(
        f"webhook {subscription} ({receiver.url}): disabled, every delivery failed"
    )
    assert any("disabled, every delivery failed" in message for message in caplog.messages)
    assert [delivery.state for delivery in await deliveries(stocked)] == ["pending", "pending"]


async def test_a_success_ends_a_subscriptions_run_of_failures(
    stocked: AsyncEngine, settings: Settings
) -> None:
    with running_receiver(failing_first(1)) as receiver:
        subscription = await subscribe(stocked, receiver.url, events="release.published")
        await release(stocked, 7, 100, "2.0")
        await dispatch(stocked, settings)
        assert await deliver_due(stocked, policy()) == ["failed"]
        async with stocked.connect() as connection:
            failing = await connection.scalar(
                select(WebhookSubscription.failing_since).where(WebhookSubscription.id == subscription)
            )
        assert failing is not None
        await asyncio.sleep(0.05)
        assert await deliver_due(stocked, policy()) == ["delivered"]
    async with stocked.connect() as connection:
        assert (
            await connection.scalar(
                select(WebhookSubscription.failing_since).where(WebhookSubscription.id == subscription)
            )
        ) is None


async def test_a_lapsed_claim_is_sent_again_and_the_late_outcome_of_the_first_is_not_recorded(
    stocked: AsyncEngine, settings: Settings
) -> None:
    short = policy(lease_seconds=0.2)
    with running_receiver() as receiver:
        await subscribe(stocked, receiver.url, events="release.published")
        await release(stocked, 7, 100, "2.0")
        await dispatch(stocked, settings)
        (first,) = await claim_due(stocked, short, 10)
        assert await claim_due(stocked, short, 10) == [], "claimed: no other worker takes it"
        await asyncio.sleep(0.3)
        # The first worker died before recording: the delivery goes again.
        assert await deliver_due(stocked, short) == ["delivered"]
        late = Sent(status=500, error="HTTP 500", response_excerpt="", duration_seconds=0.1)
        assert await record(stocked, first, late, short) is None
        assert len(receiver.answered()) == 1
    (delivery,) = await deliveries(stocked)
    assert (delivery.state, delivery.attempts, delivery.uid) == ("delivered", 2, first.uid)


async def test_workers_claiming_at_once_never_take_the_same_delivery(
    stocked: AsyncEngine, settings: Settings
) -> None:
    await subscribe(stocked, "http://127.0.0.1:9/hook", events="access.granted")
    await execute(
        stocked,
        *(
            "INSERT INTO accesses (user_id, resource_id, source, revoked, created_at, updated_at) "
            f"VALUES ({user}, {resource}, 'manual', FALSE, '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
            for user in (1, 2, 5, 6)
            for resource in (2, 3, 4, 5, 8)
            if (user, resource) != (2, 8)
        ),
    )
    await dispatch(stocked, settings)
    engines = [create_engine(settings) for _ in range(4)]
    try:
        claims = await asyncio.gather(*(claim_due(other, policy(), 3) for other in engines * 3))
    finally:
        for other in engines:
            await other.dispose()
    claimed = [delivery.id for batch in claims for delivery in batch]
    assert len(claimed) == len(set(claimed)) == 19


async def test_a_destination_refused_at_delivery_is_a_failed_attempt_and_nothing_is_sent(
    stocked: AsyncEngine, settings: Settings
) -> None:
    with running_receiver() as receiver:
        await subscribe(stocked, receiver.url, events="release.published")
        await release(stocked, 7, 100, "2.0")
        await dispatch(stocked, settings)
        assert await deliver_due(stocked, policy(allow_private=False)) == ["failed"]
        assert receiver.all() == []
    (delivery,) = await deliveries(stocked)
    assert delivery.last_error.startswith("destination refused: ")


async def test_a_sealed_secret_signs_with_the_key_and_fails_without_it(
    stocked: AsyncEngine, settings: Settings
) -> None:
    with running_receiver() as receiver:
        await subscribe(stocked, receiver.url, events="release.published", key="the key")
        await release(stocked, 7, 100, "2.0")
        await dispatch(stocked, settings)
        assert await deliver_due(stocked, policy(secret_key=None)) == ["failed"]
        assert receiver.all() == []
        (failed,) = await deliveries(stocked)
        assert (
            failed.last_error
            == "cannot sign: the secret is sealed and MARKETPLACE_WEBHOOKS_SECRET_KEY is unset"
        )
        await age(stocked, "webhook_deliveries", "next_attempt_at", 10)
        assert await deliver_due(stocked, policy(secret_key="the key")) == ["delivered"]
        (got,) = receiver.all()
    assert verify(SECRET, got.signature, got.body)
    async with stocked.connect() as connection:
        stored = await connection.scalar(select(WebhookSubscription.secret))
    assert stored is not None and SECRET not in stored
    assert unseal(stored, "the key") == SECRET


def test_a_secret_stored_without_a_key_is_marked_unsealed_and_sealed_ones_need_their_key() -> None:
    assert seal("s", None) == "plain:s"
    sealed = seal("s", "one key")
    assert sealed.startswith("v1:") and "s" != sealed[3:]
    assert seal("s", "one key") != sealed, "a fresh nonce each time"
    assert unseal(sealed, "one key") == "s"
    from marketplace.webhooks.sealing import SecretUnreadable

    for key in (None, "another key"):
        with pytest.raises(SecretUnreadable):
            unseal(sealed, key)


async def test_delivering_webhooks_drops_no_cached_answer(
    services: Services, settings: Settings, load: Loader
) -> None:
    await load(catalogue())
    engine = services.engine
    with running_receiver() as receiver:
        await subscribe(engine, receiver.url, events="release.published")
        await release(engine, 7, 100, "2.0")
        # The change feed settles (on PostgreSQL its first notices and the release's arrive).
        await services.worker_cache.changes.proven()
        before = None
        while before is None or services.worker_cache.generation() != before:
            before = services.worker_cache.generation()
            await asyncio.sleep(0.3)
        deliverer = WebhookDeliverer(engine, settings.model_copy(update={"webhooks_allow_private": True}))
        deliverer.start()
        for _ in range(250):
            if receiver.answered():
                break
            await asyncio.sleep(0.02)
        await deliverer.close()
        await asyncio.sleep(0.3)  # any notice the delivery sent would have arrived
        assert len(receiver.answered()) == 1
    assert services.worker_cache.generation() == before


async def test_every_event_kind_has_its_metric_series_from_the_start(
    client: httpx.AsyncClient, services: Services
) -> None:
    exposition = (await client.get("/metrics")).text
    for event in (
        "release.published",
        "resource.status_changed",
        "payment.status_changed",
        "access.granted",
        "access.revoked",
        "ping",
    ):
        for outcome in ("delivered", "failed", "given_up"):
            assert (
                f'marketplace_webhook_deliveries_total{{event="{event}",outcome="{outcome}"}}' in exposition
            )
    assert 'marketplace_webhook_queue_depth{stage="events"}' in exposition
    assert "marketplace_webhook_oldest_pending_seconds" in exposition


async def test_metrics_read_the_queue_depth_and_the_oldest_pending_age(
    client: httpx.AsyncClient, services: Services
) -> None:
    engine = services.engine
    await subscribe(engine, "http://127.0.0.1:9/hook", events="release.published")
    await release(engine, 7, 100, "2.0")
    await release(engine, 8, 101, "2.0")
    await age(engine, "webhook_events", "created_at", 120)
    exposition = (await client.get("/metrics")).text
    assert 'marketplace_webhook_queue_depth{stage="events"} 2.0' in exposition
    assert 'marketplace_webhook_queue_depth{stage="deliveries"} 0.0' in exposition
    oldest = next(
        float(line.split()[-1])
        for line in exposition.splitlines()
        if line.startswith("marketplace_webhook_oldest_pending_seconds ")
    )
    assert 120 <= oldest < 180


async def test_up_names_the_delivery_queue_when_work_has_waited_too_long(
    client: httpx.AsyncClient, services: Services
) -> None:
    engine = services.engine
    await subscribe(engine, "http://127.0.0.1:9/hook", events="release.published")
    await release(engine, 7, 100, "2.0")
    healthy = (await client.get("/up")).json()
    assert healthy["checks"]["webhooks"] == "ok"
    late_after = services.settings.webhooks_late_after_seconds
    await age(engine, "webhook_events", "created_at", late_after + 60)
    health = await client.get("/up")
    assert health.status_code == 200
    body = health.json()
    assert body["status"] == "degraded"
    assert body["checks"]["webhooks"] == "late"
    assert any(reason.startswith("webhooks: a delivery has been due for ") for reason in body["degraded"])


async def test_a_receiver_that_keeps_failing_does_not_make_the_queue_late(
    client: httpx.AsyncClient, services: Services, settings: Settings
) -> None:
    engine = services.engine
    with running_receiver(always(500)) as receiver:
        await subscribe(engine, receiver.url, events="release.published")
        await release(engine, 7, 100, "2.0")
        await dispatch(engine, settings)
        await deliver_due(engine, policy(retry_base_seconds=3600, retry_max_seconds=3600))
    await age(engine, "webhook_deliveries", "created_at", 3600)
    await age(engine, "webhook_events", "created_at", 3600)
    body = (await client.get("/up")).json()
    assert body["checks"]["webhooks"] == "ok"


async def test_finished_deliveries_and_their_events_are_deleted_after_the_history_kept(
    stocked: AsyncEngine, settings: Settings
) -> None:
    with running_receiver() as receiver:
        await subscribe(stocked, receiver.url, events="release.published")
        await release(stocked, 7, 100, "2.0")
        await release(stocked, 8, 101, "2.0")
        await dispatch(stocked, settings)
        assert await deliver_due(stocked, policy(), limit=1) == ["delivered"]
    await age(stocked, "webhook_deliveries", "created_at", 31 * 86400)
    await age(stocked, "webhook_events", "dispatched_at", 31 * 86400)
    await release(stocked, 1, 102, "9.0")  # a recent event, not dispatched yet
    assert await prune(stocked, 30 * 86400) == 2
    (kept,) = await deliveries(stocked)
    assert kept.state == "pending", "a delivery not finished is kept, however old"
    assert [(kind, subject) for kind, _, _, subject, *_ in await events_written(stocked)] == [
        ("release.published", 101),
        ("release.published", 102),
    ]


async def test_an_answer_holding_any_byte_is_recorded_and_the_delivery_not_sent_again(
    stocked: AsyncEngine, settings: Settings
) -> None:
    with running_receiver() as receiver:
        receiver.answer_body = b"ok\x00\xff\xfe binary"
        await subscribe(stocked, receiver.url, events="release.published")
        await release(stocked, 7, 100, "2.0")
        await dispatch(stocked, settings)
        assert await deliver_due(stocked, policy()) == ["delivered"]
        assert await deliver_due(stocked, policy()) == []
    (delivery,) = await deliveries(stocked)
    assert (delivery.state, delivery.last_response) == ("delivered", "ok\ufffd\ufffd\ufffd binary")
