"""The measured servers (the ceiling and the service) as processes: start, readiness, stop, and
what they cost, read from `/proc`: CPU time of the whole process tree, memory of each worker.

A server's standard output and error go to its log file, or, for a service writing its access log,
to a pipe that a thread of this process drains (`LogDrain`), as a container runtime or journald
reads a service's standard error: the access lines are counted and dropped, the other lines kept
in the log file.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

_TICKS = os.sysconf("SC_CLK_TCK")
_METRIC_LINE = re.compile(r"^(?P<name>[a-z_]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
# PostgreSQL's process titles: "postgres: [cluster: ]user database host(port) state", and
# "postgres: [cluster: ]parallel worker for PID n".
_POSTGRES_TITLE = re.compile(
    r"^postgres: (?:\S+: )?(?:parallel worker for PID (?P<leader>\d+)|\S+ (?P<database>\S+) )"
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (second field) may hold spaces: split after its closing parenthesis.
    return raw[raw.rindex(")") + 2 :].split()


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process used so far (0 once it is gone)."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def descendants(root: int) -> list[int]:
    """Every live process under `root`, children first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


# How a JSON access line names its logger (telemetry/logs.py), and its text form's.
_ACCESS_MARKS = (b'"logger": "marketplace.access"', b" marketplace.access ")


class LogDrain:
    """Reads a server's output from a pipe as fast as it comes: counts the access lines and their
    bytes, and appends every other line to the log file."""

    def __init__(self, source: int, log: Path) -> None:
        self.access_lines = 0
        self.access_bytes = 0
        self._source = source
        self._log = log
        self._reader = threading.Thread(target=self._drain, name="log-drain", daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        rest = b""
        with self._log.open("ab") as log:
            while chunk := os.read(self._source, 1 << 16):
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                kept = []
                for line in lines:
                    if any(mark in line for mark in _ACCESS_MARKS):
                        self.access_lines += 1
                        self.access_bytes += len(line) + 1
                    else:
                        kept.append(line + b"\n")
                if kept:
                    log.write(b"".join(kept))
                    log.flush()
            if rest:
                log.write(rest + b"\n")
        os.close(self._source)

    def join(self, timeout: float = 10.0) -> None:
        self._reader.join(timeout)


@dataclass
class Server:
    """One server process tree on a loopback port."""

    name: str
    command: list[str]
    env: dict[str, str]
    port: int
    cwd: Path
    ready_path: str
    log: Path
    # Output to a pipe drained by this process (a service writing its access log), else to the log.
    drained: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    drain: LogDrain | None = field(default=None, repr=False)

    def start(self, timeout: float = 60.0) -> None:
        if self.drained:
            reading, writing = os.pipe()
            try:
                self.process = subprocess.Popen(
                    self.command, env=self.env, cwd=self.cwd, stdout=writing, stderr=subprocess.STDOUT
                )
            finally:
                os.close(writing)
            self.drain = LogDrain(reading, self.log)
        else:
            with self.log.open("ab") as log:
                self.process = subprocess.Popen(
                    self.command, env=self.env, cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT
                )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"{self.name} exited with {self.process.returncode}: see {self.log}")
            try:
                if httpx.get(self.url(self.ready_path), timeout=2).status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise SystemExit(f"{self.name} did not answer within {timeout:.0f} s: see {self.log}")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.drain is not None:
            self.drain.join()

    @property
    def access_lines(self) -> int:
        """Access lines the service wrote so far (0 when its output is not drained)."""
        return self.drain.access_lines if self.drain is not None else 0

    def workers(self) -> list[int]:
        """The processes answering requests: the children running the app when there are several
        workers, else the server process itself."""
        spawned = [pid for pid in descendants(self.pid) if "multiprocessing.spawn" in _command_line(pid)]
        return spawned or [self.pid]

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid) + sum(cpu_seconds(pid) for pid in descendants(self.pid))

    def memory(self) -> tuple[list[float], float | None]:
        """RSS of each worker (MiB), and of the supervising process when it is not a worker."""
        workers = self.workers()
        supervisor = None if workers == [self.pid] else rss_mib(self.pid)
        return [rss_mib(pid) for pid in workers], supervisor

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """The service's `/metrics`, as (name, labels) -> value; empty if it has none."""
        try:
            response = httpx.get(self.url("/metrics"), timeout=5)
        except httpx.HTTPError:
            return {}
        if response.status_code != 200:
            return {}
        return parse_metrics(response.text)


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        found = _METRIC_LINE.match(line)
        if found is None:
            continue
        labels = tuple(sorted(_LABEL.findall(found.group("labels") or "")))
        try:
            values[(found.group("name"), labels)] = float(found.group("value"))
        except ValueError:
            continue
    return values


class DatabaseCpu:
    """CPU time of the PostgreSQL processes serving one database while a run lasts: its backends
    and their parallel query workers. A parallel worker lives only as long as its query, so the
    processes are sampled from `/proc` every `interval` seconds; a process first seen during the
    run counts from zero."""

    def __init__(self, database: str, interval: float = 0.1) -> None:
        self.database = database
        self.interval = interval
        self._start: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    def _postmaster(self) -> int | None:
        """The parent of a backend of the database, else of any PostgreSQL server process."""
        found: int | None = None
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            title = _command_line(int(entry.name))
            if not title.startswith("postgres: "):
                continue
            fields = _stat_fields(int(entry.name))
            if fields is None:
                continue
            backend = _POSTGRES_TITLE.match(title)
            if backend and backend.group("database") == self.database:
                return int(fields[1])
            found = found or int(fields[1])
        return found

    def _sample(self, postmaster: int) -> dict[int, float]:
        try:
            children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
        except OSError:
            children = [str(pid) for pid in descendants(postmaster)]
        backends: set[int] = set()
        workers: dict[int, int] = {}
        for child in map(int, children):
            found = _POSTGRES_TITLE.match(_command_line(child))
            if found is None:
                continue
            if found.group("database") == self.database:
                backends.add(child)
            elif found.group("leader"):
                workers[child] = int(found.group("leader"))
        serving = backends | {pid for pid, leader in workers.items() if leader in backends}
        return {pid: cpu_seconds(pid) for pid in serving}

    def start(self) -> None:
        postmaster = self._postmaster()
        self._start = self._sample(postmaster) if postmaster else {}
        self._last = dict(self._start)
        self._stop.clear()
        if postmaster is None:
            return

        def sample() -> None:
            while not self._stop.wait(self.interval):
                self._last.update(self._sample(postmaster))

        self._sampler = threading.Thread(target=sample, daemon=True)
        self._sampler.start()

    def used(self) -> float:
        """CPU seconds since `start`."""
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join()
            self._sampler = None
        return sum(max(0.0, last - self._start.get(pid, 0.0)) for pid, last in self._last.items())
