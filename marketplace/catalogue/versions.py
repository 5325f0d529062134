"""The rule of version numbers: a resource never has two versions of the same number.

The back office's `resources release` and the fixture loader (`marketplace load`) refuse a second
one with the same sentence, so that `promote` and the update checkers always find one version per
number. The earlier-platform import keeps that platform's history as it was (docs/import.md).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import NamedTuple

from sqlalchemy import and_, func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from marketplace.models import Version


def version_taken(resource_id: int, number: str, taken: int) -> str:
    """Why a version numbered `number` cannot be added to the resource: version `taken` has it."""
    return f"resource {resource_id} already has version {number!r} (id {taken})"


async def version_numbered(session: AsyncSession, resource_id: int, number: str) -> int | None:
    """The id of the resource's version numbered `number`, if there is one."""
    return await session.scalar(
        select(Version.id).where(Version.resource_id == resource_id, Version.version == number).limit(1)
    )


class DuplicateVersion(NamedTuple):
    resource_id: int
    number: str
    added: int  # the version that broke the rule
    taken: int  # the one that had the number before


async def duplicate_among(connection: AsyncConnection, added: Collection[int]) -> DuplicateVersion | None:
    """A number two versions of a resource share where one of them is among `added` (version ids
    just written), as the rule forbids; None when the rule holds for them."""
    shared = (
        select(Version.resource_id, Version.version)
        .group_by(Version.resource_id, Version.version)
        .having(func.count() > 1)
        .subquery()
    )
    rows = await connection.execute(
        select(Version.resource_id, Version.version, Version.id)
        .join(shared, and_(Version.resource_id == shared.c.resource_id, Version.version == shared.c.version))
        .order_by(Version.resource_id, Version.version, Version.id)
    )
    groups: dict[tuple[int, str], list[int]] = {}
    for resource_id, number, version_id in rows:
        groups.setdefault((resource_id, number), []).append(version_id)
    for (resource_id, number), ids in groups.items():
        mine = [version_id for version_id in ids if version_id in added]
        if mine:
            taken = next((version_id for version_id in ids if version_id not in added), ids[0])
            return DuplicateVersion(resource_id, number, mine[-1], taken)
    return None
