"""What the back office's tests read through the API: a member's accesses, a resource's sales."""

from __future__ import annotations

from typing import Any

import httpx


async def member_accesses(api: httpx.AsyncClient, chat_id: str) -> list[dict[str, Any]]:
    """The member's active accesses by both chat routes, which must agree."""
    listed = await api.post("/api/v1/chat", json={"chat": chat_id})
    member = await api.post(f"/api/v1/chat/{chat_id}")
    assert (listed.status_code, member.status_code) == (200, 200)
    plugins: list[dict[str, Any]] = member.json()["plugins"]
    assert listed.json() == plugins
    return plugins


async def access_to(api: httpx.AsyncClient, resource_id: int, chat_id: str) -> dict[str, Any] | None:
    """The member's active access to the resource, if any (at most one)."""
    found = [access for access in await member_accesses(api, chat_id) if access["plugin_id"] == resource_id]
    assert len(found) <= 1
    return found[0] if found else None


async def purchases(api: httpx.AsyncClient, resource_id: int) -> int:
    """The resource card's `purchases`."""
    answer = await api.get(f"/api/v1/resource/{resource_id}")
    assert answer.status_code == 200
    count: int = answer.json()["purchases"]
    return count
