"""From earlier-platform rows to current-schema rows, one pure function per table.

Each mapper returns the new row, or raises `Skip` with the reason the row cannot be imported.
Values are parsed leniently (the earlier runtime stored numbers as numbers or numeric strings).
Optional references that dangle are dropped and noted; required ones skip the row.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from ulid import ULID

from marketplace.catalogue.gifts import gift_code_key

FALLBACK_TIMESTAMP = datetime(1970, 1, 1)

EARLIER_PAYMENT_STATUS = {
    "PAID": "paid",
    "UNPAID": "unpaid",
    "REFUND": "refunded",
    "DISPUTE": "disputed",
    "PENDING": "pending",
}
INVOICE_TYPE = 1
ALL_RESOURCES = -1
PROVIDER_PLACEHOLDER = "empty"

_STATS_ID = re.compile(r"^[0-9]{1,20}$")
_SNOWFLAKE = re.compile(r"^[0-9]{1,32}$")
_DATETIME_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S.%f")


class Skip(Exception):
    """A row that cannot be imported, with the reason the report gives."""


@dataclass
class Notes:
    """What was adjusted in rows that were imported (a dangling optional reference dropped, ...)."""

    adjusted: list[str] = field(default_factory=list)

    def add(self, note: str) -> None:
        self.adjusted.append(note)


# --- lenient parsing -------------------------------------------------------------------------


def as_int(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal | float):
        return int(value) if value == int(value) else None
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        return int(value)
    return None


def as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def as_flag(value: Any) -> bool:
    number = as_int(value)
    return bool(number) if number is not None else False


def as_timestamp(value: Any) -> datetime | None:
    """Naive UTC; values without a zone are UTC; MySQL's zero dates and garbage are None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    text = as_text(value)
    if text is None or text.startswith("0000-00-00"):
        return None
    text = text.strip()
    for pattern in _DATETIME_FORMATS:
        try:
            return datetime.strptime(text, pattern)
        except ValueError:
            continue
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo else parsed


def _timestamps(raw: dict[str, Any]) -> tuple[datetime, datetime]:
    created = as_timestamp(raw.get("created_at"))
    updated = as_timestamp(raw.get("updated_at"))
    created = created or updated or FALLBACK_TIMESTAMP
    return created, updated or created


def _id(raw: dict[str, Any]) -> int:
    value = as_int(raw.get("id"))
    if value is None or not 0 < value <= 2**31 - 1:
        raise Skip("malformed id")
    return value


def _required_text(raw: dict[str, Any], key: str, max_length: int) -> str:
    text = as_text(raw.get(key))
    if text is None or not text.strip():
        raise Skip(f"missing {key}")
    if len(text) > max_length:
        raise Skip(f"{key} longer than {max_length} characters")
    return text


def _optional_text(raw: dict[str, Any], key: str, max_length: int, notes: Notes) -> str | None:
    text = as_text(raw.get(key))
    if text is not None and len(text) > max_length:
        notes.add(f"{key} longer than {max_length} characters dropped")
        return None
    return text


def slugify(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug[:255] or "resource"


def payment_uid(payment_id: int, created_at: datetime) -> str:
    """A new ULID for an earlier payment, the same on every run: its time part is the payment's
    creation, its random part derived from the earlier id."""
    milliseconds = max(0, int(created_at.replace(tzinfo=UTC).timestamp() * 1000))
    entropy = hashlib.sha256(f"earlier-payment:{payment_id}".encode()).digest()[:10]
    return str(ULID.from_bytes(milliseconds.to_bytes(6, "big") + entropy))


# --- one mapper per table ----------------------------------------------------------------------


def map_user(raw: dict[str, Any], notes: Notes) -> dict[str, Any]:
    created, updated = _timestamps(raw)
    return {
        "id": _id(raw),
        "name": _required_text(raw, "name", 255),
        "email": _optional_text(raw, "email", 255, notes),
        "avatar": _optional_text(raw, "avatar", 255, notes),
        "closed": False,
        "banned": False,
        "deleted_at": None,
        "created_at": created,
        "updated_at": updated,
    }


def map_category(raw: dict[str, Any], notes: Notes) -> dict[str, Any]:
    return {"id": _id(raw), "name": _required_text(raw, "name", 255)}


@dataclass
class ResourceContext:
    users: set[int]
    categories: set[int]
    # Sum of the download counters of each resource's versions.
    downloads: dict[int, int]
    unique_ids: set[str] = field(default_factory=set)


def map_resource(raw: dict[str, Any], notes: Notes, context: ResourceContext) -> dict[str, Any]:
    resource_id = _id(raw)
    user_id = as_int(raw.get("user_id"))
    if user_id not in context.users:
        raise Skip("dangling user_id")
    name = _required_text(raw, "name", 255)
    price = _price(raw.get("price"))
    category_id = as_int(raw.get("category_id"))
    if category_id is not None and category_id not in context.categories:
        notes.add("dangling category_id dropped")
        category_id = None
    if as_flag(raw.get("is_pending")):
        status = "pending"
    elif "is_display" in raw and not as_flag(raw.get("is_display")):
        status = "unlisted"
    else:
        status = "published"
    created, updated = _timestamps(raw)
    unique_id = as_text(raw.get("unique_id")) or None
    if unique_id is not None and (len(unique_id) > 32 or unique_id in context.unique_ids):
        notes.add("duplicate or malformed unique_id dropped")
        unique_id = None
    if unique_id is not None:
        context.unique_ids.add(unique_id)
    stats_id = (as_text(raw.get("stats_id")) or "").strip() or None
    if stats_id is not None and not _STATS_ID.match(stats_id):
        notes.add("malformed stats_id dropped")
        stats_id = None
    image = (as_text(raw.get("image")) or "").strip().lstrip(".")
    tag = as_text(raw.get("tag")) or ""
    if len(tag) > 160:
        notes.add("tag cut to 160 characters")
        tag = tag[:160]
    return {
        "id": resource_id,
        "user_id": user_id,
        "category_id": category_id,
        "name": name,
        "tag": tag,
        "description": as_text(raw.get("description")) or "",
        "price": price,
        "status": status,
        "deleted_at": updated if as_flag(raw.get("deleted")) else None,
        "unique_id": unique_id,
        "stats_id": stats_id,
        "icon": f"images/{resource_id}.{image}"[:255] if image else None,
        "slug": slugify(name),
        "download": context.downloads.get(resource_id, 0),
        "current_version_id": None,
        "created_at": created,
        "updated_at": updated,
    }


def _price(value: Any) -> Decimal:
    """Whole euros of the earlier platform (or any decimal) as an amount with two decimals."""
    if value is None:
        return Decimal("0.00")
    try:
        amount = Decimal(str(value).strip() if not isinstance(value, bytes) else value.decode().strip())
    except (InvalidOperation, UnicodeDecodeError):
        raise Skip("malformed price") from None
    if not amount.is_finite() or amount < 0 or amount >= 10**8:
        raise Skip("malformed price")
    return amount.quantize(Decimal("0.01"))


def map_version(raw: dict[str, Any], notes: Notes, resources: set[int]) -> dict[str, Any]:
    version_id = _id(raw)
    resource_id = as_int(raw.get("plugin_id"))
    if resource_id not in resources:
        raise Skip("dangling plugin_id")
    created, updated = _timestamps(raw)
    title = as_text(raw.get("title")) or ""
    download = as_int(raw.get("download"))
    if download is None or download < 0:
        notes.add("malformed download counter set to 0")
        download = 0
    return {
        "id": version_id,
        "resource_id": resource_id,
        "version": _required_text(raw, "version", 32),
        "title": title[:255],
        "download": download,
        "changelog": as_text(raw.get("description")),
        "file_name": _optional_text(raw, "file", 255, notes),
        "file_size": None,
        "checksum": None,
        "created_at": created,
        "updated_at": updated,
    }


def map_chat_account(raw: dict[str, Any], notes: Notes, users: set[int], seen: set[str]) -> dict[str, Any]:
    user_id = as_int(raw.get("user_id"))
    if user_id not in users:
        raise Skip("dangling user_id")
    chat_id = (as_text(raw.get("chat_id")) or "").strip()
    if not _SNOWFLAKE.match(chat_id):
        raise Skip("malformed chat_id")
    if chat_id in seen:
        raise Skip("duplicate chat_id")
    seen.add(chat_id)
    created, _ = _timestamps(raw)
    # OAuth tokens, e-mail and profile fields of the chat account are deliberately not imported.
    return {"user_id": user_id, "chat_id": chat_id, "created_at": created}


def map_gift(
    raw: dict[str, Any], notes: Notes, owners: dict[int, int], seen_codes: set[str]
) -> dict[str, Any]:
    gift_id = _id(raw)
    code = _required_text(raw, "code", 32)
    code_key = gift_code_key(code)
    if code_key in seen_codes:
        raise Skip("duplicate code")
    percentage = as_int(raw.get("promotion"))
    if percentage is None or not 1 <= percentage <= 100:
        raise Skip("promotion outside 1..100")
    resource_id = as_int(raw.get("plugin_id"))
    if resource_id is None or resource_id in (ALL_RESOURCES, 0):
        resource_id = None
    elif resource_id not in owners:
        raise Skip("dangling plugin_id")
    max_uses = as_int(raw.get("max_use"))
    uses = as_int(raw.get("used"))
    seen_codes.add(code_key)
    created, updated = _timestamps(raw)
    return {
        "id": gift_id,
        "code": code,
        "code_key": code_key,
        "percentage": percentage,
        "enabled": as_flag(raw.get("active")),
        "starts_at": None,
        "expires_at": None,
        "max_uses": max_uses if max_uses and max_uses > 0 else None,
        "uses": uses if uses is not None and uses >= 0 else 0,
        "seller_id": owners.get(resource_id) if resource_id is not None else None,
        "resource_id": resource_id,
        "created_at": created,
        "updated_at": updated,
    }


def map_payment(
    raw: dict[str, Any], notes: Notes, users: set[int], owners: dict[int, int], gifts: set[int]
) -> dict[str, Any]:
    payment_id = _id(raw)
    status = EARLIER_PAYMENT_STATUS.get((as_text(raw.get("status")) or "").strip().upper())
    if status is None:
        raise Skip("unknown status")
    buyer_id = as_int(raw.get("user_id"))
    if buyer_id not in users:
        raise Skip("dangling user_id")
    invoice = as_int(raw.get("type")) == INVOICE_TYPE
    resource_id = None if invoice else as_int(raw.get("content_id"))
    if not invoice and resource_id not in owners:
        raise Skip("dangling content_id")
    try:
        cents = int((Decimal(str(as_text(raw.get("price")) or "0")) * 100).to_integral_value())
    except (InvalidOperation, ValueError):
        raise Skip("malformed price") from None
    if cents < 0:
        raise Skip("malformed price")
    gift_id = as_int(raw.get("gift_id"))
    if gift_id is not None and gift_id not in gifts:
        notes.add("dangling gift_id dropped")
        gift_id = None
    provider_id = (as_text(raw.get("provider_id")) or "").strip()
    created, updated = _timestamps(raw)
    return {
        "id": payment_id,
        "uid": payment_uid(payment_id, created),
        "status": status,
        "amount_cents": cents,
        "currency": "EUR",
        "base_amount_cents": None,
        "buyer_id": buyer_id,
        "seller_id": owners.get(resource_id) if resource_id is not None else None,
        "resource_id": resource_id,
        "gift_id": gift_id,
        "provider": None,
        "provider_transaction_id": provider_id[:255]
        if provider_id and provider_id != PROVIDER_PLACEHOLDER
        else None,
        "created_at": created,
        "updated_at": updated,
    }


def map_access(
    raw: dict[str, Any],
    notes: Notes,
    users: set[int],
    resources: set[int],
    payment_status: dict[int, str],
    seen_pairs: set[tuple[int, int]],
) -> dict[str, Any]:
    access_id = _id(raw)
    user_id = as_int(raw.get("user_id"))
    if user_id not in users:
        raise Skip("dangling user_id")
    resource_id = as_int(raw.get("plugin_id"))
    if resource_id not in resources:
        raise Skip("dangling plugin_id")
    if (user_id, resource_id) in seen_pairs:
        raise Skip("second access of the same member and resource")
    payment_id = as_int(raw.get("payment_id"))
    if payment_id is not None and payment_id not in payment_status:
        notes.add("dangling payment_id dropped")
        payment_id = None
    seen_pairs.add((user_id, resource_id))
    created, updated = _timestamps(raw)
    return {
        "id": access_id,
        "user_id": user_id,
        "resource_id": resource_id,
        "payment_id": payment_id,
        "source": "purchase" if payment_id is not None else "manual",
        "revoked": payment_id is not None and payment_status[payment_id] == "refunded",
        "created_at": created,
        "updated_at": updated,
    }
