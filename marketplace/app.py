"""Builds the ASGI application: the layers every request passes, the `/api/v1` and `/feeds` routes,
storage files, the operator endpoints, lifespan.

One layer, the edge (request id, client address, CORS preflights, the body cap; on the way out
the envelope's headers, 500s, the access log and metrics), then dispatch by path.
"""

from __future__ import annotations

import asyncio
import logging
import re

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from marketplace.api.v1 import ANSWER_CACHES, GROUP_LIMITS, LIMITERS, PREFIX, route_table
from marketplace.config import Settings
from marketplace.feeds import routes as feeds
from marketplace.health import HealthCheck
from marketplace.http.edge import HttpEdge
from marketplace.http.envelope import is_api_path
from marketplace.http.json import JsonAnswer
from marketplace.http.observation import set_route_name
from marketplace.http.routing import ApiRouter, not_found_answer
from marketplace.reference import ApiReference
from marketplace.services import Services, build_services
from marketplace.storage import PREFIX as STORAGE_PREFIX
from marketplace.storage import StorageFiles
from marketplace.telemetry import metrics
from marketplace.telemetry.logs import flush_log_lines
from marketplace.upstream import chat_widget, stats
from marketplace.webhooks.events import DELIVERED_EVENTS
from marketplace.webhooks.worker import observe_queue

logger = logging.getLogger("marketplace")

# The earlier website helper, gone for good.
_GONE_GIFT_HELPER = re.compile(r"^/api/gift/valid/[^/]+/[^/]+/?$")
METRICS_PATH = "/metrics"
HEALTH_PATH = "/up"


class MarketplaceApp:
    """Dispatches by path prefix; everything under `/api` that no route claims is a JSON 404."""

    def __init__(self, services: Services) -> None:
        self.services = services
        names = services.settings.platform_names
        self.api_v1 = ApiRouter(PREFIX, route_table(names), GROUP_LIMITS, services)
        self.feeds = feeds.feeds_app(services)
        self.storage = StorageFiles(services.settings.storage_dir)
        self.health = HealthCheck(services)
        self.reference = ApiReference(names)

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
            set_route_name(scope, "gone")
            await JsonAnswer({"message": "Gone."}, status_code=410)(scope, receive, send)
        elif is_api_path(path):
            await not_found_answer()(scope, receive, send)
        elif path.startswith(feeds.PREFIX + "/"):
            await self.feeds(scope, receive, send)
        elif path.startswith(STORAGE_PREFIX):
            set_route_name(scope, "storage")
            await self.storage(scope, receive, send)
        elif path == HEALTH_PATH:
            set_route_name(scope, "health")
            await self.health(scope, receive, send)
        elif path == METRICS_PATH:
            set_route_name(scope, "metrics")
            await _metrics(self.services, scope, receive, send)
        elif self.reference.handles(path):
            set_route_name(scope, "reference")
            await self.reference(scope, receive, send)
        else:
            await not_found_answer()(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # Built in the background: the update check reads the database until it is.
                self.services.current_versions.start()
                self.services.webhooks.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.services.close()
                metrics.worker_stopped()
                await asyncio.to_thread(flush_log_lines)
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _metrics(services: Services, scope: Scope, receive: Receive, send: Send) -> None:
    response: Response
    if scope["method"] not in ("GET", "HEAD"):
        response = Response("Method Not Allowed", status_code=405, headers={"Allow": "GET, HEAD"})
    else:
        await _observe_webhook_queue(services)
        response = Response(metrics.exposition(), media_type=metrics.CONTENT_TYPE)
    await response(scope, receive, send)


# The webhook queue is read from the database at scrape time, within this bound; a scrape while
# the database does not answer shows the values of the last scrape that could read them.
WEBHOOK_QUEUE_READ_SECONDS = 1.0


async def _observe_webhook_queue(services: Services) -> None:
    try:
        async with asyncio.timeout(WEBHOOK_QUEUE_READ_SECONDS):
            await observe_queue(services.engine)
    except Exception as error:  # the scrape still answers, with the rest of the metrics
        logger.warning("metrics: cannot read the webhook queue: %s", error)


def build_app(settings: Settings | None = None, services: Services | None = None) -> ASGIApp:
    services = services or build_services(settings or Settings())
    settings = services.settings
    metrics.start_worker(
        database=services.engine.dialect.name,
        redis=bool(settings.redis_url),
        limiters=(*LIMITERS, *feeds.LIMITERS),
        caches=ANSWER_CACHES,
        upstreams=(chat_widget.UPSTREAM, stats.UPSTREAM),
        webhook_events=DELIVERED_EVENTS,
    )
    return HttpEdge(
        MarketplaceApp(services),
        trusted_proxies=settings.proxies,
        access_log=settings.access_log,
        max_body_bytes=settings.max_body_bytes,
        body_timeout_seconds=settings.read_timeout_seconds,
        max_buffered_body_bytes=settings.max_buffered_body_bytes,
    )


def create_app() -> ASGIApp:
    """Factory for `uvicorn --factory marketplace.app:create_app`."""
    return build_app()
