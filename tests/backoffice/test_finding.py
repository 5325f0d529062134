"""What every `list` and `show` of the back office shares: nothing printed when nothing matches,
aligned columns and JSON lines that agree, one line per row whatever a stored name holds, one-line
usage errors naming the option, and reads that write nothing; on both profiles."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from marketplace.backoffice.commands.finding import table
from marketplace.backoffice.finding import snapshot
from marketplace.models import User
from tests.backoffice.conftest import BackOffice
from tests.backoffice.finding import NAME_WITH_A_NEWLINE, P3, RESOURCE_WITH_A_NEWLINE, columns, shop
from tests.conftest import Loader
from tests.profiles import sqlite_only

LISTS = [
    ("payments", "list"),
    ("users", "list"),
    ("resources", "list"),
    ("gifts", "list"),
    ("accesses", "list"),
]


@pytest.fixture(autouse=True)
async def loaded(load: Loader) -> None:
    await load(shop())


@pytest.mark.parametrize(
    "args",
    [
        ("payments", "list", "--status", "disputed"),
        ("payments", "list", "--user", "99"),
        ("users", "list", "--name", "zed"),
        ("resources", "list", "--author", "99"),
        ("gifts", "list", "--seller", "3"),
        ("accesses", "list", "--source", "manual", "--revoked"),
    ],
)
@pytest.mark.parametrize("as_json", [False, True])
async def test_a_list_matching_nothing_prints_nothing_with_exit_0(
    back_office: BackOffice, args: tuple[str, ...], as_json: bool
) -> None:
    result = await back_office(*args, *(("--json",) if as_json else ()))
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


@pytest.mark.parametrize("args", LISTS)
async def test_a_list_prints_aligned_columns_that_agree_with_its_json_lines(
    back_office: BackOffice, args: tuple[str, ...]
) -> None:
    text = await back_office.ok(*args)
    as_json = await back_office.ok(*args, "--json")
    objects = [json.loads(line) for line in as_json.lines]
    assert all(isinstance(row, dict) for row in objects)
    header, *rows = columns(text.lines)
    assert len(rows) == len(objects) > 0
    assert header == [key.upper() for key in objects[0]]
    for cells, row in zip(rows, objects, strict=True):
        assert cells == [shown_as_text(value) for value in row.values()]


def shown_as_text(value: object) -> str:
    """A JSON value as the text columns show it: `-` for none, yes or no, control characters escaped."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value).replace("\n", "\\n").replace("\x1b", "\\x1b").replace("\x9b", "\\x9b")


async def test_a_stored_name_with_a_newline_stays_on_one_line(back_office: BackOffice) -> None:
    users = await back_office.ok("users", "list")
    assert len(users.lines) == 1 + 8
    assert next(line for line in users.lines if "Bob" in line).split()[1] == "Bob\\nEvil"
    resources = await back_office.ok("resources", "list")
    assert len(resources.lines) == 1 + 5
    assert "Evil\\nName \\x1b[31mred\\x9b0m" in resources.stdout
    assert all(line.isprintable() for line in resources.lines)
    shown = await back_office.ok("payments", "show", P3)
    assert "buyer_name               Bob\\nEvil" in shown.lines
    # JSON keeps the name as stored.
    assert (await back_office.ok("payments", "show", P3, "--json")).objects[0][
        "buyer_name"
    ] == NAME_WITH_A_NEWLINE
    listed = await back_office.ok("resources", "list", "--author", "2", "--json")
    assert [row["name"] for row in listed.objects] == [RESOURCE_WITH_A_NEWLINE, "Pro Tools"]
    # Escaped in JSON too: no control character reaches the terminal.
    assert listed.stdout.isascii()
    assert all(line.isprintable() for line in listed.lines)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("payments", "list", "--status", "bogus"), "--status"),
        (("payments", "list", "--user", "x"), "--user"),
        (("payments", "list", "--resource", "1.5"), "--resource"),
        (("payments", "list", "--since", "yesterday"), "--since"),
        (("payments", "list", "--until", "2024-13-01"), "--until"),
        (("payments", "list", "--since", "2024-06-01", "--until", "2024-05-01"), "--since"),
        (("payments", "list", "--limit", "0"), "--limit"),
        (("users", "list", "--chat", "abc"), "--chat"),
        (("users", "list", "--name", ""), "--name"),
        (("users", "list", "--limit", "many"), "--limit"),
        (("resources", "list", "--status", "gone"), "--status"),
        (("resources", "list", "--author", "-1"), "--author"),
        (("gifts", "list", "--seller", "bob"), "--seller"),
        (("accesses", "list", "--source", "stolen"), "--source"),
        (("accesses", "list", "--user", "99999999999"), "--user"),
    ],
)
async def test_an_invalid_filter_is_a_one_line_usage_error_naming_the_option(
    back_office: BackOffice, args: tuple[str, ...], option: str
) -> None:
    result = await back_office(*args)
    assert (result.exit_code, result.stdout) == (2, "")
    [line] = result.stderr.splitlines()
    assert line.startswith(f"marketplace: {option}: ")
    assert line.endswith(f"(see `marketplace {args[0]} list --help`)")


async def test_finding_writes_nothing(back_office: BackOffice) -> None:
    before = await back_office.snapshot()
    for args in [
        *LISTS,
        ("payments", "show", P3),
        ("users", "show", "2"),
        ("resources", "show", "1"),
        ("gifts", "show", "OLD"),
        ("accesses", "show", "1"),
        ("payments", "show", "nothing"),
    ]:
        await back_office(*args)
        await back_office(*args, "--json")
    assert await back_office.snapshot() == before


async def test_a_show_reads_one_snapshot_that_a_concurrent_commit_does_not_change(
    engine: AsyncEngine,
) -> None:
    count = select(func.count()).select_from(User)
    async with snapshot(engine) as connection:
        before = await connection.scalar(count)
        async with engine.begin() as writer:
            await writer.execute(insert(User).values(id=100, name="Newcomer"))
        assert await connection.scalar(count) == before
    async with engine.connect() as connection:
        assert await connection.scalar(count) == before + 1


@sqlite_only
def test_a_table_aligns_wide_characters_by_the_columns_a_terminal_gives_them() -> None:
    lines = table([{"name": "世界", "id": 1}, {"name": "abcde", "id": 22}, {"name": "e\u0301", "id": 3}])
    assert lines == ["NAME   ID", "世界   1", "abcde  22", "e\u0301      3"]
