"""Forced interleavings of the API and a back-office command: one side stops before a chosen
statement, the other runs until it finishes or waits for a lock, then the first goes on.

The API answers in the test's event loop (the main thread); a back-office command runs in a thread
of its own (`BackOffice`). A pause is a statement pattern and a side; the first statement of that
side that matches stops there until `resume`, the API's without blocking the event loop.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import asyncpg
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.util import await_only

# Long enough for anything the tests wait for; a test that waits longer is broken.
WAIT_SECONDS = 30.0


class Pause:
    def __init__(self, side: str, pattern: str) -> None:
        self.side = side
        self.pattern = re.compile(pattern)
        self.reached = threading.Event()
        self.resumed = threading.Event()

    async def wait_reached(self) -> None:
        assert await asyncio.to_thread(self.reached.wait, WAIT_SECONDS), (
            f"never reached {self.pattern.pattern}"
        )

    def resume(self) -> None:
        self.resumed.set()


class Pauses:
    """The pauses armed on every engine; each stops its side once."""

    def __init__(self) -> None:
        self.armed: list[Pause] = []
        self.lock = threading.Lock()

    def at(self, side: str, pattern: str) -> Pause:
        assert side in ("api", "operator")
        pause = Pause(side, pattern)
        self.armed.append(pause)
        return pause

    def __call__(self, _connection: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        side = "api" if threading.current_thread() is threading.main_thread() else "operator"
        with self.lock:
            matching = [
                pause for pause in self.armed if pause.side == side and pause.pattern.search(statement)
            ]
            for pause in matching[:1]:
                self.armed.remove(pause)
        for pause in matching[:1]:
            pause.reached.set()
            if side == "api":
                # Inside the engine's greenlet: wait without blocking the event loop.
                await_only(asyncio.to_thread(pause.resumed.wait, WAIT_SECONDS))
            else:
                pause.resumed.wait(WAIT_SECONDS)


@contextmanager
def pauses() -> Iterator[Pauses]:
    armed = Pauses()
    event.listen(Engine, "before_cursor_execute", armed)
    try:
        yield armed
    finally:
        for pause in armed.armed:
            pause.resume()
        event.remove(Engine, "before_cursor_execute", armed)


async def finished_or_waiting(task: asyncio.Task[Any], database_url: str) -> None:
    """Return once `task` is done or (PostgreSQL) a transaction of the database waits for a lock.

    SQLite cannot tell who waits for its lock: a moment is given to the task instead (what the
    test then checks holds whichever happened).
    """
    await each_finished_or_waiting([task], database_url, sqlite_moment=0.5)


async def each_finished_or_waiting(
    tasks: list[asyncio.Task[Any]], database_url: str, *, sqlite_moment: float
) -> None:
    """Return once each of `tasks` is done or (PostgreSQL) waits for a lock: as many transactions
    of the database wait for a lock as there are tasks still running.

    SQLite cannot tell who waits for its lock: `sqlite_moment` is given to the tasks instead.
    """
    if not database_url.startswith("postgresql"):
        await asyncio.wait(tasks, timeout=sqlite_moment)
        return
    # No named statements: the URL may go through a transaction-mode pooler.
    connection = await asyncpg.connect(database_url, statement_cache_size=0)
    try:
        for _ in range(int(WAIT_SECONDS / 0.02)):
            running = sum(not task.done() for task in tasks)
            if not running:
                return
            waiting = await connection.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if waiting >= running:
                return
            await asyncio.sleep(0.02)
    finally:
        await connection.close()
    raise AssertionError("the transactions neither finished nor waited for a lock")
