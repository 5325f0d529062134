"""The Atom feeds of releases under `/feeds`: what each lists, the documents, validators and 304s,
the worker's cache and its freshness after a release, the limiter; on both profiles."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from typing import Any

import feedparser
import httpx
import pytest

from marketplace.feeds.atom import Entry, Feed, Person, render
from marketplace.services import Services, build_services
from tests.api.helpers import assert_refused_by, recorded_statements
from tests.backoffice.conftest import BackOffice
from tests.conftest import Loader, make_client
from tests.test_observability import has_series
from tests.test_worker_cache import until_following

BASE = "http://marketplace.test"
GLOBAL = "/feeds/releases.atom"
ATOM = "{http://www.w3.org/2005/Atom}"
FEEDS = [GLOBAL, "/feeds/resources/1/releases.atom", "/feeds/authors/1/releases.atom"]


# Beside the standard catalogue (tests/catalogue.py: resource 1, Alice's, Published, has versions
# 10, 11 and 12; 2 is Unlisted, 3 a draft, 4 pending, 6 deleted; 7 and 8 are bob's, Published):
# releases of resources no global or author feed lists, and two of bob's, one at the same time as
# version 12, to show that a later id comes first.
def release(version_id: int, resource_id: int, number: str, title: str, created_at: str) -> dict[str, Any]:
    """A version in the fixture format."""
    return {
        "id": version_id,
        "resource_id": resource_id,
        "version": number,
        "title": title,
        "created_at": created_at,
    }


RELEASES: dict[str, Any] = {
    "versions": [
        release(20, 2, "0.9.0", "Hidden build", "2024-06-01T00:00:00Z"),
        release(21, 3, "0.1.0", "Draft", "2024-06-02T00:00:00Z"),
        release(22, 6, "0.1.0", "Gone", "2024-06-03T00:00:00Z"),
        release(23, 4, "0.1.0", "Waiting", "2024-06-04T00:00:00Z"),
        release(24, 7, "1.0.0", "Chat first", "2024-05-02T10:00:00Z"),
        release(25, 8, "2.0.0", "Half two", "2024-05-04T10:00:00Z"),
    ]
}


def parsed(response: httpx.Response) -> Any:
    """The feed as a feed reader reads it, after checking it is well-formed XML and a clean parse."""
    assert response.status_code == 200, response.text
    root = ET.fromstring(response.content)
    assert root.tag == f"{ATOM}feed"
    feed = feedparser.parse(response.content)
    assert not feed.bozo, feed.get("bozo_exception")
    assert feed.version == "atom10"
    return feed


async def read(client: httpx.AsyncClient, path: str) -> Any:
    return parsed(await client.get(path))


def titles(feed: Any) -> list[str]:
    return [entry.title for entry in feed.entries]


def card_of(entry: Any) -> str:
    return str(entry.link)


async def test_the_global_feed_lists_the_releases_of_published_resources_newest_first(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load(RELEASES)
    feed = await read(client, GLOBAL)
    assert titles(feed) == [
        "Half Price 2.0.0",
        "Économie/Pro 2.0.0-beta",
        "Économie/Pro 1.1.0",
        "Free Chat 1.0.0",
        "Économie/Pro 1.0.0",
    ]


async def test_the_resource_feed_lists_that_resources_releases_newest_first(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load(RELEASES)
    feed = await read(client, "/feeds/resources/1/releases.atom")
    assert titles(feed) == ["Économie/Pro 2.0.0-beta", "Économie/Pro 1.1.0", "Économie/Pro 1.0.0"]
    assert {card_of(entry) for entry in feed.entries} == {f"{BASE}/api/v1/resource/1"}


async def test_the_author_feed_lists_the_releases_of_the_authors_published_resources(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load(RELEASES)
    alice = await read(client, "/feeds/authors/1/releases.atom")
    bob = await read(client, "/feeds/authors/2/releases.atom")
    assert titles(alice) == ["Économie/Pro 2.0.0-beta", "Économie/Pro 1.1.0", "Économie/Pro 1.0.0"]
    assert titles(bob) == ["Half Price 2.0.0", "Free Chat 1.0.0"]


@pytest.mark.parametrize(
    "path", [GLOBAL, "/feeds/resources/7/releases.atom", "/feeds/authors/2/releases.atom"]
)
async def test_each_feed_holds_the_latest_50_releases(
    client: httpx.AsyncClient, load: Loader, path: str
) -> None:
    # 60 releases of bob's resource 7, a minute apart; the last ten share one time.
    versions = [
        release(100 + n, 7, f"3.{n}.0", f"Build {n}", f"2025-01-01T00:{min(n, 50):02d}:00Z")
        for n in range(60)
    ]
    await load({"versions": versions})
    feed = await read(client, path)
    assert titles(feed) == [f"Free Chat 3.{n}.0" for n in range(59, 9, -1)]


async def test_an_entry_shows_the_resource_version_release_title_card_author_and_time(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/feeds/resources/1/releases.atom")
    entry = parsed(response).entries[0]
    assert entry.title == "Économie/Pro 2.0.0-beta"
    assert entry.summary == "Not promoted"
    assert entry.link == f"{BASE}/api/v1/resource/1"
    assert [link.rel for link in entry.links] == ["alternate"]
    assert entry.published == entry.updated == "2024-05-04T10:00:00Z"
    assert entry.author == "Alice"
    assert entry.author_detail.href == f"{BASE}/api/v1/author/1"
    # The text as written, not only as parsed.
    raw = ET.fromstring(response.content).find(f"{ATOM}entry")
    assert raw is not None
    assert raw.findtext(f"{ATOM}updated") == raw.findtext(f"{ATOM}published") == "2024-05-04T10:00:00Z"


async def test_entry_ids_are_stable_across_requests_and_unique_per_version(
    client: httpx.AsyncClient, services: Services, load: Loader
) -> None:
    await load(RELEASES)
    first = [entry.id for entry in (await read(client, GLOBAL)).entries]
    services.worker_cache.clear()
    again = [entry.id for entry in (await read(client, GLOBAL)).entries]
    from_resource_feed = [
        entry.id for entry in (await read(client, "/feeds/resources/1/releases.atom")).entries
    ]
    assert first == again
    assert len(set(first)) == len(first) == 5
    assert all(entry_id.startswith("urn:uuid:") for entry_id in first)
    # Version 12 is the same entry in every feed that lists it.
    assert from_resource_feed[0] == first[1]


async def test_each_feed_names_itself_its_page_and_its_newest_time(client: httpx.AsyncClient) -> None:
    expected = {
        GLOBAL: ("Releases", f"{BASE}/api/v1/resource/search", None),
        "/feeds/resources/1/releases.atom": (
            "Releases of Économie/Pro",
            f"{BASE}/api/v1/resource/1",
            "Alice",
        ),
        "/feeds/authors/1/releases.atom": ("Releases by Alice", f"{BASE}/api/v1/author/1", "Alice"),
    }
    ids = set()
    for path, (title, page, author) in expected.items():
        feed = (await read(client, path)).feed
        links = {link.rel: link.href for link in feed.links}
        assert feed.title == title
        assert links == {"self": f"{BASE}{path}", "alternate": page}
        assert feed.updated == "2024-05-04T10:00:00Z"
        assert feed.get("author") == author
        assert feed.generator == "marketplace"
        ids.add(feed.id)
    assert len(ids) == 3


async def test_an_empty_feed_is_dated_by_its_data_not_by_the_clock(
    empty_client: httpx.AsyncClient, load: Loader
) -> None:
    assert (await read(empty_client, GLOBAL)).feed.updated == "1970-01-01T00:00:00Z"
    await load(
        {
            "users": [{"id": 1, "name": "Quiet", "created_at": "2023-03-03T03:03:03Z"}],
            "resources": [{"id": 1, "user_id": 1, "name": "Soon", "created_at": "2023-04-04T04:04:04Z"}],
        }
    )
    assert (
        await read(empty_client, "/feeds/resources/1/releases.atom")
    ).feed.updated == "2023-04-04T04:04:04Z"
    assert (await read(empty_client, "/feeds/authors/1/releases.atom")).feed.updated == "2023-03-03T03:03:03Z"


async def test_the_global_and_author_feeds_leave_out_every_resource_that_is_not_published(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load(RELEASES)
    listed = [
        entry.title
        for path in (GLOBAL, "/feeds/authors/1/releases.atom")
        for entry in (await read(client, path)).entries
    ]
    for hidden in ("Unlisted Utility", "Draft Thing", "Pending Thing", "Deleted Thing"):
        assert not [title for title in listed if title.startswith(hidden)], hidden


async def test_an_unlisted_resource_has_its_feed(client: httpx.AsyncClient, load: Loader) -> None:
    await load(RELEASES)
    feed = await read(client, "/feeds/resources/2/releases.atom")
    assert feed.feed.title == "Releases of Unlisted Utility"
    assert titles(feed) == ["Unlisted Utility 0.9.0"]


@pytest.mark.parametrize("resource", ["3", "4", "5", "6", "999", "2147483648", "abc", "1.0"])
async def test_a_draft_pending_rejected_deleted_or_unknown_resource_has_no_feed(
    client: httpx.AsyncClient, load: Loader, resource: str
) -> None:
    await load(RELEASES)
    response = await client.get(f"/feeds/resources/{resource}/releases.atom")
    assert (response.status_code, response.content) == (404, b'{"message":"Not found."}')


@pytest.mark.parametrize("author", ["3", "4", "999", "x"])
async def test_a_deleted_closed_or_unknown_author_has_no_feed(client: httpx.AsyncClient, author: str) -> None:
    response = await client.get(f"/feeds/authors/{author}/releases.atom")
    assert (response.status_code, response.content) == (404, b'{"message":"Not found."}')


async def test_an_author_without_a_published_release_has_an_empty_feed(client: httpx.AsyncClient) -> None:
    # alicia (6) has no resource; Banned Ben (5) is an author as `/author/5` shows.
    for author, name in (("6", "alicia"), ("5", "Banned Ben")):
        feed = await read(client, f"/feeds/authors/{author}/releases.atom")
        assert feed.feed.title == f"Releases by {name}"
        assert feed.entries == []


HOSTILE_NAME = "Shop <b>&amp; \"quoted\" 'single' ]]> \x01\x08\x0b\x0c\x1b\x1f\ufffe Zoë 😀"
HOSTILE_AUTHOR = "<script>alert(1)</script> & \x07Ω"
HOSTILE_TITLE = "<![CDATA[ x ]]> & </summary>\x02"


def without_xml_illegal(text: str) -> str:
    return "".join(
        c
        for c in text
        if c in "\t\n\r" or "\x20" <= c <= "\ud7ff" or "\ue000" <= c <= "\ufffd" or c >= "\U00010000"
    )


async def test_names_with_markup_controls_and_emoji_still_make_a_feed_every_parser_reads(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load(
        {
            "users": [{"id": 9, "name": HOSTILE_AUTHOR}],
            "resources": [{"id": 9, "user_id": 9, "name": HOSTILE_NAME}],
            "versions": [release(90, 9, "1.0<&>", HOSTILE_TITLE, "2030-01-01T00:00:00Z")],
        }
    )
    for path in (GLOBAL, "/feeds/resources/9/releases.atom", "/feeds/authors/9/releases.atom"):
        feed = await read(client, path)
        entry = feed.entries[0]
        assert entry.title == without_xml_illegal(f"{HOSTILE_NAME} 1.0<&>")
        assert entry.summary == without_xml_illegal(HOSTILE_TITLE)
        assert entry.author == without_xml_illegal(HOSTILE_AUTHOR)


def test_text_xml_cannot_hold_is_dropped_from_the_document() -> None:
    moment = datetime(2024, 1, 1, tzinfo=UTC)
    document = render(
        Feed(
            id="urn:x",
            title="nul\x00 surrogate\ud800 end\uffff",
            updated=moment,
            self_link=f"{BASE}{GLOBAL}?a=1&b=\x00",
            link=BASE,
            entries=[Entry("urn:y", "t\x00", "s\x00", BASE, moment, moment, Person("\x00p"))],
        )
    )
    root = ET.fromstring(document)
    assert root.findtext(f"{ATOM}title") == "nul surrogate end"
    self_link = root.find(f"{ATOM}link[@rel='self']")
    assert self_link is not None
    assert self_link.get("href") == f"{BASE}{GLOBAL}?a=1&b="
    assert root.findtext(f"{ATOM}entry/{ATOM}author/{ATOM}name") == "p"


@pytest.mark.parametrize("path", FEEDS)
async def test_a_feed_is_atom_in_utf8_without_the_api_headers(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert response.headers["content-type"] == "application/atom+xml; charset=utf-8"
    assert response.content.startswith(b'<?xml version="1.0" encoding="utf-8"?>\n')
    assert "x-service-api-version" not in response.headers
    assert "access-control-allow-origin" not in response.headers
    parsed(response)


@pytest.mark.parametrize("path", FEEDS)
async def test_every_feed_carries_an_etag_of_its_bytes_and_its_last_modified_time(
    client: httpx.AsyncClient, path: str
) -> None:
    response = await client.get(path)
    etag = response.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"') and not etag.startswith("W/")
    assert response.headers["last-modified"] == "Sat, 04 May 2024 10:00:00 GMT"
    assert response.headers["cache-control"] == "no-cache"
    again = await client.get(path)
    assert (again.content, again.headers["etag"]) == (response.content, etag)


async def test_two_workers_write_the_same_bytes_and_validators(
    client: httpx.AsyncClient, services: Services
) -> None:
    other_worker = build_services(services.settings)
    try:
        async with make_client(other_worker, "10.0.0.2") as other:
            for path in FEEDS:
                mine, theirs = await client.get(path), await other.get(path)
                assert mine.content == theirs.content
                assert mine.headers["etag"] == theirs.headers["etag"]
                assert mine.headers["last-modified"] == theirs.headers["last-modified"]
    finally:
        await other_worker.close()


def assert_not_modified(response: httpx.Response, etag: str) -> None:
    assert response.status_code == 304
    assert response.content == b""
    assert response.headers["etag"] == etag
    assert response.headers["last-modified"] == "Sat, 04 May 2024 10:00:00 GMT"
    assert "content-type" not in response.headers
    assert "content-length" not in response.headers
    assert response.headers["x-ratelimit-limit"] == "120"


@pytest.mark.parametrize("path", FEEDS)
async def test_a_matching_if_none_match_answers_304_when_the_feed_is_read_afresh(
    client: httpx.AsyncClient, services: Services, path: str
) -> None:
    etag = (await client.get(path)).headers["etag"]
    services.worker_cache.clear()
    with recorded_statements(services.engine) as statements:
        response = await client.get(path, headers={"If-None-Match": etag})
    assert statements != []
    assert_not_modified(response, etag)


@pytest.mark.parametrize("path", FEEDS)
async def test_a_matching_if_none_match_answers_304_from_the_kept_feed(
    client: httpx.AsyncClient, services: Services, path: str
) -> None:
    await until_following(services)
    etag = (await client.get(path)).headers["etag"]
    with recorded_statements(services.engine) as statements:
        response = await client.get(path, headers={"If-None-Match": etag})
    assert statements == []
    assert_not_modified(response, etag)


@pytest.mark.parametrize(
    "listed",
    [
        "{etag}",
        "W/{etag}",
        '"other", {etag}',
        '"other",W/{etag} , "more"',
        "*",
        " * ",
    ],
)
async def test_if_none_match_matches_by_weak_comparison_in_a_list_or_as_a_star(
    client: httpx.AsyncClient, listed: str
) -> None:
    etag = (await client.get(GLOBAL)).headers["etag"]
    response = await client.get(GLOBAL, headers={"If-None-Match": listed.format(etag=etag)})
    assert_not_modified(response, etag)


async def test_if_none_match_over_several_header_lines_is_one_list(client: httpx.AsyncClient) -> None:
    etag = (await client.get(GLOBAL)).headers["etag"]
    response = await client.get(GLOBAL, headers=[("If-None-Match", '"other"'), ("If-None-Match", etag)])
    assert_not_modified(response, etag)


async def test_if_none_match_takes_precedence_over_if_modified_since(client: httpx.AsyncClient) -> None:
    first = await client.get(GLOBAL)
    later = "Fri, 01 Jan 2100 00:00:00 GMT"
    stale = await client.get(GLOBAL, headers={"If-None-Match": '"stale"', "If-Modified-Since": later})
    assert (stale.status_code, stale.content) == (200, first.content)
    fresh = await client.get(
        GLOBAL,
        headers={
            "If-None-Match": first.headers["etag"],
            "If-Modified-Since": "Mon, 01 Jan 1990 00:00:00 GMT",
        },
    )
    assert fresh.status_code == 304


@pytest.mark.parametrize(
    "since",
    ["Sat, 04 May 2024 10:00:00 GMT", "Sat, 04 May 2024 10:00:01 GMT", "Fri, 01 Jan 2100 00:00:00 GMT"],
)
async def test_if_modified_since_at_or_after_last_modified_answers_304(
    client: httpx.AsyncClient, since: str
) -> None:
    etag = (await client.get(GLOBAL)).headers["etag"]
    assert_not_modified(await client.get(GLOBAL, headers={"If-Modified-Since": since}), etag)


@pytest.mark.parametrize(
    "headers",
    [
        {"If-None-Match": '"0123456789abcdef0123456789abcdef"'},
        {"If-None-Match": 'W/"0123456789abcdef0123456789abcdef"'},
        {"If-Modified-Since": "Sat, 04 May 2024 09:59:59 GMT"},
        {"If-Modified-Since": "not a date"},
        {"If-Modified-Since": ""},
        {"If-Modified-Since": "Sat, 99 Foo 2024 10:00:00 GMT"},
    ],
)
async def test_a_stale_or_invalid_validator_answers_the_whole_feed(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    first = await client.get(GLOBAL)
    response = await client.get(GLOBAL, headers=headers)
    assert (response.status_code, response.content) == (200, first.content)
    assert response.headers["etag"] == first.headers["etag"]


async def test_a_feed_that_changed_answers_200_to_its_old_validators(
    client: httpx.AsyncClient, load: Loader
) -> None:
    old = await client.get(GLOBAL)
    await load(RELEASES)
    response = await client.get(GLOBAL, headers={"If-None-Match": old.headers["etag"]})
    assert response.status_code == 200
    assert response.headers["etag"] != old.headers["etag"]
    assert titles(parsed(response))[0] == "Half Price 2.0.0"


@pytest.mark.parametrize("path", FEEDS)
async def test_head_answers_like_get_without_a_body(client: httpx.AsyncClient, path: str) -> None:
    got = await client.get(path)
    head = await client.head(path)
    assert (head.status_code, head.content) == (200, b"")
    for name in ("content-type", "content-length", "etag", "last-modified", "cache-control"):
        assert head.headers[name] == got.headers[name], name
    conditional = await client.head(path, headers={"If-None-Match": got.headers["etag"]})
    assert (conditional.status_code, conditional.content) == (304, b"")


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
async def test_other_methods_answer_405_allowing_get_and_head(client: httpx.AsyncClient, method: str) -> None:
    for path in FEEDS:
        response = await client.request(method, path)
        assert response.status_code == 405, path
        assert response.headers["allow"] == "GET, HEAD"


@pytest.mark.parametrize(
    "path",
    [
        "/feeds/",
        "/feeds/nowhere.atom",
        "/feeds/releases.rss",
        "/feeds/resources/1",
        "/feeds/authors/1/releases",
    ],
)
async def test_unknown_paths_under_feeds_answer_404(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert (response.status_code, response.content) == (404, b'{"message":"Not found."}')


@pytest.mark.parametrize("path", FEEDS)
async def test_a_repeated_feed_read_is_answered_without_the_database(
    client: httpx.AsyncClient, services: Services, path: str
) -> None:
    await until_following(services)
    first = await client.get(path)
    with recorded_statements(services.engine) as statements:
        again = await client.get(path)
    assert statements == []
    assert again.content == first.content


@pytest.fixture
def back_office(services: Services) -> BackOffice:
    return BackOffice(services.settings)


@pytest.mark.parametrize("path", FEEDS)
async def test_a_release_shows_at_once_in_every_feed_that_lists_it(
    client: httpx.AsyncClient, services: Services, back_office: BackOffice, path: str
) -> None:
    await until_following(services)
    await client.get(path)
    assert titles(await read(client, path))[0] == "Économie/Pro 2.0.0-beta"  # kept now
    await back_office.ok("resources", "release", "1", "--version", "3.0.0", "--title", "Third")
    feed = await read(client, path)
    assert titles(feed)[0] == "Économie/Pro 3.0.0"
    assert feed.entries[0].summary == "Third"


async def test_a_release_of_another_resource_keeps_a_resources_feed(
    client: httpx.AsyncClient, services: Services, back_office: BackOffice
) -> None:
    await until_following(services)
    await client.get("/feeds/resources/1/releases.atom")
    await back_office.ok("resources", "release", "7", "--version", "9.0.0", "--title", "Other")
    with recorded_statements(services.engine) as statements:
        await client.get("/feeds/resources/1/releases.atom")
    assert statements == []
    assert titles(await read(client, GLOBAL))[0] == "Free Chat 9.0.0"


async def test_the_feeds_limiter_admits_120_requests_a_minute_then_answers_429(
    client: httpx.AsyncClient,
) -> None:
    counts = []
    for _ in range(120):
        response = await client.get(GLOBAL)
        assert response.status_code == 200
        counts.append((response.headers["x-ratelimit-limit"], response.headers["x-ratelimit-remaining"]))
    assert counts == [("120", str(left)) for left in range(119, -1, -1)]
    for path in FEEDS:
        assert_refused_by(await client.get(path), 120)
    # The feeds' budget is their own: the API still answers.
    api = await client.get("/api/v1/resource/1")
    assert (api.status_code, api.headers["x-ratelimit-remaining"]) == (200, "119")


async def test_the_feeds_are_labelled_by_route_in_metrics_and_their_limiter_exists_from_the_start(
    client: httpx.AsyncClient,
) -> None:
    assert has_series(
        (await client.get("/metrics")).text, "marketplace_rate_limit_refusals_total", limiter="feeds"
    )
    for path in (*FEEDS, "/feeds/resources/3/releases.atom"):
        await client.get(path)
    text = (await client.get("/metrics")).text
    for route, status in (
        ("feeds.releases", "200"),
        ("feeds.resource", "200"),
        ("feeds.author", "200"),
        ("feeds.resource", "404"),
    ):
        assert has_series(text, "marketplace_http_requests_total", route=route, method="GET", status=status)
