"""The licence check: a constant success, whatever the key (the limiters still count it)."""

from __future__ import annotations

from starlette.responses import Response

from marketplace.http.json import EncodedJsonAnswer, encode
from marketplace.http.routing import ApiCall

LICENCE_VALID = encode({"status": "success", "message": "The license is valid"})


async def check(_call: ApiCall) -> Response:
    # Reads nothing, queries nothing, logs nothing, caches nothing.
    return EncodedJsonAnswer(LICENCE_VALID)
