"""`marketplace resources ...`: visibility, soft deletion, releases and the statistics id, on both profiles.

In the test catalogue resource 1 (author 1, stats id 1234) is published with versions 10 (1.0.0),
11 (1.1.0, current) and 12 (2.0.0-beta); 3 is a draft; 6 is deleted; 7 (author 2) has no version
and no stats id.
"""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.models import Activity
from tests.backoffice.conftest import BackOffice
from tests.conftest import Loader
from tests.upstream import FakeUpstream

LOGGED_KEYS = {"activity_id", "action", "by", "at", "subject", "before", "after", "effects", "summary"}
CHART_PATH = "/stats-api/5678/charts/players/data/?maxElements=1"


async def listed_ids(api: httpx.AsyncClient) -> list[int]:
    page = (await api.get("/api/v1/resource/search", params={"size": 25})).json()
    return [row["id"] for row in page["data"]]


async def logged_row(engine: AsyncEngine, activity_id: int) -> tuple[Any, ...]:
    """The activity-log entry's event, resource, user, actor and route."""
    columns = (Activity.event, Activity.resource_id, Activity.user_id, Activity.actor, Activity.via)
    async with engine.connect() as connection:
        row = (await connection.execute(select(*columns).where(Activity.id == activity_id))).one()
    return tuple(row)


def only_change(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [change] = objects
    assert set(change) == LOGGED_KEYS
    return change


# --- status ---------------------------------------------------------------------------------


async def test_status_draft_hides_the_resource_from_the_api_and_search(
    back_office: BackOffice, api: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    assert (await api.get("/api/v1/resource/1")).status_code == 200
    assert 1 in await listed_ids(api)
    result = await back_office.ok("resources", "status", "1", "draft", "--by", "alice", "--json")
    change = only_change(result.objects)
    assert change["action"] == "resource.status_changed"
    assert change["by"] == "alice"
    assert change["subject"] == {"resource": 1}
    assert (change["before"], change["after"]) == ({"status": "published"}, {"status": "draft"})
    assert (await api.get("/api/v1/resource/1")).status_code == 404
    assert 1 not in await listed_ids(api)
    assert await logged_row(engine, change["activity_id"]) == (
        "resource.status_changed",
        1,
        1,
        "alice",
        "marketplace resources status",
    )


async def test_status_published_lists_a_draft_in_search(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    assert (await api.get("/api/v1/resource/3")).status_code == 404
    result = await back_office.ok("resources", "status", "3", "published")
    assert result.lines == ["resource 3 (Draft Thing): draft -> published"]
    assert (await api.get("/api/v1/resource/3")).json()["name"] == "Draft Thing"
    assert 3 in await listed_ids(api)


async def test_status_unlisted_answers_by_id_but_leaves_search(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    await back_office.ok("resources", "status", "7", "unlisted")
    assert (await api.get("/api/v1/resource/7")).status_code == 200
    assert 7 not in await listed_ids(api)


async def test_status_refuses_an_unknown_resource_an_unknown_status_and_the_status_it_has(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    assert await back_office.refused("resources", "status", "99", "draft") == "marketplace: no resource '99'"
    assert (
        await back_office.refused("resources", "status", "one", "draft") == "marketplace: no resource 'one'"
    )
    assert await back_office.refused("resources", "status", "1", "live") == (
        "marketplace: unknown status 'live' (one of published, unlisted, draft, pending, rejected)"
    )
    assert await back_office.refused("resources", "status", "1", "published") == (
        "marketplace: resource 1 is already published"
    )


# --- soft-delete and restore ----------------------------------------------------------------


async def test_soft_delete_hides_the_resource_and_restore_brings_it_back(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    deleted = only_change((await back_office.ok("resources", "soft-delete", "1", "--json")).objects)
    assert deleted["action"] == "resource.deleted"
    assert deleted["before"] == {"deleted_at": None}
    assert deleted["after"]["deleted_at"].endswith("Z")
    assert (await api.get("/api/v1/resource/1")).status_code == 404
    assert (await api.get("/api/v1/resource/version/1")).status_code == 404
    assert 1 not in await listed_ids(api)

    restored = only_change((await back_office.ok("resources", "restore", "1", "--json")).objects)
    assert restored["action"] == "resource.restored"
    assert (restored["before"], restored["after"]) == (deleted["after"], {"deleted_at": None})
    assert (await api.get("/api/v1/resource/1")).json()["id"] == 1
    assert 1 in await listed_ids(api)


async def test_restore_of_a_resource_deleted_by_the_loader_answers_again(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    assert (await api.get("/api/v1/resource/6")).status_code == 404
    await back_office.ok("resources", "restore", "6")
    assert (await api.get("/api/v1/resource/6")).json()["name"] == "Deleted Thing"


async def test_soft_delete_refuses_a_deleted_resource_and_restore_one_not_deleted(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    assert await back_office.refused("resources", "soft-delete", "6") == (
        "marketplace: resource 6 is already deleted"
    )
    assert await back_office.refused("resources", "restore", "1") == "marketplace: resource 1 is not deleted"
    assert await back_office.refused("resources", "soft-delete", "99") == "marketplace: no resource '99'"
    assert await back_office.refused("resources", "restore", "99") == "marketplace: no resource '99'"


# --- release and promote --------------------------------------------------------------------


async def test_release_makes_the_new_version_current_in_the_api(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    result = await back_office.ok(
        "resources", "release", "1", "--version", "3.0.0", "--title", "Third",
        "--changelog", "private notes", "--file-name", "eco-3.jar", "--file-size", "2048",
        "--checksum", "f00d", "--json",
    )  # fmt: skip
    change = only_change(result.objects)
    assert change["action"] == "resource.version_released"
    assert (change["before"], change["after"]) == ({"current_version": "1.1.0"}, {"current_version": "3.0.0"})
    version_id = change["subject"]["version"]
    assert change["subject"] == {"resource": 1, "version": version_id}
    assert change["effects"] == [
        {
            "version": version_id,
            "change": "created",
            "before": None,
            "after": {
                "version": "3.0.0",
                "title": "Third",
                "changelog": "private notes",
                "file_name": "eco-3.jar",
                "file_size": 2048,
                "checksum": "f00d",
            },
        }
    ]
    assert (await api.get("/api/v1/resource/version/1")).text == "3.0.0"
    listed = (await api.get("/api/v1/resource/versions/1")).json()
    assert [row["version"] for row in listed] == ["1.0.0", "1.1.0", "2.0.0-beta", "3.0.0"]
    assert listed[-1] == {
        "id": version_id,
        "plugin_id": 1,
        "version": "3.0.0",
        "title": "Third",
        "download": 0,
        "created_at": listed[-1]["created_at"],
    }
    card = (await api.get("/api/v1/resource/1")).json()
    assert card["version_id"] == version_id
    assert card["version"] == listed[-1]


async def test_release_gives_a_resource_without_versions_its_first_number(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    assert (await api.get("/api/v1/resource/version/7")).text == "(soon)"
    result = await back_office.ok(
        "resources", "release", "7", "--version", " 0.1.0 ", "--title", "", "--json"
    )
    change = only_change(result.objects)
    assert (change["before"], change["after"]) == ({"current_version": None}, {"current_version": "0.1.0"})
    assert (await api.get("/api/v1/resource/version/7")).text == "0.1.0"
    assert (await api.get("/api/v1/resource/7")).json()["version"]["title"] == ""


async def test_release_with_no_promote_lists_the_version_but_keeps_the_current_one(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    result = await back_office.ok(
        "resources",
        "release",
        "1",
        "--version",
        "3.0.0-rc1",
        "--title",
        "Candidate",
        "--no-promote",
        "--json",
    )
    change = only_change(result.objects)
    assert change["before"] == change["after"] == {"current_version": "1.1.0"}
    assert change["effects"][0]["after"]["version"] == "3.0.0-rc1"
    assert (await api.get("/api/v1/resource/version/1")).text == "1.1.0"
    listed = (await api.get("/api/v1/resource/versions/1")).json()
    assert listed[-1]["version"] == "3.0.0-rc1"
    assert (await api.get("/api/v1/resource/1")).json()["version_id"] == 11


async def test_release_refuses_invalid_fields_and_a_number_the_resource_has(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    def release(*options: str) -> tuple[str, ...]:
        return ("resources", "release", "1", "--title", "T", *options)

    assert await back_office.refused(*release("--version", "  ")) == (
        "marketplace: invalid version '  ': 1 to 32 printable characters"
    )
    assert await back_office.refused(*release("--version", "(soon)")) == (
        "marketplace: invalid version '(soon)': the update check's answer for no version"
    )
    assert await back_office.refused(*release("--version", "2.0\n1")) == (
        "marketplace: invalid version '2.0\\n1': 1 to 32 printable characters"
    )
    assert await back_office.refused("resources", "release", "1", "--version", "3", "--title", "a\x1bb") == (
        "marketplace: invalid title: at most 255 printable characters"
    )
    assert (await back_office.refused(*release("--version", "1" * 33))).startswith(
        "marketplace: invalid version '111"
    )
    assert await back_office.refused(*release("--version", "1.1.0")) == (
        "marketplace: resource 1 already has version '1.1.0' (id 11)"
    )
    assert (
        await back_office.refused("resources", "release", "1", "--version", "3", "--title", "T" * 256)
        == "marketplace: invalid title: at most 255 printable characters"
    )
    assert await back_office.refused(*release("--version", "3", "--file-size", "-1")) == (
        "marketplace: invalid file size '-1': a number of bytes, not negative"
    )
    assert await back_office.refused(*release("--version", "3", "--file-size", "big")) == (
        "marketplace: invalid file size 'big': a number of bytes, not negative"
    )
    assert await back_office.refused(*release("--version", "3", "--file-name", "f" * 256)) == (
        "marketplace: invalid file name: at most 255 characters"
    )
    assert await back_office.refused(*release("--version", "3", "--checksum", "c" * 129)) == (
        "marketplace: invalid checksum: at most 128 characters"
    )
    assert (
        await back_office.refused("resources", "release", "99", "--version", "3", "--title", "T")
        == "marketplace: no resource '99'"
    )


async def test_promote_makes_an_existing_version_current_by_number_or_by_id(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    result = await back_office.ok("resources", "promote", "1", "2.0.0-beta", "--json")
    change = only_change(result.objects)
    assert change["action"] == "resource.version_promoted"
    assert change["subject"] == {"resource": 1, "version": 12}
    assert (change["before"], change["after"]) == (
        {"current_version": "1.1.0"},
        {"current_version": "2.0.0-beta"},
    )
    assert (await api.get("/api/v1/resource/version/1")).text == "2.0.0-beta"
    assert (await api.get("/api/v1/resource/1")).json()["version"]["title"] == "Not promoted"

    by_id = await back_office.ok("resources", "promote", "1", "10")
    assert by_id.lines == ["resource 1 (Économie/Pro): current version 2.0.0-beta -> 1.0.0 (id 10)"]
    assert (await api.get("/api/v1/resource/version/1")).text == "1.0.0"


async def test_promote_refuses_an_unknown_version_one_of_another_resource_and_the_current_one(
    back_office: BackOffice, api: httpx.AsyncClient, load: Loader
) -> None:
    await load({"versions": [{"id": 20, "resource_id": 7, "version": "0.1"}]})
    assert await back_office.refused("resources", "promote", "1", "20") == (
        "marketplace: version 20 is a version of resource 7, not of resource 1"
    )
    assert await back_office.refused("resources", "promote", "1", "9.9") == (
        "marketplace: resource 1 has no version '9.9'"
    )
    assert await back_office.refused("resources", "promote", "1", "999") == (
        "marketplace: resource 1 has no version '999'"
    )
    for current in ("1.1.0", "11"):
        assert await back_office.refused("resources", "promote", "1", current) == (
            "marketplace: version 1.1.0 (id 11) is already the current version of resource 1"
        )
    assert await back_office.refused("resources", "promote", "99", "1.0.0") == "marketplace: no resource '99'"


# --- stats-id -------------------------------------------------------------------------------


async def test_stats_id_set_sends_the_chart_and_page_address_to_that_id(
    back_office: BackOffice, api: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    assert (await api.get("/api/v1/stats/7/players")).text == "0"
    assert (await api.get("/api/v1/stats/url/7")).status_code == 404
    assert not upstream.calls
    result = await back_office.ok("resources", "stats-id", "7", "5678", "--json")
    change = only_change(result.objects)
    assert change["action"] == "resource.stats_id_changed"
    assert (change["before"], change["after"]) == ({"stats_id": None}, {"stats_id": "5678"})
    upstream.answer_json(CHART_PATH, [[1_700_000_000_000, 17]])
    upstream.answer_json("/stats-api/5678", {"name": "Chat", "software": {"id": 1, "url": "bukkit"}})
    assert (await api.get("/api/v1/stats/7/players")).text == "17"
    assert (await api.get("/api/v1/stats/url/7")).text == "https://stats.example/plugin/bukkit/Chat/5678"
    assert upstream.calls == {CHART_PATH: 1, "/stats-api/5678": 1}


async def test_stats_id_cleared_answers_the_chart_zero_without_calling_upstream(
    back_office: BackOffice, api: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    result = await back_office.ok("resources", "stats-id", "1", "--clear", "--json")
    change = only_change(result.objects)
    assert (change["before"], change["after"]) == ({"stats_id": "1234"}, {"stats_id": None})
    assert (await api.get("/api/v1/stats/1/players")).text == "0"
    assert (await api.get("/api/v1/stats/url/1")).status_code == 404
    # An empty value clears as well.
    assert (await back_office.ok("resources", "stats-id", "2", "")).lines == [
        "resource 2 (Unlisted Utility): stats id 1234 cleared"
    ]
    assert (await api.get("/api/v1/stats/2/players")).text == "0"
    assert not upstream.calls


async def test_stats_id_refuses_non_digits_too_long_the_value_it_has_and_a_missing_or_double_value(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    assert await back_office.refused("resources", "stats-id", "1", "12a") == (
        "marketplace: invalid stats id '12a': digits only, at most 20"
    )
    assert await back_office.refused("resources", "stats-id", "1", "1" * 21) == (
        f"marketplace: invalid stats id '{'1' * 21}': digits only, at most 20"
    )
    assert await back_office.refused("resources", "stats-id", "1", "1234") == (
        "marketplace: resource 1 already has stats id 1234"
    )
    assert await back_office.refused("resources", "stats-id", "7", "--clear") == (
        "marketplace: resource 7 has no stats id"
    )
    assert await back_office.refused("resources", "stats-id", "1") == (
        "marketplace: stats-id: give a stats id, or --clear"
    )
    assert await back_office.refused("resources", "stats-id", "1", "5", "--clear") == (
        "marketplace: stats-id: give a stats id or --clear, not both"
    )
    assert await back_office.refused("resources", "stats-id", "99", "5") == "marketplace: no resource '99'"


async def test_a_change_from_or_to_no_value_is_told_in_words(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    # Resource 7 has no version and no stats id; resource 8 neither.
    lines = [
        *(
            await back_office.ok(
                "resources", "release", "7", "--version", "1.0", "--title", "A", "--no-promote"
            )
        ).lines,
        *(await back_office.ok("resources", "promote", "7", "1.0")).lines,
        *(await back_office.ok("resources", "release", "8", "--version", "0.1", "--title", "B")).lines,
        *(await back_office.ok("resources", "stats-id", "8", "42")).lines,
        *(await back_office.ok("resources", "stats-id", "8", "--clear")).lines,
    ]

    assert lines == [
        "resource 7 (Free Chat): version 1.0 released (id 13), not made current (there is none)",
        "resource 7 (Free Chat): version 1.0 (id 13) made current (there was none)",
        "resource 8 (Half Price): version 0.1 released (id 14), now the current version (there was none)",
        "resource 8 (Half Price): stats id set to 42",
        "resource 8 (Half Price): stats id 42 cleared",
    ]
    assert (await api.get("/api/v1/resource/version/8")).text == "0.1"
