"""How the suite is configured: the Hypothesis profiles (tests/conftest.py), and the PostgreSQL and
Redis it uses (tests/profiles.py), chosen by environment variables, checked where they point, and
left without the run's Redis keys."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import hypothesis
import pytest

from tests.profiles import (
    REDIS_URL,
    THIS_PROCESS_KEYS,
    forget_redis_keys,
    keys_of_process,
    require_postgresql,
    require_redis,
    unique_name,
)
from tests.upstream import closed_port_url

ROOT = Path(__file__).resolve().parent.parent
# No process has this id (above Linux's largest pid_max), so no test writes its keys.
NO_PROCESS = 9_999_999


def in_a_fresh_interpreter(code: str, **environment: str) -> str:
    """What `code` prints in a new interpreter whose environment sets none of the suite's variables
    but `environment`."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("MARKETPLACE_TEST_", "HYPOTHESIS_"))
    }
    env.update(environment)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


PROFILE = (
    "import hypothesis, tests.conftest; s = hypothesis.settings.default;"
    " print(s.derandomize, s.database, s.deadline, s.print_blob)"
)


def test_the_default_hypothesis_profile_draws_the_same_examples_every_run_and_keeps_none() -> None:
    assert in_a_fresh_interpreter(PROFILE) == "True None None True"
    assert in_a_fresh_interpreter(PROFILE, HYPOTHESIS_PROFILE="ci") == "True None None True"


def test_the_explore_profile_draws_at_random_and_keeps_no_examples_either() -> None:
    assert in_a_fresh_interpreter(PROFILE, HYPOTHESIS_PROFILE="explore") == "False None None True"


def test_this_run_uses_a_profile_without_an_example_database() -> None:
    assert hypothesis.settings.default.database is None


SERVICES = "import tests.profiles as p; print(p.POSTGRES_ADMIN_URL, p.REDIS_URL)"


def test_the_test_services_are_the_machines_unless_the_environment_names_others() -> None:
    assert in_a_fresh_interpreter(SERVICES) == (
        "postgresql://postgres@127.0.0.1:5432/test redis://127.0.0.1:6379/0"
    )
    assert in_a_fresh_interpreter(
        SERVICES,
        MARKETPLACE_TEST_DATABASE_URL="postgresql://ci@db.internal:6543/admin",
        MARKETPLACE_TEST_REDIS_URL="redis://cache.internal:6380/7",
    ) == ("postgresql://ci@db.internal:6543/admin redis://cache.internal:6380/7")


def test_a_test_service_is_looked_for_where_its_url_points(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MARKETPLACE_REQUIRE_SERVICES", raising=False)
    closed = closed_port_url().removeprefix("http://")
    with pytest.raises(pytest.skip.Exception, match=f"PostgreSQL is not running on {closed}"):
        require_postgresql(f"postgresql://postgres@{closed}/test")
    with pytest.raises(pytest.skip.Exception, match=f"Redis is not running on {closed}"):
        require_redis(f"redis://{closed}/3")


def test_a_missing_test_service_fails_the_run_where_services_are_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MARKETPLACE_REQUIRE_SERVICES", "1")
    closed = closed_port_url().removeprefix("http://")
    with pytest.raises(pytest.fail.Exception, match="MARKETPLACE_REQUIRE_SERVICES=1"):
        require_redis(f"redis://{closed}/0")


def test_the_runs_redis_keys_are_those_under_its_unique_prefixes_and_are_deleted() -> None:
    require_redis()
    import redis

    assert THIS_PROCESS_KEYS == keys_of_process(os.getpid())
    assert unique_name("mp_test").startswith(f"mp_test_{os.getpid()}_")
    marker = uuid.uuid4().hex[:10]
    the_runs = [f"mp_test_{NO_PROCESS}_{marker}:limit:x", f"mp_prod_{NO_PROCESS}_{marker}:cache:y"]
    others = [
        f"mp_test_{NO_PROCESS}0_{marker}:limit:x",  # another process
        f"mp_test_{NO_PROCESS}_{marker[:9]}:limit:x",  # not a unique name
        f"mpx_{NO_PROCESS}_{marker}:limit:x",  # another namespace
    ]
    client = redis.Redis.from_url(REDIS_URL)
    try:
        for key in the_runs + others:
            client.set(key, b"1", ex=60)
        assert forget_redis_keys(keys_of_process(NO_PROCESS)) == len(the_runs)
        assert [client.exists(key) for key in the_runs + others] == [0, 0, 1, 1, 1]
    finally:
        client.delete(*others)
        client.close()
