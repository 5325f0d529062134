"""One bounded GET of an upstream JSON document, counted and logged by outcome.

The call's total time is bounded (connect, send, wait and read together), and so is the size of
the answer: an upstream answering more than `MAX_ANSWER_BYTES` is treated as a failure without
reading the rest. Upstream failures are warnings; an upstream saying it has no such thing
(404, or 403 for a chat server whose widget is disabled) is an ordinary answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from marketplace.telemetry.metrics import UPSTREAM_CALLS, UPSTREAM_DURATION

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger("marketplace.upstream")

MAX_ANSWER_BYTES = 1024 * 1024
_ORDINARY_REFUSALS = (403, 404)


class _AnswerTooLarge(Exception):
    pass


async def get_json(http: httpx.AsyncClient, upstream: str, url: str, timeout_seconds: float) -> Any:
    """The decoded JSON of a 2xx answer; None for any failure (each counted by outcome)."""
    # Loaded with the worker's client, on the first upstream call (services.py).
    import httpx

    started = time.perf_counter()
    outcome = "ok"
    try:
        async with asyncio.timeout(timeout_seconds):
            async with http.stream("GET", url, headers={"Accept": "application/json"}) as response:
                if not response.is_success:
                    outcome = "not_found" if response.status_code in _ORDINARY_REFUSALS else "error_status"
                    if outcome == "error_status":
                        logger.warning("%s upstream answered %d", upstream, response.status_code)
                    return None
                body = await _read_bounded(response)
        try:
            return json.loads(body)
        except (ValueError, RecursionError):
            outcome = "invalid_body"
            logger.warning("%s upstream answered a body that is not JSON", upstream)
            return None
    except TimeoutError:
        outcome = "timeout"
        logger.warning("%s upstream did not answer within %.1f s", upstream, timeout_seconds)
    except _AnswerTooLarge:
        outcome = "too_large"
        logger.warning("%s upstream answered more than %d bytes", upstream, MAX_ANSWER_BYTES)
    except (httpx.HTTPError, httpx.InvalidURL) as error:
        outcome = "network_error"
        logger.warning("%s upstream unreachable: %s", upstream, type(error).__name__)
    finally:
        UPSTREAM_CALLS.labels(upstream, outcome).inc()
        UPSTREAM_DURATION.labels(upstream).observe(time.perf_counter() - started)
    return None


async def _read_bounded(response: httpx.Response) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and len(declared) < 20 and int(declared) > MAX_ANSWER_BYTES:
        raise _AnswerTooLarge()
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise _AnswerTooLarge()
        chunks.append(chunk)
    return b"".join(chunks)
