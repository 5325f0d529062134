"""The `/api/v1` route table, in the contract's declaration order (first match wins).

Written with the contract's words; `route_table` gives it with the configured platform names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from marketplace.api.v1 import authors, chat, gifts, licence, payments, resources, stats
from marketplace.api.v1.bindings import resource_in_path
from marketplace.http.limits import Limit, limit_key
from marketplace.http.routing import ApiRoute
from marketplace.platform_names import PlatformNames

PREFIX = "/api/v1"


# Every limiter's name, and every cache of upstream answers: their series exist from the start.
LIMITERS = ("api", "search", "licence_key", "licence_ip")
ANSWER_CACHES = (chat.SERVER_CACHE, stats.URL_CACHE, stats.CHART_CACHE)


def api_limits(ip: str, _params: Mapping[str, str]) -> Sequence[Limit]:
    """Every route of the group: 120 a minute per client address."""
    return (Limit("api", 120, limit_key("api", ip)),)


def search_limits(ip: str, _params: Mapping[str, str]) -> Sequence[Limit]:
    """Search, on top of the group's: 60 a minute per client address."""
    return (Limit("search", 60, limit_key("search", ip)),)


def licence_limits(ip: str, params: Mapping[str, str]) -> Sequence[Limit]:
    """The licence check, on top of the group's: 60 a minute per key and 240 per client address."""
    return (
        Limit("licence_key", 60, limit_key("licence", "key", params.get("key", ""))),
        Limit("licence_ip", 240, limit_key("licence", "ip", ip)),
    )


GROUP_LIMITS = (api_limits,)

ROUTES = (
    # A licence key is a buyer's credential: logs never show it.
    ApiRoute(
        "POST",
        "/licence/{key}",
        "api.v1.licence.check",
        licence.check,
        (licence_limits,),
        hidden_params=("key",),
    ),
    # The public catalogue reads: answers kept by each worker until the data changes.
    ApiRoute(
        "GET",
        "/resource/search",
        "api.v1.resources.search",
        resources.search,
        (search_limits,),
        cached=True,
    ),
    ApiRoute("GET", "/resource/user", "api.v1.resources.user", resources.user_names, cached=True),
    ApiRoute(
        "GET",
        "/resource/versions/{resource}",
        "api.v1.resources.versions",
        resources.versions,
        cached=True,
        resource_of=resource_in_path,
    ),
    ApiRoute(
        "GET",
        "/resource/version/{resource}",
        "api.v1.resources.version.current",
        resources.current_version_number,
        cached=True,
        resource_of=resource_in_path,
        answer_in_memory=resources.current_version_in_map,
    ),
    ApiRoute(
        "GET",
        "/resource/{resource}",
        "api.v1.resources.show",
        resources.show,
        cached=True,
        resource_of=resource_in_path,
    ),
    ApiRoute("GET", "/author/{user}", "api.v1.authors.show", authors.show, cached=True),
    ApiRoute("GET", "/gift/{gift}", "api.v1.gifts.check", gifts.check),
    ApiRoute("GET", "/payment/{payment}", "api.v1.payments.show", payments.show),
    ApiRoute("GET", "/chat/authentication", "api.v1.chat.auth", chat.authentication),
    ApiRoute("POST", "/chat", "api.v1.chat.store", chat.member_accesses),
    ApiRoute("POST", "/chat/{user}", "api.v1.chat.user", chat.member),
    ApiRoute("POST", "/chat/{user}/apply/{resource}", "api.v1.chat.grant", chat.grant),
    ApiRoute("GET", "/chat/{serverId}", "api.v1.chat.server", chat.server),
    ApiRoute("GET", "/stats/url/{resource}", "api.v1.stats.url", stats.page_url),
    ApiRoute("GET", "/stats/{resource}/{chart}", "api.v1.stats.stats", stats.chart),
)


def route_table(names: PlatformNames) -> tuple[ApiRoute, ...]:
    """The routes with the configured platform names in their paths and route names."""
    if names.are_the_contracts:
        return ROUTES
    return tuple(
        dataclasses.replace(route, path=names.rename(route.path), name=names.rename(route.name))
        for route in ROUTES
    )
