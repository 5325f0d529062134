"""Why each target of the load report is missed, and what would close it: kept by hand, so that a
regenerated `RESULTS.md` keeps its explanations.

A key is a target's key in `report.py` (`version-ratio`, `card-ratio`, `search-ratio`,
`version-p99`, `search-q-p95-200k`, `search-q-p95-2m`, `search-q-growth`, `worker-rss`), optionally
followed by `/sqlite` or `/postgresql` for a reason of that profile alone; the report shows the
most specific entry. Each entry says what the profile of the miss showed (py-spy in the report's
"Where the time goes", `bench/HISTORY.md`) and what would close it; change it when a new profile
shows another reason, and delete it when the target is met.
"""

from __future__ import annotations

MISSES: dict[str, str] = {
    "version-ratio/sqlite": (
        "Every update check is answered from the worker's version map (no database read); what is "
        "left is the cost of a hit over the bare server, and this run's profile (py-spy, "
        "`version`, 1 worker) names it: the access log 24% of the samples (its writer thread's "
        "own time 18%, the line's formatting 6%: 0.234 of the ceiling with it, 0.359 without), "
        "uvicorn's send path 18% (the write to loopback, which wakes wrk on the same 2 cores), "
        "the edge, routing and limiters about 15%, the event loop 8%. Answering a hit in the "
        "protocol's own callback, without an ASGI task, was measured and did not lower the CPU "
        "per request (bench/HISTORY.md). To close: the log writer's per-line work out of its loop "
        "(one encoded batch per write), the line made without a LogRecord, the limiter keys "
        "computed once per client address, and the load generator on cores of its own (every rate "
        "here is a lower bound)."
    ),
    "version-ratio/postgresql": (
        "As on SQLite (the version map answers with no PostgreSQL read), plus a Redis round trip per "
        "request for the limiters (pipelined per event-loop turn): the event loop waits on Redis's "
        "answer and Redis takes CPU on the same 2 cores (the DB+Redis column). To close: the "
        "limiters of a request in one script call, fewer calls by counting locally between "
        "pipelined flushes, and the cost of a hit as on SQLite."
    ),
    "card-ratio": (
        "Cards have no whole-catalogue map: the answer cache keeps about 10,000 of the 200,000 cards "
        "within its 8 MiB (the memory target), so the drawn mix misses on a share of requests "
        "(the Cache hits column), each miss a read of the card (one row with its current version and "
        "kept counts) and 0.9 KB of JSON encoded; hits cost what a version hit costs. To close: a "
        "compact card map (the columns, not the encoded answer) once a worker's imports leave the "
        "memory for it (see the worker memory target), and a cheaper hit as for `version`."
    ),
    "search-ratio": (
        "A page is one index range read with its cards' kept counts (bench/HISTORY.md \"Kept "
        'counts on the cards") and the total is kept per generation, but the run draws pages '
        "Zipf-distributed over every page of the listing, and a deep page walks the listing's "
        "index up to its offset: on SQLite 59% of the worker's samples are that read (py-spy, "
        "`search`, 1 worker). On PostgreSQL the walk is the database's (the DB+Redis column) and "
        "the worker's largest share, 32%, is writing the answers (15 or 25 cards, 10-20 KB each). "
        "The answer cache keeps the first pages, and any write drops the pages of every worker (a "
        "page lists many resources). To close: a position kept for each listed resource "
        "(maintained by the same triggers as the kept counts), so that any page is a range of "
        "that index whatever its depth, and pages kept across writes that do not touch their "
        "rows."
    ),
    "version-p99": (
        "Queueing on 2 cores shared with wrk and the database: 32 connections share one event loop "
        "per worker, and a request waits behind the others' hits and any card or page miss; with "
        "2 workers the tail halves. To close: the cost of a hit (see `version` >= 0.6), and cores of "
        "their own for the load generator and the database."
    ),
    "search-q-p95-200k": (
        "Finding the matches is an index read (a GIN index of word suffixes on PostgreSQL, an FTS5 "
        "trigram table on SQLite), and a walked page stops at its 25 rows, but the total counts "
        "every match: PostgreSQL visits the heap page of each candidate for the listing's filter "
        "(status, not deleted) and the exact substring recheck, and the run's common words match "
        "2-6% of the catalogue. Totals are kept per worker until what searches find changes, so "
        "each worker pays each distinct query once, and the run draws about 4,000 of them. To "
        "close: a partial index of the listed resources only (no filter per candidate) with the "
        "recheck skipped where the index is exact (queries of ASCII letters and digits on ASCII "
        "text), so that a count needs no heap visits on all-visible pages; totals shared by the "
        "workers (Redis) and kept across restarts."
    ),
    "search-q-p95-2m": (
        "As at 200k, ten times the matches per common word (40,000-125,000 rows for the run's most "
        "drawn words), and the table no longer fits PostgreSQL's buffer cache: a first count of one "
        "word reads 30,000-50,000 pages (300-600 ms, EXPLAIN ANALYZE). To close: as at 200k, a "
        "count that needs no heap visits (the partial, exact index and the visibility map), and "
        "totals shared by the workers and kept across restarts."
    ),
    "search-q-growth": (
        "The count of matches grows with the matches, which grow with the catalogue for words drawn "
        "from the same word lists; the page itself does not. To close: see `search-q` p95."
    ),
    "worker-rss": (
        "A worker holds 73-82 MiB before its first request: the interpreter and shared libraries "
        "(about 22 MiB) and the service's imports (590 modules on SQLite, 690 on PostgreSQL with "
        "Redis: SQLAlchemy with its asyncio extension, which always loads the ORM, about 34 MiB; "
        "pydantic and pydantic-settings; redis-py only with Redis). Serving adds the answer cache (at "
        "most about 10 MiB at the defaults), on SQLite the 2 scan connections (about 5) and, without "
        "Redis, a limiter window of about 200 bytes per client address (the run draws a new address "
        "per request: up to 20 MiB at 100,000 windows). To close, and to leave room for a "
        "whole-catalogue version map: the public reads on the driver (asyncpg, sqlite3) without "
        "SQLAlchemy's asyncio extension and its ORM in the workers, and fewer exact limiter windows "
        '(`MARKETPLACE_MEMORY_STORE_MAX_KEYS`). bench/HISTORY.md, "A worker imports only what it '
        'serves with".'
    ),
}

# Targets measured outside this harness: (what was measured, where the figure of record is).
MEASURED_ELSEWHERE: dict[str, tuple[str, str]] = {
    "laravel": (
        "no figure recorded yet",
        "bench/HISTORY.md (a Laravel run of the same catalogue and request mix, ids drawn uniformly, "
        'on the same machine; paste it in "External figures" below too)',
    ),
}


def why_missed(key: str, profile: str | None) -> str:
    """The hand-kept reason for a missed target, the profile's own when there is one."""
    if profile is not None and f"{key}/{profile}" in MISSES:
        return MISSES[f"{key}/{profile}"]
    return MISSES.get(key, "No reason recorded yet: add one to `bench/misses.py`.")
