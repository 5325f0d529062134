"""`marketplace payments ...`: the payment transitions of `marketplace/backoffice/payments.py`."""

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
from marketplace.backoffice.commands.support import operator_options, perform_and_report
from marketplace.console import fail

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from marketplace.backoffice.actions import Change


@click.group(
    help="Payments: confirm, fail, refund, dispute, win or lose a dispute, cancel, prune abandoned checkouts."
)
def payments() -> None:
    pass


@payments.command("list", help="Find payments, newest first; the filters combine. Nothing is written.")
@click.option("--status", metavar="S", help="pending, paid, unpaid, refunded, disputed or cancelled.")
@click.option("--user", metavar="ID", help="Bought by this user.")
@click.option("--resource", metavar="ID", help="Of this resource.")
@click.option("--since", metavar="TIME", help="Created at or after: ISO 8601 (2024-05-01) or ago (24h, 7d).")
@click.option("--until", metavar="TIME", help="Created before: ISO 8601 or ago, as --since.")
@list_options
def list_payments(
    status: str | None,
    user: str | None,
    resource: str | None,
    since: str | None,
    until: str | None,
    limit: str | None,
    as_json: bool,
) -> None:
    from marketplace.backoffice import finding

    wanted = filters(
        lambda: finding.PaymentFilters.from_options(
            status=status, user=user, resource=resource, since=since, until=until, limit=limit
        )
    )
    print_rows(read(lambda connection: finding.list_payments(connection, wanted)), as_json=as_json)


@payments.command("show", help="Show the payment UID: buyer, resource, the access it backs, its log entries.")
@click.argument("uid")
@show_options
def show_payment(uid: str, as_json: bool) -> None:
    from marketplace.backoffice import finding

    print_found(read(lambda connection: finding.show_payment(connection, uid)), as_json=as_json)


def _payment_transition(verb: str, help_text: str) -> None:
    @payments.command(verb, help=help_text)
    @click.argument("uid")
    @operator_options
    def command(uid: str, by: str | None, as_json: bool) -> None:
        from marketplace.backoffice.payments import TRANSITIONS, change_payment

        async def action(session: AsyncSession) -> list[Change]:
            return await change_payment(session, uid, TRANSITIONS[verb])

        perform_and_report(action, by=by, as_json=as_json, via=f"marketplace payments {verb}")


_payment_transition("confirm", "pending or unpaid -> paid; grants the buyer's access as a purchase.")
_payment_transition("fail", "pending -> unpaid (the charge failed or was refused).")
_payment_transition("refund", "paid -> refunded; revokes the access it paid for.")
_payment_transition("dispute", "paid -> disputed; revokes the access it paid for.")
_payment_transition("win", "disputed -> paid (dispute won); grants the access back as a purchase.")
_payment_transition("lose", "disputed -> refunded (dispute lost); the access stays revoked.")
_payment_transition("cancel", "pending or unpaid -> cancelled (final).")


@payments.command("prune-checkouts", help="Cancel pending payments older than DURATION (e.g. 48h, 7d).")
@click.option("--older-than", required=True, metavar="DURATION", help="s, m, h, d or w; e.g. 48h, 7d, 1d12h.")
@operator_options
def prune_checkouts(older_than: str, by: str | None, as_json: bool) -> None:
    from marketplace.backoffice import payments as payment_actions
    from marketplace.backoffice.actions import Refused
    from marketplace.backoffice.values import parse_duration

    try:
        age = parse_duration(older_than)
    except Refused as refusal:
        fail(f"--older-than: {refusal}")

    async def action(session: AsyncSession) -> list[Change]:
        return await payment_actions.prune_checkouts(session, age)

    perform_and_report(action, by=by, as_json=as_json, via="marketplace payments prune-checkouts")
