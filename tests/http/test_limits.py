"""Fixed-window limiters: the in-process store's window, stacking order, and the headers they set."""

from __future__ import annotations

import time

import pytest

from marketplace.api.v1 import api_limits, licence_limits, search_limits
from marketplace.http.limits import (
    WINDOW_SECONDS,
    CountedLimit,
    Limit,
    TooManyRequests,
    enforce,
    limit_headers,
)
from marketplace.stores import MemoryStore, WindowHit


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> MemoryStore:
    return MemoryStore(clock=clock)


def test_window_lasts_60_seconds() -> None:
    assert WINDOW_SECONDS == 60


async def test_exactly_max_hits_pass_in_a_window(store: MemoryStore) -> None:
    hits = [await store.hit("k", 3, 60) for _ in range(4)]
    assert [hit.allowed for hit in hits] == [True, True, True, False]
    assert [hit.count for hit in hits] == [1, 2, 3, 3]


async def test_a_refused_hit_is_not_counted(store: MemoryStore, clock: Clock) -> None:
    for _ in range(2):
        await store.hit("k", 2, 60)
    for _ in range(5):
        refused = await store.hit("k", 2, 60)
        assert refused == WindowHit(allowed=False, count=2, retry_after=60)
    # The quota is not raised afterwards either: the next window again admits exactly two.
    clock.now += 60
    assert [(await store.hit("k", 2, 60)).allowed for _ in range(3)] == [True, True, False]


async def test_window_starts_at_the_first_hit_not_on_the_clock_minute(
    store: MemoryStore, clock: Clock
) -> None:
    clock.now = 1_000_037.5  # mid-minute
    await store.hit("k", 1, 60)
    clock.now = 1_000_037.5 + 59.9
    assert not (await store.hit("k", 1, 60)).allowed
    clock.now = 1_000_037.5 + 60
    assert (await store.hit("k", 1, 60)).allowed


async def test_later_hits_do_not_extend_the_window(store: MemoryStore, clock: Clock) -> None:
    start = clock.now
    await store.hit("k", 5, 60)
    clock.now = start + 50
    await store.hit("k", 5, 60)
    clock.now = start + 60
    hit = await store.hit("k", 5, 60)
    assert hit.count == 1
    assert hit.retry_after == 60


async def test_a_new_window_after_expiry_counts_from_one(store: MemoryStore, clock: Clock) -> None:
    await store.hit("k", 2, 60)
    await store.hit("k", 2, 60)
    clock.now += 61
    hit = await store.hit("k", 2, 60)
    assert hit == WindowHit(allowed=True, count=1, retry_after=60)


async def test_retry_after_is_the_whole_seconds_left_rounded_up(store: MemoryStore, clock: Clock) -> None:
    start = clock.now
    await store.hit("k", 1, 60)
    clock.now = start + 30.2
    assert (await store.hit("k", 1, 60)).retry_after == 30
    clock.now = start + 59.5
    assert (await store.hit("k", 1, 60)).retry_after == 1


async def test_keys_have_separate_windows(store: MemoryStore) -> None:
    await store.hit("a", 1, 60)
    assert not (await store.hit("a", 1, 60)).allowed
    assert (await store.hit("b", 1, 60)).allowed


async def test_enforce_counts_each_limit_and_reports_remaining(store: MemoryStore) -> None:
    group, route = Limit("group", 5, "group"), Limit("route", 3, "route")
    counted = await enforce(store, [group, route])
    assert counted == [CountedLimit(group, 4), CountedLimit(route, 2)]


async def test_refusal_by_the_group_limiter_leaves_the_route_limiter_uncounted(store: MemoryStore) -> None:
    group, route = Limit("group", 1, "group"), Limit("route", 5, "route")
    await enforce(store, [group, route])
    with pytest.raises(TooManyRequests) as refused:
        await enforce(store, [group, route])
    assert refused.value.headers["X-RateLimit-Limit"] == "1"
    assert (await store.hit("route", 5, 60)).count == 2


async def test_refusal_by_the_route_limiter_still_counted_the_group_limiter(store: MemoryStore) -> None:
    group, route = Limit("group", 5, "group"), Limit("route", 1, "route")
    await enforce(store, [group, route])
    with pytest.raises(TooManyRequests) as refused:
        await enforce(store, [group, route])
    assert refused.value.headers["X-RateLimit-Limit"] == "1"
    assert (await store.hit("group", 5, 60)).count == 3


def test_headers_are_those_of_the_limiter_with_smallest_remaining() -> None:
    counted = [CountedLimit(Limit("api", 120, "api"), 100), CountedLimit(Limit("search", 60, "search"), 40)]
    assert limit_headers(counted) == {"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "40"}


def test_headers_on_a_tie_are_those_of_the_first_limiter() -> None:
    counted = [CountedLimit(Limit("api", 120, "api"), 5), CountedLimit(Limit("search", 60, "search"), 5)]
    assert limit_headers(counted) == {"X-RateLimit-Limit": "120", "X-RateLimit-Remaining": "5"}
    assert limit_headers(list(reversed(counted))) == {"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "5"}


def test_no_limiter_means_no_headers() -> None:
    assert limit_headers([]) == {}


def test_too_many_requests_headers_of_the_refusing_limiter() -> None:
    before = int(time.time())
    refused = TooManyRequests(
        Limit("search", 60, "search"), WindowHit(allowed=False, count=60, retry_after=42)
    )
    after = int(time.time())
    headers = refused.headers
    assert set(headers) == {"Retry-After", "X-RateLimit-Reset", "X-RateLimit-Limit", "X-RateLimit-Remaining"}
    assert headers["Retry-After"] == "42"
    assert headers["X-RateLimit-Limit"] == "60"
    assert headers["X-RateLimit-Remaining"] == "0"
    assert before + 42 <= int(headers["X-RateLimit-Reset"]) <= after + 42


async def test_a_full_window_raises_with_retry_after_from_the_store(store: MemoryStore, clock: Clock) -> None:
    limit = Limit("k", 2, "k")
    start = clock.now
    await enforce(store, [limit])
    await enforce(store, [limit])
    clock.now = start + 15.5
    with pytest.raises(TooManyRequests) as refused:
        await enforce(store, [limit])
    assert refused.value.headers["Retry-After"] == "45"
    assert refused.value.headers["X-RateLimit-Remaining"] == "0"
    assert refused.value.headers["X-RateLimit-Limit"] == "2"


def test_contract_limits_and_their_keys() -> None:
    api = api_limits("198.51.100.1", {})
    search = search_limits("198.51.100.1", {})
    licence = licence_limits("198.51.100.1", {"key": "ABC"})
    assert [limit.max_attempts for limit in (*api, *search, *licence)] == [120, 60, 60, 240]
    keys = [limit.key for limit in (*api, *search, *licence)]
    assert len(set(keys)) == 4
    assert api_limits("198.51.100.2", {})[0].key != api[0].key
    assert licence_limits("198.51.100.2", {"key": "ABC"})[0].key == licence[0].key
    assert licence_limits("198.51.100.1", {"key": "XYZ"})[0].key != licence[0].key
    assert licence_limits("198.51.100.2", {"key": "ABC"})[1].key != licence[1].key
