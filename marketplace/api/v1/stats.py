"""Statistics proxy: a resource's statistics page address and the newest value of one chart."""

from __future__ import annotations

from starlette.responses import Response

from marketplace.api.v1.bindings import bound_resource_id
from marketplace.catalogue.resources import resource_stats
from marketplace.http.errors import NotFound
from marketplace.http.json import TextAnswer
from marketplace.http.routing import ApiCall
from marketplace.upstream.stats import fetch_chart_value, fetch_stats_page_url

# The caches of upstream answers, as metrics name them.
URL_CACHE = "stats-url"
CHART_CACHE = "stats-chart"
STATS_URL_TTL_SECONDS = 21600
CHART_VALUE_TTL_SECONDS = 900
UNREADABLE_CHART = "0"


async def _stats_id(call: ApiCall) -> str | None:
    """The statistics id of the bound resource (404 when the resource is not visible)."""
    found = await resource_stats(call.services.reads.reader, bound_resource_id(call.params["resource"]))
    if found is None:
        raise NotFound()
    return found.stats_id or None


async def page_url(call: ApiCall) -> Response:
    stats_id = await _stats_id(call)
    if stats_id is None:
        raise NotFound()
    services = call.services
    settings = services.settings

    async def fetch() -> bytes | None:
        url = await fetch_stats_page_url(
            services.http,
            settings.stats_api_url,
            settings.stats_page_url,
            stats_id,
            settings.upstream_timeout_seconds,
        )
        return url.encode("utf-8") if url is not None else None

    # Keyed by the statistics id: resources sharing one share the entry.
    body = await services.answers.remember(URL_CACHE, (stats_id,), STATS_URL_TTL_SECONDS, fetch)
    if body is None:
        raise NotFound()
    return TextAnswer(body)


async def chart(call: ApiCall) -> Response:
    stats_id = await _stats_id(call)
    if stats_id is None:
        return TextAnswer(UNREADABLE_CHART)
    services = call.services
    settings = services.settings
    chart_name = call.params["chart"]

    async def fetch() -> bytes | None:
        value = await fetch_chart_value(
            services.http, settings.stats_api_url, stats_id, chart_name, settings.upstream_timeout_seconds
        )
        return str(value).encode("ascii") if value is not None else None

    body = await services.answers.remember(
        CHART_CACHE, (stats_id, chart_name), CHART_VALUE_TTL_SECONDS, fetch
    )
    return TextAnswer(body if body is not None else UNREADABLE_CHART)
