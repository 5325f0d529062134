"""Where a worker's CPU time goes under load: py-spy samples (on-CPU only) summarised by function
and by the package the sampled frame runs in."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# "function (path/to/module.py:line)"
_FRAME = re.compile(r"^(?P<function>.+?) \((?P<file>[^:()]+)(?::\d+)?\)$")

# The first prefix a frame's file starts with names its part.
PARTS = (
    ("marketplace/http/", "marketplace http layers"),
    ("marketplace/api/", "marketplace handlers"),
    ("marketplace/catalogue/", "marketplace catalogue queries"),
    ("marketplace/telemetry/", "marketplace metrics and logs"),
    ("marketplace/", "marketplace (other)"),
    ("uvicorn/", "uvicorn"),
    ("starlette/", "starlette"),
    ("sqlalchemy/", "sqlalchemy"),
    ("asyncpg/", "asyncpg"),
    ("aiosqlite/", "SQLite (aiosqlite's thread)"),
    ("sqlite3/", "SQLite (aiosqlite's thread)"),
    ("redis/", "redis client"),
    ("prometheus_client/", "prometheus client"),
    ("asyncio/", "event loop (uvloop, asyncio)"),
    ("threading.py", "threads"),
)
# Frames of the service that only start the server: a sample under them alone is the server's.
ENTRY_FILES = ("marketplace/cli.py",)


def outside(part: str) -> str:
    """How samples without a frame of the service's code are listed: by the part running."""
    return f"(outside the service's code: {part})"


@dataclass(frozen=True)
class Hotspots:
    samples: int
    # Functions by the samples they were running in themselves.
    own: list[tuple[str, int]]
    # The service's functions by the samples they were the innermost service frame of: their own
    # time plus what the libraries they called spent.
    inner: list[tuple[str, int]]
    parts: list[tuple[str, int]]


def py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def record(pid: int, seconds: int, output: Path, rate: int = 250) -> subprocess.Popen[bytes]:
    """Start sampling the process tree under `pid`; wait on the answer for the file."""
    command = py_spy()
    if command is None:
        raise RuntimeError("py-spy is not installed (pip install py-spy)")
    return subprocess.Popen(
        [
            command,
            "record",
            "--format",
            "raw",
            "--output",
            str(output),
            "--duration",
            str(seconds),
            "--rate",
            str(rate),
            "--subprocesses",
            "--nonblocking",
            "--pid",
            str(pid),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _part(file: str) -> str:
    for prefix, part in PARTS:
        if file.startswith(prefix) or f"/{prefix}" in file:
            return part
    return "other"


def _function(frame: str) -> tuple[str, str]:
    """("function (file)", file) of a frame, its line number dropped."""
    found = _FRAME.match(frame)
    if found is None:
        return frame, ""
    return f"{found.group('function')} ({found.group('file')})", found.group("file")


def summarise(raw: str, top: int = 12) -> Hotspots:
    """`raw`: py-spy's collapsed stacks, one `frame;frame;... count` a line (process frames first)."""
    own: Counter[str] = Counter()
    inner: Counter[str] = Counter()
    parts: Counter[str] = Counter()
    samples = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_function(frame) for frame in stack.split(";") if not frame.startswith("process ")]
        if not frames:
            continue
        samples += count
        leaf, leaf_file = frames[-1]
        own[leaf] += count
        parts[_part(leaf_file)] += count
        service = [
            name for name, file in frames if file.startswith("marketplace/") and file not in ENTRY_FILES
        ]
        inner[service[-1] if service else outside(_part(leaf_file))] += count
    return Hotspots(samples, own.most_common(top), inner.most_common(top), parts.most_common())
