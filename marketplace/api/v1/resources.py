"""Resources: search, the user-name lookup, versions, the current version and one resource."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.responses import Response

from marketplace.api.v1.bindings import bound_resource_id, parse_id
from marketplace.api.v1.current_versions import NOT_VISIBLE
from marketplace.api.v1.objects import resource_object, version_object
from marketplace.catalogue import members
from marketplace.catalogue.resources import (
    NO_RELEASE_TEXT,
    current_version,
    released_versions,
    search_published,
    visible_card,
)
from marketplace.http.errors import NotFound, ServerError, ValidationFailed
from marketplace.http.input import RequestInput
from marketplace.http.json import JsonAnswer, TextAnswer
from marketplace.http.pagination import paginator_envelope
from marketplace.http.routing import ApiCall
from marketplace.http.worker_cache import CachedAnswer

if TYPE_CHECKING:
    from marketplace.services import Services

DEFAULT_PAGE_SIZE = 15
MAX_PAGE_SIZE = 25
MAX_QUERY_LENGTH = 80
MAX_NAME_LENGTH = 255
# The largest page PHP's integer validation accepts (a 64-bit integer); beyond it, page 1.
MAX_PAGE = 2**63 - 1

_INTEGER = re.compile(r"^([+-]?)0*([0-9]+)$")
_PAGE = re.compile(r"^\+?(0|[1-9][0-9]*)$")


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """What a search request asks for, read once from its query string."""

    per_page: int
    page: int
    q: str | None

    @classmethod
    def from_input(cls, query: RequestInput) -> SearchQuery:
        return cls(per_page=_page_size(query), page=_page_number(query), q=_search_filter(query))


def _page_size(query: RequestInput) -> int:
    """`size`: an integer string clamped to 1..25, 15 when missing, 1 for anything else (empty included)."""
    if not query.has("size"):
        return DEFAULT_PAGE_SIZE
    raw = query.get("size")
    found = _INTEGER.match(raw) if isinstance(raw, str) else None
    if found is None:
        return 1
    sign, digits = found.groups()
    if sign == "-":
        return 1
    # Clamped before converting: a number of thousands of digits is simply "more than 25".
    return MAX_PAGE_SIZE if len(digits) > 2 else max(1, min(MAX_PAGE_SIZE, int(digits)))


def _page_number(query: RequestInput) -> int:
    """`page`: an integer of at least 1 (and at most a 64-bit integer); anything else is page 1."""
    raw = query.get("page")
    if not isinstance(raw, str) or not _PAGE.match(raw) or len(raw) > len(str(MAX_PAGE)) + 1:
        return 1
    number = int(raw)
    return number if 1 <= number <= MAX_PAGE else 1


def _search_filter(query: RequestInput) -> str | None:
    """`q` truncated to 80 characters; an array is a server error, as it always was."""
    raw = query.get("q")
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise ServerError()
    return raw[:MAX_QUERY_LENGTH]


async def search(call: ApiCall) -> Response:
    settings = call.services.settings
    wanted = SearchQuery.from_input(call.query())
    found = await search_published(
        call.services.reads, q=wanted.q, page=wanted.page, per_page=wanted.per_page
    )
    data = [resource_object(card, settings) for card in found.rows]
    path = f"{settings.public_base_url}/api/v1/resource/search"
    return JsonAnswer(
        paginator_envelope(path, data, total=found.total, page=wanted.page, per_page=wanted.per_page)
    )


async def user_names(call: ApiCall) -> Response:
    name = call.query().get("name")
    if name is None:
        raise ValidationFailed({"name": ["The name field is required."]})
    if not isinstance(name, str):
        raise ValidationFailed({"name": ["The name field must be a string."]})
    if len(name) > MAX_NAME_LENGTH:
        raise ValidationFailed({"name": ["The name field must not be greater than 255 characters."]})
    names = await members.names_starting_with(call.services.reads.reader, name)
    return JsonAnswer([{"name": found} for found in names])


async def versions(call: ApiCall) -> Response:
    resource_id = bound_resource_id(call.params["resource"])
    released = await released_versions(call.services.reads.reader, resource_id)
    if released is None:
        raise NotFound()
    return JsonAnswer([version_object(version) for version in released])


async def current_version_number(call: ApiCall) -> Response:
    resource_id = bound_resource_id(call.params["resource"])
    current = await current_version(call.services.reads.reader, resource_id)
    if current is None:
        raise NotFound()
    return TextAnswer(current.number if current.number is not None else NO_RELEASE_TEXT)


def current_version_in_map(services: Services, params: dict[str, str]) -> CachedAnswer | None:
    """The update check answered from the worker's version map (`current_versions.py`), when it can."""
    resource_id = bound_resource_id(params["resource"])
    held = services.current_versions.answer(resource_id)
    if held is NOT_VISIBLE:
        raise NotFound()
    return held if isinstance(held, CachedAnswer) else None


async def show(call: ApiCall) -> Response:
    resource_id = parse_id(call.params["resource"])
    if resource_id is None:
        raise NotFound()
    card = await visible_card(call.services.reads.reader, resource_id)
    if card is None:
        raise NotFound()
    return JsonAnswer(resource_object(card, call.services.settings))
