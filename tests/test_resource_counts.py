"""Kept counts (marketplace/models/resource_counts.py): after any write, by any path, each
resource's kept purchases and ratings are what counting `accesses` and `reviews` gives, on both
profiles, so that the cards print the same bytes as when they were counted per request."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from marketplace.backoffice import accesses as backoffice_accesses
from marketplace.backoffice import payments as backoffice_payments
from marketplace.backoffice import resources as backoffice_resources
from marketplace.backoffice.actions import Refused
from marketplace.catalogue.access_grants import grant_access
from marketplace.catalogue.resources import LISTED_PAGE
from marketplace.config import Settings
from marketplace.database.engine import create_engine, session_factory
from marketplace.fixtures.loader import FixtureError, load_document
from marketplace.models import Access, AccessSource, Resource, ResourceCounts, Review, rating_average
from marketplace.services import Services
from tests.catalogue import PAID_UID, REFUNDED_UID
from tests.conftest import Loader
from tests.importer.earlier_fixture import build_earlier_database
from tests.importer.test_import import run_import
from tests.migrations.test_0005_gift_code_key import migrate
from tests.profiles import postgresql_only

Counts = dict[int, tuple[int, Any, int]]

# The counts as the cards computed them per request before they were kept: the definition.
RECOUNT = select(
    Resource.id,
    select(func.count(Access.id))
    .where(
        Access.resource_id == Resource.id,
        Access.source == AccessSource.PURCHASE.value,
        Access.revoked.is_(False),
    )
    .scalar_subquery(),
    select(func.avg(Review.rating)).where(Review.resource_id == Resource.id).scalar_subquery(),
    select(func.count(Review.id)).where(Review.resource_id == Resource.id).scalar_subquery(),
).order_by(Resource.id)
KEPT = (
    select(
        Resource.id,
        func.coalesce(ResourceCounts.purchases, 0),
        rating_average(ResourceCounts.rating_sum, ResourceCounts.rating_count),
        func.coalesce(ResourceCounts.rating_count, 0),
    )
    .outerjoin(ResourceCounts, ResourceCounts.resource_id == Resource.id)
    .order_by(Resource.id)
)


async def counts(connection: AsyncConnection, statement: Any) -> Counts:
    return {row[0]: (int(row[1]), row[2], int(row[3])) for row in await connection.execute(statement)}


async def assert_kept_counts_equal_a_recount(engine: AsyncEngine) -> Counts:
    """The kept counts, once checked equal to a recount (the average to the last digit the
    database gives, not only as printed); no kept row outlives its resource."""
    async with engine.connect() as connection:
        recounted = await counts(connection, RECOUNT)
        kept = await counts(connection, KEPT)
        orphans = await connection.scalar(
            select(func.count())
            .select_from(ResourceCounts)
            .where(ResourceCounts.resource_id.not_in(recounted))
        )
    assert kept == recounted
    assert orphans == 0
    return kept


def purchases(kept: Counts, resource_id: int) -> int:
    return kept[resource_id][0]


async def run_sql(engine: AsyncEngine, *statements: str, **values: Any) -> None:
    async with engine.begin() as connection:
        for statement in statements:
            await connection.execute(text(statement), values)


# --- One rule per write path -------------------------------------------------------------------


async def test_the_migration_fills_the_kept_counts_from_the_existing_rows(database_url: str) -> None:
    engine = create_engine(Settings(_env_file=None, database_url=database_url))  # type: ignore[call-arg]
    try:
        await migrate(engine, "0005", down=True)
        await run_sql(
            engine,
            "INSERT INTO users (id, name, closed, banned, created_at, updated_at) VALUES "
            "(1, 'a', false, false, '2026-01-01', '2026-01-01'), (2, 'b', false, false, '2026-01-01', '2026-01-01')",
            "INSERT INTO resources (id, user_id, name, tag, description, price, status, slug, download, "
            "created_at, updated_at) VALUES (1, 1, 'One', '', '', 0, 'published', 'one', 0, '2026-01-01', "
            "'2026-01-01'), (2, 1, 'Two', '', '', 0, 'published', 'two', 0, '2026-01-01', '2026-01-01')",
            "INSERT INTO accesses (user_id, resource_id, source, revoked, created_at, updated_at) VALUES "
            "(1, 1, 'purchase', false, '2026-01-01', '2026-01-01'), "
            "(2, 1, 'purchase', true, '2026-01-01', '2026-01-01'), "
            "(2, 2, 'gift', false, '2026-01-01', '2026-01-01')",
            "INSERT INTO reviews (resource_id, user_id, rating, created_at) VALUES "
            "(1, 1, 5, '2026-01-01'), (1, 2, 4, '2026-01-01'), (2, 2, 1, '2026-01-01')",
        )
        await migrate(engine, "head")
        kept = await assert_kept_counts_equal_a_recount(engine)
        assert {resource: (bought, count) for resource, (bought, _, count) in kept.items()} == {
            1: (1, 2),
            2: (0, 1),
        }
    finally:
        await engine.dispose()


async def test_the_downgrade_drops_the_kept_counts_and_their_triggers(database_url: str) -> None:
    engine = create_engine(Settings(_env_file=None, database_url=database_url))  # type: ignore[call-arg]
    try:
        await migrate(engine, "0005", down=True)
        async with engine.connect() as connection:
            tables = await connection.run_sync(
                lambda sync: sync.dialect.get_table_names(sync)  # type: ignore[no-any-return]
            )
        assert "resource_counts" not in tables
        # Writes to the counted tables work without the table their triggers wrote to.
        await run_sql(
            engine,
            "INSERT INTO users (id, name, closed, banned, created_at, updated_at) "
            "VALUES (1, 'a', false, false, '2026-01-01', '2026-01-01')",
            "INSERT INTO resources (id, user_id, name, tag, description, price, status, slug, download, "
            "created_at, updated_at) VALUES (1, 1, 'One', '', '', 0, 'published', 'one', 0, '2026-01-01', "
            "'2026-01-01')",
            "INSERT INTO accesses (user_id, resource_id, source, revoked, created_at, updated_at) "
            "VALUES (1, 1, 'purchase', false, '2026-01-01', '2026-01-01')",
            "INSERT INTO reviews (resource_id, user_id, rating, created_at) VALUES (1, 1, 5, '2026-01-01')",
        )
        await migrate(engine, "head")
        await assert_kept_counts_equal_a_recount(engine)
    finally:
        await engine.dispose()


async def test_marketplace_load_keeps_the_counts_of_the_accesses_and_reviews_it_writes(
    services: Services, load: Loader
) -> None:
    from tests.catalogue import catalogue

    await load(catalogue())
    kept = await assert_kept_counts_equal_a_recount(services.engine)
    assert purchases(kept, 1) == 1 and kept[1][2] == 2
    # Loading again rewrites rows in place: the refunded purchase active again, a review moved.
    document = catalogue()
    document["accesses"][1]["revoked"] = False
    document["reviews"][1]["resource_id"] = 8
    await load(document)
    kept = await assert_kept_counts_equal_a_recount(services.engine)
    assert purchases(kept, 1) == 2 and kept[1][2] == 1 and kept[8][2] == 1


async def test_the_api_grant_reactivating_a_revoked_purchase_leaves_the_kept_purchases(
    services: Services, load: Loader
) -> None:
    from tests.catalogue import catalogue

    await load(catalogue())
    async with services.sessions() as session:
        # User 6's refunded purchase of resource 1 comes back as a manual grant: not a sale.
        await grant_access(session, user_id=6, resource_id=1, via="test", ip_hash="")
    async with services.sessions() as session:
        await grant_access(session, user_id=1, resource_id=8, via="test", ip_hash="")
    kept = await assert_kept_counts_equal_a_recount(services.engine)
    assert (purchases(kept, 1), purchases(kept, 8)) == (1, 0)


async def test_back_office_revoke_and_grant_keep_purchases(services: Services, load: Loader) -> None:
    from tests.catalogue import catalogue

    await load(catalogue())
    async with services.sessions() as session:
        await backoffice_accesses.revoke(session, "2", "1")
        await session.commit()
    assert purchases(await assert_kept_counts_equal_a_recount(services.engine), 1) == 0
    async with services.sessions() as session:
        await backoffice_accesses.grant(session, "2", "1")
        await session.commit()
    assert purchases(await assert_kept_counts_equal_a_recount(services.engine), 1) == 0


async def test_back_office_refunds_and_disputes_take_the_purchase_out_and_confirm_puts_it_back(
    services: Services, load: Loader
) -> None:
    from tests.catalogue import catalogue

    await load(catalogue())
    steps = [
        (PAID_UID, backoffice_payments.DISPUTE, 0),
        (PAID_UID, backoffice_payments.WIN, 1),
        (PAID_UID, backoffice_payments.REFUND, 0),
    ]
    for uid, transition, expected in steps:
        async with services.sessions() as session:
            await backoffice_payments.change_payment(session, uid, transition)
            await session.commit()
        assert purchases(await assert_kept_counts_equal_a_recount(services.engine), 1) == expected
    async with services.sessions() as session:
        # The refunded payment of user 6 cannot be confirmed (refunded is final for confirm).
        with pytest.raises(Refused):
            await backoffice_payments.change_payment(session, REFUNDED_UID, backoffice_payments.CONFIRM)


async def test_back_office_status_changes_and_soft_deletion_keep_the_counts(
    services: Services, load: Loader
) -> None:
    from tests.catalogue import catalogue

    await load(catalogue())
    for change in (
        lambda session: backoffice_resources.set_status(session, "1", "unlisted"),
        lambda session: backoffice_resources.soft_delete(session, "1"),
        lambda session: backoffice_resources.restore(session, "1"),
    ):
        async with services.sessions() as session:
            await change(session)
            await session.commit()
        kept = await assert_kept_counts_equal_a_recount(services.engine)
        assert (purchases(kept, 1), kept[1][2]) == (1, 2)


async def test_the_import_keeps_the_counts_of_the_purchases_it_writes(
    services: Services, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'earlier.db'}"
    build_earlier_database(url)
    await run_import(services, url)
    kept = await assert_kept_counts_equal_a_recount(services.engine)
    assert sum(bought for bought, _, _ in kept.values()) > 0
    # Importing again rewrites nothing and counts nothing twice.
    await run_import(services, url)
    assert await assert_kept_counts_equal_a_recount(services.engine) == kept


async def test_operator_sql_on_accesses_and_reviews_is_counted(services: Services, load: Loader) -> None:
    from tests.catalogue import catalogue

    await load(catalogue())
    engine = services.engine
    await run_sql(
        engine,
        "INSERT INTO accesses (user_id, resource_id, source, revoked, created_at, updated_at) "
        "VALUES (1, 8, 'purchase', false, '2026-01-01', '2026-01-01')",
        "INSERT INTO reviews (resource_id, user_id, rating, created_at) VALUES (8, 1, 3, '2026-01-01')",
    )
    assert purchases(await assert_kept_counts_equal_a_recount(engine), 8) == 1
    # A purchase moved to another resource, a gift turned into a purchase, a rating changed.
    await run_sql(
        engine,
        "UPDATE accesses SET resource_id = 7 WHERE user_id = 1 AND resource_id = 8",
        "UPDATE accesses SET source = 'purchase', revoked = false WHERE id = 4",
        "UPDATE reviews SET rating = 1 WHERE resource_id = 1 AND user_id = 2",
    )
    kept = await assert_kept_counts_equal_a_recount(engine)
    assert (purchases(kept, 7), purchases(kept, 8)) == (1, 1)
    await run_sql(
        engine, "DELETE FROM accesses WHERE resource_id = 7", "DELETE FROM reviews WHERE resource_id = 8"
    )
    kept = await assert_kept_counts_equal_a_recount(engine)
    assert purchases(kept, 7) == 0 and kept[8][1:] == (None, 0)


async def test_deleting_a_resource_or_a_member_takes_their_rows_out_of_the_counts(
    services: Services, load: Loader
) -> None:
    from tests.catalogue import catalogue

    await load(catalogue())
    engine = services.engine
    # The member's accesses go with the account (their reviews must go first: no cascade there).
    await run_sql(
        engine,
        "DELETE FROM reviews WHERE user_id = 2",
        "DELETE FROM activity_log WHERE user_id = 2",
        "DELETE FROM chat_accounts WHERE user_id = 2",
        "UPDATE payments SET buyer_id = NULL WHERE buyer_id = 2",
        "UPDATE resources SET user_id = 1 WHERE user_id = 2",
        "DELETE FROM users WHERE id = 2",
    )
    kept = await assert_kept_counts_equal_a_recount(engine)
    assert (purchases(kept, 1), kept[1][2]) == (0, 1)
    await run_sql(engine, "DELETE FROM payments WHERE resource_id = 1", "DELETE FROM resources WHERE id = 1")
    await assert_kept_counts_equal_a_recount(engine)


@postgresql_only
async def test_truncating_accesses_or_reviews_zeroes_their_counts(services: Services, load: Loader) -> None:
    from tests.catalogue import catalogue

    await load(catalogue())
    await run_sql(services.engine, "TRUNCATE accesses CASCADE")
    assert purchases(await assert_kept_counts_equal_a_recount(services.engine), 1) == 0
    await run_sql(services.engine, "TRUNCATE reviews")
    assert (await assert_kept_counts_equal_a_recount(services.engine))[1][1:] == (None, 0)


# --- Any sequence of writes, through any path --------------------------------------------------

USERS = (1, 2, 3)
RESOURCES = (1, 2, 3)
SOURCES = tuple(source.value for source in AccessSource)
# One payment per member and resource, its uid made of both (a ULID's alphabet and length).
PAYMENT_UIDS = {
    (user, resource): f"01HZY3J1Q8Y5ZQ4W2B7C9D0{user}{resource}0" for user in USERS for resource in RESOURCES
}


def base_document() -> dict[str, Any]:
    """Members 1-3, resources 1-3; two paid purchases, a gift, two reviews; the other payments pending."""
    paid = {(1, 1), (2, 2)}
    return {
        "users": [{"id": user, "name": f"member{user}"} for user in USERS],
        "resources": [
            {"id": resource, "user_id": 1, "name": f"Plugin {resource}", "price": "5.00"}
            for resource in RESOURCES
        ],
        "payments": [
            {
                "id": user * 10 + resource,
                "uid": uid,
                "status": "paid" if (user, resource) in paid else "pending",
                "amount_cents": 500,
                "buyer_id": user,
                "seller_id": 1,
                "resource_id": resource,
            }
            for (user, resource), uid in PAYMENT_UIDS.items()
        ],
        "accesses": [
            *(
                {
                    "id": user * 10 + resource,
                    "user_id": user,
                    "resource_id": resource,
                    "payment_id": user * 10 + resource,
                    "source": "purchase",
                }
                for user, resource in sorted(paid)
            ),
            {"id": 31, "user_id": 3, "resource_id": 1, "source": "gift"},
        ],
        "reviews": [
            {"id": 1, "resource_id": 1, "user_id": 2, "rating": 5},
            {"id": 2, "resource_id": 1, "user_id": 3, "rating": 4},
        ],
    }


users = st.sampled_from(USERS)
resources = st.sampled_from(RESOURCES)
ratings = st.integers(min_value=1, max_value=5)
write_steps = st.one_of(
    st.tuples(st.just("api grant"), users, resources),
    st.tuples(st.just("back office grant"), users, resources),
    st.tuples(st.just("back office revoke"), users, resources),
    st.tuples(st.just("payment"), users, resources, st.sampled_from(sorted(backoffice_payments.TRANSITIONS))),
    st.tuples(st.just("load access"), users, resources, st.sampled_from(SOURCES), st.booleans()),
    st.tuples(st.just("load review"), st.integers(1, 4), resources, users, ratings),
    st.tuples(st.just("sql insert access"), users, resources, st.sampled_from(SOURCES), st.booleans()),
    st.tuples(
        st.just("sql update access"), users, resources, st.sampled_from(SOURCES), st.booleans(), resources
    ),
    st.tuples(st.just("sql delete access"), users, resources),
    st.tuples(st.just("sql insert review"), resources, users, ratings),
    st.tuples(st.just("sql update review"), resources, users, ratings, resources),
    st.tuples(st.just("sql delete review"), resources, users),
    st.tuples(st.just("delete resource"), resources),
)
NOW = "'2026-01-01 00:00:00'"


async def write(engine: AsyncEngine, step: tuple[Any, ...]) -> None:
    """One step through its path, in a transaction of its own; a write the path refuses (or the
    database does: a missing row, a duplicate) writes nothing, which is fine too."""
    kind, *args = step
    sessions = session_factory(engine)
    try:
        if kind == "api grant":
            async with sessions() as session:
                await grant_access(session, user_id=args[0], resource_id=args[1], via="test", ip_hash="")
        elif kind in ("back office grant", "back office revoke", "payment"):
            async with sessions() as session:
                if kind == "payment":
                    uid = PAYMENT_UIDS[(args[0], args[1])]
                    await backoffice_payments.change_payment(
                        session, uid, backoffice_payments.TRANSITIONS[args[2]]
                    )
                else:
                    action = (
                        backoffice_accesses.grant
                        if kind == "back office grant"
                        else backoffice_accesses.revoke
                    )
                    await action(session, str(args[0]), str(args[1]))
                await session.commit()
        elif kind == "load access":
            user, resource, source, revoked = args
            access = {"id": user * 10 + resource, "user_id": user, "resource_id": resource}
            await load_document(engine, {"accesses": [{**access, "source": source, "revoked": revoked}]})
        elif kind == "load review":
            review_id, resource, user, rating = args
            review = {"id": review_id, "resource_id": resource, "user_id": user, "rating": rating}
            await load_document(engine, {"reviews": [review]})
        else:
            await run_sql(engine, *SQL_STEPS[kind], **dict(zip(SQL_STEP_VALUES[kind], args, strict=True)))
    except (Refused, FixtureError, DBAPIError):
        pass


SQL_STEPS = {
    "sql insert access": [
        "INSERT INTO accesses (user_id, resource_id, source, revoked, created_at, updated_at) "
        f"VALUES (:user, :resource, :source, :revoked, {NOW}, {NOW})"
    ],
    "sql update access": [
        "UPDATE accesses SET source = :source, revoked = :revoked, resource_id = :to_resource "
        "WHERE user_id = :user AND resource_id = :resource"
    ],
    "sql delete access": ["DELETE FROM accesses WHERE user_id = :user AND resource_id = :resource"],
    "sql insert review": [
        f"INSERT INTO reviews (resource_id, user_id, rating, created_at) VALUES (:resource, :user, :rating, {NOW})"
    ],
    "sql update review": [
        "UPDATE reviews SET rating = :rating, resource_id = :to_resource "
        "WHERE resource_id = :resource AND user_id = :user"
    ],
    "sql delete review": ["DELETE FROM reviews WHERE resource_id = :resource AND user_id = :user"],
    "delete resource": [
        "DELETE FROM activity_log WHERE resource_id = :resource",
        "DELETE FROM payments WHERE resource_id = :resource",
        "DELETE FROM resources WHERE id = :resource",
    ],
}
SQL_STEP_VALUES = {
    "sql insert access": ("user", "resource", "source", "revoked"),
    "sql update access": ("user", "resource", "source", "revoked", "to_resource"),
    "sql delete access": ("user", "resource"),
    "sql insert review": ("resource", "user", "rating"),
    "sql update review": ("resource", "user", "rating", "to_resource"),
    "sql delete review": ("resource", "user"),
    "delete resource": ("resource",),
}


async def start_from_the_base(engine: AsyncEngine) -> None:
    """The same few members, resources and pending payments, nothing counted yet."""
    await run_sql(
        engine,
        *(
            f"DELETE FROM {table}"
            for table in ("activity_log", "accesses", "reviews", "payments", "resources", "users")
        ),
    )
    await load_document(engine, base_document())


def test_kept_counts_equal_a_recount_after_random_writes(database_url: str, profile: str) -> None:
    @settings(
        max_examples=25 if profile == "sqlite" else 12,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(st.lists(write_steps, min_size=1, max_size=12))
    def any_writes(steps: list[tuple[Any, ...]]) -> None:
        async def run() -> None:
            engine = create_engine(Settings(_env_file=None, database_url=database_url))  # type: ignore[call-arg]
            try:
                await start_from_the_base(engine)
                await assert_kept_counts_equal_a_recount(engine)
                for step in steps:
                    await write(engine, step)
                    await assert_kept_counts_equal_a_recount(engine)
            finally:
                await engine.dispose()

        asyncio.run(run())

    any_writes()


# --- What a page reads -------------------------------------------------------------------------

LARGE_CATALOGUE = {
    "postgresql": (
        "INSERT INTO users (id, name, closed, banned, created_at, updated_at) VALUES (1, 'a', false, false, now(), now())",
        "INSERT INTO resources (id, user_id, name, tag, description, price, status, slug, download, created_at, "
        "updated_at) SELECT n, 1, 'Plugin ' || n, '', '', 0, 'published', 'p', 0, now(), now() "
        "FROM generate_series(1, 20000) n",
        "ANALYZE",
    ),
    "sqlite": (
        "INSERT INTO users (id, name, closed, banned, created_at, updated_at) VALUES (1, 'a', 0, 0, '2026-01-01', '2026-01-01')",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) "
        "INSERT INTO resources (id, user_id, name, tag, description, price, status, slug, download, created_at, "
        "updated_at) SELECT i, 1, 'Plugin ' || i, '', '', 0, 'published', 'p', 0, '2026-01-01', '2026-01-01' FROM n",
        "ANALYZE",
    ),
}


async def test_a_search_page_is_a_range_of_an_index_that_counts_no_access_or_review(
    services: Services, profile: str
) -> None:
    engine = services.engine
    await run_sql(engine, *LARGE_CATALOGUE[profile])
    page = LISTED_PAGE.statement.params(limit=15, offset=150)
    sql = str(page.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
    async with engine.connect() as connection:
        if profile == "postgresql":
            # Only to keep the test small: on a catalogue this size a sequential scan still costs less.
            await connection.execute(text("SET enable_seqscan = off"))
            plan = "\n".join((await connection.execute(text(f"EXPLAIN {sql}"))).scalars())
            assert "Seq Scan on resources" not in plan, plan
        else:
            rows = await connection.execute(text(f"EXPLAIN QUERY PLAN {sql}"))
            plan = "\n".join(row[3] for row in rows)
            assert "USING INDEX ix_resources_status_id" in plan and "TEMP B-TREE" not in plan, plan
    assert "accesses" not in plan and "reviews" not in plan, plan
