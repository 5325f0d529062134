"""What the webhook tests share: subscriptions written directly, changes made in SQL, and one
worker's pass of dispatching and sending, run in the test's own loop."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import insert, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.config import Settings
from marketplace.models import WebhookDelivery, WebhookEvent, WebhookSubscription, utcnow
from marketplace.webhooks.delivery import DeliveryPolicy, claim_due, record, send
from marketplace.webhooks.outbox import dispatch_events
from marketplace.webhooks.payloads import BodyContext
from marketplace.webhooks.sealing import seal

SECRET = "whsec_test-secret"


async def subscribe(
    engine: AsyncEngine,
    url: str,
    *,
    events: str = "release.published,resource.status_changed,payment.status_changed,access.granted,access.revoked",
    resource_id: int | None = None,
    author_id: int | None = None,
    body_format: str = "json",
    secret: str = SECRET,
    key: str | None = None,
    enabled: bool = True,
) -> int:
    now = utcnow()
    async with engine.begin() as connection:
        return int(
            (
                await connection.execute(
                    insert(WebhookSubscription)
                    .values(
                        url=url,
                        events=events,
                        resource_id=resource_id,
                        author_id=author_id,
                        format=body_format,
                        secret=seal(secret, key),
                        enabled=enabled,
                        created_at=now,
                        updated_at=now,
                    )
                    .returning(WebhookSubscription.id)
                )
            ).scalar_one()
        )


async def execute(engine: AsyncEngine, *statements: str, **parameters: Any) -> None:
    """Run SQL as an operator's own session would, in one transaction."""
    async with engine.begin() as connection:
        for statement in statements:
            await connection.execute(text(statement), parameters)


async def release(
    engine: AsyncEngine, resource_id: int, version_id: int, number: str, title: str = ""
) -> None:
    now = utcnow()
    await execute(
        engine,
        "INSERT INTO versions (id, resource_id, version, title, download, created_at, updated_at) "
        "VALUES (:id, :resource_id, :number, :title, 0, :now, :now)",
        id=version_id,
        resource_id=resource_id,
        number=number,
        title=title,
        now=now,
    )


async def events_written(engine: AsyncEngine) -> list[tuple[Any, ...]]:
    async with engine.connect() as connection:
        rows = await connection.execute(
            select(
                WebhookEvent.kind,
                WebhookEvent.resource_id,
                WebhookEvent.user_id,
                WebhookEvent.subject_id,
                WebhookEvent.old_value,
                WebhookEvent.new_value,
            ).order_by(WebhookEvent.id)
        )
        return [tuple(row) for row in rows]


async def deliveries(engine: AsyncEngine) -> list[Any]:
    async with engine.connect() as connection:
        table = WebhookDelivery.__table__
        return list((await connection.execute(select(table).order_by(table.c.id))).all())


def body_context(settings: Settings) -> BodyContext:
    return BodyContext(settings.public_base_url, settings.platform_names)


def policy(**changes: Any) -> DeliveryPolicy:
    values: dict[str, Any] = {
        "retry_base_seconds": 0.01,
        "retry_max_seconds": 0.02,
        "window_seconds": 3600.0,
        "lease_seconds": 30.0,
        "allow_private": True,
        "secret_key": None,
        **changes,
    }
    return DeliveryPolicy(**values)


async def dispatch(engine: AsyncEngine, settings: Settings) -> int:
    return await dispatch_events(engine, body_context(settings))


async def deliver_due(engine: AsyncEngine, rules: DeliveryPolicy, limit: int = 50) -> list[str | None]:
    """One worker's pass: claim what is due, send it, record it; the outcomes."""
    claimed = await claim_due(engine, rules, limit)
    outcomes = []
    async with httpx.AsyncClient() as client:
        for delivery in claimed:
            sent = await send(
                client,
                url=delivery.url,
                stored_secret=delivery.stored_secret,
                event=delivery.event,
                delivery_uid=delivery.uid,
                body=delivery.body,
                policy=rules,
            )
            outcomes.append(await record(engine, delivery, sent, rules))
    return outcomes


async def age(engine: AsyncEngine, table: str, column: str, seconds: float) -> None:
    """Move every row's `column` of `table` `seconds` into the past (time passing, in a test)."""
    async with engine.begin() as connection:
        rows = (await connection.execute(text(f"SELECT id, {column} FROM {table}"))).all()
        for row_id, value in rows:
            if value is None:
                continue
            if isinstance(value, str):
                from datetime import datetime

                value = datetime.fromisoformat(value)
            await connection.execute(
                text(f"UPDATE {table} SET {column} = :value WHERE id = :id"),
                {"value": value - timedelta(seconds=seconds), "id": row_id},
            )
