"""Chat-bot routes: sign-in redirect, a member's accesses, granting a resource, a chat server's card."""

from __future__ import annotations

import hmac
from typing import Any

from starlette.responses import Response

from marketplace.api.v1.bindings import bound_resource
from marketplace.api.v1.objects import access_object, storage_url
from marketplace.catalogue import members
from marketplace.catalogue.access_grants import GrantOutcome, grant_access
from marketplace.database.conflicts import retrying
from marketplace.http.errors import ApiError, NotFound
from marketplace.http.json import EncodedJsonAnswer, JsonAnswer, encode
from marketplace.http.routing import ApiCall
from marketplace.upstream.chat_widget import fetch_chat_server

# The cache of upstream answers, as metrics name it.
SERVER_CACHE = "chat-server"
CHAT_SERVER_TTL_SECONDS = 600


async def authentication(call: ApiCall) -> Response:
    # `code` and `state` of the older callback are dropped: the website runs the sign-in flow now.
    settings = call.services.settings
    location = f"{settings.public_base_url}/auth/{settings.chat_name}/redirect"
    return Response(status_code=302, headers={"Location": location, "Cache-Control": "no-cache, private"})


async def member_accesses(call: ApiCall) -> Response:
    settings = call.services.settings
    chat_id = (await call.input()).get(settings.chat_name)
    if not isinstance(chat_id, str):
        raise ApiError(400, settings.platform_names.chat_not_found)
    reader = call.services.reads.reader
    member = await members.member_by_chat_id(reader, chat_id)
    if member is None:
        raise NotFound()
    accesses = await members.active_accesses(reader, member.id)
    return JsonAnswer([access_object(access) for access in accesses])


async def member(call: ApiCall) -> Response:
    settings = call.services.settings
    reader = call.services.reads.reader
    user = await members.member_by_chat_id(reader, call.params["user"])
    if user is None:
        raise NotFound()
    accesses = await members.active_accesses(reader, user.id)
    return JsonAnswer(
        {
            "user": {"name": user.name, "id": user.id, "avatar": storage_url(settings, user.avatar)},
            "plugins": [access_object(access) for access in accesses],
        }
    )


def secret_matches(sent: Any, configured: str | None) -> bool:
    """Constant-time comparison; no configured secret refuses everything."""
    if not configured or not isinstance(sent, str):
        return False
    return hmac.compare_digest(sent.encode("utf-8"), configured.encode("utf-8"))


async def grant(call: ApiCall) -> Response:
    services = call.services
    # Read before a connection is taken (the body is in memory already; see http/body.py).
    password = (await call.input()).get("custom_password")

    async def transaction() -> GrantOutcome:
        async with services.write_sessions() as session:
            resource = await bound_resource(session, call.params["resource"])
            if not secret_matches(password, services.settings.chat_grant_secret):
                raise ApiError(403, "")
            user_id = await members.member_id_by_chat_id(session, call.params["user"])
            if user_id is None:
                raise NotFound()
            return await grant_access(
                session,
                user_id=user_id,
                resource_id=resource.id,
                via=call.route.name,
                ip_hash=services.hash_ip(call.client_ip),
            )

    # A write that meets an operator's is run again whole (marketplace/database/conflicts.py).
    outcome = await retrying(transaction)
    return JsonAnswer({"message": outcome.value})


async def server(call: ApiCall) -> Response:
    server_id = call.params["serverId"]
    if not (server_id.isascii() and server_id.isdigit()):
        raise NotFound()
    services = call.services

    async def fetch() -> bytes | None:
        found = await fetch_chat_server(
            services.http,
            services.settings.chat_api_url,
            server_id,
            services.settings.upstream_timeout_seconds,
        )
        return encode({"id": found.id, "name": found.name, "invite": found.invite}) if found else None

    body = await services.answers.remember(SERVER_CACHE, (server_id,), CHAT_SERVER_TTL_SECONDS, fetch)
    if body is None:
        raise NotFound()
    return EncodedJsonAnswer(body)
