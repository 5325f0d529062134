"""Conditional GET (RFC 9110, section 13): validators of an answer, and 304 for a client that has it.

An answer that can be validated carries a strong `ETag` derived from its bytes (so every worker
gives the same one for the same bytes) and its `Last-Modified` time (`validators`).
`ConditionalAnswers` wraps an ASGI app and turns its 200 into a 304 without a body when the
request's preconditions say the client holds that answer already:

- `If-None-Match`: a list of entity tags, compared weakly (`W/"x"` matches `"x"`), or `*`; a
  match answers 304. When present, `If-Modified-Since` is not looked at.
- otherwise `If-Modified-Since`: a date at or after the answer's `Last-Modified` answers 304; a
  value that is not an HTTP date is ignored.

Only GET and HEAD are conditional. The check looks at the answer as it is sent, so a kept answer
(`worker_cache.py`) is checked like a fresh one. A 304 keeps the 200's headers but those that
describe its body (RFC 9110, 15.4.5).
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Headers of a 200 that describe its body, which its 304 leaves out.
_BODY_HEADERS = frozenset({b"content-type", b"content-length", b"content-encoding", b"content-language"})
_ENTITY_TAG = re.compile(r'(?:W/)?"([^"]*)"')


def entity_tag(body: bytes) -> str:
    """A strong entity tag of `body`: the same bytes give the same tag on every worker."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def http_date(moment: datetime) -> str:
    """`moment` (naive times are UTC) as an HTTP date: `Sat, 04 May 2024 10:00:00 GMT`."""
    aware = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return format_datetime(aware.replace(microsecond=0), usegmt=True)


def validators(body: bytes, last_modified: datetime) -> dict[str, str]:
    """The `ETag` and `Last-Modified` headers of an answer of `body` last changed at `last_modified`."""
    return {"ETag": entity_tag(body), "Last-Modified": http_date(last_modified)}


def _parsed_date(value: str) -> datetime | None:
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed


def none_match(if_none_match: str, etag: str | None) -> bool:
    """Whether `If-None-Match` is `*` or names the answer's tag (weak comparison)."""
    if if_none_match.strip() == "*":
        return True
    found = None if etag is None else _ENTITY_TAG.fullmatch(etag.strip())
    if found is None:
        return False
    return found.group(1) in _ENTITY_TAG.findall(if_none_match)


def not_modified(
    *,
    if_none_match: str | None,
    if_modified_since: str | None,
    etag: str | None,
    last_modified: str | None,
) -> bool:
    """Whether the client's preconditions say it holds the answer these validators describe."""
    if if_none_match is not None:
        return none_match(if_none_match, etag)
    if if_modified_since is None or last_modified is None:
        return False
    since = _parsed_date(if_modified_since)
    modified = _parsed_date(last_modified)
    return since is not None and modified is not None and since >= modified


def _request_header(scope: Scope, name: bytes) -> str | None:
    """A request header's value, several lines of it joined by commas; None when absent."""
    values = [value.decode("latin-1") for key, value in scope["headers"] if key.lower() == name]
    return ", ".join(values) if values else None


def _answer_header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


class ConditionalAnswers:
    """Answers 304 instead of a 200 the client holds, whichever way the app produced the 200."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        if_none_match = _request_header(scope, b"if-none-match")
        if_modified_since = _request_header(scope, b"if-modified-since")
        if if_none_match is None and if_modified_since is None:
            await self.app(scope, receive, send)
            return
        replaced = False

        async def conditional_send(message: Message) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start" and message["status"] == 200:
                headers = list(message.get("headers", ()))
                if not_modified(
                    if_none_match=if_none_match,
                    if_modified_since=if_modified_since,
                    etag=_answer_header(headers, b"etag"),
                    last_modified=_answer_header(headers, b"last-modified"),
                ):
                    replaced = True
                    kept = [(key, value) for key, value in headers if key.lower() not in _BODY_HEADERS]
                    message = {"type": "http.response.start", "status": 304, "headers": kept}
            elif replaced and message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b""}
            await send(message)

        await self.app(scope, receive, conditional_send)
