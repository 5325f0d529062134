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
        "About 1 request in 5 misses the answer cache and reads SQLite in the event loop (the fetch is "
        "11% of the samples); the rest is per-request work the ceiling does not do: the HTTP layers and "
        "the response's send path (about 20%), routing, the limiter (4%), the access line. "
        "To close: answer every version check from a whole-catalogue version map kept in each worker "
        "(no miss, no database), and one ASGI layer instead of the edge and the router."
    ),
    "version-ratio/postgresql": (
        "Each request waits for its limiter call's Redis round trip (batched per event-loop turn), and "
        "a third of the lookups miss the cache and wait for PostgreSQL through asyncpg (12% of the "
        "samples; the event loop another 16%). To close: the whole-catalogue version map (no "
        "PostgreSQL read per miss), and fewer Redis round trips per request."
    ),
    "card-ratio": (
        "As `version`, with a larger answer: a miss builds the card from several reads (resource, "
        "author, category, counts) and encodes about 0.9 KB of JSON, and the cache keeps at most its "
        "byte budget of the 200k resources' cards (hits 64-77%). To close: cheaper misses (one read "
        "for the card's columns) and the access line's cost (see \"The access log\")."
    ),
    "search-ratio": (
        "A miss counts the listed resources and reads a page at an offset: about 2 ms of CPU per request "
        "on SQLite and 1.8-2 ms of PostgreSQL per request, the deep pages the dearest (the offset "
        "walks the rows before it). To close: a kept count of the listed resources (no count per "
        "miss) and an index that serves the listing order, so that a page costs its rows."
    ),
    "version-p99": (
        "Queueing: 32 connections share one event loop per worker, and a request behind a cache miss "
        "(a SQLite read in the loop, a PostgreSQL round trip) or behind the access log's writer waits "
        "for it; wrk takes the same 2 cores. To close: no misses for version checks (the version map), "
        "then the cost of a hit (see `version` ≥ 0.6)."
    ),
    "search-q-p95-200k": (
        "Each query reads the names and taglines of every listed resource: PostgreSQL spends 9-15 ms "
        "of CPU per request (parallel sequential scans), SQLite calls the service's `lower()` on every "
        "row (99% of the samples in the fetch); with 32 connections the requests queue behind each "
        "other. To close: an index that finds the words (trigram or full text on PostgreSQL, an FTS "
        "table on SQLite) instead of a scan."
    ),
    "search-q-p95-2m": (
        "The scan grows with the catalogue: 10 times the rows cost about 15 times the PostgreSQL CPU "
        "(the table no longer fits the buffer cache). To close: the same index as at 200k, whose cost "
        "grows with the matches, not the catalogue."
    ),
    "search-q-growth": (
        "A scan of every listed resource per query grows linearly or worse once the table outgrows "
        "the buffer cache. To close: an index on the words (see `search-q` p95)."
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
