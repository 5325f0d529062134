"""Settings of the service, read from `MARKETPLACE_*` environment variables or a `.env` file."""

from __future__ import annotations

from functools import cached_property

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MARKETPLACE_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    database_url: str = "sqlite:///./marketplace.db"
    redis_url: str | None = None
    # Prefix of every Redis key, so that several services (or test runs) can share one Redis.
    redis_prefix: str = "marketplace:"
    base_url: str = "http://127.0.0.1:8000"
    chat_api_url: str = "https://discord.com/api"
    stats_api_url: str = "https://bstats.org/api/v1/plugins"
    stats_page_url: str = "https://bstats.org/plugin"
    storage_dir: str = "./storage"
    chat_grant_secret: str | None = None
    # Key of the HMAC that hashes client addresses in the activity log; set it in production so that
    # every worker hashes alike. Unset, each process draws a random key at start-up.
    app_key: str | None = None
    # Connection pool of a server database (PostgreSQL), per worker process.
    db_pool_size: int = 10
    db_max_overflow: int = 10
    upstream_timeout_seconds: float = 5.0

    @cached_property
    def public_base_url(self) -> str:
        """`{base_url}` without a trailing slash, as absolute URLs are built from it."""
        return self.base_url.rstrip("/")
