"""Builds the ASGI application: the envelope, the `/api/v1` routes, storage files, lifespan."""

from __future__ import annotations

import logging
import re

from starlette.types import ASGIApp, Receive, Scope, Send

from marketplace.api.v1 import GROUP_LIMITS, PREFIX, ROUTES
from marketplace.config import Settings
from marketplace.health import HealthCheck
from marketplace.http.envelope import ApiEnvelope
from marketplace.http.json import JsonAnswer
from marketplace.http.routing import ApiRouter, not_found_answer
from marketplace.services import Services, build_services
from marketplace.storage import PREFIX as STORAGE_PREFIX
from marketplace.storage import StorageFiles

logger = logging.getLogger("marketplace")

# The earlier website helper, gone for good.
_GONE_GIFT_HELPER = re.compile(r"^/api/gift/valid/[^/]+/[^/]+/?$")


class MarketplaceApp:
    """Dispatches by path prefix; everything under `/api` that no route claims is a JSON 404."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.api_v1 = ApiRouter(PREFIX, ROUTES, GROUP_LIMITS, services)
        self.storage = StorageFiles(services.settings.storage_dir)
        self.health = HealthCheck(services)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        if path == PREFIX or path.startswith(PREFIX + "/"):
            await self.api_v1(scope, receive, send)
        elif _GONE_GIFT_HELPER.match(path):
            await JsonAnswer({"message": "Gone."}, status_code=410)(scope, receive, send)
        elif path == "/api" or path.startswith("/api/"):
            await not_found_answer()(scope, receive, send)
        elif path.startswith(STORAGE_PREFIX):
            await self.storage(scope, receive, send)
        elif path == "/up":
            await self.health(scope, receive, send)
        else:
            await not_found_answer()(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.services.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


def build_app(settings: Settings | None = None, services: Services | None = None) -> ASGIApp:
    services = services or build_services(settings or Settings())
    return ApiEnvelope(MarketplaceApp(services))


def create_app() -> ASGIApp:
    """Factory for `uvicorn --factory marketplace.app:create_app`."""
    return build_app()
