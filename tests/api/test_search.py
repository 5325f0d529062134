"""Route 2: GET /resource/search, the paginated catalogue of published resources, and its limiter."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from marketplace.services import Services
from tests.api.helpers import assert_refused_by
from tests.conftest import Loader, make_client
from tests.profiles import sqlite_only

SEARCH = "/api/v1/resource/search"
PATH = "http://marketplace.test/api/v1/resource/search"
ENVELOPE_KEYS = [
    "current_page", "data", "first_page_url", "from", "last_page", "last_page_url", "links",
    "next_page_url", "path", "per_page", "prev_page_url", "to", "total",
]  # fmt: skip
SERVER_ERROR = b'{"message":"Server Error"}'
TOO_MANY = b'{"message":"Too many requests."}'
SEPARATOR = b'{"url":null,"label":"...","active":false}'
PUBLISHED = [1, 7, 8]  # of the catalogue; 2 is unlisted, 3-5 draft/pending/rejected, 6 deleted

# The search answer on an empty catalogue, byte for byte.
EMPTY_PAGE = (
    b'{"current_page":1,"data":[],'
    b'"first_page_url":"http:\\/\\/marketplace.test\\/api\\/v1\\/resource\\/search?page=1",'
    b'"from":null,"last_page":1,'
    b'"last_page_url":"http:\\/\\/marketplace.test\\/api\\/v1\\/resource\\/search?page=1",'
    b'"links":[{"url":null,"label":"\\u00ab Previous","page":null,"active":false},'
    b'{"url":"http:\\/\\/marketplace.test\\/api\\/v1\\/resource\\/search?page=1","label":"1","page":1,"active":true},'
    b'{"url":null,"label":"Next \\u00bb","page":null,"active":false}],'
    b'"next_page_url":null,"path":"http:\\/\\/marketplace.test\\/api\\/v1\\/resource\\/search",'
    b'"per_page":15,"prev_page_url":null,"to":null,"total":0}'
)


def published(first_id: int, count: int, **extra: Any) -> dict[str, Any]:
    """A fixture document of `count` published resources with ids from `first_id`."""
    rows = [{"id": first_id + n, "user_id": 2, "name": f"Bulk {first_id + n}", **extra} for n in range(count)]
    return {"resources": rows}


def ids(response: httpx.Response) -> list[int]:
    return [row["id"] for row in response.json()["data"]]


def url(page: int) -> str:
    return f"{PATH}?page={page}"


def page_labels(response: httpx.Response) -> list[str]:
    """The labels of the page entries between the previous and next entries."""
    return [link["label"] for link in response.json()["links"][1:-1]]


# --- Envelope -------------------------------------------------------------------------------


@sqlite_only
async def test_empty_catalogue_is_the_exact_envelope_with_null_from_and_to(
    empty_client: httpx.AsyncClient,
) -> None:
    response = await empty_client.get(SEARCH)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == EMPTY_PAGE


@sqlite_only
async def test_envelope_keys_are_in_order_at_top_level(client: httpx.AsyncClient) -> None:
    envelope = (await client.get(SEARCH)).json()
    assert list(envelope) == ENVELOPE_KEYS
    assert (envelope["current_page"], envelope["from"], envelope["to"], envelope["total"]) == (1, 1, 3, 3)
    assert (envelope["last_page"], envelope["per_page"]) == (1, 15)


@sqlite_only
async def test_rows_are_exactly_the_resource_object(client: httpx.AsyncClient) -> None:
    search = await client.get(SEARCH)
    for resource_id in PUBLISHED:
        single = await client.get(f"/api/v1/resource/{resource_id}")
        assert single.content in search.content, resource_id


# --- Which resources, in which order -----------------------------------------------------------


@sqlite_only
async def test_only_published_resources_are_listed(client: httpx.AsyncClient) -> None:
    response = await client.get(SEARCH)
    assert ids(response) == PUBLISHED
    assert response.json()["total"] == 3
    for hidden_name in ("Unlisted", "Draft", "Pending", "Rejected", "Deleted", "Thing"):
        filtered = (await client.get(SEARCH, params={"q": hidden_name})).json()
        assert (filtered["data"], filtered["total"]) == ([], 0), hidden_name


@sqlite_only
async def test_rows_are_in_ascending_id_so_a_new_resource_lands_last(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load(
        {
            "resources": [
                {"id": 30, "user_id": 2, "name": "Thirty", "created_at": "2020-01-01T00:00:00Z"},
                {"id": 20, "user_id": 2, "name": "Twenty", "created_at": "2024-01-01T00:00:00Z"},
                {"id": 25, "user_id": 2, "name": "Twenty-five", "created_at": "2022-01-01T00:00:00Z"},
            ]
        }
    )
    assert ids(await client.get(SEARCH)) == [1, 7, 8, 20, 25, 30]
    assert ids(await client.get(SEARCH, params={"size": "2", "page": "3"})) == [25, 30]


# --- size ---------------------------------------------------------------------------------------


@sqlite_only
async def test_size_is_clamped_to_1_25_defaults_to_15_and_is_1_for_anything_else(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load(published(100, 30))  # 33 published in all
    cases: list[tuple[str, str | None, int]] = [
        ("missing", None, 15),
        ("3", "size=3", 3),
        ("25", "size=25", 25),
        ("26", "size=26", 25),
        ("500", "size=500", 25),
        ("0", "size=0", 1),
        ("negative", "size=-5", 1),
        ("not a number", "size=abc", 1),
        ("decimal", "size=2.5", 1),
        ("empty", "size=", 1),
        ("blank", "size=%20%20", 1),
        ("empty array", "size[]=", 1),
        ("array", "size[]=5", 1),
        ("padded integer is trimmed", "size=%203%20", 3),
    ]
    for case, query, expected in cases:
        response = await client.get(SEARCH + (f"?{query}" if query else ""))
        assert response.status_code == 200, case
        envelope = response.json()
        assert envelope["per_page"] == expected, case
        assert len(envelope["data"]) == expected, case
        assert envelope["last_page"] == -(-33 // expected), case


# --- page ---------------------------------------------------------------------------------------


@sqlite_only
async def test_page_that_is_not_an_integer_of_at_least_1_is_page_1(client: httpx.AsyncClient) -> None:
    cases = ["page=0", "page=-1", "page=abc", "page=2.5", "page=", "page=%20", "page[]=2", "page=1e1"]
    for query in cases:
        response = await client.get(f"{SEARCH}?size=1&{query}")
        assert response.status_code == 200, query
        envelope = response.json()
        assert (envelope["current_page"], ids(response), envelope["from"]) == (1, [1], 1), query
        assert envelope["prev_page_url"] is None, query


@sqlite_only
async def test_page_selects_the_window_of_rows(client: httpx.AsyncClient) -> None:
    second = await client.get(SEARCH, params={"size": "2", "page": "2"})
    envelope = second.json()
    assert ids(second) == [8]
    assert (envelope["current_page"], envelope["from"], envelope["to"], envelope["last_page"]) == (2, 3, 3, 2)
    first = (await client.get(SEARCH, params={"size": "2", "page": "1"})).json()
    assert (first["from"], first["to"]) == (1, 2)
    trimmed = await client.get(f"{SEARCH}?size=1&page=%202%20")
    assert ids(trimmed) == [7]


@sqlite_only
async def test_page_past_the_end_is_200_with_no_rows_and_the_requested_page(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get(SEARCH, params={"page": "9"})
    assert response.status_code == 200
    envelope = response.json()
    assert envelope["current_page"] == 9
    assert envelope["data"] == []
    assert (envelope["from"], envelope["to"]) == (None, None)
    assert (envelope["total"], envelope["last_page"]) == (3, 1)
    assert envelope["next_page_url"] is None
    assert envelope["prev_page_url"] == url(8)
    assert b'"from":null' in response.content
    assert b'"to":null' in response.content


# --- Pagination URLs and links --------------------------------------------------------------------


@sqlite_only
async def test_pagination_urls_carry_only_the_page_number(client: httpx.AsyncClient) -> None:
    response = await client.get(SEARCH, params={"size": "1", "q": "e", "page": "2"})
    envelope = response.json()
    assert envelope["path"] == PATH
    assert envelope["first_page_url"] == url(1)
    assert envelope["prev_page_url"] == url(1)
    assert envelope["next_page_url"] == url(3)
    assert envelope["last_page_url"] == url(envelope["last_page"])
    link_urls = [link["url"] for link in envelope["links"] if link["url"] is not None]
    assert link_urls == [url(1), *(url(n) for n in range(1, envelope["last_page"] + 1)), url(3)]
    assert b'"path":"http:\\/\\/marketplace.test\\/api\\/v1\\/resource\\/search",' in response.content


@sqlite_only
async def test_previous_and_next_entries_carry_their_page_or_null_when_disabled(
    client: httpx.AsyncClient,
) -> None:
    middle = await client.get(SEARCH, params={"size": "1", "page": "2"})
    assert middle.json()["links"][0] == {"url": url(1), "label": "« Previous", "page": 1, "active": False}
    assert middle.json()["links"][-1] == {"url": url(3), "label": "Next »", "page": 3, "active": False}
    assert b'"label":"\\u00ab Previous"' in middle.content
    assert b'"label":"Next \\u00bb"' in middle.content
    last = (await client.get(SEARCH, params={"size": "1", "page": "3"})).json()
    assert last["links"][-1] == {"url": None, "label": "Next »", "page": None, "active": False}
    assert last["next_page_url"] is None
    assert [link["active"] for link in last["links"]] == [False, False, False, True, False]


@sqlite_only
async def test_link_window_lists_every_page_below_14_pages_then_uses_separators(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load(published(100, 23))  # 26 published: 13 pages of 2
    below = await client.get(SEARCH, params={"size": "2", "page": "7"})
    assert page_labels(below) == [str(n) for n in range(1, 14)]
    assert SEPARATOR not in below.content
    await load(published(123, 1))  # 27 published: 14 pages of 2
    at = await client.get(SEARCH, params={"size": "2", "page": "1"})
    assert at.json()["last_page"] == 14
    assert page_labels(at) == [*(str(n) for n in range(1, 11)), "...", "13", "14"]


@sqlite_only
async def test_link_window_keeps_three_pages_on_each_side_of_the_current_page(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load(published(100, 17))  # 20 published: 20 pages of 1
    expected = {
        1: [*range(1, 11), "...", 19, 20],
        7: [*range(1, 11), "...", 19, 20],
        8: [1, 2, "...", *range(5, 12), "...", 19, 20],
        10: [1, 2, "...", *range(7, 14), "...", 19, 20],
        13: [1, 2, "...", *range(10, 17), "...", 19, 20],
        14: [1, 2, "...", *range(11, 21)],
        20: [1, 2, "...", *range(11, 21)],
    }
    for current, labels in expected.items():
        response = await client.get(SEARCH, params={"size": "1", "page": str(current)})
        assert page_labels(response) == [str(label) for label in labels], current
        for link in response.json()["links"][1:-1]:
            if link["label"] == "...":
                assert link == {"url": None, "label": "...", "active": False}, current
            else:
                page = int(link["label"])
                assert link == {"url": url(page), "label": str(page), "page": page, "active": page == current}
    assert SEPARATOR in (await client.get(SEARCH, params={"size": "1", "page": "10"})).content


# --- q ------------------------------------------------------------------------------------------


async def test_q_is_a_case_insensitive_substring_of_name_or_tag_where_percent_and_underscore_widen(
    client: httpx.AsyncClient,
) -> None:
    cases: list[tuple[str, list[int]]] = [
        ("conomie", [1]),  # inside the name
        ("BANKS", [1]),  # inside the tag, other case
        ("free CHAT", [7]),
        ("chat", [7]),  # name and tag of the same row: listed once
        ("half", [8]),
        ("12.5", [8]),
        ("/", [1]),
        ("formatting chat", []),  # not a word search: the substring must occur as given
        ("nothing like this", []),
        ("%", PUBLISHED),
        ("_", PUBLISHED),
        ("F_ee", [7]),
        ("Shops%banks", [1]),
        ("h%t", [7]),  # an h, later a t: only "Free Chat"
    ]
    for q, expected in cases:
        response = await client.get(SEARCH, params={"q": q})
        assert response.status_code == 200, q
        assert ids(response) == expected, q
        assert response.json()["total"] == len(expected), q


@pytest.mark.parametrize(
    "profile",
    [
        "sqlite",
        "postgresql",
    ],
    indirect=True,
)
async def test_q_ignores_the_case_of_non_ascii_letters(client: httpx.AsyncClient) -> None:
    for q in ("économie", "ÉCONOMIE", "Économie"):
        assert ids(await client.get(SEARCH, params={"q": q})) == [1], q


@sqlite_only
async def test_q_is_truncated_to_80_characters(client: httpx.AsyncClient, load: Loader) -> None:
    await load({"resources": [{"id": 20, "user_id": 2, "name": "A" * 80}]})
    # The 81st character would not match: the match only holds if it was cut off.
    assert ids(await client.get(SEARCH, params={"q": "a" * 80 + "Z"})) == [20]
    assert ids(await client.get(SEARCH, params={"q": "a" * 80 + "Z" * 40})) == [20]
    # Within 80 characters every character counts.
    assert ids(await client.get(SEARCH, params={"q": "a" * 79 + "Z"})) == []


@sqlite_only
async def test_q_is_trimmed_and_an_empty_or_blank_q_does_not_filter(client: httpx.AsyncClient) -> None:
    assert ids(await client.get(SEARCH, params={"q": "  Half\t"})) == [8]  # " Half" would match nothing
    for query in ("q=", "q=%20%20"):
        response = await client.get(f"{SEARCH}?{query}")
        assert (response.status_code, ids(response)) == (200, PUBLISHED), query


@sqlite_only
async def test_q_combines_with_size_and_page(client: httpx.AsyncClient) -> None:
    response = await client.get(SEARCH, params={"q": "a", "size": "1", "page": "2"})
    envelope = response.json()
    # "a" occurs in 1 (banks), 7 (Chat) and 8 (Half).
    assert (ids(response), envelope["total"], envelope["last_page"]) == ([7], 3, 3)


@sqlite_only
async def test_array_q_is_a_500_server_error(client: httpx.AsyncClient) -> None:
    for query in ("q[]=x", "q[]=", "q[a]=x", "q[]=x&q[]=y"):
        response = await client.get(f"{SEARCH}?{query}")
        assert (response.status_code, response.content) == (500, SERVER_ERROR), query
        assert response.headers["content-type"] == "application/json", query
        assert response.headers["x-service-api-version"] == "1", query


@sqlite_only
async def test_search_never_answers_422_or_403(client: httpx.AsyncClient) -> None:
    queries = [
        "size=x&page=y&q=" + "z" * 500,
        "size=-1&page=-1",
        "size=99999999999999999999&page=99999999999999999999",
        "page[a]=1&size[b]=2",
        "unknown=1",
    ]
    for query in queries:
        response = await client.get(f"{SEARCH}?{query}")
        assert response.status_code == 200, query


# --- Limiter: 60 per minute per IP, on top of the group limiter --------------------------------


@sqlite_only
async def test_the_61st_search_of_an_ip_is_429_while_other_routes_and_ips_still_answer(
    services: Services,
) -> None:
    async with make_client(services, client_ip="198.51.100.7") as http:
        first = await http.get(SEARCH)
        assert (first.headers["x-ratelimit-limit"], first.headers["x-ratelimit-remaining"]) == ("60", "59")
        for n in range(2, 61):
            assert (await http.get(SEARCH)).status_code == 200, n
        refused = await http.get(SEARCH)
        assert_refused_by(refused, 60)
        # Exhausting search does not block the group: another route answers for the same IP.
        other = await http.get("/api/v1/resource/user", params={"name": "x"})
        assert (other.status_code, other.content) == (200, b"[]")
        # 61 searches (the refused one included) and this call counted against the group's 120.
        assert (other.headers["x-ratelimit-limit"], other.headers["x-ratelimit-remaining"]) == ("120", "58")
        assert (await http.get(SEARCH)).status_code == 429
    async with make_client(services, client_ip="198.51.100.8") as other_ip:
        assert (await other_ip.get(SEARCH)).status_code == 200


@sqlite_only
async def test_the_search_limiter_keys_on_the_forwarded_client_ip(empty_client: httpx.AsyncClient) -> None:
    spent = {"X-Forwarded-For": "203.0.113.5"}
    for n in range(60):
        assert (await empty_client.get(SEARCH, headers=spent)).status_code == 200, n
    assert (await empty_client.get(SEARCH, headers=spent)).status_code == 429
    fresh = await empty_client.get(SEARCH, headers={"X-Forwarded-For": "203.0.113.6"})
    assert fresh.status_code == 200
    assert fresh.headers["x-ratelimit-remaining"] == "59"
