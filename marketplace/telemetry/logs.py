"""How the service writes its logs: one JSON object per line (or readable text), on standard error.

Every record carries the id of the request being served when it was written (`request_id`), so
that an upstream failure or a limiter refusal can be tied to its access-log line. Records may
carry a `fields` mapping (the access log does); JSON lines hold those fields at top level.

Lines are written off the request path: a record is queued (the access line's formatting is left
to the writer), and a thread of the process's own writes the queue in order every
`FLUSH_SECONDS` or as soon as `BATCH_LINES` wait, each write holding whole lines only and at most
`PIPE_BUF` bytes (so that the lines of several workers sharing one pipe never mix). Past
`MAX_PENDING_LINES` waiting lines (a sink that does not drain) new lines are dropped and counted
in `marketplace_access_log_dropped_total`; a request never waits on the sink. The queue is written
out at the end of the lifespan and at interpreter exit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import select
import signal
import threading
import weakref
from collections import deque
from collections.abc import Coroutine
from contextvars import Context, ContextVar
from datetime import UTC, datetime
from types import FrameType
from typing import IO, Any, Literal

REQUEST_ID: ContextVar[str | None] = ContextVar("request_id", default=None)


def start_background(work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """Run `work` as a task of its own, outside any request: its log lines carry no request id.

    A task started while a request is served would otherwise copy that request's context.
    """
    return asyncio.get_running_loop().create_task(work, context=Context())


LogFormat = Literal["json", "text"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"


class RequestIdFilter(logging.Filter):
    """Stamps each record with the id of the request being served (`-` outside requests)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get() or "-"
        return True


# `json.dumps(line, ensure_ascii=True, default=str)`, its encoder made once: `dumps` with `default`
# builds a new encoder for every line, most of a line's formatting time.
_LINE_ENCODER = json.JSONEncoder(ensure_ascii=True, default=str)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None) or REQUEST_ID.get()
        if request_id and request_id != "-":
            line["request_id"] = request_id
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return _LINE_ENCODER.encode(line)


FLUSH_SECONDS = 0.1
BATCH_LINES = 256
MAX_PENDING_LINES = 10_000
# How long the end of the lifespan or of the process waits for a sink that does not drain.
FINAL_FLUSH_SECONDS = 5.0
# Writes up to this size to a pipe are never mixed with another process's.
PIPE_BUF = getattr(select, "PIPE_BUF", 512)

_line_writers: weakref.WeakSet[QueuedLineHandler] = weakref.WeakSet()


class QueuedLineHandler(logging.Handler):
    """Queues records and writes them as lines to `stream` from a thread of its own, in order.

    A record carrying `fields` (the access log) is formatted by the writer; any other record
    (warnings, errors: few) is formatted when it is logged, so that its message and traceback
    are those of that moment. Both kinds share one queue and keep their order.
    """

    def __init__(
        self,
        stream: IO[str],
        *,
        flush_seconds: float = FLUSH_SECONDS,
        batch_lines: int = BATCH_LINES,
        max_pending_lines: int = MAX_PENDING_LINES,
        write_out_on_sigterm: bool = False,
    ) -> None:
        super().__init__()
        self.stream = stream
        self.flush_seconds = flush_seconds
        self.batch_lines = batch_lines
        self.max_pending_lines = max_pending_lines
        self._pending: deque[logging.LogRecord | str | threading.Event] = deque()
        self._wake = threading.Event()
        self._writer: threading.Thread | None = None
        self._closed = False
        _line_writers.add(self)
        if write_out_on_sigterm:
            _write_out_on_sigterm()

    def handle(self, record: logging.LogRecord) -> bool:
        # No lock: appending to the queue is atomic, and only the writer takes lines out of it.
        if not self.filter(record):
            return False
        self.emit(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        pending = self._pending
        if len(pending) >= self.max_pending_lines or self._closed:
            _count_dropped(1)
            return
        if getattr(record, "fields", None) is not None:
            pending.append(record)
        else:
            try:
                pending.append(self.format(record))
            except Exception:
                self.handleError(record)
                return
        if self._writer is None:
            self._start_writer()
        if len(pending) == self.batch_lines:
            self._wake.set()

    def flush(self, timeout: float = FINAL_FLUSH_SECONDS) -> None:
        """Waits (at most `timeout` seconds) until every line queued so far is written."""
        if self._writer is None or not self._writer.is_alive():
            return
        written = threading.Event()
        self._pending.append(written)
        self._wake.set()
        written.wait(timeout)

    def close(self) -> None:
        # The logging module flushes a handler right before it closes it (at exit too).
        self._closed = True
        self._wake.set()
        super().close()

    def _start_writer(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_forever, name="log-lines", daemon=True)
                self._writer.start()

    def _forget_writer(self) -> None:
        """In a forked child: the parent's writer thread is not there, and its queue is the parent's."""
        self._pending.clear()
        self._wake = threading.Event()
        self._writer = None
        self.createLock()

    def _write_forever(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_seconds)
            self._wake.clear()
            self._write_pending()
        self._write_pending()

    def _write_pending(self) -> None:
        pending = self._pending
        batch: list[bytes] = []
        size = 0
        while pending:
            item = pending.popleft()
            if isinstance(item, threading.Event):
                self._write(batch)
                batch, size = [], 0
                item.set()
                continue
            try:
                line = item if isinstance(item, str) else self.format(item)
            except Exception:
                if isinstance(item, logging.LogRecord):
                    self.handleError(item)
                continue
            data = (line + "\n").encode(self._encoding, "backslashreplace")
            if batch and size + len(data) > PIPE_BUF:
                self._write(batch)
                batch, size = [], 0
            batch.append(data)
            size += len(data)
        self._write(batch)

    @property
    def _encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"

    def _write(self, batch: list[bytes]) -> None:
        if not batch:
            return
        data = b"".join(batch)
        try:
            descriptor = self.stream.fileno()
        except (AttributeError, OSError, ValueError):
            descriptor = None
        try:
            if descriptor is None:
                self.stream.write(data.decode(self._encoding, "replace"))
                self.stream.flush()
                return
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
        except OSError:
            _count_dropped(len(batch))


def _count_dropped(lines: int) -> None:
    # Imported here: the metrics are set up in each worker, after the logging.
    from marketplace.telemetry.metrics import ACCESS_LOG_DROPPED

    ACCESS_LOG_DROPPED.inc(lines)


def flush_log_lines(timeout: float = FINAL_FLUSH_SECONDS) -> None:
    """Writes out every queued log line (the end of the lifespan calls it)."""
    for handler in list(_line_writers):
        handler.flush(timeout)


def _write_out_on_sigterm() -> None:
    """A `SIGTERM` that ends the process writes out the queued lines first.

    The server stops gracefully on `SIGTERM`, then raises it again with the handler it found (this
    one): without it the process would end there, before the exit handlers write the last lines.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def write_out_and_end(number: int, frame: FrameType | None) -> None:
        flush_log_lines()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, write_out_and_end)


def _after_fork_in_child() -> None:
    for handler in list(_line_writers):
        handler._forget_writer()


os.register_at_fork(after_in_child=_after_fork_in_child)


def logging_config(log_format: LogFormat, level: str) -> dict[str, Any]:
    """A `logging.config.dictConfig` document for the service and its server (uvicorn)."""
    formatter: dict[str, Any] = {"()": JsonFormatter} if log_format == "json" else {"format": TEXT_FORMAT}
    handler = {
        "class": "marketplace.telemetry.logs.QueuedLineHandler",
        "stream": "ext://sys.stderr",
        "formatter": "service",
        "filters": ["request_id"],
        "write_out_on_sigterm": True,
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": {"service": formatter},
        "handlers": {"service": handler},
        "loggers": {
            "marketplace": {"handlers": ["service"], "level": level.upper(), "propagate": False},
            "uvicorn": {"handlers": ["service"], "level": level.upper(), "propagate": False},
            # The service writes its own access log (marketplace.access), without query secrets.
            "uvicorn.access": {"handlers": [], "level": "CRITICAL", "propagate": False},
        },
        "root": {"handlers": ["service"], "level": "WARNING"},
    }
