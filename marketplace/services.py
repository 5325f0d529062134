"""The long-lived resources a worker shares between requests, made once at start-up."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from marketplace.config import Settings
from marketplace.db import create_engine, session_factory
from marketplace.http.stores import MemoryStore, RedisStore, Store

logger = logging.getLogger("marketplace")


@dataclass
class Services:
    settings: Settings
    engine: AsyncEngine
    # Reads run without a transaction (autocommit): no BEGIN/ROLLBACK round trips per request.
    sessions: async_sessionmaker[AsyncSession]
    # Writes (the grant) run in a transaction.
    write_sessions: async_sessionmaker[AsyncSession]
    store: Store
    http: httpx.AsyncClient
    app_key: bytes

    def hash_ip(self, ip: str) -> str:
        """Keyed hash of a client address, as the activity log stores it."""
        return hmac.new(self.app_key, ip.encode("utf-8"), hashlib.sha256).hexdigest()

    async def close(self) -> None:
        await self.http.aclose()
        await self.store.close()
        await self.engine.dispose()


def build_store(settings: Settings) -> Store:
    if settings.redis_url:
        return RedisStore(settings.redis_url, prefix=settings.redis_prefix)
    return MemoryStore()


def build_services(settings: Settings) -> Services:
    engine = create_engine(settings)
    if settings.app_key:
        app_key = settings.app_key.encode("utf-8")
    else:
        logger.warning("MARKETPLACE_APP_KEY is unset: activity-log address hashes differ between processes")
        app_key = secrets.token_bytes(32)
    return Services(
        settings=settings,
        engine=engine,
        sessions=session_factory(engine.execution_options(isolation_level="AUTOCOMMIT")),
        write_sessions=session_factory(engine),
        store=build_store(settings),
        # Each call's total time is bounded by asyncio.timeout in the upstream clients; this one
        # bounds each phase so that a stalled connect never outlives that.
        http=httpx.AsyncClient(
            timeout=httpx.Timeout(settings.upstream_timeout_seconds),
            follow_redirects=False,
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
        ),
        app_key=app_key,
    )
