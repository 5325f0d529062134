"""The bodies of deliveries: the service's JSON events and the chat platform's messages
(`marketplace/webhooks/payloads.py`)."""

from __future__ import annotations

import json
from datetime import datetime

from marketplace.platform_names import PlatformNames
from marketplace.webhooks.payloads import (
    CONTENT_LIMIT,
    DESCRIPTION_LIMIT,
    FIELD_VALUE_LIMIT,
    TITLE_LIMIT,
    AccessFacts,
    BodyContext,
    EventFacts,
    MemberFacts,
    PaymentFacts,
    ResourceFacts,
    VersionFacts,
    body_for,
)

AT = datetime(2026, 11, 27, 12, 0, 0, 250000)
CONTEXT = BodyContext("https://market.example", PlatformNames())
RESOURCE = ResourceFacts(7, "SkyWars *Arena*", 2, "bob", "published")
MEMBER = MemberFacts(5, "Emma_Plays", "111111111111111111")


def release(name: str = "SkyWars *Arena*", title: str = "Faster maps") -> EventFacts:
    return EventFacts(
        event_id=42,
        kind="release.published",
        created_at=AT,
        resource=ResourceFacts(7, name, 2, "bob", "published"),
        version=VersionFacts(100, "2.0", title, AT),
    )


def chat(facts: EventFacts, context: BodyContext = CONTEXT) -> dict[str, object]:
    message = json.loads(body_for(facts, "chat", context))
    assert isinstance(message, dict)
    return message


def test_a_chat_message_is_content_and_one_embed_with_title_url_description_and_fields() -> None:
    message = chat(release())
    assert list(message) == ["content", "embeds", "allowed_mentions"]
    (embed,) = message["embeds"]
    assert embed["title"] == "SkyWars *Arena* 2.0"
    assert embed["url"] == "https://market.example/api/v1/resource/7"
    assert embed["description"] == "Faster maps"
    assert [field["name"] for field in embed["fields"]] == ["Resource", "Version", "Author"]
    assert message["content"] == "New release: SkyWars \\*Arena\\* 2.0"


def test_a_chat_message_never_pings_anyone() -> None:
    message = chat(release(name="@everyone <@&123> free nitro"))
    assert message["allowed_mentions"] == {"parse": []}


def test_chat_text_is_cut_to_the_platforms_limits() -> None:
    message = chat(release(name="N" * 5000, title="T" * 9000))
    (embed,) = message["embeds"]
    assert len(message["content"]) <= CONTENT_LIMIT
    assert len(embed["title"]) == TITLE_LIMIT and embed["title"].endswith("…")
    assert len(embed["description"]) <= DESCRIPTION_LIMIT
    assert all(len(field["value"]) <= FIELD_VALUE_LIMIT for field in embed["fields"])
    assert all(field["value"] for field in embed["fields"]), "the platform refuses an empty field"


def test_the_chat_platforms_word_follows_its_configured_name() -> None:
    facts = EventFacts(
        event_id=43,
        kind="access.granted",
        created_at=AT,
        resource=RESOURCE,
        access=AccessFacts(9, 5, 7, None, "manual", False),
        member=MEMBER,
    )
    renamed = BodyContext("https://market.example", PlatformNames(chat="discord", stats="bstats"))
    (embed,) = chat(facts, renamed)["embeds"]
    assert "Discord account" in [field["name"] for field in embed["fields"]]
    assert json.loads(body_for(facts, "json", renamed))["data"]["member"] == {
        "id": 5,
        "name": "Emma_Plays",
        "discord": "111111111111111111",
    }
    (contract,) = chat(facts)["embeds"]
    assert "Chat account" in [field["name"] for field in contract["fields"]]


def test_each_event_reads_as_a_chat_message() -> None:
    payment = EventFacts(
        event_id=44,
        kind="payment.status_changed",
        created_at=AT,
        resource=RESOURCE,
        payment=PaymentFacts(1, "01HZY3J1Q8Y5ZQ4W2B7C9D0E1F", "refunded", 1250, "EUR"),
        member=MEMBER,
        old_value="paid",
        new_value="refunded",
    )
    status = EventFacts(
        event_id=45,
        kind="resource.status_changed",
        created_at=AT,
        resource=RESOURCE,
        old_value="published",
        new_value="unlisted",
    )
    revoked = EventFacts(
        event_id=46,
        kind="access.revoked",
        created_at=AT,
        resource=RESOURCE,
        access=AccessFacts(9, 5, 7, 1, "purchase", True),
        member=MEMBER,
    )
    ping = EventFacts(event_id=47, kind="ping", created_at=AT, subscription_id=3)
    assert chat(payment)["content"] == "Payment 01HZY3J1Q8Y5ZQ4W2B7C9D0E1F is now refunded"
    assert {"name": "Amount", "value": "12.50 EUR", "inline": True} in chat(payment)["embeds"][0]["fields"]
    assert chat(status)["content"] == "SkyWars \\*Arena\\* is now unlisted"
    assert chat(revoked)["content"] == "Emma\\_Plays lost access to SkyWars \\*Arena\\*"
    assert chat(ping)["embeds"][0]["description"] == "Subscription 3 works."


def test_a_json_event_has_its_id_name_time_and_data_in_that_order() -> None:
    event = json.loads(body_for(release(), "json", CONTEXT))
    assert list(event) == ["id", "event", "created_at", "data"]
    assert (event["id"], event["event"], event["created_at"]) == (
        "42",
        "release.published",
        "2026-11-27T12:00:00.250000Z",
    )
    assert event["data"]["version"] == {
        "id": 100,
        "version": "2.0",
        "title": "Faster maps",
        "created_at": "2026-11-27T12:00:00.250000Z",
    }


def test_a_body_is_ascii_json_whatever_the_names() -> None:
    body = body_for(release(name="Économie 😀 \u2028"), "json", CONTEXT)
    assert body.isascii()
    assert json.loads(body)["data"]["resource"]["name"] == "Économie 😀 \u2028"
