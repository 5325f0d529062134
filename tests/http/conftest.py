"""The HTTP layer's tests run on one profile and without an upstream server, to stay fast.

The layer behaves alike on every database, so SQLite with the in-process store is enough here; the
PostgreSQL + Redis profile is exercised by the contract and production-profile tests. No test here
calls an upstream, so its address is a loopback port nothing listens on.
"""

from __future__ import annotations

import pytest

from tests.upstream import closed_port_url


class NoUpstream:
    """Stands in for `FakeUpstream` where nothing may be called upstream."""

    def __init__(self) -> None:
        self.url = closed_port_url()


@pytest.fixture
def profile() -> str:
    return "sqlite"


@pytest.fixture
def upstream() -> NoUpstream:
    return NoUpstream()
