"""An open-loop load: requests sent at a fixed rate whatever the answers take, each one's latency
counted from the moment it was due (not from when a connection was free to send it), so that a
server falling behind shows as growing latency instead of a lower rate (wrk, closed-loop, hides it).

    python bench/paced_load.py --port 8000 --requests mix.txt --rate 500 --seconds 60 --interval 10

The request file is the one `requests.lua` reads (`METHOD PATH` lines, drawn at random, each from
another client address of 10.0.0.0/8). Prints one JSON object a line per interval (`Interval`),
counted by completion time. A minimal HTTP/1.1 client on asyncio streams (keep-alive, up to
`--connections` of them): httpx costs several times more CPU per request, and the load generator
shares the cores with the server it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

TIMEOUT_SECONDS = 5.0


@dataclass
class Interval:
    """What happened in one interval of the run (wall-clock `started`, seconds since the epoch)."""

    started: float
    seconds: float
    due: int = 0
    answered: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    # Connections refused, cut, or answers not complete within TIMEOUT_SECONDS.
    transport_errors: int = 0
    # The same by kind: TimeoutError, ConnectionResetError, IncompleteReadError...
    transport_kinds: dict[str, int] = field(default_factory=dict)
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    # Failed requests (transport errors and answers other than 2xx) by wall-clock second.
    error_seconds: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return self.transport_errors + sum(
            count for status, count in self.statuses.items() if not status.startswith("2")
        )


def percentile(ordered: list[float], fraction: float) -> float:
    """The value below which `fraction` of the sorted values fall (nearest rank)."""
    # ceil(fraction * n), the tolerance absorbing float error (0.99 * 100 is not exactly 99).
    rank = max(0, min(len(ordered) - 1, math.ceil(fraction * len(ordered) - 1e-9) - 1))
    return ordered[rank]


def read_request_lines(path: Path) -> list[tuple[str, str]]:
    lines = []
    for line in path.read_text().splitlines():
        method, _, target = line.partition(" ")
        if method.isupper() and target.startswith("/"):
            lines.append((method, target))
    if not lines:
        raise SystemExit(f"no request line in {path}")
    return lines


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.close()


async def _answer(connection: _Connection) -> tuple[int, bool]:
    """The status of the answer read from the connection, and whether the connection stays open."""
    head = await connection.reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip().lower()
    if headers.get("transfer-encoding") == "chunked":
        while True:
            size = int((await connection.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await connection.reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        await connection.reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers.get("connection") != "close"


class PacedLoad:
    def __init__(
        self,
        port: int,
        lines: list[tuple[str, str]],
        *,
        rate: float,
        seconds: float,
        interval: float,
        connections: int,
        seed: int,
        report: Callable[[Interval], None],
    ) -> None:
        self.port = port
        self.lines = lines
        self.rate = rate
        self.seconds = seconds
        self.interval = interval
        self.report = report
        self.rng = random.Random(seed)
        self.idle: list[_Connection] = []
        self.opened = 0
        self.most = connections
        self.freed = asyncio.Event()
        self.current = Interval(time.time(), interval)
        self.latencies: list[float] = []

    def _request(self) -> bytes:
        method, target = self.rng.choice(self.lines)
        address = f"10.{self.rng.randint(0, 255)}.{self.rng.randint(0, 255)}.{self.rng.randint(1, 254)}"
        return (
            f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            f"X-Forwarded-For: {address}\r\nContent-Length: 0\r\n\r\n"
        ).encode()

    async def _connection(self) -> _Connection:
        while True:
            while self.idle:
                connection = self.idle.pop()
                if not connection.reader.at_eof():
                    return connection
                # Closed by the server while idle (its keep-alive timeout): not a failed request.
                connection.close()
                self.opened -= 1
            if self.opened < self.most:
                self.opened += 1
                try:
                    reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
                except BaseException:
                    self.opened -= 1
                    raise
                return _Connection(reader, writer)
            self.freed.clear()
            await self.freed.wait()

    def _release(self, connection: _Connection, reuse: bool) -> None:
        if reuse:
            self.idle.append(connection)
        else:
            connection.close()
            self.opened -= 1
        self.freed.set()

    async def _send(self, due: float, request: bytes) -> None:
        status: int | None = None
        connection: _Connection | None = None
        reuse = False
        try:
            async with asyncio.timeout(TIMEOUT_SECONDS - (time.perf_counter() - due)):
                for attempt in range(2):
                    connection = await self._connection()
                    connection.writer.write(request)
                    try:
                        status, reuse = await _answer(connection)
                        break
                    except asyncio.IncompleteReadError as error:
                        # A kept-alive connection the server closed as the request went out: sent
                        # again on another, as HTTP clients do, once; anything else is a failure.
                        if error.partial or attempt:
                            raise
                        self._release(connection, reuse=False)
                        connection = None
        except (
            OSError,
            TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,
        ) as error:
            status = None
            kinds = self.current.transport_kinds
            kinds[type(error).__name__] = kinds.get(type(error).__name__, 0) + 1
        if connection is not None:
            self._release(connection, reuse and status is not None)
        self._count(status, (time.perf_counter() - due) * 1000)

    def _count(self, status: int | None, latency_ms: float) -> None:
        interval = self.current
        if status is None:
            interval.transport_errors += 1
        else:
            interval.answered += 1
            key = str(status)
            interval.statuses[key] = interval.statuses.get(key, 0) + 1
            self.latencies.append(latency_ms)
        if status is None or not 200 <= status < 300:
            second = str(int(time.time()))
            interval.error_seconds[second] = interval.error_seconds.get(second, 0) + 1

    def _flush(self, now: float) -> None:
        done, self.current = self.current, Interval(now, self.interval)
        done.seconds = now - done.started
        if self.latencies:
            ordered = sorted(self.latencies)
            done.p50_ms = round(percentile(ordered, 0.50), 2)
            done.p99_ms = round(percentile(ordered, 0.99), 2)
            done.max_ms = round(ordered[-1], 2)
        self.latencies = []
        self.report(done)

    async def run(self) -> None:
        # perf_counter, not the loop's clock: uvloop's counts whole milliseconds.
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        wall = time.time()
        self.current = Interval(wall, self.interval)
        next_flush = started + self.interval
        pending: set[asyncio.Task[None]] = set()
        sent = 0
        total = int(self.rate * self.seconds)
        while sent < total:
            now = time.perf_counter()
            while now >= next_flush:
                self._flush(wall + (next_flush - started))
                next_flush += self.interval
            due = started + sent / self.rate
            if due > now:
                await asyncio.sleep(min(due, next_flush) - now)
                continue
            # Every request already due goes out now, each counted from its own due time.
            while sent < total and started + sent / self.rate <= now:
                task = loop.create_task(self._send(started + sent / self.rate, self._request()))
                pending.add(task)
                task.add_done_callback(pending.discard)
                self.current.due += 1
                sent += 1
        if pending:
            await asyncio.wait(pending)
        if self.current.due or self.current.answered or self.current.transport_errors:
            self._flush(max(time.time(), self.current.started))
        for connection in self.idle:
            connection.close()


def run_paced(
    port: int,
    lines: list[tuple[str, str]],
    *,
    rate: float,
    seconds: float,
    interval: float,
    connections: int = 256,
    seed: int = 1,
    report: Callable[[Interval], None],
) -> None:
    load = PacedLoad(
        port,
        lines,
        rate=rate,
        seconds=seconds,
        interval=interval,
        connections=connections,
        seed=seed,
        report=report,
    )
    try:
        import uvloop
    except ImportError:
        asyncio.run(load.run())
    else:
        uvloop.run(load.run())


def interval_from_json(values: dict[str, object]) -> Interval:
    return Interval(**values)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> None:
    found = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    found.add_argument("--port", type=int, required=True)
    found.add_argument("--requests", type=Path, required=True, help="request file (METHOD PATH lines)")
    found.add_argument("--rate", type=float, required=True, help="requests per second")
    found.add_argument("--seconds", type=float, required=True)
    found.add_argument("--interval", type=float, default=60.0, help="seconds per reported interval")
    found.add_argument("--connections", type=int, default=256, help="most connections open at once")
    found.add_argument("--seed", type=int, default=1)
    arguments = found.parse_args(argv)

    def report(interval: Interval) -> None:
        print(json.dumps(asdict(interval)), flush=True)

    run_paced(
        arguments.port,
        read_request_lines(arguments.requests),
        rate=arguments.rate,
        seconds=arguments.seconds,
        interval=arguments.interval,
        connections=arguments.connections,
        seed=arguments.seed,
        report=report,
    )


if __name__ == "__main__":
    main()
