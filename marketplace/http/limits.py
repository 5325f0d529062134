"""Fixed-window rate limiters of the API and the headers they put on answers.

Limiters stack: for each limiter of a route, group first, then the route's own, a request is
refused with 429 when that limiter's window is full, otherwise counted. A refused request is not
counted by the limiter that refused it. Answers carry the `X-RateLimit-*` headers of the limiter
with the smallest remaining count (the first one on a tie); a 429 carries those of the limiter
that refused, with `Retry-After` and `X-RateLimit-Reset`.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from marketplace.stores import Store, WindowHit
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


# Builds a route's limits from the client address and the raw path parameters.
LimitRule = Callable[[str, Mapping[str, str]], Sequence[Limit]]


def limit_key(*parts: str) -> str:
    # Path keys are caller-chosen text of any length: store a fixed-size digest of them.
    return "limit:" + hashlib.sha1("|".join(parts).encode("utf-8")).hexdigest()


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
    counted: list[CountedLimit] = []
    for limit in limits:
        hit = await store.hit(limit.key, limit.max_attempts, WINDOW_SECONDS)
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
