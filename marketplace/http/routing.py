"""First-match routing of `/api/v1` in declaration order, 404/405 detection and the limiter stack.

A request matches the first declared route whose path pattern and method both match (GET routes
also answer HEAD). When a path matches only under other methods, the answer is 405 listing every
method the path allows; when nothing matches, 404. Neither passes a limiter. A matched request is
counted by the group limiter, then by the route's own, before any parameter is resolved.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from marketplace.database.freshness import Stamp, answer_ended, answer_started
from marketplace.http.client_ip import client_network
from marketplace.http.errors import SERVER_ERROR_MESSAGE, ApiError
from marketplace.http.input import RequestInput, read_input, read_query
from marketplace.http.json import JsonAnswer, error_body
from marketplace.http.limits import LimitRule, TooManyRequests, enforce, limit_headers
from marketplace.http.observation import HIDDEN, UNMATCHED_ROUTE, request_client_ip, set_route_name
from marketplace.telemetry.metrics import DB_POOL_TIMEOUTS

if TYPE_CHECKING:
    from marketplace.http.worker_cache import CachedAnswer
    from marketplace.services import Services

logger = logging.getLogger("marketplace.http")

# The order in which a 405 lists allowed methods.
METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

_PARAMETER = re.compile(r"\{(\w+)\}")


class ApiCall:
    """What a handler receives: the request, its raw path parameters and the app's services."""

    __slots__ = ("_input", "client_ip", "params", "request", "route", "services")

    def __init__(
        self, request: Request, params: dict[str, str], route: ApiRoute, services: Services, ip: str
    ) -> None:
        self.request = request
        self.params = params
        self.route = route
        self.services = services
        self.client_ip = ip
        self._input: RequestInput | None = None

    def query(self) -> RequestInput:
        """The cleaned query string (for GET routes that read no body)."""
        if self._input is None:
            self._input = read_query(self.request)
        return self._input

    async def input(self) -> RequestInput:
        """The cleaned query and body, the body winning."""
        if self._input is None:
            self._input = await read_input(self.request)
        return self._input


Endpoint = Callable[[ApiCall], Awaitable[Response]]


@dataclass(frozen=True)
class ApiRoute:
    method: str
    path: str
    name: str
    endpoint: Endpoint
    limits: tuple[LimitRule, ...] = ()
    # Path parameters that are credentials of a caller: logs show the route with them hidden.
    hidden_params: tuple[str, ...] = ()
    # A public read whose 200 answers each worker may keep until the data changes (worker_cache.py).
    cached: bool = False
    # For a cached route whose answer depends on one resource only: that resource's id (None:
    # the path names none), so that a change to another resource keeps the answer.
    resource_of: Callable[[dict[str, str]], int | None] | None = None
    # An answer the worker holds in memory, tried before the cache: a kept answer, None when it
    # cannot say (the route runs), or it raises the route's error (a 404).
    answer_in_memory: Callable[[Services, dict[str, str]], CachedAnswer | None] | None = None
    pattern: re.Pattern[str] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        pieces = _PARAMETER.split(self.path)
        # split() alternates literal text and parameter names: text, name, text, name, ..., text
        regex = "".join(
            re.escape(piece) if i % 2 == 0 else f"(?P<{piece}>[^/]+)" for i, piece in enumerate(pieces)
        )
        object.__setattr__(self, "pattern", re.compile(regex))

    @property
    def methods(self) -> tuple[str, ...]:
        return ("GET", "HEAD") if self.method == "GET" else (self.method,)

    def logged_path(self, prefix: str, params: dict[str, str]) -> str | None:
        """The path as logs show it (hidden parameters replaced); None when nothing is hidden."""
        if not self.hidden_params:
            return None
        return prefix + _PARAMETER.sub(
            lambda found: HIDDEN if found.group(1) in self.hidden_params else params[found.group(1)],
            self.path,
        )


def _first_segment(route_path: str) -> str | None:
    """The route's first path segment when it is literal text, else None."""
    first = route_path[1:].split("/", 1)[0]
    return None if "{" in first else first


def not_found_answer(headers: dict[str, str] | None = None) -> Response:
    return JsonAnswer({"message": "Not found."}, status_code=404, headers=headers)


def _error_answer(error: ApiError) -> Response:
    return Response(
        error_body(error.message, error.errors), status_code=error.status_code, media_type="application/json"
    )


class ApiRouter:
    """The ASGI app of one route group (`/api/v1`)."""

    def __init__(
        self,
        prefix: str,
        routes: Sequence[ApiRoute],
        group_limits: Sequence[LimitRule],
        services: Services,
    ) -> None:
        self.prefix = prefix
        self.routes = tuple(routes)
        self.group_limits = tuple(group_limits)
        self.services = services
        # The routes a path may match, by its first segment (all routes but a few begin with a
        # literal one), each list in declaration order: a request tries only its candidates.
        self._anywhere = tuple(route for route in self.routes if _first_segment(route.path) is None)
        literals = {first for route in self.routes if (first := _first_segment(route.path)) is not None}
        self._candidates = {
            literal: tuple(route for route in self.routes if _first_segment(route.path) in (literal, None))
            for literal in literals
        }

    def match(self, method: str, path: str) -> tuple[ApiRoute, dict[str, str]] | list[str]:
        """The first route for `method` and `path`, or the methods the path allows (maybe none)."""
        relative = path[len(self.prefix) :].rstrip("/")
        allowed: set[str] = set()
        first = relative[1:].split("/", 1)[0]
        for route in self._candidates.get(first, self._anywhere):
            found = route.pattern.fullmatch(relative)
            if found is None:
                continue
            if method in route.methods:
                return route, found.groupdict()
            allowed.update(route.methods)
        return [m for m in METHOD_ORDER if m in allowed]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method: str = scope["method"]
        path: str = scope["path"]
        matched = self.match(method, path)
        if isinstance(matched, list):
            set_route_name(scope, UNMATCHED_ROUTE)
            await self._unmatched(method, path, matched)(scope, receive, send)
            return
        route, params = matched
        set_route_name(scope, route.name, route.logged_path(self.prefix, params))
        await self._dispatch(scope, receive, send, route, params)

    def _unmatched(self, method: str, path: str, allowed: list[str]) -> Response:
        if not allowed:
            return not_found_answer()
        listed = ", ".join(allowed)
        message = (
            f"The {method} method is not supported for route {path.strip('/')}. Supported methods: {listed}."
        )
        return JsonAnswer({"message": message}, status_code=405, headers={"Allow": listed})

    async def _dispatch(
        self, scope: Scope, receive: Receive, send: Send, route: ApiRoute, params: dict[str, str]
    ) -> None:
        ip = request_client_ip(scope)
        # Limiters count a client by its network (an IPv6 client's /64), not by its one address.
        counted_as = client_network(ip, self.services.settings.ipv6_limit_prefix)
        limits = [limit for rule in (*self.group_limits, *route.limits) for limit in rule(counted_as, params)]
        try:
            counted = await enforce(self.services.store, limits)
        except TooManyRequests as refused:
            refusal = JsonAnswer({"message": "Too many requests."}, status_code=429, headers=refused.headers)
            await refusal(scope, receive, send)
            return
        headers = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in limit_headers(counted).items()
        ]
        if route.answer_in_memory is not None:
            try:
                held = route.answer_in_memory(self.services, params)
            except ApiError as error:
                not_answered = _error_answer(error)
                not_answered.raw_headers.extend(headers)
                await not_answered(scope, receive, send)
                return
            if held is not None:
                await held.send(send, headers)
                return
        stamp: Stamp | None = None
        if route.cached:
            key = (route.name, scope["path"], scope["query_string"])
            hit, stamp = self.services.worker_cache.lookup(key)
            if hit is not None:
                await hit.send(send, headers)
                return
        request = Request(scope, receive)
        building = None if stamp is None else answer_started(stamp.as_of)
        try:
            response = await route.endpoint(ApiCall(request, params, route, self.services, ip))
            if stamp is not None:
                resource_id = None if route.resource_of is None else route.resource_of(params)
                self.services.worker_cache.keep(key, stamp, response, resource_id=resource_id)
        except ApiError as error:
            response = _error_answer(error)
        except Exception as error:
            # A failure inside a counted request still answers with the limiter headers, as every
            # error answer does; the edge only catches what happens outside the route.
            if isinstance(error, PoolTimeout):
                DB_POOL_TIMEOUTS.inc()
                logger.error("no free database connection for %s within the pool timeout", route.name)
            else:
                logger.exception("unhandled error in %s", route.name)
            response = Response(
                error_body(SERVER_ERROR_MESSAGE), status_code=500, media_type="application/json"
            )
        finally:
            if building is not None:
                answer_ended(building)
        response.raw_headers.extend(headers)
        await response(scope, receive, send)
