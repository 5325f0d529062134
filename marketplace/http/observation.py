"""What operators see of every request.

The edge (`edge.py`) resolves the client address once (the limiters and the activity log read
it from here) and gives the request an id (the caller's `X-Request-Id` when it is a plain token,
else a fresh one) that is sent back as `X-Request-Id` and stamped on every log line written
meanwhile; when the answer is complete, the recorder writes one access-log line and counts the
request and its duration per route name and status. What it logs of the request is bounded and free of secrets: the path with secret path
parameters hidden, the query string with secret fields' values hidden, never a body or a header.

A licence key is hidden from every logged path whatever became of the request: a path holding a
`/licence/` segment is logged up to it, then `[hidden]`, on every method and status (a key sent
with the wrong method is a 405; one holding `%2F` matches no route; a preflight or an oversized body
is answered before routing). Metrics are labelled by route name, never by path.
"""

from __future__ import annotations

import logging
import re
import secrets
from typing import Any
from urllib.parse import parse_qsl, quote

from starlette.types import Scope

from marketplace.http.client_ip import client_ip
from marketplace.telemetry.metrics import REQUEST_DURATION, REQUESTS
from marketplace.telemetry.tally import TALLY

access_logger = logging.getLogger("marketplace.access")

REQUEST_ID_HEADER = b"x-request-id"
UNMATCHED_ROUTE = "unmatched"
_REQUEST_ID = re.compile(rb"^[A-Za-z0-9._:-]{1,128}$")
# Query fields whose values never reach a log (the grant secret may be sent in the query string).
_SECRET_FIELD = re.compile(r"password|secret|token|key", re.IGNORECASE)
HIDDEN = "[hidden]"
# Logged text is capped: a path or query string is caller-chosen and may be very long.
MAX_LOGGED_CHARS = 1000
_STATE = "marketplace"


def request_state(scope: Scope) -> dict[str, Any]:
    state: dict[str, Any] = scope.setdefault("state", {}).setdefault(_STATE, {})
    return state


def request_client_ip(scope: Scope) -> str:
    """The client address resolved for this request (the socket peer when none was resolved)."""
    resolved = request_state(scope).get("client_ip")
    if resolved is None:
        resolved = client_ip(scope)
        request_state(scope)["client_ip"] = resolved
    return str(resolved)


def set_route_name(scope: Scope, name: str, logged_path: str | None = None) -> None:
    """Name the route that answers (metrics and logs), and the path to log if it must hide parts."""
    state = request_state(scope)
    state["route"] = name
    if logged_path is not None:
        state["logged_path"] = logged_path


# Everything after a `/licence/` segment, in any case, across decoded line breaks too.
_LICENCE_KEY = re.compile(r"(/licence/).*", re.IGNORECASE | re.DOTALL)


def loggable_path(path: str) -> str:
    """The path as logs may show it: a licence key hidden, capped in length, control characters
    escaped."""
    if (
        len(path) <= MAX_LOGGED_CHARS
        and path.isascii()
        and path.isprintable()
        and "/licence/" not in path.lower()
    ):
        return path  # most paths: nothing to hide, cut or escape, so no pattern needs to run
    return _printable(_LICENCE_KEY.sub(rf"\g<1>{HIDDEN}", path[: MAX_LOGGED_CHARS * 4])[:MAX_LOGGED_CHARS])


_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _printable(text: str) -> str:
    """Control characters escaped, so that a caller cannot start a forged line in a text log."""
    return _UNPRINTABLE.sub(lambda found: f"\\x{ord(found.group()):02x}", text)


def loggable_query(raw: bytes) -> str:
    """The query string with the values of secret fields hidden, capped in length."""
    if not raw:
        return ""
    text = raw[: MAX_LOGGED_CHARS * 4].decode("latin-1")
    if not _SECRET_FIELD.search(text):
        return _printable(text[:MAX_LOGGED_CHARS])
    pairs = parse_qsl(text, keep_blank_values=True, max_num_fields=None)
    shown = "&".join(
        f"{quote(name, safe='[]')}={HIDDEN if _SECRET_FIELD.search(name) else quote(value, safe='')}"
        for name, value in pairs
    )
    return _printable(shown[:MAX_LOGGED_CHARS])


class RequestRecorder:
    """Writes the access-log line and counts the request, once its answer is complete."""

    def __init__(self, *, access_log: bool) -> None:
        self.access_log = access_log
        # The metrics' children by (route, method, status): a few dozen, looked up once each.
        self._counted: dict[tuple[str, str, str], tuple[Any, Any]] = {}

    def record(
        self,
        scope: Scope,
        state: dict[str, Any],
        status: int | None,
        sent_bytes: int,
        seconds: float,
        request_id: str,
    ) -> None:
        route = str(state.get("route", UNMATCHED_ROUTE))
        shown_status = str(status) if status is not None else "none"
        method = scope["method"] if scope["method"] in _KNOWN_METHODS else "other"
        key = (route, method, shown_status)
        children = self._counted.get(key)
        if children is None:
            children = (REQUESTS.labels(*key), REQUEST_DURATION.labels(route, shown_status))
            self._counted[key] = children
        TALLY.count(children[0])
        TALLY.observe(children[1], seconds)
        if not self.access_log or not access_logger.isEnabledFor(logging.INFO):
            return
        path = loggable_path(str(state.get("logged_path") or scope["path"]))
        query = loggable_query(scope.get("query_string", b""))
        duration_ms = round(seconds * 1000, 2)
        method_text = _printable(scope["method"][:16])
        # Made and handed to the handlers directly: `Logger.info` would also walk the stack to name
        # the calling line, a third of a line's cost, which no log format shows.
        record = access_logger.makeRecord(
            access_logger.name,
            logging.INFO,
            _ACCESS_LOG_SOURCE,
            0,
            "%s %s %s %.2fms route=%s client=%s",
            (
                method_text,
                path + ("?" + query if query else ""),
                shown_status,
                duration_ms,
                route,
                state.get("client_ip"),
            ),
            None,
            extra={
                "fields": {
                    "request_id": request_id,
                    "method": method_text,
                    "path": path,
                    "query": query,
                    "route": route,
                    "status": status,
                    "duration_ms": duration_ms,
                    "bytes": sent_bytes,
                    "client_ip": state.get("client_ip"),
                }
            },
        )
        access_logger.handle(record)


_ACCESS_LOG_SOURCE = __file__
_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def request_id(scope: Scope) -> str:
    """The caller's `X-Request-Id` when it is a plain token, else a fresh one."""
    for name, value in scope.get("headers", ()):
        if name == REQUEST_ID_HEADER and _REQUEST_ID.match(value):
            return str(value.decode("ascii"))
    return secrets.token_hex(16)
