"""What every answer of the API carries, whatever produced it.

Under `/api/*`: the `X-Service-Api-Version` header, `Cache-Control: no-cache, private` unless the
answer set its own, and the contract's JSON 500 for any unhandled error. Under `/api/v1/*`: CORS
(preflights answered before routing and limiting). The edge (`edge.py`) applies these rules to
every answer, outside everything else, so that a crash anywhere still gets them.
"""

from __future__ import annotations

from typing import Any

from starlette.types import Scope, Send

from marketplace.http.errors import SERVER_ERROR_MESSAGE
from marketplace.http.json import JSON_MEDIA_TYPE, error_body

Header = tuple[bytes, bytes]

VERSION_HEADER = (b"x-service-api-version", b"1")
CORS_ANSWER_HEADERS = (
    (b"access-control-allow-origin", b"*"),
    (b"access-control-expose-headers", b"X-Service-Api-Version"),
)
API_CACHE_CONTROL = (b"cache-control", b"no-cache, private")
# Headers the envelope owns: an inner answer's own values of them are replaced.
_REPLACED = frozenset({VERSION_HEADER[0], *(name for name, _ in CORS_ANSWER_HEADERS)})

_V1_HEADERS = (VERSION_HEADER, *CORS_ANSWER_HEADERS)
_API_HEADERS = (VERSION_HEADER,)


def is_api_path(path: str) -> bool:
    return path == "/api" or path.startswith("/api/")


def is_cors_path(path: str) -> bool:
    return path.startswith("/api/v1/")


def envelope_headers(path: str) -> tuple[Header, ...]:
    """The headers the envelope adds to every answer of `path` (none outside `/api`)."""
    if is_cors_path(path):
        return _V1_HEADERS
    if is_api_path(path):
        return _API_HEADERS
    return ()


def enveloped(headers: Any, added: tuple[Header, ...], api: bool) -> list[Header]:
    """An answer's headers with the envelope's: owned names replaced, a default cache policy."""
    result: list[Header] = []
    cache_control = False
    for name, value in headers:
        lowered = name.lower()
        if lowered in _REPLACED:
            continue
        if lowered == b"cache-control":
            cache_control = True
        result.append((name, value))
    result.extend(added)
    if api and not cache_control:
        result.append(API_CACHE_CONTROL)
    return result


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


def is_preflight(scope: Scope) -> bool:
    return (
        scope["method"] == "OPTIONS"
        and is_cors_path(scope["path"])
        and header(scope, b"access-control-request-method") is not None
    )


async def answer_preflight(scope: Scope, send: Send) -> None:
    headers: list[Header] = [
        (b"access-control-allow-origin", b"*"),
        (b"access-control-allow-methods", b"GET, HEAD, OPTIONS"),
        (b"access-control-max-age", b"86400"),
        VERSION_HEADER,
    ]
    requested = header(scope, b"access-control-request-headers")
    if requested is not None:
        headers.append((b"access-control-allow-headers", requested))
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def answer_server_error(send: Send, api: bool) -> None:
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
