"""Request bodies: capped, and read whole before anything else runs.

A body declared larger than the cap (`Content-Length`) is refused with 413 before a byte of it is
read; a chunked body is counted as it arrives and refused as soon as it passes the cap. A body
that does not arrive within the body timeout is answered 408. The body is read here, before
routing, so that no handler (and no database connection a handler holds) ever waits on a slow
client; handlers then read it from memory. Under `/api` the refusals are the error object
(`{"message": ...}`); elsewhere plain text. Nothing else of the request is looked at here.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from marketplace.http.envelope import is_api_path
from marketplace.http.json import JSON_MEDIA_TYPE, TEXT_MEDIA_TYPE, error_body
from marketplace.http.observation import set_route_name

# Laravel's text for a body over the limit (its ValidatePostSize middleware).
TOO_LARGE_MESSAGE = "The POST data is too large."
TIMEOUT_MESSAGE = "Request Timeout."
# How metrics and logs name a request refused here, before any route.
BODY_REFUSED_ROUTE = "body_refused"


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class BodyLimit:
    def __init__(self, app: ASGIApp, *, max_bytes: int, timeout_seconds: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_seconds = timeout_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared, chunked = _framing(scope)
        if declared is None and not chunked:
            await self.app(scope, receive, send)
            return
        try:
            if declared is not None and declared > self.max_bytes:
                raise _Refused(413, TOO_LARGE_MESSAGE)
            body = await self._read(receive)
        except _Refused as refused:
            await _refuse(scope, send, refused)
            return
        except _Disconnected:
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.timeout_seconds):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise _Disconnected()
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise _Refused(413, TOO_LARGE_MESSAGE)
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks)
        except TimeoutError:
            raise _Refused(408, TIMEOUT_MESSAGE) from None


class _Disconnected(Exception):
    pass


def _framing(scope: Scope) -> tuple[int | None, bool]:
    """The declared body length (None when not declared) and whether the body comes chunked."""
    declared: int | None = None
    chunked = False
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            digits = value.strip()
            # The server has checked the header; a length of more than 18 digits is over any cap.
            declared = int(digits) if digits.isdigit() and len(digits) <= 18 else 2**63
        elif name == b"transfer-encoding":
            chunked = True
    if declared == 0:
        declared = None
    return declared, chunked


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


async def _refuse(scope: Scope, send: Send, refused: _Refused) -> None:
    set_route_name(scope, BODY_REFUSED_ROUTE)
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
