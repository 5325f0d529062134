"""The `marketplace` command end to end: real processes on a SQLite file, a real server over HTTP."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import shutil
import signal
import socket
import socketserver
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import make_url

from marketplace.fixtures.loader import COLLECTIONS
from marketplace.migrations.runner import head_revision
from tests.profiles import POSTGRES_ADMIN_URL, require_postgresql, unique_name

MARKETPLACE = str(Path(sys.executable).with_name("marketplace"))
DEMO_MODULE = Path(__file__).resolve().parents[1] / "marketplace" / "fixtures" / "demo.py"
DEMO_STORAGE = DEMO_MODULE.with_name("demo_storage")
COMMAND_TIMEOUT = 30.0
SERVER_START_TIMEOUT = 20.0
SERVER_STOP_TIMEOUT = 15.0
LOADED_TABLES = [collection.table.name for collection in COLLECTIONS]
ICON_BYTES = b"\x89PNG\r\n\x1a\n-marketplace-test-icon"

SMALL_CATALOGUE: dict[str, Any] = {
    "users": [{"id": 1, "name": "Alice", "created_at": "2024-01-01T00:00:00Z"}, {"id": 2, "name": "Bob"}],
    "categories": [{"id": 1, "name": "Economy"}],
    "resources": [
        {
            "id": 1,
            "user_id": 1,
            "name": "Eco",
            "tag": "banks",
            "price": "9.99",
            "category_id": 1,
            "icon": "images/1.png",
            "version_id": 11,
            "created_at": "2024-05-01T10:00:00Z",
            "updated_at": "2024-05-02T10:00:00Z",
        },
        {"id": 2, "user_id": 2, "name": "Hidden", "status": "draft"},
        {"id": 3, "user_id": 2, "name": "Free Chat", "price": 0},
    ],
    "versions": [
        {"id": 10, "resource_id": 1, "version": "1.0.0", "created_at": "2024-05-01T10:00:00Z"},
        {"id": 11, "resource_id": 1, "version": "1.1.0", "created_at": "2024-05-03T10:00:00Z"},
        {"id": 12, "resource_id": 1, "version": "2.0.0-beta", "created_at": "2024-05-04T10:00:00Z"},
    ],
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Cli:
    """The command run as an operator would: environment variables only, in a folder without `.env`."""

    workdir: Path
    database: Path
    storage: Path
    port: int
    env: dict[str, str]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [MARKETPLACE, *args],
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            cwd=self.workdir,
            env=self.env,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )

    def with_database_url(self, url: str) -> Cli:
        return Cli(
            self.workdir,
            self.database,
            self.storage,
            self.port,
            {**self.env, "MARKETPLACE_DATABASE_URL": url},
        )

    def write_fixture(self, document: Any, name: str = "fixture.json") -> Path:
        path = self.workdir / name
        path.write_text(json.dumps(document), encoding="utf-8")
        return path


def operator_environment(database: Path, storage: Path, port: int) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("MARKETPLACE_")}
    env.update(
        MARKETPLACE_DATABASE_URL=f"sqlite:///{database}",
        MARKETPLACE_STORAGE_DIR=str(storage),
        MARKETPLACE_BASE_URL=f"http://127.0.0.1:{port}",
        # Nothing here may reach the internet: upstreams point at a closed local port.
        MARKETPLACE_CHAT_API_URL="http://127.0.0.1:9/chat-api",
        MARKETPLACE_STATS_API_URL="http://127.0.0.1:9/stats-api",
        MARKETPLACE_STATS_PAGE_URL="http://127.0.0.1:9/stats-page",
    )
    return env


def make_cli(root: Path) -> Cli:
    workdir = root / "work"
    workdir.mkdir()
    port = free_port()
    database = root / "m.db"
    storage = root / "storage"
    return Cli(workdir, database, storage, port, operator_environment(database, storage, port))


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return make_cli(tmp_path)


@pytest.fixture(scope="module")
def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database `marketplace migrate` created, copied by the tests that start from a migrated schema."""
    folder = tmp_path_factory.mktemp("migrated")
    database = folder / "template.db"
    result = subprocess.run(
        [MARKETPLACE, "migrate"],
        capture_output=True,
        text=True,
        cwd=folder,
        env=operator_environment(database, folder / "storage", free_port()),
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return database


def copy_database(source: Path, target: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{source}{suffix}").exists():
            shutil.copyfile(f"{source}{suffix}", f"{target}{suffix}")


@pytest.fixture
def migrated_cli(cli: Cli, migrated_database: Path) -> Cli:
    copy_database(migrated_database, cli.database)
    return cli


def query(database: Path, sql: str) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(database)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


def row_counts(database: Path) -> dict[str, int]:
    return {table: query(database, f"SELECT count(*) FROM {table}")[0][0] for table in LOADED_TABLES}


def table_contents(database: Path) -> dict[str, list[tuple[Any, ...]]]:
    """The rows of every table but the change log and the search generation, which record every
    write (a run that writes the same rows again adds to them by design), and but the storage of the text index, whose
    segments depend on the order of writes: the index is compared by its rows instead."""
    tables = [
        name
        for (name,) in query(database, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        if not name.startswith(("sqlite_", "resource_search_"))
        and name not in ("change_log", "search_generation")
    ]
    return {table: query(database, f"SELECT rowid, * FROM {table} ORDER BY rowid") for table in tables}


def assert_one_line_error(result: subprocess.CompletedProcess[str], exit_code: int = 1) -> str:
    """The failure's one line on standard error (`marketplace: ...`), with its exit code: 1 refused or
    failed, 2 usage."""
    assert result.returncode == exit_code, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("marketplace: "), result.stderr
    return lines[0]


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


StartServer = Callable[[Cli], Server]


@pytest.fixture
def start_server() -> Iterator[StartServer]:
    """Starts `marketplace serve` and waits (bounded) until it answers; always stops it afterwards."""
    servers: list[Server] = []

    def start(cli: Cli) -> Server:
        log = cli.workdir.parent / f"serve-{len(servers)}-{cli.port}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [MARKETPLACE, "serve", "--port", str(cli.port)],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=cli.workdir,
                env=cli.env,
            )
        server = Server(process, log)
        servers.append(server)
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while True:
            if process.poll() is not None:
                pytest.fail(f"the server exited with {process.returncode}:\n{server.output()}")
            try:
                httpx.get(f"{cli.base_url}/storage/readiness-probe", timeout=1.0)
                return server
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the server did not answer within {SERVER_START_TIMEOUT} s:\n{server.output()}")
            time.sleep(0.1)

    yield start
    for server in servers:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(timeout=SERVER_STOP_TIMEOUT)


def assert_stops_gracefully_on_sigterm(server: Server) -> None:
    server.process.send_signal(signal.SIGTERM)
    returncode = server.process.wait(timeout=SERVER_STOP_TIMEOUT)
    # The server may exit 0 or re-raise the signal it handled (uvicorn does); it must have shut down.
    assert returncode in (0, -signal.SIGTERM), server.output()
    assert "Application shutdown complete." in server.output()
    assert "Traceback" not in server.output()


def test_version_prints_the_package_version(cli: Cli) -> None:
    result = cli.run("--version")

    assert result.returncode == 0, result.stderr
    assert result.stdout == f"marketplace {importlib.metadata.version('marketplace')}\n"
    assert result.stderr == ""


def test_migrate_is_idempotent(cli: Cli) -> None:
    first = cli.run("migrate")
    second = cli.run("migrate")

    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert query(cli.database, "SELECT version_num FROM alembic_version") == [(head_revision(),)]
    tables = {name for (name,) in query(cli.database, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert set(LOADED_TABLES) <= tables


def test_env_file_in_the_working_directory_configures_the_command(cli: Cli) -> None:
    from_file = cli.workdir / "from-env-file.db"
    (cli.workdir / ".env").write_text(f"MARKETPLACE_DATABASE_URL=sqlite:///{from_file}\n", encoding="utf-8")
    env = {name: value for name, value in cli.env.items() if name != "MARKETPLACE_DATABASE_URL"}

    result = subprocess.run(
        [MARKETPLACE, "migrate"],
        capture_output=True,
        text=True,
        cwd=cli.workdir,
        env=env,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert query(from_file, "SELECT version_num FROM alembic_version") == [(head_revision(),)]


def test_load_reads_a_file(migrated_cli: Cli) -> None:
    result = migrated_cli.run("load", str(migrated_cli.write_fixture(SMALL_CATALOGUE)))

    assert result.returncode == 0, result.stderr
    counts = row_counts(migrated_cli.database)
    assert (counts["users"], counts["categories"], counts["resources"], counts["versions"]) == (2, 1, 3, 3)
    assert query(migrated_cli.database, "SELECT name, current_version_id FROM resources WHERE id = 1") == [
        ("Eco", 11)
    ]


def test_load_dash_reads_standard_input(migrated_cli: Cli) -> None:
    result = migrated_cli.run("load", "-", stdin=json.dumps(SMALL_CATALOGUE))

    assert result.returncode == 0, result.stderr
    counts = row_counts(migrated_cli.database)
    assert (counts["users"], counts["resources"], counts["versions"]) == (2, 3, 3)


def test_malformed_fixture_fails_with_one_line_naming_the_key_and_writes_nothing(migrated_cli: Cli) -> None:
    document = json.loads(json.dumps(SMALL_CATALOGUE))
    document["resources"][1]["colour"] = "red"

    result = migrated_cli.run("load", str(migrated_cli.write_fixture(document)))

    assert "resources[1].colour" in assert_one_line_error(result)
    assert row_counts(migrated_cli.database) == dict.fromkeys(LOADED_TABLES, 0)


def test_fixture_refused_by_the_database_fails_with_one_line_and_writes_nothing(migrated_cli: Cli) -> None:
    document = json.loads(json.dumps(SMALL_CATALOGUE))
    document["accesses"] = [{"id": 1, "user_id": 99, "resource_id": 1}]

    assert_one_line_error(migrated_cli.run("load", "-", stdin=json.dumps(document)))
    assert row_counts(migrated_cli.database) == dict.fromkeys(LOADED_TABLES, 0)


@pytest.mark.parametrize("problem", ["missing", "invalid-json", "not-utf-8"])
def test_unreadable_fixture_fails_with_one_line(migrated_cli: Cli, problem: str) -> None:
    path = migrated_cli.workdir / "fixture.json"
    if problem == "invalid-json":
        path.write_text('{"users": [', encoding="utf-8")
    elif problem == "not-utf-8":
        path.write_bytes(b'{"users": [{"id": 1, "name": "\xff"}]}')

    assert_one_line_error(migrated_cli.run("load", str(path)))
    assert row_counts(migrated_cli.database) == dict.fromkeys(LOADED_TABLES, 0)


def test_directory_given_as_fixture_fails_with_one_line(migrated_cli: Cli) -> None:
    assert_one_line_error(migrated_cli.run("load", str(migrated_cli.workdir)))


@pytest.mark.parametrize(
    ("command", "url"), [("migrate", "nonsense"), ("migrate", "mysql://x"), ("serve", "mysql://x")]
)
def test_invalid_database_url_fails_with_one_line(cli: Cli, command: str, url: str) -> None:
    assert_one_line_error(cli.with_database_url(url).run(command))


@pytest.mark.parametrize(
    "url", ["postgresql://nobody@127.0.0.1:1/marketplace", "sqlite:////nonexistent-folder/sub/m.db"]
)
def test_unreachable_database_fails_with_one_line(cli: Cli, url: str) -> None:
    assert_one_line_error(cli.with_database_url(url).run("migrate"))


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://marketplace:s3cr3t-pw@db.internal:notaport/marketplace",
        "postgresql://marketplace:s3cr3t-pw@127.0.0.1:1/marketplace",
        "mysql://marketplace:s3cr3t-pw@db.internal/marketplace",
        "://marketplace:s3cr3t-pw@",
    ],
)
def test_a_failing_database_url_never_shows_its_password(cli: Cli, url: str) -> None:
    for command in (["migrate"], ["serve"], ["import-earlier", "--from", url]):
        result = cli.with_database_url(url).run(*command)
        assert "s3cr3t-pw" not in result.stderr + result.stdout, command
        assert_one_line_error(result)


@pytest.mark.parametrize(
    "source",
    ["mysql://earlier:s3cr3t-pw@127.0.0.1:1/earlier", "mysql://earlier:s3cr3t-pw@db.internal:port/x"],
)
def test_a_failing_earlier_database_url_never_shows_its_password(migrated_cli: Cli, source: str) -> None:
    result = migrated_cli.run("import-earlier", "--from", source)
    assert "s3cr3t-pw" not in result.stderr + result.stdout
    assert_one_line_error(result)


def test_serve_before_migrate_fails_with_one_line(cli: Cli) -> None:
    assert_one_line_error(cli.run("serve", "--port", str(cli.port)))


def test_served_api_answers_over_http_and_stops_on_sigterm(
    migrated_cli: Cli, start_server: StartServer
) -> None:
    loaded = migrated_cli.run("load", str(migrated_cli.write_fixture(SMALL_CATALOGUE)))
    assert loaded.returncode == 0, loaded.stderr
    (migrated_cli.storage / "images").mkdir(parents=True)
    (migrated_cli.storage / "images" / "1.png").write_bytes(ICON_BYTES)

    server = start_server(migrated_cli)
    with httpx.Client(base_url=migrated_cli.base_url, timeout=10.0) as http:
        shown = http.get("/api/v1/resource/1")
        search = http.get("/api/v1/resource/search")
        current = http.get("/api/v1/resource/version/1")
        missing = http.get("/api/v1/resource/999")
        hidden = http.get("/api/v1/resource/2")
        licence = http.post("/api/v1/licence/abc")
        icon = http.get(shown.json()["logo"].removeprefix(migrated_cli.base_url))

    assert shown.status_code == 200
    assert shown.headers["content-type"] == "application/json"
    assert shown.headers["x-service-api-version"] == "1"
    body = shown.json()
    assert (body["id"], body["name"], body["price"], body["version_id"]) == (1, "Eco", 9.99, 11)
    assert body["version"]["version"] == "1.1.0"
    assert body["logo"] == f"{migrated_cli.base_url}/storage/images/1.png"
    assert body["created_at"] == "2024-05-01T10:00:00.000000Z"

    assert search.status_code == 200
    assert search.headers["x-service-api-version"] == "1"
    assert search.json()["total"] == 2
    assert [row["id"] for row in search.json()["data"]] == [1, 3]

    assert current.status_code == 200
    assert current.headers["content-type"].lower() == "text/plain; charset=utf-8"
    assert current.text == "1.1.0"

    for not_found in (missing, hidden):
        assert not_found.status_code == 404
        assert not_found.json() == {"message": "Not found."}
        assert not_found.headers["x-service-api-version"] == "1"

    assert licence.status_code == 200
    assert licence.json() == {"status": "success", "message": "The license is valid"}

    assert icon.status_code == 200
    assert icon.content == ICON_BYTES

    assert_stops_gracefully_on_sigterm(server)


@dataclass
class DemoRuns:
    cli: Cli
    first: subprocess.CompletedProcess[str]
    second: subprocess.CompletedProcess[str]
    after_first: dict[str, list[tuple[Any, ...]]]
    after_second: dict[str, list[tuple[Any, ...]]]


@pytest.fixture(scope="module")
def demo_twice(tmp_path_factory: pytest.TempPathFactory, migrated_database: Path) -> DemoRuns:
    """`marketplace demo` run twice on one migrated database, with the tables after each run."""
    if not DEMO_MODULE.exists():
        pytest.skip("marketplace/fixtures/demo.py is not written yet")
    cli = make_cli(tmp_path_factory.mktemp("demo"))
    copy_database(migrated_database, cli.database)
    first = cli.run("demo")
    after_first = table_contents(cli.database)
    second = cli.run("demo")
    return DemoRuns(cli, first, second, after_first, table_contents(cli.database))


def _ids(contents: dict[str, list[tuple[Any, ...]]]) -> dict[str, list[Any]]:
    return {table: sorted(row[0] for row in contents[table]) for table in LOADED_TABLES}


def test_demo_twice_succeeds_with_the_same_rows(demo_twice: DemoRuns) -> None:
    assert demo_twice.first.returncode == 0, demo_twice.first.stderr
    assert demo_twice.second.returncode == 0, demo_twice.second.stderr
    assert len(demo_twice.after_first["resources"]) > 0
    assert _ids(demo_twice.after_second) == _ids(demo_twice.after_first)


def test_demo_twice_leaves_the_same_table_contents(demo_twice: DemoRuns) -> None:
    assert demo_twice.after_second == demo_twice.after_first


def test_demo_catalogue_is_served_with_its_storage_icons(
    demo_twice: DemoRuns, start_server: StartServer
) -> None:
    cli = demo_twice.cli
    assert demo_twice.second.returncode == 0, demo_twice.second.stderr

    server = start_server(cli)
    with httpx.Client(base_url=cli.base_url, timeout=10.0) as http:
        search = http.get("/api/v1/resource/search")
        assert search.status_code == 200
        assert search.json()["total"] > 0
        with_logo = next(row for row in search.json()["data"] if row["logo"] is not None)
        shown = http.get(f"/api/v1/resource/{with_logo['id']}")
        versions = http.get(f"/api/v1/resource/versions/{with_logo['id']}")
        author = http.get(f"/api/v1/author/{with_logo['user_id']}")
        storage_path = with_logo["logo"].removeprefix(cli.base_url)
        icon = http.get(storage_path)

    assert shown.status_code == 200
    assert shown.json() == with_logo
    assert versions.status_code == 200
    assert author.status_code == 200
    assert storage_path.startswith("/storage/")
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/png"
    assert icon.content == (DEMO_STORAGE / storage_path.removeprefix("/storage/")).read_bytes()
    assert_stops_gracefully_on_sigterm(server)


def run_into_a_closed_pipe(cli: Cli, *args: str) -> subprocess.CompletedProcess[str]:
    """The command with its standard output a real pipe whose reader has already gone
    (`marketplace ... | head -0`): its first write meets EPIPE."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        result = subprocess.run(
            [MARKETPLACE, *args],
            stdin=subprocess.DEVNULL,
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cli.workdir,
            env=cli.env,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )
    finally:
        os.close(writer)
    return subprocess.CompletedProcess(result.args, result.returncode, "", result.stderr)


@pytest.mark.parametrize(
    "command",
    [
        ["--version"],
        ["--help"],
        ["accesses", "--help"],
        ["migrate"],
        ["load", "FIXTURE"],
        ["demo"],
        ["accesses", "grant", "2", "3"],
        ["activity"],
        ["activity", "--json"],
    ],
)
def test_writing_into_a_closed_pipe_ends_quietly_with_exit_0(migrated_cli: Cli, command: list[str]) -> None:
    migrated_cli.run("load", str(migrated_cli.write_fixture(SMALL_CATALOGUE)))
    migrated_cli.run("accesses", "grant", "1", "3")
    command = [
        str(migrated_cli.write_fixture(SMALL_CATALOGUE)) if arg == "FIXTURE" else arg for arg in command
    ]

    result = run_into_a_closed_pipe(migrated_cli, *command)

    assert (result.returncode, result.stderr) == (0, "")


# Commands that work on an existing schema, each refused alike when the database is not usable.
SCHEMA_COMMANDS = [
    ["activity"],
    ["accesses", "grant", "1", "3"],
    ["load", "FIXTURE"],
    ["serve", "--port", "PORT"],
]


def run_on(cli: Cli, url: str, command: list[str]) -> subprocess.CompletedProcess[str]:
    replacements = {"FIXTURE": str(cli.write_fixture(SMALL_CATALOGUE)), "PORT": str(cli.port)}
    return cli.with_database_url(url).run(*(replacements.get(arg, arg) for arg in command))


@pytest.mark.parametrize("command", [["migrate"], *SCHEMA_COMMANDS])
def test_a_missing_postgresql_database_is_one_line_telling_to_create_it(cli: Cli, command: list[str]) -> None:
    require_postgresql()
    url = make_url(POSTGRES_ADMIN_URL).set(database=unique_name("mp_missing")).render_as_string(False)

    line = assert_one_line_error(run_on(cli, url, command))

    assert line.startswith("marketplace: cannot connect to the database: database "), line
    assert line.endswith(" does not exist (create it, then run `marketplace migrate`)"), line


@pytest.mark.parametrize("command", [["migrate"], *SCHEMA_COMMANDS])
def test_an_unreachable_postgresql_database_is_one_line(cli: Cli, command: list[str]) -> None:
    url = f"postgresql://marketplace:s3cr3t-pw@127.0.0.1:{free_port()}/marketplace"

    result = run_on(cli, url, command)

    assert assert_one_line_error(result).startswith("marketplace: cannot reach the database: ")
    assert "s3cr3t-pw" not in result.stderr + result.stdout


@contextmanager
def server_refusing_every_password() -> Iterator[int]:
    """A PostgreSQL server, as far as the wire protocol's start goes, that asks for the password
    and refuses it as a real server does (SQLSTATE 28P01); yields its port."""

    def message(kind: bytes, payload: bytes) -> bytes:
        return kind + struct.pack("!i", len(payload) + 4) + payload

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            connection: socket.socket = self.request
            connection.settimeout(10)
            while True:
                (length,) = struct.unpack("!i", connection.recv(4, socket.MSG_WAITALL))
                body = connection.recv(length - 4, socket.MSG_WAITALL)
                if body[:4] == struct.pack("!i", 80877103):  # SSLRequest: none here
                    connection.sendall(b"N")
                    continue
                break
            connection.sendall(message(b"R", struct.pack("!i", 3)))  # cleartext password, please
            connection.recv(65536)
            fields = [
                b"SFATAL",
                b"VFATAL",
                b"C28P01",
                b'Mpassword authentication failed for user "marketplace"',
            ]
            connection.sendall(message(b"E", b"".join(field + b"\0" for field in fields) + b"\0"))

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler) as server:
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield int(server.server_address[1])
        finally:
            server.shutdown()


@pytest.mark.parametrize("command", [["migrate"], *SCHEMA_COMMANDS])
def test_a_wrong_postgresql_password_is_one_line_that_never_shows_it(cli: Cli, command: list[str]) -> None:
    with server_refusing_every_password() as port:
        result = run_on(cli, f"postgresql://marketplace:s3cr3t-pw@127.0.0.1:{port}/marketplace", command)

    line = assert_one_line_error(result)
    assert line == (
        'marketplace: cannot connect to the database: password authentication failed for user "marketplace"'
        " (check the user and password of MARKETPLACE_DATABASE_URL)"
    )
    assert "s3cr3t-pw" not in result.stderr + result.stdout


def set_revision(database_url: str, revision: str, *, downgrade: bool = False) -> None:
    """Puts the database's schema back at `revision` (`downgrade`), or only writes `revision` into
    alembic_version, as a newer release's migration would have."""
    from alembic import command as alembic_command
    from sqlalchemy import Connection, text
    from sqlalchemy.ext.asyncio import create_async_engine

    from marketplace.database.engine import async_url
    from marketplace.migrations.runner import alembic_config

    def change(connection: Connection) -> None:
        if downgrade:
            config = alembic_config()
            config.attributes["connection"] = connection
            alembic_command.downgrade(config, revision)
        else:
            connection.execute(
                text("UPDATE alembic_version SET version_num = :revision"), {"revision": revision}
            )

    async def run() -> None:
        engine = create_async_engine(async_url(database_url))
        try:
            async with engine.begin() as connection:
                await connection.run_sync(change)
        finally:
            await engine.dispose()

    asyncio.run(run())


@pytest.mark.parametrize("command", SCHEMA_COMMANDS)
def test_a_schema_older_than_the_code_is_refused_until_migrate(
    cli: Cli, database_url: str, command: list[str]
) -> None:
    set_revision(database_url, "0004", downgrade=True)

    line = assert_one_line_error(run_on(cli, database_url, command))

    assert line == (
        "marketplace: the database schema is older than this version of marketplace"
        f" (revision 0004, expected {head_revision()}): run `marketplace migrate` first"
    )
    assert cli.with_database_url(database_url).run("migrate").returncode == 0
    assert run_on(cli, database_url, ["activity"]).returncode == 0


@pytest.mark.parametrize("command", [["migrate"], *SCHEMA_COMMANDS])
def test_a_schema_newer_than_the_code_is_refused_by_every_command(
    cli: Cli, database_url: str, command: list[str]
) -> None:
    set_revision(database_url, "9000_from_a_newer_release")

    line = assert_one_line_error(run_on(cli, database_url, command))

    assert line == (
        "marketplace: the database schema is at revision 9000_from_a_newer_release, which this version of"
        " marketplace does not know (a newer version migrated it): run that newer version, or restore a"
        " backup taken before it migrated"
    )


@pytest.mark.parametrize("command", SCHEMA_COMMANDS)
def test_a_command_needing_a_schema_never_creates_a_missing_sqlite_file(cli: Cli, command: list[str]) -> None:
    line = assert_one_line_error(run_on(cli, f"sqlite:///{cli.database}", command))

    assert line == (
        f"marketplace: the SQLite database {cli.database} does not exist: run `marketplace migrate`"
        " (or `marketplace demo`) to create it"
    )
    assert not cli.database.exists()


@pytest.mark.parametrize(
    ("command", "exit_code", "message"),
    [
        (["accesses", "grant", "1", "-1"], 1, "no resource '-1'"),
        (["accesses", "revoke", "-2", "1", "--by", "alice"], 1, "no user '-2'"),
        (["accesses", "grant", "--by", "-5", "1", "-1"], 1, "no resource '-1'"),
        (["accesses", "grant", "1", "-1", "--bogus"], 2, "No such option '--bogus'."),
    ],
)
def test_a_negative_number_given_as_an_id_is_read_as_that_id(
    migrated_cli: Cli, command: list[str], exit_code: int, message: str
) -> None:
    migrated_cli.run("load", str(migrated_cli.write_fixture(SMALL_CATALOGUE)))

    line = assert_one_line_error(migrated_cli.run(*command), exit_code)

    assert line.startswith(f"marketplace: {message}"), line


def test_load_refuses_a_version_number_the_resource_has_in_one_line(migrated_cli: Cli) -> None:
    migrated_cli.run("load", str(migrated_cli.write_fixture(SMALL_CATALOGUE)))
    before = table_contents(migrated_cli.database)
    second = {"versions": [{"id": 21, "resource_id": 1, "version": "1.1.0"}]}

    line = assert_one_line_error(
        migrated_cli.run("load", str(migrated_cli.write_fixture(second, "second.json")))
    )

    assert line == "marketplace: versions[0].version: resource 1 already has version '1.1.0' (id 11)"
    assert table_contents(migrated_cli.database) == before
