"""Throughput of the service as a ratio of the ceiling, measured side by side in one run.

Starts the bare reference app (`reference_app.py`) and one or more builds of the service under the
same uvicorn and worker count, then runs `wrk` against each in turn (A B A B ...), so that the noise
of a shared machine falls on every target alike. Each request comes from another client address
(`rotate_ip.lua`), so that the limiters count without refusing.

    python bench/ratio.py --env MARKETPLACE_DATABASE_URL=sqlite:///marketplace.db \\
        --source now=. --source before=/tmp/before --path /api/v1/resource/version/2 --workers 1

`--source NAME=DIR` serves the checkout in DIR (its `marketplace` package first on the path);
`--source-env NAME:VAR=VALUE` sets a variable for that source only. Beside the rate, its p99 and
its ratio to the ceiling: the CPU of each server's process tree per request (`/proc`), steadier
than rates on a loaded machine. `--access-log` serves with the access log on (the default setting).
A source's own setting is, for example, a database at the schema its migrations make, when the builds differ in it:

    python bench/ratio.py --env MARKETPLACE_APP_KEY=bench \\
        --source before=/tmp/before --source-env before:MARKETPLACE_DATABASE_URL=postgresql://.../before \\
        --source now=. --source-env now:MARKETPLACE_DATABASE_URL=postgresql://.../now --path /api/v1/resource/1
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

BENCH = Path(__file__).resolve().parent
sys.path[0] = str(BENCH.parent)

from bench.servers import cpu_seconds, descendants  # noqa: E402


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Target:
    name: str
    command: list[str]
    env: dict[str, str]
    port: int
    process: subprocess.Popen[bytes] | None = None
    rates: list[float] = field(default_factory=list)
    p99s: list[float] = field(default_factory=list)
    # CPU of the server's process tree per answered request, in microseconds.
    cpu_us: list[float] = field(default_factory=list)

    def cpu(self) -> float:
        assert self.process is not None
        return sum(cpu_seconds(pid) for pid in (self.process.pid, *descendants(self.process.pid)))

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.command, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise SystemExit(f"{self.name} did not start")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)


def wrk(port: int, path: str, seconds: int, connections: int) -> tuple[float, float]:
    output = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{seconds}s",
            "--latency",
            "-s",
            str(BENCH / "rotate_ip.lua"),
            f"http://127.0.0.1:{port}{path}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", output)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    return rate, float(p99.group(1)) * scale[p99.group(2)] if p99 else float("nan")  # type: ignore[union-attr]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--source", action="append", default=[], help="NAME=DIR of a checkout to serve")
    parser.add_argument("--env", action="append", default=[], help="VAR=VALUE for the service")
    parser.add_argument(
        "--source-env",
        action="append",
        default=[],
        help="NAME:VAR=VALUE for the service of one source only (the same DIR may be two sources)",
    )
    parser.add_argument("--path", action="append", required=True)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument(
        "--access-log", action="store_true", help="serve with the access log on (the default setting)"
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("MARKETPLACE_")}
    base_env.update(dict(pair.split("=", 1) for pair in args.env))
    uvicorn = str(Path(sys.executable).with_name("uvicorn"))
    marketplace = str(Path(sys.executable).with_name("marketplace"))
    port = free_port()
    targets = [
        Target(
            "ceiling",
            [
                uvicorn,
                "reference_app:app",
                "--port",
                str(port),
                "--workers",
                str(args.workers),
                "--no-access-log",
                "--log-level",
                "warning",
                "--app-dir",
                str(BENCH),
            ],
            base_env,
            port,
        )
    ]
    for pair in args.source or [f"now={BENCH.parent}"]:
        name, directory = pair.split("=", 1)
        port = free_port()
        env = {**base_env, "PYTHONPATH": str(Path(directory).resolve())}
        for entry in args.source_env:
            source, _, setting = entry.partition(":")
            if source == name:
                variable, _, value = setting.partition("=")
                env[variable] = value
        targets.append(
            Target(
                name,
                [
                    marketplace,
                    "serve",
                    "--port",
                    str(port),
                    "--workers",
                    str(args.workers),
                    *(() if args.access_log else ("--no-access-log",)),
                ],
                env,
                port,
            )
        )
    for path in args.path:
        for target in targets:
            target.rates.clear()
            target.p99s.clear()
        try:
            for target in targets:
                target.start()
            for target in targets:
                wrk(target.port, path, 2, args.connections)  # warm-up
            for _ in range(args.rounds):
                for target in targets:
                    cpu_before = target.cpu()
                    rate, p99 = wrk(target.port, path, args.seconds, args.connections)
                    target.cpu_us.append((target.cpu() - cpu_before) / (rate * args.seconds) * 1e6)
                    target.rates.append(rate)
                    target.p99s.append(p99)
        finally:
            for target in targets:
                target.stop()
        ceiling = statistics.median(targets[0].rates)
        print(
            f"\n{path}  (workers={args.workers}, -c{args.connections}, {args.rounds}x{args.seconds}s each, A B A B)"
        )
        print(f"{'target':<10} {'req/s (median)':>15} {'p99 ms':>8} {'ratio':>7} {'CPU us/req':>11}   runs")
        for target in targets:
            rate = statistics.median(target.rates)
            print(
                f"{target.name:<10} {rate:>15,.0f} {statistics.median(target.p99s):>8.1f} {rate / ceiling:>7.3f} "
                f"{statistics.median(target.cpu_us):>11.0f}   " + " ".join(f"{r:,.0f}" for r in target.rates),
                flush=True,
            )


if __name__ == "__main__":
    main()
