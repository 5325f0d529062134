"""The one ASGI layer every request passes before dispatch, and every answer on its way out.

In order: the request's id and client address (`observation.py`), a CORS preflight answered at
once (`envelope.py`), the body read whole within its cap (`body.py`); then the application, whose
answer gets the envelope's headers and the request id, loses its body for HEAD, and is replaced by
the contract's 500 if the application fails before answering. Last, the access-log line and the
metrics. One layer and one `send` wrapper: each extra layer costs every request a closure, a copy
of each message and a walk over its headers.
"""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from marketplace.http.body import (
    BODY_REFUSED_ROUTE,
    BodyBudget,
    BodyRefused,
    ClientGone,
    answer_refusal,
    has_body,
    read_capped_body,
)
from marketplace.http.client_ip import TrustedProxies, client_ip
from marketplace.http.envelope import (
    answer_preflight,
    answer_server_error,
    envelope_headers,
    enveloped,
    is_api_path,
    is_preflight,
)
from marketplace.http.observation import (
    REQUEST_ID_HEADER,
    RequestRecorder,
    loggable_path,
    request_id,
    request_state,
    set_route_name,
)
from marketplace.telemetry.logs import REQUEST_ID

logger = logging.getLogger("marketplace.http")


class HttpEdge:
    def __init__(
        self,
        app: ASGIApp,
        *,
        trusted_proxies: TrustedProxies,
        access_log: bool,
        max_body_bytes: int,
        body_timeout_seconds: float,
        max_buffered_body_bytes: int,
    ) -> None:
        self.app = app
        self.trusted_proxies = trusted_proxies
        self.recorder = RequestRecorder(access_log=access_log)
        self.max_body_bytes = max_body_bytes
        self.body_timeout_seconds = body_timeout_seconds
        self.body_budget = BodyBudget(max_buffered_body_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        path: str = scope["path"]
        state = request_state(scope)
        state["client_ip"] = client_ip(scope, self.trusted_proxies)
        identifier = request_id(scope)
        id_header = (REQUEST_ID_HEADER, identifier.encode("ascii"))
        token = REQUEST_ID.set(identifier)
        api = is_api_path(path)
        added = (*envelope_headers(path), id_header)
        strip_body = scope["method"] == "HEAD"
        status: int | None = None
        sent_bytes = 0
        body_lease = self.body_budget.lease()

        async def edge_send(message: Message) -> None:
            nonlocal status, sent_bytes
            kind = message["type"]
            if kind == "http.response.start":
                status = message["status"]
                message = {
                    "type": kind,
                    "status": status,
                    "headers": enveloped(message.get("headers", ()), added, api),
                }
            elif kind == "http.response.body":
                body = message.get("body", b"")
                sent_bytes += len(body)
                if strip_body and body:
                    message = {**message, "body": b""}
            await send(message)

        async def own_send(message: Message) -> None:
            # Answers made here carry their own headers in full; only the request id is added.
            nonlocal status, sent_bytes
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message["headers"], id_header]}
            else:
                sent_bytes += len(message.get("body", b""))
            await send(message)

        try:
            if is_preflight(scope):
                await answer_preflight(scope, own_send)
                return
            if has_body(scope):
                try:
                    receive = await read_capped_body(
                        scope,
                        receive,
                        max_bytes=self.max_body_bytes,
                        timeout_seconds=self.body_timeout_seconds,
                        lease=body_lease,
                    )
                except BodyRefused as refused:
                    set_route_name(scope, BODY_REFUSED_ROUTE)
                    await answer_refusal(scope, edge_send, refused)
                    return
                except ClientGone:
                    return
            try:
                await self.app(scope, receive, edge_send)
            except Exception:
                logger.exception("unhandled error on %s %s", scope["method"][:16], loggable_path(path))
                if status is not None:
                    raise
                await answer_server_error(edge_send, api)
        finally:
            body_lease.give_back()
            self.recorder.record(scope, state, status, sent_bytes, time.perf_counter() - started, identifier)
            REQUEST_ID.reset(token)
