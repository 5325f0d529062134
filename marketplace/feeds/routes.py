"""The `/feeds` routes: Atom feeds of releases, limited and kept by each worker like the catalogue reads.

- `GET /feeds/releases.atom`: the latest 50 releases of Published resources.
- `GET /feeds/resources/{resource}/releases.atom`: one visible resource's latest 50 releases
  (Published or Unlisted, not deleted; else 404).
- `GET /feeds/authors/{user}/releases.atom`: the latest 50 releases of an active author's
  Published resources (a closed, deleted or unknown author: 404; no release: an empty feed).

The routes run on the API's router (`http/routing.py`): first match, 404 and 405 (`Allow: GET,
HEAD`), the `feeds` limiter (120 a minute per client network) with the API's headers and 429, and
each worker's cache of answers (`worker_cache.py`). One resource's feed depends on that resource's
rows; the other feeds on every change. Outside the router, `ConditionalAnswers` turns a 200 the
client already holds into a 304, whether the router read it or kept it.

A feed's `updated` is its newest entry's time, or, with no entry, a time of the data (the
resource's or author's creation, the epoch for the global feed): never the clock, so that every
worker writes the same bytes. Entry and feed ids are `urn:uuid:` names derived from the host of the
base URL and the version's id (or the feed's path), stable whatever serves them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from starlette.responses import Response
from starlette.types import ASGIApp

from marketplace.api.v1.bindings import parse_id, resource_in_path
from marketplace.catalogue import releases
from marketplace.catalogue.releases import Release
from marketplace.feeds.atom import ATOM_MEDIA_TYPE, Entry, Feed, Person, render
from marketplace.http.conditional import ConditionalAnswers, validators
from marketplace.http.errors import NotFound
from marketplace.http.limits import Limit, limit_key
from marketplace.http.routing import ApiCall, ApiRoute, ApiRouter

if TYPE_CHECKING:
    from marketplace.services import Services

PREFIX = "/feeds"

# Every limiter's name: their series exist from the start.
LIMITERS = ("feeds",)

# The date of a feed without any entry and without a date of its own (the global feed).
EPOCH = datetime(1970, 1, 1)
# Feed readers revalidate each time (a 304 costs little); nothing may reuse a feed unasked.
CACHE_CONTROL = "no-cache"


def feeds_limits(ip: str, _params: Mapping[str, str]) -> Sequence[Limit]:
    """Every feed: 120 a minute per client network."""
    return (Limit("feeds", 120, limit_key("feeds", ip)),)


GROUP_LIMITS = (feeds_limits,)


class _Addresses:
    """The absolute addresses and ids a feed of this service writes."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.host = urlsplit(base_url).netloc

    def name(self, path: str) -> str:
        """A stable id: the same on every worker and after every restart for the same host."""
        return "urn:uuid:" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"tag:{self.host}:{path}"))

    def card(self, resource_id: int) -> str:
        return f"{self.base_url}/api/v1/resource/{resource_id}"

    def author(self, user_id: int) -> str:
        return f"{self.base_url}/api/v1/author/{user_id}"

    def feed(self, path: str) -> str:
        return f"{self.base_url}{PREFIX}{path}"


def _entry(addresses: _Addresses, release: Release) -> Entry:
    return Entry(
        id=addresses.name(f"release/{release.version_id}"),
        title=f"{release.resource_name} {release.version}",
        summary=release.title,
        link=addresses.card(release.resource_id),
        published=release.created_at,
        updated=release.created_at,
        author=Person(release.author_name, addresses.author(release.author_id)),
    )


def _answer(feed: Feed) -> Response:
    body = render(feed)
    headers = {**validators(body, feed.updated), "Cache-Control": CACHE_CONTROL}
    return Response(body, media_type=ATOM_MEDIA_TYPE, headers=headers)


def _updated(found: list[Release], otherwise: datetime) -> datetime:
    # Newest first: the first entry is the newest.
    return found[0].created_at if found else otherwise


async def latest(call: ApiCall) -> Response:
    addresses = _Addresses(call.services.settings.public_base_url)
    found = await releases.latest_releases(call.services.reads.reader)
    path = "/releases.atom"
    return _answer(
        Feed(
            id=addresses.name(f"feed{path}"),
            title="Releases",
            updated=_updated(found, EPOCH),
            self_link=addresses.feed(path),
            link=f"{addresses.base_url}/api/v1/resource/search",
            entries=[_entry(addresses, release) for release in found],
        )
    )


async def of_resource(call: ApiCall) -> Response:
    resource_id = parse_id(call.params["resource"])
    found = None
    if resource_id is not None:
        found = await releases.resource_releases(call.services.reads.reader, resource_id)
    if found is None:
        raise NotFound()
    addresses = _Addresses(call.services.settings.public_base_url)
    path = f"/resources/{found.id}/releases.atom"
    return _answer(
        Feed(
            id=addresses.name(f"feed{path}"),
            title=f"Releases of {found.name}",
            updated=_updated(found.releases, found.created_at),
            self_link=addresses.feed(path),
            link=addresses.card(found.id),
            entries=[_entry(addresses, release) for release in found.releases],
            author=Person(found.author_name, addresses.author(found.author_id)),
        )
    )


async def of_author(call: ApiCall) -> Response:
    user_id = parse_id(call.params["user"])
    found = None
    if user_id is not None:
        found = await releases.author_releases(call.services.reads.reader, user_id)
    if found is None:
        raise NotFound()
    addresses = _Addresses(call.services.settings.public_base_url)
    path = f"/authors/{found.id}/releases.atom"
    return _answer(
        Feed(
            id=addresses.name(f"feed{path}"),
            title=f"Releases by {found.name}",
            updated=_updated(found.releases, found.created_at),
            self_link=addresses.feed(path),
            link=addresses.author(found.id),
            entries=[_entry(addresses, release) for release in found.releases],
            author=Person(found.name, addresses.author(found.id)),
        )
    )


ROUTES = (
    ApiRoute("GET", "/releases.atom", "feeds.releases", latest, cached=True),
    ApiRoute(
        "GET",
        "/resources/{resource}/releases.atom",
        "feeds.resource",
        of_resource,
        cached=True,
        resource_of=resource_in_path,
    ),
    ApiRoute("GET", "/authors/{user}/releases.atom", "feeds.author", of_author, cached=True),
)


def feeds_app(services: Services) -> ASGIApp:
    """The ASGI app of every path under `/feeds`."""
    return ConditionalAnswers(ApiRouter(PREFIX, ROUTES, GROUP_LIMITS, services))
