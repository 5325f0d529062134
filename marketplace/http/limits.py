"""Fixed-window rate limiters of the API and the headers they put on answers.

Limiters stack: for each limiter of a route, group first, then the route's own, a request is
refused with 429 when that limiter's window is full, otherwise counted. A refused request is not
counted by the limiter that refused it. Answers carry the `X-RateLimit-*` headers of the limiter
with the smallest remaining count (the first one on a tie); a 429 carries those of the limiter
that refused, with `Retry-After` and `X-RateLimit-Reset`.

A request's limiters are checked as one stack by the store (`Store.hit_all`), which on Redis is
one script call, sent with those of concurrent requests (see `marketplace.stores`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from marketplace.stores import Store, WindowCheck, WindowHit
from marketplace.telemetry.metrics import LIMITER_REFUSALS

logger = logging.getLogger("marketplace.limits")

WINDOW_SECONDS = 60


@dataclass(frozen=True, slots=True)
class Limit:
    # The limiter's name, as metrics and logs show it.
    name: str
    max_attempts: int
    key: str


@dataclass(frozen=True, slots=True)
class CountedLimit:
    limit: Limit
    remaining: int


# Builds a route's limits from the client's key (its address, or its IPv6 network: see
# `client_ip.client_network`) and the raw path parameters.
LimitRule = Callable[[str, Mapping[str, str]], Sequence[Limit]]


def limit_key(*parts: str) -> str:
    """The store key of a limiter's window; the last part is what it counts per (an address, a
    path parameter).

    Path keys are caller-chosen text of any length: the key holds fixed-size digests of them. The
    digest of the last part is also the key's Redis Cluster hash tag, so that the limiters of one
    client address share a slot and a request's stack of them is one script call on a cluster.
    Any Python text has a digest, a lone surrogate too (`surrogatepass`; other text digests as
    UTF-8, as before). No HTTP input brings one (tests/test_live_http.py), but a key must never
    be what fails a request.
    """
    subject = hashlib.sha1(parts[-1].encode("utf-8", "surrogatepass")).hexdigest()[:16] if parts else ""
    return (
        f"limit:{{{subject}}}:" + hashlib.sha1("|".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
    )


class TooManyRequests(Exception):
    def __init__(self, limit: Limit, hit: WindowHit) -> None:
        super().__init__("Too many requests.")
        self.headers = {
            "Retry-After": str(hit.retry_after),
            "X-RateLimit-Reset": str(int(time.time()) + hit.retry_after),
            "X-RateLimit-Limit": str(limit.max_attempts),
            "X-RateLimit-Remaining": "0",
        }


async def enforce(store: Store, limits: Sequence[Limit]) -> list[CountedLimit]:
    """Check and count each limit in order; raise `TooManyRequests` at the first full window."""
    hits = await store.hit_all(
        [WindowCheck(limit.key, limit.max_attempts, WINDOW_SECONDS) for limit in limits]
    )
    counted: list[CountedLimit] = []
    for limit, hit in zip(limits, hits, strict=False):  # the hits end at a refusal
        if not hit.allowed:
            LIMITER_REFUSALS.labels(limit.name).inc()
            logger.warning(
                "the %s limiter refused a request (%d per %d s)",
                limit.name,
                limit.max_attempts,
                WINDOW_SECONDS,
            )
            raise TooManyRequests(limit, hit)
        counted.append(CountedLimit(limit, max(0, limit.max_attempts - hit.count)))
    return counted


def limit_headers(counted: Sequence[CountedLimit]) -> dict[str, str]:
    if not counted:
        return {}
    tightest = min(counted, key=lambda entry: entry.remaining)  # min keeps the first on a tie
    return {
        "X-RateLimit-Limit": str(tightest.limit.max_attempts),
        "X-RateLimit-Remaining": str(tightest.remaining),
    }
