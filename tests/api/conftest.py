"""Fixtures of the route contract tests."""

from __future__ import annotations

import pytest

from marketplace.services import Services
from marketplace.stores import MemoryStore
from tests.api.helpers import Clock


@pytest.fixture
async def clock(services: Services) -> Clock:
    """The app's store replaced by an in-process one whose time the test moves."""
    moved = Clock()
    await services.store.close()
    services.use_store(MemoryStore(clock=moved))
    return moved
