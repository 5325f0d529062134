"""Route 1: POST /licence/{key}, a constant success, and the limiters that still count it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.services import Services
from tests.api.helpers import assert_refused_by, recorded_statements
from tests.conftest import make_client

VALID = b'{"status":"success","message":"The license is valid"}'
NOT_FOUND = b'{"message":"Not found."}'
TOO_MANY = b'{"message":"Too many requests."}'

# The rules below do not depend on the database or the store.
pytestmark = pytest.mark.parametrize("profile", ["sqlite"], indirect=True)


async def test_every_key_is_200_with_the_exact_success_body(client: httpx.AsyncClient) -> None:
    keys = [
        "abc",
        "SERVICE_0123456789ABCDE",
        "expired-long-ago",
        "0",
        "%C3%A9t%C3%A9",
        "a%20b",
        "%20",
        "k" * 300,
    ]
    for key in keys:
        response = await client.post(f"/api/v1/licence/{key}")
        assert (response.status_code, response.content) == (200, VALID), key
        assert response.headers["content-type"] == "application/json", key
        assert response.headers["x-service-api-version"] == "1", key


async def test_the_body_and_query_are_ignored(client: httpx.AsyncClient) -> None:
    requests: list[tuple[str, dict[str, Any]]] = [
        ("legacy JSON unique_id", {"json": {"unique_id": "SERVICE_0123456789ABCDE"}}),
        ("legacy form unique_id", {"data": {"unique_id": "SERVICE_0123456789ABCDE"}}),
        ("array unique_id", {"json": {"unique_id": ["x"]}}),
        ("malformed JSON", {"content": b"{not json", "headers": {"Content-Type": "application/json"}}),
        ("query", {"params": {"unique_id": "x", "key": "other"}}),
        ("credentials", {"headers": {"Authorization": "Bearer nonsense", "Cookie": "session=x"}}),
    ]
    for case, options in requests:
        response = await client.post("/api/v1/licence/some-key", **options)
        assert (response.status_code, response.content) == (200, VALID), case
        assert "set-cookie" not in response.headers, case


async def test_the_check_queries_nothing(client: httpx.AsyncClient, engine: AsyncEngine) -> None:
    with recorded_statements(engine) as statements:
        response = await client.post("/api/v1/licence/SERVICE_0123456789ABCDE")
    assert response.content == VALID
    assert statements == []


async def test_other_methods_are_405(client: httpx.AsyncClient) -> None:
    for method in ("GET", "HEAD", "PUT", "PATCH", "DELETE"):
        response = await client.request(method, "/api/v1/licence/abc")
        assert response.status_code == 405, method
        assert response.headers["allow"] == "POST", method
        assert response.headers["content-type"] == "application/json", method


async def test_a_path_without_a_single_key_segment_is_404(client: httpx.AsyncClient) -> None:
    for path in ("/api/v1/licence", "/api/v1/licence/", "/api/v1/licence/a%2Fb", "/api/v1/licence/a/b"):
        response = await client.post(path)
        assert (response.status_code, response.content) == (404, NOT_FOUND), path


# --- Limiters: 60 per key, 120 per IP through the group limiter ----------------------------------


async def test_the_61st_check_of_one_key_is_429_while_another_key_passes(services: Services) -> None:
    async with make_client(services, client_ip="198.51.100.20") as http:
        first = await http.post("/api/v1/licence/SAME-KEY")
        assert (first.headers["x-ratelimit-limit"], first.headers["x-ratelimit-remaining"]) == ("60", "59")
        for n in range(2, 61):
            assert (await http.post("/api/v1/licence/SAME-KEY")).status_code == 200, n
        refused = await http.post("/api/v1/licence/SAME-KEY")
        assert_refused_by(refused, 60)
        other_key = await http.post("/api/v1/licence/OTHER-KEY")
        assert (other_key.status_code, other_key.content) == (200, VALID)


async def test_the_key_limiter_counts_a_key_across_ips(services: Services) -> None:
    async with make_client(services, client_ip="198.51.100.21") as first_ip:
        for n in range(60):
            assert (await first_ip.post("/api/v1/licence/SHARED-KEY")).status_code == 200, n
    async with make_client(services, client_ip="198.51.100.22") as second_ip:
        refused = await second_ip.post("/api/v1/licence/SHARED-KEY")
        assert (refused.status_code, refused.content) == (429, TOO_MANY)
        assert refused.headers["x-ratelimit-limit"] == "60"
        assert (await second_ip.post("/api/v1/licence/FRESH-KEY")).status_code == 200


async def test_one_ip_gets_120_checks_per_minute_even_with_distinct_keys(services: Services) -> None:
    async with make_client(services, client_ip="198.51.100.23") as http:
        for n in range(1, 121):
            response = await http.post(f"/api/v1/licence/key-{n}")
            assert response.status_code == 200, n
            if n == 100:
                # The group limiter (20 left) is now tighter than the key (59) and licence IP (140) ones.
                assert (response.headers["x-ratelimit-limit"], response.headers["x-ratelimit-remaining"]) == (
                    "120",
                    "20",
                )
        refused = await http.post("/api/v1/licence/key-121")
        assert (refused.status_code, refused.content) == (429, TOO_MANY)
        assert refused.headers["x-ratelimit-limit"] == "120"
        assert refused.headers["x-ratelimit-remaining"] == "0"
        assert 0 < int(refused.headers["retry-after"]) <= 60
    async with make_client(services, client_ip="198.51.100.24") as other_ip:
        response = await other_ip.post("/api/v1/licence/key-121")
        assert (response.status_code, response.content) == (200, VALID)
