"""`GET /openapi.json` describes exactly the routes the app serves, as a valid OpenAPI 3.1
document, and `GET /docs` shows it from files served here (no request leaves for elsewhere)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

from marketplace.api.v1 import PREFIX, ROUTES
from marketplace.http.routing import METHOD_ORDER
from tests.profiles import sqlite_only

pytestmark = sqlite_only

# A value for each path parameter that names something of the test catalogue.
SAMPLE_PARAMETERS = {
    "key": "ABC",
    "resource": "1",
    "user": "111111111111111111",
    "gift": "WELCOME10",
    "payment": "01HZY3J1Q8Y5ZQ4W2B7C9D0E1F",
    "serverId": "81384788765712384",
    "chart": "servers",
}


@pytest.fixture
async def document(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body: dict[str, Any] = response.json()
    return body


def test_the_document_is_valid_openapi_3_1(document: dict[str, Any]) -> None:
    assert document["openapi"] == "3.1.0"
    validate(document)


def documented_operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method.upper() in METHOD_ORDER
    }


def test_the_document_lists_exactly_the_route_table(document: dict[str, Any]) -> None:
    served = {(method, route.path) for route in ROUTES for method in route.methods}
    assert documented_operations(document) == served
    assert document["servers"] == [{"url": PREFIX}]
    ids = {
        item[route.method.lower()]["operationId"]
        for route in ROUTES
        for item in [document["paths"][route.path]]
    }
    assert ids == {route.name for route in ROUTES}


def concrete(path: str) -> str:
    return PREFIX + re.sub(r"\{(\w+)\}", lambda found: SAMPLE_PARAMETERS[found.group(1)], path)


async def test_every_documented_operation_is_answered_by_a_route(
    client: httpx.AsyncClient, document: dict[str, Any]
) -> None:
    for number, (method, path) in enumerate(sorted(documented_operations(document))):
        response = await client.request(
            method, concrete(path), headers={"X-Forwarded-For": f"10.1.0.{number + 1}"}
        )
        # A route answered (its limiters counted the call): no router 404 or 405.
        assert "x-ratelimit-limit" in response.headers, (method, path, response.status_code)
        assert response.status_code in {
            int(status) for status in document["paths"][path][method.lower()]["responses"]
        }


async def test_every_method_the_document_does_not_list_is_405(
    client: httpx.AsyncClient, document: dict[str, Any]
) -> None:
    for number, path in enumerate(document["paths"]):
        listed = {method for method, documented in documented_operations(document) if documented == path}
        for method in METHOD_ORDER:
            if method in listed or method == "OPTIONS":
                continue
            url = concrete(path)
            response = await client.request(method, url, headers={"X-Forwarded-For": f"10.2.{number}.1"})
            # A path shared by two routes (`/chat/{user}` and `/chat/{serverId}`) allows both methods.
            served_here = {
                m for route in ROUTES if route.pattern.fullmatch(url[len(PREFIX) :]) for m in route.methods
            }
            if method not in served_here:
                assert response.status_code == 405, (method, path)


def test_every_operation_documents_the_limiter_and_body_refusals(document: dict[str, Any]) -> None:
    for item in document["paths"].values():
        for operation in item.values():
            assert {"408", "413", "429"} <= set(operation["responses"])


def test_every_answer_documents_the_version_header(document: dict[str, Any]) -> None:
    components = document["components"]["responses"]
    for item in document["paths"].values():
        for operation in item.values():
            for response in operation["responses"].values():
                if "$ref" in response:
                    response = components[response["$ref"].rsplit("/", 1)[1]]
                assert "X-Service-Api-Version" in response["headers"]


def test_plain_text_answers_are_documented_as_text(document: dict[str, Any]) -> None:
    for path in ("/resource/version/{resource}", "/stats/url/{resource}", "/stats/{resource}/{chart}"):
        assert list(document["paths"][path]["get"]["responses"]["200"]["content"]) == ["text/plain"]


async def test_the_docs_page_loads_only_files_served_here(client: httpx.AsyncClient) -> None:
    page = await client.get("/docs")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "default-src 'self'" in page.headers["content-security-policy"]
    referenced = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert referenced and all(url.startswith("/docs/assets/") for url in referenced)
    for url in referenced:
        asset = await client.get(url)
        assert asset.status_code == 200, url
    init = await client.get("/docs/assets/init.js")
    assert '"/openapi.json"' in init.text
    assert "validatorUrl: null" in init.text  # the validator badge would call a public service
    assert not re.search(r"https?://", init.text + page.text)


async def test_the_docs_page_is_a_swagger_ui_that_reads_openapi_3_1(client: httpx.AsyncClient) -> None:
    bundle = await client.get("/docs/assets/swagger-ui-bundle.js")
    assert bundle.status_code == 200
    assert "javascript" in bundle.headers["content-type"]
    assert b"isOAS31" in bundle.content


async def test_unknown_docs_assets_are_404(client: httpx.AsyncClient) -> None:
    for name in ("../openapi.json", "swagger-editor-bundle.js", "nothing.js"):
        assert (await client.get(f"/docs/assets/{name}")).status_code == 404
