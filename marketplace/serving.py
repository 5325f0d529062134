"""The HTTP server's protocol, bounded against clients that never finish a request head.

uvicorn's httptools protocol buffers a request's line and headers for as long and as large as a
client sends them: a connection trickling header bytes holds memory and a socket without end. This
protocol refuses a head larger than `MAX_HEAD_BYTES` (431) and closes a connection whose head has
not arrived within `MARKETPLACE_READ_TIMEOUT_SECONDS` of its first byte (408), and a connection
that sends nothing for that long. What comes after the head, the body, is bounded by the
application (`http/body.py`).

The supervisor of several workers imports this module to hand the class to them: it imports
nothing of the service at module level.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# nginx's default allows 4 header lines of 8 KiB; a request line and headers of 64 KiB in all are
# far beyond any client of this API.
MAX_HEAD_BYTES = 64 * 1024
_HEAD_END = b"\r\n\r\n"


@functools.cache
def head_timeout_seconds() -> float:
    """The read timeout of this process's settings (read once: protocols are made per connection)."""
    from marketplace.config import Settings

    return Settings().read_timeout_seconds


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0
        # The last bytes seen, so that a head end split over two reads is found.
        self._tail = b""
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            window = self._tail + data
            end = window.find(_HEAD_END)
            self._head_bytes += len(data) if end < 0 else max(0, end + len(_HEAD_END) - len(self._tail))
            self._tail = window[-(len(_HEAD_END) - 1) :]
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse(431, b"Request Header Fields Too Large")
                return
            if self._head_timer is None:
                self._arm_head_timer()
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        # What follows on this connection is the next request's head.
        self._in_head = True
        self._head_bytes = 0
        self._tail = b""

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(head_timeout_seconds(), self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_head or self.transport.is_closing():
            return
        if self._head_bytes:
            self._refuse(408, b"Request Timeout")
        else:
            self.transport.close()  # a connection that never sent a byte gets no answer

    def _refuse(self, status: int, reason: bytes) -> None:
        from marketplace.telemetry.metrics import REFUSED_HEADS

        self._disarm_head_timer()
        REFUSED_HEADS.labels(str(status)).inc()
        self.logger.warning("request head refused: %d %s", status, reason.decode("ascii"))
        body = reason
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, reason, len(body), body)
        )
        self.transport.close()
