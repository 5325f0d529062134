"""PostgreSQL and Redis servers of a run's own, in a temporary folder on free loopback ports, that the
run may stop and restart without touching the machine's shared servers (5432, 6379).

PostgreSQL is a fresh cluster (`initdb` and `pg_ctl` of the newest server found under
/usr/lib/postgresql, trust authentication, durability off: the data is thrown away after the run);
Redis a `redis-server` without persistence. Both stop when their `with` block ends.
"""

from __future__ import annotations

import glob
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from bench.servers import free_port

# Durability is not what a soak run measures: a restart must still lose nothing committed, which
# a clean (fast) shutdown guarantees without fsync.
_POSTGRES_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "256MB",
    "listen_addresses": "127.0.0.1",
}


def postgres_bin() -> Path | None:
    """The `bin` folder of the newest PostgreSQL server installed, if any."""
    found = sorted(
        (Path(path) for path in glob.glob("/usr/lib/postgresql/*/bin") if Path(path, "initdb").exists()),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
    )
    return found[-1] if found else None


def redis_server() -> str | None:
    return shutil.which("redis-server")


def _wait_for(check: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s")


class PostgresInstance:
    """A PostgreSQL cluster in `folder/postgres`, served on its own port."""

    def __init__(self, folder: Path, port: int | None = None) -> None:
        binaries = postgres_bin()
        if binaries is None:
            raise RuntimeError("no PostgreSQL server under /usr/lib/postgresql/*/bin (initdb, pg_ctl)")
        self.bin = binaries
        # initdb refuses to run as root: then the cluster belongs to the `postgres` system user.
        self.owner = "postgres" if os.geteuid() == 0 else None
        self.folder = folder / "postgres"
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        self.port = port or free_port()

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def version(self) -> str:
        done = subprocess.run([str(self.bin / "postgres"), "--version"], capture_output=True, text=True)
        return done.stdout.strip()

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", self.owner, "--"] if self.owner else []
        done = subprocess.run([*prefix, *command], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{Path(command[0]).name} failed: {(done.stderr or done.stdout).strip()}")

    def _pg_ctl(self, *arguments: str) -> None:
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", *arguments
        )

    def create(self) -> None:
        self.folder.mkdir(parents=True)
        if self.owner:
            shutil.chown(self.folder, self.owner, self.owner)
            # The system user must reach its folder through the run's (private) temporary one.
            for parent in self.folder.parents:
                if parent == Path(tempfile.gettempdir()):
                    break
                parent.chmod(parent.stat().st_mode | stat.S_IXOTH)
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
            "--no-instructions",
        )  # fmt: skip
        settings = {**_POSTGRES_SETTINGS, "port": str(self.port), "unix_socket_directories": str(self.data)}
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{name} = '{value}'\n" for name, value in settings.items())

    def start(self) -> None:
        self._pg_ctl("start")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._pg_ctl("stop", "-m", "fast")

    def restart(self) -> None:
        """A clean restart: sessions are cut (`-m fast`), committed data stays."""
        self._pg_ctl("restart", "-m", "fast")

    def __enter__(self) -> PostgresInstance:
        self.create()
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


class RedisInstance:
    """A `redis-server` without persistence on its own port, its files in `folder`."""

    def __init__(self, folder: Path, port: int | None = None) -> None:
        server = redis_server()
        if server is None:
            raise RuntimeError("redis-server is not installed")
        self.server = server
        self.folder = folder
        self.port = port or free_port()
        self.log = folder / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def version(self) -> str:
        done = subprocess.run([self.server, "--version"], capture_output=True, text=True)
        return done.stdout.strip()

    def _answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    def start(self) -> None:
        command = [
            self.server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(self.folder), "--logfile", str(self.log),
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for(self._answers, f"redis-server on port {self.port}", 30)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        """Stopped and started again on the same port: what it held (limiter windows, cached
        upstream answers) is gone, as after a crash of an instance without persistence."""
        self.stop()
        self.start()

    def __enter__(self) -> RedisInstance:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
