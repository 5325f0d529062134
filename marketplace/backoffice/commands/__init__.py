"""The back office: `marketplace` subcommands for what happens outside the API, one module per area."""

from __future__ import annotations

import click

from marketplace.backoffice.commands.payments import payments

BACK_OFFICE_COMMANDS: tuple[click.Command, ...] = (payments,)
