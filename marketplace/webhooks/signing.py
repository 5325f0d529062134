"""The signature every delivery carries, so that a receiver knows it comes from this service.

    X-Marketplace-Signature: t=<unix time>,v1=<hex HMAC-SHA256(secret, "<unix time>.<body>")>

The time is signed with the body, so a receiver that refuses signatures older than a few minutes
cannot be replayed an old delivery. `docs/webhooks.md` shows a receiver's check.
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "X-Marketplace-Signature"
EVENT_HEADER = "X-Marketplace-Event"
DELIVERY_HEADER = "X-Marketplace-Delivery"
# How old a signature `verify` accepts by default.
DEFAULT_TOLERANCE_SECONDS = 300


def signature(secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode("ascii") + b"." + body
    return hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).hexdigest()


def signature_header(secret: str, body: bytes, *, now: float | None = None) -> str:
    timestamp = int(time.time() if now is None else now)
    return f"t={timestamp},v1={signature(secret, timestamp, body)}"


def verify(
    secret: str,
    header: str,
    body: bytes,
    *,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """Whether `header` signs `body` with `secret`, made at most `tolerance_seconds` ago."""
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and value.isascii() and value.isdigit():
            timestamp = int(value)
        elif key == "v1":
            candidates.append(value)
    if timestamp is None or not candidates:
        return False
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_seconds:
        return False
    expected = signature(secret, timestamp, body).encode("ascii")
    # As bytes: a candidate that is not ASCII is simply not the signature.
    return any(hmac.compare_digest(expected, candidate.encode("utf-8")) for candidate in candidates)
