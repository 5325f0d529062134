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
    async with call.services.sessions() as session:
        user = await members.active_user(session, user_id)
        if user is None:
            raise NotFound()
        chat = await members.linked_chat_id(session, user.id)
    return JsonAnswer({"id": user.id, "chat": chat, "name": user.name})
