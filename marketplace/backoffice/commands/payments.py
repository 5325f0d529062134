"""`marketplace payments ...`: the payment transitions of `marketplace/backoffice/payments.py`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

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
