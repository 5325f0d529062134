"""`marketplace gifts ...`: the gift-code changes of `marketplace/backoffice/gifts.py`."""

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


@click.group(help="Gift codes: find and show; create, enable, disable.")
def gifts() -> None:
    pass


@gifts.command("list", help="Find gift codes, newest first; the filters combine.")
@click.option("--seller", metavar="USER_ID", help="Issued for this seller.")
@click.option(
    "--active", is_flag=True, help="Only codes that apply now (enabled, started, not expired, uses left)."
)
@list_options
def list_gifts(seller: str | None, active: bool, limit: str | None, as_json: bool) -> None:
    from marketplace.backoffice import finding

    wanted = filters(lambda: finding.GiftFilters.from_options(seller=seller, active=active, limit=limit))
    print_rows(read(lambda connection: finding.list_gifts(connection, wanted)), as_json=as_json)


@gifts.command("show", help="Show the gift code CODE (without regard to case): every stored field.")
@click.argument("code")
@show_options
def show_gift(code: str, as_json: bool) -> None:
    from marketplace.backoffice import finding

    print_found(read(lambda connection: finding.show_gift(connection, code)), as_json=as_json)


@gifts.command(
    "create", help="Issue the gift code CODE (at most 32 characters, unique without regard to case)."
)
@click.argument("code")
@click.option("--percentage", required=True, metavar="N", help="Discount in percent, 1 to 100.")
@click.option(
    "--starts-at",
    default=None,
    metavar="TIME",
    help="ISO 8601 (Z, an offset, or a bare date); UTC if no zone.",
)
@click.option("--expires-at", default=None, metavar="TIME", help="ISO 8601, after --starts-at.")
@click.option(
    "--quota",
    default=None,
    metavar="N",
    help="How many times it may be used (at least 1); no quota if omitted.",
)
@click.option("--resource", default=None, metavar="ID", help="Only this resource (its author is the seller).")
@click.option(
    "--seller",
    default=None,
    metavar="USER_ID",
    help="Every resource of this user (or the seller of --resource).",
)
@click.option("--disabled", is_flag=True, help="Create it disabled.")
@operator_options
def create(
    code: str,
    percentage: str,
    starts_at: str | None,
    expires_at: str | None,
    quota: str | None,
    resource: str | None,
    seller: str | None,
    disabled: bool,
    by: str | None,
    as_json: bool,
) -> None:
    from marketplace.backoffice.gifts import NewGift, create_gift

    new = NewGift(code, percentage, starts_at, expires_at, quota, resource, seller, enabled=not disabled)
    perform_and_report(
        one_change(lambda session: create_gift(session, new)),
        by=by,
        as_json=as_json,
        via="marketplace gifts create",
    )


def _switch(verb: str, enabled: bool, help_text: str) -> None:
    @gifts.command(verb, help=help_text)
    @click.argument("code")
    @operator_options
    def command(code: str, by: str | None, as_json: bool) -> None:
        from marketplace.backoffice.gifts import set_enabled

        perform_and_report(
            one_change(lambda session: set_enabled(session, code, enabled)),
            by=by,
            as_json=as_json,
            via=f"marketplace gifts {verb}",
        )


_switch("enable", True, "Let the code apply again (CODE without regard to case).")
_switch("disable", False, "Stop the code from applying (CODE without regard to case).")
