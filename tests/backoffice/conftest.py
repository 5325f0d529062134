"""The back office under test: its commands run as the operator runs them (the `marketplace`
command, its settings from the environment) against the profile's database, while the app of
that database answers the API; a command's change must show in the API at once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from sqlalchemy import text

from marketplace.cli import main
from marketplace.config import Settings
from marketplace.services import Services
from tests.conftest import Loader, make_client

# A committed write reaches every worker's cache within this bound (as tests/test_worker_cache.py).
CHANGE_BOUND_SECONDS = 0.05


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()

    @property
    def objects(self) -> list[dict[str, Any]]:
        """The JSON object of each line (`--json`)."""
        return [json.loads(line) for line in self.lines]


class BackOffice:
    """Runs `marketplace ARGS...` with the test's settings in the environment."""

    def __init__(self, settings: Settings) -> None:
        self.environment = {
            "MARKETPLACE_DATABASE_URL": settings.database_url,
            "MARKETPLACE_REDIS_URL": settings.redis_url,
            "MARKETPLACE_REDIS_PREFIX": settings.redis_prefix,
            "MARKETPLACE_APP_KEY": settings.app_key,
            "MARKETPLACE_DATABASE_POOLER": settings.database_pooler,
        }
        self.settings = settings

    async def __call__(self, *args: str) -> CommandResult:
        # The command runs its own event loop (asyncio.run), hence in a thread of its own.
        result = await asyncio.to_thread(
            CliRunner().invoke, main, list(args), env=self.environment, prog_name="marketplace"
        )
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        await asyncio.sleep(CHANGE_BOUND_SECONDS)
        return CommandResult(result.exit_code, result.stdout, result.stderr)

    async def ok(self, *args: str) -> CommandResult:
        """The command, which must succeed."""
        result = await self(*args)
        assert result.exit_code == 0, result.stderr
        assert result.stderr == ""
        return result

    async def refused(self, *args: str) -> str:
        """The command, which must be refused with one line and write nothing; the line."""
        before = await self.snapshot()
        result = await self(*args)
        assert result.exit_code != 0
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("marketplace: ")
        assert await self.snapshot() == before, "a refused command wrote something"
        return lines[0]

    async def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of the tables the back office writes."""
        from marketplace.database.engine import create_engine

        engine = create_engine(self.settings)
        try:
            async with engine.connect() as connection:
                return {
                    table: [
                        tuple(row)
                        for row in await connection.execute(text(f"SELECT * FROM {table} ORDER BY id"))
                    ]
                    for table in (
                        "users",
                        "chat_accounts",
                        "resources",
                        "versions",
                        "gifts",
                        "payments",
                        "accesses",
                        "activity_log",
                        "webhook_subscriptions",
                        "webhook_events",
                        "webhook_deliveries",
                    )
                }
        finally:
            await engine.dispose()


@pytest.fixture
def back_office(settings: Settings) -> BackOffice:
    return BackOffice(settings)


@pytest.fixture
async def api(services: Services, load: Loader) -> AsyncIterator[httpx.AsyncClient]:
    """The API on the standard test catalogue, each request from a new address (no limiter in the way)."""
    from tests.catalogue import catalogue

    await load(catalogue())
    addresses = iter(range(1, 1 << 24))

    async def from_a_new_address(request: httpx.Request) -> None:
        n = next(addresses)
        request.headers["X-Forwarded-For"] = f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"

    async with make_client(services) as http:
        http.event_hooks["request"].append(from_a_new_address)
        yield http
