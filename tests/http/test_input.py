"""Input cleaning (trim, empty to null, recursively) and PHP-style query and body parsing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.requests import Request
from starlette.types import Message

from marketplace.http.input import RequestInput, clean, read_input, read_query


def request(
    query: bytes = b"", *, method: str = "GET", body: bytes = b"", content_type: str | None = None
) -> Request:
    headers = [] if content_type is None else [(b"content-type", content_type.encode())]
    scope = {
        "type": "http",
        "method": method,
        "path": "/api/v1/chat",
        "raw_path": b"/api/v1/chat",
        "query_string": query,
        "headers": headers,
    }
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(scope, receive)


def query(raw: bytes) -> RequestInput:
    return read_query(request(raw))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  padded  ", "padded"),
        ("\t\r\n value \n", "value"),
        ("\u00a0nbsp\u00a0", "nbsp"),
        ("\u3000ideographic\u3000", "ideographic"),
        ("\u2003em space\u2009", "em space"),
        ("\ufeffbom", "bom"),
        ("\u200bzero width\u200b", "zero width"),
        ("\u200eleft-to-right\u200e", "left-to-right"),
    ],
)
def test_strings_are_trimmed_of_unicode_white_space(raw: str, expected: str) -> None:
    assert clean(raw) == expected


def test_inner_white_space_is_kept() -> None:
    assert clean("  a  b\tc  ") == "a  b\tc"


@pytest.mark.parametrize("raw", ["", " ", "\t\n", "\u00a0\u3000"])
def test_empty_or_blank_string_becomes_null(raw: str) -> None:
    assert clean(raw) is None


def test_cleaning_is_recursive_through_arrays_and_maps() -> None:
    assert clean({"a": [" x ", "", {"b": "  ", "c": " y"}], "d": {"e": ""}}) == {
        "a": ["x", None, {"b": None, "c": "y"}],
        "d": {"e": None},
    }


@pytest.mark.parametrize("value", [0, 12, 1.5, True, False, None])
def test_non_strings_are_left_as_they_are(value: Any) -> None:
    assert clean(value) is value


def test_list_syntax_makes_an_array() -> None:
    assert query(b"a[]=1&a[]=2").get("a") == ["1", "2"]


def test_bracketed_key_makes_a_map() -> None:
    assert query(b"a[k]=v&a[j]=w").get("a") == {"k": "v", "j": "w"}


def test_nested_brackets_make_nested_arrays() -> None:
    assert query(b"a[k][]=1&a[k][]=2").get("a") == {"k": ["1", "2"]}


def test_repeated_plain_key_last_wins() -> None:
    assert query(b"page=1&page=2&page=3").get("page") == "3"


def test_a_plain_key_after_an_array_replaces_it() -> None:
    assert query(b"q[]=1&q=x").get("q") == "x"


def test_plus_is_a_space() -> None:
    assert query(b"q=hello+world").get("q") == "hello world"


def test_percent_escapes_are_decoded_as_utf8() -> None:
    assert query(b"q=%C3%A9t%C3%A9%20%2B%2F%26").get("q") == "été +/&"


def test_keys_are_percent_decoded_too() -> None:
    assert query(b"%6Eame=bob").get("name") == "bob"


def test_raw_utf8_bytes_in_the_query_are_utf8() -> None:
    assert query("q=été".encode()).get("q") == "été"


def test_query_values_are_cleaned() -> None:
    fields = query(b"name=++bob++&size=&q=%20%20&a[]=+x+&a[]=")
    assert fields.get("name") == "bob"
    assert fields.get("size") is None
    assert fields.get("q") is None
    assert fields.get("a") == ["x", None]


def test_a_field_sent_empty_is_present_but_null() -> None:
    fields = query(b"size=")
    assert fields.has("size")
    assert fields.get("size") is None
    assert not fields.has("page")


def test_key_without_value_is_present_and_null() -> None:
    fields = query(b"size")
    assert fields.has("size")
    assert fields.get("size") is None


async def test_json_body_is_read_cleaned_and_wins_over_query() -> None:
    body = json.dumps({"chat": "  111  ", "extra": ["", " a "], "n": 5}).encode()
    fields = await read_input(
        request(b"chat=999&other=+o+", method="POST", body=body, content_type="application/json")
    )
    assert fields.get("chat") == "111"
    assert fields.get("extra") == [None, "a"]
    assert fields.get("n") == 5
    assert fields.get("other") == "o"


async def test_a_json_body_is_read_whenever_the_content_type_mentions_json() -> None:
    fields = await read_input(
        request(method="POST", body=b'{"chat":"1"}', content_type="application/vnd.api+json; charset=utf-8")
    )
    assert fields.get("chat") == "1"


async def test_an_undecodable_json_body_reads_as_empty() -> None:
    fields = await read_input(
        request(b"chat=7", method="POST", body=b"{not json", content_type="application/json")
    )
    assert fields.get("chat") == "7"


async def test_form_body_is_parsed_like_a_query_and_cleaned() -> None:
    fields = await read_input(
        request(
            b"chat=999",
            method="POST",
            body=b"chat=+111+&custom_password=s%C3%A9cret&list[]=1&list[]=",
            content_type="application/x-www-form-urlencoded",
        )
    )
    assert fields.get("chat") == "111"
    assert fields.get("custom_password") == "sécret"
    assert fields.get("list") == ["1", None]
