"""Webhooks delivered by real `marketplace serve` processes: a release made by an operator reaches
its receiver in time, retries end in one success, a killed worker loses nothing and two hosts on
one database deliver each event once."""

from __future__ import annotations

import asyncio
import re
import subprocess
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.config import Settings
from marketplace.models import WebhookDelivery, utcnow
from marketplace.services import Services
from marketplace.webhooks.signing import verify
from tests.catalogue import catalogue
from tests.conftest import Loader
from tests.live import MARKETPLACE, environment, running_service
from tests.webhooks.receiver import failing_first, hanging_first, running_receiver
from tests.webhooks.support import SECRET, execute, release, subscribe

# A release reaches its receiver within this, from the moment the change was made.
DELIVERY_BOUND_SECONDS = 2.0
LEASE_SECONDS = 10


@pytest.fixture
async def stocked(services: Services, load: Loader) -> AsyncEngine:
    """The engine of the profile's database, on the standard test catalogue."""
    await load(catalogue())
    return services.engine


def serving_environment(settings: Settings, **overrides: str) -> dict[str, str]:
    return environment(settings, MARKETPLACE_WEBHOOKS_ALLOW_PRIVATE="true", **overrides)


def made_at(body: dict[str, object]) -> float:
    return datetime.fromisoformat(str(body["created_at"]).replace("Z", "+00:00")).timestamp()


async def test_a_release_through_the_back_office_reaches_a_local_receiver_within_2_s_signed(
    stocked: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    env = serving_environment(settings)
    with running_receiver() as receiver:
        await subscribe(stocked, receiver.url, events="release.published")
        with running_service(env, tmp_path):
            released = await asyncio.to_thread(
                subprocess.run,
                [MARKETPLACE, "resources", "release", "7", "--version", "2.0", "--title", "Faster"],
                env=env,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert released.returncode == 0, released.stderr
            (got,) = await asyncio.to_thread(receiver.wait_for, 1, 10.0)
    body = got.json()
    assert (body["event"], body["data"]["version"]["version"]) == ("release.published", "2.0")
    assert got.at - made_at(body) <= DELIVERY_BOUND_SECONDS
    assert verify(SECRET, got.signature, got.body)


async def test_a_receiver_failing_five_times_then_succeeding_gets_the_event_once_as_a_success(
    stocked: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    env = serving_environment(
        settings,
        MARKETPLACE_WEBHOOKS_RETRY_BASE_SECONDS="0.05",
        MARKETPLACE_WEBHOOKS_RETRY_MAX_SECONDS="0.2",
        MARKETPLACE_WEBHOOKS_POLL_SECONDS="0.1",
    )
    with running_receiver(failing_first(5)) as receiver:
        await subscribe(stocked, receiver.url, events="release.published")
        with running_service(env, tmp_path):
            await release(stocked, 7, 100, "2.0")
            await asyncio.to_thread(receiver.wait_for, 1, 30.0)
            await asyncio.sleep(1.5)  # time for any delivery after the success
        received = receiver.all()
    assert [one.status for one in received] == [500] * 5 + [200]
    assert len({one.delivery for one in received}) == 1
    assert all(verify(SECRET, one.signature, one.body) for one in received)


async def test_a_worker_killed_mid_delivery_loses_nothing(
    stocked: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    env = serving_environment(
        settings,
        MARKETPLACE_WEBHOOKS_LEASE_SECONDS=str(LEASE_SECONDS),
        MARKETPLACE_WEBHOOKS_POLL_SECONDS="0.2",
    )
    with running_receiver(hanging_first()) as receiver:
        await subscribe(stocked, receiver.url, events="release.published")
        with running_service(env, tmp_path) as first:
            await release(stocked, 7, 100, "2.0")
            assert await asyncio.to_thread(receiver.hanging.wait, 20.0), "the delivery never started"
            # Sent, not recorded: the worker dies between the two.
            first.process.kill()
            first.process.wait(timeout=10)
        receiver.released.set()
        with running_service(env, tmp_path):
            (answered,) = await asyncio.to_thread(receiver.wait_for, 1, LEASE_SECONDS + 20.0)
        received = receiver.all()
    assert [one.status for one in received] == [0, 200]
    assert received[0].delivery == answered.delivery, "sent again as the same delivery"
    assert received[0].body == answered.body
    async with stocked.connect() as connection:
        state, attempts = (
            await connection.execute(select(WebhookDelivery.state, WebhookDelivery.attempts))
        ).one()
    assert (state, attempts) == ("delivered", 2)


def _delivered_by(server_url: str) -> float:
    exposition = httpx.get(f"{server_url}/metrics", timeout=10).text
    found = re.search(
        r'^marketplace_webhook_deliveries_total\{event="release.published",outcome="delivered"\} (\S+)$',
        exposition,
        re.MULTILINE,
    )
    assert found is not None
    return float(found.group(1))


async def test_two_hosts_on_one_database_deliver_each_event_once(
    stocked: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    events = 30
    env = serving_environment(
        settings, MARKETPLACE_WEBHOOKS_CONCURRENCY="2", MARKETPLACE_WEBHOOKS_POLL_SECONDS="0.2"
    )
    with running_receiver(delay_seconds=0.1) as receiver:
        await subscribe(stocked, receiver.url, events="release.published")
        first_root, second_root = tmp_path / "first", tmp_path / "second"
        first_root.mkdir()
        second_root.mkdir()
        with running_service(env, first_root) as first, running_service(env, second_root) as second:
            await execute(
                stocked,
                *(
                    "INSERT INTO versions (id, resource_id, version, title, download, created_at, updated_at) "
                    f"VALUES ({100 + n}, 7, '3.{n}', '', 0, :now, :now)"
                    for n in range(events)
                ),
                now=utcnow(),
            )
            await asyncio.to_thread(receiver.wait_for, events, 60.0)
            await asyncio.sleep(1.5)  # time for any second delivery
            shares = [_delivered_by(first.base_url), _delivered_by(second.base_url)]
        received = receiver.all()
    assert len(received) == events
    assert len({one.delivery for one in received}) == events
    assert sorted(one.json()["data"]["version"]["id"] for one in received) == list(range(100, 100 + events))
    assert sum(shares) == events
    assert min(shares) > 0, f"both hosts deliver: {shares}"
