"""The settings' defaults are the operator interface's: a script written against the documented
defaults finds the service where the documents say."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from marketplace.config import Settings


@pytest.fixture
def documented_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    for name in list(os.environ):
        if name.startswith("MARKETPLACE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no `.env` file here
    return Settings()


def test_the_default_database_is_marketplace_db_in_the_working_directory(
    documented_defaults: Settings,
) -> None:
    assert documented_defaults.database_url == "sqlite:///./marketplace.db"


def test_the_default_storage_folder_and_base_url_are_the_documented_ones(
    documented_defaults: Settings,
) -> None:
    assert documented_defaults.storage_dir == "./storage"
    assert documented_defaults.base_url == "http://127.0.0.1:8000"
    assert documented_defaults.redis_url is None
    assert documented_defaults.trusted_proxies == "*"


def test_the_answer_cache_defaults_are_the_documented_10000_entries_and_8_mib(
    documented_defaults: Settings,
) -> None:
    assert documented_defaults.worker_cache_max_entries == 10_000
    assert documented_defaults.worker_cache_max_bytes == 8 * 1024 * 1024
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert "`MARKETPLACE_WORKER_CACHE_MAX_ENTRIES`, `MARKETPLACE_WORKER_CACHE_MAX_BYTES`" in readme
    assert "| `10000`, `8388608` |" in readme
