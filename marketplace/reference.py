"""The API's reference for people and tools: `GET /openapi.json` and the `GET /docs` page.

The page is Swagger UI, served from the files of an installed package (no CDN: it works offline),
with its validator badge off (it would call a public service) and a content security policy that
lets it load nothing from elsewhere. The document is encoded once, at start-up.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from marketplace.api.v1 import PREFIX, ROUTES
from marketplace.api.v1.openapi import openapi_document
from marketplace.platform_names import PlatformNames

DOCUMENT_PATH = "/openapi.json"
PAGE_PATH = "/docs"
ASSETS_PREFIX = "/docs/assets/"

# Swagger UI 5 (the first to read OpenAPI 3.1), from the swagger-ui-py package.
_SWAGGER_UI_FILES = ("swagger-ui.css", "swagger-ui-bundle.js", "favicon-32x32.png")

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Marketplace API</title>
  <link rel="stylesheet" href="/docs/assets/swagger-ui.css">
  <link rel="icon" type="image/png" href="/docs/assets/favicon-32x32.png">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="/docs/assets/swagger-ui-bundle.js"></script>
  <script src="/docs/assets/init.js"></script>
</body>
</html>
"""

_INIT = """window.onload = function () {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout"
  });
};
"""

_PAGE_POLICY = (
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "connect-src 'self'; frame-ancestors 'none'"
)
_ASSET_CACHE = "public, max-age=86400"


def swagger_ui_folder() -> Path:
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the swagger-ui-py package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


@functools.cache
def encoded_document(names: PlatformNames) -> bytes:
    return json.dumps(openapi_document(ROUTES, PREFIX, names), separators=(",", ":")).encode("utf-8")


class ApiReference:
    def __init__(self, names: PlatformNames) -> None:
        self.document = encoded_document(names)
        self.assets = swagger_ui_folder()

    def handles(self, path: str) -> bool:
        return path in (DOCUMENT_PATH, PAGE_PATH) or path.startswith(ASSETS_PREFIX)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response: Response
        path: str = scope["path"]
        if scope["method"] not in ("GET", "HEAD"):
            response = PlainTextResponse(
                "Method Not Allowed", status_code=405, headers={"Allow": "GET, HEAD"}
            )
        elif path == DOCUMENT_PATH:
            response = Response(self.document, media_type="application/json")
        elif path == PAGE_PATH:
            response = Response(
                _PAGE,
                media_type="text/html; charset=utf-8",
                headers={"Content-Security-Policy": _PAGE_POLICY},
            )
        else:
            response = self._asset(path[len(ASSETS_PREFIX) :])
        await response(scope, receive, send)

    def _asset(self, name: str) -> Response:
        if name == "init.js":
            return Response(
                _INIT, media_type="text/javascript; charset=utf-8", headers={"Cache-Control": _ASSET_CACHE}
            )
        if name not in _SWAGGER_UI_FILES:
            return PlainTextResponse("Not Found", status_code=404)
        return FileResponse(self.assets / name, headers={"Cache-Control": _ASSET_CACHE})
