"""Load run against a running service: concurrent requests for a fixed time, per-route rates and
latency percentiles.

    marketplace demo && marketplace serve --no-access-log &
    python bench/load.py --url http://127.0.0.1:8000 --seconds 20 --concurrency 32

Each request carries a different X-Forwarded-For address so that the per-address limiters do not
turn the run into a measurement of 429s (every proxy is trusted by the service).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import time
from collections import defaultdict

import httpx

ROUTES = (
    ("GET", "/api/v1/resource/1"),
    ("GET", "/api/v1/resource/search?size=15"),
    ("GET", "/api/v1/resource/version/2"),
    ("POST", "/api/v1/licence/ABCDEFGHIJKLMNO"),
    ("GET", "/api/v1/gift/WELCOME10"),
)


async def worker(
    client: httpx.AsyncClient,
    deadline: float,
    addresses: itertools.count[int],
    results: dict[str, list[float]],
    statuses: dict[str, dict[int, int]],
) -> None:
    for method, path in itertools.cycle(ROUTES):
        if time.monotonic() >= deadline:
            return
        n = next(addresses)
        ip = f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"
        started = time.perf_counter()
        response = await client.request(method, path, headers={"X-Forwarded-For": ip})
        results[path].append(time.perf_counter() - started)
        statuses[path][response.status_code] = statuses[path].get(response.status_code, 0) + 1


async def run(url: str, seconds: float, concurrency: int) -> None:
    results: dict[str, list[float]] = defaultdict(list)
    statuses: dict[str, dict[int, int]] = defaultdict(dict)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30.0) as client:
        deadline = time.monotonic() + seconds
        addresses = itertools.count(1)
        await asyncio.gather(
            *(worker(client, deadline, addresses, results, statuses) for _ in range(concurrency))
        )
    total = sum(len(v) for v in results.values())
    print(f"{total} requests in {seconds:.0f} s: {total / seconds:.0f} req/s at concurrency {concurrency}")
    print(f"{'route':<40} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}  statuses")
    for _, path in ROUTES:
        samples = sorted(results[path])
        if not samples:
            continue
        q = statistics.quantiles(samples, n=100)
        print(
            f"{path:<40} {len(samples) / seconds:>8.0f} {samples[len(samples) // 2] * 1000:>8.1f} "
            f"{q[94] * 1000:>8.1f} {q[98] * 1000:>8.1f}  {dict(statuses[path])}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    asyncio.run(run(args.url, args.seconds, args.concurrency))


if __name__ == "__main__":
    main()
