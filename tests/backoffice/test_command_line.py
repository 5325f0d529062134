"""The command line's own refusals: a usage error is one line too, naming the help to read."""

from __future__ import annotations

import httpx
import pytest

from tests.backoffice.conftest import BackOffice
from tests.profiles import sqlite_only


@sqlite_only
@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("resources", "status", "1", "draft", "--bogus"),
            "marketplace: No such option '--bogus'. (see `marketplace resources status --help`)",
        ),
        (
            ("payments", "confirm"),
            "marketplace: Missing argument 'UID'. (see `marketplace payments confirm --help`)",
        ),
        (
            ("payments", "settle", "X"),
            "marketplace: No such command 'settle'. (see `marketplace payments --help`)",
        ),
    ],
)
async def test_a_usage_error_is_one_line_with_exit_2(
    back_office: BackOffice, api: httpx.AsyncClient, args: tuple[str, ...], line: str
) -> None:
    result = await back_office(*args)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", line + "\n")


@sqlite_only
async def test_the_command_alone_shows_its_help(back_office: BackOffice, api: httpx.AsyncClient) -> None:
    result = await back_office()
    assert result.exit_code == 0
    assert result.stdout.startswith("Usage: marketplace [OPTIONS] COMMAND [ARGS]...")
    assert "payments" in result.stdout
