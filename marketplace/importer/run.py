"""Runs an import: reads each earlier table in batches, maps its rows, writes them in one transaction.

Tables are taken in dependency order. Rows are upserted by id and a row is only rewritten when a
value differs, so a second run over the same source writes nothing (the report says 0 written).
A dry run does the same work in a transaction that is rolled back.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Table, bindparam, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from marketplace.database.engine import advance_id_sequences, dialect_insert
from marketplace.importer.mapping import (
    Notes,
    ResourceContext,
    Skip,
    as_int,
    map_access,
    map_category,
    map_chat_account,
    map_gift,
    map_payment,
    map_resource,
    map_user,
    map_version,
)
from marketplace.importer.source import EarlierDatabase
from marketplace.models import Access, Category, ChatAccount, Gift, Payment, Resource, User, Version

Progress = Callable[[str, int, int], None]


@dataclass
class TableReport:
    table: str
    target: str
    read: int = 0
    written: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    adjusted: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0


@dataclass
class ImportReport:
    tables: list[TableReport] = field(default_factory=list)
    dry_run: bool = False
    current_versions_set: int = 0

    def lines(self) -> list[str]:
        verb = "would write" if self.dry_run else "written"
        out = [f"{'earlier table':<15} {'into':<14} {'read':>9} {verb:>12} {'skipped':>9}  seconds"]
        for t in self.tables:
            out.append(
                f"{t.table:<15} {t.target:<14} {t.read:>9} {t.written:>12} {sum(t.skipped.values()):>9}  {t.seconds:7.1f}"
            )
            for reason, count in sorted(t.skipped.items()):
                out.append(f"    skipped {count}: {reason}")
            for note, count in sorted(t.adjusted.items()):
                out.append(f"    imported with a change {count}: {note}")
        out.append(
            f"current-version pointers {'to set' if self.dry_run else 'set'}: {self.current_versions_set}"
        )
        out.append("licences: not imported (the current licence check accepts every key)")
        return out


async def _write(
    connection: AsyncConnection, table: Table, rows: list[dict[str, Any]], key: str, keep: set[str]
) -> int:
    """Upsert rows by `key`, rewriting only rows whose values differ; returns how many were written."""
    if not rows:
        return 0
    insert = dialect_insert(connection.dialect.name)
    statement = insert(table)
    columns = [c for c in rows[0] if c != key and c not in keep]
    excluded = statement.excluded
    statement = statement.on_conflict_do_update(
        index_elements=[key],
        set_={c: excluded[c] for c in columns},
        where=or_(*(table.c[c].is_distinct_from(excluded[c]) for c in columns)),
    ).returning(table.c[key])
    result = await connection.execute(statement, rows)
    return len(result.all())


class EarlierImport:
    def __init__(self, source: EarlierDatabase, progress: Progress | None = None) -> None:
        self.source = source
        self.progress = progress or (lambda table, done, total: None)
        self.report = ImportReport()
        self.users: set[int] = set()
        self.categories: set[int] = set()
        self.owners: dict[int, int] = {}  # resource id -> author id
        self.gifts: set[int] = set()
        self.payment_status: dict[int, str] = {}
        self.pointers: dict[int, int] = {}  # resource id -> earlier version_id
        self.versions: set[int] = set()

    async def run(self, engine: AsyncEngine, *, dry_run: bool) -> ImportReport:
        self.report.dry_run = dry_run
        async with engine.connect() as connection:
            transaction = await connection.begin()
            try:
                await self._import_all(connection)
            except BaseException:
                await transaction.rollback()
                raise
            if dry_run:
                await transaction.rollback()
            else:
                await transaction.commit()
        return self.report

    async def _table(
        self,
        connection: AsyncConnection,
        name: str,
        table: Table,
        mapper: Callable[[dict[str, Any], Notes], dict[str, Any]],
        *,
        key: str = "id",
        keep: set[str] | None = None,
        after_row: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
    ) -> None:
        report = TableReport(table=self.source.names[name], target=table.name)
        self.report.tables.append(report)
        started = time.monotonic()
        total = self.source.count(name)
        self.progress(report.table, 0, total)
        for batch in self.source.batches(name):
            rows: list[dict[str, Any]] = []
            for raw in batch:
                report.read += 1
                notes = Notes()
                try:
                    row = mapper(raw, notes)
                except Skip as skip:
                    report.skipped[str(skip)] += 1
                    continue
                for note in notes.adjusted:
                    report.adjusted[note] += 1
                if after_row is not None:
                    after_row(raw, row)
                rows.append(row)
            report.written += await _write(connection, table, rows, key, keep or set())
            self.progress(report.table, report.read, total)
        report.seconds = time.monotonic() - started

    async def _import_all(self, connection: AsyncConnection) -> None:
        users_table: Table = User.__table__  # type: ignore[assignment]
        await self._table(
            connection, "users", users_table, map_user, after_row=lambda raw, row: self.users.add(row["id"])
        )
        await self._table(
            connection,
            "categories",
            Category.__table__,  # type: ignore[arg-type]
            map_category,
            after_row=lambda raw, row: self.categories.add(row["id"]),
        )
        downloads, version_owner = self._scan_versions()
        context = ResourceContext(users=self.users, categories=self.categories, downloads=downloads)

        def resource_seen(raw: dict[str, Any], row: dict[str, Any]) -> None:
            self.owners[row["id"]] = row["user_id"]
            pointer = as_int(raw.get("version_id"))
            # -1 (never set) and pointers to a version of another resource or to nothing stay null.
            if pointer is not None and version_owner.get(pointer) == row["id"]:
                self.pointers[row["id"]] = pointer

        await self._table(
            connection,
            "plugins",
            Resource.__table__,  # type: ignore[arg-type]
            lambda raw, notes: map_resource(raw, notes, context),
            keep={"current_version_id"},
            after_row=resource_seen,
        )
        resources = set(self.owners)
        await self._table(
            connection,
            "versions",
            Version.__table__,  # type: ignore[arg-type]
            lambda raw, notes: map_version(raw, notes, resources),
            after_row=lambda raw, row: self.versions.add(row["id"]),
        )
        await self._set_current_versions(connection)
        seen_chat: set[str] = set()
        await self._table(
            connection,
            "chat_accounts",
            ChatAccount.__table__,  # type: ignore[arg-type]
            lambda raw, notes: map_chat_account(raw, notes, self.users, seen_chat),
            key="chat_id",
        )
        seen_codes: set[str] = set()
        await self._table(
            connection,
            "gifts",
            Gift.__table__,  # type: ignore[arg-type]
            lambda raw, notes: map_gift(raw, notes, self.owners, seen_codes),
            after_row=lambda raw, row: self.gifts.add(row["id"]),
        )

        def payment_seen(raw: dict[str, Any], row: dict[str, Any]) -> None:
            self.payment_status[row["id"]] = row["status"]

        await self._table(
            connection,
            "payments",
            Payment.__table__,  # type: ignore[arg-type]
            lambda raw, notes: map_payment(raw, notes, self.users, self.owners, self.gifts),
            after_row=payment_seen,
        )
        seen_pairs: set[tuple[int, int]] = set()
        await self._table(
            connection,
            "accesses",
            Access.__table__,  # type: ignore[arg-type]
            lambda raw, notes: map_access(raw, notes, self.users, resources, self.payment_status, seen_pairs),
        )
        await advance_id_sequences(
            connection,
            [
                "users",
                "categories",
                "resources",
                "versions",
                "chat_accounts",
                "gifts",
                "payments",
                "accesses",
            ],
        )

    def _scan_versions(self) -> tuple[dict[int, int], dict[int, int]]:
        """Download sums per resource and the owner of each version, read before resources are written
        (a resource's counter is the sum of its versions')."""
        downloads: dict[int, int] = {}
        owner: dict[int, int] = {}
        for batch in self.source.batches("versions"):
            for raw in batch:
                version_id, resource_id = as_int(raw.get("id")), as_int(raw.get("plugin_id"))
                if version_id is None or resource_id is None:
                    continue
                owner[version_id] = resource_id
                count = as_int(raw.get("download"))
                if count is not None and count > 0:
                    downloads[resource_id] = downloads.get(resource_id, 0) + count
        return downloads, owner

    async def _set_current_versions(self, connection: AsyncConnection) -> None:
        """Point each resource at its earlier current version, where that version was imported."""
        result = await connection.execute(select(Resource.id, Resource.current_version_id))
        current = {resource_id: version_id for resource_id, version_id in result}
        rows = [
            {"resource_id": resource_id, "version_id": version_id}
            for resource_id, version_id in self.pointers.items()
            if version_id in self.versions and current.get(resource_id) != version_id
        ]
        self.report.current_versions_set = len(rows)
        if not rows:
            return
        await connection.execute(
            update(Resource)
            .where(Resource.id == bindparam("resource_id"))
            # Setting the pointer is part of importing the row, not an edit: updated_at stays.
            .values(current_version_id=bindparam("version_id"), updated_at=Resource.updated_at)
            .execution_options(synchronize_session=False),
            rows,
        )
