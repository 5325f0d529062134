"""Hostile input answers the contract's statuses: never an unlisted 5xx, never a traceback.

Each rule is pinned with the inputs that broke it before: numbers of thousands of digits, deep
or repeated nesting, invalid encodings, names the file system refuses. The one 500 the contract
lists (an array `q` on search) stays. What an HTTP client library would refuse to send (very long
URLs, raw `..` segments, oversized or slow bodies) is sent over real sockets in `test_live_http.py`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from marketplace.config import Settings
from tests.catalogue import MEMBER_CHAT_ID
from tests.conftest import GRANT_SECRET
from tests.profiles import sqlite_only

NOT_FOUND = b'{"message":"Not found."}'
CHAT_NOT_FOUND = b'{"message":"Chat not found"}'
FORBIDDEN = b'{"message":""}'
HUGE = "9" * 5000
JSON_HEADERS = {"Content-Type": "application/json"}
FORM_HEADERS = {"Content-Type": "application/x-www-form-urlencoded"}

_addresses: Iterator[int] = itertools.count(1)


async def send(client: httpx.AsyncClient, method: str, path: str, **options: Any) -> httpx.Response:
    """One request from an address of its own, so that the limiters never stand in the way."""
    number = next(_addresses)
    headers = {"X-Forwarded-For": f"10.{number >> 16 & 255}.{number >> 8 & 255}.{number & 255}"}
    headers.update(options.pop("headers", {}))
    response = await client.request(method, path, headers=headers, **options)
    assert response.status_code < 500, (method, path[:80], response.status_code, response.content[:200])
    assert b"Traceback" not in response.content
    return response


@sqlite_only
@pytest.mark.parametrize(
    "path",
    [
        f"/api/v1/resource/{HUGE}",
        f"/api/v1/resource/versions/{HUGE}",
        f"/api/v1/resource/version/{HUGE}",
        f"/api/v1/author/{HUGE}",
        f"/api/v1/stats/url/{HUGE}",
        f"/api/v1/stats/{HUGE}/servers",
        f"/api/v1/resource/{'0' * 4990}12",
        "/api/v1/resource/2147483648",
        "/api/v1/resource/%D9%A3",
    ],
)
async def test_numeric_path_segments_of_any_length_are_404(client: httpx.AsyncClient, path: str) -> None:
    response = await send(client, "GET", path)
    assert (response.status_code, response.content) == (404, NOT_FOUND)


async def test_zero_padded_ids_within_range_still_resolve(client: httpx.AsyncClient) -> None:
    response = await send(client, "GET", f"/api/v1/resource/{'0' * 4990}1")
    assert response.status_code == 200
    assert response.json()["id"] == 1


async def test_grant_to_a_resource_id_of_thousands_of_digits_is_404(client: httpx.AsyncClient) -> None:
    response = await send(
        client, "POST", f"/api/v1/chat/{MEMBER_CHAT_ID}/apply/{HUGE}", data={"custom_password": GRANT_SECRET}
    )
    assert (response.status_code, response.content) == (404, NOT_FOUND)


@sqlite_only
@pytest.mark.parametrize(
    ("query", "per_page", "page"),
    [
        (f"size={HUGE}", 25, 1),
        (f"size=-{HUGE}", 1, 1),
        (f"size=+{HUGE}", 25, 1),
        (f"page={HUGE}", 15, 1),
        ("page=9223372036854775808", 15, 1),
        ("size=%D9%A3", 1, 1),  # an Arabic-Indic digit is not an integer
        ("page=%D9%A3", 15, 1),
    ],
)
async def test_size_and_page_of_any_length_or_script_never_fail(
    client: httpx.AsyncClient, query: str, per_page: int, page: int
) -> None:
    response = await send(client, "GET", f"/api/v1/resource/search?{query}")
    assert response.status_code == 200
    assert (response.json()["per_page"], response.json()["current_page"]) == (per_page, page)


async def test_the_last_64_bit_page_is_an_empty_page_past_the_end(client: httpx.AsyncClient) -> None:
    response = await send(client, "GET", "/api/v1/resource/search?page=9223372036854775807")
    assert response.status_code == 200
    body = response.json()
    assert (body["current_page"], body["data"], body["from"], body["to"]) == (2**63 - 1, [], None, None)


@sqlite_only
@pytest.mark.parametrize(
    "query",
    [
        "name" + "[a]" * 2000 + "=x",
        "name" + "[]" * 2000 + "=x",
        f"name[{HUGE}]=x&name[]=y",
        "name[" * 3000 + "=x",
        "&" * 20000 + "name=x",
    ],
)
async def test_deeply_nested_or_huge_query_keys_are_read_as_php_would(
    client: httpx.AsyncClient, query: str
) -> None:
    response = await send(client, "GET", f"/api/v1/resource/user?{query}")
    assert response.status_code in (200, 422)


async def test_query_nested_deeper_than_php_allows_is_dropped(client: httpx.AsyncClient) -> None:
    # PHP drops a variable nested more than 64 levels: `q` is then missing, not an array (no 500).
    response = await send(client, "GET", "/api/v1/resource/search?q" + "[a]" * 65 + "=x")
    assert response.status_code == 200
    assert response.json()["total"] == 3


@sqlite_only
async def test_query_array_q_within_php_nesting_is_still_the_contracts_500(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/v1/resource/search?q" + "[a]" * 64 + "=x")
    assert (response.status_code, response.content) == (500, b'{"message":"Server Error"}')


@sqlite_only
@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"chat":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"chat":' + b'{"a":' * 600 + b"1" + b"}" * 600 + b"}",
        b'{"chat":"\\ud800"}',
        b'{"chat":"111111111111111111\\udc00"}',
        b'{"chat":"\\udfff\\ud800"}',
        b'{"chat":' + b"1" * 5000 + b"}",
        b'{"chat":NaN}',
        b'{"chat":Infinity}',
        '{"chat":"111111111111111111"}'.encode("utf-16"),
        b'\xef\xbb\xbf{"chat":"111111111111111111"}',
        b'{"chat":"\xff\xfe"}',
    ],
)
async def test_json_bodies_php_cannot_decode_read_as_empty(client: httpx.AsyncClient, body: bytes) -> None:
    response = await send(client, "POST", "/api/v1/chat", content=body, headers=JSON_HEADERS)
    assert (response.status_code, response.content) == (400, CHAT_NOT_FOUND)


async def test_json_nested_as_deep_as_php_allows_still_decodes(client: httpx.AsyncClient) -> None:
    document = b'{"chat":"' + MEMBER_CHAT_ID.encode() + b'","x":' + b"[" * 510 + b"]" * 510 + b"}"
    response = await send(client, "POST", "/api/v1/chat", content=document, headers=JSON_HEADERS)
    assert response.status_code == 200


async def test_valid_surrogate_pairs_still_decode(client: httpx.AsyncClient) -> None:
    # A paired escape is a real character (here an emoji): only unpaired ones are refused.
    response = await send(
        client, "POST", "/api/v1/chat", content=b'{"chat":"\\ud83d\\ude00"}', headers=JSON_HEADERS
    )
    assert (response.status_code, response.content) == (404, NOT_FOUND)


@pytest.mark.parametrize(
    "body",
    [
        b'{"custom_password":"\\ud800"}',
        b'{"custom_password":"' + GRANT_SECRET.encode() + b'\\udfff"}',
        b'{"custom_password":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ],
)
async def test_grant_with_an_undecodable_secret_is_403(client: httpx.AsyncClient, body: bytes) -> None:
    response = await send(
        client, "POST", f"/api/v1/chat/{MEMBER_CHAT_ID}/apply/1", content=body, headers=JSON_HEADERS
    )
    assert (response.status_code, response.content) == (403, FORBIDDEN)


@sqlite_only
@pytest.mark.parametrize(
    "body",
    [
        b"chat" + b"[a]" * 2000 + b"=1",
        b"chat[]=1&" * 60_000,
        b"%=%&=&chat",
    ],
)
async def test_form_bodies_of_any_shape_answer_the_contracts_400(
    client: httpx.AsyncClient, body: bytes
) -> None:
    response = await send(client, "POST", "/api/v1/chat", content=body, headers=FORM_HEADERS)
    assert (response.status_code, response.content) == (400, CHAT_NOT_FOUND)


async def test_form_field_of_invalid_utf_8_is_a_lookup_that_finds_nothing(client: httpx.AsyncClient) -> None:
    encoded = await send(client, "POST", "/api/v1/chat", content=b"chat=%ff%fe", headers=FORM_HEADERS)
    assert (encoded.status_code, encoded.content) == (404, NOT_FOUND)
    multipart = b'--b\r\nContent-Disposition: form-data; name="chat"\r\n\r\n\xff\xfe\r\n--b--\r\n'
    headers = {"Content-Type": "multipart/form-data; boundary=b"}
    parted = await send(client, "POST", "/api/v1/chat", content=multipart, headers=headers)
    assert (parted.status_code, parted.content) == (404, NOT_FOUND)


@sqlite_only
async def test_top_level_numeric_field_names_do_not_turn_the_input_into_a_list(
    client: httpx.AsyncClient,
) -> None:
    query = await send(client, "GET", "/api/v1/resource/user?0=a&1=b")
    assert query.status_code == 422
    form = await send(client, "POST", "/api/v1/chat", content=b"0=a&1=b", headers=FORM_HEADERS)
    assert (form.status_code, form.content) == (400, CHAT_NOT_FOUND)


@sqlite_only
@pytest.mark.parametrize(
    "body",
    [
        b'--b\r\nContent-Disposition: form-data; name="chat"\r\n\r\n',
        b"--b\r\n" * 5000,
        b"".join(b'--b\r\nContent-Disposition: form-data; name="f%d"\r\n\r\nx\r\n' % i for i in range(1500))
        + b"--b--\r\n",
    ],
)
async def test_malformed_multipart_bodies_read_as_empty(client: httpx.AsyncClient, body: bytes) -> None:
    headers = {"Content-Type": "multipart/form-data; boundary=b"}
    response = await send(client, "POST", "/api/v1/chat", content=body, headers=headers)
    assert (response.status_code, response.content) == (400, CHAT_NOT_FOUND)


@sqlite_only
@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/gift/" + "A" * 33,
        "/api/v1/gift/" + "A" * 30_000,
        "/api/v1/gift/%ED%A0%80",
        "/api/v1/gift/a%00b",
        "/api/v1/payment/" + "A" * 30_000,
    ],
)
async def test_long_or_undecodable_codes_are_404(client: httpx.AsyncClient, path: str) -> None:
    response = await send(client, "GET", path)
    assert (response.status_code, response.content) == (404, NOT_FOUND)


@sqlite_only
@pytest.mark.parametrize("method", ["POST"])
@pytest.mark.parametrize("chat_id", ["1" * 33, "1" * 30_000, "%ED%A0%80", "a%00b"])
async def test_long_or_undecodable_chat_ids_are_404(
    client: httpx.AsyncClient, method: str, chat_id: str
) -> None:
    member = await send(client, method, f"/api/v1/chat/{chat_id}")
    assert (member.status_code, member.content) == (404, NOT_FOUND)
    listed = await send(client, "POST", "/api/v1/chat", json={"chat": chat_id})
    assert (listed.status_code, listed.content) == (404, NOT_FOUND)


@sqlite_only
async def test_long_chart_names_answer_zero_without_failing(client: httpx.AsyncClient) -> None:
    # The chart name goes upstream percent-encoded; a URL too long to build is an unusable answer.
    response = await send(client, "GET", "/api/v1/stats/1/" + "x" * 40_000)
    assert (response.status_code, response.text) == (200, "0")


@sqlite_only
@pytest.mark.parametrize(
    "header",
    ["1.2.3.4, " * 2000, "\xff\xfe", "::ffff:1.2.3.4:80, [::1], 300.1.1.1", ", , ,"],
)
async def test_any_forwarded_for_header_is_read_without_failing(
    client: httpx.AsyncClient, header: str
) -> None:
    response = await client.get(
        "/api/v1/resource/1", headers=[(b"X-Forwarded-For", header.encode("latin-1"))]
    )
    assert response.status_code == 200


@sqlite_only
@pytest.mark.parametrize("name", ["a" * 5000, "/".join(["a" * 255] * 30), "loop", "loop/deeper", "dir\x00x"])
async def test_storage_names_the_file_system_refuses_are_404(
    client: httpx.AsyncClient, settings: Settings, name: str
) -> None:
    storage = Path(settings.storage_dir)
    storage.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (test set-up)
    (storage / "loop").symlink_to(storage / "loop")
    response = await client.get("/storage/" + name.replace("\x00", "%00"))
    assert (response.status_code, response.content) == (404, b"Not Found")


@sqlite_only
async def test_hostile_range_headers_on_storage_files_never_fail(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    storage = Path(settings.storage_dir) / "images"
    storage.mkdir(parents=True)
    (storage / "1.png").write_bytes(b"0123456789")
    for value in [
        "bytes=" + ",".join(["0-0"] * 2000),
        "bytes=99999999999999999999999-",
        "bytes=-" + HUGE,
        "x" * 5000,
    ]:
        response = await client.get("/storage/images/1.png", headers={"Range": value})
        assert response.status_code in (200, 206, 400, 416)
