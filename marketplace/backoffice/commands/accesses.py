"""`marketplace accesses ...`: manual grants and revokes of `marketplace/backoffice/accesses.py`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from marketplace.backoffice.commands.support import one_change, operator_options, perform_and_report

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from marketplace.backoffice.actions import Change


@click.group(help="Members' accesses to resources: grant and revoke by hand.")
def accesses() -> None:
    pass


@accesses.command(help="Give USER an active manual access to RESOURCE (ids), created or reactivated.")
@click.argument("user")
@click.argument("resource")
@operator_options
def grant(user: str, resource: str, by: str | None, as_json: bool) -> None:
    from marketplace.backoffice import accesses as access_actions

    async def action(session: AsyncSession) -> Change:
        return await access_actions.grant(session, user, resource)

    perform_and_report(one_change(action), by=by, as_json=as_json, via="marketplace accesses grant")


@accesses.command(help="Revoke USER's active access to RESOURCE (ids), whatever its source.")
@click.argument("user")
@click.argument("resource")
@operator_options
def revoke(user: str, resource: str, by: str | None, as_json: bool) -> None:
    from marketplace.backoffice import accesses as access_actions

    async def action(session: AsyncSession) -> Change:
        return await access_actions.revoke(session, user, resource)

    perform_and_report(one_change(action), by=by, as_json=as_json, via="marketplace accesses revoke")
