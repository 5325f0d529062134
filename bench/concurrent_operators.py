"""Operators racing the API: rounds of a back-office command run at the same moment as the chat
bot's grant of the same member and resource, counting the rounds where either side failed.

A round fails when the bot gets anything but 200, or the operator anything but success or a
one-line refusal (exit 1): a traceback, a second line, the database driver's words. Each round
has a member and a resource of its own; the command of a round cycles through the operator writes
that lock the rows a grant writes. The bot's request leaves when the command takes its first row
lock (the command's start-up, a second or so, would otherwise keep the two apart), shifted by a
seeded random delay of up to 5 ms; in half the rounds the command's lock waits for the bot instead.

    python bench/concurrent_operators.py --rounds 150 --profile postgresql
    PYTHONPATH=/tmp/before python bench/concurrent_operators.py ...   # another checkout's code

Needs PostgreSQL on loopback for `--profile postgresql` (a database of its own, dropped after).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import re
import tempfile
import threading
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from click.testing import CliRunner
from sqlalchemy import event, make_url
from sqlalchemy.engine import Engine

from marketplace.app import build_app
from marketplace.cli import main as marketplace_command
from marketplace.config import Settings
from marketplace.fixtures.loader import load_document
from marketplace.migrations.runner import upgrade_to_head
from marketplace.services import build_services

POSTGRES_ADMIN_URL = os.environ.get(
    "MARKETPLACE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
SECRET = "bench secret"
FIRST_ID = 100
# Words of a driver error or a traceback, never in a refusal of the back office.
DRIVER_WORDS = ("Traceback", "sqlalchemy", "asyncpg", "sqlite3", "Error", "deadlock", "locked")


def chat_id(n: int) -> str:
    return f"{700000000000000000 + n}"


def payment_uid(n: int) -> str:
    return f"01JBENCH{n:018d}"


# What each round's operator runs, and the state of the member's access and payment before it.
KINDS: dict[str, tuple[tuple[str, ...], str, str | None]] = {
    "accesses grant (new)": (("accesses", "grant", "{user}", "{resource}"), "none", None),
    "accesses grant (revoked)": (("accesses", "grant", "{user}", "{resource}"), "revoked", None),
    "accesses revoke": (("accesses", "revoke", "{user}", "{resource}"), "revoked", None),
    "payments confirm": (("payments", "confirm", "{uid}"), "none", "pending"),
    "payments confirm (revoked)": (("payments", "confirm", "{uid}"), "revoked", "pending"),
    "payments refund": (("payments", "refund", "{uid}"), "purchase", "paid"),
    "users ban": (("users", "ban", "{user}"), "none", None),
}


def rounds_document(kinds: list[str]) -> dict[str, Any]:
    users: list[dict[str, Any]] = [{"id": 1, "name": "Seller"}]
    chats, resources, payments, accesses = [], [], [], []
    for index, kind in enumerate(kinds):
        n = FIRST_ID + index
        _, access, payment = KINDS[kind]
        users.append({"id": n, "name": f"Member {n}"})
        chats.append({"user_id": n, "chat_id": chat_id(n)})
        resources.append({"id": n, "user_id": 1, "name": f"Thing {n}", "price": "5.00"})
        if payment is not None:
            payments.append(
                {
                    "id": n,
                    "uid": payment_uid(n),
                    "status": payment,
                    "amount_cents": 500,
                    "buyer_id": n,
                    "seller_id": 1,
                    "resource_id": n,
                }
            )
        if access == "revoked":
            accesses.append({"id": n, "user_id": n, "resource_id": n, "source": "manual", "revoked": True})
        elif access == "purchase":
            accesses.append({"id": n, "user_id": n, "resource_id": n, "source": "purchase", "payment_id": n})
    return {
        "users": users,
        "chat_accounts": chats,
        "resources": resources,
        "payments": payments,
        "accesses": accesses,
    }


@dataclass
class Round:
    kind: str
    status: int
    answer: bytes
    exit_code: int
    stderr: str

    @property
    def bot_failed(self) -> bool:
        return self.status != 200

    @property
    def operator_failed(self) -> bool:
        lines = self.stderr.splitlines()
        if self.exit_code == 0:
            return bool(lines)
        return self.exit_code != 1 or len(lines) != 1 or any(word in self.stderr for word in DRIVER_WORDS)


_ROW_LOCK = re.compile(r"FOR (NO KEY )?UPDATE")


class FirstLock:
    """Set when the operator's thread sends its first statement that locks a row."""

    def __init__(self) -> None:
        self.taken = threading.Event()
        self.operator_thread: int | None = None

    def __call__(self, _connection: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if threading.get_ident() == self.operator_thread and _ROW_LOCK.search(statement):
            self.taken.set()


def operator(environment: dict[str, str], args: list[str], first_lock: FirstLock) -> tuple[int, str]:
    first_lock.operator_thread = threading.get_ident()
    try:
        result = CliRunner().invoke(marketplace_command, args, env=environment, prog_name="marketplace")
    finally:
        first_lock.taken.set()
    return result.exit_code, result.stderr


async def race(settings: Settings, kinds: list[str], seed: int) -> list[Round]:
    services = build_services(settings)
    environment = {"MARKETPLACE_DATABASE_URL": settings.database_url, "MARKETPLACE_APP_KEY": "bench"}
    shuffle = random.Random(seed)
    rounds = []
    try:
        await load_document(services.engine, rounds_document(kinds))
        transport = httpx.ASGITransport(app=build_app(services=services))
        async with httpx.AsyncClient(transport=transport, base_url="http://marketplace.bench") as bot:
            for index, kind in enumerate(kinds):
                n = FIRST_ID + index
                words = {"user": str(n), "resource": str(n), "uid": payment_uid(n)}
                args = [part.format(**words) for part in KINDS[kind][0]]
                delay = shuffle.uniform(0, 0.005)
                first_lock = FirstLock()
                event.listen(Engine, "before_cursor_execute", first_lock)

                async def grant(
                    first_lock: FirstLock = first_lock, n: int = n, delay: float = delay
                ) -> httpx.Response:
                    await asyncio.to_thread(first_lock.taken.wait, 30)
                    await asyncio.sleep(delay)
                    return await bot.post(
                        f"/api/v1/chat/{chat_id(n)}/apply/{n}",
                        json={"custom_password": SECRET},
                        headers={"X-Forwarded-For": f"10.0.{n >> 8 & 255}.{n & 255}"},
                    )

                try:
                    answer, (exit_code, stderr) = await asyncio.gather(
                        grant(), asyncio.to_thread(operator, environment, args, first_lock)
                    )
                finally:
                    event.remove(Engine, "before_cursor_execute", first_lock)
                rounds.append(Round(kind, answer.status_code, answer.content, exit_code, stderr))
    finally:
        await services.close()
        await services.engine.dispose()
    return rounds


async def migrated(settings: Settings) -> None:
    from marketplace.database.engine import create_engine

    engine = create_engine(settings)
    await upgrade_to_head(engine)
    await engine.dispose()


async def admin(statement: str) -> None:
    connection = await asyncpg.connect(POSTGRES_ADMIN_URL)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


async def measure(profile: str, rounds: int, seed: int) -> list[Round]:
    names = list(KINDS)
    kinds = [names[index % len(names)] for index in range(rounds)]
    with tempfile.TemporaryDirectory() as folder:
        if profile == "sqlite":
            url = f"sqlite:///{Path(folder) / 'race.db'}"
        else:
            database = f"mp_race_{uuid.uuid4().hex[:10]}"
            await admin(f'CREATE DATABASE "{database}"')
            url = make_url(POSTGRES_ADMIN_URL).set(database=database).render_as_string(hide_password=False)
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            database_url=url,
            app_key="bench",
            chat_grant_secret=SECRET,
            storage_dir=str(Path(folder) / "storage"),
        )
        try:
            await migrated(settings)
            return await race(settings, kinds, seed)
        finally:
            if profile == "postgresql":
                await admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def main() -> None:
    # The bot's "unhandled error" lines would land in the operator's captured stderr.
    logging.disable(logging.CRITICAL)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=70)
    parser.add_argument("--profile", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args()
    done = asyncio.run(measure(options.profile, options.rounds, options.seed))
    played, bot, operators = Counter[str](), Counter[str](), Counter[str]()
    for result in done:
        played[result.kind] += 1
        bot[result.kind] += result.bot_failed
        operators[result.kind] += result.operator_failed
    print(f"{options.profile}: {len(done)} rounds")
    print(f"{'operator command':28} {'rounds':>6} {'bot failed':>10} {'operator failed':>15}")
    for kind in KINDS:
        print(f"{kind:28} {played[kind]:>6} {bot[kind]:>10} {operators[kind]:>15}")
    failed = sum(result.bot_failed or result.operator_failed for result in done)
    print(
        f"{'all':28} {len(done):>6} {sum(bot.values()):>10} {sum(operators.values()):>15}  failed rounds: {failed}"
    )
    examples = {result.stderr.strip() for result in done if result.operator_failed}
    for example in sorted(examples)[:5]:
        print("  operator:", example[:200].replace("\n", " | "))


if __name__ == "__main__":
    main()
