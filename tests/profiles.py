"""The two profiles the contract tests run on: SQLite + in-process store, PostgreSQL + Redis.

PostgreSQL and Redis are the machine's unless MARKETPLACE_TEST_DATABASE_URL and
MARKETPLACE_TEST_REDIS_URL name others (defaults: loopback, default ports, the `test` database to
connect to, Redis database 0). Each test gets a database of its own on that server, copied from a
migrated template and dropped after it, and a Redis key prefix of its own (`mp_*_<pid>_<random>:`),
whose keys are deleted when the run ends. Without those services the tests that need them are
skipped with the reason, unless MARKETPLACE_REQUIRE_SERVICES=1 (as in CI), where their absence
fails the run.
"""

from __future__ import annotations

import os
import socket
import uuid
from urllib.parse import urlsplit

import pytest
from sqlalchemy import make_url

# The server every PostgreSQL test creates its databases on; the URL's database is only connected
# to, to create and drop them.
POSTGRES_ADMIN_URL = os.environ.get(
    "MARKETPLACE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("MARKETPLACE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
# With MARKETPLACE_TEST_VIA_POOLER=1 the PostgreSQL profile's service reaches its database through
# the transaction-mode PgBouncer of scripts/topology/pgbouncer (the tests' own admin work and the
# change feed's LISTEN stay direct). The pooler's tests (tests/test_pooler.py) use it in every run.
VIA_POOLER = os.environ.get("MARKETPLACE_TEST_VIA_POOLER") == "1"
POOLER_URL = os.environ.get("MARKETPLACE_TEST_POOLER_URL", "postgresql://postgres@127.0.0.1:16432")
MARIADB_URL = os.environ.get("MARKETPLACE_TEST_MARIADB_URL", "mysql+pymysql://root@127.0.0.1:3306/test")


def services_required() -> bool:
    return os.environ.get("MARKETPLACE_REQUIRE_SERVICES") == "1"


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def require_postgresql(url: str = POSTGRES_ADMIN_URL) -> None:
    """Skip (or fail, where services are required) unless the test PostgreSQL server listens."""
    parsed = make_url(url)
    require_service("PostgreSQL", parsed.host or "127.0.0.1", parsed.port or 5432)


def require_redis(url: str = REDIS_URL) -> None:
    """Skip (or fail, where services are required) unless the test Redis listens."""
    parsed = urlsplit(url)
    if parsed.scheme == "unix":
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(parsed.path)
                return
            except OSError:
                pass
        message = f"Redis is not listening on {parsed.path}"
        if services_required():
            pytest.fail(f"{message} (MARKETPLACE_REQUIRE_SERVICES=1)")
        pytest.skip(message)
    require_service("Redis", parsed.hostname or "127.0.0.1", parsed.port or 6379)


def require_service(name: str, host: str, port: int) -> None:
    """Skip (or, where services are required, fail) unless the service listens."""
    if _listening(host, port):
        return
    message = f"{name} is not running on {host}:{port}"
    if services_required():
        pytest.fail(f"{message} (MARKETPLACE_REQUIRE_SERVICES=1)")
    pytest.skip(message)


def redis_cluster_url() -> str:
    """The test Redis Cluster (`scripts/topology/redis-cluster start` prints it), as the store names
    a cluster (`redis+cluster://`). Without it the test is skipped with the reason, or fails where
    services are required."""
    url = os.environ.get("MARKETPLACE_TEST_REDIS_CLUSTER_URL")
    if not url:
        message = (
            "no Redis Cluster: run scripts/topology/redis-cluster start"
            " and export MARKETPLACE_TEST_REDIS_CLUSTER_URL"
        )
        if services_required():
            pytest.fail(f"{message} (MARKETPLACE_REQUIRE_SERVICES=1)")
        pytest.skip(message)
    scheme, _, rest = url.partition("://")
    return f"{scheme}+cluster://{rest}" if scheme in ("redis", "rediss") else url


def unique_name(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:10]}"


def keys_of_process(pid: int) -> str:
    """The SCAN pattern of the Redis keys a test process wrote: prefixes are its `unique_name`s."""
    return f"mp_*_{pid}_{'[0-9a-f]' * 10}:*"


THIS_PROCESS_KEYS = keys_of_process(os.getpid())


def forget_redis_keys(pattern: str, url: str = REDIS_URL) -> int:
    """Delete the keys of the test Redis that match `pattern` (a SCAN pattern); how many."""
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=1.0)
    deleted = 0
    try:
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) == 1000:
                deleted += int(client.unlink(*batch))
                batch.clear()
        if batch:
            deleted += int(client.unlink(*batch))
    finally:
        client.close()
    return deleted


def postgres_admin(statement: str) -> None:
    """Run one statement outside a transaction (CREATE/DROP DATABASE) on the admin database."""
    import asyncio

    import asyncpg

    async def run() -> None:
        connection = await asyncpg.connect(POSTGRES_ADMIN_URL)
        try:
            await connection.execute(statement)
        finally:
            await connection.close()

    asyncio.run(run())


# For a rule that depends on neither the database nor the store: the SQLite profile is enough.
sqlite_only = pytest.mark.parametrize("profile", ["sqlite"], indirect=True)

# For what exists on PostgreSQL only (its indexes).
postgresql_only = pytest.mark.parametrize("profile", ["postgresql"], indirect=True)


def require_pooler() -> None:
    url = make_url(POOLER_URL)
    require_service("PgBouncer (scripts/topology/pgbouncer start)", url.host or "127.0.0.1", url.port or 6432)


def through_pooler(direct_url: str) -> dict[str, str]:
    """The settings of a service on `direct_url`'s database reached through the pooler."""
    name = make_url(direct_url).database
    return {
        "database_url": make_url(POOLER_URL).set(database=name).render_as_string(hide_password=False),
        "database_listen_url": direct_url,
        "database_pooler": "transaction",
    }
