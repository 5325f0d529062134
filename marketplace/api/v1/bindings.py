"""Path parameters resolved to what they name: ids, and `{resource}` to a visible resource."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from marketplace.catalogue.resources import MAX_ID, visible_resource
from marketplace.http.errors import NotFound
from marketplace.models import Resource

_MAX_ID_DIGITS = len(str(MAX_ID))


def parse_id(segment: str) -> int | None:
    """A path segment of plain digits (leading zeros allowed) as an id; None for anything else.

    The digits are counted before they are converted, so that a segment of thousands of digits
    costs nothing and names no row.
    """
    if not segment.isascii() or not segment.isdigit():
        return None
    significant = segment.lstrip("0")
    if not significant or len(significant) > _MAX_ID_DIGITS:
        return None
    value = int(significant)
    return value if value <= MAX_ID else None


def bound_resource_id(segment: str) -> int:
    """`{resource}` as an id, else 404 (whether a visible resource has it is the read's to say)."""
    resource_id = parse_id(segment)
    if resource_id is None:
        raise NotFound()
    return resource_id


def resource_in_path(params: dict[str, str]) -> int | None:
    """The id `{resource}` names, if it is one (for answers that depend on that resource only)."""
    return parse_id(params["resource"])


async def bound_resource(session: AsyncSession, segment: str) -> Resource:
    """`{resource}`: a Published or Unlisted resource by numeric id, else 404."""
    resource_id = parse_id(segment)
    resource = await visible_resource(session, resource_id) if resource_id is not None else None
    if resource is None:
        raise NotFound()
    return resource
