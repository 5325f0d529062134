"""Route 7: GET /author/{user}, a user's public identity."""

from __future__ import annotations

import httpx
import pytest

from tests.catalogue import OWNER_CHAT_ID
from tests.conftest import Loader
from tests.platform_names import contract_and_renamed

NOT_FOUND = b'{"message":"Not found."}'

# The rules below do not depend on the database or the store.
pytestmark = [pytest.mark.parametrize("profile", ["sqlite"], indirect=True), contract_and_renamed]


async def test_author_is_id_chat_name_in_order_with_the_linked_snowflake_as_a_string(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/api/v1/author/1")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    # The snowflake is above 2**53: only a string keeps it exact.
    assert response.content == b'{"id":1,"chat":"' + OWNER_CHAT_ID.encode() + b'","name":"Alice"}'


async def test_author_without_a_linked_chat_account_has_chat_null(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/v1/author/6")
    assert (response.status_code, response.content) == (200, b'{"id":6,"chat":null,"name":"alicia"}')


async def test_a_banned_author_resolves(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/v1/author/5")
    assert (response.status_code, response.content) == (200, b'{"id":5,"chat":null,"name":"Banned Ben"}')


async def test_closed_soft_deleted_and_unknown_authors_are_404(client: httpx.AsyncClient) -> None:
    for case, segment in [("closed", "4"), ("soft-deleted", "3"), ("unknown", "999")]:
        response = await client.get(f"/api/v1/author/{segment}")
        assert (response.status_code, response.content) == (404, NOT_FOUND), case
        assert response.headers["content-type"] == "application/json", case


async def test_a_segment_that_names_no_user_id_is_404_never_500(client: httpx.AsyncClient) -> None:
    for segment in (
        "abc",
        "-1",
        "1e3",
        "1.0",
        "0",
        "2147483648",
        "99999999999999999999999999999999",
        "Alice",
    ):
        response = await client.get(f"/api/v1/author/{segment}")
        assert (response.status_code, response.content) == (404, NOT_FOUND), segment


async def test_nothing_but_id_chat_and_name_is_exposed(client: httpx.AsyncClient, load: Loader) -> None:
    await load(
        {
            "users": [{"id": 10, "name": "Zoë/Z", "email": "zoe@example.test", "avatar": "avatars/10.png",
                       "created_at": "2024-01-01T00:00:00Z"}],
            "chat_accounts": [{"user_id": 10, "chat_id": "9007199254740993"}],
        }
    )  # fmt: skip
    response = await client.get("/api/v1/author/10")
    assert response.content == b'{"id":10,"chat":"9007199254740993","name":"Zo\\u00eb\\/Z"}'
