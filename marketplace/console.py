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
    from sqlalchemy.exc import DBAPIError

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
    from sqlalchemy.exc import DBAPIError

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
    except DBAPIError as error:
        fail(database_problem(error))
    except Exception as error:  # the command line answers with one line, not a traceback
        fail(masked_url(first_line(str(error)) or type(error).__name__))


# SQLSTATEs of a connection the server refused: its class 08 (connection exception), class 28
# (invalid authorization: a wrong password, an unknown role) and 3D000 (no such database).
_REFUSED_CONNECTION_CLASSES = ("08", "28")
_NO_SUCH_DATABASE = "3D000"


def database_problem(error: DBAPIError) -> str:
    """The one line of a failed database call: the driver's own sentence (never SQLAlchemy's
    wrapping, never a password), and what to do when the connection itself was refused."""
    from marketplace.database.engine import masked_url

    original = error.orig if error.orig is not None else error
    reason = masked_url(first_line(str(original)) or type(original).__name__)
    sqlstate = str(getattr(original, "sqlstate", None) or getattr(original, "pgcode", None) or "")
    if sqlstate == _NO_SUCH_DATABASE:
        return f"cannot connect to the database: {reason} (create it, then run `marketplace migrate`)"
    if sqlstate.startswith("28"):
        return f"cannot connect to the database: {reason} (check the user and password of MARKETPLACE_DATABASE_URL)"
    if sqlstate.startswith(_REFUSED_CONNECTION_CLASSES) or error.connection_invalidated:
        return f"cannot connect to the database: {reason}"
    if reason == "unable to open database file":  # SQLite's sentence, without a code
        return f"cannot open the database: {reason}"
    return f"the database failed: {reason}"


def first_line(text: str) -> str:
    stripped = text.strip()
    return stripped.splitlines()[0] if stripped else ""


async def require_schema(settings: Settings) -> None:
    """Refuses (`SchemaMissing`) a database whose schema is not the one this code migrates to: none
    yet (a SQLite file is never created here), an older one, or a newer one (a revision this code
    does not know)."""
    from marketplace.database.engine import engine_for, sqlite_file
    from marketplace.migrations.runner import current_revision, head_revision

    # Connecting would create a missing SQLite file: only `migrate` and `demo` make databases.
    database_file = sqlite_file(settings.database_url)
    if database_file is not None and not database_file.exists():
        raise SchemaMissing(
            f"the SQLite database {database_file} does not exist: run `marketplace migrate`"
            " (or `marketplace demo`) to create it"
        )
    async with engine_for(settings) as engine:
        current = await current_revision(engine)
    if current == head_revision():
        return
    raise SchemaMissing(schema_problem(current))


def schema_problem(current: str | None) -> str:
    """Why the schema at revision `current` (None: no schema) is not usable, and what to do."""
    from marketplace.migrations.runner import head_revision, known_revision

    if current is None:
        return "the database has no schema yet: run `marketplace migrate` first"
    if known_revision(current):
        return (
            f"the database schema is older than this version of marketplace (revision {current},"
            f" expected {head_revision()}): run `marketplace migrate` first"
        )
    return (
        f"the database schema is at revision {current}, which this version of marketplace does not know"
        " (a newer version migrated it): run that newer version, or restore a backup taken before it migrated"
    )
