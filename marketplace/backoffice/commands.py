"""The back office: `marketplace` subcommands for what happens outside the API.

Every command that changes data runs one action (`actions.perform`): one transaction, an
activity-log entry per change under the operator's name (`--by`, else the system user), a line
per change on standard output (`--json`: a JSON object per line). A refusal is one line on
standard error and exit 1, with nothing written.

Imports stay light (click only): `marketplace/cli.py` registers these groups in every process
that runs the command, the supervisor of `serve` included.
"""

from __future__ import annotations

import getpass
import json
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from marketplace.console import CommandRefused, fail, require_schema, run_command

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from marketplace.backoffice.actions import Change
    from marketplace.config import Settings

F = TypeVar("F", bound=Callable[..., Any])


def operator_options(command: F) -> F:
    """`--by NAME` and `--json`, on every command that changes data."""
    command = click.option(
        "--by",
        "by",
        default=None,
        metavar="NAME",
        help="Who does it, for the activity log (default: the system user).",
    )(command)
    return click.option("--json", "as_json", is_flag=True, help="One JSON object per change.")(command)


def system_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for the process's uid (some containers)
        return f"uid {os.getuid()}"


def perform_and_report(
    action: Callable[[AsyncSession], Any], *, by: str | None, as_json: bool, via: str
) -> None:
    """Run `action` as one logged transaction and print what it changed (or one refusal line)."""
    operator = (by or "").strip() or system_user()
    if len(operator) > 255:
        fail("--by: at most 255 characters")

    async def run(settings: Settings) -> Sequence[Any]:
        from marketplace.backoffice.actions import Refused, perform
        from marketplace.db import engine_for

        await require_schema(settings)
        async with engine_for(settings) as engine:
            try:
                return await perform(engine, action, by=operator, via=via)
            except Refused as refusal:
                raise CommandRefused(str(refusal)) from None

    done = run_command(run)
    if not done:
        click.echo(json.dumps({"changes": 0}) if as_json else "nothing to change")
    for logged in done:
        click.echo(json.dumps(logged.as_json()) if as_json else logged.change.summary)


def one_change(
    make: Callable[[AsyncSession], Any],
) -> Callable[[AsyncSession], Any]:
    """An action that makes exactly one change (most commands) as an action of a list of changes."""

    async def action(session: AsyncSession) -> list[Change]:
        return [await make(session)]

    return action


# --- payments ---------------------------------------------------------------------------------


@click.group(help="Payments: confirm, fail, refund, dispute, cancel, prune abandoned checkouts.")
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
_payment_transition("cancel", "pending or unpaid -> cancelled (final).")


@payments.command("prune-checkouts", help="Cancel pending payments older than DURATION (e.g. 48h, 7d).")
@click.option("--older-than", required=True, metavar="DURATION", help="s, m, h, d or w; e.g. 48h, 7d, 1d12h.")
@operator_options
def prune_checkouts(older_than: str, by: str | None, as_json: bool) -> None:
    from marketplace.backoffice import payments as payment_actions
    from marketplace.backoffice.actions import Refused

    try:
        age = payment_actions.parse_duration(older_than)
    except Refused as refusal:
        fail(f"--older-than: {refusal}")

    async def action(session: AsyncSession) -> list[Change]:
        return await payment_actions.prune_checkouts(session, age)

    perform_and_report(action, by=by, as_json=as_json, via="marketplace payments prune-checkouts")


BACK_OFFICE_COMMANDS: tuple[click.Command, ...] = (payments,)
