"""`marketplace payments ...`: the payment transitions made outside the API, on both profiles."""

from __future__ import annotations

import httpx

from tests.backoffice.conftest import BackOffice
from tests.catalogue import PAID_UID


async def test_refund_moves_a_paid_payment_to_refunded_and_revokes_its_access(
    back_office: BackOffice, api: httpx.AsyncClient
) -> None:
    assert (await api.get(f"/api/v1/payment/{PAID_UID}")).json()["status"] == "paid"
    result = await back_office.ok("payments", "refund", PAID_UID, "--by", "alice", "--json")
    [change] = result.objects
    assert change["action"] == "payment.refunded"
    assert change["by"] == "alice"
    assert (change["before"], change["after"]) == ({"status": "paid"}, {"status": "refunded"})
    assert (await api.get(f"/api/v1/payment/{PAID_UID}")).json()["status"] == "refunded"
