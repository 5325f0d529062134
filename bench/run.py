"""Load runs of the service against its ceiling, on a generated catalogue, written up as a report.

    .venv/bin/python bench/run.py                      # both profiles, 200,000 resources, bench/RESULTS.md
    .venv/bin/python bench/run.py --smoke --profile sqlite --out /tmp/bench-smoke.md
    .venv/bin/python bench/run.py --no-matrix --sizes 20000,200000,2000000 --out /tmp/sizes.md

Fills the catalogue (kept between runs in --workdir and in PostgreSQL databases
`marketplace_bench_<resources>`), serves the ceiling (`reference_app.py`), the service with its
default settings (access log on) and the same with `--no-access-log` side by side under the same
uvicorn and worker count, measures each route with wrk (A B C A B C), and writes the report and
its plot (`results.png` beside `RESULTS.md`). Needs wrk; py-spy for the profile of where the time goes. Details in bench/README.md.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, the folder of this file comes first on the path: the repository must, so that
# `bench` is the package beside `marketplace`.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench.harness import (  # noqa: E402
    PROFILES,
    Options,
    execute,
    planned_seconds,
    remove_workdir,
    say,
)
from bench.request_mix import ROUTES  # noqa: E402
from bench.wrk_run import wrk_available  # noqa: E402

REPOSITORY = Path(__file__).resolve().parent.parent
DEFAULT_PROFILE_ROUTES = ("version", "search-q")


def _numbers(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part.replace("_", "")) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"numbers of at least 1 expected: {text!r}")
    return values


def _routes(text: str) -> tuple[str, ...]:
    if text in ("", "none"):
        return ()
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [name for name in names if name not in ROUTES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown route {unknown[0]!r} (known: {', '.join(ROUTES)})")
    return names


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    found.add_argument("--profile", choices=(*PROFILES, "both"), default="both")
    found.add_argument("--resources", type=int, default=200_000, help="catalogue size (default 200000)")
    found.add_argument("--seconds", type=int, default=5, help="length of each measured run")
    found.add_argument("--rounds", type=int, default=2, help="ceiling/service pairs per route")
    found.add_argument("--warmup", type=int, default=2, help="seconds of warm-up per route and server")
    found.add_argument("--workers", type=_numbers, default=(1, 2), help="worker counts, e.g. 1,2")
    found.add_argument("--connections", type=int, default=32)
    found.add_argument("--threads", type=int, default=1, help="wrk threads")
    found.add_argument(
        "--routes", type=_routes, default=tuple(ROUTES), help=f"comma-separated, of: {', '.join(ROUTES)}"
    )
    found.add_argument(
        "--profile-routes",
        type=_routes,
        default=DEFAULT_PROFILE_ROUTES,
        help="routes to sample with py-spy ('none' for none; default version,search-q)",
    )
    found.add_argument(
        "--sizes",
        type=_numbers,
        default=(),
        help="also measure search with q on PostgreSQL catalogues of these sizes, e.g. 20000,200000,2000000",
    )
    found.add_argument("--no-matrix", action="store_true", help="only the --sizes measurements")
    found.add_argument(
        "--only-defaults",
        action="store_true",
        help="measure the service with its default settings only, not also with --no-access-log",
    )
    found.add_argument("--smoke", action="store_true", help="tiny catalogue, one 1-second round per route")
    found.add_argument("--out", type=Path, default=REPOSITORY / "bench" / "RESULTS.md")
    found.add_argument("--source", type=Path, default=REPOSITORY, help="checkout of the service to serve")
    found.add_argument(
        "--workdir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "marketplace-bench",
        help="SQLite catalogues, request files, server logs (kept for the next run)",
    )
    found.add_argument(
        "--postgres-url",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="a database of the server where the catalogues' databases are created",
    )
    found.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    found.add_argument(
        "--database-prefix",
        default="marketplace_bench",
        help="PostgreSQL catalogues are the databases PREFIX_<resources>: another prefix keeps a build "
        "whose migrations differ off the shared catalogues",
    )
    found.add_argument("--refill", action="store_true", help="fill again even if the catalogue is there")
    found.add_argument("--seed", type=int, default=1)
    found.add_argument("--request-lines", type=int, default=50_000, help="request lines per route")
    found.add_argument(
        "--env", action="append", default=[], metavar="VAR=VALUE", help="a setting of the service"
    )
    return found


def options_from(arguments: argparse.Namespace, argv: list[str]) -> Options:
    smoke = arguments.smoke
    workdir = arguments.workdir
    if smoke:
        workdir = Path(tempfile.mkdtemp(prefix="marketplace-bench-smoke-"))
    return Options(
        profiles=PROFILES if arguments.profile == "both" else (arguments.profile,),
        resources=200 if smoke else arguments.resources,
        seconds=1 if smoke else arguments.seconds,
        rounds=1 if smoke else arguments.rounds,
        warmup=0 if smoke else arguments.warmup,
        workers=(1,) if smoke else arguments.workers,
        connections=8 if smoke else arguments.connections,
        threads=arguments.threads,
        routes=arguments.routes,
        profile_routes=() if smoke and "--profile-routes" not in " ".join(argv) else arguments.profile_routes,
        sizes=arguments.sizes,
        matrix=not arguments.no_matrix,
        source=arguments.source.resolve(),
        workdir=workdir.resolve(),
        postgres_url=arguments.postgres_url,
        redis_url=arguments.redis_url,
        refill=arguments.refill,
        seed=arguments.seed,
        request_lines=2_000 if smoke else arguments.request_lines,
        env=dict(pair.split("=", 1) for pair in arguments.env),
        command_line=shlex.join(["python", "bench/run.py", *argv]),
        access_log_comparison=not arguments.only_defaults,
        database_prefix=arguments.database_prefix,
    )


def main(argv: list[str] | None = None) -> None:
    given = sys.argv[1:] if argv is None else argv
    arguments = parser().parse_args(given)
    if not wrk_available():
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    options = options_from(arguments, given)
    from bench.hotspots import py_spy

    if options.profile_routes and py_spy() is None:
        raise SystemExit(
            "py-spy is not installed (.venv/bin/pip install py-spy), or pass --profile-routes none"
        )
    say(f"about {planned_seconds(options) / 60:.1f} min of measurements, plus fills and start-ups")
    started = time.monotonic()
    try:
        run = execute(options)
    finally:
        if arguments.smoke:
            remove_workdir(options.workdir)
    from bench.report import render
    from bench.results_plot import plot, plot_name

    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    drawn = plot_name(arguments.out)
    arguments.out.write_text(render(run, drawn.name if plot(run, drawn) else None))
    say(f"report written to {arguments.out} (plot {drawn.name}) after {time.monotonic() - started:.0f} s")
    failed = sum(result.errors for result in run.routes) + sum(size.errors for size in run.sizes)
    if failed:
        say(f"{failed} requests failed (see the Errors columns)")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
