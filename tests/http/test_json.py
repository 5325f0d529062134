"""PHP-compatible JSON bytes, amounts, timestamps and the media types of JSON and plain-text answers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from marketplace.http.json import (
    EncodedJsonAnswer,
    JsonAnswer,
    TextAnswer,
    encode,
    error_body,
    json_number,
    timestamp,
)


def test_forward_slashes_are_escaped() -> None:
    assert encode({"logo": "http://x.test/storage/images/1.png"}) == (
        b'{"logo":"http:\\/\\/x.test\\/storage\\/images\\/1.png"}'
    )


def test_an_escaped_backslash_before_a_slash_keeps_both_escapes() -> None:
    assert encode("a\\/b") == b'"a\\\\\\/b"'


def test_non_ascii_is_a_lower_case_unicode_escape() -> None:
    assert encode("Économie é") == b'"\\u00c9conomie \\u00e9"'


def test_characters_above_the_bmp_are_a_surrogate_pair() -> None:
    assert encode("😀") == b'"\\ud83d\\ude00"'


def test_quote_and_backslash_are_escaped() -> None:
    assert encode('say "hi" \\') == b'"say \\"hi\\" \\\\"'


def test_control_characters_use_short_escapes_or_lower_case_u00xx() -> None:
    assert encode("\b\f\n\r\t\x00\x1f") == b'"\\b\\f\\n\\r\\t\\u0000\\u001f"'


def test_separators_are_compact() -> None:
    assert encode({"a": [1, 2], "b": {"c": None, "d": True}}) == b'{"a":[1,2],"b":{"c":null,"d":true}}'


def test_object_keys_keep_insertion_order() -> None:
    assert encode({"z": 1, "a": 2, "m": 3}) == b'{"z":1,"a":2,"m":3}'


def test_floats_print_in_shortest_round_trip_form() -> None:
    assert encode([9.99, 12.5, 0.1]) == b"[9.99,12.5,0.1]"


def test_an_integral_float_prints_without_fraction() -> None:
    assert encode({"rating_avg": 4.0}) == b'{"rating_avg":4}'
    assert encode([1.0, {"x": -3.0}, 2.5]) == b'[1,{"x":-3},2.5]'


def test_a_string_that_looks_like_an_integral_float_is_unchanged() -> None:
    assert encode({"version": "1.0", "n": 1.0}) == b'{"version":"1.0","n":1}'


def test_encoded_bytes_are_pure_ascii() -> None:
    encode("naïve ☃ 😀 / \u2028").decode("ascii")


@pytest.mark.parametrize(
    ("amount", "expected"),
    [
        (Decimal("10.00"), 10),
        (Decimal("0"), 0),
        (Decimal("0.00"), 0),
        (Decimal("9.99"), 9.99),
        (Decimal("12.50"), 12.5),
        (10.0, 10),
        (4.25, 4.25),
        (7, 7),
    ],
)
def test_an_amount_is_an_integer_when_exact_else_a_float(
    amount: Decimal | float | int, expected: float
) -> None:
    number = json_number(amount)
    assert number == expected
    assert type(number) is type(expected)


@pytest.mark.parametrize(
    ("amount", "expected"),
    [
        (Decimal("10.00"), b"10"),
        (Decimal("9.99"), b"9.99"),
        (Decimal("12.50"), b"12.5"),
        (Decimal("0"), b"0"),
    ],
)
def test_price_bytes_are_integer_or_shortest_decimal(amount: Decimal, expected: bytes) -> None:
    assert encode(json_number(amount)) == expected


def test_timestamp_has_microseconds_and_z() -> None:
    assert timestamp(datetime(2024, 5, 1, 10, 0, 0, 123456)) == "2024-05-01T10:00:00.123456Z"


def test_timestamp_of_whole_seconds_prints_six_zeros() -> None:
    assert timestamp(datetime(2024, 5, 1, 9, 8, 7)) == "2024-05-01T09:08:07.000000Z"


def test_timestamp_pads_small_microseconds() -> None:
    assert timestamp(datetime(2024, 1, 2, 3, 4, 5, 42)) == "2024-01-02T03:04:05.000042Z"


def test_timestamp_of_an_aware_value_is_converted_to_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert timestamp(datetime(2024, 5, 1, 1, 30, 0, tzinfo=plus_two)) == "2024-04-30T23:30:00.000000Z"
    assert timestamp(datetime(2024, 5, 1, 1, 30, 0, tzinfo=UTC)) == "2024-05-01T01:30:00.000000Z"


def test_timestamp_of_nothing_is_null() -> None:
    assert timestamp(None) is None


def test_json_answer_is_application_json_without_charset() -> None:
    answer = JsonAnswer({"message": "é/"}, status_code=404)
    assert answer.headers["content-type"] == "application/json"
    assert answer.status_code == 404
    assert answer.body == b'{"message":"\\u00e9\\/"}'


def test_encoded_json_answer_is_application_json_without_charset() -> None:
    answer = EncodedJsonAnswer(b'{"a":1}')
    assert answer.headers["content-type"] == "application/json"
    assert answer.body == b'{"a":1}'


def test_plain_text_answer_is_text_plain_utf8_with_the_bare_text() -> None:
    answer = TextAnswer("1.1.0")
    assert answer.headers["content-type"] == "text/plain; charset=UTF-8"
    assert answer.body == b"1.1.0"


def test_plain_text_answer_is_utf8_encoded() -> None:
    assert TextAnswer("é").body == "é".encode()


def test_error_object_is_message_then_errors() -> None:
    assert error_body("The name field is required.", {"name": ["The name field is required."]}) == (
        b'{"message":"The name field is required.","errors":{"name":["The name field is required."]}}'
    )


def test_error_object_without_errors_has_only_message() -> None:
    assert error_body("Not found.") == b'{"message":"Not found."}'
