"""What every answer carries, over HTTP: version header, CORS, error bodies, 404/405, HEAD, storage."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import httpx
import pytest
from starlette.responses import Response
from starlette.types import Message

from marketplace.api.v1 import api_limits, resources, search_limits
from marketplace.app import build_app
from marketplace.config import Settings
from marketplace.http.routing import ApiCall, ApiRoute, ApiRouter
from marketplace.services import Services
from tests.asgi import http_scope
from tests.conftest import make_client

VERSION = "x-service-api-version"
NOT_FOUND = b'{"message":"Not found."}'
ANY_ROUTE = "/api/v1/resource/user?name=a"  # any route that answers 200 on an empty catalogue
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR-test-bytes"


async def fill_window(services: Services, key: str, times: int, max_attempts: int) -> None:
    for _ in range(times):
        await services.store.hit(key, max_attempts, 60)


async def raw_request(services: Services, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    """Call the app with `path` exactly as given and see every byte it sends (an HTTP client would
    normalise `..` away, and drops the body of a HEAD answer itself)."""
    scope = http_scope(method, path)
    sent: list[Message] = []
    finished = asyncio.Event()
    requested = False

    async def receive() -> Message:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            finished.set()

    await asyncio.wait_for(build_app(services=services)(scope, receive, send), timeout=5)
    start = sent[0]
    headers = {key.decode().lower(): value.decode() for key, value in start["headers"]}
    body = b"".join(message.get("body", b"") for message in sent[1:])
    return start["status"], headers, body


# Version header


@pytest.mark.parametrize("path", ["/api/v1/resource/1", "/api/v1/resource/version/1"])
async def test_version_header_on_success(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert response.status_code == 200
    assert response.headers[VERSION] == "1"
    assert response.headers["access-control-allow-origin"] == "*"
    assert response.headers["access-control-expose-headers"] == "X-Service-Api-Version"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/api/v1/nothing/here", 404),
        ("GET", "/api/v1", 404),
        ("GET", "/api/v1/resource/999", 404),
        ("PUT", "/api/v1/chat/123", 405),
        ("GET", "/api/v1/resource/user", 422),
        ("GET", "/api/v1/resource/search?q[]=x", 500),
        ("GET", "/api/v1/chat/authentication", 302),
        ("GET", "/api/v1/resource/version/1", 404),
        ("POST", "/api/v1/licence/abc", 200),
    ],
)
async def test_version_header_on_every_answer_of_the_api(
    empty_client: httpx.AsyncClient, method: str, path: str, status: int
) -> None:
    response = await empty_client.request(method, path)
    assert response.status_code == status
    assert response.headers[VERSION] == "1"


async def test_version_header_and_cors_on_the_authentication_redirect(
    empty_client: httpx.AsyncClient,
) -> None:
    response = await empty_client.get("/api/v1/chat/authentication?code=x&state=y")
    assert response.status_code == 302
    assert response.headers["location"] == "http://marketplace.test/auth/chat/redirect"
    assert response.headers[VERSION] == "1"
    assert response.headers["access-control-allow-origin"] == "*"


async def test_version_header_on_429(empty_client: httpx.AsyncClient) -> None:
    for _ in range(60):
        assert (await empty_client.post("/api/v1/licence/SAME-KEY")).status_code == 200
    response = await empty_client.post("/api/v1/licence/SAME-KEY")
    assert response.status_code == 429
    assert response.content == b'{"message":"Too many requests."}'
    assert response.headers["content-type"] == "application/json"
    assert response.headers[VERSION] == "1"
    assert response.headers["access-control-allow-origin"] == "*"
    assert response.headers["access-control-expose-headers"] == "X-Service-Api-Version"
    assert response.headers["x-ratelimit-limit"] == "60"
    assert response.headers["x-ratelimit-remaining"] == "0"
    assert 0 < int(response.headers["retry-after"]) <= 60
    assert "x-ratelimit-reset" in response.headers


# Router 404 and 405


async def test_router_404_body_is_not_found_json(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.get("/api/v1/nothing/here", headers={"Accept": "text/html"})
    assert response.status_code == 404
    assert response.content == NOT_FOUND
    assert response.headers["content-type"] == "application/json"


async def test_405_lists_every_method_the_path_allows(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.put("/api/v1/chat/123")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, HEAD, POST"
    assert response.json() == {
        "message": "The PUT method is not supported for route api/v1/chat/123. Supported methods: GET, HEAD, POST."
    }
    assert response.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/api/v1/licence/x", "POST"),
        ("DELETE", "/api/v1/resource/1", "GET, HEAD"),
        ("POST", "/api/v1/resource/search", "GET, HEAD"),
        ("GET", "/api/v1/chat", "POST"),
        ("PATCH", "/api/v1/chat/1/apply/1", "POST"),
        ("OPTIONS", "/api/v1/stats/1/servers", "GET, HEAD"),
    ],
)
async def test_405_allow_header_for_other_methods(
    empty_client: httpx.AsyncClient, method: str, path: str, allow: str
) -> None:
    response = await empty_client.request(method, path)
    assert response.status_code == 405
    assert response.headers["allow"] == allow
    assert response.json()["message"].endswith(f"Supported methods: {allow}.")


def test_405_lists_methods_in_method_order_not_declaration_order() -> None:
    async def endpoint(_call: ApiCall) -> Response:
        return Response()

    router = ApiRouter(
        "/api/v1",
        [
            ApiRoute("OPTIONS", "/thing/{id}", "options", endpoint),
            ApiRoute("DELETE", "/thing/{id}", "delete", endpoint),
            ApiRoute("PATCH", "/thing/{id}", "patch", endpoint),
            ApiRoute("PUT", "/thing/{id}", "put", endpoint),
            ApiRoute("POST", "/thing/{id}", "post", endpoint),
            ApiRoute("GET", "/thing/{id}", "get", endpoint),
        ],
        (),
        cast(Services, None),
    )
    assert router.match("TRACE", "/api/v1/thing/1") == [
        "GET",
        "HEAD",
        "POST",
        "PUT",
        "PATCH",
        "DELETE",
        "OPTIONS",
    ]


async def test_head_on_a_post_only_route_is_405(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.head("/api/v1/licence/x")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.headers[VERSION] == "1"
    assert response.content == b""


@pytest.mark.parametrize(("method", "path"), [("GET", "/api/v1/nothing"), ("PUT", "/api/v1/chat/123")])
async def test_router_404_and_405_carry_no_rate_limit_headers(
    empty_client: httpx.AsyncClient, method: str, path: str
) -> None:
    response = await empty_client.request(method, path)
    assert response.status_code in (404, 405)
    assert "x-ratelimit-limit" not in response.headers
    assert "x-ratelimit-remaining" not in response.headers


async def test_router_404_and_405_consume_no_budget(empty_client: httpx.AsyncClient) -> None:
    for _ in range(3):
        assert (await empty_client.get("/api/v1/nothing/here")).status_code == 404
        assert (await empty_client.put("/api/v1/chat/123")).status_code == 405
        assert (await empty_client.head("/api/v1/licence/x")).status_code == 405
    response = await empty_client.get(ANY_ROUTE)
    assert response.headers["x-ratelimit-limit"] == "120"
    assert response.headers["x-ratelimit-remaining"] == "119"


async def test_binding_404_consumes_budget(empty_client: httpx.AsyncClient) -> None:
    missing = await empty_client.get("/api/v1/resource/999")
    assert missing.status_code == 404
    assert missing.content == NOT_FOUND
    assert missing.headers["x-ratelimit-remaining"] == "119"
    assert (await empty_client.get(ANY_ROUTE)).headers["x-ratelimit-remaining"] == "118"


async def test_group_limiter_counts_a_request_the_route_limiter_refuses(
    empty_client: httpx.AsyncClient, services: Services
) -> None:
    await fill_window(services, search_limits("127.0.0.1", {})[0].key, 60, 60)
    refused = await empty_client.get("/api/v1/resource/search")
    assert refused.status_code == 429
    assert refused.headers["x-ratelimit-limit"] == "60"
    response = await empty_client.get(ANY_ROUTE)
    assert response.headers["x-ratelimit-limit"] == "120"
    assert response.headers["x-ratelimit-remaining"] == "118"


async def test_answers_carry_the_headers_of_the_tightest_limiter(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.get("/api/v1/resource/search")
    assert response.headers["x-ratelimit-limit"] == "60"
    assert response.headers["x-ratelimit-remaining"] == "59"


# CORS


async def test_preflight_is_answered_with_cors_headers(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.options(
        ANY_ROUTE,
        headers={
            "Origin": "https://example.test",
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "x-custom, content-type",
        },
    )
    assert response.status_code == 204
    assert response.content == b""
    assert response.headers["access-control-allow-origin"] == "*"
    assert response.headers["access-control-allow-methods"] == "GET, HEAD, OPTIONS"
    assert response.headers["access-control-allow-headers"] == "x-custom, content-type"
    assert response.headers["access-control-max-age"] == "86400"
    assert response.headers[VERSION] == "1"
    assert "access-control-allow-credentials" not in response.headers


async def test_preflight_is_answered_before_routing(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.options(
        "/api/v1/no/such/route", headers={"Access-Control-Request-Method": "GET"}
    )
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == "*"


async def test_preflight_consumes_no_budget(empty_client: httpx.AsyncClient) -> None:
    for _ in range(3):
        await empty_client.options(ANY_ROUTE, headers={"Access-Control-Request-Method": "GET"})
    response = await empty_client.get(ANY_ROUTE)
    assert response.headers["x-ratelimit-remaining"] == "119"


async def test_preflight_is_answered_when_the_budget_is_spent(
    empty_client: httpx.AsyncClient, services: Services
) -> None:
    await fill_window(services, api_limits("127.0.0.1", {})[0].key, 120, 120)
    assert (await empty_client.get(ANY_ROUTE)).status_code == 429
    response = await empty_client.options(ANY_ROUTE, headers={"Access-Control-Request-Method": "GET"})
    assert response.status_code == 204
    assert "x-ratelimit-limit" not in response.headers


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", ANY_ROUTE, 200),
        ("POST", "/api/v1/licence/abc", 200),
        ("GET", "/api/v1/nothing", 404),
        ("GET", "/api/v1/resource/1", 404),
        ("PUT", "/api/v1/chat/123", 405),
        ("GET", "/api/v1/resource/user", 422),
        ("GET", "/api/v1/chat/authentication", 302),
    ],
)
async def test_other_answers_under_api_v1_carry_cors_headers(
    empty_client: httpx.AsyncClient, method: str, path: str, status: int
) -> None:
    response = await empty_client.request(method, path, headers={"Origin": "https://example.test"})
    assert response.status_code == status
    assert response.headers["access-control-allow-origin"] == "*"
    assert response.headers["access-control-expose-headers"] == "X-Service-Api-Version"


async def test_cors_headers_are_not_sent_outside_api_v1(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.get("/api/user", headers={"Origin": "https://example.test"})
    assert "access-control-allow-origin" not in response.headers


# HEAD


@pytest.mark.parametrize("path", ["/api/v1/resource/1", "/api/v1/resource/version/1", "/api/v1/resource/999"])
async def test_head_answers_like_get_with_an_empty_body(
    services: Services, client: httpx.AsyncClient, path: str
) -> None:
    # `client` loaded the catalogue. Two client addresses, so that both answers report the same remaining budget.
    async with (
        make_client(services, client_ip="10.0.0.1") as getter,
        make_client(services, client_ip="10.0.0.2") as header,
    ):
        # One request id for both, as every other header is compared too.
        got = await getter.get(path, headers={"X-Request-Id": "same-request"})
        head = await header.head(path, headers={"X-Request-Id": "same-request"})
    assert got.content != b""
    assert head.content == b""
    assert head.status_code == got.status_code
    assert head.headers.multi_items() == got.headers.multi_items()


@pytest.mark.usefixtures("client")
async def test_head_sends_no_body_bytes(services: Services) -> None:
    status, headers, body = await raw_request(services, "HEAD", "/api/v1/resource/1")
    assert status == 200
    assert body == b""
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) > 0


async def test_head_passes_the_limiters(empty_client: httpx.AsyncClient) -> None:
    await empty_client.head(ANY_ROUTE)
    response = await empty_client.get(ANY_ROUTE)
    assert response.headers["x-ratelimit-remaining"] == "118"


# Unhandled errors


@pytest.fixture
def crashing_show(monkeypatch: pytest.MonkeyPatch) -> None:
    async def explode(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("database exploded: SECRET-DETAIL")

    monkeypatch.setattr(resources, "visible_card", explode)


@pytest.mark.usefixtures("crashing_show")
async def test_unhandled_error_is_a_json_500_with_version_and_cors(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.get("/api/v1/resource/1")
    assert response.status_code == 500
    assert response.content == b'{"message":"Server Error"}'
    assert response.headers["content-type"] == "application/json"
    assert response.headers[VERSION] == "1"
    assert response.headers["access-control-allow-origin"] == "*"
    assert response.headers["access-control-expose-headers"] == "X-Service-Api-Version"
    assert b"SECRET-DETAIL" not in response.content
    assert b"Traceback" not in response.content


@pytest.mark.usefixtures("crashing_show")
async def test_unhandled_error_on_head_has_an_empty_body(services: Services) -> None:
    status, headers, body = await raw_request(services, "HEAD", "/api/v1/resource/1")
    assert status == 500
    assert body == b""
    assert headers[VERSION] == "1"


@pytest.mark.usefixtures("crashing_show")
async def test_unhandled_error_still_carries_rate_limit_headers(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.get("/api/v1/resource/1")
    assert response.status_code == 500
    assert response.headers["x-ratelimit-limit"] == "120"
    assert response.headers["x-ratelimit-remaining"] == "119"


@pytest.fixture
def crashing_store(services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    async def explode(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("store exploded: SECRET-DETAIL")

    monkeypatch.setattr(services.store, "hit_all", explode)


@pytest.mark.usefixtures("crashing_store")
async def test_unhandled_error_outside_a_route_is_a_json_500_with_version_and_cors(
    empty_client: httpx.AsyncClient,
) -> None:
    response = await empty_client.get(ANY_ROUTE)
    assert response.status_code == 500
    assert response.content == b'{"message":"Server Error"}'
    assert response.headers["content-type"] == "application/json"
    assert response.headers[VERSION] == "1"
    assert response.headers["access-control-allow-origin"] == "*"
    assert response.headers["access-control-expose-headers"] == "X-Service-Api-Version"


@pytest.mark.usefixtures("crashing_store")
async def test_unhandled_error_outside_a_route_on_head_has_an_empty_body(services: Services) -> None:
    status, headers, body = await raw_request(services, "HEAD", ANY_ROUTE)
    assert status == 500
    assert body == b""
    assert headers[VERSION] == "1"


# Outside /api/v1


async def test_removed_api_user_route_is_json_404(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.get(
        "/api/user", headers={"Authorization": "Bearer token", "Accept": "text/html"}
    )
    assert response.status_code == 404
    assert response.content == NOT_FOUND
    assert response.headers["content-type"] == "application/json"
    assert response.headers[VERSION] == "1"


async def test_old_gift_helper_is_410_json(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.get("/api/gift/valid/1/2")
    assert response.status_code == 410
    assert response.headers["content-type"] == "application/json"
    assert isinstance(response.json()["message"], str)
    assert response.headers[VERSION] == "1"


async def test_website_answers_carry_no_version_header(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.get("/some/website/page")
    assert VERSION not in response.headers
    assert "access-control-allow-origin" not in response.headers


# Sessionless, no authentication


async def test_no_cookie_is_ever_set(empty_client: httpx.AsyncClient) -> None:
    answers = [
        await empty_client.get(ANY_ROUTE, headers={"Cookie": "laravel_session=abc; XSRF-TOKEN=def"}),
        await empty_client.get("/api/v1/resource/search"),
        await empty_client.get("/api/v1/resource/version/1"),
        await empty_client.get("/api/v1/resource/user"),
        await empty_client.get("/api/v1/nothing"),
        await empty_client.put("/api/v1/chat/1"),
        await empty_client.post("/api/v1/licence/abc"),
        await empty_client.post("/api/v1/chat", json={"chat": "1"}),
        await empty_client.get("/api/v1/chat/authentication"),
        await empty_client.options(ANY_ROUTE, headers={"Access-Control-Request-Method": "GET"}),
        await empty_client.get("/api/gift/valid/1/2"),
        await empty_client.get("/api/user"),
    ]
    for response in answers:
        assert "set-cookie" not in response.headers, response.url


async def test_authorization_header_is_ignored(client: httpx.AsyncClient) -> None:
    anonymous = await client.get("/api/v1/resource/1")
    bearer = await client.get("/api/v1/resource/1", headers={"Authorization": "Bearer not-a-real-token"})
    basic = await client.get("/api/v1/resource/3", headers={"Authorization": "Basic YWRtaW46YWRtaW4="})
    assert bearer.status_code == 200
    assert bearer.content == anonymous.content
    assert basic.status_code == 404  # a draft stays hidden whatever the credentials


async def test_licence_ignores_authorization(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.post("/api/v1/licence/abc", headers={"Authorization": "Bearer x"})
    assert response.status_code == 200
    assert response.content == b'{"status":"success","message":"The license is valid"}'


# Path matching


async def test_trailing_slash_still_resolves_without_redirect(client: httpx.AsyncClient) -> None:
    plain = await client.get("/api/v1/resource/1")
    slashed = await client.get("/api/v1/resource/1/")
    assert slashed.status_code == 200
    assert "location" not in slashed.headers
    assert slashed.content == plain.content


async def test_encoded_slash_in_licence_key_is_404(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.post("/api/v1/licence/a%2Fb")
    assert response.status_code == 404
    assert response.content == NOT_FOUND
    assert response.headers[VERSION] == "1"


async def test_licence_without_key_is_404(empty_client: httpx.AsyncClient) -> None:
    response = await empty_client.post("/api/v1/licence/")
    assert response.status_code == 404
    assert response.content == NOT_FOUND


# Storage files


def put_file(settings: Settings, relative: str, content: bytes) -> Path:
    path = Path(settings.storage_dir) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


async def test_storage_serves_a_stored_file_with_its_content_type(
    empty_client: httpx.AsyncClient, settings: Settings
) -> None:
    put_file(settings, "images/1.png", PNG)
    response = await empty_client.get("/storage/images/1.png")
    assert response.status_code == 200
    assert response.content == PNG
    assert response.headers["content-type"] == "image/png"


async def test_storage_answers_carry_no_version_header(
    empty_client: httpx.AsyncClient, settings: Settings
) -> None:
    put_file(settings, "images/1.png", PNG)
    found = await empty_client.get("/storage/images/1.png")
    missing = await empty_client.get("/storage/images/404.png")
    assert found.status_code == 200
    assert missing.status_code == 404
    for response in (found, missing):
        assert VERSION not in response.headers
        assert "access-control-allow-origin" not in response.headers


@pytest.mark.parametrize(
    "path",
    [
        "/storage/../secret.txt",
        "/storage/images/../../secret.txt",
        "/storage/%2e%2e/secret.txt",
        "/storage/..%2Fsecret.txt",
        "/storage/%2E%2E%2Fsecret.txt",
    ],
)
async def test_storage_never_leaves_its_folder(services: Services, settings: Settings, path: str) -> None:
    put_file(settings, "images/1.png", PNG)
    secret = Path(settings.storage_dir).parent / "secret.txt"
    secret.write_bytes(b"TOP-SECRET")
    status, headers, body = await raw_request(services, "GET", path)
    assert status == 404
    assert b"TOP-SECRET" not in body
    assert VERSION not in headers


async def test_storage_never_serves_an_absolute_path(services: Services, settings: Settings) -> None:
    put_file(settings, "images/1.png", PNG)
    secret = Path(settings.storage_dir).parent / "secret.txt"
    secret.write_bytes(b"TOP-SECRET")
    status, _headers, body = await raw_request(services, "GET", "/storage/" + str(secret))
    assert status == 404
    assert b"TOP-SECRET" not in body


async def test_storage_escape_through_the_http_client_is_404(
    empty_client: httpx.AsyncClient, settings: Settings
) -> None:
    put_file(settings, "images/1.png", PNG)
    (Path(settings.storage_dir).parent / "secret.txt").write_bytes(b"TOP-SECRET")
    response = await empty_client.get("/storage/%2e%2e/secret.txt")
    assert response.status_code == 404
    assert b"TOP-SECRET" not in response.content
