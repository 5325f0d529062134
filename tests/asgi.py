"""ASGI messages for tests that call the app (or a request parser) directly, byte for byte."""

from __future__ import annotations

from typing import Any


def http_scope(
    method: str,
    path: str,
    headers: list[tuple[bytes, bytes]] | None = None,
    *,
    query: bytes = b"",
    client: tuple[str, int] = ("127.0.0.1", 50000),
) -> dict[str, Any]:
    """The scope of an HTTP/1.1 request to the test host, with `path` exactly as given."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [(b"host", b"marketplace.test"), *(headers or [])],
        "client": client,
        "server": ("marketplace.test", 80),
    }
