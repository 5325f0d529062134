"""The `marketplace` command: migrate, load, demo, serve, import-earlier, and the back office
(`marketplace/backoffice/commands/`).

Imports stay light here and heavy ones (the settings' validation, the database layer, the
application) happen inside the commands: the supervisor of `serve --workers N` is this process,
and it must not hold what only its workers use.
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from marketplace.backoffice.commands import BACK_OFFICE_COMMANDS
from marketplace.console import (
    CommandRefused,
    SchemaMissing,
    fail,
    load_settings,
    require_schema,
    run_command,
    schema_problem,
)

if TYPE_CHECKING:
    from marketplace.config import Settings
    from marketplace.telemetry.logs import LogFormat


# `marketplace` alone shows its help (click 8.2 and later signal it as a usage error).
_HELP_FOR_NO_ARGUMENTS: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())


class MarketplaceCommand(click.Group):
    """The command line, whose every failure is one line on standard error, usage errors included."""

    def main(self, args: Sequence[str] | None = None, *rest: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        arguments = list(sys.argv[1:] if args is None else args)
        try:
            outcome = super().main(self.negative_numbers_as_arguments(arguments), *rest, **kwargs)
        except _HELP_FOR_NO_ARGUMENTS as error:
            click.echo(error.format_message())
            sys.exit(0)
        except click.UsageError as error:
            where = error.ctx.command_path if error.ctx is not None else "marketplace"
            fail(f"{error.format_message()} (see `{where} --help`)", exit_code=error.exit_code)
        except click.ClickException as error:
            fail(error.format_message(), exit_code=error.exit_code)
        except click.Abort:
            fail("aborted")
        except _ReaderGone:
            # The reader of standard output is gone (`marketplace activity | head -1`): it has read
            # all it wanted, so the command ends quietly, as Unix tools do.
            _discard_standard_output()
            sys.exit(0)
        # Without standalone mode click returns the exit code of `--help` and the like.
        sys.exit(outcome if isinstance(outcome, int) else 0)

    def negative_numbers_as_arguments(self, args: list[str]) -> list[str]:
        """`args` where a negative number standing for an argument (`accesses grant 4 -1`) is read
        as that argument, to be refused as the value it is, instead of as an unknown option: the
        command's options go first, then `--`, then its arguments in their order."""
        command: click.Command = self
        position = 0
        while (
            isinstance(command, click.Group) and position < len(args) and args[position] in command.commands
        ):
            command = command.commands[args[position]]
            position += 1
        words = args[position:]
        if (
            isinstance(command, click.Group)
            or "--" in words
            or not any(map(_NEGATIVE_NUMBER.fullmatch, words))
        ):
            return args
        taking_a_value = {
            name
            for parameter in command.params
            if isinstance(parameter, click.Option) and not parameter.is_flag and not parameter.count
            for name in parameter.opts
        }
        options: list[str] = []
        arguments: list[str] = []
        remaining = iter(words)
        for word in remaining:
            if word == "-" or not word.startswith("-") or _NEGATIVE_NUMBER.fullmatch(word):
                arguments.append(word)
                continue
            options.append(word)
            if word in taking_a_value:
                options.extend(itertools.islice(remaining, 1))
        return [*args[:position], *options, "--", *arguments]

    # Click itself answers a closed standard output with exit 1: the pipe is taken from it first,
    # both where options like `--help` print (parsing) and where commands print (invoking).
    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except BrokenPipeError:
            raise _ReaderGone from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise _ReaderGone from None


_NEGATIVE_NUMBER = re.compile(r"-[0-9]+")


class _ReaderGone(Exception):
    """Standard output's reader closed the pipe."""


def _discard_standard_output() -> None:
    """Standard output onto the null device, so that the interpreter's last flush of what is still
    buffered for the closed pipe fails no more."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, sys.stdout.fileno())
    except (OSError, ValueError):  # standard output without a file descriptor
        pass
    finally:
        os.close(null)


@click.group(
    cls=MarketplaceCommand, help="The marketplace API service: schema, data, server and back office."
)
@click.version_option(package_name="marketplace", message="marketplace %(version)s")
def main() -> None:
    pass


for back_office_command in BACK_OFFICE_COMMANDS:
    main.add_command(back_office_command)


async def _migrate(settings: Settings) -> None:
    from marketplace.database.engine import engine_for
    from marketplace.migrations.runner import current_revision, known_revision, upgrade_to_head

    async with engine_for(settings) as engine:
        current = await current_revision(engine)
        if current is not None and not known_revision(current):
            raise SchemaMissing(schema_problem(current))
        await upgrade_to_head(engine)


@main.command(help="Create or upgrade the database schema (idempotent).")
def migrate() -> None:
    run_command(_migrate)
    click.echo("schema is up to date")


def _load(document: Any) -> dict[str, int]:
    async def action(settings: Settings) -> dict[str, int]:
        from marketplace.database.engine import engine_for
        from marketplace.fixtures.loader import load_document

        await require_schema(settings)
        async with engine_for(settings) as engine:
            report = await load_document(engine, document)
        return report.counts

    return run_command(action)


def _summary(counts: dict[str, int]) -> str:
    return ", ".join(f"{count} {name}" for name, count in counts.items()) or "nothing"


@main.command(help="Load a fixture document (JSON) in one transaction; '-' reads standard input.")
@click.argument("file")
def load(file: str) -> None:
    from marketplace.fixtures.loader import FixtureError, parse_document_text

    try:
        raw = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
        document = parse_document_text(raw)
    except (OSError, UnicodeDecodeError) as error:
        fail(f"cannot read {file}: {error}")
    except FixtureError as error:
        fail(str(error))
    counts = _load(document)
    click.echo(f"loaded {_summary(counts)}")


@main.command(help="Create the schema if needed and load the built-in demo catalogue (idempotent).")
def demo() -> None:
    from marketplace.fixtures.demo import DEMO_CATALOGUE

    demo_storage = Path(__file__).resolve().parent / "fixtures" / "demo_storage"

    run_command(_migrate)
    counts = _load(DEMO_CATALOGUE)
    storage = Path(load_settings().storage_dir)
    try:
        shutil.copytree(demo_storage, storage, dirs_exist_ok=True)
    except OSError as error:
        fail(f"cannot copy the demo files into {storage}: {error}")
    click.echo(f"demo catalogue loaded: {_summary(counts)}; files in {storage}")


@main.command(help="Serve the API.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 512))
@click.option(
    "--access-log/--no-access-log",
    default=None,
    help="One log line per request (default: MARKETPLACE_ACCESS_LOG, on).",
)
@click.option(
    "--log-format",
    type=click.Choice(["json", "text"]),
    default=None,
    help="JSON lines or readable text (default: MARKETPLACE_LOG_FORMAT, json).",
)
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"], case_sensitive=False),
    default=None,
    help="Lowest level written (default: MARKETPLACE_LOG_LEVEL, info).",
)
@click.option(
    "--ssl-certfile",
    default=None,
    metavar="FILE",
    help="Serve HTTPS with this certificate chain (PEM; default: MARKETPLACE_SSL_CERTFILE).",
)
@click.option(
    "--ssl-keyfile",
    default=None,
    metavar="FILE",
    help="The certificate's private key (PEM; default: MARKETPLACE_SSL_KEYFILE).",
)
def serve(
    host: str,
    port: int,
    workers: int,
    access_log: bool | None,
    log_format: str | None,
    log_level: str | None,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
) -> None:
    from marketplace.telemetry import MULTIPROCESS_DIR_VARIABLE, WORKERS_VARIABLE

    # The workers read their settings from the environment: what the options say goes there.
    for variable, value in (
        ("MARKETPLACE_ACCESS_LOG", None if access_log is None else str(access_log).lower()),
        ("MARKETPLACE_LOG_FORMAT", log_format),
        ("MARKETPLACE_LOG_LEVEL", log_level.lower() if log_level else None),
        ("MARKETPLACE_SSL_CERTFILE", ssl_certfile),
        ("MARKETPLACE_SSL_KEYFILE", ssl_keyfile),
        (WORKERS_VARIABLE, str(workers)),
    ):
        if value is not None:
            os.environ[variable] = value
    _check_tls_options(ssl_certfile, ssl_keyfile)
    # Checked in a short-lived process, whatever the number of workers: the check loads the migration
    # tooling (Alembic, about 9 MiB), which the process serving the one worker would keep for good.
    ready = _ready_to_serve_in_a_child(host, port, workers)
    # The workers read their settings from the environment: the base URL checked goes there too.
    os.environ["MARKETPLACE_BASE_URL"] = ready.base_url
    _check_address_free(host, port)
    metrics_dir, made_here = _fresh_metrics_dir()
    os.environ[MULTIPROCESS_DIR_VARIABLE] = str(metrics_dir)
    # Imported only now: where metric values go is decided when the metrics are first imported,
    # and a single worker runs in this very process.
    import uvicorn

    from marketplace.serving import BoundedHttpToolsProtocol
    from marketplace.telemetry.logs import logging_config

    try:
        uvicorn.run(
            "marketplace.app:create_app",
            factory=True,
            http=BoundedHttpToolsProtocol,
            loop="marketplace.serving:bounded_loop",
            host=host,
            port=port,
            workers=workers,
            # The service writes its own access log (marketplace.access), without secrets.
            access_log=False,
            log_config=logging_config(ready.log_format, ready.log_level),
            ssl_certfile=ready.ssl_certfile,
            ssl_keyfile=ready.ssl_keyfile,
            # The service reads X-Forwarded-For itself, as far as MARKETPLACE_TRUSTED_PROXIES allows;
            # the server must not rewrite the peer.
            proxy_headers=False,
            server_header=False,
            timeout_graceful_shutdown=30,
        )
    finally:
        if made_here:
            shutil.rmtree(metrics_dir, ignore_errors=True)


_TLS_FILES = (("--ssl-certfile", "MARKETPLACE_SSL_CERTFILE"), ("--ssl-keyfile", "MARKETPLACE_SSL_KEYFILE"))


def _check_tls_options(certfile: str | None, keyfile: str | None) -> None:
    """A certificate and its key, both or neither, and files that can be read, each named as the
    operator gave it (the option, else its variable)."""
    from dotenv import dotenv_values

    configured = dotenv_values(".env") if Path(".env").is_file() else {}
    given = (certfile, keyfile)
    for (option, _), typed, (other_option, other_variable), other_typed in zip(
        _TLS_FILES, given, reversed(_TLS_FILES), reversed(given), strict=True
    ):
        if (
            typed
            and not other_typed
            and not (os.environ.get(other_variable) or configured.get(other_variable))
        ):
            raise click.BadOptionUsage(
                option, f"{option} needs {other_option} too (or {other_variable}): HTTPS takes both"
            )
    files = [
        (option if typed else variable, path)
        for (option, variable), typed in zip(_TLS_FILES, given, strict=True)
        if (path := typed or os.environ.get(variable) or configured.get(variable))
    ]
    if len(files) < len(_TLS_FILES):
        return  # neither (HTTP), or half a pair of variables, which the settings refuse by name
    for name, path in files:
        try:
            with open(path, "rb"):
                pass
        except OSError as error:
            fail(f"cannot read {name} {path}: {error.strerror or error}")


def _check_address_free(host: str, port: int) -> None:
    """Refuses, in one line, an address the server could not listen on (another process holds the
    port, a port below 1024 without the privilege, an unknown host), before the server starts."""
    import socket

    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        fail(f"cannot listen on --host {host}: {error.strerror}")
    for family, kind, protocol, _, address in addresses:
        with socket.socket(family, kind, protocol) as probe:
            # As the server binds: a port whose connections are closing is free.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as error:
                hint = " (another process listens there: stop it or choose another --port)"
                fail(
                    f"cannot listen on {_authority(host, port)}: {error.strerror or error}"
                    + (hint if error.errno == errno.EADDRINUSE else "")
                )


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# Listening on every address gives no address to write into URLs: the machine's host name is the
# one other machines may reach it by (MARKETPLACE_BASE_URL says better, behind a proxy above all).
_EVERY_ADDRESS = ("0.0.0.0", "::", "")


def served_base_url(host: str, port: int, *, tls: bool) -> str:
    """`{base_url}` of a server listening on `host`:`port` (HTTPS under TLS), for when
    MARKETPLACE_BASE_URL is not set."""
    import socket

    scheme = "https" if tls else "http"
    name = socket.gethostname() if host in _EVERY_ADDRESS else host
    if port == (443 if tls else 80):
        return f"{scheme}://[{name}]" if ":" in name else f"{scheme}://{name}"
    return f"{scheme}://{_authority(name, port)}"


@dataclass(frozen=True)
class ServeReady:
    """What the server needs of the settings once they and the schema are checked."""

    log_format: LogFormat
    log_level: str
    ssl_certfile: str | None
    ssl_keyfile: str | None
    base_url: str


def _ready_to_serve(host: str, port: int, workers: int) -> ServeReady:
    """Valid settings, a usable TLS key pair, shared limits for several workers and a current
    schema, else one line and exit 1."""
    settings = load_settings()
    if workers > 1 and not settings.redis_url:
        fail(
            f"--workers {workers} needs MARKETPLACE_REDIS_URL: without Redis each worker would keep"
            " its own limits and caches"
        )
    if settings.ssl_certfile and settings.ssl_keyfile:
        _check_key_pair(settings.ssl_certfile, settings.ssl_keyfile)
    run_command(require_schema)
    base_url = (
        settings.base_url
        if "base_url" in settings.model_fields_set
        else served_base_url(host, port, tls=bool(settings.ssl_certfile))
    )
    return ServeReady(
        settings.log_format, settings.log_level, settings.ssl_certfile, settings.ssl_keyfile, base_url
    )


def _check_key_pair(certfile: str, keyfile: str) -> None:
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as error:
        fail(f"cannot serve HTTPS with {certfile} and {keyfile}: {error}")


def _ready_to_serve_in_a_child(host: str, port: int, workers: int) -> ServeReady:
    """`_ready_to_serve` in a short-lived process, so that the supervisor of several workers never
    loads the settings' validation or the database layer, and one worker's process never the
    migration tooling; its one-line error is shown as is."""
    import json
    import subprocess

    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "marketplace.cli",
            _READY_COMMAND,
            "--host",
            host,
            "--port",
            str(port),
            "--workers",
            str(workers),
        ],
        stdout=subprocess.PIPE,
        check=False,
    )
    if checked.returncode != 0:
        sys.exit(checked.returncode)
    answer = json.loads(checked.stdout)
    return ServeReady(
        "text" if answer["log_format"] == "text" else "json",
        str(answer["log_level"]),
        answer["ssl_certfile"],
        answer["ssl_keyfile"],
        str(answer["base_url"]),
    )


_READY_COMMAND = "ready-to-serve"


@main.command(_READY_COMMAND, hidden=True)
@click.option("--host", required=True)
@click.option("--port", required=True, type=int)
@click.option("--workers", required=True, type=int)
def ready_to_serve(host: str, port: int, workers: int) -> None:
    import json

    click.echo(json.dumps(asdict(_ready_to_serve(host, port, workers))))


def _fresh_metrics_dir() -> tuple[Path, bool]:
    """Where the workers of this server keep their metrics (the operator's folder, emptied of an
    earlier run's files, or a new one), and whether it was made here."""
    from marketplace.telemetry import MULTIPROCESS_DIR_VARIABLE

    given = os.environ.get(MULTIPROCESS_DIR_VARIABLE)
    if not given:
        return Path(tempfile.mkdtemp(prefix="marketplace-metrics-")), True
    folder = Path(given)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.db"):
        stale.unlink()
    return folder, False


@main.command("import-earlier", help="Import an earlier-platform database (MariaDB/MySQL or SQLite URL).")
@click.option(
    "--from", "source", required=True, metavar="URL", help="SQLAlchemy URL of the earlier database."
)
@click.option(
    "--table",
    "tables",
    multiple=True,
    metavar="NAME=ACTUAL",
    help="Read an earlier table under another name.",
)
@click.option("--dry-run", is_flag=True, help="Report what would be written; write nothing.")
def import_earlier(source: str, tables: tuple[str, ...], dry_run: bool) -> None:
    from marketplace.importer.run import EarlierImport
    from marketplace.importer.source import EarlierDatabase, SourceError, parse_table_overrides

    interactive = sys.stderr.isatty()

    def progress(table: str, done: int, total: int) -> None:
        line = f"{table}: {done}/{total} rows"
        if interactive:
            click.echo(f"\r{line}", err=True, nl=done >= total)
        elif done == 0 or done >= total or done % 50000 == 0:
            click.echo(line, err=True)

    async def action(settings: Settings) -> list[str]:
        from marketplace.database.engine import engine_for

        await require_schema(settings)
        try:
            earlier = EarlierDatabase(source, parse_table_overrides(tables))
        except SourceError as error:
            raise CommandRefused(str(error)) from None
        try:
            async with engine_for(settings) as engine:
                report = await EarlierImport(earlier, progress).run(engine, dry_run=dry_run)
        finally:
            earlier.close()
        return report.lines()

    for line in run_command(action):
        click.echo(line)


if __name__ == "__main__":
    main()
