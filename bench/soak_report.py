"""The report and the plot of a soak run (`soak.py`), made from its saved samples alone, so that
either can be made again from `soak.json`:

    .venv/bin/python bench/soak_report.py bench/soak.json --out bench/SOAK.md   # also bench/soak.png

The verdicts: memory flat (each worker's RSS in the last third of the run within 10% + 5 MiB of
the first third, no worker replaced), latency flat (p50 and p99 of the minutes without a restart,
last third against first), failures only inside the restart windows (a restart's own seconds plus
a grace for reconnecting), and every back-office write shown by the API (during the run within
the freshness bound, and again at the end).
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MEMORY_GROWTH = 1.10
MEMORY_SLACK_MIB = 5.0
LATENCY_GROWTH = 1.5
P50_SLACK_MS = 2.0
P99_SLACK_MS = 10.0


@dataclass(frozen=True)
class Minute:
    number: int
    started: float
    due: int
    answered: int
    errors: int
    statuses: dict[str, int]
    p50_ms: float | None
    p99_ms: float | None
    worker_rss_mib: list[float]
    worker_sockets: list[int]
    supervisor_rss_mib: float
    restarts: list[str]


@dataclass(frozen=True)
class Verdict:
    question: str
    holds: bool
    detail: str


def _errors(interval: dict[str, Any]) -> int:
    failed = sum(count for status, count in interval["statuses"].items() if not status.startswith("2"))
    return int(interval["transport_errors"]) + int(failed)


def windows(data: dict[str, Any]) -> list[tuple[str, float, float]]:
    """Each restart as (what, first second, last second) with the grace after it."""
    grace = float(data["setup"]["grace_seconds"])
    return [(found["what"], found["began"] - 1, found["ended"] + grace) for found in data["restarts"]]


def minutes(data: dict[str, Any]) -> list[Minute]:
    """One row per minute of the load: the load's interval, then the sample taken at its end. An
    interval of a few seconds at the end (answers still arriving) is counted in the last minute."""
    intervals = [dict(interval) for interval in data["intervals"]]
    while len(intervals) > 1 and intervals[-1]["seconds"] < 5:
        tail = intervals.pop()
        last = intervals[-1]
        last["due"] += tail["due"]
        last["answered"] += tail["answered"]
        last["transport_errors"] += tail["transport_errors"]
        for status, count in tail["statuses"].items():
            last["statuses"][status] = last["statuses"].get(status, 0) + count
    samples = data["samples"]
    found = []
    for number, interval in enumerate(intervals, start=1):
        sample = samples[min(number, len(samples) - 1)]
        start, end = interval["started"], interval["started"] + interval["seconds"]
        restarts = [what for what, began, ended in windows(data) if began < end and ended >= start]
        found.append(
            Minute(
                number,
                start,
                interval["due"],
                interval["answered"],
                _errors(interval),
                interval["statuses"],
                interval["p50_ms"],
                interval["p99_ms"],
                sample["worker_rss_mib"],
                sample["worker_sockets"],
                sample["supervisor_rss_mib"],
                restarts,
            )
        )
    return found


def _thirds(values: list[float]) -> tuple[float, float]:
    """Medians of the first and the last third of the values (at least one value each)."""
    size = max(1, len(values) // 3)
    return statistics.median(values[:size]), statistics.median(values[-size:])


def memory_verdict(data: dict[str, Any]) -> Verdict:
    samples = data["samples"][1:] or data["samples"]
    pids = {tuple(sample["worker_pids"]) for sample in samples}
    if len(pids) > 1:
        return Verdict("Memory flat?", False, "a worker was replaced during the run")
    details = []
    holds = True
    for position in range(len(samples[0]["worker_rss_mib"])):
        first, last = _thirds([sample["worker_rss_mib"][position] for sample in samples])
        grew = last > first * MEMORY_GROWTH + MEMORY_SLACK_MIB
        holds = holds and not grew
        details.append(f"worker {position + 1}: {first:.0f} -> {last:.0f} MiB")
    first, last = _thirds([sample["supervisor_rss_mib"] for sample in samples])
    details.append(f"supervisor: {first:.0f} -> {last:.0f} MiB")
    limit = f"(median of the first third -> of the last; limit +{MEMORY_GROWTH - 1:.0%} + {MEMORY_SLACK_MIB:.0f} MiB)"
    return Verdict("Memory flat?", holds, "; ".join(details) + " " + limit)


def latency_verdict(rows: list[Minute]) -> Verdict:
    quiet = [row for row in rows if not row.restarts and row.p50_ms is not None and row.p99_ms is not None]
    if not quiet:
        return Verdict("Latency flat?", False, "no minute without a restart to compare")
    p50_first, p50_last = _thirds([float(row.p50_ms or 0) for row in quiet])
    p99_first, p99_last = _thirds([float(row.p99_ms or 0) for row in quiet])
    holds = (
        p50_last <= LATENCY_GROWTH * p50_first + P50_SLACK_MS
        and p99_last <= LATENCY_GROWTH * p99_first + P99_SLACK_MS
    )
    return Verdict(
        "Latency flat?",
        holds,
        f"p50 {p50_first:.1f} -> {p50_last:.1f} ms, p99 {p99_first:.1f} -> {p99_last:.1f} ms over the "
        f"{len(quiet)} minutes without a restart (first third -> last)",
    )


def error_verdict(data: dict[str, Any]) -> Verdict:
    spans = windows(data)
    inside = outside = 0
    seconds_outside = []
    for interval in data["intervals"]:
        for second, count in interval["error_seconds"].items():
            if any(began <= int(second) <= ended for _what, began, ended in spans):
                inside += count
            else:
                outside += count
                seconds_outside.append(int(second))
    detail = f"{inside} failed requests inside the restart windows, {outside} outside"
    if seconds_outside:
        start = float(data["load"]["started"])
        detail += (
            " (at " + ", ".join(f"{second - start:.0f} s" for second in sorted(seconds_outside)[:10]) + ")"
        )
    return Verdict("Errors only inside restart windows?", outside == 0, detail)


def write_verdict(data: dict[str, Any]) -> Verdict:
    writes = data["writes"]
    bound = float(data["setup"]["freshness_seconds"])
    failed = [write for write in writes if not write["ok"]]
    retried = [write for write in writes if write["ok"] and write["attempts"] > 1]
    late = [
        write
        for write in writes
        if write["ok"] and (write["visible_after_seconds"] is None or write["visible_after_seconds"] > bound)
    ]
    lost = [write for write in writes if write["ok"] and not write["visible_at_end"]]
    delays = sorted(
        write["visible_after_seconds"] for write in writes if write["visible_after_seconds"] is not None
    )
    holds = bool(writes) and not failed and not lost and not late
    detail = (
        f"{len(writes) - len(failed)} of {len(writes)} writes committed ({len(retried)} after a retry), "
        f"{len(writes) - len(failed) - len(lost)} shown at the end, {len(late)} later than {bound:g} s"
    )
    if delays:
        detail += f"; delay to show: median {statistics.median(delays) * 1000:.0f} ms, max {delays[-1] * 1000:.0f} ms"
    return Verdict("Writes all visible?", holds, detail)


def verdicts(data: dict[str, Any]) -> list[Verdict]:
    return [memory_verdict(data), latency_verdict(minutes(data)), error_verdict(data), write_verdict(data)]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def render(data: dict[str, Any]) -> str:
    setup, capacity, load = data["setup"], data["capacity"], data["load"]
    rows = minutes(data)
    lines = [
        "# Soak run",
        "",
        f"Generated by `{setup['command']}` on {setup['started']}: {setup['minutes']} minutes of the mixed "
        f"request load at {load['fraction']:.0%} of the capacity measured just before, with a back-office "
        f"write every {setup['write_every_seconds']:g} s, PostgreSQL restarted at a third of the run and Redis "
        "at two thirds. Samples in `soak.json`, plot in `soak.png` "
        "(`python bench/soak_report.py bench/soak.json` renders both again).",
        "",
        "## Verdicts",
        "",
    ]
    for verdict in verdicts(data):
        lines.append(f"- **{verdict.question}** {'yes' if verdict.holds else 'NO'}: {verdict.detail}")
    lines += ["", "## Setup", "", "| | |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in setup["environment"].items()]
    lines.append(f"| Service | `marketplace serve --workers {setup['workers']}`, PostgreSQL + Redis |")
    lines.append(
        f"| Catalogue | {setup['resources']:,} resources: "
        + ", ".join(f"{count:,} {table}" for table, count in setup["counts"].items())
        + " |"
    )
    mix = ", ".join(f"{name} {share}%" for name, share in setup["mix"].items())
    lines.append(f"| Request mix | {mix} (each from another client address) |")
    lines += [
        "",
        "## Capacity",
        "",
        f"wrk, closed loop, {capacity['wrk_connections']} connections: **{capacity['wrk_rate']:,.0f} req/s** "
        f"(p99 {capacity['wrk_p99_ms']:.1f} ms). Then paced runs of {capacity['probe_seconds']:g} s, each "
        "through a back-office write at its middle; a rate holds with no failure, every request answered, "
        "p99 under the bound and the last third's p50 not above twice the first's:",
        "",
        "| Rate (req/s) | Holds | p50 by third (ms) | p99 by third (ms) | Why |",
        "|---:|---|---|---|---|",
    ]
    for probe in capacity["probes"]:
        lines.append(
            f"| {probe['rate']:,.0f} | {'yes' if probe['holds'] else 'no'} | "
            f"{' / '.join(_ms(value) for value in probe['p50_ms'])} | "
            f"{' / '.join(_ms(value) for value in probe['p99_ms'])} | {probe['reason']} |"
        )
    lines += [
        "",
        f"Capacity: **{capacity['capacity']:,.0f} req/s**; the load: **{load['rate']:,.0f} req/s**, paced "
        "(open loop: latency counted from when each request was due), the load generator on the same cores.",
        "",
        "## Minute by minute",
        "",
        "| Minute | Requests | Failed | p50 (ms) | p99 (ms) | Worker RSS (MiB) | Supervisor RSS (MiB) | "
        "Worker sockets | Restart |",
        "|---:|---:|---:|---:|---:|---|---:|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.number} | {row.answered:,} | {row.errors:,} | {_ms(row.p50_ms)} | {_ms(row.p99_ms)} | "
            f"{' / '.join(f'{value:.0f}' for value in row.worker_rss_mib)} | {row.supervisor_rss_mib:.0f} | "
            f"{' / '.join(str(value) for value in row.worker_sockets)} | {', '.join(row.restarts)} |"
        )
    start = float(load["started"])
    lines += ["", "## Restarts", ""]
    for found in data["restarts"]:
        lines.append(
            f"- {found['what']}: at {found['began'] - start:.0f} s, back after "
            f"{found['ended'] - found['began']:.1f} s (failures up to {setup['grace_seconds']:g} s later count as its)."
        )
    lines += [
        "",
        "## Back-office writes",
        "",
        "| At (s) | Command | Target | Committed | Shown after (ms) | Shown at the end |",
        "|---:|---|---|---|---:|---|",
    ]
    for write in data["writes"]:
        shown = write["visible_after_seconds"]
        target = ", ".join(f"{key} {value}" for key, value in write["target"].items())
        committed = "yes" if write["ok"] else f"no: {write['error']}"
        if write["attempts"] > 1:
            committed += f" ({write['attempts']} attempts)"
        delay = "-" if shown is None else f"{shown * 1000:.0f}"
        lines.append(
            f"| {write['at'] - start:.0f} | {write['kind']} | {target} | {committed} | {delay} | "
            f"{'yes' if write['visible_at_end'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def plot(data: dict[str, Any], path: Path) -> None:
    """RSS, p50/p99 and failures per minute, the restart windows shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    start = float(data["load"]["started"])
    rows = minutes(data)
    x = [(row.started - start) / 60 + 0.5 for row in rows]
    figure, (memory, latency, failures) = plt.subplots(3, 1, sharex=True, figsize=(10, 9))
    samples = data["samples"]
    sampled = [(sample["at"] - start) / 60 for sample in samples]
    for position in range(len(samples[0]["worker_rss_mib"])):
        memory.plot(
            sampled,
            [sample["worker_rss_mib"][position] for sample in samples],
            marker=".",
            label=f"worker {position + 1}",
        )
    memory.plot(sampled, [sample["supervisor_rss_mib"] for sample in samples], marker=".", label="supervisor")
    memory.set_ylabel("RSS (MiB)")
    memory.set_ylim(bottom=0)
    latency.plot(x, [row.p50_ms for row in rows], marker=".", label="p50")
    latency.plot(x, [row.p99_ms for row in rows], marker=".", label="p99")
    latency.set_ylabel("latency (ms)")
    latency.set_yscale("log")
    failures.bar(x, [row.errors for row in rows], width=0.8, color="tab:red", label="failed requests")
    failures.set_ylabel("failed per minute")
    failures.set_xlabel("minutes of load")
    for axes in (memory, latency, failures):
        for _what, began, ended in windows(data):
            axes.axvspan((began - start) / 60, (ended - start) / 60, color="grey", alpha=0.3)
        axes.legend(loc="upper left", fontsize="small")
        axes.grid(alpha=0.3)
    memory.set_title(
        f"{data['load']['rate']:,.0f} req/s for {data['setup']['minutes']} min "
        f"(restarts shaded: " + ", ".join(found["what"] for found in data["restarts"]) + ")"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    found = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    found.add_argument("samples", type=Path, help="soak.json of a run")
    found.add_argument("--out", type=Path, help="the report (default: SOAK.md beside the samples)")
    arguments = found.parse_args(argv)
    data = json.loads(arguments.samples.read_text())
    out = arguments.out or arguments.samples.with_name("SOAK.md")
    plot(data, out.with_name("soak.png"))
    out.write_text(render(data))


if __name__ == "__main__":
    main()
