"""Gift codes: an advisory check of whether a code can be applied now."""

from __future__ import annotations

from starlette.responses import Response

from marketplace.catalogue.gifts import gift_by_code, is_applicable
from marketplace.http.errors import NotFound
from marketplace.http.json import JsonAnswer
from marketplace.http.routing import ApiCall
from marketplace.models import utcnow


async def check(call: ApiCall) -> Response:
    gift = await gift_by_code(call.services.reads.reader, call.params["gift"])
    if gift is None:
        raise NotFound()
    return JsonAnswer(
        {"code": gift.code, "percentage": gift.percentage, "active": is_applicable(gift, utcnow())}
    )
