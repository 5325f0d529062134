"""Users as the API shows them: name lookup, authors, and members found by their chat account."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Integer, Select, String, bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from marketplace.database.readers import Read, Reader
from marketplace.models import Access, ChatAccount, User

NAME_LOOKUP_LIMIT = 10


# Longest chat-platform user id stored (a snowflake string).
CHAT_ID_LENGTH = 32


def storable(text: str, max_length: int | None = None) -> bool:
    """Whether a caller's text can name a stored value: no database stores a NUL character (PostgreSQL
    refuses one in a query parameter), so text holding one matches nothing; nor can text longer than
    the column (`max_length`), which is then not even looked up."""
    return "\x00" not in text and (max_length is None or len(text) <= max_length)


_NAME_PATTERN = bindparam("pattern", None, type_=String)

_NAME_LOWEST = bindparam("lowest", None, type_=String)
_NAME_BEYOND = bindparam("beyond", None, type_=String)
# Above every lowered name (names hold at most 255 characters; lowering may lengthen a few).
_ABOVE_EVERY_NAME = chr(0x10FFFF) * 1024


def _name_range(literal: str) -> tuple[str, str]:
    """The lowered names starting with `literal`: from it up to, not including, the next text of
    its length (its last character moved up by one)."""
    if not literal or literal[-1] == chr(0x10FFFF):
        return literal, _ABOVE_EVERY_NAME
    following = ord(literal[-1]) + 1
    if 0xD800 <= following <= 0xDFFF:
        following = 0xE000  # surrogates are not characters a text can hold
    return literal, literal[:-1] + chr(following)


def _names_starting_with(*, code_point_operators: tuple[str, str]) -> Select[str]:
    # The range on lower(name) lets the database read only the names starting with the literal
    # part of the prefix: a LIKE on a bound pattern is otherwise checked row by row along the
    # whole index (SQLite always, PostgreSQL in the generic plans of prepared statements). The
    # range compares code points (SQLite's own order; PostgreSQL's pattern operators, which its
    # pattern index serves), so that it holds exactly the names the LIKE can match, whatever the
    # collation.
    lowered = func.lower(User.name)
    at_least, below = code_point_operators
    return (
        select(User.name)
        .where(
            User.deleted_at.is_(None),
            lowered.op(at_least, is_comparison=True)(_NAME_LOWEST),
            lowered.op(below, is_comparison=True)(_NAME_BEYOND),
            lowered.like(func.lower(_NAME_PATTERN)),
        )
        .order_by(func.lower(User.name), User.name, User.id)
        .limit(NAME_LOOKUP_LIMIT)
    )


# The prefix keeps `%` and `_` as patterns; case is ignored.
NAMES_STARTING_WITH = Read(
    _names_starting_with(code_point_operators=("~>=~", "~<~")),
    "pattern",
    "lowest",
    "beyond",
    variants={"sqlite": _names_starting_with(code_point_operators=(">=", "<"))},
)

_linked_chat_id = (
    select(ChatAccount.chat_id)
    .where(ChatAccount.user_id == User.id)
    .order_by(ChatAccount.id)
    .limit(1)
    .correlate(User)
    .scalar_subquery()
)
ACTIVE_AUTHOR = Read(
    select(User.id, User.name, _linked_chat_id).where(
        User.id == bindparam("user_id", None, type_=Integer),
        User.deleted_at.is_(None),
        User.closed.is_(False),
    ),
    "user_id",
)


class Author(NamedTuple):
    """An active user's public identity, with the chat account linked first, if any."""

    id: int
    name: str
    chat: str | None


async def names_starting_with(reader: Reader, prefix: str) -> list[str]:
    """At most ten names of not-deleted users starting with `prefix`, sorted by name."""
    if not storable(prefix):
        return []
    # The literal part of the prefix, before any pattern character, bounds the names read.
    literal = re.split("[%_]", prefix, maxsplit=1)[0].lower()
    # A wide range (a short or pattern-led prefix) walks many users: not on the event loop's thread.
    rows = await reader.scan(NAMES_STARTING_WITH, prefix + "%", *_name_range(literal))
    return [row[0] for row in rows]


async def active_author(reader: Reader, user_id: int) -> Author | None:
    """The user unless the account is closed or soft-deleted."""
    rows = await reader.point(ACTIVE_AUTHOR, user_id)
    return Author(*rows[0]) if rows else None


def _linked_member(*columns: Any) -> Select[Any]:
    """The not closed, not deleted user who linked the chat account `chat_id`: one way to find a
    member, whether a read or a write path asks."""
    return (
        select(*columns)
        .join(ChatAccount, ChatAccount.user_id == User.id)
        .where(
            ChatAccount.chat_id == bindparam("chat_id", None, type_=String),
            User.deleted_at.is_(None),
            User.closed.is_(False),
        )
    )


MEMBER_BY_CHAT_ID = Read(_linked_member(User.id, User.name, User.avatar), "chat_id")

ACTIVE_ACCESSES = Read(
    select(
        Access.id, Access.user_id, Access.resource_id, Access.payment_id, Access.created_at, Access.updated_at
    )
    .where(Access.user_id == bindparam("user_id", None, type_=Integer), Access.revoked.is_(False))
    .order_by(Access.id),
    "user_id",
)


class Member(NamedTuple):
    """A member as the chat bot sees them."""

    id: int
    name: str
    avatar: str | None


class ActiveAccess(NamedTuple):
    """An access that was not revoked, as the chat bot lists it."""

    id: int
    user_id: int
    resource_id: int
    payment_id: int | None
    created_at: datetime
    updated_at: datetime


async def member_by_chat_id(reader: Reader, chat_id: str) -> Member | None:
    """The member who linked this chat account; None when nobody did or the account is closed or deleted."""
    if not storable(chat_id, CHAT_ID_LENGTH):
        return None
    rows = await reader.point(MEMBER_BY_CHAT_ID, chat_id)
    return Member(*rows[0]) if rows else None


async def active_accesses(reader: Reader, user_id: int) -> list[ActiveAccess]:
    """The member's accesses that were not revoked, by ascending id."""
    return [ActiveAccess(*row) for row in await reader.point(ACTIVE_ACCESSES, user_id)]


async def member_id_by_chat_id(session: AsyncSession, chat_id: str) -> int | None:
    """`member_by_chat_id` inside a write's transaction: the member's id."""
    if not storable(chat_id, CHAT_ID_LENGTH):
        return None
    result = await session.execute(_linked_member(User.id), {"chat_id": chat_id})
    member_id: int | None = result.scalars().first()
    return member_id
