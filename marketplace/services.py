"""The long-lived resources a worker shares between requests, made once at start-up."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import QueuePool, event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from marketplace.api.v1.current_versions import CurrentVersionMap
from marketplace.config import Settings
from marketplace.database.changes import change_feed_for, follow_own_commits
from marketplace.database.engine import async_url, create_engine, masked_url, session_factory
from marketplace.database.readers import GenerationCounts, PostgresReader, Reads, build_reader
from marketplace.database.replicas import Replica, ReplicaReader
from marketplace.http.cache import AnswerCache
from marketplace.http.worker_cache import WorkerCache
from marketplace.stores import MemoryStore, RedisStore, Store
from marketplace.telemetry.metrics import DB_POOL_CAPACITY, DB_POOL_IN_USE
from marketplace.webhooks.worker import WebhookDeliverer

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger("marketplace")

# How much longer than the upstream timeout a request may wait for another process's upstream call.
_CACHE_WAIT_MARGIN_SECONDS = 0.5


@dataclass
class Services:
    settings: Settings
    engine: AsyncEngine
    # Reads run without a transaction (autocommit): no BEGIN/ROLLBACK round trips per request.
    sessions: async_sessionmaker[AsyncSession]
    # Writes (the grant) run in a transaction.
    write_sessions: async_sessionmaker[AsyncSession]
    store: Store
    answers: AnswerCache
    # Encoded catalogue answers of this worker, valid until the next committed change.
    worker_cache: WorkerCache
    # The public reads' statements and the counts kept per generation (readers.py).
    reads: Reads
    # Every visible resource's current version answer, for the update check (current_versions.py).
    current_versions: CurrentVersionMap
    app_key: bytes
    # Dispatches the webhook outbox and sends the deliveries (webhooks/worker.py).
    webhooks: WebhookDeliverer
    # Engines of the read replicas the public reads may use (replicas.py); none by default.
    replica_engines: tuple[AsyncEngine, ...] = ()
    # The upstreams' client, made by the first upstream call (`http`): a worker that serves none
    # never loads httpx.
    _http: httpx.AsyncClient | None = field(default=None, init=False, repr=False)

    @property
    def http(self) -> httpx.AsyncClient:
        """The client of the upstream calls (chat widget, statistics), shared by the worker's requests."""
        if self._http is None:
            import httpx

            # Each call's total time is bounded by asyncio.timeout in the upstream clients; this
            # one bounds each phase so that a stalled connect never outlives that.
            self._http = httpx.AsyncClient(
                timeout=httpx.Timeout(self.settings.upstream_timeout_seconds),
                follow_redirects=False,
                limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
            )
        return self._http

    def hash_ip(self, ip: str) -> str:
        """Keyed hash of a client address, as the activity log stores it."""
        return hmac.new(self.app_key, ip.encode("utf-8"), hashlib.sha256).hexdigest()

    def use_store(self, store: Store) -> None:
        """Replace the store (limiters and caches alike)."""
        self.store = store
        self.answers.store = store

    async def close(self) -> None:
        # First, while the database is there to record the sends in flight.
        await self.webhooks.close()
        if self._http is not None:
            await self._http.aclose()
        await self.current_versions.close()
        await self.worker_cache.close()
        await self.store.close()
        self.reads.reader.close()
        await self.engine.dispose()
        for replica in self.replica_engines:
            await replica.dispose()
        DB_POOL_CAPACITY.set(0)


def build_store(settings: Settings) -> Store:
    if settings.redis_url:
        return RedisStore(settings.redis_url, prefix=settings.redis_prefix)
    return MemoryStore(max_keys=settings.memory_store_max_keys)


def _count_pool_usage(engine: AsyncEngine, settings: Settings) -> None:
    if isinstance(engine.sync_engine.pool, QueuePool):
        DB_POOL_CAPACITY.set(settings.db_pool_size + settings.db_max_overflow)

    def checked_out(*_args: Any) -> None:
        DB_POOL_IN_USE.inc()

    def checked_in(*_args: Any) -> None:
        DB_POOL_IN_USE.dec()

    event.listen(engine.sync_engine, "checkout", checked_out)
    event.listen(engine.sync_engine, "checkin", checked_in)


def listen_url(settings: Settings) -> str:
    """The URL the change feed listens on: a direct one when the main URL goes through a pooler."""
    if settings.database_listen_url:
        return settings.database_listen_url
    postgresql = async_url(settings.database_url).get_backend_name() == "postgresql"
    if postgresql and settings.database_pooler == "transaction":
        logger.warning(
            "MARKETPLACE_DATABASE_POOLER=transaction without MARKETPLACE_DATABASE_LISTEN_URL: change "
            "notices cannot be delivered through a transaction-mode pooler, so cached answers rely on "
            "their age bound to see other processes' writes; set MARKETPLACE_DATABASE_LISTEN_URL to a "
            "direct PostgreSQL URL"
        )
    return settings.database_url


def build_services(settings: Settings) -> Services:
    engine = create_engine(settings, statement_timeout=settings.db_statement_timeout_seconds)
    _count_pool_usage(engine, settings)
    if settings.app_key:
        app_key = settings.app_key.encode("utf-8")
    else:
        logger.warning("MARKETPLACE_APP_KEY is unset: activity-log address hashes differ between processes")
        app_key = secrets.token_bytes(32)
    store = build_store(settings)
    changes = change_feed_for(
        async_url(settings.database_url),
        engine,
        settings.db_connect_timeout_seconds,
        listen_url=async_url(listen_url(settings)),
    )
    follow_own_commits(engine, changes)
    replica_engines = tuple(
        create_engine(
            settings.model_copy(update={"database_url": url}),
            statement_timeout=settings.db_statement_timeout_seconds,
        )
        for url in settings.read_urls
    )
    pooled = settings.database_pooler == "transaction"
    cancel_after = settings.db_statement_timeout_seconds if pooled else None
    reader = build_reader(
        engine, settings.db_statement_timeout_seconds, pooled=pooled, read_slots=settings.db_pool_size
    )
    if replica_engines:
        replicas = [
            Replica(
                masked_url(url),
                replica,
                PostgresReader(replica, cancel_after=cancel_after, read_slots=settings.db_pool_size),
            )
            for url, replica in zip(settings.read_urls, replica_engines, strict=True)
        ]
        reader = ReplicaReader(
            reader, engine, replicas, changes, max_lag_seconds=settings.read_replica_max_lag_seconds
        )
    worker_cache = WorkerCache(
        changes,
        max_entries=settings.worker_cache_max_entries,
        max_bytes=settings.worker_cache_max_bytes,
        max_age_seconds=settings.worker_cache_max_age_seconds,
    )
    return Services(
        settings=settings,
        engine=engine,
        sessions=session_factory(engine.execution_options(isolation_level="AUTOCOMMIT")),
        write_sessions=session_factory(engine),
        store=store,
        answers=AnswerCache(store, settings.upstream_timeout_seconds + _CACHE_WAIT_MARGIN_SECONDS),
        worker_cache=worker_cache,
        app_key=app_key,
        webhooks=WebhookDeliverer(engine, settings),
        reads=Reads(
            reader=reader,
            counts=GenerationCounts(changes, max_age_seconds=settings.worker_cache_max_age_seconds),
            dialect_name=engine.dialect.name,
        ),
        current_versions=CurrentVersionMap(
            reader,
            changes,
            max_age_seconds=settings.worker_cache_max_age_seconds,
            # Without a worker cache nothing is kept in memory: every answer is read.
            enabled=settings.current_version_map and worker_cache.enabled,
        ),
        replica_engines=replica_engines,
    )
