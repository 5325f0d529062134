"""The HTTP server's connections, bounded against clients that hold them without finishing a request.

uvicorn's httptools protocol buffers a request's line and headers for as long and as large as a
client sends them, and the event loop keeps a TLS handshake waiting for 60 s. Here:

- a worker holds at most `MARKETPLACE_MAX_CONNECTIONS` connections; past that, a new connection is
  closed at once, before a byte of a request is read (over TLS: once its handshake is done),
  counted in `marketplace_http_refused_connections_total` and logged when the cap is reached;
- a TLS handshake not done within `MARKETPLACE_READ_TIMEOUT_SECONDS` closes the connection, so a
  handshake in progress holds at most that long;
- every request head on a connection, the first or one pipelined behind another, is refused above
  `MAX_HEAD_BYTES` (431), and one not complete within the read timeout of its first byte is
  answered 408; a connection that sends nothing for that long is closed.

What comes after the head, the body, is bounded by the application (`http/body.py`). When the
connections and bodies a worker held are gone, the memory they took is handed back to the system.

The supervisor of several workers imports this module to hand the classes to them: it imports
nothing of the service at module level.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# nginx's default allows 4 header lines of 8 KiB; a request line and headers of 64 KiB in all are
# far beyond any client of this API.
MAX_HEAD_BYTES = 64 * 1024
_HEAD_END = b"\r\n\r\n"
# After a burst, the memory it took is handed back at most this often.
_TRIM_INTERVAL_SECONDS = 5.0

logger = logging.getLogger("marketplace.serving")


@functools.cache
def head_timeout_seconds() -> float:
    """The read timeout of this process's settings (read once: protocols are made per connection)."""
    from marketplace.config import Settings

    return Settings().read_timeout_seconds


@functools.cache
def open_connections() -> ConnectionCap:
    from marketplace.config import Settings

    return ConnectionCap(Settings().max_connections)


class ConnectionCap:
    """The connections one worker holds, from their acceptance to their end."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self._full = False

    def admit(self) -> bool:
        if self.count >= self.limit:
            from marketplace.telemetry.metrics import REFUSED_CONNECTIONS

            REFUSED_CONNECTIONS.inc()
            if not self._full:
                self._full = True
                logger.warning(
                    "connection cap reached: %d open (MARKETPLACE_MAX_CONNECTIONS); "
                    "new connections are closed at once until some end",
                    self.count,
                )
            return False
        self.count += 1
        return True

    def release(self) -> None:
        self.count -= 1
        if self._full and self.count <= self.limit // 2:
            self._full = False
            logger.warning("connections back under the cap: %d open", self.count)
        memory_returner().released()


class MemoryReturner:
    """Hands freed heap memory back to the system after a burst of connections or bodies.

    CPython's allocator keeps what large buffers (TLS records, request bodies) released at the top
    of glibc's heap: without `malloc_trim` a worker stays at its peak size for good.
    """

    def __init__(self) -> None:
        path = ctypes.util.find_library("c")
        library = ctypes.CDLL(path) if path else None
        self._trim: Callable[[int], int] | None = getattr(library, "malloc_trim", None)
        self._last = 0.0
        self._pending: asyncio.TimerHandle | None = None

    def released(self) -> None:
        if self._trim is None or self._pending is not None:
            return
        delay = max(0.0, self._last + _TRIM_INTERVAL_SECONDS - time.monotonic())
        self._pending = asyncio.get_running_loop().call_later(delay, self._give_back)

    def _give_back(self) -> None:
        self._pending = None
        self._last = time.monotonic()
        if self._trim is not None:
            self._trim(0)


@functools.cache
def memory_returner() -> MemoryReturner:
    return MemoryReturner()


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Whether this connection holds one of the worker's places (`ConnectionCap`).
        self.holds_place = False
        self._connected = False
        self._in_head = True
        self._head_bytes = 0
        # The last bytes seen, so that a head end split over two reads is found.
        self._tail = b""
        # Bytes of the current body still to come when its length is declared.
        self._body_left: int | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        # A head refused while earlier requests of the connection are still being answered.
        self._refusal: tuple[int, bytes] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if not self.holds_place:
            # Over TLS, once the handshake is done.
            if not open_connections().admit():
                transport.abort()
                return
            self.holds_place = True
        self._connected = True
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        self.give_back_place()
        if self._connected:
            super().connection_lost(exc)

    def give_back_place(self) -> None:
        if self.holds_place:
            self.holds_place = False
            open_connections().release()

    def data_received(self, data: bytes) -> None:
        # The parser is fed piece by piece, each ending where a head may end (an empty line) or
        # where a declared body ends: a piece then lies wholly in one head or in one body, and the
        # head of a request pipelined behind another is counted from its first byte.
        if self._refusal is not None:
            return  # the connection ends once the earlier requests are answered
        start = 0
        while start < len(data):
            end = self._piece_end(data, start)
            piece = data[start:end]
            start = end
            if self._in_head:
                self._head_bytes += len(piece)
                if self._head_bytes > MAX_HEAD_BYTES:
                    self._refuse(431, b"Request Header Fields Too Large")
                    return
                if self._head_timer is None:
                    self._arm_head_timer()
            elif self._body_left is not None:
                self._body_left -= len(piece)
            super().data_received(piece)
            if self.transport.is_closing() or self._refusal is not None:
                return
        self._tail = (self._tail + data)[-(len(_HEAD_END) - 1) :]

    def _piece_end(self, data: bytes, start: int) -> int:
        if start == 0:
            # A head end may begin in the last bytes of the previous read.
            found = (self._tail + data).find(_HEAD_END)
            end = found + len(_HEAD_END) - len(self._tail) if found >= 0 else len(data)
        else:
            found = data.find(_HEAD_END, start)
            end = found + len(_HEAD_END) if found >= 0 else len(data)
        if not self._in_head and self._body_left:
            end = min(end, start + self._body_left)
        return end

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._body_left = self._declared_body_length()
        self._disarm_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        # What follows on this connection is the next request's head.
        self._in_head = True
        self._head_bytes = 0
        self._body_left = None

    def _declared_body_length(self) -> int | None:
        length = None
        for name, value in self.headers:
            if name == b"transfer-encoding":
                return None
            if name == b"content-length" and value.strip().isdigit():
                length = int(value)
        return length

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

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._refusal is not None and not self._answering():
            self._answer_refusal(*self._refusal)

    def _answering(self) -> bool:
        """Whether a request of this connection is still being answered (or waits its turn)."""
        return bool(self.pipeline) or (self.cycle is not None and not self.cycle.response_complete)

    def _refuse(self, status: int, reason: bytes) -> None:
        from marketplace.telemetry.metrics import REFUSED_HEADS

        self._disarm_head_timer()
        REFUSED_HEADS.labels(str(status)).inc()
        self.logger.warning("request head refused: %d %s", status, reason.decode("ascii"))
        if self._answering():
            # The requests before this head get their answers first, in order; nothing more is read.
            self._refusal = (status, reason)
            self.flow.pause_reading()
            return
        self._answer_refusal(status, reason)

    def _answer_refusal(self, status: int, reason: bytes) -> None:
        self._unset_keepalive_if_required()
        body = reason
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, reason, len(body), body)
        )
        self.transport.close()


def bounded_loop() -> asyncio.AbstractEventLoop:
    """The event loop of each worker (uvloop when installed), its TLS handshakes bounded."""
    try:
        import uvloop
    except ImportError:
        return _bounded(asyncio.SelectorEventLoop)()
    return _bounded(uvloop.Loop)()


@functools.cache
def _bounded(base: type[asyncio.AbstractEventLoop]) -> type[asyncio.AbstractEventLoop]:
    class BoundedLoop(base):  # type: ignore[valid-type, misc]
        async def create_server(  # type: ignore[no-untyped-def]
            self, protocol_factory, *args, ssl=None, **kwargs
        ):
            if ssl is not None:
                # The loop's own TLS layer, its handshake bounded by the read timeout. (Taking the
                # connection over with `start_tls` after accepting it lost a client's first bytes
                # when they came with the connection.)
                kwargs["ssl_handshake_timeout"] = head_timeout_seconds()
                kwargs["ssl_shutdown_timeout"] = head_timeout_seconds()
            return await super().create_server(protocol_factory, *args, ssl=ssl, **kwargs)

    return BoundedLoop
