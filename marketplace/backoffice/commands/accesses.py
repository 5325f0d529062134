"""`marketplace accesses ...`: manual grants and revokes of `marketplace/backoffice/accesses.py`."""

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


@click.group(help="Members' accesses to resources: find and show; grant and revoke by hand.")
def accesses() -> None:
    pass


@accesses.command("list", help="Find accesses (active and revoked), newest first; the filters combine.")
@click.option("--user", metavar="ID", help="Of this user.")
@click.option("--resource", metavar="ID", help="To this resource.")
@click.option("--source", metavar="S", help="purchase, manual or gift.")
@click.option("--revoked", is_flag=True, help="Revoked accesses only.")
@list_options
def list_accesses(
    user: str | None,
    resource: str | None,
    source: str | None,
    revoked: bool,
    limit: str | None,
    as_json: bool,
) -> None:
    from marketplace.backoffice import finding

    wanted = filters(
        lambda: finding.AccessFilters.from_options(
            user=user, resource=resource, source=source, revoked=revoked, limit=limit
        )
    )
    print_rows(read(lambda connection: finding.list_accesses(connection, wanted)), as_json=as_json)


@accesses.command("show", help="Show the access ID: its member, resource, payment and activity-log entries.")
@click.argument("access")
@show_options
def show_access(access: str, as_json: bool) -> None:
    from marketplace.backoffice import finding

    print_found(read(lambda connection: finding.show_access(connection, access)), as_json=as_json)


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
