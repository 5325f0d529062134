"""What every back-office command shares: who the operator is, one logged transaction, the report.

Every command that changes data runs one action (`actions.perform`): one transaction, an
activity-log entry per change under the operator's name (`--by`, else the system user), a line
per change on standard output (`--json`: a JSON object per line). A refusal is one line on
standard error and exit 1, with nothing written; so is a change that kept conflicting with
concurrent writes (the API's, another operator's) after its retries (`marketplace/database/conflicts.py`).

Imports stay light (click only): `marketplace/cli.py` registers the commands in every process
that runs `marketplace`, the supervisor of `serve` included.
"""

from __future__ import annotations

import getpass
import json
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from marketplace.console import CommandRefused, fail, one_line, require_schema, run_command

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
    report(perform_logged(action, by=by, via=via), as_json=as_json)


def operator_name(by: str | None) -> str:
    operator = (by or "").strip() or system_user()
    if len(operator) > 255 or not operator.isprintable():
        fail("--by: at most 255 printable characters")
    return operator


async def perform_in(
    settings: Settings, action: Callable[[AsyncSession], Any], *, operator: str, via: str
) -> Sequence[Any]:
    """`action` as one logged transaction on the configured database; a refusal is a `CommandRefused`."""
    from marketplace.backoffice.actions import Refused, perform
    from marketplace.database.conflicts import WriteConflict
    from marketplace.database.engine import engine_for

    await require_schema(settings)
    async with engine_for(settings) as engine:
        try:
            return await perform(engine, action, by=operator, via=via)
        except Refused as refusal:
            raise CommandRefused(str(refusal)) from None
        except WriteConflict as conflict:
            raise CommandRefused(f"{conflict}; run the command again") from None


def perform_logged(action: Callable[[AsyncSession], Any], *, by: str | None, via: str) -> Sequence[Any]:
    """Run `action` as one logged transaction; its logged changes."""
    operator = operator_name(by)

    async def run(settings: Settings) -> Sequence[Any]:
        return await perform_in(settings, action, operator=operator, via=via)

    return run_command(run)


def report(done: Sequence[Any], *, as_json: bool) -> None:
    """Print a line (or a JSON object) per logged change."""
    if not done:
        click.echo(json.dumps({"changes": 0}) if as_json else "nothing to change")
    for logged in done:
        click.echo(json.dumps(logged.as_json()) if as_json else one_line(logged.change.summary))


def one_change(
    make: Callable[[AsyncSession], Any],
) -> Callable[[AsyncSession], Any]:
    """An action that makes exactly one change (most commands) as an action of a list of changes."""

    async def action(session: AsyncSession) -> list[Change]:
        return [await make(session)]

    return action
