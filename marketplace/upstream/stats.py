"""The usage-statistics service: a plugin's page address and the newest value of one chart."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from marketplace.upstream.calls import get_json

if TYPE_CHECKING:
    import httpx

# The upstream's name in metrics and logs.
UPSTREAM = "stats"

# The statistics service's software ids and the URL segment of each.
SOFTWARE_SEGMENTS = {
    1: "bukkit",
    2: "bungeecord",
    3: "sponge",
    4: "server-implementation",
    5: "other",
    6: "velocity",
}

_NUMERIC_STRING = re.compile(r"^\s*[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\s*$")
# A chart value beyond a 64-bit integer is unusable (PHP's integer cast would overflow).
_INT64 = 2**63


def percent_encode(text: str) -> str:
    """RFC 3986: every byte outside `A-Z a-z 0-9 - . _ ~` as upper-case `%XX` (a space is `%20`)."""
    return quote(text, safe="")


async def fetch_stats_page_url(
    http: httpx.AsyncClient, stats_api_url: str, stats_page_url: str, stats_id: str, timeout_seconds: float
) -> str | None:
    """`{stats_page_url}/{segment}/{name}/{stats_id}`, or None when upstream gives nothing usable."""
    plugin = await get_json(http, UPSTREAM, f"{stats_api_url}/{stats_id}", timeout_seconds)
    if not isinstance(plugin, dict):
        return None
    name = plugin.get("name")
    segment = _software_segment(plugin.get("software"))
    if not isinstance(name, str) or not name or segment is None:
        return None
    return f"{stats_page_url}/{segment}/{percent_encode(name)}/{stats_id}"


def _software_segment(software: Any) -> str | None:
    if not isinstance(software, dict):
        return None
    software_id = software.get("id")
    if isinstance(software_id, str) and software_id.isascii() and software_id.isdigit():
        software_id = int(software_id) if len(software_id) <= 18 else None
    if (
        isinstance(software_id, int)
        and not isinstance(software_id, bool)
        and software_id in SOFTWARE_SEGMENTS
    ):
        return SOFTWARE_SEGMENTS[software_id]
    url = software.get("url")
    return url if isinstance(url, str) and url else None


async def fetch_chart_value(
    http: httpx.AsyncClient, stats_api_url: str, stats_id: str, chart: str, timeout_seconds: float
) -> int | None:
    """The first pair's value of the chart, as an integer; None when it is missing or not numeric."""
    url = f"{stats_api_url}/{stats_id}/charts/{percent_encode(chart)}/data/?maxElements=1"
    points = await get_json(http, UPSTREAM, url, timeout_seconds)
    if not isinstance(points, list) or not points:
        return None
    first = points[0]
    if not isinstance(first, list) or len(first) < 2:
        return None
    return numeric_to_int(first[1])


def numeric_to_int(value: Any) -> int | None:
    """A numeric value (number or numeric string) truncated toward zero; None for anything else."""
    number: int | float | Decimal
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = value
    elif isinstance(value, str) and _NUMERIC_STRING.match(value):
        try:
            number = Decimal(value.strip())
        except InvalidOperation:
            return None
    else:
        return None
    # Compared before converting: the integer of a value such as 1e999999999 would take ages.
    if isinstance(number, float) and not math.isfinite(number):
        return None
    if not -_INT64 < number < _INT64:
        return None
    return int(number)
