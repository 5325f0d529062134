"""The length-aware paginator envelope of search, with its link window (three pages on each side)."""

from __future__ import annotations

import math
from typing import Any

PREVIOUS_LABEL = "\u00ab Previous"
NEXT_LABEL = "Next \u00bb"
ON_EACH_SIDE = 3


def page_window(current: int, last: int) -> list[int | None]:
    """The page numbers between previous and next; None stands for a `...` separator."""
    if last < ON_EACH_SIDE * 2 + 8:
        return list(range(1, last + 1))
    window = ON_EACH_SIDE + 4
    if current <= window:
        return [*range(1, window + ON_EACH_SIDE + 1), None, last - 1, last]
    if current > last - window:
        return [1, 2, None, *range(last - (window + ON_EACH_SIDE - 1), last + 1)]
    return [1, 2, None, *range(current - ON_EACH_SIDE, current + ON_EACH_SIDE + 1), None, last - 1, last]


def paginator_envelope(path: str, data: list[Any], *, total: int, page: int, per_page: int) -> dict[str, Any]:
    last = max(1, math.ceil(total / per_page))

    def url(number: int) -> str:
        return f"{path}?page={number}"

    has_previous = page > 1
    has_next = page < last
    links: list[dict[str, Any]] = [
        {
            "url": url(page - 1) if has_previous else None,
            "label": PREVIOUS_LABEL,
            "page": page - 1 if has_previous else None,
            "active": False,
        }
    ]
    for number in page_window(page, last):
        if number is None:
            links.append({"url": None, "label": "...", "active": False})
        else:
            links.append({"url": url(number), "label": str(number), "page": number, "active": number == page})
    links.append(
        {
            "url": url(page + 1) if has_next else None,
            "label": NEXT_LABEL,
            "page": page + 1 if has_next else None,
            "active": False,
        }
    )
    first_row = (page - 1) * per_page + 1 if data else None
    return {
        "current_page": page,
        "data": data,
        "first_page_url": url(1),
        "from": first_row,
        "last_page": last,
        "last_page_url": url(last),
        "links": links,
        "next_page_url": url(page + 1) if has_next else None,
        "path": path,
        "per_page": per_page,
        "prev_page_url": url(page - 1) if has_previous else None,
        "to": first_row + len(data) - 1 if first_row is not None else None,
        "total": total,
    }
