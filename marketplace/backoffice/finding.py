"""Finding rows for the operator: the back office's `list` and `show` of every area.

Nothing here writes, and nothing is logged. Each command reads in one short read-only
transaction (`snapshot`): PostgreSQL's repeatable read, SQLite's deferred transaction on its
WAL snapshot, so that a `show` and its sections tell one state of the data.

A list keeps the rows every filter given keeps (the filters combine), newest first (by creation
time, then id), at most `limit` of them. A row is a mapping of JSON values, the same for the
text columns and the JSON lines; a `show` is a `Found`: the row's fields, then its sections.

Filters are checked before anything is read: an invalid one is a `Refused` naming the option as
the operator typed it (`--status: ...`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement, and_, exists, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.orm import aliased

from marketplace.backoffice.actions import Refused, timestamp
from marketplace.backoffice.activity import DEFAULT_LIMIT, Entry, parse_limit, parse_time
from marketplace.backoffice.values import parse_id
from marketplace.catalogue.gifts import code_key_of
from marketplace.catalogue.members import CHAT_ID_LENGTH
from marketplace.catalogue.payments import is_ulid
from marketplace.catalogue.resources import MAX_ID
from marketplace.models import (
    Access,
    AccessSource,
    Activity,
    Category,
    ChatAccount,
    Gift,
    Payment,
    PaymentStatus,
    Resource,
    ResourceStatus,
    User,
    Version,
    utcnow,
)

Row = dict[str, Any]

_PAYMENT_STATUSES = tuple(status.value for status in PaymentStatus)
_RESOURCE_STATUSES = tuple(status.value for status in ResourceStatus)
_ACCESS_SOURCES = tuple(source.value for source in AccessSource)
_LIKE_ESCAPE = "\\"
# The events a payment's own log entries carry (`payment.confirmed`, `payment.refunded`, ...).
_PAYMENT_EVENTS = "payment."


@dataclass(frozen=True)
class Section:
    """A list under a shown row (its versions, its accesses); `text_columns`, when given, are the
    columns the text shows of rows that hold more (a changelog is for `--json`), and `lines` the
    text of rows that read better as lines (log entries)."""

    name: str
    rows: Sequence[Row]
    text_columns: tuple[str, ...] | None = None
    lines: Sequence[str] | None = None


@dataclass(frozen=True)
class Found:
    """One row shown: its fields in order, then its sections."""

    fields: Row
    sections: Sequence[Section] = field(default_factory=tuple)

    def as_json(self) -> dict[str, Any]:
        return {**self.fields, **{section.name: list(section.rows) for section in self.sections}}


class NotFound(Refused):
    """A `show` of an id or code that names nothing."""


@asynccontextmanager
async def snapshot(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """One read-only transaction, rolled back: every read of a command sees one committed state."""
    async with engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            await connection.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
        else:
            # The SQLite driver begins a transaction before a write only: begin one for the reads.
            await connection.exec_driver_sql("BEGIN")
        try:
            yield connection
        finally:
            await connection.rollback()


# The filters, as the operator types them.


def filter_id(text: str, option: str) -> int:
    value = parse_id(text)
    if value is None:
        raise Refused(f"{option}: invalid id {text!r}: a whole number from 1 to {MAX_ID}")
    return value


def filter_limit(text: str | None) -> int:
    return parse_limit(text) if text is not None else DEFAULT_LIMIT


def one_of(text: str, choices: tuple[str, ...], option: str, what: str) -> str:
    value = text.strip().lower()
    if value not in choices:
        raise Refused(f"{option}: invalid {what} {text!r}: one of {', '.join(choices)}")
    return value


def time_range(since: str | None, until: str | None) -> tuple[datetime | None, datetime | None]:
    """`--since` and `--until` as `marketplace activity` reads them: ISO 8601 or a duration ago."""
    now = utcnow()
    lower = parse_time(since, now, "--since") if since is not None else None
    upper = parse_time(until, now, "--until") if until is not None else None
    if lower is not None and upper is not None and lower >= upper:
        raise Refused(f"--since: {since!r} is not before --until {until!r}: nothing can match")
    return lower, upper


def filter_text(text: str, option: str) -> str:
    if not text:
        raise Refused(f"{option}: give at least one character")
    if len(text) > 255:
        raise Refused(f"{option}: at most 255 characters")
    return text


def chat_id_filter(text: str) -> str:
    value = text.strip()
    if not value.isascii() or not value.isdigit() or len(value) > CHAT_ID_LENGTH:
        raise Refused(f"--chat: invalid chat id {text!r}: a snowflake, 1 to {CHAT_ID_LENGTH} digits (0-9)")
    return value


def _like_pattern(text: str, *, prefix: bool) -> str:
    escaped = (
        text.lower()
        .replace(_LIKE_ESCAPE, _LIKE_ESCAPE * 2)
        .replace("%", _LIKE_ESCAPE + "%")
        .replace("_", _LIKE_ESCAPE + "_")
    )
    return escaped + "%" if prefix else "%" + escaped + "%"


# Payments


@dataclass(frozen=True)
class PaymentFilters:
    status: str | None = None
    user_id: int | None = None
    resource_id: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = DEFAULT_LIMIT

    @classmethod
    def from_options(
        cls,
        *,
        status: str | None,
        user: str | None,
        resource: str | None,
        since: str | None,
        until: str | None,
        limit: str | None,
    ) -> PaymentFilters:
        lower, upper = time_range(since, until)
        return cls(
            status=one_of(status, _PAYMENT_STATUSES, "--status", "status") if status is not None else None,
            user_id=filter_id(user, "--user") if user is not None else None,
            resource_id=filter_id(resource, "--resource") if resource is not None else None,
            since=lower,
            until=upper,
            limit=filter_limit(limit),
        )


_buyer = aliased(User, name="buyer")
_seller = aliased(User, name="seller")


async def list_payments(connection: AsyncConnection, filters: PaymentFilters) -> list[Row]:
    """Payments, newest first; `user` is the buyer."""
    conditions: list[ColumnElement[bool]] = []
    if filters.status is not None:
        conditions.append(Payment.status == filters.status)
    if filters.user_id is not None:
        conditions.append(Payment.buyer_id == filters.user_id)
    if filters.resource_id is not None:
        conditions.append(Payment.resource_id == filters.resource_id)
    if filters.since is not None:
        conditions.append(Payment.created_at >= filters.since)
    if filters.until is not None:
        conditions.append(Payment.created_at < filters.until)
    statement = (
        select(
            Payment.uid,
            Payment.status,
            Payment.amount_cents,
            Payment.currency,
            Payment.buyer_id,
            _buyer.name.label("buyer_name"),
            Payment.resource_id,
            Resource.name.label("resource_name"),
            Payment.created_at,
        )
        .outerjoin(_buyer, _buyer.id == Payment.buyer_id)
        .outerjoin(Resource, Resource.id == Payment.resource_id)
        .where(*conditions)
        .order_by(Payment.created_at.desc(), Payment.id.desc())
        .limit(filters.limit)
    )
    return [
        {
            "uid": row.uid,
            "status": row.status,
            "amount": _amount(row.amount_cents),
            "currency": row.currency,
            "buyer_id": row.buyer_id,
            "buyer_name": row.buyer_name,
            "resource_id": row.resource_id,
            "resource_name": row.resource_name,
            "created_at": timestamp(row.created_at),
        }
        for row in await connection.execute(statement)
    ]


async def show_payment(connection: AsyncConnection, uid: str) -> Found:
    """The payment, its buyer, seller and resource, the access it backs and its log entries."""
    reference = uid.strip().upper()
    row = None
    if is_ulid(reference):
        row = (
            await connection.execute(
                select(
                    Payment,
                    _buyer.name.label("buyer_name"),
                    _seller.name.label("seller_name"),
                    Resource.name.label("resource_name"),
                    Gift.code.label("gift_code"),
                )
                .outerjoin(_buyer, _buyer.id == Payment.buyer_id)
                .outerjoin(_seller, _seller.id == Payment.seller_id)
                .outerjoin(Resource, Resource.id == Payment.resource_id)
                .outerjoin(Gift, Gift.id == Payment.gift_id)
                .where(Payment.uid == reference)
            )
        ).one_or_none()
    if row is None:
        raise NotFound(f"no payment {uid!r}")
    fields = {
        "uid": row.uid,
        "id": row.id,
        "status": row.status,
        "amount": _amount(row.amount_cents),
        "base_amount": _amount(row.base_amount_cents),
        "currency": row.currency,
        "buyer_id": row.buyer_id,
        "buyer_name": row.buyer_name,
        "seller_id": row.seller_id,
        "seller_name": row.seller_name,
        "resource_id": row.resource_id,
        "resource_name": row.resource_name,
        "gift_id": row.gift_id,
        "gift_code": row.gift_code,
        "provider": row.provider,
        "provider_transaction_id": row.provider_transaction_id,
        "created_at": timestamp(row.created_at),
        "updated_at": timestamp(row.updated_at),
    }
    accesses = await _access_rows(connection, Access.payment_id == row.id)
    # The payment's entries are about its buyer and resource; the index of either finds them.
    about = [
        Activity.event.startswith(_PAYMENT_EVENTS, autoescape=True),
        Activity.user_id == row.buyer_id if row.buyer_id is not None else Activity.user_id.is_(None),
        Activity.resource_id == row.resource_id
        if row.resource_id is not None
        else Activity.resource_id.is_(None),
    ]
    entries = [
        entry
        for entry in await _entries(connection, and_(*about))
        if (entry.properties.get("subject") or {}).get("payment") == row.uid
    ]
    return Found(
        fields,
        (
            Section("accesses", accesses),
            Section(
                "activity",
                [entry.as_json() for entry in entries],
                lines=[entry.as_line() for entry in entries],
            ),
        ),
    )


# Users


@dataclass(frozen=True)
class UserFilters:
    name_prefix: str | None = None
    chat_id: str | None = None
    banned: bool = False
    closed: bool = False
    limit: int = DEFAULT_LIMIT

    @classmethod
    def from_options(
        cls, *, name: str | None, chat: str | None, banned: bool, closed: bool, limit: str | None
    ) -> UserFilters:
        return cls(
            name_prefix=filter_text(name, "--name") if name is not None else None,
            chat_id=chat_id_filter(chat) if chat is not None else None,
            banned=banned,
            closed=closed,
            limit=filter_limit(limit),
        )


def _first_chat_id() -> Any:
    # The account the author object shows: the one linked first.
    return (
        select(ChatAccount.chat_id)
        .where(ChatAccount.user_id == User.id)
        .order_by(ChatAccount.id)
        .limit(1)
        .scalar_subquery()
    )


async def list_users(connection: AsyncConnection, filters: UserFilters) -> list[Row]:
    """Users, soft-deleted ones included, newest first; `name` a prefix without regard to case."""
    conditions: list[ColumnElement[bool]] = []
    if filters.name_prefix is not None:
        pattern = _like_pattern(filters.name_prefix, prefix=True)
        conditions.append(func.lower(User.name).like(pattern, escape=_LIKE_ESCAPE))
    if filters.chat_id is not None:
        conditions.append(
            exists().where(ChatAccount.user_id == User.id, ChatAccount.chat_id == filters.chat_id)
        )
    if filters.banned:
        conditions.append(User.banned.is_(True))
    if filters.closed:
        conditions.append(User.closed.is_(True))
    statement = (
        select(
            User.id,
            User.name,
            _first_chat_id().label("chat"),
            User.banned,
            User.closed,
            User.deleted_at,
            User.created_at,
        )
        .where(*conditions)
        .order_by(User.created_at.desc(), User.id.desc())
        .limit(filters.limit)
    )
    return [
        {
            "id": row.id,
            "name": row.name,
            "chat": row.chat,
            "banned": row.banned,
            "closed": row.closed,
            "deleted_at": _time(row.deleted_at),
            "created_at": timestamp(row.created_at),
        }
        for row in await connection.execute(statement)
    ]


async def show_user(connection: AsyncConnection, reference: str) -> Found:
    """The account, its linked chat accounts, its accesses, the resources it wrote, its payments."""
    user = await _by_id(connection, User, reference, "user")
    fields = {
        "id": user.id,
        "name": user.name,
        "email": user.email,
        "avatar": user.avatar,
        "banned": user.banned,
        "closed": user.closed,
        "deleted_at": _time(user.deleted_at),
        "created_at": timestamp(user.created_at),
        "updated_at": timestamp(user.updated_at),
    }
    chat_accounts = [
        {"chat_id": row.chat_id, "linked_at": timestamp(row.created_at)}
        for row in await connection.execute(
            select(ChatAccount.chat_id, ChatAccount.created_at)
            .where(ChatAccount.user_id == user.id)
            .order_by(ChatAccount.id)
        )
    ]
    resources = [
        {
            "id": row.id,
            "name": row.name,
            "status": row.status,
            "price": str(row.price),
            "deleted_at": _time(row.deleted_at),
            "created_at": timestamp(row.created_at),
        }
        for row in await connection.execute(
            select(
                Resource.id,
                Resource.name,
                Resource.status,
                Resource.price,
                Resource.deleted_at,
                Resource.created_at,
            )
            .where(Resource.user_id == user.id)
            .order_by(Resource.created_at.desc(), Resource.id.desc())
        )
    ]
    payments = [
        {
            "uid": row.uid,
            "status": row.status,
            "amount": _amount(row.amount_cents),
            "currency": row.currency,
            "resource_id": row.resource_id,
            "resource_name": row.resource_name,
            "created_at": timestamp(row.created_at),
        }
        for row in await connection.execute(
            select(
                Payment.uid,
                Payment.status,
                Payment.amount_cents,
                Payment.currency,
                Payment.resource_id,
                Resource.name.label("resource_name"),
                Payment.created_at,
            )
            .outerjoin(Resource, Resource.id == Payment.resource_id)
            .where(Payment.buyer_id == user.id)
            .order_by(Payment.created_at.desc(), Payment.id.desc())
        )
    ]
    return Found(
        fields,
        (
            Section("chat_accounts", chat_accounts),
            Section(
                "accesses",
                await _access_rows(connection, Access.user_id == user.id),
                text_columns=(
                    "id",
                    "resource_id",
                    "resource_name",
                    "source",
                    "revoked",
                    "payment_uid",
                    "created_at",
                    "updated_at",
                ),
            ),
            Section("resources", resources),
            Section("payments", payments),
        ),
    )


# Resources


@dataclass(frozen=True)
class ResourceFilters:
    status: str | None = None
    author_id: int | None = None
    name_part: str | None = None
    limit: int = DEFAULT_LIMIT

    @classmethod
    def from_options(
        cls, *, status: str | None, author: str | None, name: str | None, limit: str | None
    ) -> ResourceFilters:
        return cls(
            status=one_of(status, _RESOURCE_STATUSES, "--status", "status") if status is not None else None,
            author_id=filter_id(author, "--author") if author is not None else None,
            name_part=filter_text(name, "--name") if name is not None else None,
            limit=filter_limit(limit),
        )


async def list_resources(connection: AsyncConnection, filters: ResourceFilters) -> list[Row]:
    """Resources, soft-deleted ones included, newest first; `name` a part, without regard to case."""
    conditions: list[ColumnElement[bool]] = []
    if filters.status is not None:
        conditions.append(Resource.status == filters.status)
    if filters.author_id is not None:
        conditions.append(Resource.user_id == filters.author_id)
    if filters.name_part is not None:
        pattern = _like_pattern(filters.name_part, prefix=False)
        conditions.append(func.lower(Resource.name).like(pattern, escape=_LIKE_ESCAPE))
    statement = (
        select(
            Resource.id,
            Resource.name,
            Resource.user_id,
            User.name.label("author_name"),
            Resource.status,
            Resource.price,
            Version.version.label("current_version"),
            Resource.deleted_at,
            Resource.created_at,
        )
        .join(User, User.id == Resource.user_id)
        .outerjoin(Version, Version.id == Resource.current_version_id)
        .where(*conditions)
        .order_by(Resource.created_at.desc(), Resource.id.desc())
        .limit(filters.limit)
    )
    return [
        {
            "id": row.id,
            "name": row.name,
            "author_id": row.user_id,
            "author_name": row.author_name,
            "status": row.status,
            "price": str(row.price),
            "current_version": row.current_version,
            "deleted_at": _time(row.deleted_at),
            "created_at": timestamp(row.created_at),
        }
        for row in await connection.execute(statement)
    ]


async def show_resource(connection: AsyncConnection, reference: str) -> Found:
    """Every field of the resource, its versions (newest first, the current one marked) and how
    many accesses of each source it has."""
    resource = await _by_id(connection, Resource, reference, "resource")
    names = (
        await connection.execute(
            select(User.name.label("author_name"), Category.name.label("category_name"))
            .select_from(Resource)
            .join(User, User.id == Resource.user_id)
            .outerjoin(Category, Category.id == Resource.category_id)
            .where(Resource.id == resource.id)
        )
    ).one()
    fields = {
        "id": resource.id,
        "name": resource.name,
        "author_id": resource.user_id,
        "author_name": names.author_name,
        "status": resource.status,
        "deleted_at": _time(resource.deleted_at),
        "price": str(resource.price),
        "category_id": resource.category_id,
        "category_name": names.category_name,
        "tag": resource.tag,
        "description": resource.description,
        "unique_id": resource.unique_id,
        "stats_id": resource.stats_id,
        "icon": resource.icon,
        "slug": resource.slug,
        "download": resource.download,
        "current_version_id": resource.current_version_id,
        "created_at": timestamp(resource.created_at),
        "updated_at": timestamp(resource.updated_at),
    }
    versions = [
        {
            "id": row.id,
            "version": row.version,
            "current": row.id == resource.current_version_id,
            "title": row.title,
            "download": row.download,
            "file_name": row.file_name,
            "file_size": row.file_size,
            "checksum": row.checksum,
            "changelog": row.changelog,
            "created_at": timestamp(row.created_at),
        }
        for row in await connection.execute(
            select(Version)
            .where(Version.resource_id == resource.id)
            .order_by(Version.created_at.desc(), Version.id.desc())
        )
    ]
    counted = {
        (row.source, row.revoked): row.count
        for row in await connection.execute(
            select(Access.source, Access.revoked, func.count().label("count"))
            .where(Access.resource_id == resource.id)
            .group_by(Access.source, Access.revoked)
        )
    }
    accesses = [
        {
            "source": source,
            "active": counted.get((source, False), 0),
            "revoked": counted.get((source, True), 0),
        }
        for source in _ACCESS_SOURCES
    ]
    return Found(
        fields,
        (
            Section(
                "versions",
                versions,
                text_columns=("id", "version", "current", "title", "download", "file_name", "created_at"),
            ),
            Section("accesses", accesses),
        ),
    )


# Gift codes


@dataclass(frozen=True)
class GiftFilters:
    seller_id: int | None = None
    active: bool = False
    limit: int = DEFAULT_LIMIT

    @classmethod
    def from_options(cls, *, seller: str | None, active: bool, limit: str | None) -> GiftFilters:
        return cls(
            seller_id=filter_id(seller, "--seller") if seller is not None else None,
            active=active,
            limit=filter_limit(limit),
        )


def _applicable(now: datetime) -> ColumnElement[bool]:
    # The API's rule (`catalogue.gifts.is_applicable`), as a condition.
    return and_(
        Gift.enabled.is_(True),
        or_(Gift.starts_at.is_(None), Gift.starts_at <= now),
        or_(Gift.expires_at.is_(None), Gift.expires_at > now),
        or_(Gift.max_uses.is_(None), Gift.uses < Gift.max_uses),
    )


async def list_gifts(connection: AsyncConnection, filters: GiftFilters) -> list[Row]:
    """Gift codes, newest first; `active` keeps those that apply now, as the API applies them."""
    now = utcnow()
    conditions: list[ColumnElement[bool]] = []
    if filters.seller_id is not None:
        conditions.append(Gift.seller_id == filters.seller_id)
    if filters.active:
        conditions.append(_applicable(now))
    statement = (
        select(Gift, _applicable(now).label("active"))
        .where(*conditions)
        .order_by(Gift.created_at.desc(), Gift.id.desc())
        .limit(filters.limit)
    )
    return [
        {
            "code": row.code,
            "id": row.id,
            "percentage": row.percentage,
            "enabled": row.enabled,
            "active": bool(row.active),
            "uses": row.uses,
            "quota": row.max_uses,
            "seller_id": row.seller_id,
            "resource_id": row.resource_id,
            "starts_at": _time(row.starts_at),
            "expires_at": _time(row.expires_at),
            "created_at": timestamp(row.created_at),
        }
        for row in await connection.execute(statement)
    ]


async def show_gift(connection: AsyncConnection, code: str) -> Found:
    """Every stored field of the gift code (found as the API finds it), and whether it applies now."""
    now = utcnow()
    row = None
    code_key = code_key_of(code)
    if code_key is not None:
        row = (
            await connection.execute(
                select(
                    Gift,
                    _applicable(now).label("active"),
                    _seller.name.label("seller_name"),
                    Resource.name.label("resource_name"),
                )
                .outerjoin(_seller, _seller.id == Gift.seller_id)
                .outerjoin(Resource, Resource.id == Gift.resource_id)
                .where(Gift.code_key == code_key)
            )
        ).one_or_none()
    if row is None:
        raise NotFound(f"no gift code {code!r}")
    return Found(
        {
            "code": row.code,
            "id": row.id,
            "code_key": row.code_key,
            "percentage": row.percentage,
            "enabled": row.enabled,
            "active": bool(row.active),
            "uses": row.uses,
            "quota": row.max_uses,
            "starts_at": _time(row.starts_at),
            "expires_at": _time(row.expires_at),
            "seller_id": row.seller_id,
            "seller_name": row.seller_name,
            "resource_id": row.resource_id,
            "resource_name": row.resource_name,
            "created_at": timestamp(row.created_at),
            "updated_at": timestamp(row.updated_at),
        }
    )


# Accesses


@dataclass(frozen=True)
class AccessFilters:
    user_id: int | None = None
    resource_id: int | None = None
    source: str | None = None
    revoked: bool = False
    limit: int = DEFAULT_LIMIT

    @classmethod
    def from_options(
        cls, *, user: str | None, resource: str | None, source: str | None, revoked: bool, limit: str | None
    ) -> AccessFilters:
        return cls(
            user_id=filter_id(user, "--user") if user is not None else None,
            resource_id=filter_id(resource, "--resource") if resource is not None else None,
            source=one_of(source, _ACCESS_SOURCES, "--source", "source") if source is not None else None,
            revoked=revoked,
            limit=filter_limit(limit),
        )


async def list_accesses(connection: AsyncConnection, filters: AccessFilters) -> list[Row]:
    """Accesses, active and revoked (only revoked with `revoked`), newest first."""
    conditions: list[ColumnElement[bool]] = []
    if filters.user_id is not None:
        conditions.append(Access.user_id == filters.user_id)
    if filters.resource_id is not None:
        conditions.append(Access.resource_id == filters.resource_id)
    if filters.source is not None:
        conditions.append(Access.source == filters.source)
    if filters.revoked:
        conditions.append(Access.revoked.is_(True))
    return await _access_rows(connection, *conditions, limit=filters.limit)


async def show_access(connection: AsyncConnection, reference: str) -> Found:
    """The access, its member, resource and payment, and its activity-log entries."""
    access_id = parse_id(reference)
    rows = [] if access_id is None else await _access_rows(connection, Access.id == access_id)
    if not rows:
        raise NotFound(f"no access {reference!r}")
    entries = await _entries(connection, Activity.access_id == access_id)
    return Found(
        rows[0],
        (
            Section(
                "activity",
                [entry.as_json() for entry in entries],
                lines=[entry.as_line() for entry in entries],
            ),
        ),
    )


async def _access_rows(
    connection: AsyncConnection, *conditions: ColumnElement[bool], limit: int | None = None
) -> list[Row]:
    statement = (
        select(
            Access.id,
            Access.user_id,
            User.name.label("user_name"),
            Access.resource_id,
            Resource.name.label("resource_name"),
            Access.source,
            Access.revoked,
            Payment.uid.label("payment_uid"),
            Access.created_at,
            Access.updated_at,
        )
        .join(User, User.id == Access.user_id)
        .join(Resource, Resource.id == Access.resource_id)
        .outerjoin(Payment, Payment.id == Access.payment_id)
        .where(*conditions)
        .order_by(Access.created_at.desc(), Access.id.desc())
    )
    if limit is not None:
        statement = statement.limit(limit)
    return [
        {
            "id": row.id,
            "user_id": row.user_id,
            "user_name": row.user_name,
            "resource_id": row.resource_id,
            "resource_name": row.resource_name,
            "source": row.source,
            "revoked": row.revoked,
            "payment_uid": row.payment_uid,
            "created_at": timestamp(row.created_at),
            "updated_at": timestamp(row.updated_at),
        }
        for row in await connection.execute(statement)
    ]


async def _entries(connection: AsyncConnection, condition: ColumnElement[bool]) -> list[Entry]:
    result = await connection.execute(
        select(Activity).where(condition).order_by(Activity.created_at.desc(), Activity.id.desc())
    )
    return [
        Entry(
            id=row.id,
            at=row.created_at,
            event=row.event,
            actor=row.actor,
            via=row.via,
            user_id=row.user_id,
            resource_id=row.resource_id,
            access_id=row.access_id,
            ip_hash=row.ip_hash,
            properties=row.properties or {},
        )
        for row in result
    ]


async def _by_id(connection: AsyncConnection, model: type[Any], reference: str, what: str) -> Any:
    row_id = parse_id(reference)
    row = None
    if row_id is not None:
        row = (await connection.execute(select(model).where(model.id == row_id))).one_or_none()
    if row is None:
        raise NotFound(f"no {what} {reference!r}")
    return row


def _amount(cents: int | None) -> str | None:
    return None if cents is None else str(Decimal(cents).scaleb(-2))


def _time(value: datetime | None) -> str | None:
    return None if value is None else timestamp(value)
