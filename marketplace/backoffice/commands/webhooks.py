"""`marketplace webhooks ...`: subscriptions to the service's events (`marketplace/backoffice/webhooks.py`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from marketplace.backoffice.commands.finding import print_found, print_rows, read, show_options
from marketplace.backoffice.commands.support import (
    one_change,
    operator_name,
    operator_options,
    perform_and_report,
    perform_in,
    report,
)
from marketplace.console import CommandRefused, fail, one_line, run_command

if TYPE_CHECKING:
    from marketplace.config import Settings

# Written here as in `marketplace/webhooks/events.py`, which this module does not import at start.
_EVENTS_HELP = (
    "Comma-separated: release.published, resource.status_changed, payment.status_changed, "
    "access.granted, access.revoked (or * for every one)."
)


@click.group(help="Webhooks: POST the service's events, signed, to URLs (docs/webhooks.md).")
def webhooks() -> None:
    pass


@webhooks.command("add", help="Subscribe URL to events; prints its id and its signing secret, once.")
@click.argument("url")
@click.option("--events", "event_names", required=True, metavar="E[,E...]", help=_EVENTS_HELP)
@click.option("--resource", default=None, metavar="ID", help="Only events of this resource.")
@click.option("--author", default=None, metavar="USER_ID", help="Only events of this author's resources.")
@click.option(
    "--format",
    "body_format",
    type=click.Choice(["json", "chat"]),
    default="json",
    show_default=True,
    help="json: the service's events; chat: the chat platform's incoming-webhook messages.",
)
@operator_options
def add(
    url: str,
    event_names: str,
    resource: str | None,
    author: str | None,
    body_format: str,
    by: str | None,
    as_json: bool,
) -> None:
    operator = operator_name(by)

    async def run(settings: Settings) -> tuple[Any, str, bool]:
        from marketplace.backoffice.webhooks import NewSubscription, add_subscription
        from marketplace.webhooks.destinations import DestinationRefused, checked_url, resolved_addresses
        from marketplace.webhooks.sealing import new_secret, seal

        allow_private = settings.webhooks_allow_private
        try:
            checked = checked_url(url, allow_private=allow_private)
            parts = _host_and_port(checked)
            await resolved_addresses(*parts, allow_private=allow_private, timeout=5.0)
        except DestinationRefused as refusal:
            raise CommandRefused(f"cannot add {url}: {refusal}") from None
        secret = new_secret()
        new = NewSubscription(
            checked, event_names, resource, author, body_format, seal(secret, settings.webhooks_secret_key)
        )
        done = await perform_in(
            settings,
            one_change(lambda session: add_subscription(session, new)),
            operator=operator,
            via="marketplace webhooks add",
        )
        return done[0], secret, bool(settings.webhooks_secret_key)

    print_secret(*run_command(run), as_json=as_json)


def print_secret(logged: Any, secret: str, sealed: bool, *, as_json: bool) -> None:
    """The change, the subscription's id and its new secret, which is never shown again."""
    if as_json:
        click.echo(json.dumps({**logged.as_json(), "id": logged.change.subject["webhook"], "secret": secret}))
    else:
        click.echo(one_line(logged.change.summary))
        click.echo(f"id      {logged.change.subject['webhook']}")
        click.echo(f"secret  {secret}")
        click.echo("The secret is shown only now: keep it where the receiver checks signatures.")
    if not sealed:
        click.echo(
            "marketplace: note: MARKETPLACE_WEBHOOKS_SECRET_KEY is unset, so the secret is stored "
            "unsealed in the database (docs/webhooks.md)",
            err=True,
        )


def _host_and_port(url: str) -> tuple[str, int]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    return host, parts.port or (443 if parts.scheme == "https" else 80)


@webhooks.command("list", help="The subscriptions, newest first, with their pending deliveries.")
@click.option("--limit", metavar="N", help="At most N rows (default 50).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per row.")
def list_webhooks(limit: str | None, as_json: bool) -> None:
    from marketplace.backoffice import webhooks as subscriptions
    from marketplace.backoffice.commands.finding import filters
    from marketplace.backoffice.finding import filter_limit

    most = filters(lambda: filter_limit(limit))
    print_rows(read(lambda connection: subscriptions.list_subscriptions(connection, most)), as_json=as_json)


@webhooks.command("show", help="One subscription and its recent deliveries (status, attempts, last error).")
@click.argument("webhook_id", metavar="ID")
@show_options
def show(webhook_id: str, as_json: bool) -> None:
    from marketplace.backoffice import webhooks as subscriptions

    print_found(
        read(lambda connection: subscriptions.show_subscription(connection, webhook_id)), as_json=as_json
    )


def _switch(verb: str, enabled: bool, help_text: str) -> None:
    @webhooks.command(verb, help=help_text)
    @click.argument("webhook_id", metavar="ID")
    @operator_options
    def command(webhook_id: str, by: str | None, as_json: bool) -> None:
        from marketplace.backoffice.webhooks import set_enabled

        perform_and_report(
            one_change(lambda session: set_enabled(session, webhook_id, enabled)),
            by=by,
            as_json=as_json,
            via=f"marketplace webhooks {verb}",
        )


_switch("enable", True, "Deliver to the subscription again (its pending deliveries resume).")
_switch(
    "disable",
    False,
    "Stop delivering to the subscription: events from now on are not sent to it; its pending "
    "deliveries wait for it to be enabled.",
)


@webhooks.command(
    "rotate-secret",
    help="Give the subscription a new signing secret, printed once; every delivery from now on, "
    "retries included, is signed with it.",
)
@click.argument("webhook_id", metavar="ID")
@operator_options
def rotate_secret(webhook_id: str, by: str | None, as_json: bool) -> None:
    operator = operator_name(by)

    async def run(settings: Settings) -> tuple[Any, str, bool]:
        from marketplace.backoffice.webhooks import rotate_secret as replace_secret
        from marketplace.webhooks.sealing import new_secret, seal

        secret = new_secret()
        stored = seal(secret, settings.webhooks_secret_key)
        done = await perform_in(
            settings,
            one_change(lambda session: replace_secret(session, webhook_id, stored)),
            operator=operator,
            via="marketplace webhooks rotate-secret",
        )
        return done[0], secret, bool(settings.webhooks_secret_key)

    print_secret(*run_command(run), as_json=as_json)


@webhooks.command("remove", help="Delete the subscription and its deliveries.")
@click.argument("webhook_id", metavar="ID")
@operator_options
def remove(webhook_id: str, by: str | None, as_json: bool) -> None:
    from marketplace.backoffice.webhooks import remove_subscription

    perform_and_report(
        one_change(lambda session: remove_subscription(session, webhook_id)),
        by=by,
        as_json=as_json,
        via="marketplace webhooks remove",
    )


@webhooks.command("redeliver", help="Send a delivery's event again, as a new delivery (DELIVERY: its id).")
@click.argument("delivery")
@operator_options
def redeliver(delivery: str, by: str | None, as_json: bool) -> None:
    from marketplace.backoffice.webhooks import redeliver as queue_again

    perform_and_report(
        one_change(lambda session: queue_again(session, delivery)),
        by=by,
        as_json=as_json,
        via="marketplace webhooks redeliver",
    )


@webhooks.command("test", help="Send a ping to the subscription now and print what its receiver answered.")
@click.argument("webhook_id", metavar="ID")
@operator_options
def test(webhook_id: str, by: str | None, as_json: bool) -> None:
    operator = operator_name(by)

    async def run(settings: Settings) -> tuple[Any, Any, Any]:
        from marketplace.backoffice.webhooks import PingToSend, prepare_ping, record_ping
        from marketplace.database.engine import engine_for
        from marketplace.webhooks.delivery import DeliveryPolicy, send
        from marketplace.webhooks.payloads import BodyContext
        from marketplace.webhooks.sending import sending_client

        context = BodyContext(settings.public_base_url, settings.platform_names)
        pings: list[PingToSend] = []

        async def prepare(session: Any) -> Any:
            change, ping = await prepare_ping(session, webhook_id, context)
            pings.append(ping)
            return [change]

        done = await perform_in(settings, prepare, operator=operator, via="marketplace webhooks test")
        ping = pings[-1]
        async with sending_client() as client:
            sent = await send(
                client,
                url=ping.url,
                stored_secret=ping.stored_secret,
                event="ping",
                delivery_uid=ping.uid,
                body=ping.body,
                policy=DeliveryPolicy.from_settings(settings),
            )
        details = {
            "last_status": sent.status,
            "last_error": (sent.error or "")[:255] or None,
            "last_response": sent.response_excerpt[:1000] or None,
        }
        async with engine_for(settings) as engine, engine.begin() as connection:
            await record_ping(connection, ping, ok=sent.ok, details=details)
        return done, ping, sent

    done, ping, sent = run_command(run)
    report(done, as_json=as_json)
    if not sent.ok:
        fail(f"ping to {ping.url} failed: {sent.error or f'HTTP {sent.status}'} (delivery {ping.uid})")
    if not as_json:
        click.echo(f"HTTP {sent.status} in {sent.duration_seconds:.2f} s (delivery {ping.uid})")
