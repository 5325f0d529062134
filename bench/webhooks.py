"""Webhook delivery end to end: how long a release takes to reach its receiver, how fast a burst of
releases drains, and what the workers' poll costs while nothing happens.

    .venv/bin/python bench/webhooks.py                                  # both profiles, bench/WEBHOOKS.md
    .venv/bin/python bench/webhooks.py --profile sqlite --out /tmp/webhooks.md
    .venv/bin/python bench/webhooks.py --smoke --out /tmp/webhooks-smoke.md   # SQLite, a few seconds

Each server run gets a fresh database (`marketplace migrate`, then `marketplace demo`), one
subscription to `release.published` (`marketplace webhooks add`) naming a receiver of this process,
and `marketplace serve` with every webhook setting at its default but
`MARKETPLACE_WEBHOOKS_ALLOW_PRIVATE=true` (the receiver is on loopback) and, in the second run, the
poll interval. SQLite is served by 1 worker without Redis, PostgreSQL by 2 workers with Redis.
Releases are rows this process inserts into `versions`, as an operator's SQL would: the triggers
write their events (migration 0009), the serving workers dispatch and send them.

1. **Latency**: single releases, one transaction each, `--spacing` apart with a little jitter
   drawn (so that they do not keep one phase of the poll), after a few not counted (a worker's
   first delivery loads its HTTP client). Each one's latency is the receiver's arrival time less
   the event's `created_at` (the database's clock when the change was made: the same machine's).
   The webhook tables tell the stages: written, dispatched, claimed, received, recorded.
2. **Throughput**: `--bursts` times in turn, one transaction of `--events` releases spread over
   the published resources; the time from its commit to the last distinct event received, the CPU
   of the server's process tree (and of PostgreSQL's backends of the database) meanwhile, and
   whether every event came exactly once. The claims (deliveries claimed together share their
   `first_attempt_at`) show how the workers took the work: topped up without waiting (a worker
   claims again when half its sends have ended) or, should that fail, paced by the poll (all its
   slots once per poll interval); one server run measures several bursts.
3. **Idle**: CPU of the server's process tree over `--idle-seconds` without events, at each poll
   interval and with delivery off (`MARKETPLACE_WEBHOOKS_DELIVER=false`): the poll's cost is the
   difference.

The receiver is an asyncio HTTP/1.1 server in a thread of its own that answers 200 as soon as a
request's body is read. When py-spy is installed, one more burst of the last run is sampled (not
counted in the figures) to name where the drain's CPU goes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

if not __package__:
    # Run as a script: the repository, not bench/, first on the path.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from bench import hotspots
from bench.fill import database_url, marketplace_command, migrate, service_environment
from bench.harness import _forget_redis_keys, _version_of
from bench.paced_load import percentile
from bench.report import WEBHOOKS_SUMMARY
from bench.servers import DatabaseCpu, Server, free_port
from marketplace.config import Settings
from marketplace.database.engine import create_engine
from marketplace.models import Resource, ResourceStatus, Version, WebhookDelivery, WebhookEvent

REPOSITORY = Path(__file__).resolve().parent.parent
PROFILES = ("sqlite", "postgresql")
PROFILE_TITLES = {"sqlite": "SQLite", "postgresql": "PostgreSQL + Redis"}
WORKERS = {"sqlite": 1, "postgresql": 2}
DEFAULT_POLL_SECONDS = float(Settings.model_fields["webhooks_poll_seconds"].default)
CONCURRENCY = int(Settings.model_fields["webhooks_concurrency"].default)
# Seconds after start-up before the idle window (the workers build their maps, connect, settle).
SETTLE_SECONDS = 3.0
# The longest a measure waits for its deliveries; whatever is missing then is counted as lost.
LATENCY_WAIT_SECONDS = 30.0
DRAIN_WAIT_SECONDS = 600.0
# How a burst drained, from its claims (`Throughput.mode`).
PACED = "paced by the poll"
TOPPED_UP = "not waiting for the poll"
MIXED = "partly each way"
# Time left after the last expected delivery for any second delivery of an event to show.
DUPLICATE_GRACE_SECONDS = 1.5
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


def say(message: str) -> None:
    print(f"[webhooks {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def unix_time(moment: datetime) -> float:
    """A naive UTC timestamp (as the webhook tables store them) as seconds since the epoch."""
    return moment.replace(tzinfo=UTC).timestamp()


def iso_unix_time(text: str) -> float:
    """`created_at` of a webhook body (`2026-01-01T00:00:00.000000Z`) as seconds since the epoch."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# --- the receiver ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arrival:
    """One request the receiver read: when (time.time()), and the event it carried."""

    at: float
    event_id: str
    version_id: int | None
    created_at: float


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


class Receiver:
    """An HTTP/1.1 server on 127.0.0.1, in a thread and event loop of its own: reads each request,
    answers 200 at once and closes (the sender asks for `Connection: close`), then keeps when it
    arrived and which event it carried."""

    def __init__(self) -> None:
        self.port = 0
        self.unreadable = 0
        self._arrivals: list[Arrival] = []
        self._seen: set[str] = set()
        self._changed = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="webhook-receiver", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise SystemExit("the receiver did not start")

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._answer, "127.0.0.1", 0, backlog=1024)
        )
        self.port = int(server.sockets[0].getsockname()[1])
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._loop.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            body = await reader.readexactly(_content_length(head))
            arrived = time.time()
            writer.write(ANSWER)
            await writer.drain()
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        writer.close()
        self._keep(arrived, body)

    def _keep(self, arrived: float, body: bytes) -> None:
        try:
            event = json.loads(body)
            version = event.get("data", {}).get("version") or {}
            arrival = Arrival(
                arrived,
                str(event["id"]),
                int(version["id"]) if "id" in version else None,
                iso_unix_time(event["created_at"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            with self._changed:
                self.unreadable += 1
            return
        with self._changed:
            self._arrivals.append(arrival)
            self._seen.add(arrival.event_id)
            self._changed.notify_all()

    def clear(self) -> None:
        with self._changed:
            self._arrivals.clear()
            self._seen.clear()

    def arrivals(self) -> list[Arrival]:
        with self._changed:
            return list(self._arrivals)

    def wait_for_events(self, count: int, timeout: float) -> bool:
        """Wait until `count` distinct events arrived since the last `clear`; whether they did."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self._seen) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True


# --- the database ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """What the webhook tables say of one event and its delivery (seconds since the epoch)."""

    created: float
    dispatched: float | None
    claimed: float | None
    recorded: float | None
    attempts: int


class Releases:
    """Releases made in a profile's database as an operator's SQL makes them, and what the webhook
    tables say of their events."""

    def __init__(self, url: str) -> None:
        self.engine: AsyncEngine = create_engine(Settings(_env_file=None, database_url=url))  # type: ignore[call-arg]

    async def close(self) -> None:
        await self.engine.dispose()

    async def published(self) -> list[int]:
        async with self.engine.connect() as connection:
            found = await connection.scalars(
                select(Resource.id)
                .where(Resource.status == ResourceStatus.PUBLISHED.value, Resource.deleted_at.is_(None))
                .order_by(Resource.id)
            )
            return list(found)

    async def release(self, resource_id: int, number: str) -> int:
        """One release in a transaction of its own; the version's id."""
        async with self.engine.begin() as connection:
            made = await connection.scalar(
                insert(Version).values(**_version(resource_id, number)).returning(Version.id)
            )
        return int(made or 0)

    async def release_many(self, resources: list[int], count: int, prefix: str) -> tuple[list[int], float]:
        """`count` releases in one transaction, spread over `resources`; their ids, and when the
        commit returned (time.time())."""
        rows = [_version(resources[n % len(resources)], f"{prefix}.{n}") for n in range(count)]
        async with self.engine.begin() as connection:
            made = (await connection.execute(insert(Version).returning(Version.id), rows)).scalars().all()
        return [int(one) for one in made], time.time()

    async def stages(self, version_ids: list[int]) -> dict[int, Stage]:
        """Each release's event and delivery, by version id."""
        found: dict[int, Stage] = {}
        async with self.engine.connect() as connection:
            for start in range(0, len(version_ids), 500):
                rows = await connection.execute(
                    select(
                        WebhookEvent.subject_id,
                        WebhookEvent.created_at,
                        WebhookEvent.dispatched_at,
                        WebhookDelivery.first_attempt_at,
                        WebhookDelivery.delivered_at,
                        WebhookDelivery.attempts,
                    )
                    .outerjoin(WebhookDelivery, WebhookDelivery.event_id == WebhookEvent.id)
                    .where(
                        WebhookEvent.kind == "release.published",
                        WebhookEvent.subject_id.in_(version_ids[start : start + 500]),
                    )
                )
                for row in rows:
                    found[int(row.subject_id)] = Stage(
                        unix_time(row.created_at),
                        unix_time(row.dispatched_at) if row.dispatched_at else None,
                        unix_time(row.first_attempt_at) if row.first_attempt_at else None,
                        unix_time(row.delivered_at) if row.delivered_at else None,
                        int(row.attempts or 0),
                    )
        return found


def _version(resource_id: int, number: str) -> dict[str, object]:
    # To the second, as the platform stores every timestamp (models/base.py).
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    return {
        "resource_id": resource_id,
        "version": number,
        "title": "",
        "download": 0,
        "created_at": now,
        "updated_at": now,
    }


@dataclass(frozen=True)
class Database:
    profile: str
    url: str
    # The PostgreSQL database's name, or the SQLite file.
    name: str


@dataclass(frozen=True)
class Plan:
    """What a run measures, from the command line."""

    profiles: tuple[str, ...]
    samples: int
    spacing: float
    jitter: float
    events: int
    bursts: int
    idle_seconds: float
    # The second run's poll interval (None: only the default one).
    fast_poll: float | None
    # Also the idle cost with delivery off.
    baseline: bool
    # Sample one more burst with py-spy.
    sample_drain: bool
    workdir: Path
    postgres_url: str
    redis_url: str
    seed: int
    command_line: str


def _settings(plan: Plan, database: Database) -> dict[str, str]:
    return {
        "MARKETPLACE_DATABASE_URL": database.url,
        "MARKETPLACE_APP_KEY": "bench",
        "MARKETPLACE_STORAGE_DIR": str(plan.workdir / "storage"),
        "MARKETPLACE_WEBHOOKS_ALLOW_PRIVATE": "true",
    }


def _environment_of(settings: dict[str, str]) -> dict[str, str]:
    env = service_environment(REPOSITORY, settings)
    # `serve` makes its own for several workers; one inherited would mix the runs' metrics.
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    return env


def _marketplace(plan: Plan, database: Database, *arguments: str) -> str:
    done = subprocess.run(
        [*marketplace_command(), *arguments],
        env=_environment_of(_settings(plan, database)),
        cwd=plan.workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise SystemExit(f"marketplace {arguments[0]} failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout


async def _admin(postgres_url: str, statement: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    connection = await asyncpg.connect(postgres_url)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


def fresh_database(plan: Plan, profile: str, label: str, receiver: Receiver) -> Database:
    """A new database of the profile: migrated, the demo catalogue, one subscription to
    `release.published` naming the receiver."""
    if profile == "sqlite":
        path = plan.workdir / f"webhooks-{label}.db"
        for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            stale.unlink(missing_ok=True)
        database = Database(profile, f"sqlite:///{path}", str(path))
    else:
        name = f"marketplace_webhooks_{os.getpid()}_{label}"
        asyncio.run(_admin(plan.postgres_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        asyncio.run(_admin(plan.postgres_url, f'CREATE DATABASE "{name}"'))
        database = Database(profile, database_url(plan.postgres_url, name), name)
    migrate(database.url, REPOSITORY, plan.workdir)
    _marketplace(plan, database, "demo")
    _marketplace(
        plan,
        database,
        "webhooks",
        "add",
        receiver.url,
        "--events",
        "release.published",
        "--by",
        "bench",
        "--json",
    )
    return database


def drop_database(plan: Plan, database: Database) -> None:
    if database.profile == "sqlite":
        path = Path(database.name)
        for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            stale.unlink(missing_ok=True)
    else:
        asyncio.run(_admin(plan.postgres_url, f'DROP DATABASE IF EXISTS "{database.name}" WITH (FORCE)'))


def service(plan: Plan, database: Database, poll: float | None, *, deliver: bool = True) -> Server:
    """`marketplace serve` on the database, webhook settings at their defaults but the poll
    interval (None: the default) and ALLOW_PRIVATE; its output drained as a log collector would."""
    port = free_port()
    workers = WORKERS[database.profile]
    settings = _settings(plan, database)
    if poll is not None:
        settings["MARKETPLACE_WEBHOOKS_POLL_SECONDS"] = f"{poll:g}"
    if not deliver:
        settings["MARKETPLACE_WEBHOOKS_DELIVER"] = "false"
    if database.profile == "postgresql":
        settings["MARKETPLACE_REDIS_URL"] = plan.redis_url
        settings["MARKETPLACE_REDIS_PREFIX"] = f"bench-webhooks-{os.getpid()}-{port}:"
    command = [
        *marketplace_command(),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]
    log = plan.workdir / f"server-{database.profile}.log"
    return Server("service", command, _environment_of(settings), port, plan.workdir, "/up", log, drained=True)


# --- the measures ---------------------------------------------------------------------------------


@dataclass
class Idle:
    seconds: float
    server_cpu: float
    database_cpu: float | None

    @property
    def server_percent(self) -> float:
        return 100 * self.server_cpu / self.seconds

    @property
    def database_percent(self) -> float | None:
        return None if self.database_cpu is None else 100 * self.database_cpu / self.seconds


@dataclass
class Latency:
    # Each counted release's latency, seconds.
    seconds: list[float]
    # The first release after start-up (not counted): a worker's first delivery loads its client.
    first_after_start: float | None
    warmups: int
    # Each counted release's stages, seconds: until dispatched, dispatch to claim, claim to the
    # receiver's arrival, arrival to the outcome recorded.
    to_dispatch: list[float]
    to_claim: list[float]
    to_receiver: list[float]
    to_record: list[float]
    lost: int
    duplicates: int


@dataclass
class Throughput:
    events: int
    # From the commit to the last distinct event received (or to the end of the wait).
    drain_seconds: float
    first_seconds: float
    # From the commit to the last event dispatched.
    dispatched_seconds: float
    server_cpu: float
    database_cpu: float | None
    received: int
    lost: int
    duplicates: int
    retried: int
    # Deliveries per claim, in claim order.
    claims: list[int]
    # The same, of the claims made once every event was dispatched: while a batch of events is
    # dispatched the worker goes on at once, claiming whatever slots are free.
    claims_after_dispatch: list[int]
    # Median from claim to the outcome recorded, seconds.
    claim_to_record: float

    @property
    def rate(self) -> float:
        delivered = self.events - self.lost
        return delivered / self.drain_seconds if self.drain_seconds > 0 else float("nan")

    @property
    def server_ms(self) -> float:
        delivered = self.events - self.lost
        return 1000 * self.server_cpu / delivered if delivered else float("nan")

    @property
    def database_ms(self) -> float | None:
        delivered = self.events - self.lost
        if self.database_cpu is None or not delivered:
            return None
        return 1000 * self.database_cpu / delivered

    @property
    def busy(self) -> float:
        """The server's process tree's CPU over the drain, in cores."""
        return self.server_cpu / self.drain_seconds if self.drain_seconds > 0 else float("nan")

    @property
    def per_claim(self) -> float:
        return _median([float(count) for count in self.claims])

    def claim_every(self, workers: int) -> float:
        """Seconds between one worker's claims, on average."""
        return workers * self.drain_seconds / len(self.claims) if self.claims else float("nan")

    @property
    def full_claims(self) -> float:
        """The share of the deliveries claimed after the dispatch that a claim of all of a worker's
        slots took: nearly every one when the poll paces the drain, few when the workers top up
        their slots as sends end."""
        claims = self.claims_after_dispatch or self.claims
        total = sum(claims)
        return sum(count for count in claims if count >= CONCURRENCY) / total if total else float("nan")

    @property
    def mode(self) -> str:
        if self.full_claims >= 0.9:
            return PACED
        return TOPPED_UP if self.full_claims <= 0.2 else MIXED


@dataclass
class DrainSample:
    """py-spy's samples of one more burst: where the workers' CPU went."""

    events: int
    poll: float
    found: hotspots.Hotspots
    parts: list[tuple[str, int]]
    # Samples importing at run time, by the frame that imports.
    imports: list[tuple[str, int]]


@dataclass
class ServerRun:
    profile: str
    workers: int
    poll: float
    deliver: bool = True
    idle: Idle | None = None
    latency: Latency | None = None
    bursts: list[Throughput] = field(default_factory=list)
    sampled: DrainSample | None = None

    @property
    def label(self) -> str:
        return f"poll {self.poll:g} s" if self.deliver else "delivery off"


def measure_idle(server: Server, database: Database, seconds: float) -> Idle:
    pg = DatabaseCpu(database.name) if database.profile == "postgresql" else None
    time.sleep(SETTLE_SECONDS)
    if pg is not None:
        pg.start()
    before = server.cpu_seconds()
    time.sleep(seconds)
    spent = server.cpu_seconds() - before
    return Idle(seconds, spent, pg.used() if pg is not None else None)


async def measure_latency(
    releases: Releases, receiver: Receiver, resources: list[int], plan: Plan, workers: int
) -> Latency:
    rng = random.Random(plan.seed)
    warmups = 2 * workers
    receiver.clear()
    made: list[int] = []
    due = time.monotonic()
    for n in range(warmups + plan.samples):
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        made.append(await releases.release(resources[n % len(resources)], f"latency.{n}"))
        due += plan.spacing + rng.uniform(-plan.jitter, plan.jitter)
    await asyncio.to_thread(receiver.wait_for_events, len(made), LATENCY_WAIT_SECONDS)
    await asyncio.sleep(DUPLICATE_GRACE_SECONDS)
    arrivals = receiver.arrivals()
    first: dict[int, Arrival] = {}
    for arrival in arrivals:
        if arrival.version_id is not None:
            first.setdefault(arrival.version_id, arrival)
    stages = await releases.stages(made)
    counted = made[warmups:]
    result = Latency(
        seconds=[],
        first_after_start=first[made[0]].at - first[made[0]].created_at if made[0] in first else None,
        warmups=warmups,
        to_dispatch=[],
        to_claim=[],
        to_receiver=[],
        to_record=[],
        lost=sum(1 for version in made if version not in first),
        duplicates=len(arrivals) - len({arrival.event_id for arrival in arrivals}),
    )
    for version in counted:
        arrival, stage = first.get(version), stages.get(version)
        if arrival is None:
            continue
        result.seconds.append(arrival.at - arrival.created_at)
        if stage is not None and stage.dispatched is not None and stage.claimed is not None:
            result.to_dispatch.append(stage.dispatched - stage.created)
            result.to_claim.append(stage.claimed - stage.dispatched)
            result.to_receiver.append(arrival.at - stage.claimed)
            if stage.recorded is not None:
                result.to_record.append(stage.recorded - arrival.at)
    return result


async def measure_throughput(
    releases: Releases,
    receiver: Receiver,
    server: Server,
    database: Database,
    resources: list[int],
    events: int,
    label: str,
) -> Throughput:
    receiver.clear()
    pg = DatabaseCpu(database.name) if database.profile == "postgresql" else None
    before = server.cpu_seconds()
    made, committed = await releases.release_many(resources, events, label)
    if pg is not None:
        pg.start()
    await asyncio.to_thread(receiver.wait_for_events, len(made), DRAIN_WAIT_SECONDS)
    finished = time.time()
    spent = server.cpu_seconds() - before
    database_cpu = pg.used() if pg is not None else None
    await asyncio.sleep(DUPLICATE_GRACE_SECONDS)
    arrivals = receiver.arrivals()
    first: dict[int, Arrival] = {}
    for arrival in arrivals:
        if arrival.version_id is not None:
            first.setdefault(arrival.version_id, arrival)
    expected = [first[version] for version in made if version in first]
    stages = await releases.stages(made)
    dispatched = [stage.dispatched for stage in stages.values() if stage.dispatched is not None]
    claims = Counter(stage.claimed for stage in stages.values() if stage.claimed is not None)
    all_dispatched = max(dispatched, default=committed)
    lost = len(made) - len(expected)
    return Throughput(
        events=len(made),
        drain_seconds=(max(one.at for one in expected) if not lost else finished) - committed,
        first_seconds=min(one.at for one in expected) - committed if expected else float("nan"),
        dispatched_seconds=max(dispatched) - committed if dispatched else float("nan"),
        server_cpu=spent,
        database_cpu=database_cpu,
        received=len(arrivals),
        lost=lost,
        duplicates=len(arrivals) - len({arrival.event_id for arrival in arrivals}),
        retried=sum(1 for stage in stages.values() if stage.attempts > 1),
        claims=[claims[moment] for moment in sorted(claims)],
        claims_after_dispatch=[claims[moment] for moment in sorted(claims) if moment > all_dispatched],
        claim_to_record=_median(
            [stage.recorded - stage.claimed for stage in stages.values() if stage.recorded and stage.claimed]
        ),
    )


# Where a sampled frame runs, by its file: the first prefix it starts with.
DRAIN_PARTS = (
    ("marketplace/webhooks/", "the service's webhook code"),
    ("marketplace/", "the service's other code"),
    ("httpx/", "HTTP client (httpx, httpcore, h11)"),
    ("httpcore/", "HTTP client (httpx, httpcore, h11)"),
    ("h11/", "HTTP client (httpx, httpcore, h11)"),
    ("anyio/", "HTTP client (httpx, httpcore, h11)"),
    ("sqlalchemy/", "SQLAlchemy"),
    ("asyncpg/", "asyncpg"),
    ("aiosqlite/", "SQLite (aiosqlite's thread)"),
    ("sqlite3/", "SQLite (aiosqlite's thread)"),
    ("ulid/", "ids (ulid)"),
    ("json/", "JSON"),
    ("asyncio/", "event loop (uvloop, asyncio)"),
    ("uvloop/", "event loop (uvloop, asyncio)"),
    ("threading.py", "threads"),
)


def _stacks(raw: str) -> list[tuple[list[str], int]]:
    """py-spy's collapsed stacks (`process ...;frame;frame count`): the frames, the samples."""
    found = []
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            found.append((stack.split(";"), int(count)))
    return found


def _file(frame: str) -> str:
    """The file of a frame `function (path/file.py:line)`."""
    return frame.rpartition("(")[2].rstrip(")").split(":")[0]


def drain_parts(raw: str) -> list[tuple[str, int]]:
    """py-spy's collapsed stacks counted by the part the innermost frame runs in."""
    parts: Counter[str] = Counter()
    for frames, count in _stacks(raw):
        leaf = frames[-1]
        file = _file(leaf)
        if leaf.startswith("process "):
            part = "native code (no Python frame)"
        elif file.startswith("<frozen importlib"):
            part = "imports at run time (importlib)"
        else:
            part = next(
                (name for prefix, name in DRAIN_PARTS if file.startswith(prefix) or f"/{prefix}" in file),
                "other",
            )
        parts[part] += count
    return parts.most_common()


def import_callers(raw: str) -> list[tuple[str, int]]:
    """Samples spent importing at run time, by the innermost frame that is not importlib's."""
    callers: Counter[str] = Counter()
    for frames, count in _stacks(raw):
        if not any(_file(frame).startswith("<frozen importlib") for frame in frames):
            continue
        outside = [frame for frame in frames if not _file(frame).startswith("<frozen importlib")]
        callers[re.sub(r":\d+\)$", ")", outside[-1]) if outside else "?"] += count
    return callers.most_common()


async def sample_drain(
    releases: Releases,
    receiver: Receiver,
    server: Server,
    resources: list[int],
    events: int,
    seconds: float,
    output: Path,
) -> tuple[hotspots.Hotspots, list[tuple[str, int]], list[tuple[str, int]]] | None:
    """py-spy's samples of every process of the server while one more burst drains: by function,
    and by part of the code."""
    receiver.clear()
    sampler = hotspots.record(server.pid, max(2, math.ceil(seconds)), output)
    await asyncio.sleep(0.5)
    made, _committed = await releases.release_many(resources, events, "sampled")
    await asyncio.to_thread(receiver.wait_for_events, len(made), DRAIN_WAIT_SECONDS)
    await asyncio.to_thread(sampler.wait, seconds + 30)
    raw = await asyncio.to_thread(_read_if_any, output)
    return (hotspots.summarise(raw), drain_parts(raw), import_callers(raw)) if raw else None


def _read_if_any(path: Path) -> str:
    return path.read_text() if path.exists() else ""


async def _measure(
    plan: Plan, run: ServerRun, server: Server, database: Database, receiver: Receiver, *, sample: bool
) -> None:
    releases = Releases(database.url)
    try:
        resources = await releases.published()
        if not resources:
            raise SystemExit("the demo catalogue has no published resource")
        run.latency = await measure_latency(releases, receiver, resources, plan, run.workers)
        say(f"{_where(run)}: latency p50 {_ms(_p50(run.latency.seconds))} ms, lost {run.latency.lost}")
        for number in range(1, plan.bursts + 1):
            burst = await measure_throughput(
                releases, receiver, server, database, resources, plan.events, f"burst{number}"
            )
            run.bursts.append(burst)
            say(
                f"{_where(run)}, burst {number}: {burst.events:,} events in {burst.drain_seconds:.1f} s, "
                f"{burst.rate:,.1f}/s, lost {burst.lost}, duplicates {burst.duplicates}"
            )
        if sample:
            output = plan.workdir / f"py-spy-{run.profile}.txt"
            seconds = run.bursts[-1].drain_seconds + 3.0
            found = await sample_drain(releases, receiver, server, resources, plan.events, seconds, output)
            if found is not None:
                run.sampled = DrainSample(plan.events, run.poll, *found)
                say(f"{_where(run)}: sampled one more burst, {found[0].samples} samples")
    finally:
        await releases.close()


def serve_and_measure(
    plan: Plan,
    profile: str,
    poll: float | None,
    receiver: Receiver,
    *,
    deliver: bool = True,
    sample: bool = False,
) -> ServerRun:
    label = "off" if not deliver else f"{poll or DEFAULT_POLL_SECONDS:g}".replace(".", "_")
    run = ServerRun(profile, WORKERS[profile], poll or DEFAULT_POLL_SECONDS, deliver)
    say(f"{_where(run)}: fresh database")
    database = fresh_database(plan, profile, label, receiver)
    server = service(plan, database, poll, deliver=deliver)
    try:
        server.start()
        if plan.idle_seconds:
            run.idle = measure_idle(server, database, plan.idle_seconds)
            say(f"{_where(run)}: idle {run.idle.server_percent:.2f}% of a core")
        if deliver:
            asyncio.run(_measure(plan, run, server, database, receiver, sample=sample))
    finally:
        server.stop()
        _forget_redis_keys(plan.redis_url, server)
        drop_database(plan, database)
    return run


# --- the report -----------------------------------------------------------------------------------


@dataclass
class Outcome:
    plan: Plan
    started: datetime
    environment: dict[str, str]
    runs: list[ServerRun] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def lost(self) -> int:
        return sum(
            (run.latency.lost if run.latency else 0) + sum(burst.lost for burst in run.bursts)
            for run in self.runs
        )

    @property
    def duplicates(self) -> int:
        return sum(
            (run.latency.duplicates if run.latency else 0) + sum(burst.duplicates for burst in run.bursts)
            for run in self.runs
        )


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _ms(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds * 1000:,.0f}"


def _where(run: ServerRun) -> str:
    return f"{PROFILE_TITLES[run.profile]}, {run.workers} worker{'s' if run.workers > 1 else ''}, {run.label}"


LATENCY_COLUMNS = (
    "Profile | Workers | Poll | Samples | p50 | p95 | max | mean | → dispatched | → claimed | → received | "
    "→ recorded | First after start | Lost | Duplicates"
)
THROUGHPUT_COLUMNS = (
    "Profile | Workers | Poll | Burst | Events | Drain s | Deliveries/s | First s | All dispatched s | Claims | "
    "Per claim | Full claims | Claim → recorded ms | Server CPU ms/delivery | PostgreSQL CPU ms/delivery | Server busy | "
    "Lost | Duplicates | Retried"
)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---", *(["---:"] * (len(header) - 1))]) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def _pct(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f}%"


def _latency_rows(runs: list[ServerRun]) -> list[list[str]]:
    rows = []
    for run in runs:
        found = run.latency
        if found is None:
            continue
        ordered = sorted(found.seconds)
        rows.append(
            [
                PROFILE_TITLES[run.profile],
                str(run.workers),
                f"{run.poll:g} s",
                str(len(ordered)),
                _ms(percentile(ordered, 0.5)) if ordered else "n/a",
                _ms(percentile(ordered, 0.95)) if ordered else "n/a",
                _ms(max(ordered)) if ordered else "n/a",
                _ms(statistics.fmean(ordered)) if ordered else "n/a",
                _ms(_median(found.to_dispatch)),
                _ms(_median(found.to_claim)),
                _ms(_median(found.to_receiver)),
                _ms(_median(found.to_record)),
                _ms(found.first_after_start) if found.first_after_start is not None else "n/a",
                str(found.lost),
                str(found.duplicates),
            ]
        )
    return rows


def _throughput_rows(runs: list[ServerRun]) -> list[list[str]]:
    rows = []
    for run in runs:
        for number, found in enumerate(run.bursts, 1):
            rows.append(_burst_row(run, number, found))
    return rows


def _burst_row(run: ServerRun, number: int, found: Throughput) -> list[str]:
    per_claim = found.per_claim
    return [
        PROFILE_TITLES[run.profile],
        str(run.workers),
        f"{run.poll:g} s",
        str(number),
        f"{found.events:,}",
        f"{found.drain_seconds:.1f}",
        f"**{found.rate:,.1f}**",
        f"{found.first_seconds:.2f}",
        f"{found.dispatched_seconds:.2f}",
        f"{len(found.claims):,}",
        f"{per_claim:g}" if not math.isnan(per_claim) else "n/a",
        f"{found.full_claims:.0%}" if found.claims else "n/a",
        _ms(found.claim_to_record),
        f"{found.server_ms:.1f}",
        f"{found.database_ms:.1f}" if found.database_ms is not None else "n/a",
        f"{found.busy:.0%}",
        str(found.lost),
        str(found.duplicates),
        str(found.retried),
    ]


def _idle_rows(runs: list[ServerRun]) -> list[list[str]]:
    rows = []
    for run in runs:
        if run.idle is None:
            continue
        rows.append(
            [
                PROFILE_TITLES[run.profile],
                str(run.workers),
                f"{run.poll:g} s" if run.deliver else "delivery off",
                f"{run.idle.seconds:g}",
                _pct(run.idle.server_percent),
                _pct(run.idle.database_percent),
            ]
        )
    return rows


def _runs_of(outcome: Outcome, profile: str) -> tuple[ServerRun | None, ServerRun | None, ServerRun | None]:
    """The profile's run at the default poll, at the fast poll, with delivery off."""
    default = fast = off = None
    for run in outcome.runs:
        if run.profile != profile:
            continue
        if not run.deliver:
            off = run
        elif run.poll == DEFAULT_POLL_SECONDS and default is None:
            default = run
        else:
            fast = run
    return default, fast, off


def _latency_phrase(run: ServerRun) -> str:
    assert run.latency is not None
    ordered = sorted(run.latency.seconds)
    if not ordered:
        return f"no latency sample at {run.poll:g} s"
    return (
        f"p50 {_ms(percentile(ordered, 0.5))} ms, p95 {_ms(percentile(ordered, 0.95))} ms, "
        f"max {_ms(max(ordered))} ms at {run.poll:g} s"
    )


def _rates_phrase(run: ServerRun) -> str:
    rates = [f"{burst.rate:,.1f}" for burst in run.bursts]
    costs = [burst.server_ms for burst in run.bursts]
    cost = f"{min(costs):.1f}" if len(costs) == 1 else f"{min(costs):.1f}–{max(costs):.1f}"
    modes = Counter(burst.mode for burst in run.bursts)
    bound = run.workers * CONCURRENCY / run.poll
    if list(modes) == [PACED]:
        how = f"{PACED}, under {bound:,.0f}/s; "
    elif len(modes) == 1:
        how = f"{next(iter(modes))}; "
    else:
        how = "; ".join(f"{count} {mode}" for mode, count in modes.items()) + "; "
    return f"{_listed(rates)} deliveries/s at {run.poll:g} s ({how}{cost} ms of server CPU per delivery)"


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def summary(outcome: Outcome) -> list[str]:
    """One line per profile and measure: the figures `bench/report.py` copies into RESULTS.md."""
    lines = []
    for profile in outcome.plan.profiles:
        default, fast, off = _runs_of(outcome, profile)
        where = _workers_title(profile)
        with_latency = [run for run in (default, fast) if run is not None and run.latency is not None]
        if with_latency:
            lines.append(
                f"- Latency, {where}: " + "; ".join(_latency_phrase(run) for run in with_latency) + "."
            )
        with_rate = [run for run in (default, fast) if run is not None and run.bursts]
        if with_rate:
            events = with_rate[0].bursts[0].events
            parts = [_rates_phrase(run) for run in with_rate]
            lost = sum(burst.lost for run in with_rate for burst in run.bursts)
            duplicates = sum(burst.duplicates for run in with_rate for burst in run.bursts)
            lines.append(
                f"- Throughput, {where}, bursts of {events:,} releases: "
                + "; ".join(parts)
                + f"; {lost} lost, {duplicates} duplicates."
            )
        with_idle = [run for run in (default, fast, off) if run is not None and run.idle is not None]
        if with_idle:
            lines.append(
                f"- Idle, {where}: "
                + ", ".join(
                    f"{_pct(run.idle.server_percent)} of a core {_idle_label(run)}"
                    for run in with_idle
                    if run.idle
                )
                + "."
            )
    return lines


def _idle_label(run: ServerRun) -> str:
    return f"polling every {run.poll:g} s" if run.deliver else "with delivery off"


def _p50(values: list[float]) -> float:
    return percentile(sorted(values), 0.5) if values else float("nan")


def _workers_title(profile: str) -> str:
    workers = WORKERS[profile]
    return f"{PROFILE_TITLES[profile]}, {workers} worker{'s' if workers > 1 else ''}"


def _latency_story(run: ServerRun) -> str:
    found = run.latency
    assert found is not None
    return (
        f"- **Latency at {run.poll:g} s**: the median is {_ms(_p50(found.seconds))} ms: "
        f"{_ms(_median(found.to_dispatch))} ms until a worker's poll dispatches the event (half the "
        f"interval is {_ms(run.poll / 2)} ms), {_ms(_median(found.to_claim))} ms from dispatch to claim, "
        f"{_ms(_median(found.to_receiver))} ms from claim to the receiver (signing, a new connection, the "
        f"POST); recording the outcome takes {_ms(_median(found.to_record))} ms more, after the receiver "
        "has the event."
    )


def _throughput_story(run: ServerRun) -> str:
    """What the bursts of one run show: paced by the poll, topped up without waiting, or both."""
    bursts = [burst for burst in run.bursts if burst.claims]
    paced = [burst for burst in bursts if burst.mode == PACED]
    topped = [burst for burst in bursts if burst.mode == TOPPED_UP]
    mixed = [burst for burst in bursts if burst.mode == MIXED]
    bound = run.workers * CONCURRENCY / run.poll
    stories = []
    if paced:
        stories.append(
            f"{_count(len(paced), 'burst')} {PACED} drained at {_rates(paced)} deliveries/s: claims of a "
            f"median {_median([burst.per_claim for burst in paced]):g} deliveries (every slot), one every "
            f"{_median([burst.claim_every(run.workers) for burst in paced]):.2f} s per worker. A worker "
            f"sends at most {CONCURRENCY} at once; with all of them in flight it finds no free slot when "
            "it looks again at once, and sleeps a poll interval (then claims all its slots again: once "
            "in this pattern, a worker keeps it until the queue is empty), so the rate stays under "
            f"workers × concurrency / poll ({bound:,.0f}/s) whatever the receiver and the database could "
            f"take: {_busy(paced)}."
        )
    if topped:
        stories.append(
            f"{_count(len(topped), 'burst')} {TOPPED_UP} drained at {_rates(topped)} deliveries/s: claims "
            f"of a median {_median([burst.per_claim for burst in topped]):g} deliveries, one every "
            f"{_median([burst.claim_every(run.workers) for burst in topped]):.3f} s per worker. A worker "
            "with more due than its free slots claims again as soon as half of its sends have ended "
            "(hence claims of about half its concurrency), without waiting for a poll"
            + (
                f", past workers × concurrency / poll ({bound:,.0f}/s)"
                if min(b.rate for b in topped) > bound
                else ""
            )
            + f"; {_busy(topped)}"
            + (
                ", so the work per delivery bounds the rate."
                if _median([b.busy for b in topped]) >= 0.6
                else ": the deliveries mostly waited (on the database or the receiver)."
            )
        )
    if mixed:
        stories.append(
            f"{_count(len(mixed), 'burst')} drained {MIXED}, at {_rates(mixed)} deliveries/s: "
            f"{_listed([f'{burst.full_claims:.0%}' for burst in mixed])} of the deliveries claimed after "
            f"the dispatch went {CONCURRENCY} at a time (the poll's pace), the rest topped up without "
            f"waiting; {_busy(mixed)}."
        )
    dispatched = _median([burst.dispatched_seconds for burst in run.bursts])
    return (
        f"- **Throughput at {run.poll:g} s** ({_count(len(run.bursts), 'burst')} of "
        f"{run.bursts[0].events:,} releases): "
        + " ".join(stories)
        + f" Dispatching a burst's events took {dispatched:.2f} s from the commit (median)."
    )


def _busy(bursts: list[Throughput]) -> str:
    """The server's CPU over these bursts' drains (medians)."""
    costs = [burst.database_ms for burst in bursts if burst.database_ms is not None]
    return (
        f"the server's process tree was busy {_median([burst.busy for burst in bursts]):.0%} of one core, "
        f"{_median([burst.server_ms for burst in bursts]):.1f} ms of CPU per delivery"
        + (f" and {_median(costs):.1f} ms of PostgreSQL's" if costs else "")
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' if number != 1 else ''}"


def _rates(bursts: list[Throughput]) -> str:
    return _listed([f"{burst.rate:,.1f}" for burst in bursts])


def _idle_story(runs: list[ServerRun], off: ServerRun) -> str:
    assert off.idle is not None
    costs = [
        f"{run.idle.server_percent - off.idle.server_percent:.1f}% of a core at {run.poll:g} s"
        for run in runs
        if run.idle is not None
    ]
    workers = "both workers together, " if off.workers > 1 else ""
    return (
        f"- **Idle**: polling costs {' and '.join(costs)} ({workers}over the same server with delivery "
        f"off; one {off.idle.seconds:g} s window each, on a machine whose other load moves them from run "
        "to run)."
    )


def _sample_story(run: ServerRun) -> str:
    sample = run.sampled
    assert sample is not None
    total = sample.found.samples
    parts = ", ".join(f"{part} {_share(count, total)}" for part, count in sample.parts[:4])
    own = [
        f"`{name.split(' (')[0]}` {_share(count, total)}"
        for name, count in sample.found.inner
        if not name.startswith("(")
    ][:3]
    story = f"- **The drain's CPU** (py-spy, at {run.poll:g} s): {parts}; of the service's own "
    story += f"functions (with what they call), {', '.join(own)}."
    imported = sum(count for _caller, count in sample.imports)
    if sample.imports and imported / total >= 0.01:
        caller, _count = sample.imports[0]
        story += (
            f" {_share(imported, total)} of the samples are imports at run time, most under `{caller}` "
            "(a module looked for on disk at each call)."
        )
    return story


def _where_time_goes(outcome: Outcome) -> list[str]:
    lines = [
        "",
        "## Where the time goes",
        "",
        "Read from the figures above (the stages from the webhook tables, the claims from the deliveries' "
        "`first_attempt_at`, which the deliveries of one claim share).",
    ]
    for profile in outcome.plan.profiles:
        default, fast, off = _runs_of(outcome, profile)
        delivering = [run for run in (default, fast) if run is not None]
        stories = [_latency_story(run) for run in delivering if run.latency and run.latency.seconds]
        stories += [_throughput_story(run) for run in delivering if run.bursts]
        stories += [_sample_story(run) for run in delivering if run.sampled is not None]
        if off is not None and off.idle is not None and any(run.idle for run in delivering):
            stories.append(_idle_story(delivering, off))
        if stories:
            lines += ["", f"### {_workers_title(profile)}", "", *stories]
    for run in outcome.runs:
        if run.sampled is not None:
            lines += _sampled(run)
    return lines


def _share(count: int, total: int) -> str:
    return f"{count / total:.0%}" if total else "n/a"


def _sampled(run: ServerRun) -> list[str]:
    sample = run.sampled
    assert sample is not None
    found = sample.found
    lines = [
        "",
        f"### The drain's CPU sampled, {_where(run)}: {found.samples:,} samples",
        "",
        f"py-spy (on-CPU samples at 250 Hz of every process of the server) over one more burst of "
        f"{sample.events:,} releases, not counted in the figures above. By the part of the code running:",
        "",
        *_table(
            ["Part", "Share"], [[part, _share(count, found.samples)] for part, count in sample.parts[:10]]
        ),
        "",
        "The service's functions by the samples they were the innermost service frame of (their own time "
        "plus the libraries they called):",
        "",
        *_table(
            ["Function", "Share"],
            [[f"`{name}`", _share(count, found.samples)] for name, count in found.inner[:10]],
        ),
    ]
    return lines


def render(outcome: Outcome) -> str:
    plan = outcome.plan
    polls = f"{DEFAULT_POLL_SECONDS:g} s (the default)" + (
        f" and {plan.fast_poll:g} s" if plan.fast_poll is not None else ""
    )
    lines = [
        "# Webhook delivery: latency and throughput",
        "",
        "Generated by `bench/webhooks.py` (see `bench/README.md`); rerun it rather than editing these figures.",
        "",
        "Each run serves a fresh database (`marketplace migrate`, `marketplace demo`) with one subscription "
        "to `release.published` (`marketplace webhooks add`) naming a local receiver (asyncio, HTTP/1.1, "
        "answering 200 at once, in a thread of the bench). `marketplace serve` runs with every webhook "
        f"setting at its default (concurrency {CONCURRENCY} per worker) but "
        f"`MARKETPLACE_WEBHOOKS_ALLOW_PRIVATE=true` and the poll interval: {polls}. SQLite: 1 worker, "
        "no Redis; PostgreSQL: `serve --workers 2` with Redis. Releases are rows the bench inserts into "
        "`versions`; the triggers write their events.",
        "",
        f"- **Latency**: {plan.samples} single releases, one transaction each, {plan.spacing:g} s apart "
        f"(± {plan.jitter * 1000:.0f} ms drawn), after 2 per worker not counted (a worker's first "
        "delivery loads its HTTP client: the first one's latency is shown apart). Latency = the "
        "receiver's arrival (`time.time()`) − the event's `created_at` (the database's clock at the "
        "change, same machine). Stages, medians: the event written → dispatched, dispatched → its "
        "delivery claimed, claimed → received, received → the outcome recorded.",
        f"- **Throughput**: {_count(plan.bursts, 'burst')} in turn on the same server, each one "
        f"transaction of {plan.events:,} releases spread over the demo's published resources; from its "
        "commit to the last distinct event received. A burst drains without waiting for the poll (a "
        "worker claims again when half its sends have ended), paced by the poll, or partly each way "
        "(see Where the time goes); each burst has its row. CPU: user + system time of the "
        "server's process tree (`/proc`) over the drain, per delivery; PostgreSQL: its backends of the "
        "database. Claims: deliveries claimed together (same `first_attempt_at`); full claims: the share "
        f"of the deliveries claimed once all events were dispatched that were claimed {CONCURRENCY} at a time "
        "(all of a worker's slots). Lost: events never "
        f"received; duplicates: events received more than once ({DUPLICATE_GRACE_SECONDS:g} s of grace "
        "after the last); retried: deliveries attempted more than once.",
        *(
            [
                f"- **Idle**: CPU of the server's process tree over {plan.idle_seconds:g} s without events, "
                f"{SETTLE_SECONDS:g} s after start-up, in % of one core; also with delivery off "
                "(`MARKETPLACE_WEBHOOKS_DELIVER=false`) when measured."
            ]
            if plan.idle_seconds
            else []
        ),
        "",
        "## This run",
        "",
        f"- Command: `{plan.command_line}`",
        f"- Started {outcome.started:%Y-%m-%d %H:%M} UTC; took {outcome.seconds / 60:.1f} min",
        *(f"- {name}: {value}" for name, value in outcome.environment.items()),
        "",
        WEBHOOKS_SUMMARY,
        "",
        *summary(outcome),
        "",
        "## Latency (ms)",
        "",
        *_table(LATENCY_COLUMNS.split(" | "), _latency_rows(outcome.runs)),
        "",
        "## Throughput",
        "",
        *_table(THROUGHPUT_COLUMNS.split(" | "), _throughput_rows(outcome.runs)),
    ]
    idle = _idle_rows(outcome.runs)
    if idle:
        lines += [
            "",
            "## Idle cost",
            "",
            *_table(["Profile", "Workers", "Webhooks", "Seconds", "Server CPU", "PostgreSQL CPU"], idle),
        ]
    lines += _where_time_goes(outcome)
    return "\n".join(lines) + "\n"


# --- the run ------------------------------------------------------------------------------------


def _environment(plan: Plan) -> dict[str, str]:
    from importlib.metadata import version

    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    source = str(REPOSITORY)
    revision = _version_of(["git", "-C", source, "rev-parse", "--short", "HEAD"])
    if revision != "?" and not revision.startswith("fatal"):
        dirty = _version_of(["git", "-C", source, "status", "--porcelain", "--", "marketplace"])
        source += f" (commit {revision}{', with uncommitted changes' if dirty not in ('?', '') else ''})"
    found = {
        "Source": source,
        "Machine": f"{os.cpu_count()} CPUs ({cpu}), {platform.system()} {platform.release()}; load average "
        f"{os.getloadavg()[0]:.2f} at the start (other processes share the cores)",
        "Python": platform.python_version(),
        "uvicorn": version("uvicorn"),
        "httpx": version("httpx"),
    }
    if "sqlite" in plan.profiles:
        import sqlite3

        found["SQLite"] = sqlite3.sqlite_version
    if "postgresql" in plan.profiles:
        found["PostgreSQL"] = _version_of(["psql", "--version"])
        try:
            import redis

            found["Redis"] = str(redis.Redis.from_url(plan.redis_url).info("server")["redis_version"])
        except Exception:  # the report says it could not tell; the run fails later if it matters
            found["Redis"] = "?"
    return found


def execute(plan: Plan) -> Outcome:
    plan.workdir.mkdir(parents=True, exist_ok=True)
    outcome = Outcome(plan, datetime.now(UTC), _environment(plan))
    started = time.monotonic()
    receiver = Receiver()
    receiver.start()
    try:
        for profile in plan.profiles:
            last_sampled = plan.sample_drain and plan.fast_poll is None
            outcome.runs.append(serve_and_measure(plan, profile, None, receiver, sample=last_sampled))
            if plan.fast_poll is not None:
                outcome.runs.append(
                    serve_and_measure(plan, profile, plan.fast_poll, receiver, sample=plan.sample_drain)
                )
            if plan.baseline and plan.idle_seconds:
                outcome.runs.append(serve_and_measure(plan, profile, None, receiver, deliver=False))
    finally:
        receiver.stop()
    outcome.seconds = time.monotonic() - started
    return outcome


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    found.add_argument("--profile", choices=(*PROFILES, "both"), default="both")
    found.add_argument("--out", type=Path, default=REPOSITORY / "bench" / "WEBHOOKS.md")
    found.add_argument("--samples", type=int, default=50, help="latency samples (default 50)")
    found.add_argument("--spacing", type=float, default=0.3, help="seconds between single releases")
    found.add_argument("--jitter", type=float, default=0.05, help="± seconds drawn on each spacing")
    found.add_argument("--events", type=int, default=2000, help="releases of a burst (default 2000)")
    found.add_argument("--bursts", type=int, default=3, help="bursts measured on each server (default 3)")
    found.add_argument("--idle-seconds", type=float, default=10.0)
    found.add_argument(
        "--fast-poll", type=float, default=0.1, help="the second run's poll interval (0: no second run)"
    )
    found.add_argument("--no-baseline", action="store_true", help="no idle run with delivery off")
    found.add_argument("--no-py-spy", action="store_true", help="do not sample one more burst")
    found.add_argument(
        "--smoke", action="store_true", help="SQLite, 5 samples, 50 events, default poll only, no idle"
    )
    found.add_argument(
        "--workdir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "marketplace-bench-webhooks",
        help="databases (removed after each run) and server logs",
    )
    found.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    found.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    found.add_argument("--seed", type=int, default=1)
    return found


def plan_from(arguments: argparse.Namespace, argv: list[str]) -> Plan:
    smoke = arguments.smoke
    return Plan(
        profiles=("sqlite",) if smoke else PROFILES if arguments.profile == "both" else (arguments.profile,),
        samples=5 if smoke else arguments.samples,
        spacing=arguments.spacing,
        jitter=arguments.jitter,
        events=50 if smoke else arguments.events,
        bursts=1 if smoke else arguments.bursts,
        idle_seconds=0.0 if smoke else arguments.idle_seconds,
        fast_poll=None if smoke or not arguments.fast_poll else arguments.fast_poll,
        baseline=not (smoke or arguments.no_baseline),
        sample_drain=not (smoke or arguments.no_py_spy) and hotspots.py_spy() is not None,
        workdir=(
            Path(tempfile.mkdtemp(prefix="marketplace-webhooks-smoke-")) if smoke else arguments.workdir
        ).resolve(),
        postgres_url=arguments.postgres_url,
        redis_url=arguments.redis_url,
        seed=arguments.seed,
        command_line=shlex.join(["python", "bench/webhooks.py", *argv]),
    )


def main(argv: list[str] | None = None) -> None:
    given = sys.argv[1:] if argv is None else argv
    arguments = parser().parse_args(given)
    plan = plan_from(arguments, given)
    try:
        outcome = execute(plan)
    finally:
        if arguments.smoke:
            shutil.rmtree(plan.workdir, ignore_errors=True)
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(render(outcome), encoding="utf-8")
    say(f"report written to {arguments.out} after {outcome.seconds:.0f} s")
    if outcome.lost or outcome.duplicates:
        say(f"{outcome.lost} events lost, {outcome.duplicates} received more than once")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
