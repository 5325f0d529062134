"""Request bodies: capped (413 before reading what is declared too large, or as soon as a chunked
body passes the cap), bounded in time (408), and read whole before any handler takes a database
connection."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from starlette.types import Message

from marketplace.app import build_app
from marketplace.config import Settings
from marketplace.fixtures.loader import load_document
from marketplace.http.body import BodyBudget, BodyRefused, read_capped_body
from marketplace.services import Services, build_services
from tests.asgi import http_scope
from tests.catalogue import MEMBER_CHAT_ID, catalogue
from tests.conftest import GRANT_SECRET, make_client

TOO_LARGE = b'{"message":"The POST data is too large."}'
TIMEOUT = b'{"message":"Request Timeout."}'
CAP = 1024


@pytest.fixture
def capped(settings: Settings) -> Settings:
    return settings.model_copy(update={"max_body_bytes": CAP, "read_timeout_seconds": 0.3})


async def call(
    services: Services,
    path: str,
    chunks: list[bytes],
    *,
    headers: list[tuple[bytes, bytes]],
    hang_after: bool = False,
) -> tuple[int, dict[str, str], bytes, int]:
    """The app called with a body in `chunks`; also how many body messages it read."""
    scope = http_scope("POST", path, headers)
    read = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal read
        if read < len(chunks):
            read += 1
            more = read < len(chunks) or hang_after
            return {"type": "http.request", "body": chunks[read - 1], "more_body": more}
        if hang_after:
            await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await asyncio.wait_for(build_app(services=services)(scope, receive, send), timeout=10)
    start = sent[0]
    response_headers = {key.decode().lower(): value.decode() for key, value in start["headers"]}
    body = b"".join(message.get("body", b"") for message in sent[1:])
    return start["status"], response_headers, body, read


async def test_a_body_declared_over_the_cap_is_refused_with_413_before_a_byte_is_read(
    capped: Settings,
) -> None:
    services = build_services(capped)
    try:
        status, headers, body, read = await call(
            services,
            "/api/v1/chat",
            [b"x" * (CAP + 1)],
            headers=[(b"content-length", str(CAP + 1).encode()), (b"content-type", b"application/json")],
        )
    finally:
        await services.close()
    assert (status, body, read) == (413, TOO_LARGE, 0)
    assert headers["content-type"] == "application/json"
    assert headers["x-service-api-version"] == "1"
    assert headers["access-control-allow-origin"] == "*"
    # Refused before routing: no limiter counted it.
    assert "x-ratelimit-limit" not in headers


async def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_cap(capped: Settings) -> None:
    services = build_services(capped)
    try:
        chunks = [b"x" * 512] * 100
        status, _, body, read = await call(
            services, "/api/v1/chat", chunks, headers=[(b"transfer-encoding", b"chunked")]
        )
    finally:
        await services.close()
    assert (status, body) == (413, TOO_LARGE)
    assert read == 3  # 1,536 bytes: the first chunk past the cap, and no further


@pytest.mark.parametrize("length", [b"1" * 40, b"99999999999999999999"])
async def test_a_declared_length_of_any_size_is_refused_without_failing(
    capped: Settings, length: bytes
) -> None:
    services = build_services(capped)
    try:
        status, _, body, read = await call(
            services, "/api/v1/chat", [b"{}"], headers=[(b"content-length", length)]
        )
    finally:
        await services.close()
    assert (status, body, read) == (413, TOO_LARGE, 0)


async def test_outside_the_api_the_refusal_is_plain_text(capped: Settings) -> None:
    services = build_services(capped)
    try:
        status, headers, body, _ = await call(
            services, "/storage/x", [b"x"], headers=[(b"content-length", str(CAP * 2).encode())]
        )
    finally:
        await services.close()
    assert (status, body) == (413, b"The POST data is too large.")
    assert headers["content-type"] == "text/plain; charset=UTF-8"
    assert "x-service-api-version" not in headers


async def test_a_body_that_does_not_arrive_in_time_is_408(capped: Settings) -> None:
    services = build_services(capped)
    try:
        status, headers, body, _ = await call(
            services,
            "/api/v1/chat",
            [b'{"chat":'],
            headers=[(b"content-length", b"40"), (b"content-type", b"application/json")],
            hang_after=True,
        )
    finally:
        await services.close()
    assert (status, body) == (408, TIMEOUT)
    assert headers["x-service-api-version"] == "1"


async def test_a_body_within_the_cap_reaches_the_handler_whole(capped: Settings) -> None:
    services = build_services(capped)
    try:
        await load_document(services.engine, catalogue())
        document = b'{"chat": "' + MEMBER_CHAT_ID.encode() + b'", "padding": "' + b" " * 500 + b'"}'
        status, _, body, _ = await call(
            services,
            "/api/v1/chat",
            [document[:100], document[100:]],
            headers=[
                (b"content-length", str(len(document)).encode()),
                (b"content-type", b"application/json"),
            ],
        )
    finally:
        await services.close()
    assert status == 200
    assert body.startswith(b'[{"id":1,')


def test_the_cap_defaults_to_one_mebibyte() -> None:
    assert Settings.model_fields["max_body_bytes"].default == 1024 * 1024


async def test_a_slow_body_holds_no_database_connection(settings: Settings) -> None:
    # One connection in the pool: were the grant holding it while its body trickles in, the read
    # below would wait for the pool and fail.
    single = settings.model_copy(
        update={"db_pool_size": 1, "db_max_overflow": 0, "db_pool_timeout_seconds": 0.5}
    )
    services = build_services(single)
    body_sent = asyncio.Event()
    try:
        await load_document(services.engine, catalogue())
        app = build_app(services=services)
        grant_done: asyncio.Future[int] = asyncio.ensure_future(_slow_grant(app, body_sent.wait))
        await asyncio.sleep(0.2)
        async with make_client(services) as reader:
            for _ in range(3):
                assert (await reader.get("/api/v1/resource/1")).status_code == 200
        body_sent.set()
        assert await grant_done == 200
    finally:
        body_sent.set()
        await services.close()


async def _slow_grant(app: Any, released: Callable[[], Awaitable[Any]]) -> int:
    body = f"custom_password={GRANT_SECRET}".encode()
    headers = [
        (b"content-type", b"application/x-www-form-urlencoded"),
        (b"content-length", str(len(body)).encode()),
    ]
    scope = http_scope("POST", f"/api/v1/chat/{MEMBER_CHAT_ID}/apply/8", headers, client=("127.0.0.9", 50000))
    step = 0
    status = 0

    async def receive() -> Message:
        nonlocal step
        step += 1
        if step == 1:
            return {"type": "http.request", "body": body[:5], "more_body": True}
        if step == 2:
            await released()
            return {"type": "http.request", "body": body[5:], "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


async def test_a_client_gone_while_sending_its_body_gets_no_answer(capped: Settings) -> None:
    services = build_services(capped)
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = http_scope("POST", "/api/v1/chat", [(b"content-length", b"10")])
    try:
        await build_app(services=services)(scope, receive, send)
    finally:
        await services.close()
    assert sent == []


async def test_requests_without_a_body_pass_untouched(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.post("/api/v1/licence/KEY")
    assert response.status_code == 200


def body_scope(length: int) -> dict[str, Any]:
    return {"type": "http", "path": "/api/v1/chat", "headers": [(b"content-length", str(length).encode())]}


async def test_a_body_that_finds_no_room_within_the_read_timeout_is_408() -> None:
    budget = BodyBudget(100)
    holder = budget.lease()
    await holder.hold(100)

    async def receive() -> Message:
        return {"type": "http.request", "body": b"x" * 50, "more_body": False}

    with pytest.raises(BodyRefused) as refused:
        await read_capped_body(
            body_scope(50), receive, max_bytes=100, timeout_seconds=0.2, lease=budget.lease()
        )
    assert (refused.value.status, refused.value.message) == (408, "Request Timeout.")
    holder.give_back()
    assert budget.free == 100  # the abandoned wait keeps no room


async def test_body_room_is_given_in_the_order_it_was_asked() -> None:
    budget = BodyBudget(100)
    first = budget.lease()
    await first.hold(80)
    granted: list[str] = []

    async def wait_for(name: str, size: int) -> None:
        await budget.lease().hold(size)
        granted.append(name)

    waiting = [asyncio.ensure_future(wait_for("large", 50)), asyncio.ensure_future(wait_for("small", 10))]
    await asyncio.sleep(0.05)
    assert granted == []  # the small body fits, but waits behind the large one
    first.give_back()
    await asyncio.gather(*waiting)
    assert granted == ["large", "small"]
    assert budget.free == 40


def test_the_body_budget_holds_at_least_the_largest_body() -> None:
    with pytest.raises(ValueError, match="MARKETPLACE_MAX_BODY_BYTES"):
        Settings(_env_file=None, max_body_bytes=2048, max_buffered_body_bytes=1024)  # type: ignore[call-arg]
