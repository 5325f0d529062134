"""The OpenAPI 3.1 document of `/api/v1`, served at `GET /openapi.json` and shown at `GET /docs`.

One operation per route of the route table (and a HEAD operation beside each GET), keyed by the
route's name, so that a route without a description (or a description without a route) fails at
start-up. Schemas describe exactly the bytes the routes send: every key required, nothing else
allowed; statuses are every status a route can answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from marketplace.http.body import TIMEOUT_MESSAGE, TOO_LARGE_MESSAGE
from marketplace.http.routing import ApiRoute
from marketplace.platform_names import PlatformNames

JSON = "application/json"
TEXT = "text/plain"
FORM = "application/x-www-form-urlencoded"

_TIMESTAMP = {
    "type": "string",
    "pattern": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$",
    "description": "ISO 8601 UTC with microseconds, e.g. `2024-05-01T10:00:00.000000Z`.",
    "examples": ["2024-05-01T10:00:00.000000Z"],
}
_DIGITS = {"type": "string", "pattern": "^[0-9]+$"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _object(properties: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


SCHEMAS: dict[str, Any] = {
    "Timestamp": _TIMESTAMP,
    "Version": _object(
        {
            "id": {"type": "integer", "description": "Version id"},
            "plugin_id": {"type": "integer", "description": "The resource id"},
            "version": {"type": "string", "maxLength": 32, "description": "Version number"},
            "title": {"type": "string", "description": "Release title"},
            "download": {"type": "integer", "minimum": 0, "description": "Download counter of this version"},
            "created_at": _ref("Timestamp"),
        },
        "A released version. Exactly these six keys, in this order.",
    ),
    "Resource": _object(
        {
            "id": {"type": "integer", "description": "Resource id"},
            "user_id": {"type": "integer", "description": "Author's user id (see `/author/{user}`)"},
            "name": {"type": "string", "description": "Display name"},
            "tag": {"type": "string", "maxLength": 160, "description": "Tagline"},
            "price": {
                "type": "number",
                "minimum": 0,
                "description": "Price in euros: an integer when exact (`10`), else the shortest decimal (`9.99`); 0 when free",
            },
            "category_id": {
                "type": ["integer", "null"],
                "description": "Category id (null only for a resource stored without a category)",
            },
            "unique_id": {
                "type": ["string", "null"],
                "description": "Legacy identifier of resources imported from the earlier platform, else null",
            },
            "version_id": {"type": ["integer", "null"], "description": "Id of the current version"},
            "download": {"type": "integer", "minimum": 0, "description": "Total download counter"},
            "purchases": {
                "type": "integer",
                "minimum": 0,
                "description": "Accesses bought and not revoked (manual and gift grants not counted)",
            },
            "logo": {"type": ["string", "null"], "description": "Absolute URL of the icon, or null"},
            "version": _nullable(_ref("Version")),
            "created_at": _ref("Timestamp"),
            "updated_at": _ref("Timestamp"),
            "slug": {"type": "string"},
            "rating_avg": {"type": "number", "minimum": 0, "maximum": 5},
            "reviews_count": {"type": "integer", "minimum": 0},
        },
        "A resource (plugin) as anonymous callers see it. Keys in this order; new keys are only ever appended.",
    ),
    "PageLink": _object(
        {
            "url": {"type": ["string", "null"]},
            "label": {"type": "string", "description": "A page number, `« Previous` or `Next »`"},
            "page": {"type": ["integer", "null"]},
            "active": {"type": "boolean"},
        },
        "A page entry of the paginator's links (previous and next are null when disabled).",
    ),
    "PageSeparator": _object(
        {
            "url": {"type": "null"},
            "label": {"const": "..."},
            "active": {"const": False},
        },
        "The separator entry of a long page range.",
    ),
    "SearchPage": _object(
        {
            "current_page": {"type": "integer", "minimum": 1},
            "data": {"type": "array", "items": _ref("Resource"), "maxItems": 25},
            "first_page_url": {"type": "string"},
            "from": {"type": ["integer", "null"]},
            "last_page": {"type": "integer", "minimum": 1},
            "last_page_url": {"type": "string"},
            "links": {"type": "array", "items": {"anyOf": [_ref("PageLink"), _ref("PageSeparator")]}},
            "next_page_url": {"type": ["string", "null"]},
            "path": {"type": "string"},
            "per_page": {"type": "integer", "minimum": 1, "maximum": 25},
            "prev_page_url": {"type": ["string", "null"]},
            "to": {"type": ["integer", "null"]},
            "total": {"type": "integer", "minimum": 0},
        },
        "One page of the published catalogue. Page URLs carry only `?page=N`.",
    ),
    "UserName": _object({"name": {"type": "string"}}, "A user name."),
    "Author": _object(
        {
            "id": {"type": "integer"},
            "chat": {
                "type": ["string", "null"],
                "description": "Chat-platform user id (snowflake) of the linked account",
            },
            "name": {"type": "string"},
        },
        "An author's public identity.",
    ),
    "Gift": _object(
        {
            "code": {"type": "string", "maxLength": 32, "description": "The code as stored"},
            "percentage": {"type": "integer", "minimum": 1, "maximum": 100},
            "active": {
                "type": "boolean",
                "description": "Enabled, started, not expired and quota not exhausted",
            },
        },
        "An advisory check of a gift code.",
    ),
    "Payment": _object(
        {
            "uid": {"type": "string", "pattern": "^[0-7][0-9A-HJKMNP-TV-Z]{25}$", "description": "ULID"},
            "status": {"enum": ["pending", "paid", "unpaid", "refunded", "disputed", "cancelled"]},
            "amount_cents": {"type": "integer", "minimum": 0},
            "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        },
        "A payment's status.",
    ),
    "Access": _object(
        {
            "id": {"type": "integer"},
            "user_id": {"type": "integer", "description": "Service user id of the member"},
            "plugin_id": {"type": "integer", "description": "Resource id"},
            "payment_id": {"type": ["integer", "null"], "description": "Null for gift and manual grants"},
            "created_at": _nullable(_ref("Timestamp")),
            "updated_at": _nullable(_ref("Timestamp")),
        },
        "An active access of a member to a resource.",
    ),
    "ChatMember": _object(
        {
            "user": _object(
                {
                    "name": {"type": "string"},
                    "id": {"type": "integer"},
                    "avatar": {
                        "type": ["string", "null"],
                        "description": "Absolute URL of the avatar, or null",
                    },
                },
                "The member.",
            ),
            "plugins": {"type": "array", "items": _ref("Access")},
        },
        "A chat member and what they own.",
    ),
    "ChatServer": _object(
        {"id": {"type": "string"}, "name": {"type": "string"}, "invite": {"type": ["string", "null"]}},
        "A chat server's public card.",
    ),
    "LicenceValid": _object(
        {"status": {"const": "success"}, "message": {"const": "The license is valid"}},
        "The licence check's constant answer.",
    ),
    "GrantOutcome": _object(
        {
            "message": {
                "enum": ["ok", "ko"],
                "description": "`ok`: granted or reactivated; `ko`: already owned",
            }
        },
        "The grant's outcome.",
    ),
    "Error": _object({"message": {"type": "string"}}, "Every error but validation: `{message}`."),
    "ValidationError": _object(
        {
            "message": {"type": "string", "description": "The first error message"},
            "errors": {
                "type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            },
        },
        "A validation error (only `GET /resource/user`).",
    ),
    "ChatBody": {
        "type": "object",
        "properties": {"chat": {"type": "string", "description": "Chat user id (snowflake); send a string"}},
    },
    "GrantBody": {
        "type": "object",
        "properties": {
            "custom_password": {"type": "string", "description": "The shared secret of the grant"}
        },
    },
    "LicenceBody": {
        "type": "object",
        "properties": {"unique_id": {"type": "string", "description": "Legacy field; ignored"}},
    },
}

HEADERS: dict[str, Any] = {
    "X-Service-Api-Version": {
        "description": "Version of the API; on every answer under `/api`.",
        "required": True,
        "schema": {"type": "string", "const": "1"},
    },
    "X-Request-Id": {
        "description": "Id of the request, as written in the service's logs (the caller's own when it sent a plain token).",
        "required": True,
        "schema": {"type": "string"},
    },
    "X-RateLimit-Limit": {
        "description": "Requests allowed per minute by the tightest limiter of the route.",
        "required": True,
        "schema": _DIGITS,
    },
    "X-RateLimit-Remaining": {
        "description": "Requests that limiter still allows in its current window.",
        "required": True,
        "schema": _DIGITS,
    },
    "Retry-After": {
        "description": "Seconds until the refusing limiter's window ends.",
        "required": True,
        "schema": _DIGITS,
    },
    "X-RateLimit-Reset": {
        "description": "Unix time at which the refusing limiter's window ends.",
        "required": True,
        "schema": _DIGITS,
    },
}


def _header(name: str, required: bool = True) -> dict[str, Any]:
    if required:
        return {"$ref": f"#/components/headers/{name}"}
    optional = dict(HEADERS[name])
    optional["required"] = False
    return optional


_ALWAYS = ("X-Service-Api-Version", "X-Request-Id")
_LIMITED = ("X-RateLimit-Limit", "X-RateLimit-Remaining")


def _headers(*, limited: bool | None) -> dict[str, Any]:
    """Headers of an answer: `limited` True when the limiters' headers are always there, None when
    they may be missing (a path that matches no route)."""
    headers = {name: _header(name) for name in _ALWAYS}
    if limited is not False:
        headers.update({name: _header(name, required=bool(limited)) for name in _LIMITED})
    return headers


def _json(schema: str, description: str, *, limited: bool | None = True) -> dict[str, Any]:
    return {
        "description": description,
        "headers": _headers(limited=limited),
        "content": {JSON: {"schema": _ref(schema)}},
    }


RESPONSES: dict[str, Any] = {
    "NotFound": _json(
        "Error",
        '`{"message": "Not found."}`: unknown or hidden model (the limiters counted the call), or a '
        "path that matches no route.",
        limited=None,
    ),
    "TooManyRequests": {
        "description": '`{"message": "Too many requests."}`: a limiter\'s window is full (not counted).',
        "headers": {
            **{name: _header(name) for name in _ALWAYS},
            **{name: _header(name) for name in (*_LIMITED, "Retry-After", "X-RateLimit-Reset")},
        },
        "content": {JSON: {"schema": _ref("Error")}},
    },
    "PayloadTooLarge": _json(
        "Error",
        f'`{{"message": "{TOO_LARGE_MESSAGE}"}}`: a body over the service\'s cap (1 MiB by default).',
        limited=False,
    ),
    "RequestTimeout": _json(
        "Error", f'`{{"message": "{TIMEOUT_MESSAGE}"}}`: the body did not arrive in time.', limited=False
    ),
}


def _path(name: str, description: str, **schema: Any) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "minLength": 1, **schema},
    }


_RESOURCE = _path(
    "resource",
    "Resource id: plain digits (leading zeros allowed). Any other segment, or a resource that is not "
    "Published or Unlisted, is 404.",
)


NOT_FOUND = {"404": {"$ref": "#/components/responses/NotFound"}}


def _operation(
    summary: str,
    description: str,
    ok: dict[str, Any],
    *,
    parameters: Sequence[dict[str, Any]] = (),
    errors: dict[str, Any] = NOT_FOUND,
    body: str | None = None,
) -> dict[str, Any]:
    """An operation with its success and error answers, and the refusals every route may answer."""
    responses: dict[str, Any] = {**ok, **errors}
    responses["408"] = {"$ref": "#/components/responses/RequestTimeout"}
    responses["413"] = {"$ref": "#/components/responses/PayloadTooLarge"}
    responses["429"] = {"$ref": "#/components/responses/TooManyRequests"}
    operation: dict[str, Any] = {
        "summary": summary,
        "description": description,
        "parameters": list(parameters),
        "responses": dict(sorted(responses.items())),
    }
    if body is not None:
        operation["requestBody"] = {
            "required": False,
            "content": {JSON: {"schema": _ref(body)}, FORM: {"schema": _ref(body)}},
        }
    return operation


def _ok_json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "200": {
            "description": description,
            "headers": _headers(limited=True),
            "content": {JSON: {"schema": schema}},
        }
    }


def _ok_text(description: str) -> dict[str, Any]:
    return {
        "200": {
            "description": description,
            "headers": _headers(limited=True),
            "content": {TEXT: {"schema": {"type": "string"}}},
        }
    }


# One operation per route name of the route table.
OPERATIONS: dict[str, dict[str, Any]] = {
    "api.v1.licence.check": _operation(
        "Licence check",
        "Always valid, for any key: reads nothing, queries nothing. A key containing `/` (even `%2F`) "
        "matches no route (404). Limits: 120/min per address (group), 60/min per key, 240/min per address.",
        _ok_json(_ref("LicenceValid"), '`{"status":"success","message":"The license is valid"}`'),
        parameters=[_path("key", "The licence key: any single path segment.")],
        body="LicenceBody",
    ),
    "api.v1.resources.search": _operation(
        "Search the published catalogue",
        "Published resources by ascending id. Never 422: `size` and `page` are read leniently. "
        "Limits: 120/min per address (group) and 60/min per address (search).",
        _ok_json(_ref("SearchPage"), "A page of the catalogue (empty `data` past the last page)."),
        parameters=[
            {
                "name": "size",
                "in": "query",
                "required": False,
                "description": "Rows per page, clamped to 1..25; 15 when missing; 1 for anything that is not an integer (empty included).",
                "schema": {"type": "integer", "default": 15},
            },
            {
                "name": "page",
                "in": "query",
                "required": False,
                "description": "Page number; anything but an integer of at least 1 means page 1.",
                "schema": {"type": "integer", "minimum": 1, "default": 1},
            },
            {
                "name": "q",
                "in": "query",
                "required": False,
                "description": "Substring of the name or tagline, case-insensitive, truncated to 80 characters; "
                "`%` and `_` widen the match. Must be a scalar: an array (`q[]=x`) answers 500.",
                "schema": {"type": "string"},
            },
        ],
        errors={"500": _json("Error", '`{"message": "Server Error"}`: `q` sent as an array.')},
    ),
    "api.v1.resources.user": _operation(
        "User names by prefix",
        "At most 10 names of users whose name starts with `name` (case-insensitive; `%` and `_` are patterns), sorted.",
        _ok_json(
            {"type": "array", "items": _ref("UserName"), "maxItems": 10}, "Matching names (maybe `[]`)."
        ),
        parameters=[
            {
                "name": "name",
                "in": "query",
                "required": True,
                "description": "The prefix: a string of at most 255 characters (after trimming, not empty).",
                "schema": {"type": "string", "minLength": 1, "maxLength": 255},
            }
        ],
        errors={
            "422": _json(
                "ValidationError",
                "`name` missing, blank, an array or longer than 255 characters.",
            )
        },
    ),
    "api.v1.resources.versions": _operation(
        "Versions of a resource",
        "Every version, oldest first (the last is not necessarily the current one).",
        _ok_json({"type": "array", "items": _ref("Version")}, "The versions (maybe `[]`)."),
        parameters=[_RESOURCE],
    ),
    "api.v1.resources.version.current": _operation(
        "Current version number",
        "The version number the resource's current-version pointer names, as bare text; `(soon)` when none.",
        _ok_text("The version number, no quotes, no newline; `(soon)` when nothing is released."),
        parameters=[_RESOURCE],
    ),
    "api.v1.resources.show": _operation(
        "One resource",
        "A Published or Unlisted resource.",
        _ok_json(_ref("Resource"), "The resource."),
        parameters=[
            {
                **_RESOURCE,
                "schema": {"type": "string", "minLength": 1, "not": {"enum": ["search", "user"]}},
            }
        ],
    ),
    "api.v1.authors.show": _operation(
        "An author",
        "A user by id (closed and deleted accounts excluded).",
        _ok_json(_ref("Author"), "The author."),
        parameters=[_path("user", "User id: plain digits.")],
    ),
    "api.v1.gifts.check": _operation(
        "Check a gift code",
        "Advisory: does not reserve or consume the code. Case-insensitive.",
        _ok_json(
            _ref("Gift"),
            "The code's state (`active` false when disabled, not started, expired or exhausted).",
        ),
        parameters=[_path("gift", "The code as issued.")],
    ),
    "api.v1.payments.show": _operation(
        "A payment's status",
        "By its public reference (ULID, case-insensitive); anything else is 404 without a lookup.",
        _ok_json(_ref("Payment"), "The payment."),
        parameters=[_path("payment", "The payment's ULID.")],
    ),
    "api.v1.chat.auth": _operation(
        "Chat sign-in",
        "A temporary redirect into the website's sign-in flow (for a browser). `code` and `state` are ignored.",
        {
            "302": {
                "description": "Redirect to `{base_url}/auth/chat/redirect` (empty body).",
                "headers": {
                    **_headers(limited=True),
                    "Location": {"required": True, "schema": {"type": "string"}},
                },
            }
        },
        errors={},
    ),
    "api.v1.chat.store": _operation(
        "A chat member's accesses",
        "The active accesses (by ascending id) of the member who linked the chat account `chat`. Writes nothing.",
        _ok_json({"type": "array", "items": _ref("Access")}, "The accesses (maybe `[]`)."),
        errors={
            "400": _json("Error", '`{"message": "Chat not found"}`: `chat` missing, blank or not a string.'),
            **NOT_FOUND,
        },
        body="ChatBody",
    ),
    "api.v1.chat.user": _operation(
        "A chat member",
        "The member who linked this chat account, and their active accesses. Writes nothing.",
        _ok_json(_ref("ChatMember"), "The member."),
        parameters=[_path("user", "Chat user id (snowflake), not a service user id.")],
    ),
    "api.v1.chat.grant": _operation(
        "Grant a resource to a chat member",
        "Creates (or reactivates) a manual access. Order: the resource (404), then the secret (403, even for "
        "an unknown member), then the member (404). Idempotent.",
        _ok_json(_ref("GrantOutcome"), "`ok` when granted or reactivated, `ko` when already owned."),
        parameters=[_path("user", "Chat user id (snowflake)."), _RESOURCE],
        body="GrantBody",
        errors={
            **NOT_FOUND,
            "403": _json(
                "Error",
                '`{"message": ""}`: the secret is missing, wrong or not a string, or none is configured.',
            ),
        },
    ),
    "api.v1.chat.server": _operation(
        "A chat server's public card",
        "Read from the chat platform's public widget; cached 10 minutes when found. Any upstream failure is 404.",
        _ok_json(_ref("ChatServer"), "The server's card."),
        parameters=[
            _path("serverId", "The server id: digits only.", **{"not": {"enum": ["authentication"]}})
        ],
    ),
    "api.v1.stats.url": _operation(
        "Address of a resource's statistics page",
        "Built from the statistics service's plugin object; cached 6 hours per statistics id.",
        _ok_text("The URL, as bare text."),
        parameters=[_RESOURCE],
    ),
    "api.v1.stats.stats": _operation(
        "Newest value of a chart",
        "The first value of the chart as an integer; `0` without a statistics id or when upstream gives nothing usable.",
        _ok_text("An integer, as bare text."),
        parameters=[_RESOURCE, _path("chart", "The chart's name (e.g. `servers`, `players`).")],
    ),
}


def _head_of(operation: dict[str, Any]) -> dict[str, Any]:
    """The HEAD twin of a GET operation: the same statuses and headers, no body."""
    responses = {}
    for status, response in operation["responses"].items():
        if "$ref" in response:
            name = response["$ref"].rsplit("/", 1)[1]
            response = RESPONSES[name]
        responses[status] = {"description": response["description"], "headers": response.get("headers", {})}
    return {
        "summary": operation["summary"] + " (headers only)",
        "description": "As the GET operation, with an empty body.",
        "parameters": operation["parameters"],
        "responses": responses,
    }


DESCRIPTION = """\
The public API of the marketplace: the catalogue, authors, gift codes, payments, the licence check,
the chat-bot routes and the statistics proxy. The payloads are a frozen compatibility contract:
keys, their order, statuses, content types and escaped bytes do not change.

- JSON answers are `application/json` (no charset), with `/` written `\\/` and non-ASCII
  characters as `\\uXXXX`; plain-text answers are `text/plain; charset=UTF-8`.
- Before any handler, strings of the query and body are trimmed and empty strings become null.
- Every answer under `/api` carries `X-Service-Api-Version: 1`; errors are always JSON.
- Any method a path does not list answers 405 with an `Allow` header; a path that matches no route, 404.
- Rate limits are fixed windows of 60 s per client address (120/min for every route, plus the
  route's own). Every answer of a route carries `X-RateLimit-Limit` and `X-RateLimit-Remaining`;
  a 429 adds `Retry-After` and `X-RateLimit-Reset`. Calls that end in 404 count.
- CORS on `/api/v1/*` for GET, HEAD and OPTIONS from any origin; POST routes are for servers.
- Bodies over 1 MiB (the operator's setting) are refused with 413 before they are read.
"""


def openapi_document(routes: Sequence[ApiRoute], prefix: str, names: PlatformNames) -> dict[str, Any]:
    """The document of the given route table (in the contract's words), with the configured platform
    names wherever the contract writes `chat` and `stats`; every route must have its operation and
    vice versa."""
    route_names = {route.name for route in routes}
    if route_names != set(OPERATIONS):
        missing = sorted(route_names - set(OPERATIONS))
        unknown = sorted(set(OPERATIONS) - route_names)
        raise RuntimeError(
            f"OpenAPI operations out of step with the routes: missing {missing}, unknown {unknown}"
        )
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        # Grouped by area, as route names are (`api.v1.<area>.<action>`).
        tags = [route.name.split(".")[2]]
        operation = {"operationId": route.name, "tags": tags, **OPERATIONS[route.name]}
        item = paths.setdefault(route.path, {})
        item[route.method.lower()] = operation
        if route.method == "GET":
            item["head"] = {
                "operationId": route.name + ".head",
                "tags": tags,
                **_head_of(OPERATIONS[route.name]),
            }
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "Marketplace API", "version": "1", "description": DESCRIPTION},
        "servers": [{"url": prefix}],
        "paths": paths,
        "components": {"schemas": SCHEMAS, "headers": HEADERS, "responses": RESPONSES},
    }
    return {names.rename(key): _renamed(item, names) for key, item in document.items()}


def _renamed(value: Any, names: PlatformNames) -> Any:
    """Every key and text of the document with the configured platform names."""
    if isinstance(value, str):
        return names.rename(value)
    if isinstance(value, dict):
        return {names.rename(key): _renamed(item, names) for key, item in value.items()}
    if isinstance(value, list):
        return [_renamed(item, names) for item in value]
    return value
