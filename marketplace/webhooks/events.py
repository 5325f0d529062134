"""The events a webhook subscription may ask for, and how an operator names them.

| Event | When |
|---|---|
| `release.published` | a version of a resource is released |
| `resource.status_changed` | a resource's status changes (`deleted` when it is soft-deleted) |
| `payment.status_changed` | a payment's status changes |
| `access.granted` | a member gets access to a resource (bought, granted, gifted, reactivated) |
| `access.revoked` | an access is revoked (a refund, an operator) or deleted |

The database writes them (migration 0009); `ping` is sent only by `marketplace webhooks test`.
"""

from __future__ import annotations

RELEASE_PUBLISHED = "release.published"
RESOURCE_STATUS_CHANGED = "resource.status_changed"
PAYMENT_STATUS_CHANGED = "payment.status_changed"
ACCESS_GRANTED = "access.granted"
ACCESS_REVOKED = "access.revoked"
PING = "ping"

EVENTS = (
    RELEASE_PUBLISHED,
    RESOURCE_STATUS_CHANGED,
    PAYMENT_STATUS_CHANGED,
    ACCESS_GRANTED,
    ACCESS_REVOKED,
)
# Every event a delivery may carry, for the metrics' label values.
DELIVERED_EVENTS = (*EVENTS, PING)


class UnknownEvent(ValueError):
    pass


def parse_event_list(text: str) -> tuple[str, ...]:
    """The events of `--events E[,E...]`, each once, in the order of `EVENTS`; `*` is every event."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise UnknownEvent(f"name at least one event: {', '.join(EVENTS)}")
    if names == ["*"]:
        return EVENTS
    unknown = [name for name in names if name not in EVENTS]
    if unknown:
        raise UnknownEvent(f"unknown event {unknown[0]!r}: the events are {', '.join(EVENTS)} (or *)")
    return tuple(event for event in EVENTS if event in names)


def stored_event_list(events: tuple[str, ...]) -> str:
    return ",".join(events)


def events_of(stored: str) -> tuple[str, ...]:
    return tuple(name for name in stored.split(",") if name)


# The activity log's events of subscriptions (listed with the others in
# `marketplace/backoffice/events.py`).
SUBSCRIPTION_ADDED = "webhook.added"
SUBSCRIPTION_ENABLED = "webhook.enabled"
# By an operator, or by delivery itself after a whole retry window of failures.
SUBSCRIPTION_DISABLED = "webhook.disabled"
SUBSCRIPTION_REMOVED = "webhook.removed"
SUBSCRIPTION_TESTED = "webhook.tested"
SECRET_ROTATED = "webhook.secret_rotated"
DELIVERY_REDELIVERED = "webhook.redelivered"
SUBSCRIPTION_ACTIVITY = (
    SUBSCRIPTION_ADDED,
    SUBSCRIPTION_ENABLED,
    SUBSCRIPTION_DISABLED,
    SUBSCRIPTION_REMOVED,
    SUBSCRIPTION_TESTED,
    SECRET_ROTATED,
    DELIVERY_REDELIVERED,
)
