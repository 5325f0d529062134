"""Process CPU and Redis round trips per limiter check, from many concurrent callers.

Runs `enforce` (the group limiter then a route's own, as most routes have) from concurrent tasks
against a Redis, each request from another client address so that nothing is refused, and prints
the process CPU (`time.process_time`) per request and the socket reads the Redis server made
per request (its round trips).

    python bench/limiter_cpu.py --redis redis://127.0.0.1:6379/0 --requests 20000 --tasks 32
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

from redis.asyncio import Redis

from marketplace.http.limits import Limit, enforce, limit_key
from marketplace.stores import RedisStore


async def network_reads(url: str) -> int:
    """Socket reads of the server so far: one per pipeline or command sent on its own."""
    client = Redis.from_url(url)
    try:
        stats = await client.info("stats")
        return int(stats.get("total_reads_processed", 0))
    finally:
        await client.aclose()


async def run(url: str, requests: int, tasks: int) -> None:
    store = RedisStore(url, prefix=f"bench:{uuid.uuid4().hex[:8]}:")
    await store.ping()
    per_task = requests // tasks

    async def client(task: int) -> None:
        for number in range(per_task):
            address = f"10.{task}.{number // 256}.{number % 256}"
            await enforce(
                store,
                (
                    Limit("api", 120, limit_key("api", address)),
                    Limit("search", 60, limit_key("search", address)),
                ),
            )

    await asyncio.gather(*(client(task) for task in range(tasks // 4)))  # warm connections
    reads_before = await network_reads(url)
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(client(task) for task in range(tasks)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    reads = await network_reads(url) - reads_before
    done = per_task * tasks
    print(
        f"{done} requests (2 limiters each) from {tasks} tasks: "
        f"{cpu / done * 1e6:.1f} us CPU per request, {cpu / done / 2 * 1e6:.1f} us per limiter, "
        f"{done / wall:,.0f} requests/s, {reads / done:.3f} server socket reads per request"
    )
    await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--tasks", type=int, default=32)
    arguments = parser.parse_args()
    asyncio.run(run(arguments.redis, arguments.requests, arguments.tasks))


if __name__ == "__main__":
    main()
