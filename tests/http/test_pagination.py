"""The paginator envelope of search: link window (three pages on each side), labels, key order, edges."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from marketplace.http.json import encode
from marketplace.http.pagination import paginator_envelope

PATH = "http://marketplace.test/api/v1/resource/search"
ENVELOPE_KEYS = [
    "current_page",
    "data",
    "first_page_url",
    "from",
    "last_page",
    "last_page_url",
    "links",
    "next_page_url",
    "path",
    "per_page",
    "prev_page_url",
    "to",
    "total",
]
SEPARATOR = {"url": None, "label": "...", "active": False}


def envelope(*, total: int, page: int, per_page: int = 1, rows: int | None = None) -> dict[str, Any]:
    """The envelope of page `page`; `rows` rows on it (default: as many as the page holds)."""
    if rows is None:
        rows = max(0, min(per_page, total - (page - 1) * per_page))
    return paginator_envelope(
        PATH, [{"id": i} for i in range(rows)], total=total, page=page, per_page=per_page
    )


def window(links: list[dict[str, Any]]) -> list[int | str]:
    """The entries between previous and next: page numbers, `...` for a separator."""
    return [entry["label"] if entry["url"] is None else entry["page"] for entry in links[1:-1]]


def url(page: int) -> str:
    return f"{PATH}?page={page}"


@pytest.mark.parametrize(
    ("last", "current", "expected"),
    [
        (1, 1, [1]),
        (5, 3, [1, 2, 3, 4, 5]),
        (13, 1, list(range(1, 14))),
        (13, 7, list(range(1, 14))),
        (13, 13, list(range(1, 14))),
    ],
)
def test_fewer_than_14_pages_list_every_page(last: int, current: int, expected: list[int]) -> None:
    assert window(envelope(total=last, page=current)["links"]) == expected


@pytest.mark.parametrize("current", [1, 4, 7])
def test_near_the_start_pages_1_to_10_then_separator_then_the_last_two(current: int) -> None:
    assert window(envelope(total=20, page=current)["links"]) == [*range(1, 11), "...", 19, 20]


def test_at_14_pages_the_start_window_applies() -> None:
    assert window(envelope(total=14, page=7)["links"]) == [*range(1, 11), "...", 13, 14]


@pytest.mark.parametrize("current", [14, 17, 20])
def test_near_the_end_the_first_two_then_separator_then_the_last_ten(current: int) -> None:
    assert window(envelope(total=20, page=current)["links"]) == [1, 2, "...", *range(11, 21)]


def test_at_14_pages_page_8_is_already_near_the_end() -> None:
    assert window(envelope(total=14, page=8)["links"]) == [1, 2, "...", *range(5, 15)]


@pytest.mark.parametrize(("current", "last"), [(8, 20), (10, 20), (13, 20), (50, 100), (8, 15)])
def test_in_the_middle_three_pages_on_each_side_between_separators(current: int, last: int) -> None:
    assert window(envelope(total=last, page=current)["links"]) == [
        1,
        2,
        "...",
        *range(current - 3, current + 4),
        "...",
        last - 1,
        last,
    ]


def test_separator_entry_is_exactly_url_null_label_dots_active_false() -> None:
    links = envelope(total=100, page=50)["links"]
    separators = [entry for entry in links if entry["label"] == "..."]
    assert len(separators) == 2
    for separator in separators:
        assert separator == SEPARATOR
        assert list(separator) == ["url", "label", "active"]


def test_page_entry_keys_are_url_label_page_active_with_string_label() -> None:
    links = envelope(total=3, page=2)["links"]
    assert links[1:-1] == [
        {"url": url(1), "label": "1", "page": 1, "active": False},
        {"url": url(2), "label": "2", "page": 2, "active": True},
        {"url": url(3), "label": "3", "page": 3, "active": False},
    ]
    for entry in links:
        assert list(entry) == ["url", "label", "page", "active"]


def test_only_the_current_page_entry_is_active() -> None:
    links = envelope(total=100, page=50)["links"]
    assert [entry["label"] for entry in links if entry["active"]] == ["50"]


def test_previous_and_next_entries_carry_labels_and_neighbouring_pages() -> None:
    links = envelope(total=5, page=3)["links"]
    assert links[0] == {"url": url(2), "label": "« Previous", "page": 2, "active": False}
    assert links[-1] == {"url": url(4), "label": "Next »", "page": 4, "active": False}


def test_previous_is_disabled_on_the_first_page() -> None:
    data = envelope(total=5, page=1)
    assert data["links"][0] == {"url": None, "label": "« Previous", "page": None, "active": False}
    assert data["prev_page_url"] is None
    assert data["next_page_url"] == url(2)


def test_next_is_disabled_on_the_last_page() -> None:
    data = envelope(total=5, page=5)
    assert data["links"][-1] == {"url": None, "label": "Next »", "page": None, "active": False}
    assert data["next_page_url"] is None
    assert data["prev_page_url"] == url(4)


def test_previous_and_next_labels_are_json_escaped_like_php() -> None:
    body = encode(envelope(total=1, page=1)["links"])
    assert b'"label":"\\u00ab Previous"' in body
    assert b'"label":"Next \\u00bb"' in body


def test_envelope_keys_are_in_contract_order() -> None:
    assert list(envelope(total=40, page=2, per_page=15)) == ENVELOPE_KEYS


def test_envelope_of_a_middle_page() -> None:
    data = envelope(total=40, page=2, per_page=15)
    assert {key: value for key, value in data.items() if key not in ("data", "links")} == {
        "current_page": 2,
        "first_page_url": url(1),
        "from": 16,
        "last_page": 3,
        "last_page_url": url(3),
        "next_page_url": url(3),
        "path": PATH,
        "per_page": 15,
        "prev_page_url": url(1),
        "to": 30,
        "total": 40,
    }


def test_from_and_to_of_a_short_last_page() -> None:
    data = envelope(total=40, page=3, per_page=15)
    assert (data["from"], data["to"]) == (31, 40)


def test_no_rows_gives_null_from_and_to_and_one_last_page() -> None:
    data = envelope(total=0, page=1, per_page=15)
    assert data["data"] == []
    assert data["from"] is None
    assert data["to"] is None
    assert data["total"] == 0
    assert data["last_page"] == 1
    assert data["last_page_url"] == url(1)
    assert data["prev_page_url"] is None
    assert data["next_page_url"] is None
    assert data["links"] == [
        {"url": None, "label": "« Previous", "page": None, "active": False},
        {"url": url(1), "label": "1", "page": 1, "active": True},
        {"url": None, "label": "Next »", "page": None, "active": False},
    ]


def test_a_page_past_the_end_echoes_the_page_and_points_back() -> None:
    data = envelope(total=3, page=9, per_page=15, rows=0)
    assert data["current_page"] == 9
    assert data["data"] == []
    assert data["from"] is None
    assert data["to"] is None
    assert data["last_page"] == 1
    assert data["prev_page_url"] == url(8)
    assert data["next_page_url"] is None
    assert data["links"][0] == {"url": url(8), "label": "« Previous", "page": 8, "active": False}
    assert data["links"][-1] == {"url": None, "label": "Next »", "page": None, "active": False}
    assert not any(entry["active"] for entry in data["links"])


def test_first_page_url_is_always_page_1() -> None:
    assert envelope(total=100, page=50)["first_page_url"] == url(1)


async def test_search_past_the_end_over_http(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/v1/resource/search", params={"page": "99"})
    assert response.status_code == 200
    data = response.json()
    assert list(data) == ENVELOPE_KEYS
    assert data["current_page"] == 99
    assert data["data"] == []
    assert (data["from"], data["to"]) == (None, None)
    assert data["last_page"] == 1
    assert data["prev_page_url"] == url(98)
    assert data["next_page_url"] is None


async def test_empty_catalogue_search_over_http(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.get("/api/v1/resource/search")
    assert response.status_code == 200
    data = response.json()
    assert data["total"] == 0
    assert data["last_page"] == 1
    assert (data["from"], data["to"]) == (None, None)
    assert data["per_page"] == 15
    assert b'"label":"\\u00ab Previous"' in response.content
    assert (
        b'"first_page_url":"http:\\/\\/marketplace.test\\/api\\/v1\\/resource\\/search?page=1"'
        in response.content
    )
