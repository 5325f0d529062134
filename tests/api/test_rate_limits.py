"""The limiters over HTTP: the group's 120 per minute per IP, search's 60 on top, and their headers."""

from __future__ import annotations

import httpx

from marketplace.config import Settings
from marketplace.services import Services
from marketplace.stores import MemoryStore
from tests.api.helpers import Clock, assert_refused_by, catalogue_client
from tests.catalogue import MEMBER_CHAT_ID
from tests.conftest import GRANT_SECRET, make_client
from tests.profiles import sqlite_only

TOO_MANY = b'{"message":"Too many requests."}'
NOT_FOUND = b'{"message":"Not found."}'
# The cheapest route of the group: no database, no upstream.
CHEAP = "/api/v1/chat/authentication"
SEARCH = "/api/v1/resource/search"


async def spend(client: httpx.AsyncClient, times: int, path: str = CHEAP, **headers: str) -> None:
    """Make `times` admitted requests."""
    for _ in range(times):
        response = await client.get(path, headers=headers)
        assert response.status_code != 429


def remaining(response: httpx.Response) -> tuple[str, str]:
    return response.headers["x-ratelimit-limit"], response.headers["x-ratelimit-remaining"]


async def test_the_group_admits_exactly_120_requests_per_window_then_answers_429(
    client: httpx.AsyncClient,
) -> None:
    counts = []
    for _ in range(120):
        response = await client.get(CHEAP)
        assert response.status_code == 302
        counts.append(remaining(response))
    assert counts == [("120", str(left)) for left in range(119, -1, -1)]
    refused = await client.get(CHEAP)
    assert refused.status_code == 429
    assert refused.content == TOO_MANY
    assert refused.headers["content-type"] == "application/json"


async def test_a_429_carries_retry_after_reset_limit_remaining_and_the_version_header(
    client: httpx.AsyncClient,
) -> None:
    await spend(client, 120)
    refused = await client.get(CHEAP)
    assert refused.headers["x-service-api-version"] == "1"
    assert_refused_by(refused, 120)


@sqlite_only
async def test_every_route_of_the_group_shares_the_budget_once_it_is_spent(client: httpx.AsyncClient) -> None:
    await spend(client, 120)
    for method, path in [
        ("GET", "/api/v1/resource/1"),
        ("GET", SEARCH),
        ("POST", "/api/v1/licence/ABC"),
        ("POST", "/api/v1/chat"),
        ("GET", "/api/v1/stats/1/players"),
    ]:
        refused = await client.request(method, path)
        assert (refused.status_code, refused.content) == (429, TOO_MANY), path
        # The group refused it, so its headers are the group's, even on search and licence.
        assert remaining(refused) == ("120", "0"), path


@sqlite_only
async def test_the_window_lasts_60_seconds_from_its_first_request(
    client: httpx.AsyncClient, services: Services
) -> None:
    clock = Clock()
    await services.store.close()
    services.use_store(MemoryStore(clock=clock))
    await spend(client, 120)
    clock.now += 59
    assert (await client.get(CHEAP)).status_code == 429
    clock.now += 1
    admitted = await client.get(CHEAP)
    assert admitted.status_code == 302
    assert remaining(admitted) == ("120", "119")


@sqlite_only
async def test_a_binding_404_consumes_budget_and_carries_the_limit_headers(client: httpx.AsyncClient) -> None:
    missing = await client.get("/api/v1/resource/999")
    assert (missing.status_code, missing.content) == (404, NOT_FOUND)
    assert remaining(missing) == ("120", "119")
    assert remaining(await client.get(CHEAP)) == ("120", "118")


@sqlite_only
async def test_router_404_and_405_pass_no_limiter(client: httpx.AsyncClient) -> None:
    unknown = await client.get("/api/v1/nowhere")
    wrong_method = await client.delete(CHEAP)
    assert (unknown.status_code, unknown.content) == (404, NOT_FOUND)
    assert wrong_method.status_code == 405
    for response in (unknown, wrong_method):
        assert "x-ratelimit-limit" not in response.headers
        assert "x-ratelimit-remaining" not in response.headers
    assert remaining(await client.get(CHEAP)) == ("120", "119")


@sqlite_only
async def test_each_client_ip_has_its_own_budget(client: httpx.AsyncClient, services: Services) -> None:
    await spend(client, 120, **{"X-Forwarded-For": "203.0.113.1"})
    assert (await client.get(CHEAP, headers={"X-Forwarded-For": "203.0.113.1"})).status_code == 429
    other_forwarded = await client.get(CHEAP, headers={"X-Forwarded-For": "203.0.113.2"})
    socket_peer = await client.get(CHEAP)
    async with make_client(services, client_ip="198.51.100.9") as other_peer:
        from_other_peer = await other_peer.get(CHEAP)
    for response in (other_forwarded, socket_peer, from_other_peer):
        assert response.status_code == 302
        assert remaining(response) == ("120", "119")


@sqlite_only
async def test_the_forwarded_client_shares_its_budget_across_proxies(
    client: httpx.AsyncClient, services: Services
) -> None:
    await spend(client, 120, **{"X-Forwarded-For": "203.0.113.1"})
    async with make_client(services, client_ip="198.51.100.9") as through_another_proxy:
        refused = await through_another_proxy.get(CHEAP, headers={"X-Forwarded-For": "203.0.113.1"})
    assert refused.status_code == 429


@sqlite_only
async def test_search_answers_carry_the_search_limiter_when_it_has_less_left(
    client: httpx.AsyncClient,
) -> None:
    first = await client.get(SEARCH)
    assert first.status_code == 200
    assert remaining(first) == ("60", "59")


@sqlite_only
async def test_answers_carry_the_limiter_with_the_smallest_remaining_count(client: httpx.AsyncClient) -> None:
    await spend(client, 70)
    search = await client.get(SEARCH)
    assert search.status_code == 200
    assert remaining(search) == ("120", "49")


@sqlite_only
async def test_on_a_tie_answers_carry_the_group_limiter(client: httpx.AsyncClient) -> None:
    await spend(client, 60)
    search = await client.get(SEARCH)
    assert search.status_code == 200
    assert remaining(search) == ("120", "59")


async def test_search_admits_60_per_window_and_exhausting_it_leaves_other_routes_open(
    client: httpx.AsyncClient,
) -> None:
    await spend(client, 60, SEARCH)
    refused = await client.get(SEARCH)
    assert (refused.status_code, refused.content) == (429, TOO_MANY)
    assert remaining(refused) == ("60", "0")
    assert 0 < int(refused.headers["retry-after"]) <= 60
    other = await client.get(CHEAP)
    assert other.status_code == 302
    # The group counted the 60 searches and the refused one (search refused it, not the group).
    assert remaining(other) == ("120", "58")


# With MARKETPLACE_TRUSTED_PROXIES naming the proxies, a caller cannot choose its own key.


async def test_with_trusted_proxies_a_forged_forwarded_for_does_not_buy_a_new_budget(
    settings: Settings,
) -> None:
    async with catalogue_client(settings, trusted_proxies="10.0.0.0/8") as direct:
        for number in range(120):
            response = await direct.get(CHEAP, headers={"X-Forwarded-For": f"203.0.113.{number % 250}"})
            assert response.status_code == 302
        refused = await direct.get(CHEAP, headers={"X-Forwarded-For": "198.51.100.77"})
        assert_refused_by(refused, 120)


async def test_with_trusted_proxies_each_client_behind_the_proxy_keeps_its_own_budget(
    settings: Settings,
) -> None:
    # The test client connects from 127.0.0.1, the trusted proxy here.
    async with catalogue_client(settings, trusted_proxies="127.0.0.1") as through_proxy:
        await spend(through_proxy, 120, **{"X-Forwarded-For": "203.0.113.1"})
        assert (await through_proxy.get(CHEAP, headers={"X-Forwarded-For": "203.0.113.1"})).status_code == 429
        assert (await through_proxy.get(CHEAP, headers={"X-Forwarded-For": "203.0.113.2"})).status_code == 302


async def test_wrong_grant_secrets_are_limited_like_every_other_call(settings: Settings) -> None:
    async with catalogue_client(settings, trusted_proxies="10.0.0.0/8") as guesser:
        for attempt in range(120):
            guess = await guesser.post(
                f"/api/v1/chat/{MEMBER_CHAT_ID}/apply/1",
                data={"custom_password": f"guess-{attempt}"},
                headers={"X-Forwarded-For": f"198.51.100.{attempt % 250}"},
            )
            assert guess.status_code == 403
        refused = await guesser.post(
            f"/api/v1/chat/{MEMBER_CHAT_ID}/apply/1",
            data={"custom_password": GRANT_SECRET},
            headers={"X-Forwarded-For": "198.51.100.250"},
        )
        assert_refused_by(refused, 120)


# IPv6 clients are counted by their /64 (MARKETPLACE_IPV6_LIMIT_PREFIX), IPv4 clients by address.


async def test_two_addresses_of_one_ipv6_64_share_a_budget_and_other_64s_keep_their_own(
    client: httpx.AsyncClient,
) -> None:
    await spend(client, 120, **{"X-Forwarded-For": "2001:db8:1:2::1"})
    same_64 = await client.get(CHEAP, headers={"X-Forwarded-For": "2001:db8:1:2:ffff:ffff:ffff:fffe"})
    assert (same_64.status_code, same_64.content) == (429, TOO_MANY)
    other_64 = await client.get(CHEAP, headers={"X-Forwarded-For": "2001:db8:1:3::1"})
    assert other_64.status_code == 302
    assert remaining(other_64) == ("120", "119")


async def test_an_ipv4_mapped_ipv6_address_counts_as_its_ipv4_address(client: httpx.AsyncClient) -> None:
    await spend(client, 120, **{"X-Forwarded-For": "::ffff:203.0.113.1"})
    refused = await client.get(CHEAP, headers={"X-Forwarded-For": "203.0.113.1"})
    assert (refused.status_code, refused.content) == (429, TOO_MANY)
    neighbour = await client.get(CHEAP, headers={"X-Forwarded-For": "203.0.113.2"})
    assert remaining(neighbour) == ("120", "119")


async def test_the_ipv6_limit_prefix_sets_the_network_a_budget_is_shared_by(settings: Settings) -> None:
    async with catalogue_client(settings, ipv6_limit_prefix=56) as per_56:
        await spend(per_56, 120, **{"X-Forwarded-For": "2001:db8:1:200::1"})
        same_56 = await per_56.get(CHEAP, headers={"X-Forwarded-For": "2001:db8:1:2ff::1"})
        assert (same_56.status_code, same_56.content) == (429, TOO_MANY)
    async with catalogue_client(settings, ipv6_limit_prefix=128) as per_address:
        await spend(per_address, 120, **{"X-Forwarded-For": "2001:db8:1:2::1"})
        assert (
            await per_address.get(CHEAP, headers={"X-Forwarded-For": "2001:db8:1:2::1"})
        ).status_code == 429
        assert (
            await per_address.get(CHEAP, headers={"X-Forwarded-For": "2001:db8:1:2::2"})
        ).status_code == 302


async def test_wrong_grant_secrets_from_every_address_of_one_ipv6_64_share_a_budget(
    client: httpx.AsyncClient,
) -> None:
    for attempt in range(120):
        guess = await client.post(
            f"/api/v1/chat/{MEMBER_CHAT_ID}/apply/1",
            data={"custom_password": f"guess-{attempt}"},
            headers={"X-Forwarded-For": f"2001:db8:77:1::{attempt + 1:x}"},
        )
        assert guess.status_code == 403
    refused = await client.post(
        f"/api/v1/chat/{MEMBER_CHAT_ID}/apply/1",
        data={"custom_password": GRANT_SECRET},
        headers={"X-Forwarded-For": "2001:db8:77:1:abcd::1"},
    )
    assert_refused_by(refused, 120)
