"""Builds a sample earlier-platform database of any size (for trying `marketplace import-earlier`
and for measuring it).

    python bench/make_earlier_db.py --url sqlite:///earlier.db --rows 2000
    python bench/make_earlier_db.py --url mysql+pymysql://root@127.0.0.1:3306/earlier --rows 1000000

Rows are spread over the tables roughly as on a real platform; about 1 row in 500 is broken on
purpose (dangling references, unknown statuses, empty names) so that the report shows skips.
"""

from __future__ import annotations

import argparse
import random
import time
from datetime import datetime, timedelta

from sqlalchemy import create_engine, insert

from marketplace.importer.earlier_schema import earlier_metadata
from marketplace.importer.source import source_url

SHARES = {
    "users": 0.20,
    "categories": 0.00002,
    "plugins": 0.05,
    "versions": 0.20,
    "chat_accounts": 0.10,
    "gifts": 0.02,
    "payments": 0.20,
    "accesses": 0.23,
}
STATUSES = ["PAID"] * 6 + ["UNPAID", "REFUND", "DISPUTE", "PENDING"]
BATCH = 10000


def build(url: str, rows: int, seed: int = 7) -> dict[str, int]:
    rng = random.Random(seed)
    engine = create_engine(source_url(url))
    earlier_metadata.drop_all(engine)
    earlier_metadata.create_all(engine)
    counts = {name: max(3, int(rows * share)) for name, share in SHARES.items()}
    start = datetime(2019, 1, 1)

    def when(i: int) -> datetime:
        return start + timedelta(minutes=i * 7 % 2_000_000)

    def broken() -> bool:
        return rng.random() < 0.002

    generators = {
        "users": lambda i: {
            "id": i,
            "name": "" if broken() else f"user{i}",
            "email": f"user{i}@example.net",
            "avatar": f"avatars/{i}.png" if i % 3 == 0 else None,
            "created_at": when(i),
            "updated_at": when(i + 1),
        },
        "categories": lambda i: {"id": i, "name": f"Category {i}"},
        "plugins": lambda i: {
            "id": i,
            "name": f"Plugin {i}",
            "price": rng.choice([0, 0, 0, 5, 10, 15]),
            "image": rng.choice(["png", "jpg", ""]),
            "description": f"Plugin {i} does things.",
            "created_at": when(i),
            "updated_at": when(i + 2),
            "tag": f"Tagline of plugin {i}",
            "user_id": counts["users"] + 10 if broken() else rng.randint(1, counts["users"]),
            "is_display": 0 if i % 17 == 0 else 1,
            "file": f"plugin{i}.jar",
            "version_id": -1,
            "deleted": 1 if i % 53 == 0 else 0,
            "category_id": rng.randint(1, counts["categories"]),
            "is_pending": 1 if i % 41 == 0 else 0,
            "unique_id": f"SERVICE_{i:015X}" if i % 4 == 0 else None,
            "is_unique": 0,
            "stats_id": str(1000 + i) if i % 5 == 0 else None,
        },
        "versions": lambda i: {
            "id": i,
            "version": f"{i % 7}.{i % 13}.{i % 5}",
            "plugin_id": ((i - 1) % counts["plugins"]) + 1 if not broken() else 0,
            "download": rng.randint(0, 5000),
            "title": f"Release {i}",
            "extension": "jar",
            "description": "Changes.",
            "created_at": when(i),
            "updated_at": when(i),
            "file": f"v{i}.jar",
        },
        "chat_accounts": lambda i: {
            "id": i,
            "user_id": i,
            "chat_id": str(100_000_000_000_000_000 + i) if not broken() else "not-a-snowflake",
            "access_token": "tok",
            "refresh_token": "ref",
            "expired_at": when(i),
            "username": f"user{i}",
            "email": f"chat{i}@example.net",
            "discriminator": "0001",
            "avatar": None,
            "is_valid": 1,
            "created_at": when(i),
            "updated_at": when(i),
        },
        "gifts": lambda i: {
            "id": i,
            "code": f"CODE{i}",
            "plugin_id": -1 if i % 3 else rng.randint(1, counts["plugins"]),
            "promotion": rng.choice([5, 10, 25, 50, 100]) if not broken() else 0,
            "used": rng.randint(0, 9),
            "max_use": rng.choice([0, 10, 100]),
            "active": 1 if i % 4 else 0,
            "created_at": when(i),
            "updated_at": when(i),
        },
        "payments": lambda i: {
            "id": i,
            "user_id": rng.randint(1, counts["users"]),
            "provider_id": rng.choice(["empty", f"PAYID-{i}"]),
            "uid": "TO DELETE",
            "status": rng.choice(STATUSES) if not broken() else "LOST",
            "price": rng.choice([5, 10, 15]),
            "created_at": when(i),
            "updated_at": when(i),
            "gift_id": rng.randint(1, counts["gifts"]) if i % 9 == 0 else None,
            "type": 1 if i % 25 == 0 else 0,
            "content_id": rng.randint(1, counts["plugins"]),
        },
        "accesses": lambda i: {
            "id": i,
            "user_id": rng.randint(1, counts["users"]),
            "plugin_id": rng.randint(1, counts["plugins"]),
            "payment_id": i if i <= counts["payments"] and i % 2 == 0 else None,
            "created_at": when(i),
            "updated_at": when(i),
        },
    }
    with engine.begin() as connection:
        for name, generate in generators.items():
            table = earlier_metadata.tables[name]
            for first in range(1, counts[name] + 1, BATCH):
                batch = [generate(i) for i in range(first, min(first + BATCH, counts[name] + 1))]
                connection.execute(insert(table), batch)
        # Current-version pointers: the newest version of each plugin, as the earlier platform set them.
        plugins = earlier_metadata.tables["plugins"]
        versions = earlier_metadata.tables["versions"]
        from sqlalchemy import func, select, update

        newest = select(func.max(versions.c.id)).where(versions.c.plugin_id == plugins.c.id).scalar_subquery()
        connection.execute(update(plugins).values(version_id=func.coalesce(newest, -1)))
    engine.dispose()
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--rows", type=int, default=2000)
    args = parser.parse_args()
    started = time.monotonic()
    counts = build(args.url, args.rows)
    print(f"built {sum(counts.values())} rows in {time.monotonic() - started:.1f} s: {counts}")


if __name__ == "__main__":
    main()
