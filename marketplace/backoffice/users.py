"""Users' account states and linked chat accounts, changed outside the API.

| Action | Changes | The API then |
|---|---|---|
| ban / unban | `banned` | shows the user as before: the contract filters no route on a ban |
| close / reopen | `closed` | hides / shows the author (`/author/{user}`) and the chat member lookups |
| soft-delete / restore | `deleted_at` | the same, and the user-name lookup (`/resource/user`) as well |
| link-chat / unlink-chat | the user's `chat_accounts` row | the author's `chat`; the chat member lookups find the user |

Each action is refused when it would change nothing (a ban of a banned user), so that the log
holds only real changes. A user links at most one chat account here, and a chat account belongs
to one user: a link to another account starts with `unlink-chat`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from marketplace.backoffice import events
from marketplace.backoffice.actions import Change, Refused, write_as_read
from marketplace.backoffice.values import locked_by_id
from marketplace.catalogue.members import CHAT_ID_LENGTH
from marketplace.database.engine import dialect_insert
from marketplace.models import ChatAccount, User, utcnow

# The fixture loader's rule for a chat account: the chat platform's snowflake, ASCII digits.
_SNOWFLAKE = re.compile(rf"[0-9]{{1,{CHAT_ID_LENGTH}}}")


@dataclass(frozen=True)
class AccountState:
    """A state of users' accounts: the column that holds it, the verbs and events that enter and
    leave it, and its name in refusals ("it is already banned")."""

    column: InstrumentedAttribute[Any]
    name: str
    enter: str
    leave: str
    entered: str
    left: str


BANNED = AccountState(User.banned, "banned", "ban", "unban", events.USER_BANNED, events.USER_UNBANNED)
CLOSED = AccountState(User.closed, "closed", "close", "reopen", events.USER_CLOSED, events.USER_REOPENED)
# Soft deletion is a time (when), not a flag; none means not deleted.
DELETED = AccountState(
    User.deleted_at, "soft-deleted", "soft-delete", "restore", events.USER_DELETED, events.USER_RESTORED
)
# Each verb: the state it changes, and whether it enters (True) or leaves it.
ACCOUNT_VERBS = {
    verb: (state, entering)
    for state in (BANNED, CLOSED, DELETED)
    for verb, entering in ((state.enter, True), (state.leave, False))
}


async def locked_user(session: AsyncSession, reference: str) -> User:
    """The user `reference` names (an id), locked for the change; refused when there is none."""
    return await locked_by_id(session, User, reference, "user")


def described(user: User) -> str:
    return f"user {user.id} ({user.name})"


async def set_account_state(session: AsyncSession, reference: str, verb: str) -> Change:
    """Enter or leave the account state `verb` names; refused when the account is so already."""
    state, entering = ACCOUNT_VERBS[verb]
    user = await locked_user(session, reference)
    current = getattr(user, state.column.key)
    if (current not in (None, False)) == entering:
        raise Refused(
            f"cannot {verb} {described(user)}: it is {'already' if entering else 'not'} {state.name}"
        )
    now = utcnow()
    if state is DELETED:
        after: Any = now if entering else None
    else:
        after = entering
    await write_as_read(
        session,
        update(User)
        .where(User.id == user.id, state.column.is_(None) if current is None else state.column == current)
        .values({state.column: after, User.updated_at: now}),
        described(user),
    )
    return Change(
        event=state.entered if entering else state.left,
        summary=f"{described(user)}: {state.name if entering else 'no longer ' + state.name}",
        subject={"user": user.id},
        before={state.column.key: current},
        after={state.column.key: after},
        user_id=user.id,
    )


async def link_chat(session: AsyncSession, reference: str, chat_id: str) -> Change:
    """Link the chat account `chat_id` to the user, who has none yet and whom it is not linked to."""
    if not _SNOWFLAKE.fullmatch(chat_id):
        raise Refused(f"invalid chat id {chat_id!r}: a snowflake, 1 to {CHAT_ID_LENGTH} digits (0-9)")
    user = await locked_user(session, reference)
    owner = await session.scalar(
        select(User).join(ChatAccount, ChatAccount.user_id == User.id).where(ChatAccount.chat_id == chat_id)
    )
    if owner is not None:
        raise Refused(
            f"chat account {chat_id} is already linked to {described(owner)};"
            f" run `marketplace users unlink-chat {owner.id}` first"
        )
    linked = await _linked_chat_accounts(session, user.id)
    if linked:
        raise Refused(
            f"{described(user)} already has chat account {linked[0].chat_id} linked;"
            f" run `marketplace users unlink-chat {user.id}` first"
        )
    insert = dialect_insert(session.get_bind().dialect.name)
    created = await session.execute(
        insert(ChatAccount)
        .values(user_id=user.id, chat_id=chat_id, created_at=utcnow())
        .on_conflict_do_nothing(index_elements=["chat_id"])
        .returning(ChatAccount.id)
    )
    if created.scalar_one_or_none() is None:
        raise Refused(f"chat account {chat_id} was linked meanwhile; run the command again")
    return Change(
        event=events.CHAT_ACCOUNT_LINKED,
        summary=f"{described(user)}: chat account {chat_id} linked",
        subject={"user": user.id},
        before={"chat": None},
        after={"chat": chat_id},
        user_id=user.id,
    )


async def unlink_chat(session: AsyncSession, reference: str) -> list[Change]:
    """Unlink every chat account of the user (one here; loaded or imported data may hold more)."""
    user = await locked_user(session, reference)
    linked = await _linked_chat_accounts(session, user.id)
    if not linked:
        raise Refused(f"{described(user)} has no linked chat account")
    changes = []
    for account in linked:
        await write_as_read(
            session,
            delete(ChatAccount).where(ChatAccount.id == account.id),
            f"chat account {account.chat_id}",
        )
        changes.append(
            Change(
                event=events.CHAT_ACCOUNT_UNLINKED,
                summary=f"{described(user)}: chat account {account.chat_id} unlinked",
                subject={"user": user.id},
                before={"chat": account.chat_id},
                after={"chat": None},
                user_id=user.id,
            )
        )
    return changes


async def _linked_chat_accounts(session: AsyncSession, user_id: int) -> list[ChatAccount]:
    # The author object shows the account linked first; list them in that order.
    result = await session.scalars(
        select(ChatAccount).where(ChatAccount.user_id == user_id).order_by(ChatAccount.id).with_for_update()
    )
    return list(result)
