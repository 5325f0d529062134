"""`marketplace resources list` and `show`: finding a resource without SQL, on both profiles."""

from __future__ import annotations

import pytest

from tests.backoffice.conftest import BackOffice
from tests.backoffice.finding import listed, shop, shown
from tests.conftest import Loader


@pytest.fixture(autouse=True)
async def loaded(load: Loader) -> None:
    await load(shop())


async def ids(back_office: BackOffice, *options: str) -> list[int]:
    return [row["id"] for row in await listed(back_office, "resources", "list", *options)]


async def test_resources_list_every_resource_newest_first_deleted_included(back_office: BackOffice) -> None:
    assert await ids(back_office) == [5, 2, 4, 3, 1]


async def test_resources_list_row_names_author_and_current_version(back_office: BackOffice) -> None:
    rows = {row["id"]: row for row in await listed(back_office, "resources", "list")}
    assert rows[1] == {
        "id": 1,
        "name": "Économie Pro",
        "author_id": 1,
        "author_name": "Alice",
        "status": "published",
        "price": "9.99",
        "current_version": "1.1.0",
        "deleted_at": None,
        "created_at": "2024-01-10T00:00:00Z",
    }
    assert rows[4]["deleted_at"] is not None


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (("--status", "published"), [5, 4, 1]),
        (("--status", "Draft"), [3]),
        (("--author", "2"), [5, 2]),
        (("--name", "pro"), [2, 1]),
        (("--name", "TOOL"), [2]),
        # LIKE's wildcards in the text are characters like any other.
        (("--name", "0%"), [3]),
        (("--name", "_"), []),
    ],
)
async def test_resources_list_filter_keeps_what_it_names(
    back_office: BackOffice, options: tuple[str, ...], expected: list[int]
) -> None:
    assert await ids(back_office, *options) == expected


async def test_resources_list_filters_combine(back_office: BackOffice) -> None:
    assert await ids(back_office, "--author", "1", "--status", "published") == [4, 1]
    assert await ids(back_office, "--author", "1", "--name", "pro") == [1]
    assert await ids(back_office, "--author", "2", "--name", "pro", "--status", "published") == []


async def test_resources_list_limit_keeps_the_newest(back_office: BackOffice) -> None:
    assert await ids(back_office, "--limit", "2") == [5, 2]


async def test_resources_show_every_field_versions_and_access_counts(back_office: BackOffice) -> None:
    found = await shown(back_office, "resources", "show", "1")
    assert {
        key: found[key]
        for key in ("id", "name", "author_name", "price", "category_name", "stats_id", "current_version_id")
    } == {
        "id": 1,
        "name": "Économie Pro",
        "author_name": "Alice",
        "price": "9.99",
        "category_name": "Economy",
        "stats_id": "1234",
        "current_version_id": 11,
    }
    assert found["description"] == "Line one\nline two"
    assert [(version["version"], version["current"]) for version in found["versions"]] == [
        ("2.0.0-beta", False),
        ("1.1.0", True),
        ("1.0.0", False),
    ]
    assert found["versions"][0]["changelog"] == "secret\nchangelog"
    assert found["accesses"] == [
        {"source": "purchase", "active": 2, "revoked": 0},
        {"source": "manual", "active": 0, "revoked": 0},
        {"source": "gift", "active": 0, "revoked": 0},
    ]


async def test_resources_show_text_marks_the_current_version(back_office: BackOffice) -> None:
    result = await back_office.ok("resources", "show", "1")
    assert "description         Line one\\nline two" in result.lines
    start = result.lines.index("versions (3)")
    header, *rows = result.lines[start + 1 : start + 5]
    assert header.split() == ["ID", "VERSION", "CURRENT", "TITLE", "DOWNLOAD", "FILE_NAME", "CREATED_AT"]
    assert [row.split()[:3] for row in rows] == [
        ["12", "2.0.0-beta", "no"],
        ["11", "1.1.0", "yes"],
        ["10", "1.0.0", "no"],
    ]


@pytest.mark.parametrize("resource", ["99", "one"])
async def test_resources_show_of_an_unknown_resource_is_refused(
    back_office: BackOffice, resource: str
) -> None:
    assert (
        await back_office.refused("resources", "show", resource) == f"marketplace: no resource {resource!r}"
    )
    assert (await back_office("resources", "show", resource)).exit_code == 1
