"""The ceiling: a bare ASGI app answering constant bytes, served by the same uvicorn as the service.

    uvicorn bench.reference_app:app --workers 2 --no-access-log

Whatever the service does on top of the server costs the difference between the two rates.
"""

from __future__ import annotations

from typing import Any

_START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/plain; charset=UTF-8"), (b"content-length", b"5")],
}
_BODY = {"type": "http.response.body", "body": b"1.1.0"}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send(_START)
    await send(_BODY)
