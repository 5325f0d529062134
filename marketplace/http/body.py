"""Request bodies: capped, and read whole before anything else runs.

A body declared larger than the cap (`Content-Length`) is refused with 413 before a byte of it is
read; a chunked body is counted as it arrives and refused as soon as it passes the cap. A body
that does not arrive within the body timeout is answered 408. The edge (`edge.py`) reads the body
here, before routing, so that no handler (and no database connection a handler holds) ever waits
on a slow client; handlers then read it from memory. Under `/api` the refusals are the error
object (`{"message": ...}`); elsewhere plain text. Nothing else of the request is looked at here.

The bodies a worker holds at once, over all its requests, are bounded too (`BodyBudget`): a body
takes its room before it is read (its declared length, or chunk by chunk) and keeps it until its
request is answered. A body that does not fit waits, reading nothing, until others give room back;
it is answered 408 if the read timeout passes first, as a client too slow to send it would be.
"""

from __future__ import annotations

import asyncio
from collections import deque

from starlette.types import Message, Receive, Scope, Send

from marketplace.http.envelope import is_api_path
from marketplace.http.json import JSON_MEDIA_TYPE, TEXT_MEDIA_TYPE, error_body

# Laravel's text for a body over the limit (its ValidatePostSize middleware).
TOO_LARGE_MESSAGE = "The POST data is too large."
TIMEOUT_MESSAGE = "Request Timeout."
# How metrics and logs name a request refused here, before any route.
BODY_REFUSED_ROUTE = "body_refused"


class BodyRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ClientGone(Exception):
    """The client disconnected before its body arrived: nothing to answer."""


class BodyBudget:
    """The request body bytes one worker holds at once; room is given in the order it was asked."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.free = limit
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    def lease(self) -> BodyLease:
        return BodyLease(self)

    async def take(self, size: int) -> None:
        if not self._waiting and size <= self.free:
            self.free -= size
            return
        from marketplace.telemetry.metrics import BODY_BUDGET_WAITS

        entry = (size, asyncio.get_running_loop().create_future())
        self._waiting.append(entry)
        try:
            await entry[1]
        except BaseException:
            if entry in self._waiting:
                self._waiting.remove(entry)
                self._grant()
            elif entry[1].done() and not entry[1].cancelled():
                self.give_back(size)  # granted, but its request gave up meanwhile
            BODY_BUDGET_WAITS.labels("timed_out").inc()
            raise
        BODY_BUDGET_WAITS.labels("granted").inc()

    def give_back(self, size: int) -> None:
        self.free += size
        self._grant()
        if self.free == self.limit:
            from marketplace.serving import memory_returner

            memory_returner().released()

    def _grant(self) -> None:
        while self._waiting and self._waiting[0][0] <= self.free:
            size, granted = self._waiting.popleft()
            self.free -= size
            granted.set_result(None)


class BodyLease:
    """The room one request's body holds in the worker's `BodyBudget`."""

    def __init__(self, budget: BodyBudget) -> None:
        self._budget = budget
        self.held = 0

    async def hold(self, size: int) -> None:
        """Hold room for `size` bytes in all (waiting for it if need be)."""
        if size > self.held:
            await self._budget.take(size - self.held)
            self.held = size

    def give_back(self) -> None:
        if self.held:
            held, self.held = self.held, 0
            self._budget.give_back(held)


def has_body(scope: Scope) -> bool:
    """Whether the request announces a body (a length above zero, or chunks)."""
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip(b" \t0")):
            return True
    return False


async def read_capped_body(
    scope: Scope, receive: Receive, *, max_bytes: int, timeout_seconds: float, lease: BodyLease
) -> Receive:
    """A `receive` replaying the whole body, read now, its room held in `lease` (given back by the
    caller once the request is answered); raises `BodyRefused` or `ClientGone`."""
    declared = _declared_length(scope)
    if declared is not None and declared > max_bytes:
        raise BodyRefused(413, TOO_LARGE_MESSAGE)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_seconds):
            if declared is not None:
                await lease.hold(declared)
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientGone()
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > max_bytes:
                    raise BodyRefused(413, TOO_LARGE_MESSAGE)
                await lease.hold(size)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return _replay(b"".join(chunks), receive)
    except TimeoutError:
        raise BodyRefused(408, TIMEOUT_MESSAGE) from None


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            digits = value.strip()
            # The server has checked the header; a length of more than 18 digits is over any cap.
            return int(digits) if digits.isdigit() and len(digits) <= 18 else 2**63
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` giving the body read already, then whatever the server sends next (a disconnect)."""
    delivered = False

    async def replayed() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def answer_refusal(scope: Scope, send: Send, refused: BodyRefused) -> None:
    if is_api_path(scope["path"]):
        body = error_body(refused.message)
        content_type = JSON_MEDIA_TYPE
    else:
        body = refused.message.encode("ascii")
        content_type = TEXT_MEDIA_TYPE
    headers = [
        (b"content-type", content_type.encode("ascii")),
        (b"content-length", str(len(body)).encode("ascii")),
        # The rest of the body is not read: the connection cannot carry another request.
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
