"""Request input as the handlers see it: PHP-style query and body parsing, then cleaning.

Before any handler runs, strings are trimmed of white space at both ends and an empty string
becomes null, recursively through arrays. Path parameters are not cleaned. A JSON body is read
when `Content-Type` mentions `json` (an undecodable one reads as empty); a form body is read for
other methods than GET and HEAD. A body field wins over a query field of the same name.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote_plus, unquote_plus

from starlette.requests import Request

# White space that is trimmed: Unicode white space plus the invisible marks PHP's middleware adds.
_TRIMMED = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"  # every character str.isspace() accepts
    "\ufeff\u200b\u200e"
)

_ARRAY_KEY = re.compile(r"^([^\[]+)((?:\[[^\]]*\])+)")
_SUBKEY = re.compile(r"\[([^\]]*)\]")


def clean(value: Any) -> Any:
    """Trim strings and turn empty ones into None, recursively."""
    if isinstance(value, str):
        trimmed = value.strip(_TRIMMED)
        return trimmed if trimmed else None
    if isinstance(value, dict):
        return {key: clean(item) for key, item in value.items()}
    if isinstance(value, list):
        return [clean(item) for item in value]
    return value


def parse_query(raw: str) -> dict[str, Any]:
    """Parse a query string as PHP does: `a[]=1&a[]=2` is an array, `a[k]=v` a map, last wins."""
    result: dict[str, Any] = {}
    if not raw:
        return result
    for pair in raw.split("&"):
        if not pair:
            continue
        name, _, value = pair.partition("=")
        key = unquote_plus(name)
        decoded = unquote_plus(value)
        match = _ARRAY_KEY.match(key)
        if match is None:
            if key:
                result[key] = decoded
            continue
        _assign_nested(result, match.group(1), _SUBKEY.findall(match.group(2)), decoded)
    return result


def _assign_nested(target: dict[str, Any], base: str, subkeys: list[str], value: str) -> None:
    container: Any = target
    key: str = base
    for subkey in subkeys:
        current = container.get(key) if isinstance(container, dict) else None
        if not isinstance(current, dict):
            current = {}
            container[key] = current
        container = current
        key = subkey if subkey != "" else str(_next_index(container))
    container[key] = value


def _next_index(container: dict[str, Any]) -> int:
    indexes = [int(k) for k in container if k.lstrip("-").isdigit()]
    return max(indexes) + 1 if indexes else 0


def _as_lists(value: Any) -> Any:
    """PHP arrays with keys 0..n-1 become lists, so that they encode and compare as arrays."""
    if isinstance(value, dict):
        converted = {k: _as_lists(v) for k, v in value.items()}
        if converted and list(converted) == [str(i) for i in range(len(converted))]:
            return list(converted.values())
        return converted
    return value


class RequestInput:
    """The cleaned query and body of one request; `has` tells a field sent as null from a missing one."""

    __slots__ = ("_fields",)

    def __init__(self, fields: dict[str, Any]) -> None:
        self._fields = fields

    def has(self, name: str) -> bool:
        return name in self._fields

    def get(self, name: str) -> Any:
        return self._fields.get(name)


def read_query(request: Request) -> RequestInput:
    query = request.scope.get("query_string", b"").decode("utf-8", errors="replace")
    return RequestInput(clean(_as_lists(parse_query(query))))


async def read_input(request: Request) -> RequestInput:
    """Query and body merged (body wins), cleaned."""
    query_string = request.scope.get("query_string", b"").decode("utf-8", errors="replace")
    fields: dict[str, Any] = _as_lists(parse_query(query_string))
    content_type = request.headers.get("content-type", "").lower()
    if "json" in content_type:
        body = await request.body()
        try:
            decoded = json.loads(body) if body else None
        except (ValueError, UnicodeDecodeError):
            decoded = None
        if isinstance(decoded, dict):
            fields.update(decoded)
    elif request.method not in ("GET", "HEAD") and (
        content_type.startswith("application/x-www-form-urlencoded")
        or content_type.startswith("multipart/form-data")
    ):
        fields.update(await _read_form(request, content_type))
    return RequestInput(clean(fields))


async def _read_form(request: Request, content_type: str) -> dict[str, Any]:
    if content_type.startswith("application/x-www-form-urlencoded"):
        body = await request.body()
        return dict(_as_lists(parse_query(body.decode("utf-8", errors="replace"))))
    try:
        form = await request.form()
    except Exception:  # a malformed multipart body reads as an empty form, as PHP does
        return {}
    pairs = "&".join(
        f"{quote_plus(key)}={quote_plus(value)}"
        for key, value in form.multi_items()
        if isinstance(value, str)
    )
    return dict(_as_lists(parse_query(pairs)))
