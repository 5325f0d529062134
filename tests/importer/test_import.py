"""Import from the earlier platform: every mapping rule, checked in the database and through the API,
from a SQLite and a MariaDB source."""

from __future__ import annotations

import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import func, make_url, select

from marketplace.importer.mapping import Notes, Skip, map_gift
from marketplace.importer.run import EarlierImport, ImportReport
from marketplace.importer.source import EarlierDatabase, SourceError, parse_table_overrides
from marketplace.models import Access, ChatAccount, Gift, Payment, Resource, User, Version
from marketplace.services import Services
from tests.conftest import make_client
from tests.importer.earlier_fixture import EARLIER_ROWS, T0, T1, build_earlier_database
from tests.profiles import MARIADB_URL, require_service, unique_name

ULID_PATTERN = r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$"


def _mariadb_admin(statement: str) -> None:
    import pymysql

    connection = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="")
    try:
        with connection.cursor() as cursor:
            cursor.execute(statement)
        connection.commit()
    finally:
        connection.close()


@pytest.fixture(params=["sqlite", "mariadb"])
def earlier_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'earlier.db'}"
        build_earlier_database(url)
        yield url
        return
    mariadb = make_url(MARIADB_URL)
    require_service("MariaDB", mariadb.host or "127.0.0.1", mariadb.port or 3306)
    name = unique_name("mp_earlier")
    _mariadb_admin(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    url = MARIADB_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        build_earlier_database(url)
        yield url
    finally:
        _mariadb_admin(f"DROP DATABASE IF EXISTS `{name}`")


async def run_import(services: Services, url: str, *, dry_run: bool = False) -> ImportReport:
    source = EarlierDatabase(url)
    try:
        return await EarlierImport(source).run(services.engine, dry_run=dry_run)
    finally:
        source.close()


def table(report: ImportReport, target: str) -> dict[str, object]:
    found = next(t for t in report.tables if t.target == target)
    return {
        "read": found.read,
        "written": found.written,
        "skipped": dict(found.skipped),
        "adjusted": dict(found.adjusted),
    }


async def test_resources_keep_ids_and_map_flags_to_statuses(services: Services, earlier_url: str) -> None:
    await run_import(services, earlier_url)
    async with services.sessions() as session:
        rows = {r.id: r for r in (await session.execute(select(Resource))).scalars()}
    assert set(rows) == {100, 101, 102, 103, 105}
    assert rows[100].status == "published" and rows[100].deleted_at is None
    assert rows[101].status == "unlisted"
    assert rows[102].status == "pending"
    assert rows[103].deleted_at is not None
    assert rows[100].price == Decimal("5.00")
    assert (
        rows[100].icon == "images/100.png" and rows[101].icon is None and rows[102].icon == "images/102.jpg"
    )
    assert rows[100].unique_id == "SERVICE_0123456789ABCDE" and rows[100].stats_id == "4321"
    assert rows[101].stats_id is None
    assert rows[100].download == 42  # 30 + 12, the sum of its versions' counters
    assert rows[100].current_version_id == 11
    assert rows[101].current_version_id is None  # -1: never set
    assert rows[102].current_version_id is None  # dangling
    assert rows[105].current_version_id is None  # a version of another resource
    assert rows[101].tag == ""
    assert rows[100].created_at == T0 and rows[100].updated_at == T1


async def test_imported_catalogue_answers_through_the_api(services: Services, earlier_url: str) -> None:
    await run_import(services, earlier_url)
    async with make_client(services) as client:
        shops = await client.get("/api/v1/resource/100")
        assert shops.status_code == 200
        body = shops.json()
        assert body["price"] == 5 and b'"price":5,' in shops.content
        assert body["logo"] == "http://marketplace.test/storage/images/100.png"
        assert body["version_id"] == 11 and body["version"]["version"] == "1.1"
        assert body["download"] == 42 and body["purchases"] == 1
        assert body["unique_id"] == "SERVICE_0123456789ABCDE"
        assert "secret changelog" not in shops.text
        # A hidden earlier resource is unlisted: resolvable by id, absent from search.
        assert (await client.get("/api/v1/resource/101")).status_code == 200
        listed = [row["id"] for row in (await client.get("/api/v1/resource/search")).json()["data"]]
        assert listed == [100, 105]
        assert (await client.get("/api/v1/resource/102")).status_code == 404
        assert (await client.get("/api/v1/resource/103")).status_code == 404
        assert (await client.get("/api/v1/resource/version/101")).text == "(soon)"
        versions = (await client.get("/api/v1/resource/versions/100")).json()
        assert [v["id"] for v in versions] == [10, 11]
        author = (await client.get("/api/v1/author/2")).json()
        assert author == {"id": 2, "chat": "123456789012345678", "name": "buyer"}


async def test_users_and_chat_accounts_keep_ids_names_snowflakes_but_no_tokens(
    services: Services, earlier_url: str
) -> None:
    report = await run_import(services, earlier_url)
    async with services.sessions() as session:
        users = {u.id: u for u in (await session.execute(select(User))).scalars()}
        accounts = list((await session.execute(select(ChatAccount).order_by(ChatAccount.chat_id))).scalars())
    assert set(users) == {1, 2, 3}
    assert (
        users[1].name == "author"
        and users[1].avatar == "avatars/1.png"
        and users[1].email == "author@example.net"
    )
    assert [(a.user_id, a.chat_id) for a in accounts] == [
        (2, "123456789012345678"),
        (3, "223456789012345678"),
    ]
    assert set(ChatAccount.__table__.c.keys()) == {"id", "user_id", "chat_id", "created_at"}
    assert table(report, "users")["skipped"] == {"missing name": 1}
    assert table(report, "chat_accounts")["skipped"] == {"dangling user_id": 1}


async def test_no_oauth_token_or_chat_email_survives_the_move(
    services: Services, earlier_url: str, tmp_path: Path
) -> None:
    await run_import(services, earlier_url)
    async with services.engine.connect() as connection:
        dumped = []
        for name in ("users", "chat_accounts", "activity_log"):
            rows = (await connection.exec_driver_sql(f"SELECT * FROM {name}")).all()
            dumped.extend(str(value) for row in rows for value in row)
    text = " ".join(dumped)
    for secret in ("ACCESS-TOKEN-SECRET", "REFRESH-TOKEN-SECRET", "chat-email@example.net"):
        assert secret not in text


async def test_gifts_map_promotion_quota_uses_and_scope(services: Services, earlier_url: str) -> None:
    report = await run_import(services, earlier_url)
    async with services.sessions() as session:
        gifts = {g.code: g for g in (await session.execute(select(Gift))).scalars()}
    assert set(gifts) == {"ALLPLUGINS", "SHOPSONLY", "OFF"}
    everything = gifts["ALLPLUGINS"]
    assert (
        everything.percentage,
        everything.resource_id,
        everything.max_uses,
        everything.uses,
        everything.enabled,
    ) == (
        15,
        None,
        None,
        2,
        True,
    )
    shops = gifts["SHOPSONLY"]
    assert (shops.resource_id, shops.seller_id, shops.max_uses, shops.uses) == (100, 1, 5, 5)
    assert gifts["OFF"].enabled is False
    assert table(report, "gifts")["skipped"] == {"promotion outside 1..100": 1}
    async with make_client(services) as client:
        assert (await client.get("/api/v1/gift/ALLPLUGINS")).json() == {
            "code": "ALLPLUGINS",
            "percentage": 15,
            "active": True,
        }
        assert (await client.get("/api/v1/gift/SHOPSONLY")).json()["active"] is False  # quota exhausted
        assert (await client.get("/api/v1/gift/OFF")).json()["active"] is False


async def test_payments_get_new_ulids_cents_lower_case_statuses(services: Services, earlier_url: str) -> None:
    report = await run_import(services, earlier_url)
    async with services.sessions() as session:
        payments = {p.id: p for p in (await session.execute(select(Payment))).scalars()}
    assert set(payments) == {1, 2, 3, 4, 5}
    assert {i: p.status for i, p in payments.items()} == {
        1: "paid",
        2: "refunded",
        3: "unpaid",
        4: "disputed",
        5: "pending",
    }
    assert payments[1].amount_cents == 500 and payments[3].amount_cents == 2000
    assert len({p.uid for p in payments.values()}) == 5
    import re

    assert all(re.match(ULID_PATTERN, p.uid) for p in payments.values())
    assert payments[1].provider_transaction_id == "PAYID-1"
    assert payments[3].provider_transaction_id is None  # the placeholder `empty`
    assert payments[3].resource_id is None and payments[3].seller_id is None  # an invoice
    assert payments[1].resource_id == 100 and payments[1].seller_id == 1 and payments[1].buyer_id == 2
    assert payments[2].gift_id == 2
    assert table(report, "payments")["skipped"] == {"unknown status": 1}
    async with make_client(services) as client:
        answer = await client.get(f"/api/v1/payment/{payments[1].uid}")
        assert answer.json() == {
            "uid": payments[1].uid,
            "status": "paid",
            "amount_cents": 500,
            "currency": "EUR",
        }
        assert (await client.get("/api/v1/payment/PAYID-1")).status_code == 404


async def test_accesses_keep_ids_sources_and_refunds_revoke(services: Services, earlier_url: str) -> None:
    report = await run_import(services, earlier_url)
    async with services.sessions() as session:
        accesses = {a.id: a for a in (await session.execute(select(Access))).scalars()}
    assert set(accesses) == {1, 2, 3}
    assert (accesses[1].source, accesses[1].payment_id, accesses[1].revoked) == ("purchase", 1, False)
    assert (accesses[2].source, accesses[2].payment_id, accesses[2].revoked) == ("purchase", 2, True)
    assert (accesses[3].source, accesses[3].payment_id, accesses[3].revoked) == ("manual", None, False)
    assert table(report, "accesses")["skipped"] == {
        "second access of the same member and resource": 1,
        "dangling plugin_id": 1,
    }
    async with make_client(services) as client:
        owned = (await client.post("/api/v1/chat", json={"chat": "123456789012345678"})).json()
        assert [a["id"] for a in owned] == [1, 3]
        refunded = (await client.post("/api/v1/chat", json={"chat": "223456789012345678"})).json()
        assert refunded == []


async def test_malformed_rows_are_skipped_and_reported_not_fatal(
    services: Services, earlier_url: str
) -> None:
    report = await run_import(services, earlier_url)
    assert table(report, "resources")["skipped"] == {"dangling user_id": 1}
    assert table(report, "versions")["skipped"] == {"dangling plugin_id": 1}
    assert table(report, "resources")["read"] == len(EARLIER_ROWS["plugins"])
    lines = "\n".join(report.lines())
    assert "licences: not imported" in lines
    assert "skipped 1: dangling user_id" in lines


async def test_second_run_over_the_same_source_changes_nothing(services: Services, earlier_url: str) -> None:
    await run_import(services, earlier_url)
    async with services.engine.connect() as connection:
        before = {
            name: (await connection.exec_driver_sql(f"SELECT * FROM {name} ORDER BY 1")).all()
            for name in ("users", "resources", "versions", "chat_accounts", "gifts", "payments", "accesses")
        }
    again = await run_import(services, earlier_url)
    assert all(t.written == 0 for t in again.tables)
    assert again.current_versions_set == 0
    async with services.engine.connect() as connection:
        after = {
            name: (await connection.exec_driver_sql(f"SELECT * FROM {name} ORDER BY 1")).all()
            for name in before
        }
    assert after == before


async def test_dry_run_reports_what_would_be_written_and_writes_nothing(
    services: Services, earlier_url: str
) -> None:
    report = await run_import(services, earlier_url, dry_run=True)
    assert table(report, "resources")["written"] == 5
    assert "would write" in report.lines()[0]
    async with services.sessions() as session:
        assert (await session.execute(select(func.count(Resource.id)))).scalar_one() == 0
        assert (await session.execute(select(func.count(Version.id)))).scalar_one() == 0


async def test_new_rows_after_an_import_get_ids_above_the_imported_ones(
    services: Services, earlier_url: str
) -> None:
    await run_import(services, earlier_url)
    async with services.sessions() as session:
        user = User(name="newcomer")
        session.add(user)
        await session.commit()
        assert user.id > 3


def test_table_overrides_are_name_equals_actual() -> None:
    assert parse_table_overrides(("plugins=resources",)) == {"plugins": "resources"}
    with pytest.raises(SourceError):
        parse_table_overrides(("plugins",))
    with pytest.raises(SourceError):
        parse_table_overrides(("nonsense=x",))


def _cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    marketplace = str(Path(sys.executable).with_name("marketplace"))
    return subprocess.run([marketplace, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_command_line_import_prints_its_report_and_reads_renamed_tables(tmp_path: Path) -> None:
    import os

    from sqlalchemy import create_engine, text

    source = tmp_path / "earlier.db"
    build_earlier_database(f"sqlite:///{source}")
    engine = create_engine(f"sqlite:///{source}")
    with engine.begin() as connection:
        connection.execute(text("ALTER TABLE plugins RENAME TO resources_old"))
    engine.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARKETPLACE_")}
    env["MARKETPLACE_DATABASE_URL"] = f"sqlite:///{tmp_path / 'current.db'}"
    assert _cli(["migrate"], env, tmp_path).returncode == 0
    missing = _cli(["import-earlier", "--from", f"sqlite:///{source}"], env, tmp_path)
    assert missing.returncode != 0
    assert missing.stderr.strip().count("\n") == 0 and "plugins" in missing.stderr
    done = _cli(
        ["import-earlier", "--from", f"sqlite:///{source}", "--table", "plugins=resources_old"], env, tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "resources_old" in done.stdout and "licences: not imported" in done.stdout
    assert "resources_old: 6/6 rows" in done.stderr  # progress per table
    again = _cli(
        ["import-earlier", "--from", f"sqlite:///{source}", "--table", "plugins=resources_old"], env, tmp_path
    )
    table_lines = [line for line in again.stdout.splitlines()[1:] if line and not line.startswith(" ")][:8]
    assert [line.split()[0] for line in table_lines][:3] == ["users", "categories", "resources_old"]
    assert [line.split()[3] for line in table_lines] == ["0"] * 8


def test_command_line_import_refuses_a_bad_source_url_in_one_line(tmp_path: Path) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("MARKETPLACE_")}
    env["MARKETPLACE_DATABASE_URL"] = f"sqlite:///{tmp_path / 'current.db'}"
    assert _cli(["migrate"], env, tmp_path).returncode == 0
    for url in ("nonsense", f"sqlite:///{tmp_path / 'missing-dir' / 'x.db'}"):
        result = _cli(["import-earlier", "--from", url], env, tmp_path)
        assert result.returncode != 0
        assert result.stderr.strip() and "\n" not in result.stderr.strip()
        assert "Traceback" not in result.stderr


def test_gift_codes_that_differ_only_in_case_normalisation_or_final_sigma_are_one_code() -> None:
    seen: set[str] = set()
    first = map_gift(
        {"id": 1, "code": unicodedata.normalize("NFC", "Café"), "promotion": 5}, Notes(), {}, seen
    )
    assert first["code"] == "Café" and first["code_key"] == "café"
    for gift_id, code in ((2, unicodedata.normalize("NFD", "CAFÉ")), (3, "café")):
        with pytest.raises(Skip, match="duplicate code"):
            map_gift({"id": gift_id, "code": code, "promotion": 5}, Notes(), {}, seen)
    assert map_gift({"id": 4, "code": "ΟΔΟΣ", "promotion": 5}, Notes(), {}, seen)["code_key"] == "οδοσ"
    with pytest.raises(Skip, match="duplicate code"):
        map_gift({"id": 5, "code": "οδος", "promotion": 5}, Notes(), {}, seen)


async def test_an_import_writes_its_events_and_its_old_releases_are_history_not_news(
    services: Services, earlier_url: str
) -> None:
    from tests.webhooks.support import deliveries, dispatch, events_written, subscribe

    await subscribe(services.engine, "http://127.0.0.1:9/hook")
    await run_import(services, earlier_url)
    kinds = {kind for kind, *_ in await events_written(services.engine)}
    assert {"release.published", "access.granted"} <= kinds
    await dispatch(services.engine, services.settings)
    delivered = {delivery.event for delivery in await deliveries(services.engine)}
    assert "access.granted" in delivered
    assert "release.published" not in delivered
