"""What a delivery says: the event's facts, and the body made of them in each format.

`json` (the default) is the service's own shape, for bots and integrations:

    {"id": "<event id>", "event": "release.published", "created_at": "...", "data": {...}}

`data` holds the objects the event is about (`resource`, `version`, `payment`, `access`, `member`)
and, for a status change, `from` and `to`. A resource carries the absolute URL of its card in the
API (`url`), which is also where a chat message links to.

`chat` is the chat platform's incoming-webhook message: `content`, plus one embed with `title`,
`url`, `description` and `fields`, so that release news can go to a community channel without a
bot. Mentions are never resolved (`allowed_mentions`), so a resource named `@everyone` pings no
one, and text is cut to the platform's limits. Words that name the chat platform follow
`MARKETPLACE_CHAT_NAME`, as in the API.

Bodies are made once, when the event is dispatched, and every attempt sends the same bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from marketplace.http.json import encode, timestamp
from marketplace.platform_names import PlatformNames
from marketplace.webhooks import events


@dataclass(frozen=True)
class ResourceFacts:
    id: int
    name: str
    user_id: int
    author_name: str | None
    # `published`, `unlisted`, `draft`, `pending`, `rejected`, or `deleted` when soft-deleted.
    status: str


@dataclass(frozen=True)
class VersionFacts:
    id: int
    version: str
    title: str
    created_at: datetime


@dataclass(frozen=True)
class PaymentFacts:
    id: int
    uid: str
    status: str
    amount_cents: int
    currency: str


@dataclass(frozen=True)
class AccessFacts:
    id: int
    user_id: int
    resource_id: int
    payment_id: int | None
    source: str
    revoked: bool


@dataclass(frozen=True)
class MemberFacts:
    id: int
    name: str
    chat_id: str | None


@dataclass(frozen=True)
class EventFacts:
    """An event as its deliveries tell it: the row the trigger wrote and the rows it names, as they
    were when the event was dispatched (a row deleted meanwhile is None)."""

    event_id: int
    kind: str
    created_at: datetime
    resource: ResourceFacts | None = None
    version: VersionFacts | None = None
    payment: PaymentFacts | None = None
    access: AccessFacts | None = None
    member: MemberFacts | None = None
    old_value: str | None = None
    new_value: str | None = None
    # For a ping: the subscription it tests.
    subscription_id: int | None = None


@dataclass(frozen=True)
class BodyContext:
    """What a body needs beside the facts: where the API is and what the chat platform is called."""

    base_url: str
    names: PlatformNames

    def card_url(self, resource_id: int) -> str:
        return f"{self.base_url}/api/v1/resource/{resource_id}"


def body_for(facts: EventFacts, body_format: str, context: BodyContext) -> bytes:
    if body_format == "chat":
        return encode(chat_message(facts, context))
    return encode(json_event(facts, context))


# --- json ----------------------------------------------------------------------------------------


def json_event(facts: EventFacts, context: BodyContext) -> dict[str, Any]:
    return {
        "id": str(facts.event_id),
        "event": facts.kind,
        "created_at": timestamp(facts.created_at),
        "data": _json_data(facts, context),
    }


def _json_data(facts: EventFacts, context: BodyContext) -> dict[str, Any]:
    resource = _resource(facts.resource, context)
    if facts.kind == events.RELEASE_PUBLISHED:
        return {"resource": resource, "version": _version(facts.version)}
    if facts.kind == events.RESOURCE_STATUS_CHANGED:
        return {"resource": resource, "from": facts.old_value, "to": facts.new_value}
    if facts.kind == events.PAYMENT_STATUS_CHANGED:
        return {
            "payment": _payment(facts.payment),
            "from": facts.old_value,
            "to": facts.new_value,
            "resource": resource,
            "member": _member(facts.member, context),
        }
    if facts.kind in (events.ACCESS_GRANTED, events.ACCESS_REVOKED):
        return {
            "access": _access(facts.access),
            "resource": resource,
            "member": _member(facts.member, context),
        }
    return {"subscription_id": facts.subscription_id, "message": "ping"}


def _resource(resource: ResourceFacts | None, context: BodyContext) -> dict[str, Any] | None:
    if resource is None:
        return None
    return {
        "id": resource.id,
        "name": resource.name,
        "status": resource.status,
        "author": {"id": resource.user_id, "name": resource.author_name},
        "url": context.card_url(resource.id),
    }


def _version(version: VersionFacts | None) -> dict[str, Any] | None:
    if version is None:
        return None
    return {
        "id": version.id,
        "version": version.version,
        "title": version.title,
        "created_at": timestamp(version.created_at),
    }


def _payment(payment: PaymentFacts | None) -> dict[str, Any] | None:
    if payment is None:
        return None
    return {
        "uid": payment.uid,
        "status": payment.status,
        "amount_cents": payment.amount_cents,
        "currency": payment.currency,
    }


def _access(access: AccessFacts | None) -> dict[str, Any] | None:
    if access is None:
        return None
    return {
        "id": access.id,
        "user_id": access.user_id,
        "plugin_id": access.resource_id,
        "payment_id": access.payment_id,
        "source": access.source,
        "active": not access.revoked,
    }


def _member(member: MemberFacts | None, context: BodyContext) -> dict[str, Any] | None:
    if member is None:
        return None
    # The chat account's key is the platform's word, as in the API's author object.
    return {"id": member.id, "name": member.name, context.names.chat: member.chat_id}


# --- chat ----------------------------------------------------------------------------------------

# The chat platform's limits on a message and its embed.
CONTENT_LIMIT = 2000
TITLE_LIMIT = 256
DESCRIPTION_LIMIT = 4096
FIELD_NAME_LIMIT = 256
FIELD_VALUE_LIMIT = 1024
# Characters the platform reads as formatting anywhere in a line (bold, italics, underline, strike,
# code, spoilers, links).
_MARKDOWN = re.compile(r"([\\*_~`|\[\]])")


def chat_message(facts: EventFacts, context: BodyContext) -> dict[str, Any]:
    content, title, description, fields = _chat_parts(facts, context)
    resource = facts.resource
    embed: dict[str, Any] = {
        "title": _cut(title, TITLE_LIMIT),
        "url": context.card_url(resource.id) if resource is not None else None,
        "description": _cut(description, DESCRIPTION_LIMIT),
        "fields": [
            {
                "name": _cut(context.names.rename(name), FIELD_NAME_LIMIT),
                "value": _cut(value or "-", FIELD_VALUE_LIMIT),
                "inline": True,
            }
            for name, value in fields
        ],
        "timestamp": timestamp(facts.created_at),
    }
    if embed["url"] is None:
        del embed["url"]
    return {
        "content": _cut(content, CONTENT_LIMIT),
        "embeds": [embed],
        # Names are members' text: nothing in them may ping anyone.
        "allowed_mentions": {"parse": []},
    }


def _chat_parts(facts: EventFacts, context: BodyContext) -> tuple[str, str, str, list[tuple[str, str]]]:
    """The message's content, the embed's title and description, and its fields (name, value)."""
    resource = facts.resource
    name = resource.name if resource is not None else "a removed resource"
    author = [("Author", _plain(resource.author_name or "")) if resource is not None else ("Author", "")]
    if facts.kind == events.RELEASE_PUBLISHED:
        number = facts.version.version if facts.version is not None else "?"
        release_title = facts.version.title if facts.version is not None else ""
        return (
            f"New release: {_plain(name)} {_plain(number)}",
            f"{name} {number}",
            _plain(release_title) or "No release title.",
            [("Resource", _plain(name)), ("Version", _plain(number)), *author],
        )
    if facts.kind == events.RESOURCE_STATUS_CHANGED:
        return (
            f"{_plain(name)} is now {facts.new_value}",
            name,
            f"Status: {facts.old_value} → {facts.new_value}",
            [
                ("Resource", _plain(name)),
                ("From", facts.old_value or ""),
                ("To", facts.new_value or ""),
                *author,
            ],
        )
    if facts.kind == events.PAYMENT_STATUS_CHANGED:
        payment = facts.payment
        reference = payment.uid if payment is not None else "?"
        amount = f"{payment.amount_cents / 100:.2f} {payment.currency}" if payment is not None else ""
        return (
            f"Payment {reference} is now {facts.new_value}",
            f"Payment {reference}",
            f"Status: {facts.old_value} → {facts.new_value}",
            [
                ("Resource", _plain(name) if resource is not None else ""),
                ("Amount", amount),
                *_member_fields(facts.member),
            ],
        )
    if facts.kind in (events.ACCESS_GRANTED, events.ACCESS_REVOKED):
        member = _plain(facts.member.name) if facts.member is not None else "A member"
        granted = facts.kind == events.ACCESS_GRANTED
        source = facts.access.source if facts.access is not None else ""
        return (
            f"{member} {'got access to' if granted else 'lost access to'} {_plain(name)}",
            name,
            f"Access {'granted' if granted else 'revoked'}" + (f" ({source})" if source else ""),
            [("Resource", _plain(name)), *_member_fields(facts.member), ("Source", source)],
        )
    return (
        "Webhook test: this channel receives the marketplace's events.",
        "Ping",
        f"Subscription {facts.subscription_id} works.",
        [],
    )


def _member_fields(member: MemberFacts | None) -> list[tuple[str, str]]:
    if member is None:
        return [("Member", "")]
    return [("Member", _plain(member.name)), ("Chat account", member.chat_id or "")]


def _plain(text: str) -> str:
    """Members' text shown as typed, not read as the platform's formatting."""
    return _MARKDOWN.sub(r"\\\1", text)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
