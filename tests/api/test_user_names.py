"""Route 3: GET /resource/user, user names by prefix, and its validation."""

from __future__ import annotations

import random

import httpx
import pytest

from tests.conftest import Loader
from tests.profiles import sqlite_only

USER_NAMES = "/api/v1/resource/user"
REQUIRED = b'{"message":"The name field is required.","errors":{"name":["The name field is required."]}}'
NOT_A_STRING = (
    b'{"message":"The name field must be a string.","errors":{"name":["The name field must be a string."]}}'
)
TOO_LONG = (
    b'{"message":"The name field must not be greater than 255 characters.",'
    b'"errors":{"name":["The name field must not be greater than 255 characters."]}}'
)

# Catalogue users: 1 Alice, 2 bob, 3 Deleted Dave (soft-deleted), 4 Closed Carol (closed),
# 5 Banned Ben (banned), 6 alicia.
NOT_DELETED_SORTED = [b"Alice", b"alicia", b"Banned Ben", b"bob", b"Closed Carol"]


def names_body(*names: bytes) -> bytes:
    return b"[" + b",".join(b'{"name":"' + name + b'"}' for name in names) + b"]"


# --- 200 -------------------------------------------------------------------------------------


async def test_names_match_a_case_insensitive_prefix_sorted_by_name_at_most_10(
    client: httpx.AsyncClient, load: Loader
) -> None:
    zeds = [f"Zed{n:02d}" if n % 2 else f"zed{n:02d}" for n in range(1, 13)]
    shuffled = random.Random(7).sample(range(len(zeds)), len(zeds))
    await load({"users": [{"id": 100 + i, "name": zeds[i]} for i in shuffled]})
    cases: list[tuple[str, bytes]] = [
        ("al", names_body(b"Alice", b"alicia")),
        ("AL", names_body(b"Alice", b"alicia")),
        ("ALICI", names_body(b"alicia")),
        ("b", names_body(b"Banned Ben", b"bob")),
        ("lice", b"[]"),  # a prefix, not a substring
        (" ali\t", names_body(b"Alice", b"alicia")),  # trimmed before the lookup
        ("zed", names_body(*(name.encode() for name in zeds[:10]))),  # 12 match, the first 10 by name
        ("ZED1", names_body(b"zed10", b"Zed11", b"zed12")),
    ]
    for prefix, expected in cases:
        response = await client.get(USER_NAMES, params={"name": prefix})
        assert response.status_code == 200, prefix
        assert response.headers["content-type"] == "application/json", prefix
        assert response.content == expected, prefix


@sqlite_only
async def test_percent_matches_everyone_and_underscore_one_character_still_at_most_10(
    client: httpx.AsyncClient, load: Loader
) -> None:
    assert (await client.get(USER_NAMES, params={"name": "%"})).content == names_body(*NOT_DELETED_SORTED)
    assert (await client.get(USER_NAMES, params={"name": "_o"})).content == names_body(b"bob")
    assert (await client.get(USER_NAMES, params={"name": "%en"})).content == names_body(b"Banned Ben")
    await load({"users": [{"id": 100 + n, "name": f"Extra {n:02d}"} for n in range(12)]})
    everyone = await client.get(USER_NAMES, params={"name": "%"})
    assert everyone.content == names_body(
        b"Alice", b"alicia", b"Banned Ben", b"bob", b"Closed Carol",
        b"Extra 00", b"Extra 01", b"Extra 02", b"Extra 03", b"Extra 04",
    )  # fmt: skip


@sqlite_only
async def test_soft_deleted_users_are_excluded_closed_and_banned_are_not(client: httpx.AsyncClient) -> None:
    assert (await client.get(USER_NAMES, params={"name": "Deleted"})).content == b"[]"
    assert (await client.get(USER_NAMES, params={"name": "closed"})).content == names_body(b"Closed Carol")
    assert (await client.get(USER_NAMES, params={"name": "Banned"})).content == names_body(b"Banned Ben")


@sqlite_only
async def test_no_match_is_an_empty_array_not_404(client: httpx.AsyncClient) -> None:
    response = await client.get(USER_NAMES, params={"name": "Nobody"})
    assert (response.status_code, response.content) == (200, b"[]")


@sqlite_only
async def test_only_the_name_is_returned_with_json_escapes(client: httpx.AsyncClient, load: Loader) -> None:
    await load(
        {"users": [{"id": 10, "name": "Émile/ø", "email": "emile@example.test", "avatar": "avatars/10.png"}]}
    )
    response = await client.get(USER_NAMES, params={"name": "Émile"})
    assert response.content == b'[{"name":"\\u00c9mile\\/\\u00f8"}]'


@sqlite_only
async def test_a_name_of_255_characters_is_accepted(client: httpx.AsyncClient, load: Loader) -> None:
    long_name = "N" * 254 + "é"
    await load({"users": [{"id": 10, "name": long_name}]})
    response = await client.get(USER_NAMES, params={"name": long_name})
    assert response.status_code == 200
    assert response.json() == [{"name": long_name}]
    padded = await client.get(USER_NAMES, params={"name": f"  {long_name}  "})  # 259 before trimming
    assert padded.status_code == 200
    assert padded.json() == [{"name": long_name}]


# --- 422 -------------------------------------------------------------------------------------


@sqlite_only
async def test_missing_empty_or_blank_name_is_422_required(client: httpx.AsyncClient) -> None:
    for query in ("", "?name=", "?name=%20%20%09", "?other=bob", "?NAME=bob"):
        response = await client.get(USER_NAMES + query)
        assert (response.status_code, response.content) == (422, REQUIRED), query
        assert response.headers["content-type"] == "application/json", query


@sqlite_only
async def test_an_array_name_is_422_must_be_a_string(client: httpx.AsyncClient) -> None:
    for query in ("?name[]=bob", "?name[]=a&name[]=b", "?name[k]=bob"):
        response = await client.get(USER_NAMES + query)
        assert (response.status_code, response.content) == (422, NOT_A_STRING), query


@sqlite_only
async def test_a_name_longer_than_255_characters_is_422(client: httpx.AsyncClient) -> None:
    for name in ("a" * 256, "é" * 256, "a" * 1000):
        response = await client.get(USER_NAMES, params={"name": name})
        assert (response.status_code, response.content) == (422, TOO_LONG), len(name)


@sqlite_only
async def test_length_is_counted_in_characters_not_bytes(client: httpx.AsyncClient) -> None:
    response = await client.get(USER_NAMES, params={"name": "é" * 255})  # 510 bytes of UTF-8
    assert (response.status_code, response.content) == (200, b"[]")


@pytest.mark.parametrize(
    "profile",
    [
        "sqlite",
        "postgresql",
    ],
    indirect=True,
)
async def test_prefix_ignores_the_case_of_non_ascii_letters(client: httpx.AsyncClient, load: Loader) -> None:
    await load({"users": [{"id": 10, "name": "Émile"}, {"id": 11, "name": "éva"}]})
    for prefix in ("émile", "ÉMILE", "Émi"):
        response = await client.get(USER_NAMES, params={"name": prefix})
        assert response.content == b'[{"name":"\\u00c9mile"}]', prefix
    response = await client.get(USER_NAMES, params={"name": "É"})
    assert response.content == b'[{"name":"\\u00c9mile"},{"name":"\\u00e9va"}]'
