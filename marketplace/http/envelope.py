"""The outermost ASGI wrapper: what every answer of the API carries, whatever produced it.

Under `/api/*`: the `X-Service-Api-Version` header and a JSON 500 for any unhandled error. Under
`/api/v1/*`: CORS (preflights answered here, before routing and limiting). For HEAD: the GET
answer's status and headers with an empty body. It sits outside everything else so that a crash
anywhere still gets the header and the contract's 500 body.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from marketplace.http.errors import SERVER_ERROR_MESSAGE
from marketplace.http.json import JSON_MEDIA_TYPE, error_body

logger = logging.getLogger("marketplace.http")

VERSION_HEADER = (b"x-service-api-version", b"1")
CORS_ANSWER_HEADERS = (
    (b"access-control-allow-origin", b"*"),
    (b"access-control-expose-headers", b"X-Service-Api-Version"),
)
API_CACHE_CONTROL = (b"cache-control", b"no-cache, private")


def is_api_path(path: str) -> bool:
    return path == "/api" or path.startswith("/api/")


def is_cors_path(path: str) -> bool:
    return path.startswith("/api/v1/")


class ApiEnvelope:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        api = is_api_path(path)
        cors = is_cors_path(path)
        if (
            cors
            and scope["method"] == "OPTIONS"
            and _header(scope, b"access-control-request-method") is not None
        ):
            await _preflight(scope, send)
            return

        extra: list[tuple[bytes, bytes]] = []
        if api:
            extra.append(VERSION_HEADER)
        if cors:
            extra.extend(CORS_ANSWER_HEADERS)
        head = scope["method"] == "HEAD"
        started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _REPLACED]
                headers.extend(extra)
                if api and not any(k.lower() == b"cache-control" for k, _ in headers):
                    headers.append(API_CACHE_CONTROL)
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body" and head and message.get("body"):
                message = {**message, "body": b""}
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except Exception:
            logger.exception("unhandled error on %s %s", scope["method"], path)
            if started:
                raise
            await _server_error(send_wrapper, api)


_REPLACED = {b"x-service-api-version", b"access-control-allow-origin", b"access-control-expose-headers"}


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


async def _preflight(scope: Scope, send: Send) -> None:
    headers: list[tuple[bytes, bytes]] = [
        (b"access-control-allow-origin", b"*"),
        (b"access-control-allow-methods", b"GET, HEAD, OPTIONS"),
        (b"access-control-max-age", b"86400"),
        VERSION_HEADER,
    ]
    requested = _header(scope, b"access-control-request-headers")
    if requested is not None:
        headers.append((b"access-control-allow-headers", requested))
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def _server_error(send: Send, api: bool) -> None:
    if api:
        body = error_body(SERVER_ERROR_MESSAGE)
        content_type = JSON_MEDIA_TYPE.encode()
    else:
        body = b"Server Error"
        content_type = b"text/plain; charset=UTF-8"
    start: dict[str, Any] = {
        "type": "http.response.start",
        "status": 500,
        "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())],
    }
    await send(start)
    await send({"type": "http.response.body", "body": body})
