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
# A key PHP stores as an integer: canonical decimal digits within 64 bits.
_INTEGER_KEY = re.compile(r"^(0|-?[1-9][0-9]{0,18})$")
_INT64_MAX = 2**63 - 1

# PHP's limits on request input: variables read per query string or form (`max_input_vars`; the
# rest is ignored), nesting of `a[b][c]` keys (`max_input_nesting_level`; a deeper variable is
# dropped), and nesting of a JSON document (`json_decode`'s depth; a deeper one does not decode).
MAX_INPUT_VARIABLES = 1000
MAX_INPUT_NESTING = 64
MAX_JSON_DEPTH = 512

# A UTF-16 surrogate left in decoded JSON text was an unpaired `\uD800`-style escape, which PHP's
# decoder refuses.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _clean_scalar(value: Any) -> Any:
    if isinstance(value, str):
        trimmed = value.strip(_TRIMMED)
        return trimmed if trimmed else None
    return value


def clean(value: Any) -> Any:
    """Trim strings and turn empty ones into None, through every array and map.

    Walked with a stack, not recursion: a JSON body may nest hundreds of levels deep.
    """
    if not isinstance(value, dict | list):
        return _clean_scalar(value)
    cleaned: dict[Any, Any] | list[Any] = {} if isinstance(value, dict) else []
    pending: list[tuple[Any, dict[Any, Any] | list[Any]]] = [(value, cleaned)]
    while pending:
        source, target = pending.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, item in items:
            child: Any
            if isinstance(item, dict | list):
                child = {} if isinstance(item, dict) else []
                pending.append((item, child))
            else:
                child = _clean_scalar(item)
            if isinstance(target, dict):
                target[key] = child
            else:
                target.append(child)
    return cleaned


class _PhpArray(dict[str, Any]):
    """A map being parsed, with PHP's next free integer key, so that `a[]=` costs constant time."""

    __slots__ = ("next_free",)

    def __init__(self) -> None:
        super().__init__()
        self.next_free: int | None = None

    def place(self, key: str) -> str:
        """The key a value is stored under: `""` appends; an integer key moves the next free one."""
        if key == "":
            key = str(self.next_free if self.next_free is not None else 0)
        if _INTEGER_KEY.match(key):
            number = int(key)
            if -_INT64_MAX - 1 <= number <= _INT64_MAX and (
                self.next_free is None or number >= self.next_free
            ):
                self.next_free = number + 1
        return key


def parse_query(raw: str) -> dict[str, Any]:
    """Parse a query string as PHP does: `a[]=1&a[]=2` is an array, `a[k]=v` a map, last wins.

    Linear in the length of `raw`; at most `MAX_INPUT_VARIABLES` variables are read.
    """
    result = _PhpArray()
    read = 0
    for pair in raw.split("&"):
        if not pair:
            continue
        if read == MAX_INPUT_VARIABLES:
            break
        read += 1
        name, _, value = pair.partition("=")
        key = unquote_plus(name)
        decoded = unquote_plus(value)
        match = _ARRAY_KEY.match(key)
        if match is None:
            if key:
                result[key] = decoded
            continue
        subkeys = _SUBKEY.findall(match.group(2))
        if len(subkeys) > MAX_INPUT_NESTING:
            continue
        _assign_nested(result, match.group(1), subkeys, decoded)
    # The top level is always a map of names, even when the names are 0, 1, ...
    return {name: _as_lists(value) for name, value in result.items()}


def _assign_nested(target: _PhpArray, base: str, subkeys: list[str], value: str) -> None:
    container = target
    key = base
    for subkey in subkeys:
        current = container.get(key)
        if not isinstance(current, _PhpArray):
            current = _PhpArray()
            container[key] = current
        container = current
        key = container.place(subkey)
    container[key] = value


def _as_lists(value: Any) -> Any:
    """PHP arrays with keys 0..n-1 become lists, so that they encode and compare as arrays."""
    if isinstance(value, dict):
        converted = {k: _as_lists(v) for k, v in value.items()}
        if converted and all(key == str(index) for index, key in enumerate(converted)):
            return list(converted.values())
        return converted
    return value


def decode_json(body: bytes) -> Any:
    """The JSON document in `body` as PHP's `json_decode` reads it; None when PHP would refuse it.

    Refused: text that is not UTF-8, invalid JSON, `NaN`/`Infinity`, nesting deeper than
    `MAX_JSON_DEPTH`, and unpaired surrogate escapes.
    """
    try:
        value = json.loads(body.decode("utf-8"), parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return None
    return value if _acceptable_json(value) else None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _acceptable_json(value: Any) -> bool:
    """Nesting at most `MAX_JSON_DEPTH` deep and no surrogate in any string (walked without recursion)."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return False
        elif isinstance(item, dict | list):
            if depth == MAX_JSON_DEPTH:
                return False
            if isinstance(item, dict):
                pending.extend((key, depth) for key in item)
                pending.extend((child, depth + 1) for child in item.values())
            else:
                pending.extend((child, depth + 1) for child in item)
    return True


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
    return RequestInput(clean(parse_query(query)))


async def read_input(request: Request) -> RequestInput:
    """Query and body merged (body wins), cleaned."""
    query_string = request.scope.get("query_string", b"").decode("utf-8", errors="replace")
    fields: dict[str, Any] = parse_query(query_string)
    content_type = request.headers.get("content-type", "").lower()
    if "json" in content_type:
        body = await request.body()
        decoded = decode_json(body) if body else None
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
        return parse_query(body.decode("utf-8", errors="replace"))
    try:
        form = await request.form()
    except Exception:  # a malformed multipart body reads as an empty form, as PHP does
        return {}
    pairs = "&".join(
        f"{quote_plus(key)}={quote_plus(value)}"
        for key, value in form.multi_items()
        if isinstance(value, str)
    )
    return parse_query(pairs)
