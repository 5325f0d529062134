"""PHP-compatible JSON bytes and the JSON and plain-text answers built from them.

Deployed clients were written against PHP's `json_encode` defaults: `/` escaped as `\\/`, every
non-ASCII character as a lower-case `\\uXXXX` escape (surrogate pairs above U+FFFF), compact
separators. Floats print in their shortest round-trip form, and an integral amount prints as an
integer, which `json_number` arranges before encoding.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from starlette.responses import Response

JSON_MEDIA_TYPE = "application/json"
TEXT_MEDIA_TYPE = "text/plain; charset=UTF-8"


# A float token printed with a `.0` fraction (Python) where PHP prints an integer. It can also match
# inside a string; then the value is only walked for nothing.
_INTEGRAL_FLOAT = re.compile(r"\d\.0(?=[,}\]]|$)")


def encode(value: Any) -> bytes:
    """The bytes PHP's `json_encode` gives for `value`."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    if _INTEGRAL_FLOAT.search(text):
        text = json.dumps(_integral_floats_as_ints(value), ensure_ascii=True, separators=(",", ":"))
    return text.replace("/", "\\/").encode("ascii")


def _integral_floats_as_ints(value: Any) -> Any:
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        return {key: _integral_floats_as_ints(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_integral_floats_as_ints(item) for item in value]
    return value


def json_number(value: Decimal | float | int) -> int | float:
    """An amount as PHP prints it: an integer when it has no fractional part, else a float."""
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return int(value) if value.is_integer() else value


def timestamp(value: datetime | None) -> str | None:
    """`YYYY-MM-DDTHH:MM:SS.ffffffZ` of a naive UTC value (or an aware one, converted)."""
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    if value.year < 1000:
        # strftime does not pad such a year to four digits, isoformat does: the earlier bytes win.
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    # The same text as the strftime above, at a tenth of its cost (a page holds dozens).
    return value.isoformat(timespec="microseconds") + "Z"


class JsonAnswer(Response):
    """A JSON answer, `Content-Type: application/json` with no charset."""

    media_type = JSON_MEDIA_TYPE

    def __init__(
        self, content: Any, status_code: int = 200, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(encode(content), status_code=status_code, headers=headers)


class EncodedJsonAnswer(Response):
    """A JSON answer whose bytes were already encoded (a cached answer)."""

    media_type = JSON_MEDIA_TYPE


class TextAnswer(Response):
    """A bare plain-text answer: no quotes, no trailing newline."""

    media_type = TEXT_MEDIA_TYPE


def error_body(message: str, errors: Mapping[str, list[str]] | None = None) -> bytes:
    """The error object: `message`, then `errors` for validation failures."""
    body: dict[str, Any] = {"message": message}
    if errors is not None:
        body["errors"] = dict(errors)
    return encode(body)
