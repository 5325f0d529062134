"""The client address: right-most valid `X-Forwarded-For` entry that differs from the socket peer."""

from __future__ import annotations

import pytest
from starlette.types import Scope

from marketplace.http.client_ip import client_ip


def scope(peer: str, *forwarded: str) -> Scope:
    return {
        "type": "http",
        "client": (peer, 50000),
        "headers": [(b"x-forwarded-for", value.encode("latin-1")) for value in forwarded],
    }


def test_without_the_header_the_client_is_the_peer() -> None:
    assert client_ip(scope("10.0.0.1")) == "10.0.0.1"


def test_single_entry_is_the_client() -> None:
    assert client_ip(scope("10.0.0.1", "203.0.113.7")) == "203.0.113.7"


def test_right_most_entry_wins() -> None:
    assert client_ip(scope("10.0.0.1", "198.51.100.1, 203.0.113.7")) == "203.0.113.7"


def test_right_most_entry_equal_to_the_peer_is_skipped() -> None:
    assert client_ip(scope("10.0.0.1", "198.51.100.1, 203.0.113.7, 10.0.0.1")) == "203.0.113.7"


@pytest.mark.parametrize("junk", ["unknown", "", "  ", "999.1.1.1", "not an ip", "_hidden"])
def test_invalid_entries_are_skipped(junk: str) -> None:
    assert client_ip(scope("10.0.0.1", f"198.51.100.1,{junk}")) == "198.51.100.1"


def test_white_space_around_entries_is_ignored() -> None:
    assert client_ip(scope("10.0.0.1", "  198.51.100.1  ,   ")) == "198.51.100.1"


@pytest.mark.parametrize("header", ["unknown", "10.0.0.1", "garbage, 10.0.0.1", ",,", ""])
def test_no_usable_entry_gives_the_peer(header: str) -> None:
    assert client_ip(scope("10.0.0.1", header)) == "10.0.0.1"


def test_several_headers_read_as_one_list() -> None:
    assert client_ip(scope("10.0.0.1", "198.51.100.1", "203.0.113.7, junk")) == "203.0.113.7"


def test_ipv6_entry_is_a_valid_client() -> None:
    assert client_ip(scope("10.0.0.1", "198.51.100.1, 2001:db8::7")) == "2001:db8::7"


def test_ipv6_entry_is_normalised() -> None:
    assert client_ip(scope("10.0.0.1", "2001:0DB8:0000:0000:0000:0000:0000:0007")) == "2001:db8::7"


def test_ipv6_peer_is_skipped_like_an_ipv4_one() -> None:
    assert client_ip(scope("2001:db8::1", "2001:db8::9, 2001:db8::1")) == "2001:db8::9"


def test_ipv6_peer_without_usable_entry_is_the_client() -> None:
    assert client_ip(scope("::1", "::1")) == "::1"
