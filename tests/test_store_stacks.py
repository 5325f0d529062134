"""Stacks of limiters checked at once (`Store.hit_all`): the same outcome as one `hit` after another
on both stores, one Redis round trip for the stacks of concurrent requests, exact counts under
concurrency, failing open on a dead Redis, and keys that keep a stack in one Redis Cluster slot,
whatever text they are made of."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from redis.crc import key_slot

from marketplace.api.v1 import api_limits, licence_limits, search_limits
from marketplace.config import Settings, redis_prefix_problem
from marketplace.http.cache import cache_key
from marketplace.http.limits import WINDOW_SECONDS, Limit, TooManyRequests, enforce, limit_key
from marketplace.stores import MemoryStore, RedisStore, Store, WindowCheck, WindowHit
from marketplace.telemetry.metrics import STORE_ERRORS
from tests.profiles import REDIS_URL, redis_cluster_url, require_redis, unique_name


def redis_store() -> RedisStore:
    require_redis()
    return RedisStore(REDIS_URL, prefix=unique_name("mp_test") + ":")


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    redis = redis_store()
    yield redis
    await redis.close()


def sequential_reference(counts: dict[str, int], checks: Sequence[WindowCheck]) -> list[tuple[bool, int]]:
    """The contract's stack, one window per key: count each check up to the first full window."""
    outcomes: list[tuple[bool, int]] = []
    for check in checks:
        count = counts.get(check.key, 0)
        if count >= check.max_attempts:
            outcomes.append((False, count))
            break
        counts[check.key] = count + 1
        outcomes.append((True, count + 1))
    return outcomes


async def sequential_hits(store: Store, checks: Sequence[WindowCheck]) -> list[WindowHit]:
    """The stack as `enforce` checked it before stacks existed: one `hit` after another."""
    hits: list[WindowHit] = []
    for check in checks:
        hits.append(await store.hit(check.key, check.max_attempts, check.decay_seconds))
        if not hits[-1].allowed:
            break
    return hits


stacks = st.lists(
    st.lists(
        st.builds(
            WindowCheck,
            key=st.sampled_from(["a", "b", "c", "d"]),
            max_attempts=st.integers(1, 4),
            decay_seconds=st.just(60),
        ),
        min_size=1,
        max_size=4,
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=stacks)
def test_a_stack_has_the_outcome_of_sequential_hits_on_every_store(
    requests: list[list[WindowCheck]],
) -> None:
    require_redis()

    async def run() -> None:
        counts: dict[str, int] = {}
        memory, sequential = MemoryStore(), MemoryStore()
        redis, redis_sequential = redis_store(), redis_store()
        try:
            for checks in requests:
                expected = sequential_reference(counts, checks)
                for hits in (
                    await memory.hit_all(checks),
                    await redis.hit_all(checks),
                    await sequential_hits(sequential, checks),
                    await sequential_hits(redis_sequential, checks),
                ):
                    assert [(hit.allowed, hit.count) for hit in hits] == expected
                    assert all(59 <= hit.retry_after <= 60 for hit in hits)
        finally:
            await redis.close()
            await redis_sequential.close()

    asyncio.run(run())


async def test_a_refused_request_is_counted_by_the_limiters_before_the_refusing_one(
    store: Store,
) -> None:
    group, route, after = Limit("api", 5, "group"), Limit("search", 1, "route"), Limit("x", 5, "after")
    await enforce(store, [group, route, after])
    with pytest.raises(TooManyRequests) as refused:
        await enforce(store, [group, route, after])
    assert refused.value.headers["X-RateLimit-Limit"] == "1"
    assert [hit.count for hit in await store.hit_all([WindowCheck("group", 5, 60)])] == [3]
    assert [hit.count for hit in await store.hit_all([WindowCheck("after", 5, 60)])] == [2]


async def test_an_empty_stack_asks_nothing(store: Store) -> None:
    assert await store.hit_all([]) == []
    assert await enforce(store, []) == []


async def test_concurrent_stacks_go_to_redis_in_one_pipeline() -> None:
    redis = redis_store()
    try:
        await redis.ping()
        before = redis.pipelines
        addresses = [f"10.0.0.{number}" for number in range(100)]
        counted = await asyncio.gather(
            *(enforce(redis, [*api_limits(ip, {}), *search_limits(ip, {})]) for ip in addresses)
        )
        assert redis.pipelines - before == 1
        assert all([entry.remaining for entry in stack] == [119, 59] for stack in counted)
    finally:
        await redis.close()


async def test_a_pipeline_holds_at_most_a_batch_and_the_rest_follows() -> None:
    redis = redis_store()
    try:
        before = redis.pipelines
        hits = await asyncio.gather(
            *(redis.hit(f"k{number}", 5, 60) for number in range(2 * RedisStore.BATCH_SIZE + 10))
        )
        assert redis.pipelines - before == 3
        assert all(hit.allowed and hit.count == 1 for hit in hits)
    finally:
        await redis.close()


async def test_exactly_the_budget_is_admitted_among_many_concurrent_requests() -> None:
    # Two stores stand for two processes sharing one Redis.
    first = redis_store()
    second = RedisStore(REDIS_URL, prefix=first._prefix)
    try:
        stack = [WindowCheck("group", 1000, 60), WindowCheck("route", 37, 60)]
        outcomes = await asyncio.gather(
            *(store.hit_all(stack) for _ in range(300) for store in (first, second))
        )
        admitted = [hits for hits in outcomes if hits[-1].allowed]
        assert len(admitted) == 37
        assert sorted(hits[-1].count for hits in admitted) == list(range(1, 38))
        # The refused ones were counted by the group limiter, which admitted them all.
        assert sorted(hits[0].count for hits in outcomes) == list(range(1, 601))
    finally:
        await first.close()
        await second.close()


async def test_a_script_redis_does_not_know_is_loaded_and_each_hit_counted_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import marketplace.stores

    # A script text no Redis has seen: the first pipeline meets NOSCRIPT.
    monkeypatch.setattr(
        marketplace.stores, "_STACK_SCRIPT", marketplace.stores._STACK_SCRIPT + f"-- {unique_name('')}\n"
    )
    redis = redis_store()
    try:
        hits = await asyncio.gather(*(redis.hit("k", 10, 60) for _ in range(3)))
        assert sorted(hit.count for hit in hits) == [1, 2, 3]
        assert redis.pipelines == 2
        assert (await redis.hit("k", 10, 60)).count == 4
        assert redis.pipelines == 3
    finally:
        await redis.close()


async def test_a_caller_that_goes_away_before_the_send_is_not_counted() -> None:
    redis = redis_store()
    try:
        gone = asyncio.ensure_future(redis.hit("k", 10, 60))
        await asyncio.sleep(0)  # its call waits for the next turn
        gone.cancel()
        assert (await redis.hit("k", 10, 60)).count == 1
    finally:
        await redis.close()


async def test_a_dead_redis_admits_every_stack_and_counts_each_failed_request() -> None:
    from tests.upstream import closed_port_url

    redis = RedisStore(closed_port_url().replace("http", "redis"), prefix="mp_test:")
    stack = [WindowCheck("group", 1, 60), WindowCheck("route", 1, 30)]
    errors = STORE_ERRORS._value.get()
    try:
        outcomes = await asyncio.gather(*(redis.hit_all(stack) for _ in range(5)))
        assert outcomes == [[WindowHit(True, 0, 60), WindowHit(True, 0, 30)]] * 5
        assert STORE_ERRORS._value.get() - errors == 5
        # Within the pause Redis is not asked again, and nothing more is counted as failing.
        pipelines = redis.pipelines
        assert await redis.hit_all(stack) == [WindowHit(True, 0, 60), WindowHit(True, 0, 30)]
        assert redis.pipelines == pipelines
        assert STORE_ERRORS._value.get() - errors == 5
        assert (await enforce(redis, [Limit("api", 1, "group")]))[0].remaining == 1
    finally:
        await redis.close()


# Redis Cluster: which keys share a hash slot


def slot(prefix: str, key: str) -> int:
    return key_slot((prefix + key).encode("utf-8"))


# Any text Python holds, lone surrogates included (`st.text()` leaves them out).
any_text = st.characters()
# The prefixes the settings accept (`redis_prefix_problem`).
usable_prefixes = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="{}"), max_size=20)


@settings(max_examples=200, deadline=None)
@given(
    address=st.text(any_text, min_size=1, max_size=45),
    other_address=st.text(any_text, min_size=1, max_size=45),
    key=st.text(any_text, max_size=300),
    prefix=usable_prefixes,
)
@example(address="203.0.113.9", other_address="\ud800", key="\udfff", prefix="marketplace:")
def test_the_limiters_of_one_address_share_a_slot_and_a_shared_limiter_keeps_its_own(
    address: str, other_address: str, key: str, prefix: str
) -> None:
    params = {"key": key}
    by_address = [*api_limits(address, params), *search_limits(address, params)]
    licence_key, licence_ip = licence_limits(address, params)
    by_address.append(licence_ip)
    assert len({slot(prefix, limit.key) for limit in by_address}) == 1
    # The per-key limiter is shared by every address: its slot follows the key alone.
    assert licence_limits(other_address, params)[0].key == licence_key.key
    assert slot(prefix, licence_key.key) == slot("", limit_key("licence", "key", key))


@given(
    namespace=st.sampled_from(["chat", "stats", "resource"]),
    parts=st.lists(st.text(any_text, max_size=50), max_size=4),
    prefix=usable_prefixes,
)
@example(namespace="chat", parts=["\ud800"], prefix="marketplace:")
def test_a_cached_answer_and_its_claim_share_a_slot(namespace: str, parts: list[str], prefix: str) -> None:
    key = cache_key(namespace, *parts)
    assert slot(prefix, key) == slot(prefix, "claim:" + key)


def test_keys_of_text_that_utf8_encodes_are_the_digests_they_always_were() -> None:
    # Changing them would reset every window and cached answer of a running service on upgrade.
    assert limit_key("licence", "key", "Économie+") == (
        "limit:{001ac8b26eed8c5c}:d22c93055355a1544ff30190e1f9e95110a05d61"
    )
    assert (
        cache_key("chat", "81384788765712384", "é") == "cache:chat:{8e6c078455f4dbbcb2752e55e98e4efe02da3b06}"
    )


@settings(max_examples=200, deadline=None)
@given(prefix=st.text(any_text, max_size=20))
@example(prefix="\ud800")  # found by chance once; every Redis command then failed
@example(prefix="\udced\udca0\udc80")  # the bytes ED A0 80 of an environment variable
@example(prefix="app{1}:")
def test_a_redis_prefix_is_utf8_text_without_a_hash_tag_or_refused_by_the_settings(prefix: str) -> None:
    problem = redis_prefix_problem(prefix)
    if problem is None:
        assert slot(prefix, limit_key("api", "203.0.113.9")) == slot("", limit_key("api", "203.0.113.9"))
        assert Settings(_env_file=None, redis_prefix=prefix).redis_prefix == prefix  # type: ignore[call-arg]
        return
    with pytest.raises(ValidationError, match="redis_prefix"):
        Settings(_env_file=None, redis_prefix=prefix)  # type: ignore[call-arg]


@pytest.mark.parametrize("prefix", ["\ud800:", "mp{x}:"])
async def test_a_redis_store_refuses_a_prefix_redis_keys_cannot_begin_with(prefix: str) -> None:
    with pytest.raises(ValueError, match="Redis key prefix"):
        RedisStore(REDIS_URL, prefix=prefix)


async def test_on_a_cluster_a_stack_is_one_script_call_per_run_of_one_slot() -> None:
    store = RedisStore("redis+cluster://127.0.0.1:1", prefix="marketplace:")
    try:
        address, params = "203.0.113.9", {"key": "ABCD-1234"}
        same = [*api_limits(address, params), *search_limits(address, params)]
        licence = [*api_limits(address, params), *licence_limits(address, params)]
        assert [len(run) for run in store._runs(checks_of(same))] == [2]
        assert [len(run) for run in store._runs(checks_of(licence))] == [1, 1, 1]
    finally:
        await store.close()


def checks_of(limits: Sequence[Limit]) -> list[WindowCheck]:
    return [WindowCheck(limit.key, limit.max_attempts, WINDOW_SECONDS) for limit in limits]


async def test_on_a_real_cluster_stacks_across_slots_keep_the_sequential_outcome() -> None:
    store = RedisStore(redis_cluster_url(), prefix=unique_name("mp_test") + ":")
    try:
        address, params = "203.0.113.9", {"key": "ABCD-1234"}
        licence = [Limit(limit.name, 2, limit.key) for limit in licence_limits(address, params)]
        stack = [*api_limits(address, params), *licence]
        counts: dict[str, int] = {}
        for _ in range(4):
            expected = sequential_reference(counts, checks_of(stack))
            hits = await store.hit_all(checks_of(stack))
            assert [(hit.allowed, hit.count) for hit in hits] == expected
        outcomes = await asyncio.gather(*(store.hit_all([WindowCheck("shared", 25, 60)]) for _ in range(100)))
        assert sum(hits[0].allowed for hits in outcomes) == 25
        token = await store.claim("claim:" + cache_key("chat", "x"), 5)
        assert token is not None
        assert await store.claim("claim:" + cache_key("chat", "x"), 5) is None
        await store.release("claim:" + cache_key("chat", "x"), token)
        assert await store.claim("claim:" + cache_key("chat", "x"), 5) is not None
        await store.put(cache_key("chat", "x"), b"answer", 60)
        assert await store.get(cache_key("chat", "x")) == b"answer"
    finally:
        await store.close()
