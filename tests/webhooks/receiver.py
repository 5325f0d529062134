"""A local webhook receiver for the tests: an HTTP server on 127.0.0.1 in a thread of its own that
keeps every request it gets and answers as the test says (fail the first N, hang, succeed)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from marketplace.webhooks.signing import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER


@dataclass(frozen=True)
class Received:
    at: float
    path: str
    headers: dict[str, str]
    body: bytes
    # The status the receiver answered (0: it never answered).
    status: int

    @property
    def delivery(self) -> str:
        return self.headers[DELIVERY_HEADER.lower()]

    @property
    def event(self) -> str:
        return self.headers[EVENT_HEADER.lower()]

    @property
    def signature(self) -> str:
        return self.headers[SIGNATURE_HEADER.lower()]

    def json(self) -> Any:
        return json.loads(self.body)


# What the receiver answers to the n-th request (from 1): a status, or None to hang until closed.
Behaviour = Callable[[int], int | None]


def always(status: int) -> Behaviour:
    return lambda _n: status


def failing_first(times: int, status: int = 500) -> Behaviour:
    return lambda n: status if n <= times else 200


def hanging_first() -> Behaviour:
    return lambda n: None if n == 1 else 200


@dataclass
class Receiver:
    port: int
    behaviour: Behaviour
    # How long each answer takes, and what its body is.
    delay_seconds: float = 0.0
    answer_body: bytes = b"ok"
    received: list[Received] = field(default_factory=list)
    # Set when a request arrives whose answer is withheld.
    hanging: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _count: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def next_number(self) -> int:
        with self._lock:
            self._count += 1
            return self._count

    def keep(self, received: Received) -> None:
        with self._lock:
            self.received.append(received)

    def answered(self, status: int | None = None) -> list[Received]:
        """The requests answered (with `status`, or with any 2xx when None)."""
        with self._lock:
            kept = list(self.received)
        if status is None:
            return [one for one in kept if 200 <= one.status < 300]
        return [one for one in kept if one.status == status]

    def all(self) -> list[Received]:
        with self._lock:
            return list(self.received)

    def wait_for(self, count: int, timeout: float, status: int | None = None) -> list[Received]:
        """Wait until `count` requests were answered (as `answered` counts them); those requests."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.answered(status)
            if len(found) >= count:
                return found
            time.sleep(0.02)
        raise AssertionError(
            f"{len(self.answered(status))} of {count} requests within {timeout} s; got {self.all()!r}"
        )


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            arrived = time.time()
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {name.lower(): value for name, value in self.headers.items()}
            status = receiver.behaviour(receiver.next_number())
            if status is None:
                receiver.keep(Received(arrived, self.path, headers, body, 0))
                receiver.hanging.set()
                receiver.released.wait(60)
                self.close_connection = True
                return
            time.sleep(receiver.delay_seconds)
            self.send_response(status)
            self.send_header("Content-Length", str(len(receiver.answer_body)))
            self.end_headers()
            self.wfile.write(receiver.answer_body)
            receiver.keep(Received(arrived, self.path, headers, body, status))

        def log_message(self, *_args: Any) -> None:
            pass

    return Handler


@contextmanager
def running_receiver(behaviour: Behaviour | None = None, *, delay_seconds: float = 0.0) -> Iterator[Receiver]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(Receiver(0, always(200))))
    receiver = Receiver(int(server.server_address[1]), behaviour or always(200), delay_seconds)
    server.RequestHandlerClass = _handler(receiver)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.released.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
