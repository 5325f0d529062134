"""The chat platform's public server widget (`{chat_api_url}/guilds/{id}/widget.json`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from marketplace.upstream.calls import get_json

if TYPE_CHECKING:
    import httpx

# The upstream's name in metrics and logs.
UPSTREAM = "chat"


@dataclass(frozen=True, slots=True)
class ChatServer:
    id: str
    name: str
    invite: str | None


async def fetch_chat_server(
    http: httpx.AsyncClient, chat_api_url: str, server_id: str, timeout_seconds: float
) -> ChatServer | None:
    """The server's public information, or None for any failure (disabled widget, unknown server,
    network error, timeout, unexpected body)."""
    widget = await get_json(http, UPSTREAM, f"{chat_api_url}/guilds/{server_id}/widget.json", timeout_seconds)
    if not isinstance(widget, dict):
        return None
    widget_id = widget.get("id")
    name = widget.get("name")
    if isinstance(widget_id, bool) or not isinstance(widget_id, str | int) or not isinstance(name, str):
        return None
    invite = widget.get("instant_invite")
    return ChatServer(id=str(widget_id), name=name, invite=invite if isinstance(invite, str) else None)
