"""The contract's objects as the routes print them, each key in its frozen order."""

from __future__ import annotations

from typing import Any

from marketplace.catalogue.resources import ResourceView
from marketplace.config import Settings
from marketplace.http.json import json_number, timestamp
from marketplace.models import Access, Version


def storage_url(settings: Settings, path: str | None) -> str | None:
    """`{base_url}/storage/{path}` of a stored file; None when nothing is stored."""
    if not path:
        return None
    return f"{settings.public_base_url}/storage/{path.lstrip('/')}"


def version_object(version: Version) -> dict[str, Any]:
    return {
        "id": version.id,
        "plugin_id": version.resource_id,
        "version": version.version,
        "title": version.title,
        "download": version.download,
        "created_at": timestamp(version.created_at),
    }


def resource_object(view: ResourceView, settings: Settings) -> dict[str, Any]:
    resource = view.resource
    rating = view.rating_avg
    return {
        "id": resource.id,
        "user_id": resource.user_id,
        "name": resource.name,
        "tag": resource.tag,
        "price": json_number(resource.price),
        "category_id": resource.category_id,
        "unique_id": resource.unique_id,
        "version_id": view.current_version.id if view.current_version is not None else None,
        "download": resource.download,
        "purchases": view.purchases,
        "logo": storage_url(settings, resource.icon),
        "version": version_object(view.current_version) if view.current_version is not None else None,
        "created_at": timestamp(resource.created_at),
        "updated_at": timestamp(resource.updated_at),
        "slug": resource.slug,
        "rating_avg": json_number(round(float(rating), 2)) if rating is not None else 0,
        "reviews_count": view.reviews_count,
    }


def access_object(access: Access) -> dict[str, Any]:
    return {
        "id": access.id,
        "user_id": access.user_id,
        "plugin_id": access.resource_id,
        "payment_id": access.payment_id,
        "created_at": timestamp(access.created_at),
        "updated_at": timestamp(access.updated_at),
    }
