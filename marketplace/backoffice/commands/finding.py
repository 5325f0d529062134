"""What every `list` and `show` shares: `--limit` and `--json`, one read, the printed table.

A list prints a header line and a row per line, in columns aligned by their widths on a
terminal; `--json`, one JSON object per row. Nothing matching prints nothing (exit 0), so that
`marketplace payments list ... | wc -l` counts. A `show` prints `field  value` lines and then
each section (a title line, then its table, or `(none)`); `--json`, one object, sections as
lists. Every stored text goes through `console.one_line`, so that a newline or an escape in a
name cannot break a line or the columns.

An invalid filter is a usage error (exit 2) naming the option; a `show` of nothing is a refusal
(exit 1). Imports stay light (click only), as in `support.py`.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from marketplace.console import CommandRefused, one_line, require_schema, run_command

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from marketplace.backoffice.finding import Found
    from marketplace.config import Settings

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

_GAP = "  "


def list_options(command: F) -> F:
    """`--limit N` and `--json`, on every list."""
    command = click.option("--limit", metavar="N", help="At most N rows, newest first (default 50).")(command)
    return click.option("--json", "as_json", is_flag=True, help="One JSON object per row.")(command)


def show_options(command: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="One JSON object, sections as lists.")(
        command
    )


def filters(make: Callable[[], T]) -> T:
    """The filters `make` reads from the options; an invalid one is a one-line usage error."""
    from marketplace.backoffice.actions import Refused

    try:
        return make()
    except Refused as refusal:
        raise click.UsageError(str(refusal), ctx=click.get_current_context()) from None


def read(reading: Callable[[AsyncConnection], Awaitable[T]]) -> T:
    """Run `reading` in one read-only transaction of the configured database; a `show` of an
    unknown id or code is a refusal."""

    async def run(settings: Settings) -> T:
        from marketplace.backoffice.finding import NotFound, snapshot
        from marketplace.database.engine import engine_for

        await require_schema(settings)
        async with engine_for(settings) as engine, snapshot(engine) as connection:
            try:
                return await reading(connection)
            except NotFound as refusal:
                raise CommandRefused(str(refusal)) from None

    return run_command(run)


def print_rows(rows: Sequence[Mapping[str, Any]], *, as_json: bool) -> None:
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    for line in table(rows):
        click.echo(line)


def print_found(found: Found, *, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(found.as_json()))
        return
    names = list(found.fields)
    width = max(map(len, names))
    for name, value in found.fields.items():
        click.echo(f"{name.ljust(width)}{_GAP}{text_value(value)}".rstrip())
    for section in found.sections:
        click.echo("")
        click.echo(f"{section.name} ({len(section.rows)})")
        if not section.rows:
            click.echo("(none)")
        elif section.lines is not None:
            for line in section.lines:
                click.echo(one_line(line))
        else:
            for line in table(section.rows, section.text_columns):
                click.echo(line)


def table(rows: Sequence[Mapping[str, Any]], columns: Iterable[str] | None = None) -> list[str]:
    """A header line and a line per row, each column as wide as its widest cell; none without rows."""
    if not rows:
        return []
    keys = list(columns if columns is not None else rows[0])
    cells = [[key.upper() for key in keys]] + [[text_value(row[key]) for key in keys] for row in rows]
    widths = [max(_width(line[index]) for line in cells) for index in range(len(keys))]
    return [
        _GAP.join(
            cell + " " * (width - _width(cell)) for cell, width in zip(line, widths, strict=True)
        ).rstrip()
        for line in cells
    ]


def text_value(value: Any) -> str:
    """A value as a text column shows it, on one line."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return one_line(str(value))


def _width(text: str) -> int:
    # The columns a terminal gives the text: two for a wide character, none for a combining one.
    return sum(
        0 if unicodedata.combining(character) else 2 if unicodedata.east_asian_width(character) in "WF" else 1
        for character in text
    )
