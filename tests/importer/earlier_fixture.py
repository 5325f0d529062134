"""An earlier-platform database holding every case of the import mapping, built on any URL."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import create_engine, insert

from marketplace.importer.earlier_schema import earlier_metadata
from marketplace.importer.source import source_url

T0 = datetime(2021, 3, 4, 5, 6, 7)
T1 = datetime(2021, 6, 1, 12, 0, 0)


def _stamp(row: dict[str, Any]) -> dict[str, Any]:
    return {"created_at": T0, "updated_at": T1, **row}


EARLIER_ROWS: dict[str, list[dict[str, Any]]] = {
    "users": [
        _stamp({"id": 1, "name": "author", "email": "author@example.net", "avatar": "avatars/1.png"}),
        _stamp({"id": 2, "name": "buyer", "email": "buyer@example.net", "avatar": None}),
        _stamp({"id": 3, "name": "refunded buyer", "email": "r@example.net", "avatar": None}),
        _stamp({"id": 4, "name": "", "email": "nameless@example.net", "avatar": None}),  # malformed
    ],
    "categories": [{"id": 1, "name": "Economy"}],
    "plugins": [
        # published, with icon, identifiers, price, current version 11 (of 10, 11)
        _stamp(
            {
                "id": 100,
                "name": "Shops",
                "price": 5,
                "image": "png",
                "description": "Sells things",
                "tag": "Shops / more",
                "user_id": 1,
                "is_display": 1,
                "file": "shops.jar",
                "version_id": 11,
                "deleted": 0,
                "category_id": 1,
                "is_pending": 0,
                "unique_id": "SERVICE_0123456789ABCDE",
                "is_unique": 0,
                "stats_id": "4321",
            }
        ),
        # hidden: unlisted, still resolvable by id; never-set version pointer; free; no image
        _stamp(
            {
                "id": 101,
                "name": "Hidden",
                "price": 0,
                "image": None,
                "description": "",
                "tag": None,
                "user_id": 1,
                "is_display": 0,
                "file": None,
                "version_id": -1,
                "deleted": 0,
                "category_id": 1,
                "is_pending": 0,
                "unique_id": None,
                "is_unique": 0,
                "stats_id": "",
            }
        ),
        # pending moderation
        _stamp(
            {
                "id": 102,
                "name": "Waiting",
                "price": 3,
                "image": "jpg",
                "description": "",
                "tag": "t",
                "user_id": 1,
                "is_display": 1,
                "file": None,
                "version_id": 999,
                "deleted": 0,
                "category_id": 1,
                "is_pending": 1,
                "unique_id": None,
                "is_unique": 0,
                "stats_id": None,
            }
        ),
        # deleted
        _stamp(
            {
                "id": 103,
                "name": "Gone",
                "price": 0,
                "image": None,
                "description": "",
                "tag": "t",
                "user_id": 1,
                "is_display": 1,
                "file": None,
                "version_id": -1,
                "deleted": 1,
                "category_id": 1,
                "is_pending": 0,
                "unique_id": None,
                "is_unique": 0,
                "stats_id": None,
            }
        ),
        # dangling author: skipped
        _stamp(
            {
                "id": 104,
                "name": "Orphan",
                "price": 0,
                "image": None,
                "description": "",
                "tag": "t",
                "user_id": 77,
                "is_display": 1,
                "file": None,
                "version_id": -1,
                "deleted": 0,
                "category_id": 1,
                "is_pending": 0,
                "unique_id": None,
                "is_unique": 0,
                "stats_id": None,
            }
        ),
        # points at a version of another plugin: pointer becomes null
        _stamp(
            {
                "id": 105,
                "name": "Crossed",
                "price": 0,
                "image": None,
                "description": "",
                "tag": "t",
                "user_id": 1,
                "is_display": 1,
                "file": None,
                "version_id": 10,
                "deleted": 0,
                "category_id": 1,
                "is_pending": 0,
                "unique_id": None,
                "is_unique": 0,
                "stats_id": None,
            }
        ),
    ],
    "versions": [
        _stamp(
            {
                "id": 10,
                "version": "1.0",
                "plugin_id": 100,
                "download": 30,
                "title": "First",
                "extension": "jar",
                "description": "secret changelog",
                "file": "v10.jar",
            }
        ),
        _stamp(
            {
                "id": 11,
                "version": "1.1",
                "plugin_id": 100,
                "download": 12,
                "title": "Second",
                "extension": "jar",
                "description": "more",
                "file": "v11.jar",
            }
        ),
        _stamp(
            {
                "id": 12,
                "version": "9.9",
                "plugin_id": 555,
                "download": 1,
                "title": "Dangling",
                "extension": "jar",
                "description": "",
                "file": None,
            }
        ),  # dangling plugin: skipped
    ],
    "chat_accounts": [
        _stamp(
            {
                "id": 1,
                "user_id": 2,
                "chat_id": "123456789012345678",
                "access_token": "ACCESS-TOKEN-SECRET",
                "refresh_token": "REFRESH-TOKEN-SECRET",
                "expired_at": T1,
                "username": "buyer#1",
                "email": "chat-email@example.net",
                "discriminator": "0001",
                "avatar": None,
                "is_valid": 1,
            }
        ),
        _stamp(
            {
                "id": 2,
                "user_id": 3,
                "chat_id": "223456789012345678",
                "access_token": "t",
                "refresh_token": "r",
                "expired_at": T1,
                "username": "r",
                "email": "r2@example.net",
                "discriminator": "0002",
                "avatar": None,
                "is_valid": 1,
            }
        ),
        _stamp(
            {
                "id": 3,
                "user_id": 99,
                "chat_id": "323456789012345678",
                "access_token": "t",
                "refresh_token": "r",
                "expired_at": T1,
                "username": "x",
                "email": "x@example.net",
                "discriminator": "0003",
                "avatar": None,
                "is_valid": 1,
            }
        ),  # dangling user: skipped
    ],
    "gifts": [
        _stamp(
            {
                "id": 1,
                "code": "ALLPLUGINS",
                "plugin_id": -1,
                "promotion": 15,
                "used": 2,
                "max_use": 0,
                "active": 1,
            }
        ),
        _stamp(
            {
                "id": 2,
                "code": "SHOPSONLY",
                "plugin_id": 100,
                "promotion": 50,
                "used": 5,
                "max_use": 5,
                "active": 1,
            }
        ),
        _stamp(
            {"id": 3, "code": "OFF", "plugin_id": -1, "promotion": 10, "used": 0, "max_use": 0, "active": 0}
        ),
        _stamp(
            {"id": 4, "code": "BROKEN", "plugin_id": -1, "promotion": 0, "used": 0, "max_use": 0, "active": 1}
        ),
    ],
    "payments": [
        _stamp(
            {
                "id": 1,
                "user_id": 2,
                "provider_id": "PAYID-1",
                "uid": "TO DELETE",
                "status": "PAID",
                "price": 5,
                "gift_id": None,
                "type": 0,
                "content_id": 100,
            }
        ),
        _stamp(
            {
                "id": 2,
                "user_id": 3,
                "provider_id": "PAYID-2",
                "uid": "TO DELETE",
                "status": "REFUND",
                "price": 5,
                "gift_id": 2,
                "type": 0,
                "content_id": 100,
            }
        ),
        _stamp(
            {
                "id": 3,
                "user_id": 2,
                "provider_id": "empty",
                "uid": "x" * 64,
                "status": "UNPAID",
                "price": 20,
                "gift_id": None,
                "type": 1,
                "content_id": None,
            }
        ),  # an invoice
        _stamp(
            {
                "id": 4,
                "user_id": 2,
                "provider_id": "empty",
                "uid": "TO DELETE",
                "status": "DISPUTE",
                "price": 3,
                "gift_id": None,
                "type": 0,
                "content_id": 102,
            }
        ),
        _stamp(
            {
                "id": 5,
                "user_id": 2,
                "provider_id": "PAYID-5",
                "uid": "TO DELETE",
                "status": "PENDING",
                "price": 5,
                "gift_id": None,
                "type": 0,
                "content_id": 100,
            }
        ),
        _stamp(
            {
                "id": 6,
                "user_id": 2,
                "provider_id": "PAYID-6",
                "uid": "TO DELETE",
                "status": "LOST",
                "price": 5,
                "gift_id": None,
                "type": 0,
                "content_id": 100,
            }
        ),  # unknown status: skipped
    ],
    "accesses": [
        _stamp({"id": 1, "user_id": 2, "plugin_id": 100, "payment_id": 1}),  # purchase
        _stamp({"id": 2, "user_id": 3, "plugin_id": 100, "payment_id": 2}),  # refunded: revoked
        _stamp({"id": 3, "user_id": 2, "plugin_id": 101, "payment_id": None}),  # manual
        _stamp(
            {"id": 4, "user_id": 2, "plugin_id": 100, "payment_id": None}
        ),  # second of the same pair: skipped
        _stamp({"id": 5, "user_id": 2, "plugin_id": 404, "payment_id": None}),  # dangling plugin: skipped
    ],
    "licences": [{"id": 1, "key": "ABCDEFGHIJKLMNO", "plugin_id": 100, "expired_at": None}],
}


def build_earlier_database(url: str) -> None:
    engine = create_engine(source_url(url))
    earlier_metadata.drop_all(engine)
    earlier_metadata.create_all(engine)
    with engine.begin() as connection:
        for name, rows in EARLIER_ROWS.items():
            connection.execute(insert(earlier_metadata.tables[name]), rows)
    engine.dispose()
