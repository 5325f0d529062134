"""The stores: the in-process one in bounded memory without ever raising a client's budget, and
claims (one holder at a time) on both stores."""

from __future__ import annotations

import tracemalloc
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketplace.http.limits import limit_key
from marketplace.stores import MemoryStore, RedisStore, Store
from tests.api.helpers import Clock
from tests.profiles import REDIS_URL, require_redis, unique_name


async def test_windows_beyond_the_cap_are_folded_so_memory_stays_bounded() -> None:
    store = MemoryStore(max_keys=1000, overflow_slots=1024)
    for number in range(20_000):
        await store.hit(f"limit:{number}", 120, 60)
    assert store.window_count == 1000


async def test_memory_of_many_clients_stays_under_a_bound() -> None:
    store = MemoryStore(max_keys=10_000)
    tracemalloc.start()
    try:
        for number in range(200_000):
            await store.hit(f"limit:client-{number}", 120, 60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # 10,000 exact windows and the fixed table of slots: a few MB, whatever the number of clients.
    assert peak < 8 * 1024 * 1024


async def test_a_limiters_window_takes_under_220_bytes_with_its_key() -> None:
    # Each request brings its keys as new text; the store keeps what a window needs of them.
    store = MemoryStore(max_keys=100_000)
    windows = 20_000
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for number in range(windows):
            await store.hit(limit_key("api", f"10.0.{number >> 8}.{number & 255}"), 120, 60)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert store.window_count == windows
    # A text key (120 bytes) and a tuple of count and end (80) took about 290 bytes a window.
    assert (after - before) / windows < 220


async def test_limiter_keys_that_differ_only_in_the_case_of_their_hex_keep_separate_windows() -> None:
    store = MemoryStore(max_keys=100)
    lowercase = limit_key("api", "10.0.0.1")
    uppercase = lowercase[:7] + lowercase[7:].upper()
    assert (await store.hit(lowercase, 1, 60)).allowed
    assert (await store.hit(uppercase, 1, 60)).allowed
    assert not (await store.hit(lowercase, 1, 60)).allowed
    assert not (await store.hit(uppercase, 1, 60)).allowed
    assert store.window_count == 2


async def test_a_folded_client_resumes_its_count_and_cannot_exceed_its_budget() -> None:
    clock = Clock()
    store = MemoryStore(clock=clock, max_keys=10, overflow_slots=16)
    for _ in range(3):
        assert (await store.hit("greedy", 3, 60)).allowed
    for number in range(100):  # pushes "greedy" out of the exact windows
        await store.hit(f"other-{number}", 1000, 60)
    refused = await store.hit("greedy", 3, 60)
    assert not refused.allowed
    assert refused.retry_after > 0
    clock.now += 61
    assert (await store.hit("greedy", 3, 60)).allowed


@settings(max_examples=60, deadline=None)
@given(
    hits=st.lists(
        st.tuples(st.integers(0, 9), st.sampled_from([0, 0, 0, 1, 5, 30])), min_size=1, max_size=300
    ),
    max_keys=st.integers(1, 8),
)
def test_under_any_eviction_no_client_passes_more_than_its_budget_per_window(
    hits: list[tuple[int, int]], max_keys: int
) -> None:
    import asyncio

    async def run() -> None:
        clock = Clock()
        store = MemoryStore(clock=clock, max_keys=max_keys, overflow_slots=8)
        exact = MemoryStore(clock=clock, max_keys=10**6)  # the same traffic, nothing evicted
        for client, seconds in hits:
            clock.now += seconds
            key = f"client-{client}"
            bounded = await store.hit(key, 3, 60)
            reference = await exact.hit(key, 3, 60)
            # Eviction may refuse early (a shared slot), never admit what the exact store refuses.
            assert not (bounded.allowed and not reference.allowed)

    asyncio.run(run())


async def test_cached_answers_are_dropped_least_recently_used_beyond_the_byte_bound() -> None:
    store = MemoryStore(max_keys=1000, max_cache_bytes=1000)
    for number in range(50):
        await store.put(f"cache:{number}", b"x" * 100, 600)
    assert store.cache_bytes <= 1000
    assert await store.get("cache:49") == b"x" * 100
    assert await store.get("cache:0") is None


async def test_cached_answers_are_dropped_beyond_the_entry_bound() -> None:
    store = MemoryStore(max_keys=10)
    for number in range(30):
        await store.put(f"cache:{number}", b"v", 600)
    assert [await store.get(f"cache:{number}") for number in (0, 19, 20, 29)] == [None, None, b"v", b"v"]


async def test_a_read_keeps_an_answer_from_being_the_next_one_dropped() -> None:
    store = MemoryStore(max_keys=3)
    for key in ("a", "b", "c"):
        await store.put(key, b"v", 600)
    await store.get("a")
    await store.put("d", b"v", 600)
    assert await store.get("a") == b"v"
    assert await store.get("b") is None


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    require_redis()
    redis = RedisStore(REDIS_URL, prefix=unique_name("mp_test") + ":")
    yield redis
    await redis.close()


async def test_a_claim_has_one_holder_until_it_is_released(store: Store) -> None:
    token = await store.claim("claim:k", 5)
    assert token is not None
    assert await store.claim("claim:k", 5) is None
    await store.release("claim:k", "someone else's token")
    assert await store.claim("claim:k", 5) is None
    await store.release("claim:k", token)
    assert await store.claim("claim:k", 5) is not None


async def test_a_claim_ends_by_itself_after_its_time() -> None:
    clock = Clock()
    store = MemoryStore(clock=clock)
    assert await store.claim("claim:k", 5) is not None
    clock.now += 5.1
    assert await store.claim("claim:k", 5) is not None


async def test_an_unreachable_redis_grants_every_claim_and_admits_every_hit() -> None:
    from tests.upstream import closed_port_url

    redis = RedisStore(closed_port_url().replace("http", "redis"), prefix="mp_test:")
    try:
        assert await redis.claim("claim:k", 5) is not None
        assert (await redis.hit("limit:k", 1, 60)).allowed
        assert await redis.get("cache:k") is None
    finally:
        await redis.close()
