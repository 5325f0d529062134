"""The client address: `X-Forwarded-For` read as far as the proxies are trusted (all of them by default)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from starlette.types import Scope

from marketplace.config import Settings
from marketplace.http.client_ip import TrustedProxies, client_ip, client_network


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


# MARKETPLACE_TRUSTED_PROXIES as a list: the header is believed only as far as trusted hops go.

PROXIES = TrustedProxies.parse("10.0.0.0/8, 192.0.2.5, 2001:db8::/32")


def test_star_trusts_every_peer_as_the_contract_says() -> None:
    star = TrustedProxies.parse("*")
    assert star.everyone
    assert client_ip(scope("198.51.100.9", "203.0.113.7"), star) == "203.0.113.7"


def test_an_untrusted_peer_is_the_client_whatever_it_forwards() -> None:
    assert client_ip(scope("198.51.100.9", "203.0.113.7"), PROXIES) == "198.51.100.9"


def test_a_trusted_peer_forwards_the_client_it_saw() -> None:
    assert client_ip(scope("10.0.0.1", "203.0.113.7"), PROXIES) == "203.0.113.7"


def test_the_walk_goes_from_the_right_past_trusted_hops_only() -> None:
    # The left-most entry was written by the caller: it is not believed once an untrusted hop is met.
    header = "1.1.1.1, 203.0.113.7, 192.0.2.5, 10.2.3.4"
    assert client_ip(scope("10.0.0.1", header), PROXIES) == "203.0.113.7"


def test_when_every_hop_is_trusted_the_left_most_is_the_client() -> None:
    assert client_ip(scope("10.0.0.1", "10.9.9.9, 192.0.2.5"), PROXIES) == "10.9.9.9"


def test_an_entry_that_is_no_address_ends_the_walk_at_the_nearest_trusted_hop() -> None:
    assert client_ip(scope("10.0.0.1", "203.0.113.7, garbage, 192.0.2.5"), PROXIES) == "192.0.2.5"
    assert client_ip(scope("10.0.0.1", "203.0.113.7, garbage"), PROXIES) == "10.0.0.1"


def test_ipv6_networks_and_ipv4_mapped_peers_are_matched() -> None:
    assert client_ip(scope("2001:db8::1", "203.0.113.7"), PROXIES) == "203.0.113.7"
    assert client_ip(scope("::ffff:10.0.0.1", "203.0.113.7"), PROXIES) == "203.0.113.7"


def test_an_empty_list_trusts_nobody() -> None:
    nobody = TrustedProxies.parse("")
    assert client_ip(scope("10.0.0.1", "203.0.113.7"), nobody) == "10.0.0.1"


@pytest.mark.parametrize("setting", ["10.0.0.0/33", "proxy.internal", "10.0.0.1, nonsense"])
def test_a_setting_that_is_no_address_or_cidr_is_refused(setting: str) -> None:
    with pytest.raises(ValueError, match="not an address or CIDR"):
        TrustedProxies.parse(setting)


@pytest.mark.parametrize(
    ("address", "prefix", "counted_as"),
    [
        ("203.0.113.7", 64, "203.0.113.7"),
        ("2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64"),
        ("2001:db8:1:2::1", 48, "2001:db8:1::/48"),
        ("2001:db8:1:2::1", 128, "2001:db8:1:2::1/128"),
        ("::ffff:203.0.113.7", 64, "203.0.113.7"),
        ("not an address", 64, "not an address"),
    ],
)
def test_a_client_is_counted_by_its_ipv4_address_or_its_ipv6_network(
    address: str, prefix: int, counted_as: str
) -> None:
    assert client_network(address, prefix) == counted_as


@pytest.mark.parametrize("prefix", [0, 129])
def test_the_ipv6_limit_prefix_is_1_to_128_bits(prefix: int) -> None:
    with pytest.raises(ValidationError, match="ipv6_limit_prefix"):
        Settings(_env_file=None, ipv6_limit_prefix=prefix)  # type: ignore[call-arg]
