"""`marketplace activity`: the activity log, filtered, as lines or JSON (`marketplace/backoffice/activity.py`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from marketplace.console import fail, one_line, require_schema, run_command

if TYPE_CHECKING:
    from marketplace.config import Settings


@click.command(help="Read the activity log, newest first; nothing is written.")
@click.option("--user", metavar="ID", help="Entries about this user.")
@click.option("--resource", metavar="ID", help="Entries about this resource.")
@click.option(
    "--action", metavar="EVENT", help="An event (payment.refunded) or a prefix (payment. or payment.*)."
)
@click.option(
    "--since",
    metavar="TIME",
    help="At or after: ISO 8601 (2024-05-01T10:00:00Z, 2024-05-01) or ago (24h, 7d).",
)
@click.option("--until", metavar="TIME", help="Before: ISO 8601 or ago, as --since.")
@click.option("--by", metavar="NAME", help="Done by this operator (or, for the API's entries, this route).")
@click.option("--limit", metavar="N", help="At most N entries (default 50).")
@click.option("--oldest-first", is_flag=True, help="Oldest first instead of newest first.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per entry, every column.")
def activity(
    user: str | None,
    resource: str | None,
    action: str | None,
    since: str | None,
    until: str | None,
    by: str | None,
    limit: str | None,
    oldest_first: bool,
    as_json: bool,
) -> None:
    from marketplace.backoffice.actions import Refused
    from marketplace.backoffice.activity import ActivityQuery, UnknownEvent, read_activity

    try:
        query = ActivityQuery.from_options(
            user=user,
            resource=resource,
            action=action,
            since=since,
            until=until,
            by=by,
            limit=limit,
            oldest_first=oldest_first,
        )
    except UnknownEvent as unknown:
        # A mistyped event is a usage error (exit 2), not a log without such entries.
        raise click.BadParameter(str(unknown), param_hint="'--action'") from None
    except Refused as refusal:
        fail(str(refusal))

    async def run(settings: Settings) -> int:
        from marketplace.database.engine import engine_for

        await require_schema(settings)
        printed = 0
        async with engine_for(settings) as engine:
            async for entry in read_activity(engine, query):
                click.echo(json.dumps(entry.as_json()) if as_json else one_line(entry.as_line()))
                printed += 1
        return printed

    if not run_command(run) and not as_json:
        click.echo("no activity matches")
