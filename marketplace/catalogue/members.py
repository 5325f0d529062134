"""Users as the API shows them: name lookup, authors, and members found by their chat account."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from marketplace.models import Access, ChatAccount, User

NAME_LOOKUP_LIMIT = 10


# Longest chat-platform user id stored (a snowflake string).
CHAT_ID_LENGTH = 32


def storable(text: str, max_length: int | None = None) -> bool:
    """Whether a caller's text can name a stored value: no database stores a NUL character (PostgreSQL
    refuses one in a query parameter), so text holding one matches nothing; nor can text longer than
    the column (`max_length`), which is then not even looked up."""
    return "\x00" not in text and (max_length is None or len(text) <= max_length)


async def names_starting_with(session: AsyncSession, prefix: str) -> list[str]:
    """At most ten names of not-deleted users starting with `prefix`, sorted by name.

    The prefix keeps `%` and `_` as patterns; case is ignored.
    """
    if not storable(prefix):
        return []
    result = await session.execute(
        select(User.name)
        .where(User.deleted_at.is_(None), func.lower(User.name).like(func.lower(prefix + "%")))
        .order_by(func.lower(User.name), User.name, User.id)
        .limit(NAME_LOOKUP_LIMIT)
    )
    return list(result.scalars())


async def active_user(session: AsyncSession, user_id: int) -> User | None:
    """The user unless the account is closed or soft-deleted."""
    result = await session.execute(
        select(User).where(User.id == user_id, User.deleted_at.is_(None), User.closed.is_(False))
    )
    return result.scalar_one_or_none()


async def linked_chat_id(session: AsyncSession, user_id: int) -> str | None:
    """The snowflake of the chat account the user linked (the earliest, if several)."""
    result = await session.execute(
        select(ChatAccount.chat_id).where(ChatAccount.user_id == user_id).order_by(ChatAccount.id).limit(1)
    )
    return result.scalar_one_or_none()


async def member_by_chat_id(session: AsyncSession, chat_id: str) -> User | None:
    """The member who linked this chat account; None when nobody did or the account is closed or deleted."""
    if not storable(chat_id, CHAT_ID_LENGTH):
        return None
    result = await session.execute(
        select(User)
        .join(ChatAccount, ChatAccount.user_id == User.id)
        .where(ChatAccount.chat_id == chat_id, User.deleted_at.is_(None), User.closed.is_(False))
    )
    return result.scalars().first()


async def active_accesses(session: AsyncSession, user_id: int) -> list[Access]:
    """The member's accesses that were not revoked, by ascending id."""
    result = await session.execute(
        select(Access).where(Access.user_id == user_id, Access.revoked.is_(False)).order_by(Access.id)
    )
    return list(result.scalars())
