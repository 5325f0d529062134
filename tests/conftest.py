"""Shared fixtures: a migrated database per test, the app on it, and a local upstream server; and
the Hypothesis profiles the property tests and the fuzzing run under."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest
from sqlalchemy import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.app import build_app
from marketplace.config import Settings
from marketplace.database.engine import create_engine
from marketplace.fixtures.loader import load_document
from marketplace.migrations.runner import upgrade_to_head
from marketplace.platform_names import PlatformNames
from marketplace.services import Services, build_services
from marketplace.stores import RedisStore
from tests.catalogue import catalogue
from tests.platform_names import RENAMED, ContractWordsTransport
from tests.profiles import (
    POSTGRES_ADMIN_URL,
    REDIS_URL,
    THIS_PROCESS_KEYS,
    VIA_POOLER,
    forget_redis_keys,
    postgres_admin,
    require_pooler,
    require_postgresql,
    require_redis,
    through_pooler,
    unique_name,
)
from tests.topology import standby, standby_database, standby_topology  # noqa: F401  (fixtures)
from tests.upstream import FakeUpstream

GRANT_SECRET = "correct horse battery staple"

# Hypothesis profiles, chosen by HYPOTHESIS_PROFILE (or `pytest --hypothesis-profile NAME`).
# `ci`, the default: every run on every machine tries the same examples (derandomized: drawn from
# a hash of each test), and nothing is kept between runs (no example database), so a fresh checkout
# passes or fails as CI does and one bad draw cannot haunt every later run. A failure prints its
# example and the blob `@reproduce_failure` takes. No deadline: the suite shares two cores, and
# speed is never asserted. `explore`: random draws, still with no database, to look for new
# failures; one found there becomes an `@example` of its test.
for _name, _derandomize in (("ci", True), ("explore", False)):
    hypothesis.settings.register_profile(
        _name,
        derandomize=_derandomize,
        database=None,
        print_blob=True,
        deadline=None,
        suppress_health_check=[hypothesis.HealthCheck.too_slow],
    )
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session", autouse=True)
def forget_the_runs_redis_keys() -> Iterator[None]:
    """The keys the run's tests wrote to the test Redis (under prefixes of this process's
    `unique_name`s, services they started included) are deleted when the run ends."""
    yield
    from redis.exceptions import ConnectionError as RedisUnreachable

    try:
        forget_redis_keys(THIS_PROCESS_KEYS)
    except RedisUnreachable:
        pass  # no Redis: nothing was written to it


@pytest.fixture(scope="session", autouse=True)
def patient_redis_in_this_process() -> Iterator[None]:
    """Stores built in the test process wait 5 s for a Redis answer instead of the service's 0.5 s.

    Those tests count limiter hits exactly, and on two shared cores the test process's own event
    loop can stall for half a second: the store would then fail open and admit a request the test
    expects refused. Failing open is tested on served processes, which keep the real timeout, and
    against refused connections, which fail at once."""
    patient = pytest.MonkeyPatch()
    patient.setattr(RedisStore, "SOCKET_TIMEOUT_SECONDS", 5.0)
    yield
    patient.undo()


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated, empty SQLite database, copied for each test (migrating once is faster)."""
    import asyncio

    path = tmp_path_factory.mktemp("template") / "template.db"

    async def migrate() -> None:
        engine = create_engine(Settings(database_url=f"sqlite:///{path}"))
        await upgrade_to_head(engine)
        await engine.dispose()

    asyncio.run(migrate())
    return path


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A migrated PostgreSQL database that each test's database is created from."""
    import asyncio

    require_postgresql()
    name = unique_name("mp_template")
    postgres_admin(f'CREATE DATABASE "{name}"')
    url = make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)

    async def migrate() -> None:
        engine = create_engine(Settings(database_url=url))
        await upgrade_to_head(engine)
        await engine.dispose()

    asyncio.run(migrate())
    yield name
    postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def profile(request: pytest.FixtureRequest) -> str:
    """Which profile the test runs on: SQLite + in-process store, or PostgreSQL + Redis."""
    if request.param == "postgresql":
        require_postgresql()
        require_redis()
        if VIA_POOLER:
            require_pooler()
    return str(request.param)


@pytest.fixture
def database_url(request: pytest.FixtureRequest, profile: str, tmp_path: Path) -> Iterator[str]:
    if profile == "sqlite":
        target = tmp_path / "marketplace.db"
        shutil.copyfile(request.getfixturevalue("migrated_template"), target)
        yield f"sqlite:///{target}"
        return
    template = request.getfixturevalue("postgres_template")
    name = unique_name("mp_test")
    postgres_admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    yield make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def redis_url(profile: str) -> str | None:
    return REDIS_URL if profile == "postgresql" else None


@pytest.fixture(scope="session")
def shared_upstream() -> Iterator[FakeUpstream]:
    server = FakeUpstream()
    yield server
    server.close()


@pytest.fixture
def upstream(shared_upstream: FakeUpstream) -> FakeUpstream:
    """The local upstream server, its answers and counters reset for each test."""
    shared_upstream.reset()
    return shared_upstream


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "platform_names" in metafunc.fixturenames and metafunc.definition.get_closest_marker(
        "contract_and_renamed"
    ):
        metafunc.parametrize("platform_names", ["contract", "renamed"], indirect=True)


@pytest.fixture
def platform_names(request: pytest.FixtureRequest) -> PlatformNames:
    """The contract's words, unless a test is parametrized with `renamed` (tests/platform_names.py)."""
    return RENAMED if getattr(request, "param", "contract") == "renamed" else PlatformNames()


@pytest.fixture
def settings(
    profile: str,
    database_url: str,
    redis_url: str | None,
    upstream: FakeUpstream,
    tmp_path: Path,
    platform_names: PlatformNames,
) -> Settings:
    database: dict[str, str] = {"database_url": database_url}
    if VIA_POOLER and profile == "postgresql":
        database = through_pooler(database_url)
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        **database,
        redis_url=redis_url,
        redis_prefix=unique_name("mp_test") + ":",
        base_url="http://marketplace.test",
        chat_api_url=f"{upstream.url}/chat-api",
        stats_api_url=f"{upstream.url}/stats-api",
        stats_page_url="https://stats.example/plugin",
        storage_dir=str(tmp_path / "storage"),
        chat_grant_secret=GRANT_SECRET,
        chat_name=platform_names.chat,
        stats_name=platform_names.stats,
        app_key="test-key",
        upstream_timeout_seconds=5.0,
    )


@pytest.fixture
async def services(settings: Settings) -> AsyncIterator[Services]:
    built = build_services(settings)
    yield built
    await built.close()


@pytest.fixture
def engine(services: Services) -> AsyncEngine:
    return services.engine


Loader = Callable[[dict[str, Any]], Awaitable[None]]


@pytest.fixture
def load(engine: AsyncEngine) -> Loader:
    async def load_fixture(document: dict[str, Any]) -> None:
        await load_document(engine, document)

    return load_fixture


@pytest.fixture
async def client(services: Services, load: Loader) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app on the standard test catalogue."""
    await load(catalogue())
    async with make_client(services) as http:
        yield http


@pytest.fixture
async def empty_client(services: Services) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app on an empty (migrated) database."""
    async with make_client(services) as http:
        yield http


def make_client(services: Services, client_ip: str = "127.0.0.1") -> httpx.AsyncClient:
    """A client of the app that speaks the contract's words whatever the configured platform names."""
    transport: httpx.AsyncBaseTransport = httpx.ASGITransport(
        app=build_app(services=services), client=(client_ip, 50000)
    )
    names = services.settings.platform_names
    if not names.are_the_contracts:
        transport = ContractWordsTransport(transport, names)
    return httpx.AsyncClient(transport=transport, base_url="http://marketplace.test")
