"""Routes 15-16: a resource's statistics page address and the newest value of one chart, both proxied."""

from __future__ import annotations

import time
from typing import Any

import httpx

from marketplace.config import Settings
from tests.api.helpers import Clock, catalogue_client
from tests.conftest import Loader
from tests.platform_names import contract_and_renamed
from tests.profiles import sqlite_only
from tests.upstream import FakeUpstream

NOT_FOUND = b'{"message":"Not found."}'
TEXT = "text/plain; charset=UTF-8"
# Resources 1 (Published) and 2 (Unlisted) share the statistics id 1234; 7 has none.
PLUGIN_PATH = "/stats-api/1234"
PLUGIN = {
    "id": 1234,
    "name": "My Plugin",
    "owner": {"id": 1, "name": "someone"},
    "software": {"id": 1, "name": "Bukkit / Spigot", "url": "bukkit"},
    "charts": {},
}
PAGE_URL = b"https://stats.example/plugin/bukkit/My%20Plugin/1234"
PLAYERS_PATH = "/stats-api/1234/charts/players/data/?maxElements=1"
TIMESTAMP_MS = 1_700_000_000_000
# Resources without a statistics id (null or empty), and hidden resources that have one.
NO_STATS_ID = {
    "resources": [
        {"id": 30, "user_id": 1, "name": "Empty Stats Id", "stats_id": ""},
        {"id": 31, "user_id": 1, "name": "Draft With Stats", "status": "draft", "stats_id": "4321"},
        {"id": 32, "user_id": 1, "name": "Deleted With Stats", "deleted": True, "stats_id": "4321"},
    ]
}
# Fault tests wait this long for upstream instead of the production 5 seconds.
SHORT_TIMEOUT_SECONDS = 0.2
SLOW_UPSTREAM_SECONDS = 2.0

pytestmark = contract_and_renamed


def chart_answer(value: Any) -> list[list[Any]]:
    return [[TIMESTAMP_MS, value]]


# --- 15. GET /stats/url/{resource} ------------------------------------------------------------


@sqlite_only
async def test_page_url_is_plain_text_built_from_segment_name_and_stats_id(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.answer_json(PLUGIN_PATH, PLUGIN)
    response = await client.get("/api/v1/stats/url/1")
    assert response.status_code == 200
    assert response.headers["content-type"] == TEXT
    assert response.content == PAGE_URL
    assert upstream.calls == {PLUGIN_PATH: 1}
    assert upstream.headers[0]["Accept"] == "application/json"


@sqlite_only
async def test_page_url_maps_each_software_id_to_its_segment(
    client: httpx.AsyncClient, upstream: FakeUpstream, load: Loader
) -> None:
    segments = {
        1: "bukkit",
        2: "bungeecord",
        3: "sponge",
        4: "server-implementation",
        5: "other",
        6: "velocity",
    }
    await load(
        {"resources": [{"id": 40 + i, "user_id": 1, "name": f"S{i}", "stats_id": f"90{i}"} for i in segments]}
    )
    for software_id, segment in segments.items():
        # The map wins over the upstream `url` of a known id.
        software = {"id": software_id, "name": "Some Software", "url": "decoy"}
        upstream.answer_json(f"/stats-api/90{software_id}", {"name": "P", "software": software})
        response = await client.get(f"/api/v1/stats/url/{40 + software_id}")
        assert response.status_code == 200, software_id
        assert response.content == f"https://stats.example/plugin/{segment}/P/90{software_id}".encode()


@sqlite_only
async def test_page_url_of_an_unmapped_software_id_falls_back_to_the_upstream_url(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.answer_json(PLUGIN_PATH, {**PLUGIN, "software": {"id": 99, "name": "Folia", "url": "folia"}})
    response = await client.get("/api/v1/stats/url/1")
    assert response.status_code == 200
    assert response.content == b"https://stats.example/plugin/folia/My%20Plugin/1234"


@sqlite_only
async def test_page_url_percent_encodes_the_name_as_rfc_3986(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.answer_json(PLUGIN_PATH, {**PLUGIN, "name": "Économie/Pro+ v2 ~_.-ü&?#"})
    response = await client.get("/api/v1/stats/url/1")
    assert response.status_code == 200
    assert response.content == (
        b"https://stats.example/plugin/bukkit/%C3%89conomie%2FPro%2B%20v2%20~_.-%C3%BC%26%3F%23/1234"
    )


@sqlite_only
async def test_page_url_without_a_usable_name_or_segment_is_404(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    unusable: list[tuple[str, Any]] = [
        ("no name", {"software": PLUGIN["software"]}),
        ("null name", {"name": None, "software": PLUGIN["software"]}),
        ("empty name", {"name": "", "software": PLUGIN["software"]}),
        ("number name", {"name": 5, "software": PLUGIN["software"]}),
        ("unmapped id without url", {"name": "P", "software": {"id": 99, "name": "X"}}),
        ("no software", {"name": "P"}),
        ("array body", [PLUGIN]),
        ("string body", "https://stats.example/plugin/bukkit/P/1234"),
        ("null body", None),
    ]
    for case, payload in unusable:
        upstream.answer_json(PLUGIN_PATH, payload)
        response = await client.get("/api/v1/stats/url/1")
        assert (response.status_code, response.content) == (404, NOT_FOUND), case
        assert response.headers["content-type"] == "application/json", case


@sqlite_only
async def test_page_url_is_404_when_upstream_fails(client: httpx.AsyncClient, upstream: FakeUpstream) -> None:
    for status in (404, 500, 503, 302):
        upstream.answer_json(PLUGIN_PATH, PLUGIN, status=status)
        response = await client.get("/api/v1/stats/url/1")
        assert (response.status_code, response.content) == (404, NOT_FOUND), status
    upstream.answer_raw(PLUGIN_PATH, b"<html>maintenance</html>")
    response = await client.get("/api/v1/stats/url/1")
    assert (response.status_code, response.content) == (404, NOT_FOUND), "body not JSON"


@sqlite_only
async def test_page_url_upstream_timeout_is_404_and_not_cached(
    settings: Settings, upstream: FakeUpstream
) -> None:
    upstream.answer_json(PLUGIN_PATH, PLUGIN, delay_seconds=SLOW_UPSTREAM_SECONDS)
    async with catalogue_client(settings, upstream_timeout_seconds=SHORT_TIMEOUT_SECONDS) as client:
        started = time.monotonic()
        timed_out = await client.get("/api/v1/stats/url/1")
        assert time.monotonic() - started < SLOW_UPSTREAM_SECONDS
        assert (timed_out.status_code, timed_out.content) == (404, NOT_FOUND)
        upstream.answer_json(PLUGIN_PATH, PLUGIN)
        answered = await client.get("/api/v1/stats/url/1")
    assert (answered.status_code, answered.content) == (200, PAGE_URL)


@sqlite_only
async def test_page_url_without_stats_id_or_of_a_hidden_resource_is_404_without_calling_upstream(
    client: httpx.AsyncClient, upstream: FakeUpstream, load: Loader
) -> None:
    await load(NO_STATS_ID)
    upstream.answer_json("/stats-api/4321", PLUGIN)
    # 7 has a null statistics id, 30 an empty one; 31 and 32 are hidden; 3 is a draft; 999 unknown.
    for resource in ("7", "30", "31", "32", "3", "999", "abc", "-1"):
        response = await client.get(f"/api/v1/stats/url/{resource}")
        assert (response.status_code, response.content) == (404, NOT_FOUND), resource
    assert sum(upstream.calls.values()) == 0


async def test_page_url_is_cached_by_stats_id_across_resources_sharing_it(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.answer_json(PLUGIN_PATH, PLUGIN)
    first = await client.get("/api/v1/stats/url/1")
    upstream.answer_json(PLUGIN_PATH, {**PLUGIN, "name": "Renamed"})
    shared = await client.get("/api/v1/stats/url/2")
    again = await client.get("/api/v1/stats/url/1")
    assert first.content == shared.content == again.content == PAGE_URL
    assert shared.headers["content-type"] == TEXT
    assert upstream.calls[PLUGIN_PATH] == 1


@sqlite_only
async def test_page_url_failure_is_not_cached(client: httpx.AsyncClient, upstream: FakeUpstream) -> None:
    upstream.answer_json(PLUGIN_PATH, {"error": "down"}, status=500)
    failed = await client.get("/api/v1/stats/url/1")
    assert failed.status_code == 404
    upstream.answer_json(PLUGIN_PATH, PLUGIN)
    answered = await client.get("/api/v1/stats/url/1")
    assert (answered.status_code, answered.content) == (200, PAGE_URL)
    assert upstream.calls[PLUGIN_PATH] == 2


@sqlite_only
async def test_page_url_is_cached_for_6_hours(
    client: httpx.AsyncClient, upstream: FakeUpstream, clock: Clock
) -> None:
    upstream.answer_json(PLUGIN_PATH, PLUGIN)
    await client.get("/api/v1/stats/url/1")
    clock.now += 21599
    await client.get("/api/v1/stats/url/1")
    assert upstream.calls[PLUGIN_PATH] == 1
    clock.now += 2
    await client.get("/api/v1/stats/url/1")
    assert upstream.calls[PLUGIN_PATH] == 2


# --- 16. GET /stats/{resource}/{chart} --------------------------------------------------------


@sqlite_only
async def test_chart_value_is_the_first_pairs_value_as_plain_text(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.answer_json(PLAYERS_PATH, chart_answer(17))
    response = await client.get("/api/v1/stats/1/players")
    assert response.status_code == 200
    assert response.headers["content-type"] == TEXT
    assert response.content == b"17"
    assert upstream.calls == {PLAYERS_PATH: 1}


@sqlite_only
async def test_chart_takes_the_first_pair_of_several(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.answer_json(PLAYERS_PATH, [[TIMESTAMP_MS, 5], [TIMESTAMP_MS - 1000, 9]])
    response = await client.get("/api/v1/stats/1/players")
    assert response.content == b"5"


@sqlite_only
async def test_chart_numeric_values_are_cast_to_integer(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    # Each value under its own chart name, since a numeric value is cached per chart.
    values: list[tuple[Any, bytes]] = [
        (17.9, b"17"),
        (-3.5, b"-3"),
        (-7, b"-7"),
        (0, b"0"),
        ("42", b"42"),
        ("12.7", b"12"),
        ("-8.2", b"-8"),
        (1e3, b"1000"),
    ]
    for index, (value, expected) in enumerate(values):
        upstream.answer_json(f"/stats-api/1234/charts/c{index}/data/?maxElements=1", chart_answer(value))
        response = await client.get(f"/api/v1/stats/1/c{index}")
        assert (response.status_code, response.content) == (200, expected), value
        assert response.headers["content-type"] == TEXT, value


@sqlite_only
async def test_an_unreadable_chart_is_0_and_not_cached(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    unreadable: list[tuple[str, int, Any]] = [
        ("empty array", 200, []),
        ("null value", 200, chart_answer(None)),
        ("text value", 200, chart_answer("many")),
        ("boolean value", 200, chart_answer(True)),
        ("pair without value", 200, [[TIMESTAMP_MS]]),
        ("object body", 200, {"value": 17}),
        ("upstream 404", 404, {"message": "Not found"}),
        ("upstream 500", 500, chart_answer(17)),
    ]
    for case, status, payload in unreadable:
        upstream.answer_json(PLAYERS_PATH, payload, status=status)
        response = await client.get("/api/v1/stats/1/players")
        assert (response.status_code, response.content) == (200, b"0"), case
        assert response.headers["content-type"] == TEXT, case
    upstream.answer_raw(PLAYERS_PATH, b"<html>maintenance</html>")
    response = await client.get("/api/v1/stats/1/players")
    assert (response.status_code, response.content) == (200, b"0"), "body not JSON"
    # None of the zeros was cached: every call asked upstream, and a readable value now shows.
    upstream.answer_json(PLAYERS_PATH, chart_answer(17))
    response = await client.get("/api/v1/stats/1/players")
    assert response.content == b"17"
    assert upstream.calls[PLAYERS_PATH] == len(unreadable) + 2


@sqlite_only
async def test_chart_upstream_timeout_is_0_and_not_cached(settings: Settings, upstream: FakeUpstream) -> None:
    upstream.answer_json(PLAYERS_PATH, chart_answer(17), delay_seconds=SLOW_UPSTREAM_SECONDS)
    async with catalogue_client(settings, upstream_timeout_seconds=SHORT_TIMEOUT_SECONDS) as client:
        started = time.monotonic()
        timed_out = await client.get("/api/v1/stats/1/players")
        assert time.monotonic() - started < SLOW_UPSTREAM_SECONDS
        assert (timed_out.status_code, timed_out.content) == (200, b"0")
        upstream.answer_json(PLAYERS_PATH, chart_answer(17))
        answered = await client.get("/api/v1/stats/1/players")
    assert (answered.status_code, answered.content) == (200, b"17")


async def test_a_numeric_chart_value_is_cached_per_stats_id_and_chart(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    servers_path = "/stats-api/1234/charts/servers/data/?maxElements=1"
    upstream.answer_json(PLAYERS_PATH, chart_answer(17))
    upstream.answer_json(servers_path, chart_answer(3))
    assert (await client.get("/api/v1/stats/1/players")).content == b"17"
    upstream.answer_json(PLAYERS_PATH, chart_answer(99))
    # Resource 2 shares the statistics id: same entry. Another chart is another entry.
    assert (await client.get("/api/v1/stats/2/players")).content == b"17"
    assert (await client.get("/api/v1/stats/1/servers")).content == b"3"
    assert upstream.calls == {PLAYERS_PATH: 1, servers_path: 1}


@sqlite_only
async def test_a_chart_value_is_cached_for_15_minutes(
    client: httpx.AsyncClient, upstream: FakeUpstream, clock: Clock
) -> None:
    upstream.answer_json(PLAYERS_PATH, chart_answer(17))
    await client.get("/api/v1/stats/1/players")
    clock.now += 899
    await client.get("/api/v1/stats/1/players")
    assert upstream.calls[PLAYERS_PATH] == 1
    clock.now += 2
    await client.get("/api/v1/stats/1/players")
    assert upstream.calls[PLAYERS_PATH] == 2


@sqlite_only
async def test_chart_without_stats_id_is_0_without_calling_upstream(
    client: httpx.AsyncClient, upstream: FakeUpstream, load: Loader
) -> None:
    await load(NO_STATS_ID)
    for resource in ("7", "30"):
        response = await client.get(f"/api/v1/stats/{resource}/players")
        assert (response.status_code, response.content) == (200, b"0"), resource
        assert response.headers["content-type"] == TEXT, resource
    assert sum(upstream.calls.values()) == 0


@sqlite_only
async def test_chart_of_a_hidden_or_unknown_resource_is_json_404_without_calling_upstream(
    client: httpx.AsyncClient, upstream: FakeUpstream, load: Loader
) -> None:
    await load(NO_STATS_ID)
    upstream.answer_json("/stats-api/4321/charts/players/data/?maxElements=1", chart_answer(17))
    for resource in ("31", "32", "3", "999", "abc"):
        response = await client.get(f"/api/v1/stats/{resource}/players")
        assert (response.status_code, response.content) == (404, NOT_FOUND), resource
        assert response.headers["content-type"] == "application/json", resource
    assert sum(upstream.calls.values()) == 0


@sqlite_only
async def test_chart_segment_is_percent_encoded_upstream(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    charts = {
        "a b": "a%20b",
        "a?b": "a%3Fb",
        "é+#": "%C3%A9%2B%23",
        "~x_y.z-": "~x_y.z-",
    }
    for index, (chart, encoded) in enumerate(charts.items()):
        upstream.answer_json(
            f"/stats-api/1234/charts/{encoded}/data/?maxElements=1", chart_answer(index + 10)
        )
        response = await client.get(f"/api/v1/stats/1/{chart}".replace("?", "%3F").replace("#", "%23"))
        assert (response.status_code, response.content) == (200, str(index + 10).encode()), chart


@sqlite_only
async def test_stats_url_route_is_declared_before_the_chart_route(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    url_chart = "/stats-api/1234/charts/url/data/?maxElements=1"
    upstream.answer_json(PLUGIN_PATH, PLUGIN)
    upstream.answer_json(url_chart, chart_answer(8))
    assert (await client.get("/api/v1/stats/url/1")).content == PAGE_URL
    assert (await client.get("/api/v1/stats/1/url")).content == b"8"
    not_a_resource = await client.get("/api/v1/stats/url/abc")
    assert (not_a_resource.status_code, not_a_resource.content) == (404, NOT_FOUND)
    assert upstream.calls == {PLUGIN_PATH: 1, url_chart: 1}


# --- Hostile upstream answers -------------------------------------------------------------------


@sqlite_only
async def test_chart_values_beyond_a_64_bit_integer_are_unreadable(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    # Turning 1e999999999 into an integer would take the worker for ages; PHP's cast overflows.
    for index, value in enumerate(["1e999999999", "-1e30", 1e300, 2**64, "9" * 4000]):
        upstream.answer_json(f"/stats-api/1234/charts/h{index}/data/?maxElements=1", chart_answer(value))
        response = await client.get(f"/api/v1/stats/1/h{index}")
        assert (response.status_code, response.content) == (200, b"0"), value


@sqlite_only
async def test_an_upstream_answer_over_a_mebibyte_is_a_failure(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    huge_plugin = {**PLUGIN, "padding": "x" * (1024 * 1024)}
    upstream.answer_json(PLUGIN_PATH, huge_plugin)
    assert (await client.get("/api/v1/stats/url/1")).content == NOT_FOUND
    upstream.answer_json(PLAYERS_PATH, [[TIMESTAMP_MS, 5]] + [[0, 0]] * 200_000)
    assert (await client.get("/api/v1/stats/1/players")).content == b"0"


@sqlite_only
async def test_a_software_id_of_thousands_of_digits_falls_back_to_the_upstream_url(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.answer_json(PLUGIN_PATH, {**PLUGIN, "software": {"id": "1" * 5000, "url": "custom"}})
    response = await client.get("/api/v1/stats/url/1")
    assert (response.status_code, response.content) == (
        200,
        b"https://stats.example/plugin/custom/My%20Plugin/1234",
    )


@sqlite_only
async def test_a_deeply_nested_upstream_answer_is_a_failure(
    client: httpx.AsyncClient, upstream: FakeUpstream
) -> None:
    upstream.answer_raw(PLAYERS_PATH, b"[" * 100_000 + b"]" * 100_000, content_type="application/json")
    assert (await client.get("/api/v1/stats/1/players")).content == b"0"
