"""Route 9: GET /payment/{payment}, the status of one payment by its ULID."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.api.helpers import recorded_statements
from tests.catalogue import PAID_UID, REFUNDED_UID
from tests.conftest import Loader

NOT_FOUND = b'{"message":"Not found."}'
UNKNOWN_UID = "01J00000000000000000000000"

# The rules below do not depend on the database or the store.
pytestmark = pytest.mark.parametrize("profile", ["sqlite"], indirect=True)


async def test_payment_is_exactly_uid_status_amount_cents_currency(client: httpx.AsyncClient) -> None:
    response = await client.get(f"/api/v1/payment/{PAID_UID}")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    # Buyer, seller, resource, provider and its transaction id are stored but never returned.
    assert (
        response.content
        == b'{"uid":"' + PAID_UID.encode() + b'","status":"paid","amount_cents":999,"currency":"EUR"}'
    )


async def test_payment_currency_is_the_stored_code(client: httpx.AsyncClient) -> None:
    response = await client.get(f"/api/v1/payment/{REFUNDED_UID}")
    assert response.content == (
        b'{"uid":"' + REFUNDED_UID.encode() + b'","status":"refunded","amount_cents":1000,"currency":"USD"}'
    )


async def test_every_status_is_returned_as_stored(client: httpx.AsyncClient, load: Loader) -> None:
    statuses = ["pending", "paid", "unpaid", "refunded", "disputed", "cancelled"]
    uids = [f"01K{n:023d}" for n in range(len(statuses))]
    await load(
        {
            "payments": [
                {"id": 10 + n, "uid": uid, "status": status, "amount_cents": 100 * n, "base_amount_cents": 9999,
                 "gift_id": 1, "created_at": "2024-01-01T00:00:00Z"}
                for n, (uid, status) in enumerate(zip(uids, statuses, strict=True))
            ]
        }
    )  # fmt: skip
    for n, (uid, status) in enumerate(zip(uids, statuses, strict=True)):
        response = await client.get(f"/api/v1/payment/{uid}")
        assert response.status_code == 200, status
        assert response.json() == {"uid": uid, "status": status, "amount_cents": 100 * n, "currency": "EUR"}
        assert list(response.json()) == ["uid", "status", "amount_cents", "currency"]


async def test_a_lower_case_ulid_resolves_and_uid_is_the_stored_upper_case(client: httpx.AsyncClient) -> None:
    for segment in (PAID_UID.lower(), PAID_UID[:10] + PAID_UID[10:].lower()):
        response = await client.get(f"/api/v1/payment/{segment}")
        assert response.status_code == 200, segment
        assert response.json()["uid"] == PAID_UID, segment


async def test_numeric_id_provider_transaction_id_and_unknown_uid_are_404(client: httpx.AsyncClient) -> None:
    cases = [
        ("numeric id", "1"),
        ("provider transaction id", "PAYID-123"),
        ("unknown ULID", UNKNOWN_UID),
        ("25 characters", PAID_UID[:-1]),
        ("27 characters", PAID_UID + "0"),
        ("letter outside Crockford base 32", PAID_UID[:-1] + "U"),
        ("above the 128-bit bound", "8" + PAID_UID[1:]),
        ("padded", f"%20{PAID_UID}"),
        ("the uid with a dash", PAID_UID[:13] + "-" + PAID_UID[13:]),
    ]
    for case, segment in cases:
        response = await client.get(f"/api/v1/payment/{segment}")
        assert (response.status_code, response.content) == (404, NOT_FOUND), case
        assert response.headers["content-type"] == "application/json", case


async def test_a_value_that_is_not_a_ulid_is_404_without_any_query(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    with recorded_statements(engine) as statements:
        for segment in ("1", "PAYID-123", PAID_UID[:-1], "8" + PAID_UID[1:]):
            assert (await client.get(f"/api/v1/payment/{segment}")).status_code == 404, segment
    assert statements == []
    with recorded_statements(engine) as statements:
        assert (await client.get(f"/api/v1/payment/{UNKNOWN_UID}")).status_code == 404
    assert statements != []  # a ULID is looked up: the recorder sees queries
