"""Releases as the public feeds list them: the latest versions of visible resources, newest first.

A release is a version row of a resource, listed under the catalogue's own visibility rules
(`resources.py`): the global and author feeds list Published resources only (the rule search
lists by), one resource's feed any resource an anonymous caller may resolve (Published or
Unlisted, not deleted). An author's feed is an active author's, as `/author/{user}` shows them
(`members.active_author`: not closed, not deleted). Each feed is one prebuilt statement
(`readers.py`), its rows ordered by the version's creation time, then id, newest first, at most
`FEED_ENTRIES` of them.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from sqlalchemy import ColumnElement, Integer, and_, bindparam, literal_column, select

from marketplace.catalogue.resources import _LISTED, _VISIBLE
from marketplace.database.readers import Read, Reader, Row
from marketplace.models import Resource, User, Version

# The most entries a feed holds.
FEED_ENTRIES = 50

# The same rule as `members.active_author`, inside the author feed's one statement.
_ACTIVE_AUTHOR: ColumnElement[bool] = and_(User.deleted_at.is_(None), User.closed.is_(False))
# Written in the statement rather than bound: a bound limit makes PostgreSQL's generic plan of a
# prepared statement guess a tenth of the rows, and miss the walk of an index that stops early.
_FEED_BOUND = literal_column(str(FEED_ENTRIES), Integer)
_NEWEST_FIRST = (Version.created_at.desc(), Version.id.desc())

_RELEASE_COLUMNS = (
    Version.id,
    Version.version,
    Version.title,
    Version.created_at,
    Resource.id,
    Resource.name,
    User.id,
    User.name,
)


class Release(NamedTuple):
    """A version of a resource, with what a feed entry shows of its resource and author."""

    version_id: int
    version: str
    title: str
    created_at: datetime
    resource_id: int
    resource_name: str
    author_id: int
    author_name: str


class ResourceReleases(NamedTuple):
    """A visible resource and its latest releases, newest first."""

    id: int
    name: str
    created_at: datetime
    author_id: int
    author_name: str
    releases: list[Release]


class AuthorReleases(NamedTuple):
    """An active author and the latest releases of their Published resources, newest first."""

    id: int
    name: str
    created_at: datetime
    releases: list[Release]


# Every release of a Published resource. Served best by an index of versions on (created_at, id),
# walked backwards until 50 rows pass the resource's filter.
LATEST_RELEASES = Read(
    select(*_RELEASE_COLUMNS)
    .select_from(Version)
    .join(Resource, Resource.id == Version.resource_id)
    .join(User, User.id == Resource.user_id)
    .where(_LISTED)
    .order_by(*_NEWEST_FIRST)
    .limit(_FEED_BOUND)
)
# The resource joined to its versions: no row when it is not visible, one row of nulls for the
# version when it has none.
RESOURCE_RELEASES = Read(
    select(Resource.created_at, *_RELEASE_COLUMNS)
    .select_from(Resource)
    .join(User, User.id == Resource.user_id)
    .outerjoin(Version, Version.resource_id == Resource.id)
    .where(Resource.id == bindparam("resource_id", None, type_=Integer), _VISIBLE)
    .order_by(*_NEWEST_FIRST)
    .limit(_FEED_BOUND),
    "resource_id",
)
# The author joined to the versions of their Published resources: no row when the author is not
# active, one row of nulls for the rest when none of their Published resources has a version.
AUTHOR_RELEASES = Read(
    select(User.created_at, *_RELEASE_COLUMNS)
    .select_from(
        User.__table__.outerjoin(
            Resource.__table__.join(Version.__table__, Version.resource_id == Resource.id),
            and_(Resource.user_id == User.id, _LISTED),
        )
    )
    .where(User.id == bindparam("user_id", None, type_=Integer), _ACTIVE_AUTHOR)
    .order_by(*_NEWEST_FIRST)
    .limit(_FEED_BOUND),
    "user_id",
)


def _release(row: Row, start: int = 0) -> Release:
    return Release(*row[start : start + len(_RELEASE_COLUMNS)])


async def latest_releases(reader: Reader) -> list[Release]:
    """The latest releases of Published resources, newest first."""
    # A scan: without an index on the versions' creation time, the database reads every version.
    return [_release(row) for row in await reader.scan(LATEST_RELEASES)]


async def resource_releases(reader: Reader, resource_id: int) -> ResourceReleases | None:
    """The visible resource's latest releases; None when the resource is not visible."""
    rows = await reader.point(RESOURCE_RELEASES, resource_id)
    if not rows:
        return None
    # The resource's created_at, then a release's columns, whose resource and author are never null.
    first = rows[0]
    return ResourceReleases(
        first[5],
        first[6],
        first[0],
        first[7],
        first[8],
        [_release(row, 1) for row in rows if row[1] is not None],
    )


async def author_releases(reader: Reader, user_id: int) -> AuthorReleases | None:
    """The active author's latest releases of Published resources; None when the author is not active."""
    rows = await reader.point(AUTHOR_RELEASES, user_id)
    if not rows:
        return None
    # The author's created_at, then a release's columns, whose author is never null.
    first = rows[0]
    return AuthorReleases(
        first[7], first[8], first[0], [_release(row, 1) for row in rows if row[1] is not None]
    )
