"""What a serving worker loads: only what its requests need, so that its memory stays small.

Each check builds the application in a fresh interpreter, as a worker does, and lists the modules
it imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

_LIST_MODULES = """
import json, sys
from marketplace.app import build_app
from marketplace.config import Settings
build_app(Settings())
print(json.dumps(sorted(sys.modules)))
"""

_DATABASES = {
    "sqlite": "sqlite+aiosqlite:///{directory}/catalogue.db",
    "postgresql": "postgresql+asyncpg://postgres@127.0.0.1:5432/marketplace_unused",
}


def _worker_modules(tmp_path: Path, database: str, **environment: str) -> set[str]:
    """The modules loaded once a worker's application is built (nothing connects yet)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("MARKETPLACE_")}
    env.update(
        MARKETPLACE_DATABASE_URL=_DATABASES[database].format(directory=tmp_path),
        MARKETPLACE_APP_KEY="worker-imports",
        **environment,
    )
    done = subprocess.run(
        [sys.executable, "-c", _LIST_MODULES],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def _of(modules: set[str], *packages: str) -> list[str]:
    return sorted(name for name in modules if name.split(".")[0] in packages or name in packages)


@pytest.mark.parametrize("database", sorted(_DATABASES))
def test_a_serving_worker_without_redis_does_not_import_the_redis_client(
    tmp_path: Path, database: str
) -> None:
    assert _of(_worker_modules(tmp_path, database), "redis", "hiredis") == []


@pytest.mark.parametrize("database", sorted(_DATABASES))
def test_a_serving_worker_does_not_import_the_back_office_or_the_command_line(
    tmp_path: Path, database: str
) -> None:
    modules = _worker_modules(tmp_path, database)
    assert _of(modules, "click", "alembic", "rich", "pygments") == []
    assert _of(modules, "marketplace.cli", "marketplace.console", "marketplace.migrations") == []
    assert [
        name for name in modules if name.startswith(("marketplace.backoffice", "marketplace.importer"))
    ] == []


@pytest.mark.parametrize("database", sorted(_DATABASES))
def test_a_serving_worker_imports_the_upstreams_client_only_for_its_first_upstream_call(
    tmp_path: Path, database: str
) -> None:
    assert _of(_worker_modules(tmp_path, database), "httpx", "httpcore", "h11") == []


def test_a_serving_worker_on_sqlite_does_not_import_the_postgresql_driver(tmp_path: Path) -> None:
    assert _of(_worker_modules(tmp_path, "sqlite"), "asyncpg") == []
