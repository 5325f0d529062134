"""A real local HTTP server standing in for the upstream services (chat widget, statistics).

Tests register canned answers per path and read back which paths were called and how often.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Canned:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    delay_seconds: float = 0.0


class FakeUpstream:
    def __init__(self) -> None:
        self.answers: dict[str, Canned] = {}
        self.calls: Counter[str] = Counter()
        self.headers: list[dict[str, str]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                upstream.calls[self.path] += 1
                upstream.headers.append(dict(self.headers.items()))
                canned = upstream.answers.get(
                    self.path, Canned(status=404, body=b'{"message":"404: Not Found"}')
                )
                if canned.delay_seconds:
                    time.sleep(canned.delay_seconds)
                try:
                    self.send_response(canned.status)
                    self.send_header("Content-Type", canned.content_type)
                    self.send_header("Content-Length", str(len(canned.body)))
                    self.end_headers()
                    self.wfile.write(canned.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # A short poll interval: shutdown() waits up to one interval.
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def reset(self) -> None:
        self.answers.clear()
        self.calls.clear()
        self.headers.clear()

    def answer_json(self, path: str, payload: Any, status: int = 200, delay_seconds: float = 0.0) -> None:
        self.answers[path] = Canned(status, json.dumps(payload).encode(), "application/json", delay_seconds)

    def answer_raw(self, path: str, body: bytes, status: int = 200, content_type: str = "text/html") -> None:
        self.answers[path] = Canned(status, body, content_type)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_port_url() -> str:
    """The URL of a loopback port nothing listens on (connection refused)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
