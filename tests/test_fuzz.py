"""Fuzzing the running service against its own OpenAPI document, on both profiles.

Schemathesis generates requests for every operation of `/openapi.json` (valid ones, then invalid
query strings and bodies), a bounded number per operation, the same ones on every run (the
Hypothesis profile of tests/conftest.py: derandomized, no example database), and sends them to a
real `marketplace serve`. Every answer must be documented: its status listed for the operation
(so no 5xx but search's documented one), its body valid against the status's schema, its content
type and required headers as documented.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from marketplace.config import Settings
from tests.catalogue import MEMBER_CHAT_ID, PAID_UID
from tests.live import LiveServer, environment, load_catalogue, running_service

VALID_CASES_PER_OPERATION = 60
INVALID_CASES_PER_OPERATION = 25
CHECKS = [
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
# Invalid cases vary the query and body; the path keeps values of the catalogue, since an invalid
# path segment is another route's path (`/chat/` is `POST /chat`), not an invalid call of this one.
KNOWN_PATH_PARAMETERS = {
    "key": "ABC",
    "resource": "1",
    "user": MEMBER_CHAT_ID,
    "gift": "WELCOME10",
    "payment": PAID_UID,
    "serverId": "81384788765712384",
    "chart": "servers",
}


@pytest.fixture
def live(settings: Settings, tmp_path: Path) -> Iterator[LiveServer]:
    load_catalogue(settings)
    with running_service(environment(settings, MARKETPLACE_ACCESS_LOG="false"), tmp_path) as server:
        yield server


def fuzz_operation(
    operation: Any, mode: GenerationMode, examples: int, base_url: str, tried: Counter[str]
) -> None:
    addresses = itertools.count(1)
    path_parameters = None
    if mode is GenerationMode.NEGATIVE:
        path_parameters = {
            parameter.name: KNOWN_PATH_PARAMETERS[parameter.name] for parameter in operation.path_parameters
        }
    strategy = operation.as_strategy(generation_mode=mode, path_parameters=path_parameters)

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        tried[operation.label] += 1
        number = next(addresses)
        # A client address per case, so that the limiters do not turn the run into 429s.
        forwarded = f"10.{number >> 16 & 255}.{number >> 8 & 255}.{number & 255}"
        response = case.call(
            base_url=base_url, headers={"X-Forwarded-For": forwarded}, timeout=30, allow_redirects=False
        )
        documented = set(case.operation.definition.raw["responses"])
        assert response.status_code < 500 or str(response.status_code) in documented, (
            case.as_curl_command(),
            response.status_code,
        )
        case.validate_response(response, checks=CHECKS)

    run()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_every_answer_to_generated_requests_is_documented(live: LiveServer, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_url(f"{live.base_url}/openapi.json")
    examples = VALID_CASES_PER_OPERATION if mode is GenerationMode.POSITIVE else INVALID_CASES_PER_OPERATION
    tried: Counter[str] = Counter()
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 28  # 16 routes, and HEAD beside each of the 12 GET routes
    for operation in operations:
        if mode is GenerationMode.NEGATIVE and not (len(operation.query) or len(operation.body)):
            continue  # only its path varies, and that stays valid (see above)
        fuzz_operation(operation, mode, examples, f"{live.base_url}/api/v1", tried)
    negatable = {op.label for op in operations if len(op.query) or len(op.body)}
    assert set(tried) == ({op.label for op in operations} if mode is GenerationMode.POSITIVE else negatable)
    print(
        f"\n{mode.value}: {sum(tried.values())} cases: "
        + ", ".join(f"{k}={v}" for k, v in sorted(tried.items()))
    )
