"""One `wrk` run with `requests.lua` (as fast as the connections go) or `paced.lua` (at a fixed
offered rate), read back from the script's summary line."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "requests.lua"
PACED_SCRIPT = Path(__file__).resolve().parent / "paced.lua"
_SUMMARY = re.compile(r"^BENCH (\{.*\})$", re.MULTILINE)


@dataclass(frozen=True)
class WrkResult:
    requests: int
    seconds: float
    # Non-2xx/3xx answers, and connections that failed (connect, read, write, timeout).
    status_errors: int
    socket_errors: int
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def errors(self) -> int:
        return self.status_errors + self.socket_errors


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def parse_summary(output: str) -> WrkResult:
    """The result of the `BENCH {...}` line `requests.lua` prints when wrk is done."""
    found = _SUMMARY.search(output)
    if found is None:
        raise ValueError(f"no summary line in the wrk output: {output[-500:]!r}")
    values = json.loads(found.group(1))
    return WrkResult(
        requests=int(values["requests"]),
        seconds=values["duration_us"] / 1e6,
        status_errors=int(values["status"]),
        socket_errors=int(values["connect"] + values["read"] + values["write"] + values["timeout"]),
        mean_ms=values["mean_us"] / 1000,
        p50_ms=values["p50_us"] / 1000,
        p90_ms=values["p90_us"] / 1000,
        p95_ms=values["p95_us"] / 1000,
        p99_ms=values["p99_us"] / 1000,
        max_ms=values["max_us"] / 1000,
    )


def run_wrk(
    port: int,
    request_file: Path,
    *,
    seconds: int,
    connections: int,
    threads: int = 1,
    seed: int = 1,
    rate: float | None = None,
) -> WrkResult:
    """`rate`: requests per second over all threads (None: as many as the connections get answered)."""
    command = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{seconds}s",
        "--timeout",
        "5s",
        "-s",
        str(SCRIPT if rate is None else PACED_SCRIPT),
        f"http://127.0.0.1:{port}",
        "--",
        str(request_file),
        str(seed),
    ]
    if rate is not None:
        command.append(f"{rate / threads:g}")
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.strip() or done.stdout[-500:]}")
    return parse_summary(done.stdout)
