"""The fixture document most contract tests run against (the loader's format)."""

from __future__ import annotations

from typing import Any

PAID_UID = "01HZY3J1Q8Y5ZQ4W2B7C9D0E1F"
REFUNDED_UID = "01M83MZYDT33TN7ZJ0375V6YCR"
MEMBER_CHAT_ID = "111111111111111111"
DELETED_MEMBER_CHAT_ID = "222222222222222222"
CLOSED_MEMBER_CHAT_ID = "333333333333333333"
OWNER_CHAT_ID = "444444444444444444"


def catalogue() -> dict[str, Any]:
    return {
        "users": [
            {"id": 1, "name": "Alice", "avatar": "avatars/1.png", "created_at": "2024-01-01T00:00:00Z"},
            {"id": 2, "name": "bob"},
            {"id": 3, "name": "Deleted Dave", "deleted": True},
            {"id": 4, "name": "Closed Carol", "closed": True},
            {"id": 5, "name": "Banned Ben", "banned": True},
            {"id": 6, "name": "alicia"},
        ],
        "chat_accounts": [
            {"user_id": 2, "chat_id": MEMBER_CHAT_ID},
            {"user_id": 3, "chat_id": DELETED_MEMBER_CHAT_ID},
            {"user_id": 4, "chat_id": CLOSED_MEMBER_CHAT_ID},
            {"user_id": 1, "chat_id": OWNER_CHAT_ID},
        ],
        "categories": [{"id": 1, "name": "Economy"}, {"id": 2, "name": "Tools"}],
        "resources": [
            {
                "id": 1,
                "user_id": 1,
                "name": "Économie/Pro",
                "tag": "Shops / banks 😀",
                "price": "9.99",
                "category_id": 1,
                "unique_id": "SERVICE_0123456789ABCDE",
                "stats_id": "1234",
                "icon": "images/1.png",
                "slug": "economie-pro",
                "download": 42,
                "version_id": 11,
                "created_at": "2024-05-01T10:00:00Z",
                "updated_at": "2024-05-02T10:00:00Z",
            },
            {
                "id": 2,
                "user_id": 1,
                "name": "Unlisted Utility",
                "tag": "hidden from search",
                "status": "unlisted",
                "price": "10.00",
                "stats_id": "1234",
            },
            {"id": 3, "user_id": 1, "name": "Draft Thing", "status": "draft"},
            {"id": 4, "user_id": 1, "name": "Pending Thing", "status": "pending"},
            {"id": 5, "user_id": 1, "name": "Rejected Thing", "status": "rejected"},
            {"id": 6, "user_id": 1, "name": "Deleted Thing", "deleted": True},
            {
                "id": 7,
                "user_id": 2,
                "name": "Free Chat",
                "tag": "chat formatting",
                "price": "0",
                "category_id": 2,
            },
            {"id": 8, "user_id": 2, "name": "Half Price", "tag": "12.5 euros", "price": "12.50"},
        ],
        "versions": [
            {
                "id": 10,
                "resource_id": 1,
                "version": "1.0.0",
                "title": "First",
                "download": 5,
                "changelog": "secret changelog",
                "file_name": "eco.jar",
                "file_size": 1000,
                "checksum": "abc",
                "created_at": "2024-05-01T10:00:00Z",
            },
            {
                "id": 11,
                "resource_id": 1,
                "version": "1.1.0",
                "title": "Second",
                "download": 7,
                "created_at": "2024-05-03T10:00:00Z",
            },
            {
                "id": 12,
                "resource_id": 1,
                "version": "2.0.0-beta",
                "title": "Not promoted",
                "download": 0,
                "created_at": "2024-05-04T10:00:00Z",
            },
        ],
        "reviews": [
            {"id": 1, "resource_id": 1, "user_id": 2, "rating": 5},
            {"id": 2, "resource_id": 1, "user_id": 6, "rating": 4},
        ],
        "gifts": [
            {"id": 1, "code": "WELCOME10", "percentage": 10},
            {"id": 2, "code": "OFF", "percentage": 20, "enabled": False},
            {"id": 3, "code": "OLD", "percentage": 30, "expires_at": "2020-01-01T00:00:00Z"},
            {"id": 4, "code": "LATER", "percentage": 40, "starts_at": "2999-01-01T00:00:00Z"},
            {"id": 5, "code": "USEDUP", "percentage": 50, "max_uses": 3, "uses": 3},
        ],
        "payments": [
            {
                "id": 1,
                "uid": PAID_UID,
                "status": "paid",
                "amount_cents": 999,
                "buyer_id": 2,
                "seller_id": 1,
                "resource_id": 1,
                "provider": "paypal",
                "provider_transaction_id": "PAYID-123",
            },
            {
                "id": 2,
                "uid": REFUNDED_UID,
                "status": "refunded",
                "amount_cents": 1000,
                "currency": "USD",
                "buyer_id": 6,
                "seller_id": 1,
                "resource_id": 1,
            },
        ],
        "accesses": [
            {"id": 1, "user_id": 2, "resource_id": 1, "payment_id": 1, "source": "purchase"},
            {"id": 2, "user_id": 6, "resource_id": 1, "payment_id": 2, "source": "purchase", "revoked": True},
            {"id": 3, "user_id": 2, "resource_id": 7, "source": "manual"},
            {"id": 4, "user_id": 2, "resource_id": 8, "source": "gift", "revoked": True},
        ],
    }
