"""How the service writes its logs: one JSON object per line (or readable text), on standard error.

Every record carries the id of the request being served when it was written (`request_id`), so
that an upstream failure or a limiter refusal can be tied to its access-log line. Records may
carry a `fields` mapping (the access log does); JSON lines hold those fields at top level.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine
from contextvars import Context, ContextVar
from datetime import UTC, datetime
from typing import Any, Literal

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
        return json.dumps(line, ensure_ascii=True, default=str)


def logging_config(log_format: LogFormat, level: str) -> dict[str, Any]:
    """A `logging.config.dictConfig` document for the service and its server (uvicorn)."""
    formatter: dict[str, Any] = {"()": JsonFormatter} if log_format == "json" else {"format": TEXT_FORMAT}
    handler = {
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stderr",
        "formatter": "service",
        "filters": ["request_id"],
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
