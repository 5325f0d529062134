"""The back office: what happens outside the API (payments settled, accesses granted or revoked,
resources published or hidden, versions released, gift codes issued, accounts closed), as logged
actions (`actions.py`) the `marketplace` subcommands run (`commands/`); docs/back-office.md."""
