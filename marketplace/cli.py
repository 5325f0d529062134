"""The `marketplace` command: migrate, load, demo, serve (and import-earlier)."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click

from marketplace.config import Settings
from marketplace.db import DatabaseUrlError, create_engine

T = TypeVar("T")


def _fail(message: str) -> None:
    click.echo(f"marketplace: {message}", err=True)
    sys.exit(1)


def _run(action: Callable[[Settings], Coroutine[Any, Any, T]]) -> T:
    """Run one async action with the configured settings; any failure is a one-line error and exit 1."""
    from marketplace.fixtures.loader import FixtureError

    try:
        settings = Settings()
        return asyncio.run(action(settings))
    except (DatabaseUrlError, FixtureError, SchemaMissing, ImportFailed) as error:
        _fail(str(error))
    except OSError as error:
        _fail(f"cannot reach the database: {error}")
    except Exception as error:  # the command line answers with one line, not a traceback
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        _fail(first_line)
    raise AssertionError("unreachable")


class SchemaMissing(RuntimeError):
    pass


@click.group(help="The marketplace API service: schema, data and server.")
def main() -> None:
    pass


async def _migrate(settings: Settings) -> None:
    from marketplace.migrations.runner import upgrade_to_head

    engine = create_engine(settings)
    try:
        await upgrade_to_head(engine)
    finally:
        await engine.dispose()


@main.command(help="Create or upgrade the database schema (idempotent).")
def migrate() -> None:
    _run(_migrate)
    click.echo("schema is up to date")


async def _require_schema(settings: Settings) -> None:
    from marketplace.migrations.runner import current_revision, head_revision

    engine = create_engine(settings)
    try:
        current = await current_revision(engine)
    finally:
        await engine.dispose()
    if current != head_revision():
        raise SchemaMissing("the database schema is missing or outdated: run `marketplace migrate` first")


def _load(document: Any) -> dict[str, int]:
    async def action(settings: Settings) -> dict[str, int]:
        from marketplace.fixtures.loader import load_document

        await _require_schema(settings)
        engine = create_engine(settings)
        try:
            report = await load_document(engine, document)
        finally:
            await engine.dispose()
        return report.counts

    return _run(action)


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
        _fail(f"cannot read {file}: {error}")
    except FixtureError as error:
        _fail(str(error))
    counts = _load(document)
    click.echo(f"loaded {_summary(counts)}")


@main.command(help="Create the schema if needed and load the built-in demo catalogue (idempotent).")
def demo() -> None:
    from marketplace.fixtures.demo import DEMO_CATALOGUE

    demo_storage = Path(__file__).resolve().parent / "fixtures" / "demo_storage"

    _run(_migrate)
    counts = _load(DEMO_CATALOGUE)
    storage = Path(Settings().storage_dir)
    try:
        shutil.copytree(demo_storage, storage, dirs_exist_ok=True)
    except OSError as error:
        _fail(f"cannot copy the demo files into {storage}: {error}")
    click.echo(f"demo catalogue loaded: {_summary(counts)}; files in {storage}")


@main.command(help="Serve the API.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 512))
@click.option("--access-log/--no-access-log", default=True, show_default=True)
def serve(host: str, port: int, workers: int, access_log: bool) -> None:
    import uvicorn

    _run(_require_schema)
    uvicorn.run(
        "marketplace.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        access_log=access_log,
        # The service reads X-Forwarded-For itself (every proxy trusted); the server must not rewrite the peer.
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=30,
        log_level="info",
    )


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
        await _require_schema(settings)
        try:
            earlier = EarlierDatabase(source, parse_table_overrides(tables))
        except SourceError as error:
            raise ImportFailed(str(error)) from None
        engine = create_engine(settings)
        try:
            report = await EarlierImport(earlier, progress).run(engine, dry_run=dry_run)
        finally:
            await engine.dispose()
            earlier.close()
        return report.lines()

    for line in _run(action):
        click.echo(line)


class ImportFailed(RuntimeError):
    pass


if __name__ == "__main__":
    main()
