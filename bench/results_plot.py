"""The plot of a load run (`bench/results.png` beside `RESULTS.md`): req/s and p99 per route, the
service (default settings) against its ceiling, for each worker count, one row per profile."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from bench.harness import PROFILE_TITLES, RouteResult, Run

_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple")


def _p99(result: RouteResult, runs: str) -> float:
    measured = [run.p99_ms for run in getattr(result, runs) if run.requests]
    return statistics.median(measured) if measured else math.nan


def _rate(result: RouteResult, runs: str) -> float:
    measured = [run.rate for run in getattr(result, runs)]
    return statistics.median(measured) if measured else math.nan


def plot_name(report: Path) -> Path:
    """Where the plot of the report `report` goes: beside it, `RESULTS.md` -> `results.png`."""
    return report.with_name(report.stem.lower() + ".png")


def plot(run: Run, path: Path) -> bool:
    """Draws the plot; False (and no file) when the run measured no route."""
    logged = [result for result in run.routes if result.access_log]
    if not logged:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiles = list(dict.fromkeys(result.profile for result in logged))
    routes = list(dict.fromkeys(result.route for result in logged))
    workers = sorted({result.workers for result in logged})
    by_key = {(r.profile, r.workers, r.route): r for r in logged}
    figure, axes = plt.subplots(
        len(profiles), 2, figsize=(15, 4.5 * len(profiles)), squeeze=False, sharex=True
    )
    # Per route: for each worker count, the ceiling (pale) then the service.
    bars = 2 * len(workers)
    width = 0.8 / bars
    for row, profile in enumerate(profiles):
        for column, (measure, label) in enumerate(((_rate, "req/s"), (_p99, "p99 latency (ms)"))):
            plotted = axes[row][column]
            for index, count in enumerate(workers):
                colour = _COLOURS[index % len(_COLOURS)]
                for offset, (runs, shade, name) in enumerate(
                    (("ceiling", 0.35, "ceiling"), ("service", 1.0, "service"))
                ):
                    values = [
                        measure(by_key[(profile, count, route)], runs)
                        if (profile, count, route) in by_key
                        else math.nan
                        for route in routes
                    ]
                    position = 2 * index + offset
                    shown = [(x, value) for x, value in enumerate(values) if value > 0]
                    plotted.bar(
                        [x - 0.4 + width * (position + 0.5) for x, _value in shown],
                        [value for _x, value in shown],
                        width,
                        color=colour,
                        alpha=shade,
                        label=f"{name}, {count} worker{'s' if count > 1 else ''}",
                    )
            plotted.set_yscale("log")
            plotted.set_ylabel(label)
            plotted.set_title(f"{PROFILE_TITLES[profile]}: {label}")
            plotted.set_xticks(range(len(routes)), routes, rotation=20)
            plotted.grid(alpha=0.3, axis="y")
            plotted.legend(loc="upper right", fontsize="small")
    figure.suptitle(
        f"{run.options.resources:,} resources, wrk -c{run.options.connections}, "
        f"{run.started:%Y-%m-%d %H:%M} UTC"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True
