"""The back office: `marketplace` subcommands for what happens outside the API, one module per area."""

from __future__ import annotations

import click

from marketplace.backoffice.commands.accesses import accesses
from marketplace.backoffice.commands.activity import activity
from marketplace.backoffice.commands.gifts import gifts
from marketplace.backoffice.commands.payments import payments
from marketplace.backoffice.commands.resources import resources
from marketplace.backoffice.commands.users import users
from marketplace.backoffice.commands.webhooks import webhooks

BACK_OFFICE_COMMANDS: tuple[click.Command, ...] = (
    payments,
    accesses,
    resources,
    gifts,
    users,
    webhooks,
    activity,
)
