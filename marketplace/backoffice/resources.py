"""Resources changed outside the API: visibility, soft deletion, releases and the statistics id.

| Action | Changes | Refused when |
|---|---|---|
| status | `status`: one of published, unlisted, draft, pending, rejected | unknown status; already that status |
| soft-delete | `deleted_at` set: the resource leaves the API | already deleted |
| restore | `deleted_at` cleared | not deleted |
| release | a new version row, made current unless told not to | version number blank, too long or already used by the resource; title, file name or checksum too long; negative file size |
| promote | `current_version_id`: another version of the same resource | version unknown, of another resource, or already current |
| stats-id | `stats_id`: digits only, at most 20, or none | not digits or too long; already that value |

Only Published and Unlisted resources that are not deleted answer the API; search lists only the
Published ones. A resource is named by its id.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from marketplace.backoffice import events
from marketplace.backoffice.actions import Change, Refused, write_as_read
from marketplace.backoffice.values import locked_by_id, parse_id
from marketplace.catalogue.resources import NO_RELEASE_TEXT
from marketplace.catalogue.versions import version_numbered, version_taken
from marketplace.models import Resource, ResourceStatus, Version, utcnow

STATUSES = tuple(status.value for status in ResourceStatus)
# The limits of the fixture loader, which are the columns' own.
VERSION_LENGTH = 32
TITLE_LENGTH = 255
FILE_NAME_LENGTH = 255
CHECKSUM_LENGTH = 128
_STATS_ID = re.compile(r"[0-9]{1,20}")


@dataclass(frozen=True)
class Release:
    """A build to release, as the operator gives it (text, checked by `release`)."""

    version: str
    title: str
    changelog: str | None = None
    file_name: str | None = None
    file_size: str | None = None
    checksum: str | None = None


async def set_status(session: AsyncSession, reference: str, status: str) -> Change:
    """Give the resource one of the five visibility statuses."""
    target = status.strip().lower()
    if target not in STATUSES:
        raise Refused(f"unknown status {status!r} (one of {', '.join(STATUSES)})")
    resource = await locked_resource(session, reference)
    before = resource.status
    if before == target:
        raise Refused(f"resource {resource.id} is already {target}")
    await _write(session, resource, Resource.status == before, status=target)
    return Change(
        event=events.RESOURCE_STATUS_CHANGED,
        summary=f"resource {resource.id} ({resource.name}): {before} -> {target}",
        subject={"resource": resource.id},
        before={"status": before},
        after={"status": target},
        user_id=resource.user_id,
        resource_id=resource.id,
    )


async def soft_delete(session: AsyncSession, reference: str) -> Change:
    """Mark the resource deleted: it answers 404 and leaves search, its rows stay."""
    resource = await locked_resource(session, reference)
    if resource.deleted_at is not None:
        raise Refused(f"resource {resource.id} is already deleted")
    now = utcnow()
    await _write(session, resource, Resource.deleted_at.is_(None), deleted_at=now)
    return Change(
        event=events.RESOURCE_DELETED,
        summary=f"resource {resource.id} ({resource.name}): deleted",
        subject={"resource": resource.id},
        before={"deleted_at": None},
        after={"deleted_at": now},
        user_id=resource.user_id,
        resource_id=resource.id,
    )


async def restore(session: AsyncSession, reference: str) -> Change:
    """Undo a soft deletion: the resource answers again as its status allows."""
    resource = await locked_resource(session, reference)
    deleted_at = resource.deleted_at
    if deleted_at is None:
        raise Refused(f"resource {resource.id} is not deleted")
    await _write(session, resource, Resource.deleted_at.is_not(None), deleted_at=None)
    return Change(
        event=events.RESOURCE_RESTORED,
        summary=f"resource {resource.id} ({resource.name}): restored (status {resource.status})",
        subject={"resource": resource.id},
        before={"deleted_at": deleted_at},
        after={"deleted_at": None},
        user_id=resource.user_id,
        resource_id=resource.id,
    )


async def release(session: AsyncSession, reference: str, build: Release, *, promote: bool) -> Change:
    """Add a version to the resource and, if `promote`, make it the current one."""
    fields = _version_fields(build)
    resource = await locked_resource(session, reference)
    taken = await version_numbered(session, resource.id, fields["version"])
    if taken is not None:
        raise Refused(version_taken(resource.id, fields["version"], taken))
    current = await _current_number(session, resource)
    now = utcnow()
    version = Version(resource_id=resource.id, download=0, created_at=now, updated_at=now, **fields)
    session.add(version)
    await session.flush()
    created = {"version": version.id, "change": "created", "before": None, "after": fields}
    summary = (
        f"resource {resource.id} ({resource.name}): version {version.version} released (id {version.id})"
    )
    before = after = {"current_version": current}
    if promote:
        await _point_to(session, resource, version.id)
        after = {"current_version": version.version}
        summary += (
            f", current version {current} -> {version.version}"
            if current
            else ", now the current version (there was none)"
        )
    else:
        summary += f", current version stays {current}" if current else ", not made current (there is none)"
    return Change(
        event=events.RESOURCE_VERSION_RELEASED,
        summary=summary,
        subject={"resource": resource.id, "version": version.id},
        before=before,
        after=after,
        user_id=resource.user_id,
        resource_id=resource.id,
        effects=(created,),
    )


async def promote(session: AsyncSession, reference: str, version_reference: str) -> Change:
    """Make an existing version of the resource its current one."""
    resource = await locked_resource(session, reference)
    version = await _version_of(session, resource, version_reference)
    if version.id == resource.current_version_id:
        raise Refused(
            f"version {version.version} (id {version.id}) is already the current version of resource {resource.id}"
        )
    current = await _current_number(session, resource)
    await _point_to(session, resource, version.id)
    return Change(
        event=events.RESOURCE_VERSION_PROMOTED,
        summary=(
            f"resource {resource.id} ({resource.name}): current version {current}"
            f" -> {version.version} (id {version.id})"
            if current
            else f"resource {resource.id} ({resource.name}): version {version.version} (id {version.id})"
            " made current (there was none)"
        ),
        subject={"resource": resource.id, "version": version.id},
        before={"current_version": current},
        after={"current_version": version.version},
        user_id=resource.user_id,
        resource_id=resource.id,
    )


async def set_stats_id(session: AsyncSession, reference: str, stats_id: str | None) -> Change:
    """Set the resource's statistics id (digits only, at most 20), or clear it (None or empty)."""
    target = (stats_id or "").strip() or None
    if target is not None and not _STATS_ID.fullmatch(target):
        raise Refused(f"invalid stats id {stats_id!r}: digits only, at most 20")
    resource = await locked_resource(session, reference)
    # The loader stores an empty statistics id as none; both mean "no statistics".
    before = resource.stats_id or None
    if before == target:
        raise Refused(
            f"resource {resource.id} already has stats id {target}"
            if target
            else f"resource {resource.id} has no stats id"
        )
    await _write(
        session, resource, Resource.stats_id.is_not_distinct_from(resource.stats_id), stats_id=target
    )
    return Change(
        event=events.RESOURCE_STATS_ID_CHANGED,
        summary=f"resource {resource.id} ({resource.name}): {_stats_id_change(before, target)}",
        subject={"resource": resource.id},
        before={"stats_id": before},
        after={"stats_id": target},
        user_id=resource.user_id,
        resource_id=resource.id,
    )


def _stats_id_change(before: str | None, target: str | None) -> str:
    if before is None:
        return f"stats id set to {target}"
    if target is None:
        return f"stats id {before} cleared"
    return f"stats id {before} -> {target}"


async def locked_resource(session: AsyncSession, reference: str) -> Resource:
    """The resource whose id `reference` is, locked for the transaction; refused when there is none."""
    return await locked_by_id(session, Resource, reference, "resource")


async def _write(
    session: AsyncSession, resource: Resource, unchanged: ColumnElement[bool], **values: Any
) -> None:
    """Update the resource if `unchanged` still holds (what was read is what is changed)."""
    await write_as_read(
        session,
        update(Resource).where(Resource.id == resource.id, unchanged).values(updated_at=utcnow(), **values),
        f"resource {resource.id}",
    )


async def _point_to(session: AsyncSession, resource: Resource, version_id: int) -> None:
    await _write(
        session,
        resource,
        Resource.current_version_id.is_not_distinct_from(resource.current_version_id),
        current_version_id=version_id,
    )


async def _current_number(session: AsyncSession, resource: Resource) -> str | None:
    """The number of the current version as the API reads it (a pointer to another resource's
    version names none)."""
    if resource.current_version_id is None:
        return None
    return await session.scalar(
        select(Version.version).where(
            Version.id == resource.current_version_id, Version.resource_id == resource.id
        )
    )


async def _version_of(session: AsyncSession, resource: Resource, reference: str) -> Version:
    """A version of `resource` by its number or, failing that, by its id."""
    text = reference.strip()
    numbered = (
        await session.scalars(
            select(Version)
            .where(Version.resource_id == resource.id, Version.version == text)
            .order_by(Version.id)
        )
    ).all()
    if len(numbered) > 1:
        ids = ", ".join(str(version.id) for version in numbered)
        raise Refused(
            f"resource {resource.id} has {len(numbered)} versions {text!r} (ids {ids}): give the id"
        )
    if numbered:
        return numbered[0]
    version = None
    version_id = parse_id(text)
    if version_id is not None:
        version = await session.get(Version, version_id)
    if version is None:
        raise Refused(f"resource {resource.id} has no version {reference!r}")
    if version.resource_id != resource.id:
        raise Refused(
            f"version {version.id} is a version of resource {version.resource_id}, not of resource {resource.id}"
        )
    return version


def _version_fields(build: Release) -> Mapping[str, Any]:
    """The new version's columns, checked as the fixture loader checks them."""
    number = build.version.strip()
    if not number or len(number) > VERSION_LENGTH or not number.isprintable():
        raise Refused(f"invalid version {build.version!r}: 1 to {VERSION_LENGTH} printable characters")
    if number == NO_RELEASE_TEXT:
        # What the update check answers when nothing is released: a client could not tell them apart.
        raise Refused(f"invalid version {build.version!r}: the update check's answer for no version")
    title = build.title.strip()
    if len(title) > TITLE_LENGTH or not title.isprintable():
        raise Refused(f"invalid title: at most {TITLE_LENGTH} printable characters")
    file_name = _optional(build.file_name)
    if file_name is not None and len(file_name) > FILE_NAME_LENGTH:
        raise Refused(f"invalid file name: at most {FILE_NAME_LENGTH} characters")
    checksum = _optional(build.checksum)
    if checksum is not None and len(checksum) > CHECKSUM_LENGTH:
        raise Refused(f"invalid checksum: at most {CHECKSUM_LENGTH} characters")
    file_size = _optional(build.file_size)
    if file_size is not None and not re.fullmatch(r"[0-9]{1,18}", file_size):
        raise Refused(f"invalid file size {build.file_size!r}: a number of bytes, not negative")
    return {
        "version": number,
        "title": title,
        "changelog": _optional(build.changelog),
        "file_name": file_name,
        "file_size": int(file_size) if file_size is not None else None,
        "checksum": checksum,
    }


def _optional(text: str | None) -> str | None:
    stripped = (text or "").strip()
    return stripped or None
