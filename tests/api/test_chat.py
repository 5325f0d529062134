"""Chat-bot routes 10-12: the sign-in redirect, a member's accesses, the chat member object."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.database.readers import observed_reads
from tests.catalogue import CLOSED_MEMBER_CHAT_ID, DELETED_MEMBER_CHAT_ID, MEMBER_CHAT_ID, OWNER_CHAT_ID
from tests.conftest import Loader
from tests.platform_names import contract_and_renamed
from tests.profiles import sqlite_only
from tests.upstream import FakeUpstream

VERSION = "x-service-api-version"
NOT_FOUND = b'{"message":"Not found."}'
CHAT_NOT_FOUND = b'{"message":"Chat not found"}'
UNKNOWN_CHAT_ID = "999999999999999999"
CARLA_CHAT_ID = "555555555555555555"

# A member whose accesses are loaded out of id order, with fixed timestamps, so that the exact bytes
# of the access list can be compared (rows 20 and 21 are active, 22 is revoked).
CARLA = {
    "users": [{"id": 10, "name": "Carla", "avatar": "avatars/10.png"}],
    "chat_accounts": [{"user_id": 10, "chat_id": CARLA_CHAT_ID}],
    "accesses": [
        {"id": 21, "user_id": 10, "resource_id": 7, "source": "manual",
         "created_at": "2024-03-01T12:00:00Z", "updated_at": "2024-03-02T08:30:00Z"},
        {"id": 22, "user_id": 10, "resource_id": 8, "source": "gift", "revoked": True},
        {"id": 20, "user_id": 10, "resource_id": 1, "payment_id": 1, "source": "purchase",
         "created_at": "2024-01-05T00:00:00Z", "updated_at": "2024-01-05T00:00:00Z"},
    ],
}  # fmt: skip
CARLA_ACCESSES = (
    b'[{"id":20,"user_id":10,"plugin_id":1,"payment_id":1,'
    b'"created_at":"2024-01-05T00:00:00.000000Z","updated_at":"2024-01-05T00:00:00.000000Z"},'
    b'{"id":21,"user_id":10,"plugin_id":7,"payment_id":null,'
    b'"created_at":"2024-03-01T12:00:00.000000Z","updated_at":"2024-03-02T08:30:00.000000Z"}]'
)

pytestmark = contract_and_renamed


# --- 10. GET /chat/authentication ------------------------------------------------------------


@sqlite_only
async def test_authentication_is_a_302_to_the_website_chat_redirect(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/v1/chat/authentication")
    assert response.status_code == 302
    assert response.headers["location"] == "http://marketplace.test/auth/chat/redirect"
    assert response.headers[VERSION] == "1"


@sqlite_only
async def test_authentication_ignores_and_drops_code_and_state(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/v1/chat/authentication?code=abc123&state=xyz")
    assert response.status_code == 302
    assert response.headers["location"] == "http://marketplace.test/auth/chat/redirect"


@sqlite_only
async def test_authentication_is_declared_before_the_chat_server_route(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    response = await client.get("/api/v1/chat/authentication")
    assert response.status_code == 302
    assert sum(upstream.calls.values()) == 0


# --- 11. POST /chat --------------------------------------------------------------------------


async def test_store_lists_only_active_accesses_as_a_bare_array_by_ascending_id(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load(CARLA)
    response = await client.post("/api/v1/chat", json={"chat": CARLA_CHAT_ID})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == CARLA_ACCESSES


@sqlite_only
async def test_store_reads_a_form_encoded_chat_field(client: httpx.AsyncClient, load: Loader) -> None:
    await load(CARLA)
    response = await client.post("/api/v1/chat", data={"chat": CARLA_CHAT_ID})
    assert response.status_code == 200
    assert response.content == CARLA_ACCESSES


@sqlite_only
async def test_store_excludes_revoked_accesses_of_the_catalogue_member(client: httpx.AsyncClient) -> None:
    response = await client.post("/api/v1/chat", json={"chat": MEMBER_CHAT_ID})
    assert response.status_code == 200
    accesses = response.json()
    assert [access["id"] for access in accesses] == [1, 3]
    assert [list(access) for access in accesses] == [
        ["id", "user_id", "plugin_id", "payment_id", "created_at", "updated_at"]
    ] * 2
    assert [(a["user_id"], a["plugin_id"], a["payment_id"]) for a in accesses] == [(2, 1, 1), (2, 7, None)]


@sqlite_only
async def test_store_trims_the_chat_field_before_the_lookup(client: httpx.AsyncClient) -> None:
    response = await client.post("/api/v1/chat", json={"chat": f"  {MEMBER_CHAT_ID}\t"})
    assert response.status_code == 200
    assert [access["id"] for access in response.json()] == [1, 3]


@sqlite_only
async def test_store_answers_an_empty_array_for_a_member_owning_nothing(client: httpx.AsyncClient) -> None:
    response = await client.post("/api/v1/chat", json={"chat": OWNER_CHAT_ID})
    assert response.status_code == 200
    assert response.content == b"[]"


# Each refusal writes nothing, so one app serves every case of a refusal test.
UNUSABLE_CHAT_FIELDS: list[tuple[str, dict[str, Any]]] = [
    ("no body", {}),
    ("JSON without chat", {"json": {}}),
    ("JSON null", {"json": {"chat": None}}),
    ("JSON empty string", {"json": {"chat": ""}}),
    ("JSON blank string", {"json": {"chat": " \t "}}),
    ("JSON number", {"json": {"chat": int(MEMBER_CHAT_ID)}}),
    ("JSON array", {"json": {"chat": [MEMBER_CHAT_ID]}}),
    ("JSON object", {"json": {"chat": {"id": MEMBER_CHAT_ID}}}),
    ("JSON body that is an array", {"json": [MEMBER_CHAT_ID]}),
    ("form blank", {"data": {"chat": "  "}}),
    ("form array", {"data": {"chat[]": MEMBER_CHAT_ID}}),
    ("form without chat", {"data": {"other": MEMBER_CHAT_ID}}),
]
GONE_CHAT_IDS = [
    ("nobody linked", UNKNOWN_CHAT_ID),
    ("soft-deleted account", DELETED_MEMBER_CHAT_ID),
    ("closed account", CLOSED_MEMBER_CHAT_ID),
    ("a service user id", "2"),
]


@sqlite_only
async def test_store_without_a_usable_chat_string_is_400_chat_not_found(client: httpx.AsyncClient) -> None:
    for case, request_options in UNUSABLE_CHAT_FIELDS:
        response = await client.post("/api/v1/chat", **request_options)
        assert (response.status_code, response.content) == (400, CHAT_NOT_FOUND), case
        assert response.headers[VERSION] == "1", case


@sqlite_only
async def test_store_for_an_unlinked_or_gone_member_is_404(client: httpx.AsyncClient) -> None:
    for case, chat_id in GONE_CHAT_IDS:
        response = await client.post("/api/v1/chat", json={"chat": chat_id})
        assert (response.status_code, response.content) == (404, NOT_FOUND), case


# --- 12. POST /chat/{user} -------------------------------------------------------------------


@sqlite_only
async def test_member_is_user_then_plugins_with_an_absolute_avatar_url(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load(CARLA)
    response = await client.post(f"/api/v1/chat/{CARLA_CHAT_ID}")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == (
        b'{"user":{"name":"Carla","id":10,"avatar":"http:\\/\\/marketplace.test\\/storage\\/avatars\\/10.png"},'
        b'"plugins":' + CARLA_ACCESSES + b"}"
    )


@sqlite_only
async def test_member_without_avatar_has_avatar_null(client: httpx.AsyncClient) -> None:
    response = await client.post(f"/api/v1/chat/{MEMBER_CHAT_ID}")
    assert response.status_code == 200
    member = response.json()
    assert member["user"] == {"name": "bob", "id": 2, "avatar": None}
    assert [access["id"] for access in member["plugins"]] == [1, 3]


@sqlite_only
async def test_member_owning_nothing_has_empty_plugins(client: httpx.AsyncClient) -> None:
    response = await client.post(f"/api/v1/chat/{OWNER_CHAT_ID}")
    assert response.status_code == 200
    assert response.json() == {
        "user": {"name": "Alice", "id": 1, "avatar": "http://marketplace.test/storage/avatars/1.png"},
        "plugins": [],
    }


@sqlite_only
async def test_member_for_an_unlinked_or_gone_chat_user_is_404(client: httpx.AsyncClient) -> None:
    for case, chat_id in GONE_CHAT_IDS:
        response = await client.post(f"/api/v1/chat/{chat_id}")
        assert (response.status_code, response.content) == (404, NOT_FOUND), case


async def test_member_plugins_are_the_unrevoked_accesses_by_ascending_id_on_every_database(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load(CARLA)
    response = await client.post(f"/api/v1/chat/{CARLA_CHAT_ID}")
    assert response.status_code == 200
    assert response.content.endswith(b'"plugins":' + CARLA_ACCESSES + b"}")


async def test_member_of_a_closed_or_deleted_account_is_404_on_every_database(
    client: httpx.AsyncClient,
) -> None:
    for case, chat_id in GONE_CHAT_IDS:
        response = await client.post(f"/api/v1/chat/{chat_id}")
        assert (response.status_code, response.content) == (404, NOT_FOUND), case


@sqlite_only
async def test_member_is_two_point_reads_of_the_workers_reader(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    reads: list[str] = []
    with observed_reads(engine, reads.append):
        response = await client.post(f"/api/v1/chat/{MEMBER_CHAT_ID}")
    assert response.status_code == 200
    assert [("chat_accounts" in sql, "accesses" in sql) for sql in reads] == [(True, False), (False, True)]


@sqlite_only
async def test_member_of_an_unstorable_chat_id_is_404_without_a_read(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    reads: list[str] = []
    with observed_reads(engine, reads.append):
        for chat_id in ("1" * 33, "12%0034"):
            response = await client.post(f"/api/v1/chat/{chat_id}")
            assert (response.status_code, response.content) == (404, NOT_FOUND), chat_id
    assert reads == []


@sqlite_only
async def test_get_on_a_member_snowflake_is_the_chat_server_route(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    widget_path = f"/chat-api/guilds/{MEMBER_CHAT_ID}/widget.json"
    upstream.answer_json(widget_path, {"id": MEMBER_CHAT_ID, "name": "Some Server", "instant_invite": None})
    response = await client.get(f"/api/v1/chat/{MEMBER_CHAT_ID}")
    assert response.status_code == 200
    assert response.json() == {"id": MEMBER_CHAT_ID, "name": "Some Server", "invite": None}
    assert upstream.calls[widget_path] == 1


@sqlite_only
async def test_post_on_a_snowflake_never_calls_the_chat_widget(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    response = await client.post(f"/api/v1/chat/{MEMBER_CHAT_ID}")
    assert response.status_code == 200
    assert sum(upstream.calls.values()) == 0
