"""Route 14, GET /chat/{serverId}: a chat server's card read from its public widget, cached on success."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from marketplace.config import Settings
from tests.api.helpers import Clock, catalogue_client
from tests.platform_names import contract_and_renamed
from tests.profiles import sqlite_only
from tests.upstream import FakeUpstream, closed_port_url

NOT_FOUND = b'{"message":"Not found."}'
SERVER_ID = "81384788765712384"
WIDGET_PATH = f"/chat-api/guilds/{SERVER_ID}/widget.json"
WIDGET = {
    "id": SERVER_ID,
    "name": "Plugin Chat",
    "instant_invite": "https://chat.example/invite/AbC123",
    "channels": [{"id": "1", "name": "general", "position": 0}],
    "members": [{"id": "0", "username": "someone", "status": "online"}],
    "presence_count": 1,
}
SERVER_CARD = (
    b'{"id":"81384788765712384","name":"Plugin Chat","invite":"https:\\/\\/chat.example\\/invite\\/AbC123"}'
)
# Fault tests wait this long for upstream instead of the production 5 seconds.
SHORT_TIMEOUT_SECONDS = 0.2
SLOW_UPSTREAM_SECONDS = 2.0

pytestmark = contract_and_renamed


def test_upstream_timeout_defaults_to_5_seconds() -> None:
    assert Settings.model_fields["upstream_timeout_seconds"].default == 5.0


@sqlite_only
async def test_server_card_is_id_name_and_invite_of_the_widget(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.answer_json(WIDGET_PATH, WIDGET)
    response = await client.get(f"/api/v1/chat/{SERVER_ID}")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    # Exactly three keys: the widget's channels, members and presence count are never forwarded.
    assert response.content == SERVER_CARD
    assert upstream.calls == {WIDGET_PATH: 1}


@sqlite_only
async def test_widget_is_read_without_any_bot_token(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.answer_json(WIDGET_PATH, WIDGET)
    response = await client.get(f"/api/v1/chat/{SERVER_ID}", headers={"Authorization": "Bot caller-token"})
    assert response.status_code == 200
    [sent] = upstream.headers
    assert "authorization" not in {name.lower() for name in sent}


@sqlite_only
@pytest.mark.parametrize("widget_invite", [{}, {"instant_invite": None}], ids=["absent", "null"])
async def test_invite_is_null_when_the_widget_has_none(
    client: httpx.AsyncClient, upstream: FakeUpstream, widget_invite: dict[str, Any]
) -> None:
    upstream.answer_json(WIDGET_PATH, {"id": SERVER_ID, "name": "No Invite", **widget_invite})
    response = await client.get(f"/api/v1/chat/{SERVER_ID}")
    assert response.status_code == 200
    assert response.content == b'{"id":"81384788765712384","name":"No Invite","invite":null}'


@sqlite_only
async def test_non_digit_server_id_is_404_without_calling_upstream(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    # Arabic-Indic and full-width digits are digits to Unicode, not to the contract.
    for server_id in (
        "abc",
        "123abc",
        "-123",
        "12.5",
        "1e5",
        "\u0661\u0662\u0663",
        "\uff11\uff12\uff13",
        "%20123",
    ):
        response = await client.get(f"/api/v1/chat/{server_id}")
        assert (response.status_code, response.content) == (404, NOT_FOUND), server_id
    assert sum(upstream.calls.values()) == 0


@sqlite_only
async def test_any_widget_failure_is_404_not_found(client: httpx.AsyncClient, upstream: FakeUpstream) -> None:
    failures: list[tuple[str, int, Any]] = [
        ("widget disabled", 403, {"message": "Widget Disabled", "code": 50004}),
        ("unknown server", 404, {"message": "Unknown Guild", "code": 10004}),
        ("server error with a widget body", 500, WIDGET),
        ("missing id", 200, {"name": "No Id", "instant_invite": None}),
        ("missing name", 200, {"id": SERVER_ID, "instant_invite": None}),
        ("null name", 200, {"id": SERVER_ID, "name": None}),
        ("array body", 200, [WIDGET]),
    ]
    for case, status, payload in failures:
        upstream.answer_json(WIDGET_PATH, payload, status=status)
        response = await client.get(f"/api/v1/chat/{SERVER_ID}")
        assert (response.status_code, response.content) == (404, NOT_FOUND), case
    upstream.answer_raw(WIDGET_PATH, b"<html>Bad Gateway</html>", status=200)
    response = await client.get(f"/api/v1/chat/{SERVER_ID}")
    assert (response.status_code, response.content) == (404, NOT_FOUND), "body not JSON"
    assert upstream.calls[WIDGET_PATH] == len(failures) + 1


@sqlite_only
async def test_unreachable_upstream_is_404(settings: Settings) -> None:
    async with catalogue_client(settings, chat_api_url=f"{closed_port_url()}/chat-api") as client:
        response = await client.get(f"/api/v1/chat/{SERVER_ID}")
    assert (response.status_code, response.content) == (404, NOT_FOUND)


@sqlite_only
async def test_upstream_timeout_is_404_and_not_cached(settings: Settings, upstream: FakeUpstream) -> None:
    upstream.answer_json(WIDGET_PATH, WIDGET, delay_seconds=SLOW_UPSTREAM_SECONDS)
    async with catalogue_client(settings, upstream_timeout_seconds=SHORT_TIMEOUT_SECONDS) as client:
        started = time.monotonic()
        timed_out = await client.get(f"/api/v1/chat/{SERVER_ID}")
        waited = time.monotonic() - started
        assert (timed_out.status_code, timed_out.content) == (404, NOT_FOUND)
        assert waited < SLOW_UPSTREAM_SECONDS
        upstream.answer_json(WIDGET_PATH, WIDGET)
        answered = await client.get(f"/api/v1/chat/{SERVER_ID}")
    assert (answered.status_code, answered.content) == (200, SERVER_CARD)
    assert upstream.calls[WIDGET_PATH] == 2


async def test_a_server_card_is_cached_so_a_second_call_skips_upstream(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.answer_json(WIDGET_PATH, WIDGET)
    first = await client.get(f"/api/v1/chat/{SERVER_ID}")
    upstream.answer_json(WIDGET_PATH, {**WIDGET, "name": "Renamed"})
    second = await client.get(f"/api/v1/chat/{SERVER_ID}")
    assert first.content == second.content == SERVER_CARD
    assert second.headers["content-type"] == "application/json"
    assert upstream.calls[WIDGET_PATH] == 1


@sqlite_only
async def test_a_failure_is_not_cached_so_enabling_the_widget_works_at_once(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.answer_json(WIDGET_PATH, {"message": "Widget Disabled", "code": 50004}, status=403)
    disabled = await client.get(f"/api/v1/chat/{SERVER_ID}")
    assert disabled.status_code == 404
    upstream.answer_json(WIDGET_PATH, WIDGET)
    enabled = await client.get(f"/api/v1/chat/{SERVER_ID}")
    assert (enabled.status_code, enabled.content) == (200, SERVER_CARD)
    assert upstream.calls[WIDGET_PATH] == 2


@sqlite_only
async def test_the_cache_is_per_server_id(client: httpx.AsyncClient, upstream: FakeUpstream) -> None:
    other_path = "/chat-api/guilds/42/widget.json"
    upstream.answer_json(WIDGET_PATH, WIDGET)
    upstream.answer_json(other_path, {"id": "42", "name": "Other", "instant_invite": None})
    assert (await client.get(f"/api/v1/chat/{SERVER_ID}")).content == SERVER_CARD
    other = await client.get("/api/v1/chat/42")
    assert other.content == b'{"id":"42","name":"Other","invite":null}'
    assert upstream.calls == {WIDGET_PATH: 1, other_path: 1}


@sqlite_only
async def test_a_server_card_is_cached_for_10_minutes(
    client: httpx.AsyncClient, upstream: FakeUpstream, clock: Clock
) -> None:
    upstream.answer_json(WIDGET_PATH, WIDGET)
    await client.get(f"/api/v1/chat/{SERVER_ID}")
    clock.now += 599
    await client.get(f"/api/v1/chat/{SERVER_ID}")
    assert upstream.calls[WIDGET_PATH] == 1
    clock.now += 2
    await client.get(f"/api/v1/chat/{SERVER_ID}")
    assert upstream.calls[WIDGET_PATH] == 2
