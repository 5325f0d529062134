"""Resources as anonymous callers see them: visibility, search, versions, counters.

The public reads are one prebuilt statement each, returning plain rows (`readers.py`); the grant,
which writes in a transaction, resolves its resource through the ORM session.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import NamedTuple

from sqlalchemy import ColumnElement, Integer, String, and_, bindparam, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from marketplace.catalogue.members import storable
from marketplace.database.readers import AnySelect, Read, Reader, Reads, Row
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
# The current version number of a resource without a released version, as the update check says it.
NO_RELEASE_TEXT = "(soon)"
# A listing page starting past this many rows walks too many to stay on the event loop's thread.
NEAR_PAGE_ROWS = 1000


# Visible to anonymous callers: resolvable by id.
_VISIBLE: ColumnElement[bool] = and_(Resource.status.in_(PUBLIC_STATUSES), Resource.deleted_at.is_(None))
# Listed by search.
_LISTED: ColumnElement[bool] = and_(
    Resource.status == ResourceStatus.PUBLISHED.value, Resource.deleted_at.is_(None)
)

_RESOURCE_ID = bindparam("resource_id", None, type_=Integer)
_PATTERN = bindparam("pattern", None, type_=String)
_LIMIT = bindparam("limit", None, type_=Integer)
_OFFSET = bindparam("offset", None, type_=Integer)


class VersionRow(NamedTuple):
    id: int
    resource_id: int
    version: str
    title: str
    download: int
    created_at: datetime


class ResourceCard(NamedTuple):
    """A resource with what its public object shows beside its own columns."""

    id: int
    user_id: int
    name: str
    tag: str
    price: Decimal
    category_id: int | None
    unique_id: str | None
    download: int
    icon: str | None
    created_at: datetime
    updated_at: datetime
    slug: str
    current_version: VersionRow | None
    purchases: int
    rating_avg: Decimal | float | None
    reviews_count: int


class CurrentVersion(NamedTuple):
    """The number of the version a visible resource's current-version pointer names, if any."""

    number: str | None


class ResourceStats(NamedTuple):
    """A visible resource's statistics id, if it has one."""

    stats_id: str | None


def _cards() -> AnySelect:
    """Resources with their current version and counters; filters are added per read."""
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
    return select(
        Resource.id,
        Resource.user_id,
        Resource.name,
        Resource.tag,
        Resource.price,
        Resource.category_id,
        Resource.unique_id,
        Resource.download,
        Resource.icon,
        Resource.created_at,
        Resource.updated_at,
        Resource.slug,
        current.id,
        current.resource_id,
        current.version,
        current.title,
        current.download,
        current.created_at,
        purchases,
        rating_avg,
        reviews_count,
    ).outerjoin(current, and_(current.id == Resource.current_version_id, current.resource_id == Resource.id))


def _matching(q_filter: bool) -> tuple[ColumnElement[bool], ...]:
    if not q_filter:
        return (_LISTED,)
    # `%` and `_` in `q` keep their pattern meaning, and the match ignores case.
    return (_LISTED, or_(Resource.name.ilike(_PATTERN), Resource.tag.ilike(_PATTERN)))


_VERSION_COLUMNS = (
    Version.id,
    Version.resource_id,
    Version.version,
    Version.title,
    Version.download,
    Version.created_at,
)

# One statement per read, built once.
VISIBLE_CARD = Read(_cards().where(Resource.id == _RESOURCE_ID, _VISIBLE), "resource_id")
LISTED_COUNT = Read(select(func.count(Resource.id)).where(*_matching(False)))
MATCHING_COUNT = Read(select(func.count(Resource.id)).where(*_matching(True)), "pattern")


def _page(q_filter: bool) -> AnySelect:
    # The page's ids first: the cards' counters are then computed for its rows only, not for every
    # row the offset skips.
    ids = select(Resource.id).where(*_matching(q_filter)).order_by(Resource.id).limit(_LIMIT).offset(_OFFSET)
    return _cards().where(Resource.id.in_(ids)).order_by(Resource.id)


LISTED_PAGE = Read(_page(False), "limit", "offset")
MATCHING_PAGE = Read(_page(True), "pattern", "limit", "offset")
# The resource joined to its versions: no row at all when the resource is not visible, one row of
# nulls when it has no version.
VISIBLE_VERSIONS = Read(
    select(*_VERSION_COLUMNS)
    .select_from(Resource)
    .outerjoin(Version, Version.resource_id == Resource.id)
    .where(Resource.id == _RESOURCE_ID, _VISIBLE)
    .order_by(Version.id),
    "resource_id",
)
VISIBLE_CURRENT_VERSION = Read(
    select(Version.version)
    .select_from(Resource)
    .outerjoin(Version, and_(Version.id == Resource.current_version_id, Version.resource_id == Resource.id))
    .where(Resource.id == _RESOURCE_ID, _VISIBLE),
    "resource_id",
)
# Every visible resource of an id range with its current version number (the version map's rows).
VISIBLE_CURRENT_VERSIONS = Read(
    select(Resource.id, Version.version)
    .select_from(Resource)
    .outerjoin(Version, and_(Version.id == Resource.current_version_id, Version.resource_id == Resource.id))
    .where(Resource.id >= bindparam("first_id", None, type_=Integer))
    .where(Resource.id <= bindparam("last_id", None, type_=Integer), _VISIBLE)
    .order_by(Resource.id),
    "first_id",
    "last_id",
)
HIGHEST_RESOURCE_ID = Read(select(func.max(Resource.id), func.count(Resource.id)))
VISIBLE_STATS_ID = Read(select(Resource.stats_id).where(Resource.id == _RESOURCE_ID, _VISIBLE), "resource_id")


def _version(row: Row, start: int) -> VersionRow:
    return VersionRow(*row[start : start + 6])


def _card(row: Row) -> ResourceCard:
    version = _version(row, 12) if row[12] is not None else None
    return ResourceCard(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        row[5],
        row[6],
        row[7],
        row[8],
        row[9],
        row[10],
        row[11],
        version,
        int(row[18] or 0),
        row[19],
        int(row[20] or 0),
    )


async def visible_resource(session: AsyncSession, resource_id: int) -> Resource | None:
    """The resource if an anonymous caller may see it (Published or Unlisted, not deleted)."""
    result = await session.execute(select(Resource).where(Resource.id == resource_id, _VISIBLE))
    return result.scalar_one_or_none()


async def visible_card(reader: Reader, resource_id: int) -> ResourceCard | None:
    rows = await reader.point(VISIBLE_CARD, resource_id)
    return _card(rows[0]) if rows else None


class SearchPage(NamedTuple):
    rows: list[ResourceCard]
    total: int


async def search_published(reads: Reads, *, q: str | None, page: int, per_page: int) -> SearchPage:
    """One page of Published resources in ascending id, filtered on name or tagline by substring.

    The exact total is counted once per generation of the data and filter, not per request.
    """
    if q is not None and not storable(q):
        return SearchPage(rows=[], total=0)
    pattern = f"%{q}%" if q is not None else None
    total, stamp = reads.counts.get(pattern)
    if total is None:
        counted = await (
            reads.reader.scan(LISTED_COUNT) if pattern is None else reads.reader.scan(MATCHING_COUNT, pattern)
        )
        total = int(counted[0][0])
        if stamp is not None:
            reads.counts.keep(pattern, stamp, total)
    offset = (page - 1) * per_page
    if total <= offset:
        return SearchPage(rows=[], total=total)
    if pattern is not None:
        rows = await reads.reader.scan(MATCHING_PAGE, pattern, per_page, offset)
    elif offset <= NEAR_PAGE_ROWS:
        rows = await reads.reader.point(LISTED_PAGE, per_page, offset)
    else:
        rows = await reads.reader.scan(LISTED_PAGE, per_page, offset)
    return SearchPage(rows=[_card(row) for row in rows], total=total)


async def released_versions(reader: Reader, resource_id: int) -> list[VersionRow] | None:
    """The visible resource's versions, oldest first; None when the resource is not visible."""
    rows = await reader.point(VISIBLE_VERSIONS, resource_id)
    if not rows:
        return None
    return [_version(row, 0) for row in rows if row[0] is not None]


async def current_version(reader: Reader, resource_id: int) -> CurrentVersion | None:
    """The version number the visible resource's current-version pointer names; None when not visible."""
    rows = await reader.point(VISIBLE_CURRENT_VERSION, resource_id)
    return CurrentVersion(rows[0][0]) if rows else None


async def resource_stats(reader: Reader, resource_id: int) -> ResourceStats | None:
    """The visible resource's statistics id; None when the resource is not visible."""
    rows = await reader.point(VISIBLE_STATS_ID, resource_id)
    return ResourceStats(rows[0][0]) if rows else None
