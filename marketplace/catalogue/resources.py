"""Resources as anonymous callers see them: visibility, search, versions, counters.

The public reads are one prebuilt statement each, returning plain rows (`readers.py`); the grant,
which writes in a transaction, resolves its resource through the ORM session.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import NamedTuple

from sqlalchemy import ColumnElement, Integer, and_, bindparam, func, literal_column, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from marketplace.catalogue.members import storable
from marketplace.catalogue.text_search import (
    holds_text,
    holds_text_unindexed,
    prefilter_for,
    search_generation,
    substring_pattern,
    suffix_candidates,
    trigram_candidates,
    walks_the_listing,
)
from marketplace.database.readers import AnySelect, Read, Reader, Reads, Row
from marketplace.models import (
    PUBLIC_STATUSES,
    Resource,
    ResourceCounts,
    ResourceStatus,
    Version,
    rating_average,
)

# Ids are 32-bit on every supported database; a larger number names no row.
MAX_ID = 2**31 - 1
# The current version number of a resource without a released version, as the update check says it.
NO_RELEASE_TEXT = "(soon)"
# The most rows a search page holds (the contract's largest `size`).
MAX_PAGE_ROWS = 25
# A listing page starting past this many rows walks too many to stay on the event loop's thread.
NEAR_PAGE_ROWS = 1000


# Visible to anonymous callers: resolvable by id.
_VISIBLE: ColumnElement[bool] = and_(Resource.status.in_(PUBLIC_STATUSES), Resource.deleted_at.is_(None))
# Listed by search.
_LISTED: ColumnElement[bool] = and_(
    Resource.status == ResourceStatus.PUBLISHED.value, Resource.deleted_at.is_(None)
)

_RESOURCE_ID = bindparam("resource_id", None, type_=Integer)
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
    """Resources with their current version and kept counts (`models/resource_counts.py`);
    filters are added per read."""
    current = aliased(Version)
    return (
        select(
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
            ResourceCounts.purchases,
            rating_average(ResourceCounts.rating_sum, ResourceCounts.rating_count),
            ResourceCounts.rating_count,
        )
        .outerjoin(
            current, and_(current.id == Resource.current_version_id, current.resource_id == Resource.id)
        )
        .outerjoin(ResourceCounts, ResourceCounts.resource_id == Resource.id)
    )


def _matching(q_filter: bool) -> tuple[ColumnElement[bool], ...]:
    if not q_filter:
        return (_LISTED,)
    # `%` and `_` in `q` keep their pattern meaning, and the match ignores case (text_search.py).
    return (_LISTED, holds_text())


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
SEARCH_GENERATION = Read(select(search_generation()))


def _page(q_filter: bool) -> AnySelect:
    # The page's ids first (a range of the status and id index): the cards' joins are then made for
    # its rows only, not for every row the offset skips.
    ids = select(Resource.id).where(*_matching(q_filter)).order_by(Resource.id).limit(_LIMIT).offset(_OFFSET)
    return _cards().where(Resource.id.in_(ids)).order_by(Resource.id)


def _q_page(*conditions: ColumnElement[bool], walked: bool) -> AnySelect:
    # Walked: the listing in id order, each row checked, until the page is full. Collected: every
    # match from an index, then sorted (`id + 0` is not the primary key's order, so the database
    # cannot walk instead).
    order = Resource.id if walked else Resource.id + 0
    ids = select(Resource.id).where(_LISTED, *conditions).order_by(order).limit(_LIMIT).offset(_OFFSET)
    # The page's own bound, written in the statement: PostgreSQL's generic plan of a bound given as
    # a parameter assumes a tenth of the matches, which for a walk it guesses as half the listing
    # makes the cards' plan look costly enough to compile (JIT), 0.8 s a page on 200,000 resources.
    page_bound = literal_column(str(MAX_PAGE_ROWS), Integer)
    return _cards().where(Resource.id.in_(ids)).order_by(Resource.id).limit(page_bound)


def _q_count(*conditions: ColumnElement[bool]) -> AnySelect:
    # With the total, from the same snapshot: the search generation it holds for, and the highest
    # id, a bound of the rows a walk of the listing may read (`walks_the_listing`).
    highest_id = select(func.max(Resource.id)).scalar_subquery()
    return select(search_generation(), func.count(Resource.id), highest_id).where(_LISTED, *conditions)


LISTED_PAGE = Read(_page(False), "limit", "offset")
# A `q` search narrowed by the text index of the database (text_search.py), the rule itself
# checked on each candidate row.
PREFILTERED_COUNT = Read(
    _q_count(trigram_candidates(), holds_text_unindexed()),
    "pattern",
    "prefilter",
    variants={"postgresql": _q_count(suffix_candidates(), holds_text_unindexed())},
)
PREFILTERED_PAGE = Read(
    _q_page(trigram_candidates(), holds_text_unindexed(), walked=False),
    "pattern",
    "prefilter",
    "limit",
    "offset",
    variants={"postgresql": _q_page(suffix_candidates(), holds_text_unindexed(), walked=False)},
)
# A `q` search with no text index to ask: collected where the database's own indexes serve the
# condition (PostgreSQL's trigram indexes), else walked.
MATCHING_COUNT = Read(_q_count(holds_text()), "pattern")
COLLECTED_PAGE = Read(_q_page(holds_text(), walked=False), "pattern", "limit", "offset")
WALKED_PAGE = Read(_q_page(holds_text_unindexed(), walked=True), "pattern", "limit", "offset")
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

    The exact total is counted once per generation of the data and filter, not per request: for
    the listing, until anything is written; for a text search, until what searches find changes
    (`SearchTotals`).
    """
    if q is not None and not storable(q):
        return SearchPage(rows=[], total=0)
    offset = (page - 1) * per_page
    if q is not None:
        return await _search_text(reads, q, per_page=per_page, offset=offset)
    total, stamp = reads.counts.get(None)
    if total is None:
        counted = await reads.reader.scan(LISTED_COUNT)
        total = int(counted[0][0])
        if stamp is not None:
            reads.counts.keep(None, stamp, total)
    if total <= offset:
        return SearchPage(rows=[], total=total)
    if offset <= NEAR_PAGE_ROWS:
        rows = await reads.reader.point(LISTED_PAGE, per_page, offset)
    else:
        rows = await reads.reader.scan(LISTED_PAGE, per_page, offset)
    return SearchPage(rows=[_card(row) for row in rows], total=total)


async def _search_text(reads: Reads, q: str, *, per_page: int, offset: int) -> SearchPage:
    pattern = substring_pattern(q)
    asked = prefilter_for(reads.dialect_name, q)
    generation = (await reads.reader.point(SEARCH_GENERATION))[0][0]
    kept = reads.search_totals.get(pattern, generation)
    if kept is None:
        counted = await (
            reads.reader.scan(PREFILTERED_COUNT, pattern, asked)
            if asked is not None
            else reads.reader.scan(MATCHING_COUNT, pattern)
        )
        counted_under, total, highest_id = counted[0]
        total, highest_id = int(total), int(highest_id or 0)
        reads.search_totals.keep(pattern, int(counted_under), total, highest_id)
    else:
        total, highest_id = kept
    if total <= offset:
        return SearchPage(rows=[], total=total)
    if walks_the_listing(matching=total, listed=highest_id, rows_needed=offset + per_page):
        rows = await reads.reader.scan(WALKED_PAGE, pattern, per_page, offset)
    elif asked is not None:
        rows = await reads.reader.scan(PREFILTERED_PAGE, pattern, asked, per_page, offset)
    elif reads.dialect_name == "postgresql":
        rows = await reads.reader.scan(COLLECTED_PAGE, pattern, per_page, offset)
    else:
        # No index can narrow the rows: walking reads at most the whole listing, collecting reads it all.
        rows = await reads.reader.scan(WALKED_PAGE, pattern, per_page, offset)
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
