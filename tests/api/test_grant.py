"""Route 13, POST /chat/{user}/apply/{resource}: the shared secret, evaluation order, idempotent grants."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from marketplace.config import Settings
from marketplace.models import Access, Activity
from marketplace.services import Services
from tests.api.helpers import catalogue_client
from tests.catalogue import (
    CLOSED_MEMBER_CHAT_ID,
    DELETED_MEMBER_CHAT_ID,
    MEMBER_CHAT_ID,
    OWNER_CHAT_ID,
)
from tests.conftest import GRANT_SECRET, Loader
from tests.platform_names import contract_and_renamed
from tests.profiles import sqlite_only

OK = b'{"message":"ok"}'
KO = b'{"message":"ko"}'
FORBIDDEN = b'{"message":""}'
NOT_FOUND = b'{"message":"Not found."}'
UNKNOWN_CHAT_ID = "999999999999999999"
ALICIA_CHAT_ID = "666666666666666666"
ALICE_ID = 1  # owns nothing; her chat account is OWNER_CHAT_ID
BOB_ID = 2  # MEMBER_CHAT_ID: purchase access 1 on resource 1, revoked gift access 4 on resource 8

pytestmark = contract_and_renamed


def grant_path(chat_id: str, resource: str | int) -> str:
    return f"/api/v1/chat/{chat_id}/apply/{resource}"


async def accesses_of(services: Services, user_id: int, resource_id: int) -> list[Access]:
    async with services.sessions() as session:
        result = await session.execute(
            select(Access).where(Access.user_id == user_id, Access.resource_id == resource_id)
        )
        return list(result.scalars())


async def activities(services: Services) -> list[Activity]:
    async with services.sessions() as session:
        return list((await session.execute(select(Activity).order_by(Activity.id))).scalars())


async def access_count(services: Services) -> int:
    async with services.sessions() as session:
        return int((await session.execute(select(func.count()).select_from(Access))).scalar_one())


async def purchases(client: httpx.AsyncClient, resource_id: int) -> int:
    response = await client.get(f"/api/v1/resource/{resource_id}")
    assert response.status_code == 200
    return int(response.json()["purchases"])


# --- granting ---------------------------------------------------------------------------------


async def test_first_grant_answers_ok_and_creates_one_manual_access_without_payment(
    client: httpx.AsyncClient, services: Services
) -> None:
    response = await client.post(grant_path(OWNER_CHAT_ID, 1), json={"custom_password": GRANT_SECRET})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == OK
    [access] = await accesses_of(services, ALICE_ID, 1)
    assert (access.source, access.payment_id, access.revoked) == ("manual", None, False)
    listed = (await client.post("/api/v1/chat", json={"chat": OWNER_CHAT_ID})).json()
    assert [(a["id"], a["plugin_id"], a["payment_id"]) for a in listed] == [(access.id, 1, None)]


@sqlite_only
async def test_grant_reads_a_form_encoded_secret(client: httpx.AsyncClient, services: Services) -> None:
    response = await client.post(grant_path(OWNER_CHAT_ID, 1), data={"custom_password": GRANT_SECRET})
    assert response.content == OK
    assert len(await accesses_of(services, ALICE_ID, 1)) == 1


@sqlite_only
async def test_grant_of_an_unlisted_resource_is_allowed(
    client: httpx.AsyncClient, services: Services
) -> None:
    response = await client.post(grant_path(OWNER_CHAT_ID, 2), json={"custom_password": GRANT_SECRET})
    assert response.content == OK
    assert len(await accesses_of(services, ALICE_ID, 2)) == 1


@sqlite_only
async def test_a_manual_grant_is_not_counted_in_purchases(client: httpx.AsyncClient) -> None:
    assert await purchases(client, 1) == 1
    response = await client.post(grant_path(OWNER_CHAT_ID, 1), json={"custom_password": GRANT_SECRET})
    assert response.content == OK
    assert await purchases(client, 1) == 1


async def test_second_grant_answers_ko_and_changes_nothing(
    client: httpx.AsyncClient, services: Services
) -> None:
    first = await client.post(grant_path(OWNER_CHAT_ID, 1), json={"custom_password": GRANT_SECRET})
    assert first.content == OK
    [before] = await accesses_of(services, ALICE_ID, 1)
    second = await client.post(grant_path(OWNER_CHAT_ID, 1), json={"custom_password": GRANT_SECRET})
    assert second.status_code == 200
    assert second.content == KO
    [after] = await accesses_of(services, ALICE_ID, 1)
    assert (after.id, after.source, after.revoked, after.updated_at) == (
        before.id,
        before.source,
        before.revoked,
        before.updated_at,
    )
    assert len(await activities(services)) == 1


@sqlite_only
async def test_grant_of_an_owned_purchase_answers_ko_and_keeps_the_purchase(
    client: httpx.AsyncClient, services: Services
) -> None:
    response = await client.post(grant_path(MEMBER_CHAT_ID, 1), json={"custom_password": GRANT_SECRET})
    assert response.content == KO
    [access] = await accesses_of(services, BOB_ID, 1)
    assert (access.id, access.source, access.payment_id, access.revoked) == (1, "purchase", 1, False)
    assert await activities(services) == []


async def test_grant_reactivates_a_revoked_access_instead_of_adding_one(
    client: httpx.AsyncClient, services: Services
) -> None:
    response = await client.post(grant_path(MEMBER_CHAT_ID, 8), json={"custom_password": GRANT_SECRET})
    assert response.status_code == 200
    assert response.content == OK
    [access] = await accesses_of(services, BOB_ID, 8)
    assert (access.id, access.revoked, access.source, access.payment_id) == (4, False, "manual", None)
    listed = (await client.post("/api/v1/chat", json={"chat": MEMBER_CHAT_ID})).json()
    assert [a["id"] for a in listed] == [1, 3, 4]


@sqlite_only
async def test_a_reactivated_refunded_purchase_is_a_manual_grant_not_a_sale(
    client: httpx.AsyncClient, services: Services, load: Loader
) -> None:
    await load({"chat_accounts": [{"user_id": 6, "chat_id": ALICIA_CHAT_ID}]})
    response = await client.post(grant_path(ALICIA_CHAT_ID, 1), json={"custom_password": GRANT_SECRET})
    assert response.content == OK
    [access] = await accesses_of(services, 6, 1)
    assert (access.id, access.revoked, access.source, access.payment_id) == (2, False, "manual", None)
    assert await purchases(client, 1) == 1


def grant_route_name(services: Services) -> str:
    """The grant's route name: `api.v1.chat.grant`, with the configured chat platform's name."""
    return f"api.v1.{services.settings.chat_name}.grant"


async def test_grant_logs_access_granted_via_the_route_with_a_keyed_hash_of_the_client_ip(
    client: httpx.AsyncClient, services: Services, settings: Settings
) -> None:
    client_ip = "203.0.113.7"
    response = await client.post(
        grant_path(OWNER_CHAT_ID, 1),
        json={"custom_password": GRANT_SECRET},
        headers={"X-Forwarded-For": client_ip},
    )
    assert response.content == OK
    [access] = await accesses_of(services, ALICE_ID, 1)
    [entry] = await activities(services)
    assert (entry.event, entry.via, entry.user_id, entry.resource_id, entry.access_id) == (
        "access.granted",
        grant_route_name(services),
        ALICE_ID,
        1,
        access.id,
    )
    assert settings.app_key is not None
    expected = hmac.new(settings.app_key.encode(), client_ip.encode(), hashlib.sha256).hexdigest()
    assert entry.ip_hash == expected


@sqlite_only
async def test_grant_logs_each_reactivation(client: httpx.AsyncClient, services: Services) -> None:
    response = await client.post(grant_path(MEMBER_CHAT_ID, 8), json={"custom_password": GRANT_SECRET})
    assert response.content == OK
    [entry] = await activities(services)
    assert (entry.event, entry.via, entry.user_id, entry.resource_id, entry.access_id) == (
        "access.granted",
        grant_route_name(services),
        BOB_ID,
        8,
        4,
    )


async def test_concurrent_grants_of_one_pair_give_exactly_one_ok_and_one_row(
    client: httpx.AsyncClient, services: Services
) -> None:
    responses = await asyncio.gather(
        *(
            client.post(grant_path(OWNER_CHAT_ID, 7), json={"custom_password": GRANT_SECRET})
            for _ in range(10)
        )
    )
    assert sorted(response.content for response in responses) == [KO] * 9 + [OK]
    assert len(await accesses_of(services, ALICE_ID, 7)) == 1
    assert len(await activities(services)) == 1


async def test_concurrent_grants_reactivate_a_revoked_access_exactly_once(
    client: httpx.AsyncClient, services: Services
) -> None:
    responses = await asyncio.gather(
        *(
            client.post(grant_path(MEMBER_CHAT_ID, 8), json={"custom_password": GRANT_SECRET})
            for _ in range(10)
        )
    )
    assert sorted(response.content for response in responses) == [KO] * 9 + [OK]
    [access] = await accesses_of(services, BOB_ID, 8)
    assert (access.id, access.revoked) == (4, False)
    assert len(await activities(services)) == 1


@sqlite_only
async def test_a_granted_access_prints_timestamps_in_the_contract_shape(client: httpx.AsyncClient) -> None:
    response = await client.post(grant_path(OWNER_CHAT_ID, 1), json={"custom_password": GRANT_SECRET})
    assert response.content == OK
    [access] = (await client.post("/api/v1/chat", json={"chat": OWNER_CHAT_ID})).json()
    for key in ("created_at", "updated_at"):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000000Z", access[key]), access[key]


# --- evaluation order -------------------------------------------------------------------------


# Each refusal writes nothing, so one app serves every case of a refusal test.
HIDDEN_OR_UNKNOWN_RESOURCES = [
    ("draft", "3"),
    ("pending", "4"),
    ("rejected", "5"),
    ("soft-deleted", "6"),
    ("unknown", "999"),
    ("not numeric", "abc"),
]
GONE_CHAT_IDS = [
    ("nobody linked", UNKNOWN_CHAT_ID),
    ("soft-deleted account", DELETED_MEMBER_CHAT_ID),
    ("closed account", CLOSED_MEMBER_CHAT_ID),
]
UNUSABLE_SECRETS: list[tuple[str, dict[str, Any]]] = [
    ("no body", {}),
    ("missing", {"json": {}}),
    ("null", {"json": {"custom_password": None}}),
    ("empty", {"json": {"custom_password": ""}}),
    ("wrong", {"json": {"custom_password": "wrong"}}),
    ("wrong case", {"json": {"custom_password": GRANT_SECRET.upper()}}),
    ("longer", {"json": {"custom_password": GRANT_SECRET + "x"}}),
    ("a prefix", {"json": {"custom_password": GRANT_SECRET[:-1]}}),
    ("array", {"json": {"custom_password": [GRANT_SECRET]}}),
    ("object", {"json": {"custom_password": {"0": GRANT_SECRET}}}),
    ("boolean", {"json": {"custom_password": True}}),
    ("form array", {"data": {"custom_password[]": GRANT_SECRET}}),
    ("JSON body that is an array", {"json": [GRANT_SECRET]}),
]


@sqlite_only
async def test_hidden_or_unknown_resource_is_404_before_the_secret_is_checked(
    client: httpx.AsyncClient, services: Services
) -> None:
    before = await access_count(services)
    for case, resource in HIDDEN_OR_UNKNOWN_RESOURCES:
        for password in ("wrong", GRANT_SECRET):
            response = await client.post(
                grant_path(OWNER_CHAT_ID, resource), json={"custom_password": password}
            )
            assert (response.status_code, response.content) == (404, NOT_FOUND), (case, password)
    assert await access_count(services) == before


@sqlite_only
async def test_wrong_secret_is_403_even_for_an_unknown_member(client: httpx.AsyncClient) -> None:
    response = await client.post(grant_path(UNKNOWN_CHAT_ID, 1), json={"custom_password": "wrong"})
    assert response.status_code == 403
    assert response.content == FORBIDDEN


@sqlite_only
async def test_valid_secret_for_an_unlinked_or_gone_member_is_404(
    client: httpx.AsyncClient, services: Services
) -> None:
    before = await access_count(services)
    for case, chat_id in GONE_CHAT_IDS:
        response = await client.post(grant_path(chat_id, 1), json={"custom_password": GRANT_SECRET})
        assert (response.status_code, response.content) == (404, NOT_FOUND), case
    assert await access_count(services) == before


# --- the secret -------------------------------------------------------------------------------


@sqlite_only
async def test_secret_missing_wrong_or_not_a_string_is_403_with_empty_message(
    client: httpx.AsyncClient, services: Services
) -> None:
    before = await access_count(services)
    for case, request_options in UNUSABLE_SECRETS:
        response = await client.post(grant_path(OWNER_CHAT_ID, 1), **request_options)
        assert (response.status_code, response.content) == (403, FORBIDDEN), case
    assert await access_count(services) == before
    assert await activities(services) == []


@sqlite_only
async def test_a_json_number_is_refused_even_when_its_digits_are_the_secret(settings: Settings) -> None:
    async with catalogue_client(settings, chat_grant_secret="12345") as client:
        refused = await client.post(grant_path(OWNER_CHAT_ID, 1), json={"custom_password": 12345})
        assert refused.status_code == 403
        assert refused.content == FORBIDDEN
        granted = await client.post(grant_path(OWNER_CHAT_ID, 1), json={"custom_password": "12345"})
        assert granted.content == OK


@sqlite_only
@pytest.mark.parametrize("configured", [None, ""], ids=["unset", "empty"])
async def test_without_a_configured_secret_every_grant_is_403(
    settings: Settings, configured: str | None
) -> None:
    async with catalogue_client(settings, chat_grant_secret=configured) as client:
        for options in ({}, {"json": {"custom_password": ""}}, {"json": {"custom_password": GRANT_SECRET}}):
            response = await client.post(grant_path(OWNER_CHAT_ID, 1), **options)
            assert response.status_code == 403
            assert response.content == FORBIDDEN
        owned = await client.post("/api/v1/chat", json={"chat": OWNER_CHAT_ID})
        assert owned.content == b"[]"
