"""`marketplace users ...`: account states and linked chat accounts of `marketplace/backoffice/users.py`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from marketplace.backoffice.commands.finding import (
    filters,
    list_options,
    print_found,
    print_rows,
    read,
    show_options,
)
from marketplace.backoffice.commands.support import one_change, operator_options, perform_and_report

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from marketplace.backoffice.actions import Change


@click.group(help="Users: find and show; ban, close, soft-delete (and back); link and unlink chat accounts.")
def users() -> None:
    pass


@users.command("list", help="Find users (soft-deleted ones too), newest first; the filters combine.")
@click.option("--name", metavar="PREFIX", help="Names starting with PREFIX, without regard to case.")
@click.option("--chat", metavar="SNOWFLAKE", help="The user this chat account is linked to.")
@click.option("--banned", is_flag=True, help="Banned users only.")
@click.option("--closed", is_flag=True, help="Closed accounts only.")
@list_options
def list_users(
    name: str | None, chat: str | None, banned: bool, closed: bool, limit: str | None, as_json: bool
) -> None:
    from marketplace.backoffice import finding

    wanted = filters(
        lambda: finding.UserFilters.from_options(
            name=name, chat=chat, banned=banned, closed=closed, limit=limit
        )
    )
    print_rows(read(lambda connection: finding.list_users(connection, wanted)), as_json=as_json)


@users.command(
    "show", help="Show USER (an id): account, chat accounts, accesses, resources authored, payments."
)
@click.argument("user")
@show_options
def show_user(user: str, as_json: bool) -> None:
    from marketplace.backoffice import finding

    print_found(read(lambda connection: finding.show_user(connection, user)), as_json=as_json)


def _account_state(verb: str, help_text: str) -> None:
    @users.command(verb, help=help_text)
    @click.argument("user")
    @operator_options
    def command(user: str, by: str | None, as_json: bool) -> None:
        from marketplace.backoffice import users as user_actions

        async def action(session: AsyncSession) -> Change:
            return await user_actions.set_account_state(session, user, verb)

        perform_and_report(one_change(action), by=by, as_json=as_json, via=f"marketplace users {verb}")


_account_state("ban", "Ban USER (an id). The API shows banned users as before.")
_account_state("unban", "Lift the ban of USER.")
_account_state("close", "Close USER's account: the API no longer shows the author or chat member.")
_account_state("reopen", "Reopen USER's closed account.")
_account_state("soft-delete", "Soft-delete USER: hidden from the API, name lookup included.")
_account_state("restore", "Restore a soft-deleted USER.")


@users.command("link-chat", help="Link the chat account CHAT_ID (a snowflake) to USER, who has none.")
@click.argument("user")
@click.argument("chat_id")
@operator_options
def link_chat(user: str, chat_id: str, by: str | None, as_json: bool) -> None:
    from marketplace.backoffice import users as user_actions

    async def action(session: AsyncSession) -> Change:
        return await user_actions.link_chat(session, user, chat_id)

    perform_and_report(one_change(action), by=by, as_json=as_json, via="marketplace users link-chat")


@users.command("unlink-chat", help="Unlink USER's chat account.")
@click.argument("user")
@operator_options
def unlink_chat(user: str, by: str | None, as_json: bool) -> None:
    from marketplace.backoffice import users as user_actions

    async def action(session: AsyncSession) -> list[Change]:
        return await user_actions.unlink_chat(session, user)

    perform_and_report(action, by=by, as_json=as_json, via="marketplace users unlink-chat")
