"""Helpers shared by the contract tests of the routes."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.config import Settings
from marketplace.database.changes import PROBE_STATEMENT
from marketplace.database.readers import observed_reads
from marketplace.fixtures.loader import load_document
from marketplace.services import build_services
from tests.catalogue import catalogue
from tests.conftest import make_client


@asynccontextmanager
async def catalogue_client(settings: Settings, **changes: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app on the test catalogue, with some settings changed."""
    services = build_services(settings.model_copy(update=changes))
    try:
        await load_document(services.engine, catalogue())
        async with make_client(services) as http:
            yield http
    finally:
        await services.close()


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def recorded_statements(engine: AsyncEngine) -> Iterator[list[str]]:
    """The SQL statements the engine and its worker's reader run inside the block.

    The change feed's probe notices, sent every few seconds whatever the requests do, are left out.
    """
    statements: list[str] = []

    def record(_connection: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement != PROBE_STATEMENT:
            statements.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        with observed_reads(engine, statements.append):
            yield statements
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


TOO_MANY_REQUESTS = b'{"message":"Too many requests."}'


def assert_refused_by(refused: httpx.Response, limit: int) -> None:
    """A 429 of the limiter allowing `limit` per window: body, headers, and a reset `Retry-After` away."""
    assert (refused.status_code, refused.content) == (429, TOO_MANY_REQUESTS)
    assert refused.headers["content-type"] == "application/json"
    assert refused.headers["x-ratelimit-limit"] == str(limit)
    assert refused.headers["x-ratelimit-remaining"] == "0"
    retry_after = int(refused.headers["retry-after"])
    assert 0 < retry_after <= 60
    assert abs(int(refused.headers["x-ratelimit-reset"]) - (time.time() + retry_after)) <= 2
