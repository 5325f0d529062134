"""Resources: search, the user-name lookup, versions, the current version and one resource."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import Response

from marketplace.catalogue import members
from marketplace.catalogue.resources import (
    ResourceView,
    current_version_number,
    parse_id,
    released_versions,
    search_published,
    visible_resource,
    visible_resource_view,
)
from marketplace.config import Settings
from marketplace.http.errors import NotFound, ServerError, ValidationFailed
from marketplace.http.json import JsonAnswer, TextAnswer, json_number, timestamp
from marketplace.http.pagination import paginator_envelope
from marketplace.http.routing import ApiCall
from marketplace.models import Resource, Version

DEFAULT_PAGE_SIZE = 15
MAX_PAGE_SIZE = 25
MAX_QUERY_LENGTH = 80
MAX_NAME_LENGTH = 255
NO_RELEASE_TEXT = "(soon)"

_INTEGER = re.compile(r"^[+-]?\d+$")
_PAGE = re.compile(r"^\+?(0|[1-9]\d*)$")


def version_object(version: Version) -> dict[str, Any]:
    return {
        "id": version.id,
        "plugin_id": version.resource_id,
        "version": version.version,
        "title": version.title,
        "download": version.download,
        "created_at": timestamp(version.created_at),
    }


def storage_url(settings: Settings, path: str | None) -> str | None:
    """`{base_url}/storage/{path}` of a stored file; None when nothing is stored."""
    if not path:
        return None
    return f"{settings.public_base_url}/storage/{path.lstrip('/')}"


def resource_object(view: ResourceView, settings: Settings) -> dict[str, Any]:
    resource = view.resource
    rating = view.rating_avg
    return {
        "id": resource.id,
        "user_id": resource.user_id,
        "name": resource.name,
        "tag": resource.tag,
        "price": json_number(resource.price),
        "category_id": resource.category_id,
        "unique_id": resource.unique_id,
        "version_id": view.current_version.id if view.current_version is not None else None,
        "download": resource.download,
        "purchases": view.purchases,
        "logo": storage_url(settings, resource.icon),
        "version": version_object(view.current_version) if view.current_version is not None else None,
        "created_at": timestamp(resource.created_at),
        "updated_at": timestamp(resource.updated_at),
        "slug": resource.slug,
        "rating_avg": json_number(round(float(rating), 2)) if rating is not None else 0,
        "reviews_count": view.reviews_count,
    }


def page_size(call: ApiCall) -> int:
    """`size`: an integer string clamped to 1..25, 15 when missing, 1 for anything else (empty included)."""
    query = call.query()
    if not query.has("size"):
        return DEFAULT_PAGE_SIZE
    raw = query.get("size")
    if isinstance(raw, str) and _INTEGER.match(raw):
        return max(1, min(MAX_PAGE_SIZE, int(raw)))
    return 1


def page_number(call: ApiCall) -> int:
    """`page`: an integer of at least 1; anything else is page 1."""
    raw = call.query().get("page")
    if isinstance(raw, str) and _PAGE.match(raw):
        return max(1, int(raw))
    return 1


def search_filter(call: ApiCall) -> str | None:
    """`q` truncated to 80 characters; an array is a server error, as it always was."""
    raw = call.query().get("q")
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise ServerError()
    return raw[:MAX_QUERY_LENGTH]


async def search(call: ApiCall) -> Response:
    settings = call.services.settings
    per_page = page_size(call)
    page = page_number(call)
    q = search_filter(call)
    async with call.services.sessions() as session:
        found = await search_published(session, q=q, page=page, per_page=per_page)
    data = [resource_object(view, settings) for view in found.rows]
    path = f"{settings.public_base_url}/api/v1/resource/search"
    return JsonAnswer(paginator_envelope(path, data, total=found.total, page=page, per_page=per_page))


async def user_names(call: ApiCall) -> Response:
    name = call.query().get("name")
    if name is None:
        raise ValidationFailed({"name": ["The name field is required."]})
    if not isinstance(name, str):
        raise ValidationFailed({"name": ["The name field must be a string."]})
    if len(name) > MAX_NAME_LENGTH:
        raise ValidationFailed({"name": ["The name field must not be greater than 255 characters."]})
    async with call.services.sessions() as session:
        names = await members.names_starting_with(session, name)
    return JsonAnswer([{"name": found} for found in names])


async def bound_resource(session: AsyncSession, segment: str) -> Resource:
    """`{resource}`: a Published or Unlisted resource by numeric id, else 404."""
    resource_id = parse_id(segment)
    resource = await visible_resource(session, resource_id) if resource_id is not None else None
    if resource is None:
        raise NotFound()
    return resource


async def versions(call: ApiCall) -> Response:
    async with call.services.sessions() as session:
        resource = await bound_resource(session, call.params["resource"])
        released = await released_versions(session, resource.id)
    return JsonAnswer([version_object(version) for version in released])


async def current_version(call: ApiCall) -> Response:
    async with call.services.sessions() as session:
        resource = await bound_resource(session, call.params["resource"])
        number = await current_version_number(session, resource)
    return TextAnswer(number if number is not None else NO_RELEASE_TEXT)


async def show(call: ApiCall) -> Response:
    resource_id = parse_id(call.params["resource"])
    if resource_id is None:
        raise NotFound()
    async with call.services.sessions() as session:
        view = await visible_resource_view(session, resource_id)
    if view is None:
        raise NotFound()
    return JsonAnswer(resource_object(view, call.services.settings))
