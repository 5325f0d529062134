"""Route 8: GET /gift/{gift}, an advisory check of a discount code."""

from __future__ import annotations

import unicodedata

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.fixtures.loader import FixtureError
from marketplace.models import Gift
from tests.conftest import Loader
from tests.profiles import sqlite_only

NOT_FOUND = b'{"message":"Not found."}'


@sqlite_only
async def test_an_applicable_code_is_code_percentage_active_true(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/v1/gift/WELCOME10")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == b'{"code":"WELCOME10","percentage":10,"active":true}'


@sqlite_only
async def test_disabled_expired_not_started_and_exhausted_codes_are_200_with_active_false(
    client: httpx.AsyncClient,
) -> None:
    expected = {
        "OFF": b'{"code":"OFF","percentage":20,"active":false}',
        "OLD": b'{"code":"OLD","percentage":30,"active":false}',
        "LATER": b'{"code":"LATER","percentage":40,"active":false}',
        "USEDUP": b'{"code":"USEDUP","percentage":50,"active":false}',
    }
    for code, body in expected.items():
        response = await client.get(f"/api/v1/gift/{code}")
        assert (response.status_code, response.content) == (200, body), code


@sqlite_only
async def test_active_needs_every_condition_at_once(client: httpx.AsyncClient, load: Loader) -> None:
    past, future = "2020-01-01T00:00:00Z", "2999-01-01T00:00:00Z"
    await load(
        {
            "gifts": [
                {"id": 10, "code": "WINDOW", "percentage": 100, "starts_at": past, "expires_at": future,
                 "max_uses": 5, "uses": 4},
                {"id": 11, "code": "WINDOW-OFF", "percentage": 1, "enabled": False, "starts_at": past,
                 "expires_at": future},
                {"id": 12, "code": "OVERUSED", "percentage": 5, "max_uses": 2, "uses": 3},
                {"id": 13, "code": "NOQUOTA", "percentage": 5, "max_uses": None, "uses": 1000},
                {"id": 14, "code": "ZEROQUOTA", "percentage": 5, "max_uses": 0},
                {"id": 15, "code": "STARTED-EXPIRED", "percentage": 5, "starts_at": past,
                 "expires_at": "2021-01-01T00:00:00Z"},
            ]
        }
    )  # fmt: skip
    expected = {
        "WINDOW": True,
        "WINDOW-OFF": False,
        "OVERUSED": False,
        "NOQUOTA": True,
        "ZEROQUOTA": False,
        "STARTED-EXPIRED": False,
    }
    for code, active in expected.items():
        response = await client.get(f"/api/v1/gift/{code}")
        assert response.status_code == 200, code
        assert response.json()["active"] is active, code
    assert (
        await client.get("/api/v1/gift/WINDOW")
    ).content == b'{"code":"WINDOW","percentage":100,"active":true}'


@sqlite_only
async def test_lookup_ignores_case_and_code_echoes_the_stored_value(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load({"gifts": [{"id": 10, "code": "MiXeD-5", "percentage": 5}]})
    for segment in ("welcome10", "Welcome10", "wElCoMe10"):
        response = await client.get(f"/api/v1/gift/{segment}")
        assert (response.status_code, response.content) == (
            200,
            b'{"code":"WELCOME10","percentage":10,"active":true}',
        ), segment
    for segment in ("mixed-5", "MIXED-5"):
        assert (await client.get(f"/api/v1/gift/{segment}")).json()["code"] == "MiXeD-5", segment


@pytest.mark.parametrize(
    "profile",
    [
        "sqlite",
        "postgresql",
    ],
    indirect=True,
)
async def test_lookup_ignores_the_case_of_non_ascii_letters(client: httpx.AsyncClient, load: Loader) -> None:
    await load({"gifts": [{"id": 10, "code": "ÉTÉ-50", "percentage": 50}]})
    response = await client.get("/api/v1/gift/été-50")
    assert (response.status_code, response.content) == (
        200,
        b'{"code":"\\u00c9T\\u00c9-50","percentage":50,"active":true}',
    )


@sqlite_only
async def test_unknown_code_is_404(client: httpx.AsyncClient) -> None:
    cases = [
        ("unknown", "NOPE"),
        ("a prefix of a code", "WELCOME"),
        ("a code with more after it", "WELCOME100"),
        ("a pattern character", "%"),
        ("a pattern matching a code", "WELCOME1_"),
        ("the numeric key, not the code", "1"),
        ("padded (path parameters are not trimmed)", "%20WELCOME10"),
        ("longer than any code", "W" * 40),
    ]
    for case, segment in cases:
        response = await client.get(f"/api/v1/gift/{segment}")
        assert (response.status_code, response.content) == (404, NOT_FOUND), case
        assert response.headers["content-type"] == "application/json", case


@sqlite_only
async def test_checking_a_code_neither_reserves_nor_consumes_it(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    for _ in range(3):
        assert (await client.get("/api/v1/gift/USEDUP")).status_code == 200
        assert (await client.get("/api/v1/gift/WELCOME10")).json()["active"] is True
    async with engine.connect() as connection:
        uses = {code: count for code, count in await connection.execute(select(Gift.code, Gift.uses))}
    assert uses["WELCOME10"] == 0
    assert uses["USEDUP"] == 3


# Codes are compared by one key computed in Python (NFC, case folded), the same on every database.
CAFE_NFC = unicodedata.normalize("NFC", "Café")
CAFE_NFD = unicodedata.normalize("NFD", "Café")


async def test_a_code_with_a_final_sigma_is_found_in_every_case(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load({"gifts": [{"id": 10, "code": "ΟΔΟΣ", "percentage": 15}]})
    # The medial and the final small sigma both fold to the capital's key.
    for segment in ("ΟΔΟΣ", "οδος", "οδοσ", "Οδος"):
        response = await client.get(f"/api/v1/gift/{segment}")
        assert (response.status_code, response.content) == (
            200,
            b'{"code":"\\u039f\\u0394\\u039f\\u03a3","percentage":15,"active":true}',
        ), segment


async def test_composed_and_decomposed_spellings_are_one_code(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load({"gifts": [{"id": 10, "code": CAFE_NFD, "percentage": 5}]})
    for segment in (CAFE_NFC, CAFE_NFD, CAFE_NFC.upper(), CAFE_NFD.lower()):
        response = await client.get(f"/api/v1/gift/{segment}")
        assert response.status_code == 200, ascii(segment)
        # The code answers as it was issued (here decomposed: an `e` and a combining accent).
        assert response.content == b'{"code":"Cafe\\u0301","percentage":5,"active":true}'
    with pytest.raises(FixtureError, match=r"gifts\[1\]\.code: duplicates gifts\[0\]"):
        await load(
            {
                "gifts": [
                    {"id": 11, "code": CAFE_NFC, "percentage": 5},
                    {"id": 12, "code": CAFE_NFD.upper(), "percentage": 5},
                ]
            }
        )
