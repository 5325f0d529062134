"""Properties that hold for every input, checked on generated ones (Hypothesis: the same ones on every run,
the profile of tests/conftest.py):
input parsing is linear and never raises, the paginator's links are well formed for any page of
any catalogue, prices print as PHP prints them, and the JSON encoder gives PHP's bytes."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.requests import Request
from starlette.types import Message

from marketplace.http.input import clean, decode_json, parse_query, read_input
from marketplace.http.json import encode, json_number
from marketplace.http.pagination import NEXT_LABEL, PREVIOUS_LABEL, paginator_envelope
from tests.asgi import http_scope
from tests.steps import growth

PATH = "http://marketplace.test/api/v1/resource/search"
property_settings = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text made of what query strings are made of, so that brackets, escapes and separators meet.
query_text = st.text(alphabet="ab01[]=&%+.-_ \u00e9", max_size=40)


@property_settings
@given(query_text)
def test_parsing_a_query_never_raises_and_gives_a_map_of_names(raw: str) -> None:
    parsed = parse_query(raw)
    assert isinstance(parsed, dict)
    assert all(isinstance(name, str) and name for name in parsed)


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet="ab01[]=&%+", min_size=1, max_size=12).filter(lambda unit: "=" in unit))
def test_parsing_a_query_is_linear_in_its_length(unit: str) -> None:
    # Ten times the input may cost at most about ten times the work (plus a constant).
    pair = unit + "&"
    assert growth(parse_query, pair * 40, pair * 400) <= 12


@property_settings
@given(st.binary(max_size=200))
def test_decoding_any_bytes_as_json_never_raises(body: bytes) -> None:
    decode_json(body)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([b"[", b'{"a":', b'"\\u00e9",', b"1,", b'{"k":"v"},']))
def test_decoding_and_cleaning_json_is_linear_in_its_length(piece: bytes) -> None:
    def decode_and_clean(body: bytes) -> Any:
        return clean(decode_json(body))

    small = b"[" + piece * 40 + b"0" + b"]" * (1 + piece.count(b"[")) * 40
    large = b"[" + piece * 400 + b"0" + b"]" * (1 + piece.count(b"[")) * 400
    assert growth(decode_and_clean, small, large) <= 12


json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


@property_settings
@given(json_values, st.sampled_from(["application/json", "application/x-www-form-urlencoded", "text/plain"]))
def test_reading_any_body_never_raises(value: Any, content_type: str) -> None:
    body = json.dumps(value).encode()

    async def read() -> Any:
        delivered = False

        async def receive() -> Message:
            nonlocal delivered
            if delivered:
                return {"type": "http.disconnect"}
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        scope = http_scope("POST", "/api/v1/chat", [(b"content-type", content_type.encode())])
        return await read_input(Request(scope, receive))

    asyncio.run(read())


@property_settings
@given(json_values)
def test_cleaning_keeps_the_shape_and_trims_every_string(value: Any) -> None:
    cleaned = clean(value)

    def walk(original: Any, result: Any) -> None:
        if isinstance(original, dict):
            assert list(result) == list(original)
            for key in original:
                walk(original[key], result[key])
        elif isinstance(original, list):
            assert len(result) == len(original)
            for before, after in zip(original, result, strict=True):
                walk(before, after)
        elif isinstance(original, str):
            assert result is None or (result == result.strip() and result in original)
        else:
            assert result is original or result == original

    walk(value, cleaned)


def page_entries(links: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return links[1:-1]


@settings(max_examples=400, deadline=None)
@given(total=st.integers(0, 10**7), per_page=st.integers(1, 25), page=st.integers(1, 10**6))
def test_paginator_links_are_well_formed_for_any_page(total: int, per_page: int, page: int) -> None:
    last = max(1, math.ceil(total / per_page))
    rows = max(0, min(per_page, total - (page - 1) * per_page))
    body = paginator_envelope(
        PATH, [{"id": i} for i in range(rows)], total=total, page=page, per_page=per_page
    )

    previous, *entries, following = body["links"]
    assert previous["label"] == PREVIOUS_LABEL and following["label"] == NEXT_LABEL
    assert previous["page"] == (page - 1 if page > 1 else None)
    assert following["page"] == (page + 1 if page < last else None)
    numbers = [entry["page"] for entry in entries if entry["label"] != "..."]
    # Pages listed in order, within the catalogue, the first and the last always among them.
    assert numbers == sorted(set(numbers))
    assert numbers[0] == 1 and numbers[-1] == last
    assert len(entries) <= 13
    if last < 14:
        assert numbers == list(range(1, last + 1))
    else:
        # Three pages on each side of the current one (when it exists), the first two and the last two.
        assert {1, 2, last - 1, last} <= set(numbers)
        if page <= last:
            assert {p for p in range(page - 3, page + 4) if 1 <= p <= last} <= set(numbers)
    for before, after in itertools.pairwise(entries):
        # A separator stands exactly where pages are skipped, never twice in a row.
        gap = before["label"] != "..." and after["label"] != "..." and after["page"] - before["page"] != 1
        assert not gap
        assert not (before["label"] == "..." and after["label"] == "...")
    for entry in entries:
        if entry["label"] == "...":
            assert entry == {"url": None, "label": "...", "active": False}
        else:
            assert entry["label"] == str(entry["page"])
            assert entry["url"] == f"{PATH}?page={entry['page']}"
            assert entry["active"] == (entry["page"] == page)
    if rows:
        assert (body["from"], body["to"]) == ((page - 1) * per_page + 1, (page - 1) * per_page + rows)
    else:
        assert body["from"] is None and body["to"] is None
    assert body["last_page"] == last and body["total"] == total


@property_settings
@given(
    st.decimals(
        min_value=0, max_value=Decimal("99999999.99"), places=2, allow_nan=False, allow_infinity=False
    )
)
def test_prices_print_as_php_prints_them(amount: Decimal) -> None:
    printed = encode(json_number(amount)).decode()
    assert Decimal(printed) == amount
    if amount == amount.to_integral_value():
        assert re.fullmatch(r"[0-9]+", printed)
    else:
        # The shortest decimal: no exponent, no trailing zero.
        assert re.fullmatch(r"[0-9]+\.[0-9]*[1-9]", printed)


@property_settings
@given(json_values)
def test_the_encoder_gives_php_bytes_that_decode_to_the_same_value(value: Any) -> None:
    encoded = encode(value)
    text = encoded.decode("ascii")  # every non-ASCII character is escaped
    assert json.loads(text) == value
    # Every `/` is escaped and every \u escape is in lower-case hex (escaped backslashes aside).
    unescaped = text.replace("\\\\", "")
    assert re.search(r"(?<!\\)/", unescaped) is None
    assert all(digits == digits.lower() for digits in re.findall(r"\\u(.{4})", unescaped))


@property_settings
@given(st.integers(-(2**53), 2**53))
def test_integral_floats_print_as_integers(number: int) -> None:
    assert encode(float(number)) == str(number).encode()
    assert encode({"a": [float(number)]}) == b'{"a":[' + str(number).encode() + b"]}"


@settings(max_examples=400, deadline=None)
@given(literal=st.text(max_size=4), name=st.text(max_size=8))
def test_the_sqlite_name_range_holds_exactly_the_names_starting_with_the_prefix(
    literal: str, name: str
) -> None:
    from marketplace.catalogue.members import _name_range

    literal = literal.replace("%", "").replace("_", "")
    for candidate in (name, literal + name):
        if any(0xD800 <= ord(c) <= 0xDFFF for c in candidate + literal):
            continue  # not text a database can hold
        lowest, beyond = _name_range(literal)
        # SQLite compares UTF-8 bytes, which order as code points.
        inside = lowest.encode() <= candidate.encode() < beyond.encode()
        assert inside == candidate.startswith(literal)
