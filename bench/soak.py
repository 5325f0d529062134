"""A soak run: the mixed request load for a long time at 70% of the measured capacity, with back-office
writes all along and a restart of PostgreSQL and of Redis, written up as a report and a plot.

    .venv/bin/python bench/soak.py                       # 30 minutes, bench/SOAK.md, soak.json, soak.png
    .venv/bin/python bench/soak.py --minutes 3 --out /tmp/soak/SOAK.md

Everything runs on servers of the run's own (`instances.py`): a PostgreSQL cluster and a Redis in a
temporary folder on free ports, so that restarting them disturbs nobody. In order: fill the
catalogue (`fill.py`), serve it (`marketplace serve --workers N`), measure the capacity
(`capacity.py`: wrk's closed-loop rate, then paced runs through a back-office write), then the
paced load (`paced_load.py`) at `--load` of it for `--minutes`, while a back-office write goes
through the `marketplace` command every `--write-every` seconds (grant an access, confirm a
payment, release a version, in turn), each polled in the API until it shows. PostgreSQL restarts
at a third of the run, Redis at two thirds. Each minute: RSS and open sockets of each worker and
of the supervisor, latency percentiles, requests, failures. Samples go to `soak.json` beside the
report; `soak_report.py` renders the report and the plot from them (and again from the file).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Run as a script, the folder of this file comes first on the path: the repository must, so that
# `bench` is the package beside `marketplace`.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

import httpx  # noqa: E402

from bench.capacity import THIRDS, Probe, find_capacity, judge  # noqa: E402
from bench.catalogue import Catalogue, Size  # noqa: E402
from bench.fill import database_url, fill_postgresql, marketplace_command, service_environment  # noqa: E402
from bench.harness import say  # noqa: E402
from bench.instances import PostgresInstance, RedisInstance  # noqa: E402
from bench.paced_load import Interval, interval_from_json  # noqa: E402
from bench.request_mix import ROUTES, postgresql_population, write_request_file  # noqa: E402
from bench.servers import Server, free_port, rss_mib  # noqa: E402
from bench.wrk_run import run_wrk, wrk_available  # noqa: E402

REPOSITORY = Path(__file__).resolve().parent.parent
BENCH = REPOSITORY / "bench"
API = "/api/v1"
DATABASE = "marketplace_soak"

# Shares of the mixed load: update checks first, then cards and browsing, the rest rarer.
MIX = {
    "version": 35,
    "card": 20,
    "versions": 10,
    "search": 10,
    "search-q": 10,
    "chat-member": 5,
    "user-names": 5,
    "licence": 5,
}
WRITE_KINDS = ("grant", "confirm", "release")
# Seconds after a restart ends during which failures still count as the restart's.
GRACE_SECONDS = 10.0
SETTLE_SECONDS = 5.0


@dataclass
class Write:
    """One back-office write: the command, and when the API showed it."""

    kind: str
    target: dict[str, Any]
    at: float = 0.0
    ok: bool = False
    attempts: int = 0
    command_seconds: float = 0.0
    visible_after_seconds: float | None = None
    visible_at_end: bool | None = None
    error: str = ""


@dataclass
class Targets:
    """What the writes act on, chosen before the run: each used once."""

    grants: list[dict[str, Any]]
    payments: list[dict[str, Any]]
    releases: list[dict[str, Any]]
    used: dict[str, int] = field(default_factory=lambda: dict.fromkeys(WRITE_KINDS, 0))

    def next(self, kind: str) -> dict[str, Any]:
        pool = {"grant": self.grants, "confirm": self.payments, "release": self.releases}[kind]
        target = pool[self.used[kind] % len(pool)]
        self.used[kind] += 1
        return target


def _payment_uid(number: int) -> str:
    # A ULID (Crockford base32, 26 characters): digits only are valid ones.
    return f"01JS{number:022d}"


async def _choose_targets(url: str, count: int, seed: int) -> tuple[Targets, dict[str, Any]]:
    """Members with a linked chat account and visible resources they have no access to; pending
    payments to load (a fixture document), one per planned confirmation."""
    import asyncpg  # type: ignore[import-untyped]

    connection = await asyncpg.connect(url)
    try:
        await connection.execute("SELECT setseed($1)", (seed % 1000) / 1000)
        rows = await connection.fetch(
            """
            SELECT r.id AS resource_id, r.user_id AS seller_id, m.user_id, m.chat_id
            FROM (SELECT id, user_id FROM resources
                  WHERE status IN ('published', 'unlisted') AND deleted_at IS NULL
                  ORDER BY random() LIMIT $1) r
            CROSS JOIN LATERAL (
                SELECT c.user_id, c.chat_id FROM chat_accounts c JOIN users u ON u.id = c.user_id
                WHERE u.deleted_at IS NULL AND NOT u.closed AND NOT u.banned
                  AND NOT EXISTS (SELECT 1 FROM accesses a WHERE a.user_id = c.user_id AND a.resource_id = r.id)
                ORDER BY c.id OFFSET (r.id % 50) LIMIT 1) m
            """,
            3 * count,
        )
    finally:
        await connection.close()
    picked = [dict(row) for row in rows]
    if len(picked) < 3:
        raise SystemExit("the catalogue has no member without access to a visible resource to write for")
    grants = [
        {"user": row["user_id"], "resource": row["resource_id"], "chat": row["chat_id"]}
        for row in picked[0::3]
    ]
    payments = [
        {
            "id": number,
            "uid": _payment_uid(number),
            "status": "pending",
            "amount_cents": 500,
            "base_amount_cents": 500,
            "buyer_id": row["user_id"],
            "seller_id": row["seller_id"],
            "resource_id": row["resource_id"],
        }
        for number, row in enumerate(picked[1::3], start=1)
    ]
    releases = [{"resource": row["resource_id"]} for row in picked[2::3]]
    confirmations = [{"uid": payment["uid"]} for payment in payments]
    return Targets(grants, confirmations, releases), {"payments": payments}


def _mixed_request_file(url: str, path: Path, lines: int, seed: int) -> Path:
    population = postgresql_population(url)
    total = sum(MIX.values())
    mixed: list[str] = []
    for name, share in MIX.items():
        part = path.with_name(f"{name}.txt")
        write_request_file(ROUTES[name], population, part, count=max(1, lines * share // total), seed=seed)
        mixed.extend(part.read_text().splitlines())
    random.Random(seed).shuffle(mixed)
    path.write_text("\n".join(mixed) + "\n")
    return path


class Soak:
    """The servers of one run and what it records."""

    def __init__(self, arguments: argparse.Namespace, workdir: Path) -> None:
        self.arguments = arguments
        self.workdir = workdir
        self.postgres = PostgresInstance(workdir)
        self.redis = RedisInstance(workdir)
        self.url = database_url(self.postgres.admin_url, DATABASE)
        self.settings = {
            "MARKETPLACE_DATABASE_URL": self.url,
            "MARKETPLACE_REDIS_URL": self.redis.url,
            "MARKETPLACE_APP_KEY": "soak",
            "MARKETPLACE_STORAGE_DIR": str(workdir / "storage"),
            "MARKETPLACE_LOG_FORMAT": "text",
            "MARKETPLACE_LOG_LEVEL": "error",
        }
        self.env = service_environment(arguments.source, self.settings)
        self.service: Server | None = None
        self.targets: Targets | None = None
        self.writes: list[Write] = []
        self.restarts: list[dict[str, Any]] = []
        self.client = httpx.Client(timeout=5)
        self.rng = random.Random(arguments.seed)

    # --- the back office -------------------------------------------------------------------

    def _command(self, kind: str, target: dict[str, Any], number: int) -> list[str]:
        if kind == "grant":
            return ["accesses", "grant", str(target["user"]), str(target["resource"]), "--by", "soak"]
        if kind == "confirm":
            return ["payments", "confirm", target["uid"], "--by", "soak"]
        return [
            "resources", "release", str(target["resource"]), "--version", target.setdefault("version", f"soak-{number}"),
            "--title", f"Soak release {number}", "--by", "soak",
        ]  # fmt: skip

    def _shows(self, write: Write) -> bool:
        """Whether the API answers with the write's effect now."""
        assert self.service is not None
        address = f"10.{self.rng.randint(0, 255)}.{self.rng.randint(0, 255)}.{self.rng.randint(1, 254)}"
        headers = {"X-Forwarded-For": address}
        target = write.target
        try:
            if write.kind == "grant":
                answer = self.client.post(self.service.url(f"{API}/chat/{target['chat']}"), headers=headers)
                return answer.status_code == 200 and any(
                    access["plugin_id"] == target["resource"] for access in answer.json()["plugins"]
                )
            if write.kind == "confirm":
                answer = self.client.get(self.service.url(f"{API}/payment/{target['uid']}"), headers=headers)
                return answer.status_code == 200 and answer.json()["status"] == "paid"
            answer = self.client.get(
                self.service.url(f"{API}/resource/version/{target['resource']}"), headers=headers
            )
            # Plain text: the current version number itself.
            return answer.status_code == 200 and answer.text == target["version"]
        except (httpx.HTTPError, ValueError, KeyError):
            return False

    def write(self, kind: str) -> Write:
        """One back-office write through the `marketplace` command (retried while the database is
        away), then the API polled until it shows the change."""
        assert self.targets is not None
        number = len(self.writes) + 1
        write = Write(kind, self.targets.next(kind), at=time.time())
        command = [*marketplace_command(), *self._command(kind, write.target, number)]
        started = time.monotonic()
        while write.attempts < 4:
            write.attempts += 1
            done = subprocess.run(command, env=self.env, cwd=self.workdir, capture_output=True, text=True)
            if done.returncode == 0:
                write.ok = True
                break
            write.error = (
                (done.stderr or done.stdout).strip().splitlines()[-1][:200]
                if (done.stderr or done.stdout).strip()
                else f"exit {done.returncode}"
            )
            time.sleep(5)
        committed = time.monotonic()
        write.command_seconds = round(committed - started, 2)
        if write.ok:
            while time.monotonic() - committed < 60:
                if self._shows(write):
                    write.visible_after_seconds = round(time.monotonic() - committed, 3)
                    break
                time.sleep(0.05)
        self.writes.append(write)
        return write

    # --- the servers -----------------------------------------------------------------------

    def restart(self, what: str) -> None:
        began = time.time()
        (self.postgres if what == "postgresql" else self.redis).restart()
        self.restarts.append({"what": what, "began": began, "ended": time.time()})
        say(f"{what} restarted in {time.time() - began:.1f} s")

    def sample(self) -> dict[str, Any]:
        """RSS and open sockets of the supervisor and each worker, now."""
        assert self.service is not None
        workers = self.service.workers()
        return {
            "worker_pids": workers,
            "worker_rss_mib": [round(rss_mib(pid), 1) for pid in workers],
            "worker_sockets": [_sockets(pid) for pid in workers],
            "supervisor_rss_mib": round(rss_mib(self.service.pid), 1),
        }

    def paced(
        self, rate: float, seconds: float, interval: float, request_file: Path
    ) -> subprocess.Popen[str]:
        assert self.service is not None
        command = [
            sys.executable, str(BENCH / "paced_load.py"), "--port", str(self.service.port), "--requests",
            str(request_file), "--rate", f"{rate:.2f}", "--seconds", f"{seconds:.1f}", "--interval",
            f"{interval:.3f}", "--seed", str(self.rng.randint(1, 10**6)),
        ]  # fmt: skip
        return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def restart_moment(minutes: int, third: int) -> float:
    """Seconds into the load of the restart at `third` thirds of the run: in the middle of a
    minute, so that the minutes before and after it have none (exactly a third when the run is
    too short for that)."""
    if minutes < 3:
        return minutes * 60 * third / 3
    return (minutes * third // 3) * 60 + 30.0


def _sockets(pid: int) -> int:
    """Open sockets of a process (listening, clients, database, Redis)."""
    count = 0
    try:
        for entry in Path(f"/proc/{pid}/fd").iterdir():
            try:
                count += os.readlink(entry).startswith("socket:")
            except OSError:
                continue
    except OSError:
        return 0
    return count


def _intervals(process: subprocess.Popen[str]) -> list[Interval]:
    assert process.stdout is not None
    found = [interval_from_json(json.loads(line)) for line in process.stdout if line.startswith("{")]
    process.wait()
    return found


def _probe(soak: Soak, rate: float, seconds: float, request_file: Path, kinds: list[str]) -> Probe:
    # The service first finishes what an earlier probe left queued (answers nobody waits for).
    time.sleep(SETTLE_SECONDS)
    load = soak.paced(rate, seconds, seconds / THIRDS, request_file)
    time.sleep(seconds / 2)
    soak.write(kinds[len(soak.writes) % len(kinds)])
    probe = judge(rate, _intervals(load)[:THIRDS])
    say(f"paced {rate:,.0f} req/s: {probe.reason} (p50 {probe.p50_ms}, p99 {probe.p99_ms} ms)")
    return probe


def _environment(soak: Soak, source: Path) -> dict[str, str]:
    revision = subprocess.run(
        ["git", "-C", str(source), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
        "?",
    )  # fmt: skip
    return {
        "Source": f"{source} (commit {revision or '?'})",
        "Machine": f"{os.cpu_count()} CPUs ({cpu}), {platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "PostgreSQL": f"{soak.postgres.version}, own cluster on port {soak.postgres.port}, fsync off",
        "Redis": f"{soak.redis.version.split(' sha=')[0]}, own server on port {soak.redis.port}, no persistence",
    }


def execute(arguments: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    soak = Soak(arguments, workdir)
    seconds = arguments.minutes * 60
    writes_planned = int(seconds // arguments.write_every) + 20
    with soak.postgres, soak.redis:
        catalogue = Catalogue(Size(arguments.resources), seed=arguments.seed)
        filled = fill_postgresql(
            soak.postgres.admin_url,
            DATABASE,
            catalogue,
            arguments.source,
            workdir,
            refill=False,
            progress=say,
        )
        say(f"filled in {filled.seconds:.0f} s: " + ", ".join(f"{n:,} {t}" for t, n in filled.counts.items()))
        soak.targets, fixture = asyncio.run(_choose_targets(soak.url, writes_planned, arguments.seed))
        document = workdir / "payments.json"
        document.write_text(json.dumps(fixture))
        subprocess.run([*marketplace_command(), "load", str(document)], env=soak.env, cwd=workdir, check=True)
        (workdir / "requests").mkdir()
        request_file = _mixed_request_file(soak.url, workdir / "requests" / "mix.txt", 50_000, arguments.seed)
        port = free_port()
        command = [*marketplace_command(), "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", str(arguments.workers), "--no-access-log"]  # fmt: skip
        soak.service = Server("service", command, soak.env, port, workdir, "/up", workdir / "service.log")
        soak.service.start()
        try:
            return _measure(soak, arguments, request_file, filled.counts)
        finally:
            soak.service.stop()


def _measure(
    soak: Soak, arguments: argparse.Namespace, request_file: Path, counts: dict[str, int]
) -> dict[str, Any]:
    assert soak.service is not None
    kinds = list(WRITE_KINDS)
    run_wrk(soak.service.port, request_file, seconds=5, connections=arguments.connections)
    closed = run_wrk(
        soak.service.port,
        request_file,
        seconds=arguments.wrk_seconds,
        connections=arguments.connections,
        seed=2,
    )
    say(
        f"wrk, closed loop, {arguments.connections} connections: {closed.rate:,.0f} req/s, p99 {closed.p99_ms:.1f} ms, {closed.errors} errors"
    )
    capacity, probes = find_capacity(
        closed.rate, lambda rate: _probe(soak, rate, arguments.probe_seconds, request_file, kinds)
    )
    if capacity <= 0:
        raise SystemExit("no paced rate held: see the probes above")
    rate = arguments.load * capacity
    probe_writes = len(soak.writes)
    say(f"capacity {capacity:,.0f} req/s; {arguments.minutes} min at {rate:,.0f} req/s")

    seconds = arguments.minutes * 60
    samples: list[dict[str, Any]] = []
    load = soak.paced(rate, seconds, 60, request_file)
    started = time.time()
    samples.append({"at": started, **soak.sample()})
    stop = threading.Event()

    def write_all_along() -> None:
        number = 0
        while not stop.wait(arguments.write_every if number else arguments.write_every / 2):
            write = soak.write(kinds[number % len(kinds)])
            number += 1
            if not write.ok or write.visible_after_seconds is None:
                say(f"write {write.kind} {write.target}: {'not shown' if write.ok else write.error}")

    writer = threading.Thread(target=write_all_along, daemon=True)
    writer.start()
    restarts = {
        restart_moment(arguments.minutes, 1): "postgresql",
        restart_moment(arguments.minutes, 2): "redis",
    }
    for minute in range(1, arguments.minutes + 1):
        for moment, what in sorted(restarts.items()):
            if (minute - 1) * 60 <= moment < minute * 60:
                time.sleep(max(0.0, started + moment - time.time()))
                soak.restart(what)
        time.sleep(max(0.0, started + minute * 60 - time.time()))
        samples.append({"at": time.time(), **soak.sample()})
        say(
            f"minute {minute}: RSS {samples[-1]['worker_rss_mib']} MiB, {len(soak.writes) - probe_writes} writes"
        )
    intervals = _intervals(load)
    stop.set()
    writer.join(timeout=120)
    for write in soak.writes:
        if write.ok:
            write.visible_at_end = soak._shows(write)
    return {
        "setup": {
            "command": arguments.command_line,
            "minutes": arguments.minutes,
            "workers": arguments.workers,
            "resources": arguments.resources,
            "counts": counts,
            "environment": _environment(soak, arguments.source),
            "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "mix": MIX,
            "write_every_seconds": arguments.write_every,
            "grace_seconds": GRACE_SECONDS,
            "freshness_seconds": arguments.freshness,
        },
        "capacity": {
            "wrk_rate": round(closed.rate, 1),
            "wrk_p99_ms": closed.p99_ms,
            "wrk_connections": arguments.connections,
            "probe_seconds": arguments.probe_seconds,
            "probes": [asdict(probe) for probe in probes],
            "capacity": round(capacity, 1),
        },
        "load": {"rate": round(rate, 1), "fraction": arguments.load, "started": started},
        "intervals": [asdict(interval) for interval in intervals],
        "samples": samples,
        "restarts": soak.restarts,
        "writes": [asdict(write) for write in soak.writes[probe_writes:]],
        "probe_writes": [asdict(write) for write in soak.writes[:probe_writes]],
    }


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    found.add_argument("--minutes", type=int, default=30, help="length of the loaded run (default 30)")
    found.add_argument(
        "--out", type=Path, default=BENCH / "SOAK.md", help="the report; soak.json and soak.png beside it"
    )
    found.add_argument("--workers", type=int, default=2)
    found.add_argument("--resources", type=int, default=200_000, help="catalogue size (default 200000)")
    found.add_argument("--load", type=float, default=0.7, help="share of the capacity sent (default 0.7)")
    found.add_argument("--write-every", type=float, default=20.0, help="seconds between back-office writes")
    found.add_argument(
        "--freshness", type=float, default=2.0, help="seconds a write may take to show in the API"
    )
    found.add_argument("--probe-seconds", type=float, default=30.0, help="length of each capacity probe")
    found.add_argument("--wrk-seconds", type=int, default=10)
    found.add_argument("--connections", type=int, default=32, help="wrk's connections")
    found.add_argument("--seed", type=int, default=1)
    found.add_argument("--source", type=Path, default=REPOSITORY, help="checkout of the service to serve")
    found.add_argument("--keep", action="store_true", help="keep the work folder (servers' data and logs)")
    return found


def main(argv: list[str] | None = None) -> None:
    given = sys.argv[1:] if argv is None else argv
    arguments = parser().parse_args(given)
    if arguments.minutes < 1:
        raise SystemExit("--minutes must be at least 1")
    if not wrk_available():
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    arguments.source = arguments.source.resolve()
    arguments.command_line = shlex.join(["python", "bench/soak.py", *given])
    workdir = Path(tempfile.mkdtemp(prefix="marketplace-soak-"))
    say(f"work folder {workdir}")
    try:
        data = execute(arguments, workdir)
    finally:
        if not arguments.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    from bench.soak_report import plot, render

    out: Path = arguments.out
    out.parent.mkdir(parents=True, exist_ok=True)
    samples = out.with_name("soak.json")
    samples.write_text(json.dumps(data, indent=1) + "\n")
    plot(data, out.with_name("soak.png"))
    out.write_text(render(data))
    say(f"report written to {out} (samples {samples}, plot {out.with_name('soak.png')})")


if __name__ == "__main__":
    main()
