"""A back-office change is in the API of every worker at once: the workers' cached answers go."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from marketplace.config import Settings
from marketplace.fixtures.loader import load_document
from marketplace.services import build_services
from tests.backoffice.conftest import BackOffice
from tests.catalogue import PAID_UID, catalogue
from tests.conftest import make_client
from tests.test_worker_cache import until_following


@pytest.fixture
async def two_workers(settings: Settings) -> AsyncIterator[list[httpx.AsyncClient]]:
    """Two workers of one service on the standard catalogue, each following the database's changes."""
    built = [build_services(settings), build_services(settings)]
    await load_document(built[0].engine, catalogue())
    clients = [make_client(services, f"10.0.0.{n}") for n, services in enumerate(built, start=1)]
    try:
        for services in built:
            await until_following(services)
        yield clients
    finally:
        for client in clients:
            await client.aclose()
        for services in built:
            await services.close()


async def answers(workers: list[httpx.AsyncClient], path: str) -> list[bytes]:
    return [(await worker.get(path)).content for worker in workers]


async def test_a_release_and_a_refund_reach_every_workers_cached_answers(
    two_workers: list[httpx.AsyncClient], back_office: BackOffice
) -> None:
    assert await answers(two_workers, "/api/v1/resource/version/1") == [b"1.1.0"] * 2
    card = await answers(two_workers, "/api/v1/resource/1")  # kept by each worker now
    await back_office.ok("resources", "release", "1", "--version", "3.0.0", "--title", "Third")
    assert await answers(two_workers, "/api/v1/resource/version/1") == [b"3.0.0"] * 2
    await back_office.ok("payments", "refund", PAID_UID)
    refunded = await answers(two_workers, "/api/v1/resource/1")
    assert refunded[0] == refunded[1] != card[0]
    assert [b'"purchases":0' in answer for answer in refunded] == [True, True]
