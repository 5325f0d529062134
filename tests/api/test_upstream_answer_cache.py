"""Cached upstream answers: one upstream call per key at a time, within a process and across
processes sharing Redis; failures shared by the callers waiting, never cached."""

from __future__ import annotations

import asyncio

import httpx

from marketplace.config import Settings
from marketplace.services import Services, build_services
from tests.conftest import make_client
from tests.profiles import postgresql_only
from tests.upstream import FakeUpstream

SERVER_ID = "81384788765712384"
WIDGET_PATH = f"/chat-api/guilds/{SERVER_ID}/widget.json"
WIDGET = {"id": SERVER_ID, "name": "Plugin Chat", "instant_invite": None}
CARD = b'{"id":"81384788765712384","name":"Plugin Chat","invite":null}'
SLOW_SECONDS = 0.3


def address(number: int) -> dict[str, str]:
    return {"X-Forwarded-For": f"10.0.{number // 250}.{number % 250 + 1}"}


async def test_concurrent_misses_of_one_key_make_one_upstream_call(
    empty_client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.answer_json(WIDGET_PATH, WIDGET, delay_seconds=SLOW_SECONDS)
    answers = await asyncio.gather(
        *(empty_client.get(f"/api/v1/chat/{SERVER_ID}", headers=address(n)) for n in range(50))
    )
    assert {(answer.status_code, answer.content) for answer in answers} == {(200, CARD)}
    assert upstream.calls[WIDGET_PATH] == 1


async def test_a_failure_reaches_every_waiting_caller_and_is_not_cached(
    empty_client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.answer_json(WIDGET_PATH, {"message": "Unknown Guild"}, status=404, delay_seconds=SLOW_SECONDS)
    failed = await asyncio.gather(
        *(empty_client.get(f"/api/v1/chat/{SERVER_ID}", headers=address(n)) for n in range(20))
    )
    assert {answer.status_code for answer in failed} == {404}
    assert upstream.calls[WIDGET_PATH] == 1
    upstream.answer_json(WIDGET_PATH, WIDGET)
    enabled = await empty_client.get(f"/api/v1/chat/{SERVER_ID}", headers=address(99))
    assert (enabled.status_code, enabled.content) == (200, CARD)
    assert upstream.calls[WIDGET_PATH] == 2


async def test_a_caller_that_goes_away_does_not_cancel_the_call_others_wait_for(
    empty_client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.answer_json(WIDGET_PATH, WIDGET, delay_seconds=SLOW_SECONDS)
    first = asyncio.ensure_future(empty_client.get(f"/api/v1/chat/{SERVER_ID}", headers=address(1)))
    await asyncio.sleep(SLOW_SECONDS / 3)
    second = asyncio.ensure_future(empty_client.get(f"/api/v1/chat/{SERVER_ID}", headers=address(2)))
    await asyncio.sleep(0.01)
    first.cancel()
    answer = await second
    assert (answer.status_code, answer.content) == (200, CARD)
    assert upstream.calls[WIDGET_PATH] == 1


@postgresql_only
async def test_processes_sharing_redis_make_one_upstream_call_between_them(
    settings: Settings, services: Services, upstream: FakeUpstream
) -> None:
    upstream.answer_json(WIDGET_PATH, WIDGET, delay_seconds=SLOW_SECONDS)
    # Another worker: its own services (pool, in-process flights) on the same Redis prefix.
    other = build_services(settings)
    try:
        async with make_client(services) as one, make_client(other) as two:
            answers = await asyncio.gather(
                *(
                    (one if n % 2 else two).get(f"/api/v1/chat/{SERVER_ID}", headers=address(n))
                    for n in range(40)
                )
            )
    finally:
        await other.close()
    assert {(answer.status_code, answer.content) for answer in answers} == {(200, CARD)}
    assert upstream.calls[WIDGET_PATH] == 1
