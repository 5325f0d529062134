"""Routes 4-6: one resource, its versions, its current version number, and the `{resource}` binding."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.conftest import Loader
from tests.profiles import sqlite_only

VERSION = "x-service-api-version"
NOT_FOUND = b'{"message":"Not found."}'
TEXT_PLAIN = "text/plain; charset=UTF-8"

RESOURCE_KEYS = [
    "id", "user_id", "name", "tag", "price", "category_id", "unique_id", "version_id", "download",
    "purchases", "logo", "version", "created_at", "updated_at", "slug", "rating_avg", "reviews_count",
]  # fmt: skip
VERSION_KEYS = ["id", "plugin_id", "version", "title", "download", "created_at"]

# Resource 1 of the catalogue, byte for byte: `/` as `\/`, non-ASCII as lower-case `\uXXXX`, the emoji
# as a surrogate pair, the price as a float, the current version (11, not the newer 12) inline.
RESOURCE_1 = (
    b'{"id":1,"user_id":1,"name":"\\u00c9conomie\\/Pro","tag":"Shops \\/ banks \\ud83d\\ude00",'
    b'"price":9.99,"category_id":1,"unique_id":"SERVICE_0123456789ABCDE","version_id":11,"download":42,'
    b'"purchases":1,"logo":"http:\\/\\/marketplace.test\\/storage\\/images\\/1.png",'
    b'"version":{"id":11,"plugin_id":1,"version":"1.1.0","title":"Second","download":7,'
    b'"created_at":"2024-05-03T10:00:00.000000Z"},'
    b'"created_at":"2024-05-01T10:00:00.000000Z","updated_at":"2024-05-02T10:00:00.000000Z",'
    b'"slug":"economie-pro","rating_avg":4.5,"reviews_count":2}'
)
VERSIONS_OF_1 = (
    b'[{"id":10,"plugin_id":1,"version":"1.0.0","title":"First","download":5,'
    b'"created_at":"2024-05-01T10:00:00.000000Z"},'
    b'{"id":11,"plugin_id":1,"version":"1.1.0","title":"Second","download":7,'
    b'"created_at":"2024-05-03T10:00:00.000000Z"},'
    b'{"id":12,"plugin_id":1,"version":"2.0.0-beta","title":"Not promoted","download":0,'
    b'"created_at":"2024-05-04T10:00:00.000000Z"}]'
)
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")

# Catalogue resources: 1 published, 2 unlisted, 3 draft, 4 pending, 5 rejected, 6 soft-deleted,
# 7 free, 8 priced 12.50.
HIDDEN = [("draft", "3"), ("pending", "4"), ("rejected", "5"), ("soft-deleted", "6"), ("unknown", "999")]
# Segments that are not plain digits, or name no 32-bit id: 404, never 500.
NOT_PLAIN_DIGITS = [
    "-1", "+1", "1e3", "12abc", "1.0", "12.0", "0x1", "abc", "%201", "1%20", "%D9%A1", "0",
    "2147483648", "9223372036854775808", "99999999999999999999999999999999",
]  # fmt: skip
BOUND_ROUTES = ["/api/v1/resource/{}", "/api/v1/resource/versions/{}", "/api/v1/resource/version/{}"]


# --- 6. GET /resource/{resource}: the resource object -----------------------------------------


async def test_resource_object_is_the_exact_php_json_bytes(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/v1/resource/1")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers[VERSION] == "1"
    assert response.content == RESOURCE_1


@sqlite_only
async def test_resource_object_has_every_frozen_key_in_order_nulls_included(
    client: httpx.AsyncClient,
) -> None:
    for resource_id in (1, 2, 7, 8):  # with and without nulls
        response = await client.get(f"/api/v1/resource/{resource_id}")
        assert response.status_code == 200, resource_id
        assert list(response.json()) == RESOURCE_KEYS, resource_id


@sqlite_only
async def test_resource_object_field_types(client: httpx.AsyncClient) -> None:
    for resource_id in (1, 2, 7, 8):
        resource = (await client.get(f"/api/v1/resource/{resource_id}")).json()
        for key in ("id", "user_id", "download", "purchases", "reviews_count"):
            assert type(resource[key]) is int, (resource_id, key)
        for key in ("name", "tag", "created_at", "updated_at", "slug"):
            assert type(resource[key]) is str, (resource_id, key)
        assert type(resource["price"]) in (int, float), resource_id
        assert type(resource["rating_avg"]) in (int, float), resource_id
        assert resource["category_id"] is None or type(resource["category_id"]) is int
        assert resource["version_id"] is None or type(resource["version_id"]) is int
        assert resource["unique_id"] is None or type(resource["unique_id"]) is str
        assert resource["logo"] is None or type(resource["logo"]) is str
        assert resource["version"] is None or type(resource["version"]) is dict


@sqlite_only
async def test_price_is_an_integer_when_exact_and_the_shortest_float_otherwise(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load(
        {
            "resources": [
                {"id": 20, "user_id": 1, "name": "Big", "price": "1234567.00"},
                {"id": 21, "user_id": 1, "name": "Dime", "price": "0.10"},
                {"id": 22, "user_id": 1, "name": "Odd", "price": "1234567.89"},
            ]
        }
    )
    expected = {
        1: b'"price":9.99,',
        2: b'"price":10,',
        7: b'"price":0,',
        8: b'"price":12.5,',
        20: b'"price":1234567,',
        21: b'"price":0.1,',
        22: b'"price":1234567.89,',
    }
    for resource_id, price in expected.items():
        response = await client.get(f"/api/v1/resource/{resource_id}")
        assert response.status_code == 200, resource_id
        assert price in response.content, resource_id


@sqlite_only
async def test_logo_is_the_absolute_storage_url_or_null(client: httpx.AsyncClient) -> None:
    with_icon = await client.get("/api/v1/resource/1")
    assert b'"logo":"http:\\/\\/marketplace.test\\/storage\\/images\\/1.png",' in with_icon.content
    assert (await client.get("/api/v1/resource/7")).json()["logo"] is None


@sqlite_only
async def test_unique_id_is_null_for_a_resource_created_on_the_current_platform(
    client: httpx.AsyncClient,
) -> None:
    assert (await client.get("/api/v1/resource/1")).json()["unique_id"] == "SERVICE_0123456789ABCDE"
    for resource_id in (2, 7, 8):
        assert (await client.get(f"/api/v1/resource/{resource_id}")).json()["unique_id"] is None


@sqlite_only
async def test_version_id_and_version_are_the_current_pointer_not_the_newest_version(
    client: httpx.AsyncClient,
) -> None:
    resource = (await client.get("/api/v1/resource/1")).json()
    assert resource["version_id"] == 11
    assert resource["version"]["id"] == 11
    assert resource["version"]["version"] == "1.1.0"


@sqlite_only
async def test_embedded_version_object_has_exactly_six_keys_in_order(client: httpx.AsyncClient) -> None:
    version = (await client.get("/api/v1/resource/1")).json()["version"]
    assert list(version) == VERSION_KEYS


@sqlite_only
async def test_without_a_current_version_version_id_and_version_are_null(client: httpx.AsyncClient) -> None:
    for resource_id in (2, 7, 8):
        response = await client.get(f"/api/v1/resource/{resource_id}")
        assert b'"version_id":null,' in response.content
        assert b'"version":null,' in response.content


@sqlite_only
async def test_no_changelog_or_file_field_is_ever_exposed(client: httpx.AsyncClient) -> None:
    bodies = [
        (await client.get("/api/v1/resource/1")).content,
        (await client.get("/api/v1/resource/versions/1")).content,
        (await client.get("/api/v1/resource/search")).content,
    ]
    for body in bodies:
        for leaked in (b"changelog", b"secret", b"file", b"eco.jar", b"checksum", b"abc", b"1000"):
            assert leaked not in body, leaked


@sqlite_only
async def test_download_is_the_resource_counter_not_a_sum_of_versions(client: httpx.AsyncClient) -> None:
    # The versions of resource 1 total 12 downloads; its own counter is 42.
    assert (await client.get("/api/v1/resource/1")).json()["download"] == 42


@sqlite_only
async def test_purchases_counts_only_unrevoked_purchase_accesses(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load(
        {
            "accesses": [
                {"id": 30, "user_id": 1, "resource_id": 8, "payment_id": 1, "source": "purchase"},
                {"id": 31, "user_id": 5, "resource_id": 8, "source": "purchase"},
                {"id": 32, "user_id": 6, "resource_id": 8, "source": "purchase", "revoked": True},
                {"id": 33, "user_id": 4, "resource_id": 8, "source": "manual"},
                {"id": 34, "user_id": 3, "resource_id": 8, "source": "gift"},
                {"id": 35, "user_id": 1, "resource_id": 7, "source": "gift"},
                {"id": 36, "user_id": 5, "resource_id": 7, "source": "manual"},
            ]
        }
    )
    # Resource 1: one active purchase, one refunded (revoked). Resource 8: two active purchases, a
    # revoked one, a manual and two gift grants. Resource 7: only manual and gift grants.
    purchases = {rid: (await client.get(f"/api/v1/resource/{rid}")).json()["purchases"] for rid in (1, 7, 8)}
    assert purchases == {1: 1, 7: 0, 8: 2}


@sqlite_only
async def test_purchases_is_zero_for_a_free_resource(client: httpx.AsyncClient) -> None:
    assert b'"purchases":0,' in (await client.get("/api/v1/resource/7")).content


@sqlite_only
async def test_timestamps_are_utc_with_six_fraction_digits(client: httpx.AsyncClient, load: Loader) -> None:
    await load(
        {
            "resources": [
                {"id": 20, "user_id": 1, "name": "Offset", "created_at": "2024-05-01T12:00:00+02:00",
                 "updated_at": "2024-06-30T23:30:00-01:00"},
            ]
        }
    )  # fmt: skip
    converted = await client.get("/api/v1/resource/20")
    assert b'"created_at":"2024-05-01T10:00:00.000000Z","updated_at":"2024-07-01T00:30:00.000000Z",' in (
        converted.content
    )
    defaulted = (await client.get("/api/v1/resource/7")).json()
    assert TIMESTAMP.match(defaulted["created_at"])
    assert TIMESTAMP.match(defaulted["updated_at"])


@sqlite_only
async def test_appended_keys_have_their_types(client: httpx.AsyncClient) -> None:
    reviewed = (await client.get("/api/v1/resource/1")).json()
    assert (reviewed["slug"], reviewed["rating_avg"], reviewed["reviews_count"]) == ("economie-pro", 4.5, 2)
    unreviewed = await client.get("/api/v1/resource/7")
    assert b'"rating_avg":0,"reviews_count":0}' in unreviewed.content


# --- Visibility and the {resource} binding ---------------------------------------------------


@sqlite_only
async def test_published_and_unlisted_resources_resolve_by_id(client: httpx.AsyncClient) -> None:
    for resource_id in (1, 2, 7, 8):
        response = await client.get(f"/api/v1/resource/{resource_id}")
        assert response.status_code == 200, resource_id
        assert response.json()["id"] == resource_id


@sqlite_only
async def test_draft_pending_rejected_deleted_and_unknown_resources_are_404(
    client: httpx.AsyncClient,
) -> None:
    for route in BOUND_ROUTES:
        for case, segment in HIDDEN:
            response = await client.get(route.format(segment))
            assert (response.status_code, response.content) == (404, NOT_FOUND), (route, case)
            assert response.headers["content-type"] == "application/json", (route, case)
            assert response.headers[VERSION] == "1", (route, case)


@sqlite_only
async def test_a_segment_that_is_not_plain_digits_is_404_never_500(client: httpx.AsyncClient) -> None:
    for route in BOUND_ROUTES:
        for segment in NOT_PLAIN_DIGITS:
            response = await client.get(route.format(segment))
            assert (response.status_code, response.content) == (404, NOT_FOUND), (route, segment)


@sqlite_only
async def test_leading_zeros_resolve_as_the_plain_id(client: httpx.AsyncClient) -> None:
    assert (await client.get("/api/v1/resource/0001")).content == RESOURCE_1
    assert (await client.get("/api/v1/resource/versions/0001")).content == VERSIONS_OF_1
    assert (await client.get("/api/v1/resource/version/00001")).content == b"1.1.0"
    assert (await client.get("/api/v1/resource/0007")).json()["id"] == 7


@sqlite_only
async def test_search_and_user_are_routes_not_resource_ids(client: httpx.AsyncClient) -> None:
    search = await client.get("/api/v1/resource/search")
    assert search.status_code == 200
    assert list(search.json())[:2] == ["current_page", "data"]
    user = await client.get("/api/v1/resource/user?name=bob")
    assert (user.status_code, user.content) == (200, b'[{"name":"bob"}]')
    unnamed = await client.get("/api/v1/resource/user")
    assert unnamed.status_code == 422


@sqlite_only
async def test_a_binding_404_consumes_group_quota(client: httpx.AsyncClient) -> None:
    first = await client.get("/api/v1/resource/3")
    second = await client.get("/api/v1/resource/abc")
    assert (first.status_code, second.status_code) == (404, 404)
    assert first.headers["x-ratelimit-remaining"] == "119"
    assert second.headers["x-ratelimit-remaining"] == "118"


@sqlite_only
async def test_head_on_a_resource_answers_like_get_without_a_body(client: httpx.AsyncClient) -> None:
    get = await client.get("/api/v1/resource/1")
    head = await client.head("/api/v1/resource/1")
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]
    assert (await client.head("/api/v1/resource/3")).status_code == 404


# --- 4. GET /resource/versions/{resource} ------------------------------------------------------


@sqlite_only
async def test_versions_are_a_bare_array_of_version_objects_oldest_first(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/v1/resource/versions/1")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == VERSIONS_OF_1


@sqlite_only
async def test_versions_are_ordered_by_id_not_by_date_or_load_order(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load(
        {
            "versions": [
                {"id": 40, "resource_id": 8, "version": "3", "created_at": "2024-01-01T00:00:00Z"},
                {"id": 20, "resource_id": 8, "version": "1", "created_at": "2024-03-01T00:00:00Z"},
                {"id": 30, "resource_id": 8, "version": "2", "created_at": "2024-02-01T00:00:00Z"},
                {"id": 25, "resource_id": 7, "version": "other"},
            ]
        }
    )
    versions = (await client.get("/api/v1/resource/versions/8")).json()
    assert [(version["id"], version["plugin_id"]) for version in versions] == [(20, 8), (30, 8), (40, 8)]
    assert [list(version) for version in versions] == [VERSION_KEYS] * 3


@sqlite_only
async def test_versions_of_a_resource_without_releases_is_an_empty_array(client: httpx.AsyncClient) -> None:
    for resource_id in (2, 7):  # unlisted, published
        response = await client.get(f"/api/v1/resource/versions/{resource_id}")
        assert (response.status_code, response.content) == (200, b"[]"), resource_id


@sqlite_only
async def test_versions_list_includes_uploads_that_are_not_current(client: httpx.AsyncClient) -> None:
    versions = (await client.get("/api/v1/resource/versions/1")).json()
    assert versions[-1]["id"] == 12
    assert (await client.get("/api/v1/resource/1")).json()["version_id"] == 11


# --- 5. GET /resource/version/{resource} -------------------------------------------------------


@sqlite_only
async def test_current_version_is_the_bare_pointer_number_as_plain_text(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/v1/resource/version/1")
    assert response.status_code == 200
    assert response.headers["content-type"] == TEXT_PLAIN
    assert response.headers[VERSION] == "1"
    assert response.content == b"1.1.0"  # the pointer (11), not the newest upload (12, 2.0.0-beta)


@sqlite_only
async def test_current_version_is_raw_text_without_quotes_escapes_or_newline(
    client: httpx.AsyncClient, load: Loader
) -> None:
    await load(
        {
            "resources": [{"id": 8, "user_id": 2, "name": "Half Price", "tag": "12.5 euros", "price": "12.50",
                           "version_id": 50}],
            "versions": [{"id": 50, "resource_id": 8, "version": 'v2.0/"é" build'}],
        }
    )  # fmt: skip
    response = await client.get("/api/v1/resource/version/8")
    assert response.status_code == 200
    assert response.headers["content-type"] == TEXT_PLAIN
    assert response.content == 'v2.0/"é" build'.encode()


@sqlite_only
async def test_current_version_without_a_release_is_the_literal_soon(client: httpx.AsyncClient) -> None:
    for resource_id in (2, 7):  # unlisted, published
        response = await client.get(f"/api/v1/resource/version/{resource_id}")
        assert response.status_code == 200, resource_id
        assert response.headers["content-type"] == TEXT_PLAIN
        assert response.content == b"(soon)", resource_id


@sqlite_only
async def test_current_version_404_is_json_not_plain_text(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/v1/resource/version/3")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert response.content == NOT_FOUND


def _keys(value: Any) -> set[str]:
    """Every key of every object nested in `value`."""
    if isinstance(value, dict):
        return set(value) | {key for item in value.values() for key in _keys(item)}
    if isinstance(value, list):
        return {key for item in value for key in _keys(item)}
    return set()


@sqlite_only
async def test_only_contract_keys_appear_in_resource_and_versions_bodies(client: httpx.AsyncClient) -> None:
    allowed = set(RESOURCE_KEYS) | set(VERSION_KEYS)
    assert _keys((await client.get("/api/v1/resource/1")).json()) <= allowed
    assert _keys((await client.get("/api/v1/resource/versions/1")).json()) <= set(VERSION_KEYS)
