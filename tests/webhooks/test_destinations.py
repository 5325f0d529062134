"""Which URLs and addresses a webhook may call: checked without the network, and after resolution."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from marketplace.webhooks.destinations import (
    DestinationRefused,
    checked_url,
    refused_address,
    resolved_addresses,
)

SETTING = "MARKETPLACE_WEBHOOKS_ALLOW_PRIVATE=true"


def refusal(address: str, *, allow_private: bool = False) -> str | None:
    return refused_address(ipaddress.ip_address(address), allow_private=allow_private)


def teredo(server: str, client: str) -> str:
    """The Teredo address of a client behind `server`, as RFC 4380 writes it (client bits inverted)."""
    value = (0x2001_0000 << 96) | (int(ipaddress.IPv4Address(server)) << 64)
    value |= int(ipaddress.IPv4Address(client)) ^ 0xFFFF_FFFF
    return str(ipaddress.IPv6Address(value))


# Addresses


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.254", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "unique local"),
        ("fd12:3456::1", "unique local"),
        ("fec0::1", "site-local"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("100.127.255.254", "carrier-grade NAT"),
        ("64:ff9b:1::1", "local-use NAT64"),
    ],
)
def test_local_network_addresses_are_refused_unless_private_ones_are_allowed(address: str, kind: str) -> None:
    reason = refusal(address)
    assert reason is not None
    assert kind in reason
    assert SETTING in reason
    assert refusal(address, allow_private=True) is None


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("0.1.2.3", "this network"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("ff02::1", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.1", "documentation"),
        ("198.51.100.1", "documentation"),
        ("203.0.113.1", "documentation"),
        ("2001:db8::1", "documentation"),
        ("198.18.0.1", "benchmarking"),
        ("192.0.0.8", "IETF protocol assignment"),
        ("100::1", "discard-only"),
    ],
)
def test_addresses_that_reach_no_receiver_are_refused_always(address: str, kind: str) -> None:
    for allow_private in (False, True):
        reason = refusal(address, allow_private=allow_private)
        assert reason is not None
        assert kind in reason
        assert "webhooks never call it" in reason


@pytest.mark.parametrize("address", ["169.254.169.254", "fd00:ec2::254", "100.100.100.200"])
def test_metadata_addresses_are_refused_by_name_even_where_private_ones_are_allowed(address: str) -> None:
    for allow_private in (False, True):
        reason = refusal(address, allow_private=allow_private)
        assert reason is not None
        assert "metadata" in reason


@pytest.mark.parametrize(
    ("address", "embedded", "kind"),
    [
        ("::ffff:127.0.0.1", "127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "10.0.0.1", "private"),
        ("::ffff:169.254.169.254", "169.254.169.254", "metadata"),
        ("::127.0.0.1", "127.0.0.1", "loopback"),
        ("2002:7f00:1::1", "127.0.0.1", "loopback"),
        ("2002:a9fe:a9fe::", "169.254.169.254", "metadata"),
        ("64:ff9b::10.0.0.1", "10.0.0.1", "private"),
        ("64:ff9b::169.254.169.254", "169.254.169.254", "metadata"),
        (teredo("93.184.216.34", "192.168.0.2"), "192.168.0.2", "private"),
        (teredo("10.0.0.1", "93.184.216.34"), "10.0.0.1", "private"),
    ],
)
def test_ipv6_forms_embedding_an_ipv4_address_are_judged_by_it(
    address: str, embedded: str, kind: str
) -> None:
    reason = refusal(address)
    assert reason is not None
    assert embedded in reason
    assert kind in reason


@pytest.mark.parametrize("address", ["::ffff:93.184.216.34", "64:ff9b::93.184.216.34", "2002:5db8:d822::1"])
def test_ipv6_forms_of_a_public_ipv4_address_are_allowed(address: str) -> None:
    assert refusal(address) is None


@pytest.mark.parametrize("address", ["::93.184.216.34", teredo("93.184.216.34", "8.8.8.8")])
def test_deprecated_ipv6_forms_are_refused_even_for_public_ipv4_addresses(address: str) -> None:
    reason = refusal(address)
    assert reason is not None
    assert "webhooks never call it" in reason


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700::1", "2a00:1450:4001::1"]
)
def test_public_addresses_are_allowed(address: str) -> None:
    assert refusal(address) is None
    assert refusal(address, allow_private=True) is None


def test_a_reason_is_one_line_naming_the_address() -> None:
    assert refusal("127.0.0.1") == (
        "127.0.0.1 is a loopback address: webhooks call public addresses only "
        "(MARKETPLACE_WEBHOOKS_ALLOW_PRIVATE=true allows it)"
    )


# URLs


def refused_url(url: str, *, allow_private: bool = False) -> str:
    with pytest.raises(DestinationRefused) as refused:
        checked_url(url, allow_private=allow_private)
    reason = str(refused.value)
    assert reason
    assert "\n" not in reason
    return reason


@pytest.mark.parametrize(
    "url",
    ["https://hooks.example.com/in", "https://hooks.example.com:8443/in?shop=1#x", "https://93.184.216.34/"],
)
def test_a_public_https_url_is_returned(url: str) -> None:
    assert checked_url(url, allow_private=False) == url


def test_the_url_is_returned_without_surrounding_whitespace() -> None:
    assert (
        checked_url("  https://hooks.example.com/in\n", allow_private=False) == "https://hooks.example.com/in"
    )


def test_http_is_refused_unless_private_destinations_are_allowed() -> None:
    assert refused_url("http://hooks.example.com/in") == (
        "webhooks call https:// URLs only (http:// needs MARKETPLACE_WEBHOOKS_ALLOW_PRIVATE=true)"
    )
    assert checked_url("http://hooks.example.com/in", allow_private=True) == "http://hooks.example.com/in"


@pytest.mark.parametrize(
    "url", ["ftp://hooks.example.com/in", "file:///etc/passwd", "hooks.example.com/in", "javascript:alert(1)"]
)
def test_other_schemes_are_refused(url: str) -> None:
    assert "https://" in refused_url(url)
    assert "https://" in refused_url(url, allow_private=True)


@pytest.mark.parametrize("url", ["https:///in", "https://", "https://:443/in"])
def test_a_host_is_required(url: str) -> None:
    refused_url(url, allow_private=True)


@pytest.mark.parametrize(
    "url",
    [
        "https://user:secret@hooks.example.com/in",
        "https://user@hooks.example.com/in",
        "https://@hooks.example.com/in",
        "https://hooks.example.com\\@127.0.0.1/in",
    ],
)
def test_user_info_is_refused(url: str) -> None:
    assert "credentials" in refused_url(url, allow_private=True)


def test_a_url_has_at_most_2000_characters() -> None:
    longest = "https://hooks.example.com/" + "a" * (2_000 - len("https://hooks.example.com/"))
    assert checked_url(longest, allow_private=False) == longest
    assert "2,000" in refused_url(longest + "a")


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com:0/",
        "https://hooks.example.com:65536/",
        "https://hooks.example.com:-1/",
        "https://hooks.example.com:http/",
    ],
)
def test_the_port_must_be_valid(url: str) -> None:
    refused_url(url, allow_private=True)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/a b",
        "https://hooks.example.com/a\tb",
        "https://hooks.exa\nmple.com/",
        "https://hooks.example.com/\x00",
        "https://hooks.example.com/\x7f",
        "https://hooks.example.com/\u200b",
    ],
)
def test_whitespace_and_control_characters_are_refused(url: str) -> None:
    assert "whitespace or control characters" in refused_url(url, allow_private=True)


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("https://127.0.0.1/in", "loopback"),
        ("https://10.0.0.1/in", "private"),
        ("https://169.254.169.254/latest/meta-data/", "metadata"),
        ("https://[::1]/in", "loopback"),
        ("https://[::ffff:127.0.0.1]/in", "loopback"),
        ("https://[fd00:ec2::254]/in", "metadata"),
        ("https://[ff02::1]/in", "multicast"),
    ],
)
def test_an_address_as_host_is_checked_at_once(url: str, kind: str) -> None:
    assert kind in refused_url(url)


def test_an_ipv6_host_is_allowed_when_public() -> None:
    assert (
        checked_url("https://[2606:4700::1]:8443/in", allow_private=False) == "https://[2606:4700::1]:8443/in"
    )


def test_an_ipv6_zone_is_refused() -> None:
    assert "zone" in refused_url("http://[fe80::1%25eth0]/in", allow_private=True)


@pytest.mark.parametrize(
    "url",
    [
        "https://2130706433/",
        "https://0x7f000001/",
        "https://0x7f.1/",
        "https://127.1/",
        "https://127.0.1/",
        "https://0x7f.0.0.1/",
        "https://127.0.0.1./",
    ],
)
def test_odd_ipv4_forms_of_a_refused_address_are_refused_as_that_address(url: str) -> None:
    reason = refused_url(url)
    assert "127.0.0.1" in reason
    assert "loopback" in reason


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("https://1572395042/", "93.184.216.34"),
        ("https://0x5d.0xb8.0xd8.0x22/", "93.184.216.34"),
        ("https://93.12113954/", "93.184.216.34"),
        ("http://127.1/", "127.0.0.1"),
    ],
)
def test_odd_ipv4_forms_of_an_allowed_address_are_refused_with_the_usual_form(url: str, address: str) -> None:
    assert f"write it as {address}" in refused_url(url, allow_private=True)


@pytest.mark.parametrize(
    "url",
    ["https://0177.0.0.1/", "https://08.0.0.1/", "https://1.2.3.4.5/", "https://256.1/", "https://a.123/"],
)
def test_invalid_ipv4_forms_are_refused(url: str) -> None:
    refused_url(url, allow_private=True)


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "LOCALHOST",
        "localhost.",
        "api.localhost",
        "printer.local",
        "db.internal",
        "metadata.google.internal",
        "localhost.localdomain",
        "router.home.arpa",
        "intranet",
    ],
)
def test_local_names_are_refused_unless_private_destinations_are_allowed(host: str) -> None:
    reason = refused_url(f"https://{host}/in")
    assert "local name" in reason
    assert SETTING in reason
    assert checked_url(f"https://{host}/in", allow_private=True) == f"https://{host}/in"


# Resolution


Answers = Callable[[str], Sequence[str]]


def resolving(monkeypatch: pytest.MonkeyPatch, answers: dict[str, Sequence[str]]) -> list[str]:
    """The running loop's resolver answers `answers` for those names; the names asked are listed."""
    loop = asyncio.get_running_loop()
    asked: list[str] = []

    async def getaddrinfo(host: str, port: Any, **_: Any) -> list[tuple[Any, ...]]:
        asked.append(host)
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        results: list[tuple[Any, ...]] = []
        for address in answers[host]:
            if ":" in address:
                results.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0)))
            else:
                results.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)))
        return results

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    return asked


async def test_a_name_resolving_to_public_addresses_gives_them_in_order_without_repeats(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resolving(monkeypatch, {"hooks.example.com": ["93.184.216.34", "2606:4700::1", "93.184.216.34"]})
    addresses = await resolved_addresses("hooks.example.com", 443, allow_private=False, timeout=1)
    assert addresses == [ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("2606:4700::1")]


async def test_a_name_resolving_to_a_mix_of_public_and_private_addresses_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resolving(monkeypatch, {"hooks.example.com": ["93.184.216.34", "10.0.0.7"]})
    with pytest.raises(DestinationRefused) as refused:
        await resolved_addresses("hooks.example.com", 443, allow_private=False, timeout=1)
    assert str(refused.value).startswith("hooks.example.com resolves to 10.0.0.7, and 10.0.0.7 is a private")


async def test_a_name_resolving_to_a_metadata_address_is_refused_even_where_private_ones_are_allowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resolving(monkeypatch, {"hooks.example.com": ["::ffff:169.254.169.254"]})
    with pytest.raises(DestinationRefused, match="metadata"):
        await resolved_addresses("hooks.example.com", 443, allow_private=True, timeout=1)


async def test_a_name_that_does_not_resolve_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    resolving(monkeypatch, {})
    with pytest.raises(
        DestinationRefused, match=r"^nowhere\.example does not resolve \(Name or service not known\)$"
    ):
        await resolved_addresses("nowhere.example", 443, allow_private=False, timeout=1)


async def test_resolution_is_bounded_by_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    async def getaddrinfo(*_: Any, **__: Any) -> list[tuple[Any, ...]]:
        await asyncio.sleep(30)
        return []

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", getaddrinfo)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(DestinationRefused, match=r"did not resolve within 0\.2 s"):
        await resolved_addresses("slow.example", 443, allow_private=False, timeout=0.2)
    assert loop.time() - started < 2


async def test_an_address_as_host_is_not_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = resolving(monkeypatch, {})
    assert await resolved_addresses("93.184.216.34", 443, allow_private=False, timeout=1) == [
        ipaddress.ip_address("93.184.216.34")
    ]
    assert await resolved_addresses("[2606:4700::1]", 443, allow_private=False, timeout=1) == [
        ipaddress.ip_address("2606:4700::1")
    ]
    with pytest.raises(DestinationRefused, match=r"^127\.0\.0\.1 is a loopback address"):
        await resolved_addresses("127.0.0.1", 443, allow_private=False, timeout=1)
    assert asked == []


async def test_localhost_resolves_to_loopback_addresses_refused_unless_private_ones_are_allowed() -> None:
    with pytest.raises(DestinationRefused, match="loopback"):
        await resolved_addresses("localhost", 443, allow_private=False, timeout=5)
    addresses = await resolved_addresses("localhost", 443, allow_private=True, timeout=5)
    assert addresses
    assert all(address.is_loopback for address in addresses)
