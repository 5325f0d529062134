"""What the find-and-show tests read: a small marketplace whose rows were created in an order that
their ids do not follow (newest first is by time), with names that a LIKE or a terminal could
misread, and the helpers that run a list or a show."""

from __future__ import annotations

import re
from typing import Any

from tests.backoffice.conftest import BackOffice

# Payments, by creation time: P4 (oldest), P1, P2, P3, P5 (newest).
P1 = "01HZY3J1Q8Y5ZQ4W2B7C9D0E11"
P2 = "01HZY3J1Q8Y5ZQ4W2B7C9D0E12"
P3 = "01HZY3J1Q8Y5ZQ4W2B7C9D0E13"
P4 = "01HZY3J1Q8Y5ZQ4W2B7C9D0E14"
P5 = "01HZY3J1Q8Y5ZQ4W2B7C9D0E15"
UNKNOWN_UID = "01HZY3J1Q8Y5ZQ4W2B7C9D0E19"
CHAT_OF_ALICIA = "111111111111111111"
CHAT_OF_ALICE = "444444444444444444"
NAME_WITH_A_NEWLINE = "Bob\nEvil"
RESOURCE_WITH_A_NEWLINE = "Evil\nName \x1b[31mred\x9b0m"


def shop() -> dict[str, Any]:
    return {
        "users": [
            {"id": 1, "name": "Alice", "email": "alice@example.com", "created_at": "2024-01-01T00:00:00Z"},
            {"id": 2, "name": "alicia", "created_at": "2024-03-01T00:00:00Z"},
            {"id": 3, "name": NAME_WITH_A_NEWLINE, "banned": True, "created_at": "2024-02-01T00:00:00Z"},
            {"id": 4, "name": "Carol_x", "closed": True, "created_at": "2024-04-01T00:00:00Z"},
            {"id": 5, "name": "Carolyn", "created_at": "2024-04-02T00:00:00Z"},
            {"id": 6, "name": "Dan%", "banned": True, "closed": True, "created_at": "2024-05-01T00:00:00Z"},
            {"id": 7, "name": "Danny", "banned": True, "created_at": "2024-05-02T00:00:00Z"},
            {"id": 8, "name": "Deleted Dave", "deleted": True, "created_at": "2024-05-03T00:00:00Z"},
        ],
        "chat_accounts": [
            {"user_id": 2, "chat_id": CHAT_OF_ALICIA},
            {"user_id": 1, "chat_id": CHAT_OF_ALICE},
        ],
        "categories": [{"id": 1, "name": "Economy"}],
        "resources": [
            {
                "id": 1,
                "user_id": 1,
                "name": "Économie Pro",
                "tag": "Shops",
                "description": "Line one\nline two",
                "price": "9.99",
                "category_id": 1,
                "stats_id": "1234",
                "version_id": 11,
                "created_at": "2024-01-10T00:00:00Z",
            },
            {
                "id": 2,
                "user_id": 2,
                "name": "Pro Tools",
                "status": "unlisted",
                "created_at": "2024-03-10T00:00:00Z",
            },
            {
                "id": 3,
                "user_id": 1,
                "name": "100% Pure",
                "status": "draft",
                "created_at": "2024-02-10T00:00:00Z",
            },
            {
                "id": 4,
                "user_id": 1,
                "name": "Deleted Thing",
                "deleted": True,
                "created_at": "2024-02-11T00:00:00Z",
            },
            {"id": 5, "user_id": 2, "name": RESOURCE_WITH_A_NEWLINE, "created_at": "2024-03-11T00:00:00Z"},
        ],
        "versions": [
            {
                "id": 10,
                "resource_id": 1,
                "version": "1.0.0",
                "title": "First",
                "created_at": "2024-01-10T00:00:00Z",
            },
            {
                "id": 11,
                "resource_id": 1,
                "version": "1.1.0",
                "title": "Second",
                "created_at": "2024-01-20T00:00:00Z",
            },
            {
                "id": 12,
                "resource_id": 1,
                "version": "2.0.0-beta",
                "title": "Not promoted",
                "changelog": "secret\nchangelog",
                "created_at": "2024-01-30T00:00:00Z",
            },
        ],
        "gifts": [
            {"id": 1, "code": "WELCOME10", "percentage": 10, "seller_id": 1},
            {"id": 2, "code": "OFF", "percentage": 20, "enabled": False, "seller_id": 1},
            {"id": 3, "code": "OLD", "percentage": 30, "expires_at": "2020-01-01T00:00:00Z", "seller_id": 2},
            {"id": 4, "code": "LATER", "percentage": 40, "starts_at": "2999-01-01T00:00:00Z", "seller_id": 1},
            {"id": 5, "code": "USEDUP", "percentage": 50, "max_uses": 3, "uses": 3, "seller_id": 2},
            {
                "id": 6,
                "code": "Tools25",
                "percentage": 25,
                "max_uses": 10,
                "uses": 4,
                "starts_at": "2024-01-01T00:00:00Z",
                "expires_at": "2999-01-01T00:00:00Z",
                "seller_id": 2,
                "resource_id": 2,
            },
        ],
        "payments": [
            {
                "id": 1,
                "uid": P1,
                "status": "paid",
                "amount_cents": 999,
                "buyer_id": 2,
                "seller_id": 1,
                "resource_id": 1,
                "provider": "paypal",
                "provider_transaction_id": "PAYID-123",
                "created_at": "2024-05-01T10:00:00Z",
            },
            {
                "id": 2,
                "uid": P2,
                "status": "refunded",
                "amount_cents": 1000,
                "currency": "USD",
                "buyer_id": 2,
                "seller_id": 1,
                "resource_id": 1,
                "created_at": "2024-06-01T10:00:00Z",
            },
            {
                "id": 3,
                "uid": P3,
                "status": "pending",
                "amount_cents": 500,
                "buyer_id": 3,
                "seller_id": 2,
                "resource_id": 2,
                "created_at": "2024-07-01T10:00:00Z",
            },
            {
                "id": 4,
                "uid": P4,
                "status": "paid",
                "amount_cents": 999,
                "buyer_id": 3,
                "seller_id": 1,
                "resource_id": 1,
                "created_at": "2024-04-01T10:00:00Z",
            },
            {
                "id": 5,
                "uid": P5,
                "status": "cancelled",
                "amount_cents": 100,
                "buyer_id": 1,
                "seller_id": 1,
                "resource_id": 3,
                "created_at": "2024-08-01T10:00:00Z",
            },
        ],
        "accesses": [
            # By creation time: 3, 1, 2, 5, 4 (newest last).
            {
                "id": 1,
                "user_id": 2,
                "resource_id": 1,
                "payment_id": 1,
                "source": "purchase",
                "created_at": "2024-05-01T10:01:00Z",
                "updated_at": "2024-05-01T10:01:00Z",
            },
            {
                "id": 2,
                "user_id": 3,
                "resource_id": 1,
                "payment_id": 4,
                "source": "purchase",
                "created_at": "2024-05-02T10:01:00Z",
            },
            {
                "id": 3,
                "user_id": 2,
                "resource_id": 2,
                "source": "manual",
                "created_at": "2024-01-01T00:00:00Z",
            },
            {
                "id": 4,
                "user_id": 1,
                "resource_id": 3,
                "source": "gift",
                "revoked": True,
                "created_at": "2024-09-01T00:00:00Z",
            },
            {
                "id": 5,
                "user_id": 2,
                "resource_id": 3,
                "source": "purchase",
                "revoked": True,
                "created_at": "2024-08-01T00:00:00Z",
            },
        ],
    }


async def listed(back_office: BackOffice, *args: str) -> list[dict[str, Any]]:
    """`marketplace ARGS --json`: the object of each line."""
    return (await back_office.ok(*args, "--json")).objects


async def shown(back_office: BackOffice, *args: str) -> dict[str, Any]:
    """`marketplace ... show ARGS --json`: its one object."""
    [found] = (await back_office.ok(*args, "--json")).objects
    return found


def columns(lines: list[str]) -> list[list[str]]:
    """Aligned text lines cut at the header's column starts; each cell must start at its column
    (the previous one padded with spaces, then the two-space gap)."""
    header = lines[0]
    starts = [found.start() for found in re.finditer(r"(?:^|(?<=  ))\S", header)]
    table = []
    for line in lines:
        cells = []
        for index, start in enumerate(starts):
            end = starts[index + 1] if index + 1 < len(starts) else len(line)
            cell = line[start:end]
            assert start == 0 or line[start - 2 : start] == "  ", (line, start)
            assert not cell.startswith(" "), (line, start)
            cells.append(cell.rstrip())
        table.append(cells)
    return table
