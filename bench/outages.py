"""Reads and grants through a 5 s outage of the primary, with a healthy streaming standby.

Needs the standby topology (scripts/topology/postgresql-standby start; its `env` exported). Creates
a database on the primary, loads the test catalogue, waits until the standby has it, then runs one
worker of the service (in process) with the standby as its read replica: several clients read
resource cards and current versions, one grants a resource now and then. The primary is stopped
for `--outage` seconds and started again. Prints, per phase, the statuses of the reads and grants,
and the time from the primary's return to the first successful grant.

    .venv/bin/python bench/outages.py [--outage 5] [--clients 4]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import time
from collections import Counter
from pathlib import Path

import asyncpg
import httpx
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from marketplace.config import Settings
from marketplace.database.engine import create_engine
from marketplace.fixtures.loader import load_document
from marketplace.migrations.runner import upgrade_to_head
from marketplace.services import build_services
from tests.catalogue import OWNER_CHAT_ID, catalogue
from tests.conftest import GRANT_SECRET, make_client
from tests.topology import SCRIPT, StandbyTopology, dsn

READS = ("/api/v1/resource/1", "/api/v1/resource/version/1")
_addresses = itertools.count(1)


def address() -> dict[str, str]:
    number = next(_addresses)
    return {"X-Forwarded-For": f"10.{number >> 16 & 255}.{number >> 8 & 255}.{number & 255}"}


class Phases:
    def __init__(self) -> None:
        self.phase = "before"
        self.reads: dict[str, Counter[int]] = {}
        self.grants: dict[str, Counter[int]] = {}
        self.first_grant_after_return: float | None = None
        self.returned_at: float | None = None

    def count(self, table: dict[str, Counter[int]], status: int) -> None:
        table.setdefault(self.phase, Counter())[status] += 1


async def reader(client: httpx.AsyncClient, phases: Phases, stop: asyncio.Event) -> None:
    for path in itertools.cycle(READS):
        if stop.is_set():
            return
        try:
            status = (await client.get(path, headers=address())).status_code
        except Exception:  # a transport failure counts as an answer that is not 200
            status = 0
        phases.count(phases.reads, status)
        await asyncio.sleep(0.01)


async def granter(client: httpx.AsyncClient, phases: Phases, stop: asyncio.Event) -> None:
    path = f"/api/v1/chat/{OWNER_CHAT_ID}/apply/1"
    while not stop.is_set():
        try:
            status = (
                await client.post(path, json={"custom_password": GRANT_SECRET}, headers=address())
            ).status_code
        except Exception:
            status = 0
        phases.count(phases.grants, status)
        if status == 200 and phases.returned_at is not None and phases.first_grant_after_return is None:
            phases.first_grant_after_return = time.monotonic() - phases.returned_at
        await asyncio.sleep(0.05)


async def main(outage: float, clients: int) -> None:
    topology = StandbyTopology(
        os.environ["MARKETPLACE_TEST_STANDBY_PRIMARY_URL"], os.environ["MARKETPLACE_TEST_STANDBY_URL"]
    )
    await topology.restore()
    name = f"mp_outage_{os.getpid()}"
    primary = make_url(topology.primary_url).set(database=name).render_as_string(hide_password=False)
    standby = make_url(topology.standby_url).set(database=name).render_as_string(hide_password=False)
    admin = await asyncpg.connect(dsn(topology.primary_url))
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    engine = create_engine(Settings(_env_file=None, database_url=primary))  # type: ignore[call-arg]
    await upgrade_to_head(engine)
    await load_document(engine, catalogue())
    await engine.dispose()
    await topology.replayed(database_on_standby=standby)

    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        database_url=primary,
        database_read_urls=standby,
        chat_grant_secret=GRANT_SECRET,
        app_key="bench",
        storage_dir="/tmp/marketplace-outage-bench",
        db_connect_timeout_seconds=1.0,
        access_log=False,
    )
    services = build_services(settings)
    phases = Phases()
    stop = asyncio.Event()
    try:
        async with make_client(services) as client:
            tasks = [asyncio.create_task(reader(client, phases, stop)) for _ in range(clients)]
            tasks.append(asyncio.create_task(granter(client, phases, stop)))
            await asyncio.sleep(3)
            phases.phase = "outage"
            await asyncio.to_thread(topology.stop_node, "primary")
            await asyncio.sleep(outage)
            await asyncio.to_thread(topology.start_node, "primary")
            phases.phase = "after"
            phases.returned_at = time.monotonic()
            await asyncio.sleep(5)
            stop.set()
            await asyncio.gather(*tasks)
    finally:
        await services.close()
        await topology.restore()
        admin = await asyncpg.connect(dsn(topology.primary_url))
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()

    print(f"primary stopped for {outage:g} s, {clients} reading clients, standby up ({SCRIPT.name})")
    for phase in ("before", "outage", "after"):
        reads = phases.reads.get(phase, Counter())
        grants = phases.grants.get(phase, Counter())
        ok = reads[200]
        print(
            f"{phase:>7}: reads {ok} x 200, {sum(reads.values()) - ok} other {dict(sorted(reads.items()))};"
            f" grants {dict(sorted(grants.items()))}"
        )
    first = phases.first_grant_after_return
    print(
        f"first successful grant {first:.2f} s after the primary's return" if first else "no grant succeeded"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outage", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=4)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.outage, arguments.clients))
