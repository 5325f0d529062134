"""The client address of a request, from `X-Forwarded-For` as far as the proxies are trusted.

With every proxy trusted (`*`, the contract's rule), the client is the right-most entry that is a
valid IP address and differs from the socket peer; with no usable entry, the socket peer.

With a list of trusted proxies, the header is read only when the socket peer is one of them; then
the entries are walked from the right past trusted hops, and the first address that is not
trusted is the client. An entry that is not an address ends the walk: nothing to its left can be
believed, so the nearest trusted hop is the client. When every entry is trusted, the left-most is.

What a client is counted as (`client_network`): an IPv4 address on its own, an IPv6 address by its
network (a /64 by default), since one subscriber holds a whole IPv6 prefix and could otherwise draw
a new budget with every address of it. An IPv4-mapped IPv6 address counts as its IPv4 address.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.types import Scope

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class TrustedProxies:
    """`*` (every peer) or the networks whose forwarded-for header is believed."""

    everyone: bool
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, setting: str) -> TrustedProxies:
        """`*`, or a comma-separated list of addresses and CIDRs (an empty list trusts nobody)."""
        if setting.strip() == "*":
            return cls(everyone=True)
        networks: list[IPNetwork] = []
        for entry in setting.split(","):
            entry = entry.strip()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                raise ValueError(f"not an address or CIDR: {entry!r}") from None
        return cls(everyone=False, networks=tuple(networks))

    def trusts(self, address: IPAddress) -> bool:
        if self.everyone:
            return True
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)


EVERY_PROXY = TrustedProxies(everyone=True)


def client_ip(scope: Scope, trusted: TrustedProxies = EVERY_PROXY) -> str:
    client = scope.get("client")
    peer = str(client[0]) if client else "127.0.0.1"
    forwarded = [
        value.decode("latin-1") for name, value in scope.get("headers", ()) if name == b"x-forwarded-for"
    ]
    if not forwarded:
        return peer
    entries = ",".join(forwarded).split(",")
    if trusted.everyone:
        return _rightmost_client(entries, peer) or peer
    return _first_untrusted(entries, peer, trusted)


# The first 12 bytes of an IPv4-mapped IPv6 address (::ffff:a.b.c.d).
_IPV4_MAPPED = bytes(10) + b"\xff\xff"


def client_network(address: str, ipv6_prefix: int) -> str:
    """The key a client is counted by: an IPv4 address itself, an IPv6 address's network of
    `ipv6_prefix` bits (`2001:db8:1:2::/64`); text that is no address is returned as it is.
    Parsed by the C library, as `_normalised` does, several times faster than `ipaddress`."""
    if ":" not in address:
        return address  # IPv4 (nearly every client): already canonical, nothing to compute
    try:
        packed = socket.inet_pton(socket.AF_INET6, address)
    except OSError:
        return address
    if packed[:12] == _IPV4_MAPPED:
        return socket.inet_ntop(socket.AF_INET, packed[12:])
    host_bits = 128 - ipv6_prefix
    network = int.from_bytes(packed, "big") >> host_bits << host_bits
    return f"{socket.inet_ntop(socket.AF_INET6, network.to_bytes(16, 'big'))}/{ipv6_prefix}"


def _address(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def _normalised(text: str) -> str | None:
    """The address in its canonical form, or None when `text` is not one. IPv4 (nearly every entry)
    is checked by the C library, several times faster than `ipaddress`; a valid IPv4 text is
    already canonical (neither accepts leading zeros)."""
    text = text.strip()
    if ":" not in text:
        try:
            socket.inet_pton(socket.AF_INET, text)
        except OSError:
            return None
        return text
    address = _address(text)
    return str(address) if address is not None else None


def _rightmost_client(entries: Sequence[str], peer: str) -> str | None:
    for entry in reversed(entries):
        address = _normalised(entry)
        if address is not None and address != peer:
            return address
    return None


def _first_untrusted(entries: Sequence[str], peer: str, trusted: TrustedProxies) -> str:
    nearest = _address(peer)
    if nearest is None or not trusted.trusts(nearest):
        return peer
    for entry in reversed(entries):
        address = _address(entry)
        if address is None:
            break
        nearest = address
        if not trusted.trusts(address):
            break
    return str(nearest)
