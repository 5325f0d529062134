"""The contract's objects as the routes print them, each key in its frozen order."""

from __future__ import annotations

from typing import Any

from marketplace.catalogue.members import ActiveAccess
from marketplace.catalogue.resources import ResourceCard, VersionRow
from marketplace.config import Settings
from marketplace.http.json import json_number, timestamp


def storage_url(settings: Settings, path: str | None) -> str | None:
    """`{base_url}/storage/{path}` of a stored file; None when nothing is stored."""
    if not path:
        return None
    return f"{settings.public_base_url}/storage/{path.lstrip('/')}"


def version_object(version: VersionRow) -> dict[str, Any]:
    return {
        "id": version.id,
        "plugin_id": version.resource_id,
        "version": version.version,
        "title": version.title,
        "download": version.download,
        "created_at": timestamp(version.created_at),
    }


def resource_object(card: ResourceCard, settings: Settings) -> dict[str, Any]:
    rating = card.rating_avg
    current = card.current_version
    return {
        "id": card.id,
        "user_id": card.user_id,
        "name": card.name,
        "tag": card.tag,
        "price": json_number(card.price),
        "category_id": card.category_id,
        "unique_id": card.unique_id,
        "version_id": current.id if current is not None else None,
        "download": card.download,
        "purchases": card.purchases,
        "logo": storage_url(settings, card.icon),
        "version": version_object(current) if current is not None else None,
        "created_at": timestamp(card.created_at),
        "updated_at": timestamp(card.updated_at),
        "slug": card.slug,
        "rating_avg": json_number(round(float(rating), 2)) if rating is not None else 0,
        "reviews_count": card.reviews_count,
    }


def access_object(access: ActiveAccess) -> dict[str, Any]:
    return {
        "id": access.id,
        "user_id": access.user_id,
        "plugin_id": access.resource_id,
        "payment_id": access.payment_id,
        "created_at": timestamp(access.created_at),
        "updated_at": timestamp(access.updated_at),
    }
