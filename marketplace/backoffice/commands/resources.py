"""`marketplace resources ...`: the resource changes of `marketplace/backoffice/resources.py`."""

from __future__ import annotations

import click

from marketplace.backoffice.commands.finding import (
    filters,
    list_options,
    print_found,
    print_rows,
    read,
    show_options,
)
from marketplace.backoffice.commands.support import one_change, operator_options, perform_and_report
from marketplace.console import fail


@click.group(
    help="Resources: find and show; visibility status, soft deletion, releases, the current version, the stats id."
)
def resources() -> None:
    pass


@resources.command("list", help="Find resources (deleted ones too), newest first; the filters combine.")
@click.option("--status", metavar="S", help="published, unlisted, draft, pending or rejected.")
@click.option("--author", metavar="ID", help="Written by this user.")
@click.option("--name", metavar="TEXT", help="Names containing TEXT, without regard to case.")
@list_options
def list_resources(
    status: str | None, author: str | None, name: str | None, limit: str | None, as_json: bool
) -> None:
    from marketplace.backoffice import finding

    wanted = filters(
        lambda: finding.ResourceFilters.from_options(status=status, author=author, name=name, limit=limit)
    )
    print_rows(read(lambda connection: finding.list_resources(connection, wanted)), as_json=as_json)


@resources.command(
    "show", help="Show RESOURCE (an id): every field, its versions, its accesses counted by source."
)
@click.argument("resource")
@show_options
def show_resource(resource: str, as_json: bool) -> None:
    from marketplace.backoffice import finding

    print_found(read(lambda connection: finding.show_resource(connection, resource)), as_json=as_json)


@resources.command("status", help="Set the status: published, unlisted, draft, pending or rejected.")
@click.argument("resource")
@click.argument("status")
@operator_options
def change_status(resource: str, status: str, by: str | None, as_json: bool) -> None:
    from marketplace.backoffice.resources import set_status

    perform_and_report(
        one_change(lambda session: set_status(session, resource, status)),
        by=by,
        as_json=as_json,
        via="marketplace resources status",
    )


@resources.command("soft-delete", help="Mark the resource deleted: it leaves the API; restore undoes it.")
@click.argument("resource")
@operator_options
def soft_delete(resource: str, by: str | None, as_json: bool) -> None:
    from marketplace.backoffice import resources as resource_actions

    perform_and_report(
        one_change(lambda session: resource_actions.soft_delete(session, resource)),
        by=by,
        as_json=as_json,
        via="marketplace resources soft-delete",
    )


@resources.command("restore", help="Undo a soft deletion.")
@click.argument("resource")
@operator_options
def restore(resource: str, by: str | None, as_json: bool) -> None:
    from marketplace.backoffice import resources as resource_actions

    perform_and_report(
        one_change(lambda session: resource_actions.restore(session, resource)),
        by=by,
        as_json=as_json,
        via="marketplace resources restore",
    )


@resources.command("release", help="Add a version to the resource and make it current (unless --no-promote).")
@click.argument("resource")
@click.option(
    "--version", "number", required=True, metavar="X", help="Version number, at most 32 characters."
)
@click.option("--title", required=True, metavar="T", help="Release title, at most 255 characters.")
@click.option("--changelog", default=None, metavar="TEXT", help="Never shown by the API.")
@click.option("--file-name", default=None, metavar="N", help="Never shown by the API.")
@click.option("--file-size", default=None, metavar="BYTES", help="Never shown by the API.")
@click.option("--checksum", default=None, metavar="C", help="Never shown by the API.")
@click.option("--promote/--no-promote", default=True, help="Make it the current version (default).")
@operator_options
def release(
    resource: str,
    number: str,
    title: str,
    changelog: str | None,
    file_name: str | None,
    file_size: str | None,
    checksum: str | None,
    promote: bool,
    by: str | None,
    as_json: bool,
) -> None:
    from marketplace.backoffice import resources as resource_actions

    build = resource_actions.Release(number, title, changelog, file_name, file_size, checksum)
    perform_and_report(
        one_change(lambda session: resource_actions.release(session, resource, build, promote=promote)),
        by=by,
        as_json=as_json,
        via="marketplace resources release",
    )


@resources.command(
    "promote",
    help="Make a version of the resource its current one. VERSION is a version number of the resource,"
    " else a version id.",
)
@click.argument("resource")
@click.argument("version")
@operator_options
def promote(resource: str, version: str, by: str | None, as_json: bool) -> None:
    from marketplace.backoffice import resources as resource_actions

    perform_and_report(
        one_change(lambda session: resource_actions.promote(session, resource, version)),
        by=by,
        as_json=as_json,
        via="marketplace resources promote",
    )


@resources.command(
    "stats-id", help="Set the statistics id (digits, at most 20), or clear it (--clear or '')."
)
@click.argument("resource")
@click.argument("value", required=False)
@click.option("--clear", is_flag=True, help="Remove the statistics id.")
@operator_options
def stats_id(resource: str, value: str | None, clear: bool, by: str | None, as_json: bool) -> None:
    from marketplace.backoffice.resources import set_stats_id

    if value is None and not clear:
        fail("stats-id: give a stats id, or --clear")
    if value is not None and clear:
        fail("stats-id: give a stats id or --clear, not both")
    perform_and_report(
        one_change(lambda session: set_stats_id(session, resource, None if clear else value)),
        by=by,
        as_json=as_json,
        via="marketplace resources stats-id",
    )
