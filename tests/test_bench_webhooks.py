"""The webhook delivery bench (`bench/webhooks.py`): its receiver, and its smallest run end to end on
SQLite (a real `marketplace serve` delivering to the bench's receiver), whose report the load-run
report (`bench/report.py`) quotes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.report import webhook_delivery
from bench.webhooks import Receiver, drain_parts, iso_unix_time

REPOSITORY = Path(__file__).resolve().parent.parent


def _row(report: str, heading: str, start: str) -> list[str]:
    """The cells of the first row starting with `start` in the table under `heading`."""
    section = report.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    line = next(line for line in section.splitlines() if line.startswith(start))
    return [cell.strip() for cell in line.strip("|").split("|")]


def _columns(report: str, heading: str) -> list[str]:
    section = report.split(f"\n{heading}\n", 1)[1]
    header = next(line for line in section.splitlines() if line.startswith("| Profile"))
    return [cell.strip() for cell in header.strip("|").split("|")]


def test_the_receiver_answers_at_once_and_keeps_each_event_with_its_arrival() -> None:
    receiver = Receiver()
    receiver.start()
    try:
        body = (
            b'{"id":"17","event":"release.published","created_at":"2026-01-02T03:04:05.250000Z",'
            b'"data":{"resource":{"id":3},"version":{"id":41,"version":"2.0"}}}'
        )
        before = time.time()
        for _ in range(2):
            answer = httpx.post(receiver.url, content=body, headers={"Connection": "close"}, timeout=5)
            assert (answer.status_code, answer.text) == (200, "ok")
        httpx.post(receiver.url, content=b"not json", timeout=5)
        assert receiver.wait_for_events(1, 5.0)
    finally:
        receiver.stop()
    arrivals = receiver.arrivals()
    assert [(one.event_id, one.version_id) for one in arrivals] == [("17", 41), ("17", 41)]
    assert arrivals[0].created_at == iso_unix_time("2026-01-02T03:04:05.250000Z")
    assert before <= arrivals[0].at <= time.time()
    assert receiver.unreadable == 1
    assert not receiver.wait_for_events(2, 0.1), "two arrivals of one event are one event"


def test_sampled_stacks_are_counted_by_the_part_their_innermost_frame_runs_in() -> None:
    raw = "\n".join(
        [
            "process 1;_run (marketplace/webhooks/worker.py:150);record (marketplace/webhooks/delivery.py:250) 5",
            "process 1;_deliver (marketplace/webhooks/worker.py:220);send (httpcore/_async/connection.py:9) 3",
            "process 1;run (asyncio/events.py:80) 2",
        ]
    )
    assert drain_parts(raw) == [
        ("the service's webhook code", 5),
        ("HTTP client (httpx, httpcore, h11)", 3),
        ("event loop (uvloop, asyncio)", 2),
    ]


def test_the_load_run_report_says_when_there_is_no_webhook_report(tmp_path: Path) -> None:
    lines = webhook_delivery(tmp_path / "WEBHOOKS.md")
    assert lines[:3] == ["", "## Webhook delivery", ""]
    assert lines[3] == "No `bench/WEBHOOKS.md` yet: `bench/webhooks.py` writes it."


def test_the_smoke_run_delivers_every_event_once_and_reports_its_tables(tmp_path: Path) -> None:
    out = tmp_path / "WEBHOOKS.md"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(REPOSITORY / "bench" / "webhooks.py"), "--smoke", "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 60
    report = out.read_text(encoding="utf-8")

    latency = dict(
        zip(_columns(report, "## Latency (ms)"), _row(report, "## Latency (ms)", "| SQLite"), strict=True)
    )
    assert (latency["Workers"], latency["Poll"], latency["Samples"]) == ("1", "0.5 s", "5")
    assert (latency["Lost"], latency["Duplicates"]) == ("0", "0")
    assert 0 < float(latency["p50"].replace(",", "")) <= float(latency["max"].replace(",", "")) < 5000

    drain = dict(
        zip(_columns(report, "## Throughput"), _row(report, "## Throughput", "| SQLite"), strict=True)
    )
    assert drain["Events"] == "50"
    assert (drain["Lost"], drain["Duplicates"]) == ("0", "0")
    assert float(drain["Deliveries/s"].strip("*")) > 0

    assert "## Where the time goes" in report
    quoted = webhook_delivery(out)
    assert quoted[:3] == ["", "## Webhook delivery", ""]
    summary = [line for line in quoted if line.startswith("- ")]
    assert [line.split(",", 1)[0] for line in summary] == ["- Latency", "- Throughput"]
    assert "0 lost, 0 duplicates" in summary[1]
