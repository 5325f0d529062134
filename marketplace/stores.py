"""Where limiter counters, cached answers and short claims live, behind one small interface.

`MemoryStore` serves one process (the embedded default) in bounded memory. `RedisStore` gives the
same semantics across processes and machines, on one Redis or a Redis Cluster.

A request's limiters are checked as one stack (`hit_all`): in order, each counting the request,
up to the first whose window is full, which refuses it without counting it. On Redis a stack is
one Lua script call, and the calls of every request that checks its limiters during one turn of
the event loop go to Redis together in one pipeline: one round trip per turn, whatever the number
of concurrent requests (at most `RedisStore.BATCH_SIZE` calls each; the rest go in the next one).

On a Redis Cluster a script may only touch keys of one hash slot. Limiter keys carry a hash tag
chosen by `marketplace.http.limits.limit_key`: every limiter counting per client address shares
the address's slot, so most requests still make one script call. A limiter counting per path
parameter (shared by all addresses) lives in that parameter's slot; a stack is then checked as
runs of consecutive limits of one slot, each run a script call of its own and each only after
the one before has admitted the request, so the outcome is the same as on one Redis. Cached
answers and claims are single-key operations, valid in any slot.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import re
import secrets
import struct
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

from marketplace.config import redis_prefix_problem
from marketplace.telemetry.logs import start_background
from marketplace.telemetry.metrics import STORE_ERRORS

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

logger = logging.getLogger("marketplace.stores")


@dataclass(frozen=True, slots=True)
class WindowHit:
    """The outcome of one limiter check on a fixed window."""

    allowed: bool
    # Hits counted in the window, this one included when allowed.
    count: int
    # Seconds until the window ends (whole seconds, at least 0).
    retry_after: int


@dataclass(frozen=True, slots=True)
class WindowCheck:
    """One limiter of a stack: its key and its fixed window."""

    key: str
    max_attempts: int
    decay_seconds: int


class Store(Protocol):
    async def hit(self, key: str, max_attempts: int, decay_seconds: int) -> WindowHit:
        """Refuse when the window's count has reached `max_attempts`, else count this hit.

        A window starts at the key's first hit and lasts `decay_seconds`.
        """
        ...

    async def hit_all(self, checks: Sequence[WindowCheck]) -> list[WindowHit]:
        """`hit` each check in order up to the first refusal: one outcome per check made.

        The answer ends at the first refused check (its limiter does not count the hit; those
        before it do), or holds one admitted outcome per check.
        """
        ...

    async def get(self, key: str) -> bytes | None: ...

    async def put(self, key: str, value: bytes, ttl_seconds: int) -> None: ...

    async def claim(self, key: str, ttl_seconds: float) -> str | None:
        """A token when nobody else holds `key` (held until released or `ttl_seconds` pass), else None."""
        ...

    async def release(self, key: str, token: str) -> None:
        """Give up a claim, if `token` still holds it."""
        ...

    async def ping(self) -> None:
        """Raise when the store cannot be reached."""
        ...

    async def check_counting(self) -> None:
        """Raise when the store cannot count limiter hits (health checks)."""
        ...

    async def close(self) -> None: ...


class Clock(Protocol):
    def __call__(self) -> float: ...


# A limiter key of `marketplace.http.limits.limit_key`: a hash tag and a digest, both lowercase hex.
_LIMIT_KEY = re.compile(r"limit:\{([0-9a-f]{16})\}:([0-9a-f]{40})")
_END = struct.Struct("=d")
_END_MASK = (1 << 64) - 1


def _window_key(key: str) -> str | bytes:
    """The key a window is kept under: a limiter key as the 28 bytes its hex stands for (64
    bytes of memory instead of 120), any other key as it is.

    Exact: only lowercase hex of a fixed layout is turned into bytes, so two keys never share a
    window, and a text key never equals a bytes one.
    """
    found = _LIMIT_KEY.fullmatch(key)
    if found is None:
        return key
    return bytes.fromhex(found[1] + found[2])


def _packed_window(count: int, ends_at: float) -> int:
    """A window's count and end as one int (36 bytes of memory; a tuple of both takes 80): the
    end's exact IEEE-754 bits below, the count above."""
    return count << 64 | int.from_bytes(_END.pack(ends_at), "little")


def _window_end(window: int) -> float:
    ends_at: float = _END.unpack((window & _END_MASK).to_bytes(8, "little"))[0]
    return ends_at


class MemoryStore:
    """In-process counters, cache and claims; correct for a single worker process only.

    Memory is bounded whatever the number of clients. At most `max_keys` windows are kept exactly;
    beyond that the oldest window is folded into a fixed table of slots (by hash of its key) that
    keeps, per slot, the highest count and the latest end of the windows folded into it. A key that
    comes back resumes from its slot: it may be refused early (it shares the slot's count) but never
    gets more than its budget. Cached answers are dropped least recently used first beyond
    `max_keys` entries or `max_cache_bytes`.
    """

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        max_keys: int = 100_000,
        max_cache_bytes: int = 32 * 1024 * 1024,
        overflow_slots: int = 65_536,
    ) -> None:
        if overflow_slots & (overflow_slots - 1):
            raise ValueError("overflow_slots must be a power of two")
        self._clock = clock or time.time
        self.max_keys = max(1, max_keys)
        self.max_cache_bytes = max_cache_bytes
        # window key -> packed count and window end (`_packed_window`); ordered by window start, so
        # the front holds the oldest. At the default 100,000 windows this is most of the store.
        self._windows: OrderedDict[str | bytes, int] = OrderedDict()
        self._slot_mask = overflow_slots - 1
        self._slot_counts = [0] * overflow_slots
        self._slot_ends = [0.0] * overflow_slots
        self._cache: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        self._cache_bytes = 0
        self._claims: dict[str, tuple[str, float]] = {}

    @property
    def window_count(self) -> int:
        return len(self._windows)

    @property
    def cache_bytes(self) -> int:
        return self._cache_bytes

    async def hit_all(self, checks: Sequence[WindowCheck]) -> list[WindowHit]:
        # `hit` never suspends: the stack is checked with no other request in between.
        hits: list[WindowHit] = []
        for check in checks:
            hit = await self.hit(check.key, check.max_attempts, check.decay_seconds)
            hits.append(hit)
            if not hit.allowed:
                break
        return hits

    async def hit(self, key: str, max_attempts: int, decay_seconds: int) -> WindowHit:
        now = self._clock()
        self._drop_expired_windows(now)
        kept_as = _window_key(key)
        window = self._windows.get(kept_as)
        if window is not None and (ends_at := _window_end(window)) > now:
            count = window >> 64
        else:
            if window is not None:
                del self._windows[kept_as]
            count, ends_at = self._folded(kept_as, now, decay_seconds)
        retry_after = max(0, math.ceil(ends_at - now))
        if count >= max_attempts:
            return WindowHit(allowed=False, count=count, retry_after=retry_after)
        count += 1
        if kept_as not in self._windows:
            self._make_room()
        self._windows[kept_as] = _packed_window(count, ends_at)
        return WindowHit(allowed=True, count=count, retry_after=retry_after)

    def _drop_expired_windows(self, now: float) -> None:
        # A little sweeping per hit keeps expired windows from piling up, at constant cost.
        for _ in range(2):
            if not self._windows:
                return
            oldest = next(iter(self._windows))
            if _window_end(self._windows[oldest]) > now:
                return
            del self._windows[oldest]

    def _make_room(self) -> None:
        while len(self._windows) >= self.max_keys:
            kept_as, window = self._windows.popitem(last=False)
            count, ends_at = window >> 64, _window_end(window)
            slot = hash(kept_as) & self._slot_mask
            if self._slot_ends[slot] <= self._clock():
                self._slot_counts[slot], self._slot_ends[slot] = count, ends_at
            else:
                self._slot_counts[slot] = max(self._slot_counts[slot], count)
                self._slot_ends[slot] = max(self._slot_ends[slot], ends_at)

    def _folded(self, kept_as: str | bytes, now: float, decay_seconds: int) -> tuple[int, float]:
        """Where a key without a live window starts: its slot's count if the slot is live, else anew."""
        slot = hash(kept_as) & self._slot_mask
        if self._slot_ends[slot] > now:
            return self._slot_counts[slot], self._slot_ends[slot]
        return 0, now + decay_seconds

    async def get(self, key: str) -> bytes | None:
        entry = self._cache.get(key)
        if entry is None:
            return None
        value, expires_at = entry
        if expires_at <= self._clock():
            self._forget(key)
            return None
        self._cache.move_to_end(key)
        return value

    async def put(self, key: str, value: bytes, ttl_seconds: int) -> None:
        if len(value) > self.max_cache_bytes:
            return
        self._forget(key)
        self._cache[key] = (value, self._clock() + ttl_seconds)
        self._cache_bytes += len(value)
        while len(self._cache) > self.max_keys or self._cache_bytes > self.max_cache_bytes:
            self._forget(next(iter(self._cache)))

    def _forget(self, key: str) -> None:
        entry = self._cache.pop(key, None)
        if entry is not None:
            self._cache_bytes -= len(entry[0])

    async def claim(self, key: str, ttl_seconds: float) -> str | None:
        now = self._clock()
        held = self._claims.get(key)
        if held is not None and held[1] > now:
            return None
        token = secrets.token_hex(8)
        self._claims[key] = (token, now + ttl_seconds)
        return token

    async def release(self, key: str, token: str) -> None:
        held = self._claims.get(key)
        if held is not None and held[0] == token:
            del self._claims[key]

    async def ping(self) -> None:
        return None

    async def check_counting(self) -> None:
        return None

    async def close(self) -> None:
        self._windows.clear()
        self._cache.clear()
        self._cache_bytes = 0
        self._claims.clear()


# Checks a stack of limiters in one call: for each key in order, refuse when its window is full
# (and stop there), else count the hit; the first hit of a key starts its window (the key's
# expiry). ARGV holds each key's maximum and window in milliseconds. Returns, per key checked,
# {allowed, count, milliseconds left}, flattened.
_STACK_SCRIPT = """
local outcomes = {}
for i, key in ipairs(KEYS) do
  local window = tonumber(ARGV[2 * i])
  local count = tonumber(redis.call('GET', key) or '0')
  local ttl = redis.call('PTTL', key)
  if ttl < 0 then
    redis.call('SET', key, 1, 'PX', window)
    count, ttl = 1, window
  elseif count >= tonumber(ARGV[2 * i - 1]) then
    outcomes[#outcomes + 1] = 0
    outcomes[#outcomes + 1] = count
    outcomes[#outcomes + 1] = ttl
    return outcomes
  else
    count = redis.call('INCR', key)
  end
  outcomes[#outcomes + 1] = 1
  outcomes[#outcomes + 1] = count
  outcomes[#outcomes + 1] = ttl
end
return outcomes
"""

# Deletes a claim only if the token still holds it (a claim that expired may belong to another).
_RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")

# One script call waiting for the next pipeline: the node its keys live on, its keys, its
# arguments, who waits for the reply.
_Call = tuple[str, list[str], list[int], "asyncio.Future[list[int]]"]


class _ScriptCalls:
    """Sends the stack script calls made during one turn of the event loop in one pipeline per node.

    The first call of a turn schedules the send for the loop's next turn; every call made until
    then joins it. The calls are grouped by the node their keys live on (one group on one Redis),
    each group a pipeline of its own, so that a node that fails fails only its own callers. Each
    caller awaits its own reply or error; a caller that goes away takes its call out of a send that
    has not started, and never cancels the others'.
    """

    def __init__(self, redis: Redis | RedisCluster, script: str, batch_size: int) -> None:
        self._redis = redis
        self._script = script
        self._sha = _script_sha(script)
        self._batch_size = batch_size
        self._waiting: list[_Call] = []
        self._scheduled = False
        self._sending: set[asyncio.Task[None]] = set()
        self._refreshing = False
        self._faults = _redis_faults()
        # Pipelines sent so far (tests and benchmarks count round trips with it).
        self.pipelines = 0

    async def call(self, node: str, keys: list[str], args: list[int]) -> list[int]:
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[list[int]] = loop.create_future()
        self._waiting.append((node, keys, args, reply))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._send_waiting)
        return await reply

    def _send_waiting(self) -> None:
        self._scheduled = False
        batch = [call for call in self._waiting[: self._batch_size] if not call[3].done()]
        del self._waiting[: self._batch_size]
        if self._waiting:
            # Bounded pipelines: the rest waits for the next turn.
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._send_waiting)
        by_node: dict[str, list[_Call]] = {}
        for call in batch:
            by_node.setdefault(call[0], []).append(call)
        for group in by_node.values():
            # A pipeline serves many requests: its log lines carry none's id.
            sending = start_background(self._send(group))
            # Held until done, so that the task is not collected while callers wait for it.
            self._sending.add(sending)
            sending.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[_Call]) -> None:
        try:
            replies = await self._pipeline(batch)
        except Exception as error:  # each caller decides: faults fail open, a bug reaches them all
            for *_, reply in batch:
                if not reply.done():
                    reply.set_exception(error)
            await self._refresh_topology()
            return
        except BaseException:
            # Cancelled mid-send (the loop shutting down): nobody is left waiting forever.
            for *_, reply in batch:
                reply.cancel()
            raise
        for (*_, reply), outcome in zip(batch, replies, strict=True):
            if reply.done():
                continue
            if isinstance(outcome, Exception):
                reply.set_exception(outcome)
            else:
                reply.set_result(cast("list[int]", outcome))

    async def _refresh_topology(self) -> None:
        """After a node failed, ask the cluster again which nodes serve which slots.

        The client is built not to retry (a retry closes every node's connections), so it would
        otherwise keep sending a failed-over master's slots to the dead node.
        """
        if not isinstance(self._redis, _cluster_class()) or self._refreshing:
            return
        self._refreshing = True
        try:
            await self._redis.nodes_manager.initialize()
        except self._faults:
            pass  # the whole cluster is unreachable: the next failure asks again
        finally:
            self._refreshing = False

    async def _pipeline(self, batch: list[_Call]) -> list[object]:
        self.pipelines += 1
        replies = await self._evaluate([(keys, args) for _, keys, args, _ in batch], "EVALSHA")
        from redis.exceptions import NoScriptError

        unknown = [index for index, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if unknown:
            # A server meeting the script first (a new node, a restart, a flush); NOSCRIPT means
            # the call did not run, so running it again (EVAL, which also caches the script on
            # that node) counts each hit once.
            self.pipelines += 1
            again = await self._evaluate([(batch[index][1], batch[index][2]) for index in unknown], "EVAL")
            for index, reply in zip(unknown, again, strict=True):
                replies[index] = reply
        return replies

    async def _evaluate(self, calls: list[tuple[list[str], list[int]]], command: str) -> list[object]:
        # EVALSHA staged by hand: redis-py's Script objects make every pipeline ask SCRIPT EXISTS
        # first, a second round trip.
        script = self._sha if command == "EVALSHA" else self._script
        pipeline = self._redis.pipeline(transaction=False)
        for keys, args in calls:
            pipeline.execute_command(command, script, len(keys), *keys, *args)
        replies: list[object] = await pipeline.execute(raise_on_error=False)
        return replies

    async def close(self) -> None:
        for call in self._waiting:
            call[3].cancel()
        self._waiting.clear()
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)


def _redis_faults() -> tuple[type[Exception], ...]:
    """What a Redis fault looks like: a cluster's routing errors are not `RedisError`s.

    redis-py is imported only once a Redis store is made: a worker without Redis never loads it.
    """
    from redis.exceptions import RedisClusterException, RedisError

    return (RedisError, RedisClusterException, OSError)


def _cluster_class() -> type[RedisCluster]:
    from redis.asyncio.cluster import RedisCluster

    return RedisCluster


def _script_sha(script: str) -> str:
    return hashlib.sha1(script.encode("utf-8")).hexdigest()


class RedisStore:
    """Counters, cache and claims in Redis, shared by every process and machine of the service.

    `url` is a Redis URL (`redis://`, `rediss://`, `unix://`), or `redis+cluster://host:port`
    (`rediss+cluster://` with TLS) naming any node of a Redis Cluster.

    Redis faults never fail a request: while a Redis node is unreachable or refuses to count,
    limiters admit the requests whose keys live on it, the cache misses there and claims there are
    granted; a warning is logged at most once a minute, each failure is counted, and that node is
    not asked again for a short pause so that each request does not wait for a timeout. On a
    cluster the pause is per node: keys on the other masters are still counted.
    """

    RETRY_PAUSE_SECONDS = 2.0
    WARNING_INTERVAL_SECONDS = 60.0
    # How long a request waits on an unresponsive Redis before failing open: short, because every
    # request in that window waits it once before the node is paused.
    SOCKET_TIMEOUT_SECONDS = 0.5
    BATCH_SIZE = 256

    def __init__(self, url: str, prefix: str = "marketplace:") -> None:
        problem = redis_prefix_problem(prefix)
        if problem:
            raise ValueError(f"Redis key prefix {prefix!a}: {problem}")
        scheme, _, rest = url.partition("://")
        self._redis: Redis | RedisCluster
        if scheme in CLUSTER_SCHEMES:
            from redis.asyncio.cluster import RedisCluster
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            self._redis = RedisCluster.from_url(
                scheme.removesuffix("+cluster") + "://" + rest,
                socket_connect_timeout=self.SOCKET_TIMEOUT_SECONDS,
                socket_timeout=self.SOCKET_TIMEOUT_SECONDS,
                # redis-py retries a failed pipeline by closing the connections of every node,
                # the live masters' included: a failure fails open at once instead.
                retry=Retry(NoBackoff(), 0),
            )
            self.cluster = True
        else:
            from redis.asyncio import Redis

            self._redis = Redis.from_url(
                url,
                socket_connect_timeout=self.SOCKET_TIMEOUT_SECONDS,
                socket_timeout=self.SOCKET_TIMEOUT_SECONDS,
                health_check_interval=30,
                retry_on_timeout=False,
            )
            self.cluster = False
        from redis.crc import key_slot

        self._key_slot = key_slot
        self._faults = _redis_faults()
        self._prefix = prefix
        self._stacks = _ScriptCalls(self._redis, _STACK_SCRIPT, self.BATCH_SIZE)
        self._release_script = self._redis.register_script(_RELEASE_SCRIPT)
        # Per node (host:port; "" on one Redis or before a cluster's topology is known).
        self._paused_until: dict[str, float] = {}
        self._last_warning = 0.0
        self._tags_by_slot: dict[int, str] = {}

    @property
    def pipelines(self) -> int:
        """Pipelines of limiter checks sent to Redis so far."""
        return self._stacks.pipelines

    async def _node(self, key: str) -> str:
        """The node that holds `key` as far as the client knows: one name per cluster master."""
        if not isinstance(self._redis, _cluster_class()):
            return ""
        if not self._redis.nodes_manager.slots_cache and self._available(""):
            # Learnt before the first calls, so that they too are grouped by node.
            try:
                await self._redis.initialize()
            except self._faults as error:
                self._failed("", error)
        nodes = self._redis.nodes_manager.slots_cache.get(self._key_slot(key.encode("utf-8")))
        return nodes[0].name if nodes else ""

    def _available(self, node: str) -> bool:
        return time.monotonic() >= self._paused_until.get(node, 0.0)

    def _failed(self, node: str, error: Exception) -> None:
        STORE_ERRORS.inc()
        now = time.monotonic()
        self._paused_until[node] = now + self.RETRY_PAUSE_SECONDS
        if now - self._last_warning >= self.WARNING_INTERVAL_SECONDS or self._last_warning == 0.0:
            self._last_warning = now
            where = f"Redis node {node}" if node else "Redis"
            logger.warning("%s unavailable (%s): limiters and caches bypassed for its keys", where, error)

    async def hit(self, key: str, max_attempts: int, decay_seconds: int) -> WindowHit:
        return (await self.hit_all((WindowCheck(key, max_attempts, decay_seconds),)))[0]

    async def hit_all(self, checks: Sequence[WindowCheck]) -> list[WindowHit]:
        hits: list[WindowHit] = []
        if not checks:
            return hits
        for run in self._runs(checks):
            keys = [self._prefix + check.key for check in run]
            node = await self._node(keys[0])
            if not self._available(node):
                break
            args: list[int] = []
            for check in run:
                args += (check.max_attempts, check.decay_seconds * 1000)
            try:
                outcomes = await self._stacks.call(node, keys, args)
            except self._faults as error:
                self._failed(node, error)
                break
            for index in range(0, len(outcomes), 3):
                allowed, count, left_ms = outcomes[index : index + 3]
                hits.append(WindowHit(bool(allowed), count, max(0, math.ceil(left_ms / 1000))))
            if not hits[-1].allowed:
                return hits
        # Failing open: the checks Redis could not make admit the request, counting nothing.
        hits += (WindowHit(True, 0, check.decay_seconds) for check in checks[len(hits) :])
        return hits

    def _runs(self, checks: Sequence[WindowCheck]) -> list[Sequence[WindowCheck]]:
        """The stack split into script calls: all of it on one Redis, runs of one slot on a cluster."""
        if not self.cluster or len(checks) < 2:
            return [checks]
        runs: list[Sequence[WindowCheck]] = []
        start = 0
        slot = self._key_slot((self._prefix + checks[0].key).encode("utf-8"))
        for index in range(1, len(checks)):
            next_slot = self._key_slot((self._prefix + checks[index].key).encode("utf-8"))
            if next_slot != slot:
                runs.append(checks[start:index])
                start, slot = index, next_slot
        runs.append(checks[start:])
        return runs

    async def get(self, key: str) -> bytes | None:
        node = await self._node(self._prefix + key)
        if not self._available(node):
            return None
        try:
            value = await self._redis.get(self._prefix + key)
        except self._faults as error:
            self._failed(node, error)
            return None
        if value is None:
            return None
        return value if isinstance(value, bytes) else str(value).encode("utf-8")

    async def put(self, key: str, value: bytes, ttl_seconds: int) -> None:
        node = await self._node(self._prefix + key)
        if not self._available(node):
            return
        try:
            await self._redis.set(self._prefix + key, value, ex=ttl_seconds)
        except self._faults as error:
            self._failed(node, error)

    async def claim(self, key: str, ttl_seconds: float) -> str | None:
        token = secrets.token_hex(8)
        node = await self._node(self._prefix + key)
        if not self._available(node):
            return token
        try:
            won = await self._redis.set(
                self._prefix + key, token, nx=True, px=max(1, int(ttl_seconds * 1000))
            )
        except self._faults as error:
            self._failed(node, error)
            return token
        return token if won else None

    async def release(self, key: str, token: str) -> None:
        node = await self._node(self._prefix + key)
        if not self._available(node):
            return
        try:
            await self._release_script(keys=[self._prefix + key], args=[token])
        except self._faults as error:
            self._failed(node, error)

    async def ping(self) -> None:
        await self._redis.ping()

    async def check_counting(self) -> None:
        """Raise unless every node holding the store's keys takes a limiter's write.

        PING is not enough: a cluster that lost a master still answers it (and, with full
        coverage required, refuses every command with CLUSTERDOWN), and so does a read-only
        replica. This writes a short-lived key in the slots of each master the cluster names,
        the dead ones included, and raises the first refusal with the node it came from.
        """
        if not isinstance(self._redis, _cluster_class()):
            await self._redis.set(self._prefix + "up", 1, px=10_000)
            return
        cluster = self._redis
        await cluster.initialize()
        # Asked again each time: a master that died or was failed over shows in the answer.
        await cluster.nodes_manager.initialize()
        slot_of_master: dict[str, int] = {}
        for slot, nodes in cluster.nodes_manager.slots_cache.items():
            if nodes:
                slot_of_master.setdefault(nodes[0].name, slot)
        from redis.exceptions import RedisClusterException

        if not slot_of_master:
            raise RedisClusterException("the cluster serves no slot")

        async def write(node: str, slot: int) -> None:
            try:
                await cluster.set(f"{self._prefix}up:{{{self._tag(slot)}}}", 1, px=10_000)
            except self._faults as error:
                raise RedisClusterException(f"{node} cannot count: {error}") from error

        await asyncio.gather(*(write(node, slot) for node, slot in slot_of_master.items()))

    def _tag(self, slot: int) -> str:
        """A hash tag whose key lives in `slot`."""
        tag = self._tags_by_slot.get(slot)
        if tag is None:
            number = 0
            while self._key_slot(str(number).encode("ascii")) != slot:
                number += 1
            tag = self._tags_by_slot[slot] = str(number)
        return tag

    async def close(self) -> None:
        await self._stacks.close()
        await self._redis.aclose()
