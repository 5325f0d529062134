"""The receiver's signature check printed in docs/webhooks.md ("Verifying a signature") agrees
with the signatures the service sends: receivers copy it as it is written."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from marketplace.webhooks.signing import signature_header

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "webhooks.md"
HEADING = "Verifying a signature"
SECRET = "whsec_7k-8fd_lJxTPCg45pudFQ0fvLR6shHQ5THIYIl8AB6c"
BODY = b'{"id":"2","event":"release.published","created_at":"2026-11-27T22:58:51.794000Z","data":{}}'

Verify = Callable[..., bool]


def headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """(line index, level, title) of each Markdown heading, not counting `#` lines inside fences."""
    found: list[tuple[int, int, str]] = []
    fenced = False
    for index, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (heading := re.match(r"^(#+)\s+(.*?)\s*$", line)):
            found.append((index, len(heading.group(1)), heading.group(2)))
    return found


def section_code(markdown: str, title: str) -> str:
    """The one ```python block of the section titled `title` (up to the next heading as high)."""
    lines = markdown.splitlines()
    every = headings(lines)
    matching = [(index, level) for index, level, text in every if text == title]
    assert len(matching) == 1, f"docs/webhooks.md has {len(matching)} sections titled {title!r}"
    start, level = matching[0]
    end = next((index for index, depth, _ in every if index > start and depth <= level), len(lines))
    section = "\n".join(lines[start:end]) + "\n"
    blocks = re.findall(r"^```python\n(.*?)^```$", section, re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1, f"the section {title!r} has {len(blocks)} python blocks, not one"
    return str(blocks[0])


@pytest.fixture(scope="module")
def verify_signature() -> Verify:
    namespace: dict[str, Any] = {}
    code = section_code(DOCUMENT.read_text(encoding="utf-8"), HEADING)
    exec(compile(code, str(DOCUMENT), "exec"), namespace)
    function: Verify = namespace["verify_signature"]
    assert callable(function)
    return function


def test_a_header_the_service_made_is_accepted(verify_signature: Verify) -> None:
    assert verify_signature(SECRET, signature_header(SECRET, BODY), BODY) is True


def test_a_header_made_with_another_secret_is_refused(verify_signature: Verify) -> None:
    header = signature_header("whsec_another-subscriptions-secret", BODY)

    assert verify_signature(SECRET, header, BODY) is False


def test_a_changed_body_is_refused(verify_signature: Verify) -> None:
    header = signature_header(SECRET, BODY)

    assert verify_signature(SECRET, header, BODY.replace(b'"2"', b'"3"')) is False
    assert verify_signature(SECRET, header, BODY + b"\n") is False


def test_a_header_older_than_the_tolerance_is_refused(verify_signature: Verify) -> None:
    header = signature_header(SECRET, BODY, now=time.time() - 301)

    assert verify_signature(SECRET, header, BODY) is False
    assert verify_signature(SECRET, header, BODY, tolerance=60) is False


@pytest.mark.parametrize(
    "header",
    [
        "",
        "garbage",
        "t=,v1=",
        "v1={signature}",
        "t={time}",
        "t=soon,v1={signature}",
        "t={time};v1={signature}",
        "t={time},v1=é",
        "t={time},v1={signature}0",
    ],
)
def test_a_malformed_header_is_refused(verify_signature: Verify, header: str) -> None:
    made = signature_header(SECRET, BODY)
    timestamp, signature = (part.split("=", 1)[1] for part in made.split(","))

    assert verify_signature(SECRET, header.format(time=timestamp, signature=signature), BODY) is False
