"""Resources as anonymous callers see them: visibility, search, versions, counters."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import ColumnElement, Row, Select, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from marketplace.catalogue.members import storable
from marketplace.models import (
    PUBLIC_STATUSES,
    Access,
    AccessSource,
    Resource,
    ResourceStatus,
    Review,
    Version,
)

# Ids are 32-bit on every supported database; a larger number names no row.
MAX_ID = 2**31 - 1


# Visible to anonymous callers: resolvable by id.
_VISIBLE: ColumnElement[bool] = and_(Resource.status.in_(PUBLIC_STATUSES), Resource.deleted_at.is_(None))
# Listed by search.
_LISTED: ColumnElement[bool] = and_(
    Resource.status == ResourceStatus.PUBLISHED.value, Resource.deleted_at.is_(None)
)


@dataclass(frozen=True, slots=True)
class ResourceView:
    """A resource with what its public object shows beside its own columns."""

    resource: Resource
    current_version: Version | None
    purchases: int
    rating_avg: Decimal | float | None
    reviews_count: int


def _view_query() -> Select[Resource, Version, int, Decimal | None, int]:
    current = aliased(Version)
    purchases = (
        select(func.count(Access.id))
        .where(
            Access.resource_id == Resource.id,
            Access.source == AccessSource.PURCHASE.value,
            Access.revoked.is_(False),
        )
        .correlate(Resource)
        .scalar_subquery()
    )
    rating_avg = (
        select(func.avg(Review.rating))
        .where(Review.resource_id == Resource.id)
        .correlate(Resource)
        .scalar_subquery()
    )
    reviews_count = (
        select(func.count(Review.id))
        .where(Review.resource_id == Resource.id)
        .correlate(Resource)
        .scalar_subquery()
    )
    return select(Resource, current, purchases, rating_avg, reviews_count).outerjoin(
        current, and_(current.id == Resource.current_version_id, current.resource_id == Resource.id)
    )


# Built once: constructing this statement costs more than running it.
_VIEW_QUERY = _view_query()


def _as_view(row: Row[Resource, Version, int, Decimal | None, int]) -> ResourceView:
    resource, version, purchases, rating_avg, reviews_count = row
    return ResourceView(resource, version, int(purchases or 0), rating_avg, int(reviews_count or 0))


async def visible_resource(session: AsyncSession, resource_id: int) -> Resource | None:
    """The resource if an anonymous caller may see it (Published or Unlisted, not deleted)."""
    result = await session.execute(select(Resource).where(Resource.id == resource_id, _VISIBLE))
    return result.scalar_one_or_none()


async def visible_resource_view(session: AsyncSession, resource_id: int) -> ResourceView | None:
    result = await session.execute(_VIEW_QUERY.where(Resource.id == resource_id, _VISIBLE))
    row = result.one_or_none()
    return _as_view(row) if row is not None else None


@dataclass(frozen=True, slots=True)
class SearchPage:
    rows: list[ResourceView]
    total: int


async def search_published(session: AsyncSession, *, q: str | None, page: int, per_page: int) -> SearchPage:
    """One page of Published resources in ascending id, filtered on name or tagline by substring.

    `%` and `_` in `q` keep their pattern meaning, and the match ignores case.
    """
    conditions = [_LISTED]
    if q is not None and not storable(q):
        return SearchPage(rows=[], total=0)
    if q is not None:
        pattern = f"%{q}%"
        conditions.append(or_(Resource.name.ilike(pattern), Resource.tag.ilike(pattern)))
    total = (await session.execute(select(func.count(Resource.id)).where(*conditions))).scalar_one()
    rows: list[ResourceView] = []
    offset = (page - 1) * per_page
    if total > offset:
        result = await session.execute(
            _VIEW_QUERY.where(*conditions).order_by(Resource.id).limit(per_page).offset(offset)
        )
        rows = [_as_view(row) for row in result]
    return SearchPage(rows=rows, total=int(total))


async def released_versions(session: AsyncSession, resource_id: int) -> list[Version]:
    """The resource's versions, oldest first."""
    result = await session.execute(
        select(Version).where(Version.resource_id == resource_id).order_by(Version.id)
    )
    return list(result.scalars())


async def current_version_number(session: AsyncSession, resource: Resource) -> str | None:
    """The version number the resource's current-version pointer names, if any."""
    if resource.current_version_id is None:
        return None
    result = await session.execute(
        select(Version.version).where(
            Version.id == resource.current_version_id, Version.resource_id == resource.id
        )
    )
    return result.scalar_one_or_none()
