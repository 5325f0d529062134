"""How every `marketplace` command runs: its settings, its one-line failures and its exit codes.

Imports stay light here (click only): the supervisor of `serve --workers N` runs this code, and
what only a command needs is imported when the command runs.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

if TYPE_CHECKING:
    from pydantic import ValidationError

    from marketplace.config import Settings

T = TypeVar("T")


class SchemaMissing(RuntimeError):
    pass


class CommandRefused(RuntimeError):
    """A command that may not do what it was asked: its one-line reason; nothing was written."""


def fail(message: str, *, exit_code: int = 1) -> NoReturn:
    click.echo(f"marketplace: {one_line(message)}", err=True)
    sys.exit(exit_code)


def one_line(text: str) -> str:
    """`text` as one line of a terminal: a character that is not printable (a newline or an escape
    sequence in a stored name, say) is written as its escape."""
    if text.isprintable():
        return text
    return "".join(
        character if character.isprintable() else character.encode("unicode_escape").decode("ascii")
        for character in text
    )


def settings_problem(error: ValidationError) -> str:
    """The first invalid setting, named as the operator sets it (`MARKETPLACE_...`)."""
    first = error.errors()[0]
    name = "MARKETPLACE_" + "_".join(str(part) for part in first["loc"]).upper()
    return f"invalid setting {name}: {first['msg']}"


def load_settings() -> Settings:
    from pydantic import ValidationError

    from marketplace.config import Settings

    try:
        return Settings()
    except ValidationError as error:
        fail(settings_problem(error))


def run_command(action: Callable[[Settings], Coroutine[Any, Any, T]]) -> T:
    """Run one async action with the configured settings; any failure is a one-line error and exit 1."""
    from marketplace.database.engine import DatabaseUrlError, masked_url
    from marketplace.fixtures.loader import FixtureError

    settings = load_settings()
    try:
        return asyncio.run(action(settings))
    except (DatabaseUrlError, FixtureError, SchemaMissing, CommandRefused) as error:
        fail(str(error))
    except BrokenPipeError:
        raise  # standard output's reader left: not a failure (`MarketplaceCommand.main`)
    except OSError as error:
        fail(f"cannot reach the database: {masked_url(str(error))}")
    except Exception as error:  # the command line answers with one line, not a traceback
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        fail(masked_url(first_line))


async def require_schema(settings: Settings) -> None:
    from marketplace.database.engine import engine_for
    from marketplace.migrations.runner import current_revision, head_revision

    async with engine_for(settings) as engine:
        current = await current_revision(engine)
    if current != head_revision():
        raise SchemaMissing("the database schema is missing or outdated: run `marketplace migrate` first")
