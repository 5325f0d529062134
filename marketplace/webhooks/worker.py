"""The serving worker's part in webhooks: a background loop that dispatches events and sends due
deliveries, and the queue's state for `/metrics` and `/up`.

Every serving worker of every host runs the loop (unless `MARKETPLACE_WEBHOOKS_DELIVER=false`):
the claims (`outbox.py`, `delivery.py`) keep them from taking the same work. An idle worker looks
every `MARKETPLACE_WEBHOOKS_POLL_SECONDS` with one read (no write transaction while there is
nothing to do); a worker with work goes on at once. At most `MARKETPLACE_WEBHOOKS_CONCURRENCY`
deliveries are sent at once by a worker, none holding a database connection while it waits for
its receiver; a worker with more due than that claims again as soon as half its sends have ended. The loop's transactions announce no change (`database/changes.py`): delivering
webhooks drops no cached answer.

Every `PRUNE_EVERY_SECONDS` a worker deletes what is done and old: deliveries delivered or given
up more than `MARKETPLACE_WEBHOOKS_HISTORY_DAYS` ago, and events dispatched as long ago that no
delivery refers to any more (most events of a catalogue whose subscriptions want few of them).

On shutdown a worker lets the sends in flight finish (at most their timeout) and records them; a
send cut short leaves its claim to lapse, and the delivery goes again from another worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy import delete, exists, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.database.changes import unannounced
from marketplace.models import DeliveryState, WebhookDelivery, WebhookEvent, WebhookSubscription
from marketplace.telemetry.logs import start_background
from marketplace.telemetry.metrics import WEBHOOK_OLDEST_PENDING, WEBHOOK_QUEUE_DEPTH
from marketplace.webhooks.delivery import (
    SEND_TIMEOUT_SECONDS,
    Claimed,
    DeliveryPolicy,
    claim_due,
    record,
    send,
)
from marketplace.webhooks.outbox import BATCH, dispatch_events, precise_now
from marketplace.webhooks.payloads import BodyContext

if TYPE_CHECKING:
    import httpx

    from marketplace.config import Settings

logger = logging.getLogger("marketplace.webhooks")

# The longest pause after the database failed the loop, doubling from the poll interval.
MAX_PAUSE_SECONDS = 10.0
PRUNE_EVERY_SECONDS = 600.0
# Rows deleted by one statement, so that pruning never holds locks for long.
PRUNE_BATCH = 1000


@dataclass(frozen=True)
class QueueState:
    """What is left to do, from the database."""

    # Events not yet turned into deliveries.
    undispatched: int
    # Deliveries of enabled subscriptions not delivered yet (due now, or waiting for a retry).
    pending: int
    # How long the oldest due work has waited: an undispatched event since it was written, a
    # delivery since it was due (one waiting for its retry is not late); 0 when nothing is due.
    oldest_due_seconds: float


async def queue_state(engine: AsyncEngine) -> QueueState:
    now = precise_now()
    enabled_pending = (
        select(WebhookDelivery.id)
        .join(WebhookSubscription, WebhookSubscription.id == WebhookDelivery.subscription_id)
        .where(WebhookDelivery.state == DeliveryState.PENDING.value, WebhookSubscription.enabled.is_(True))
    )
    async with engine.connect() as connection:
        undispatched, oldest_event = (
            await connection.execute(
                select(func.count(), func.min(WebhookEvent.created_at)).where(
                    WebhookEvent.dispatched_at.is_(None)
                )
            )
        ).one()
        pending = await connection.scalar(select(func.count()).select_from(enabled_pending.subquery()))
        oldest_due = await connection.scalar(
            select(func.min(WebhookDelivery.next_attempt_at))
            .join(WebhookSubscription, WebhookSubscription.id == WebhookDelivery.subscription_id)
            .where(
                WebhookDelivery.state == DeliveryState.PENDING.value,
                WebhookSubscription.enabled.is_(True),
                WebhookDelivery.next_attempt_at <= now,
            )
        )
    waits = [(now - moment).total_seconds() for moment in (oldest_event, oldest_due) if moment is not None]
    return QueueState(int(undispatched), int(pending or 0), max([0.0, *waits]))


async def observe_queue(engine: AsyncEngine) -> QueueState:
    """Read the queue's state into its gauges (at scrape time)."""
    state = await queue_state(engine)
    WEBHOOK_QUEUE_DEPTH.labels("events").set(state.undispatched)
    WEBHOOK_QUEUE_DEPTH.labels("deliveries").set(state.pending)
    WEBHOOK_OLDEST_PENDING.set(state.oldest_due_seconds)
    return state


async def prune(engine: AsyncEngine, history_seconds: float) -> int:
    """Delete finished deliveries and events older than the history kept; how many rows."""
    before = precise_now() - timedelta(seconds=history_seconds)
    finished = (DeliveryState.DELIVERED.value, DeliveryState.FAILED.value)
    deleted = 0
    while True:
        async with engine.begin() as connection:
            old_deliveries = (
                select(WebhookDelivery.id)
                .where(WebhookDelivery.state.in_(finished), WebhookDelivery.created_at < before)
                .limit(PRUNE_BATCH)
                .scalar_subquery()
            )
            gone = (
                await connection.execute(
                    delete(WebhookDelivery).where(WebhookDelivery.id.in_(old_deliveries))
                )
            ).rowcount
            old_events = (
                select(WebhookEvent.id)
                .where(
                    WebhookEvent.dispatched_at < before,
                    ~exists().where(WebhookDelivery.event_id == WebhookEvent.id),
                )
                .limit(PRUNE_BATCH)
                .scalar_subquery()
            )
            gone += (
                await connection.execute(delete(WebhookEvent).where(WebhookEvent.id.in_(old_events)))
            ).rowcount
        deleted += gone
        if gone < PRUNE_BATCH:
            return deleted


class _Step(enum.Enum):
    # More work is waiting and there is room for it: go on at once.
    BUSY = "busy"
    # More is due than this worker has room for: go on when sends have ended.
    SATURATED = "saturated"
    # Nothing more is due: look again after the poll interval.
    IDLE = "idle"


class WebhookDeliverer:
    """The loop of one serving worker."""

    def __init__(self, engine: AsyncEngine, settings: Settings) -> None:
        self.engine = unannounced(engine)
        self.policy = DeliveryPolicy.from_settings(settings)
        self.context = BodyContext(settings.public_base_url, settings.platform_names)
        self.enabled = settings.webhooks_deliver
        self.poll_seconds = settings.webhooks_poll_seconds
        self.concurrency = settings.webhooks_concurrency
        self.history_seconds = settings.webhooks_history_days * 86400
        self._next_prune: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        # Set when enough sends have ended for a claim worth its transaction.
        self._slots_free = asyncio.Event()
        self._refill_at = max(1, self.concurrency // 2)
        # Made by the first delivery: a worker that sends none never loads httpx.
        self._client: httpx.AsyncClient | None = None

    def start(self) -> None:
        if self.enabled and self._task is None:
            self._task = start_background(self._run())

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                step = await self._step()
            except Exception as error:  # the database or a bug: the loop must outlive both
                failures += 1
                if failures == 1 or failures % 100 == 0:
                    logger.warning(
                        "webhook delivery paused (%s time(s) in a row): %s", failures, _line(error)
                    )
                await asyncio.sleep(min(self.poll_seconds * 2 ** min(failures, 10), MAX_PAUSE_SECONDS))
                continue
            if failures:
                logger.info("webhook delivery resumed")
                failures = 0
            if step is _Step.SATURATED:
                # More is due than there were free slots: go on as soon as half the slots are free
                # again, not a whole poll later (a burst would drain at concurrency per poll).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.poll_seconds):
                        await self._slots_free.wait()
            elif step is _Step.IDLE:
                await asyncio.sleep(self.poll_seconds)

    async def _step(self) -> _Step:
        """Dispatch and claim what there is; what to do next."""
        loop_time = asyncio.get_running_loop().time()
        if self._next_prune is None:
            # Spread over the interval: workers started together do not prune together.
            self._next_prune = loop_time + random.uniform(PRUNE_EVERY_SECONDS / 10, PRUNE_EVERY_SECONDS)
        if loop_time >= self._next_prune:
            self._next_prune = loop_time + PRUNE_EVERY_SECONDS
            await prune(self.engine, self.history_seconds)
        free = self.concurrency - len(self._in_flight)
        events_waiting, deliveries_due = await self._work_waiting()
        dispatched = 0
        if events_waiting:
            dispatched = await dispatch_events(self.engine, self.context, batch=BATCH)
        if not (deliveries_due or dispatched):
            return _Step.IDLE
        # Sending goes on while a backlog of events (an import) is dispatched, a batch a step.
        claimed: list[Claimed] = []
        if free > 0:
            claimed = await claim_due(self.engine, self.policy, free)
            for delivery in claimed:
                task = start_background(self._deliver(delivery))
                self._in_flight.add(task)
                task.add_done_callback(self._sent)
        if dispatched == BATCH:
            return _Step.BUSY
        if free > 0 and len(claimed) < free:
            return _Step.IDLE  # everything due is on its way
        self._slots_free.clear()
        if self.concurrency - len(self._in_flight) >= self._refill_at:
            return _Step.BUSY  # sends ended while this step claimed
        return _Step.SATURATED

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        if self.concurrency - len(self._in_flight) >= self._refill_at:
            self._slots_free.set()

    async def _work_waiting(self) -> tuple[bool, bool]:
        now = precise_now()
        async with self.engine.connect() as connection:
            row = (
                await connection.execute(
                    select(
                        exists().where(WebhookEvent.dispatched_at.is_(None)),
                        exists().where(
                            WebhookDelivery.state == DeliveryState.PENDING.value,
                            WebhookDelivery.next_attempt_at <= now,
                            WebhookSubscription.id == WebhookDelivery.subscription_id,
                            WebhookSubscription.enabled.is_(True),
                        ),
                    )
                )
            ).one()
        return bool(row[0]), bool(row[1])

    async def _deliver(self, delivery: Claimed) -> None:
        try:
            sent = await send(
                self._sending_client(),
                url=delivery.url,
                stored_secret=delivery.stored_secret,
                event=delivery.event,
                delivery_uid=delivery.uid,
                body=delivery.body,
                policy=self.policy,
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a bug: the claim lapses and the delivery goes again
            logger.warning("webhook delivery %s: not sent: %s", delivery.uid, _line(error))
            return
        try:
            await record(self.engine, delivery, sent, self.policy)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            logger.warning(
                "webhook delivery %s: its outcome was not recorded: %s", delivery.uid, _line(error)
            )
            # Once more without the receiver's words, whatever in them the database refused: a
            # delivery whose outcome can never be stored would otherwise go again for ever.
            from marketplace.webhooks.sending import Sent

            bare = Sent(
                sent.status, None if sent.ok else "the answer could not be stored", "", sent.duration_seconds
            )
            with contextlib.suppress(Exception):
                await record(self.engine, delivery, bare, self.policy)

    def _sending_client(self) -> httpx.AsyncClient:
        if self._client is None:
            from marketplace.webhooks.sending import sending_client

            self._client = sending_client()
        return self._client

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._in_flight:
            _done, cut = await asyncio.wait(set(self._in_flight), timeout=SEND_TIMEOUT_SECONDS + 1.0)
            for task in cut:
                task.cancel()
            await asyncio.gather(*cut, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
