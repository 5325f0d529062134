"""Payments: the status of one payment by its ULID."""

from __future__ import annotations

from starlette.responses import Response

from marketplace.catalogue.payments import is_ulid, payment_by_uid
from marketplace.http.errors import NotFound
from marketplace.http.json import JsonAnswer
from marketplace.http.routing import ApiCall


async def show(call: ApiCall) -> Response:
    uid = call.params["payment"]
    if not is_ulid(uid):
        raise NotFound()  # without a query
    payment = await payment_by_uid(call.services.reads.reader, uid)
    if payment is None:
        raise NotFound()
    return JsonAnswer(
        {
            "uid": payment.uid,
            "status": payment.status,
            "amount_cents": payment.amount_cents,
            "currency": payment.currency,
        }
    )
