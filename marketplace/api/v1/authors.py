"""Authors: a user's public identity by id."""

from __future__ import annotations

from starlette.responses import Response

from marketplace.api.v1.bindings import parse_id
from marketplace.catalogue import members
from marketplace.http.errors import NotFound
from marketplace.http.json import JsonAnswer
from marketplace.http.routing import ApiCall


async def show(call: ApiCall) -> Response:
    user_id = parse_id(call.params["user"])
    if user_id is None:
        raise NotFound()
    author = await members.active_author(call.services.reads.reader, user_id)
    if author is None:
        raise NotFound()
    # `chat` is the contract's word for the chat platform's name (MARKETPLACE_CHAT_NAME).
    chat_key = call.services.settings.chat_name
    return JsonAnswer({"id": author.id, chat_key: author.chat, "name": author.name})
