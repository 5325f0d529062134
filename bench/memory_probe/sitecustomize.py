"""Heap summaries of a served worker, for `bench/worker_memory.py`: put this folder first on
`PYTHONPATH` and set `BENCH_MEMORY_PROBE` to a path prefix. Each process then traces its Python
allocations from its start (`tracemalloc`, 12 frames) and, whenever the file `<prefix>.request`
appears, writes `<prefix>-<pid>.json`: the traced bytes by part of the code (the first frame of
the stack that names a known part), its own RSS split into anonymous and file-backed memory, and
the allocator's view (glibc `mallinfo2`). Nothing happens without the variable."""

from __future__ import annotations

import os

_PREFIX = os.environ.get("BENCH_MEMORY_PROBE")


def _start() -> None:
    import json
    import threading
    import time
    import tracemalloc

    tracemalloc.start(12)
    # The first frame (innermost first) whose file names one of these parts decides the part.
    parts = (
        ("<frozen importlib", "imports (modules, code, classes)"),
        ("importlib/", "imports (modules, code, classes)"),
        ("marketplace/http/worker_cache.py", "answer cache (worker_cache.py)"),
        ("marketplace/http/cache.py", "answer cache (http/cache.py)"),
        ("marketplace/stores.py", "in-process store (limiter windows, cached answers)"),
        ("marketplace/telemetry/logs.py", "log line queue"),
        ("marketplace/database/readers.py", "database reads (readers.py)"),
        ("sqlalchemy/", "SQLAlchemy"),
        ("asyncpg/", "asyncpg"),
        ("redis/", "redis client"),
        ("prometheus_client/", "prometheus client"),
        ("uvicorn/", "uvicorn"),
        ("starlette/", "starlette"),
        ("pydantic", "pydantic"),
        ("marketplace/", "marketplace (other)"),
    )

    def part_of(trace: tracemalloc.Trace) -> str:
        for frame in trace.traceback:
            for needle, name in parts:
                if needle in frame.filename:
                    return name
        return "other"

    def smaps() -> dict[str, int]:
        found: dict[str, int] = {}
        try:
            with open(f"/proc/{os.getpid()}/smaps_rollup") as rollup:
                for line in rollup:
                    key, _, rest = line.partition(":")
                    if rest.strip().endswith("kB"):
                        found[key] = int(rest.split()[0])
        except OSError:
            pass
        return found

    def mallinfo() -> dict[str, int]:
        import ctypes

        class Mallinfo2(ctypes.Structure):
            _fields_ = [
                (name, ctypes.c_size_t)
                for name in (
                    "arena",
                    "ordblks",
                    "smblks",
                    "hblks",
                    "hblkhd",
                    "usmblks",
                    "fsmblks",
                    "uordblks",
                    "fordblks",
                    "keepcost",
                )
            ]

        try:
            libc = ctypes.CDLL("libc.so.6")
            libc.mallinfo2.restype = Mallinfo2
            info = libc.mallinfo2()
        except (OSError, AttributeError):
            return {}
        return {name: int(getattr(info, name)) for name, _ in Mallinfo2._fields_}

    def dump() -> None:
        import sys

        packages: dict[str, int] = {}
        for name in list(sys.modules):
            top = name.split(".")[0]
            packages[top] = packages.get(top, 0) + 1
        snapshot = tracemalloc.take_snapshot()
        by_part: dict[str, int] = {}
        for trace in snapshot.traces:
            name = part_of(trace)
            by_part[name] = by_part.get(name, 0) + trace.size
        lines = [(str(stat.traceback[0]), stat.size) for stat in snapshot.statistics("lineno")[:25]]
        summary = {
            "pid": os.getpid(),
            "traced": tracemalloc.get_traced_memory()[0],
            "tracemalloc_own": tracemalloc.get_tracemalloc_memory(),
            "by_part": dict(sorted(by_part.items(), key=lambda item: -item[1])),
            "top_lines": lines,
            "smaps_kib": smaps(),
            "modules": len(sys.modules),
            "packages": dict(sorted(packages.items(), key=lambda item: -item[1])[:20]),
            "mallinfo2": mallinfo(),
        }
        path = f"{_PREFIX}-{os.getpid()}.json"
        with open(path + ".tmp", "w") as out:
            json.dump(summary, out)
        os.replace(path + ".tmp", path)

    def watch() -> None:
        request = f"{_PREFIX}.request"
        answered = 0.0
        while True:
            time.sleep(0.5)
            try:
                asked = os.stat(request).st_mtime
            except OSError:
                continue
            if asked > answered:
                answered = asked
                dump()

    threading.Thread(target=watch, name="memory-probe", daemon=True).start()


if _PREFIX:
    _start()
