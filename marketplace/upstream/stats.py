"""The usage-statistics service: a plugin's page address and the newest value of one chart."""

from __future__ import annotations

import asyncio
import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import quote

import httpx

# The statistics service's software ids and the URL segment of each.
SOFTWARE_SEGMENTS = {
    1: "bukkit",
    2: "bungeecord",
    3: "sponge",
    4: "server-implementation",
    5: "other",
    6: "velocity",
}

_NUMERIC_STRING = re.compile(r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$")


def percent_encode(text: str) -> str:
    """RFC 3986: every byte outside `A-Z a-z 0-9 - . _ ~` as upper-case `%XX` (a space is `%20`)."""
    return quote(text, safe="")


async def _get_json(http: httpx.AsyncClient, url: str, timeout_seconds: float) -> Any:
    """The decoded JSON of a 2xx answer; None for any failure."""
    try:
        async with asyncio.timeout(timeout_seconds):
            response = await http.get(url, headers={"Accept": "application/json"})
            if not response.is_success:
                return None
            return response.json()
    except (httpx.HTTPError, TimeoutError, ValueError):
        return None


async def fetch_stats_page_url(
    http: httpx.AsyncClient, stats_api_url: str, stats_page_url: str, stats_id: str, timeout_seconds: float
) -> str | None:
    """`{stats_page_url}/{segment}/{name}/{stats_id}`, or None when upstream gives nothing usable."""
    plugin = await _get_json(http, f"{stats_api_url}/{stats_id}", timeout_seconds)
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
    if isinstance(software_id, str) and software_id.isdigit():
        software_id = int(software_id)
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
    points = await _get_json(http, url, timeout_seconds)
    if not isinstance(points, list) or not points:
        return None
    first = points[0]
    if not isinstance(first, list) or len(first) < 2:
        return None
    return numeric_to_int(first[1])


def numeric_to_int(value: Any) -> int | None:
    """A numeric value (number or numeric string) truncated toward zero; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else None
    if isinstance(value, str) and _NUMERIC_STRING.match(value):
        try:
            return int(Decimal(value.strip()))
        except (InvalidOperation, ValueError, OverflowError):
            return None
    return None
