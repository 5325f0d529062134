"""Settings of the service, read from `MARKETPLACE_*` environment variables or a `.env` file."""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from marketplace.http.client_ip import TrustedProxies
from marketplace.platform_names import (
    AUTHOR_KEYS,
    CONTRACT_CHAT,
    CONTRACT_STATS,
    PlatformNames,
    name_problem,
)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MARKETPLACE_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    database_url: str = "sqlite:///./marketplace.db"
    # PostgreSQL read replicas of `database_url`, comma-separated: the public reads go to them in
    # turn once they have replayed the changes a worker has seen (replicas.py).
    database_read_urls: str = ""
    # A replica serves a read only while it is proven at most this far behind the primary (replicas.py).
    read_replica_max_lag_seconds: float = Field(default=1.0, gt=0)
    # `transaction`: `database_url` goes through a transaction-mode pooler (PgBouncer), so every
    # connection keeps no state between transactions (database/engine.py).
    database_pooler: Literal["none", "transaction"] = "none"
    # A direct (unpooled) PostgreSQL URL for the change feed's LISTEN; unset, `database_url`.
    database_listen_url: str | None = None
    redis_url: str | None = None
    # Prefix of every Redis key, so that several services (or test runs) can share one Redis.
    redis_prefix: str = "marketplace:"
    base_url: str = "http://127.0.0.1:8000"
    chat_api_url: str = "https://discord.com/api"
    stats_api_url: str = "https://bstats.org/api/v1/plugins"
    stats_page_url: str = "https://bstats.org/plugin"
    storage_dir: str = "./storage"
    chat_grant_secret: str | None = None
    # The words that stand for the chat platform's and the statistics service's names in paths,
    # keys, route names and messages (platform_names.py).
    chat_name: str = CONTRACT_CHAT
    stats_name: str = Field(default=CONTRACT_STATS, validate_default=True)
    # Key of the HMAC that hashes client addresses in the activity log; set it in production so that
    # every worker hashes alike. Unset, each process draws a random key at start-up.
    app_key: str | None = None
    # Peers whose X-Forwarded-For is read: "*" (every peer, the contract's rule) or addresses/CIDRs.
    trusted_proxies: str = "*"
    # IPv6 clients are limited per network of this many leading bits (IPv4 per address).
    ipv6_limit_prefix: int = Field(default=64, ge=1, le=128)
    # Connection pool of a server database (PostgreSQL), per worker process.
    db_pool_size: int = Field(default=10, ge=1)
    db_max_overflow: int = Field(default=10, ge=0)
    # How long a request waits for a free connection before it answers 500.
    db_pool_timeout_seconds: float = Field(default=2.0, gt=0)
    db_connect_timeout_seconds: float = Field(default=5.0, gt=0)
    # Longest statement (or lock wait) of a request; `load`, `migrate` and imports are not bounded.
    db_statement_timeout_seconds: float = Field(default=5.0, gt=0)
    upstream_timeout_seconds: float = Field(default=5.0, gt=0)
    # Largest request body read; a larger one is refused with 413 before it is read.
    max_body_bytes: int = Field(default=1024 * 1024, ge=0)
    # Longest time a client may take to send a request: its head from its first byte, then its body
    # (408 after that; a connection that sends nothing is closed).
    read_timeout_seconds: float = Field(default=10.0, gt=0)
    # Each worker's open connections (TLS handshakes included); past it new ones are closed at once.
    max_connections: int = Field(default=256, ge=1)
    # Request body bytes one worker holds at once, over all its requests; a body that does not fit
    # waits for room within the read timeout (408 after it). At least `max_body_bytes`.
    max_buffered_body_bytes: int = Field(default=16 * 1024 * 1024, ge=0, validate_default=True)
    # Limiter windows (and cached answers) the in-process store keeps exactly; beyond, see stores.py.
    memory_store_max_keys: int = Field(default=100_000, ge=1)
    # Each worker's cache of encoded catalogue answers (0 entries or bytes: no cache). An entry takes
    # 1.3-2.2 times what it counts against the bytes in Python objects, so the defaults hold a full
    # cache near 10 MiB per worker (bench/HISTORY.md, "Where a worker's memory goes").
    worker_cache_max_entries: int = Field(default=10_000, ge=0)
    worker_cache_max_bytes: int = Field(default=8 * 1024 * 1024, ge=0)
    # The oldest a kept answer or count may be when served, whatever the change notices do
    # (freshness.py): the bound on staleness when a change arrives without a notice.
    worker_cache_max_age_seconds: float = Field(default=60.0, gt=0)
    # Each worker holds every visible resource's current version for the update check, built at
    # its start (api/v1/current_versions.py); within the same maximum age.
    current_version_map: bool = True
    # HTTPS served by `marketplace serve` itself (PEM files); both or neither.
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = Field(default=None, validate_default=True)
    # Outgoing webhooks (marketplace/webhooks/). `true` lets them call loopback, private and
    # link-local addresses and plain http:// URLs (tests, closed networks).
    webhooks_allow_private: bool = False
    # Seals the subscriptions' signing secrets in the database (webhooks/sealing.py); unset, they
    # are stored as they are. Keep it the same on every host.
    webhooks_secret_key: str | None = None
    # Whether this host's serving workers dispatch and send deliveries.
    webhooks_deliver: bool = True
    # How often an idle worker looks for events and due deliveries.
    webhooks_poll_seconds: float = Field(default=0.5, gt=0, le=60)
    # Deliveries one worker sends at once.
    webhooks_concurrency: int = Field(default=8, ge=1, le=256)
    # Retries: the first after about this long, doubling up to the maximum, with jitter, for the
    # whole window; a subscription failing for a whole window is disabled.
    webhooks_retry_base_seconds: float = Field(default=10.0, gt=0)
    webhooks_retry_max_seconds: float = Field(default=3600.0, gt=0)
    webhooks_retry_window_seconds: float = Field(default=86400.0, gt=0)
    # How long a worker's claim on a delivery lasts: past it, a delivery whose worker died is sent
    # again. Longer than a send (5 s) with a margin.
    webhooks_lease_seconds: float = Field(default=30.0, ge=10)
    # Delivered and given-up deliveries are kept this long for `webhooks show`, then deleted.
    webhooks_history_days: float = Field(default=30.0, gt=0)
    # `/up` names the delivery queue as degraded when a delivery has been due this long.
    webhooks_late_after_seconds: float = Field(default=300.0, gt=0)
    log_format: Literal["json", "text"] = "json"
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    access_log: bool = True

    @field_validator("trusted_proxies")
    @classmethod
    def _parseable_proxies(cls, value: str) -> str:
        TrustedProxies.parse(value)
        return value

    @field_validator("redis_prefix")
    @classmethod
    def _usable_redis_prefix(cls, value: str) -> str:
        problem = redis_prefix_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("database_read_urls")
    @classmethod
    def _postgresql_replicas(cls, value: str, info: ValidationInfo) -> str:
        urls = split_urls(value)
        postgresql = ("postgresql://", "postgres://", "postgresql+asyncpg://")
        if urls and not str(info.data.get("database_url", "")).startswith(postgresql):
            raise ValueError("read replicas need a PostgreSQL MARKETPLACE_DATABASE_URL")
        if any(not url.startswith(postgresql) for url in urls):
            raise ValueError("read replicas are PostgreSQL URLs (postgresql://...)")
        return value

    @field_validator("database_listen_url")
    @classmethod
    def _postgresql_listener(cls, value: str | None) -> str | None:
        postgresql = ("postgresql://", "postgres://", "postgresql+asyncpg://")
        if value and not value.startswith(postgresql):
            raise ValueError("the LISTEN URL is a PostgreSQL URL (postgresql://...)")
        return value or None

    @field_validator("chat_name")
    @classmethod
    def _usable_chat_name(cls, value: str) -> str:
        problem = name_problem(value, other="", beside_keys=AUTHOR_KEYS)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("stats_name")
    @classmethod
    def _usable_stats_name(cls, value: str, info: ValidationInfo) -> str:
        problem = name_problem(value, other=str(info.data.get("chat_name", "")))
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("max_buffered_body_bytes")
    @classmethod
    def _room_for_the_largest_body(cls, value: int, info: ValidationInfo) -> int:
        largest = info.data.get("max_body_bytes")
        if isinstance(largest, int) and value < largest:
            raise ValueError(
                "must be at least MARKETPLACE_MAX_BODY_BYTES, or a body that may come never fits"
            )
        return value

    @field_validator("ssl_keyfile")
    @classmethod
    def _key_with_its_certificate(cls, value: str | None, info: ValidationInfo) -> str | None:
        if bool(value) != bool(info.data.get("ssl_certfile")):
            raise ValueError("set both MARKETPLACE_SSL_CERTFILE and MARKETPLACE_SSL_KEYFILE, or neither")
        return value or None

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_case_level(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @cached_property
    def public_base_url(self) -> str:
        """`{base_url}` without a trailing slash, as absolute URLs are built from it."""
        return self.base_url.rstrip("/")

    @cached_property
    def platform_names(self) -> PlatformNames:
        return PlatformNames(self.chat_name, self.stats_name)

    @cached_property
    def read_urls(self) -> tuple[str, ...]:
        return split_urls(self.database_read_urls)

    @cached_property
    def proxies(self) -> TrustedProxies:
        return TrustedProxies.parse(self.trusted_proxies)


def split_urls(setting: str) -> tuple[str, ...]:
    return tuple(url.strip() for url in setting.split(",") if url.strip())


def redis_prefix_problem(prefix: str) -> str | None:
    """Why `prefix` cannot begin every Redis key of the service, or None when it can.

    Keys go to Redis as UTF-8, so the prefix is text UTF-8 can encode: no lone surrogate, which is
    what Python makes of an environment variable's bytes that are not UTF-8 (every command would
    fail). A hash tag in it (`{...}`) would move the keys out of the slots their own tags choose.
    """
    try:
        prefix.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"not UTF-8 text (character {error.start + 1} is {prefix[error.start]!a})"
    if "{" in prefix or "}" in prefix:
        return "{ and } are not allowed (a Redis Cluster hash tag)"
    return None
