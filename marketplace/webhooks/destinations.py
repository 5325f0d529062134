"""Which URLs a webhook may call: public `https://` addresses only, so that a subscription cannot
turn the service into a client of its own network (server-side request forgery).

A URL is checked in two steps. `checked_url`, without network access, when a subscription is
saved and again before each delivery: the shape (`https`, a host, no credentials, a valid port, at
most 2,000 characters, no whitespace or control characters), an address written as the host, and
names that only a local network resolves. `resolved_addresses`, before each delivery: every
address the name resolves to must be acceptable, and the delivery connects to those addresses
(`sending.py`), never to the name again.

Refused addresses (`refused_address`), unless `MARKETPLACE_WEBHOOKS_ALLOW_PRIVATE=true`: loopback,
private (RFC 1918, IPv6 unique local and the deprecated site-local), link-local, the shared address
space of carrier-grade NAT (100.64.0.0/10) and local-use NAT64. Refused always: cloud metadata
addresses, the unspecified address, "this network" (0.0.0.0/8), multicast, broadcast, reserved,
documentation and benchmarking ranges, and anything else not globally routable. An IPv6 address
that embeds an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo) is judged by the
address it embeds.

`MARKETPLACE_WEBHOOKS_ALLOW_PRIVATE=true` (tests, closed networks) also allows `http://` URLs and
local names.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import unicodedata
import weakref
from dataclasses import dataclass

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_URL_LENGTH = 2_000
_ALLOW_PRIVATE = "MARKETPLACE_WEBHOOKS_ALLOW_PRIVATE=true"

# Names only a local network answers for. A single-label name is in the list too: the resolver
# completes it with the machine's search domains, which name the services next to this one.
_LOCAL_NAMES = ("localhost", "localdomain", "home.arpa")
_LOCAL_SUFFIXES = (".localhost", ".localdomain", ".local", ".internal", ".home.arpa")

# The authority as httpx reads it: from `//` to the first `/`, `?` or `#`.
_AUTHORITY = re.compile(r"^[^:/?#]*://([^/?#]*)")


class DestinationRefused(Exception):
    """A URL or address a webhook may not call; the message is the reason, on one line."""


@dataclass(frozen=True)
class _Range:
    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    what: str
    # A local network's address: callable with MARKETPLACE_WEBHOOKS_ALLOW_PRIVATE=true.
    private: bool


def _ranges(private: bool, what: str, *networks: str) -> list[_Range]:
    return [_Range(ipaddress.ip_network(network), what, private) for network in networks]


# First match wins: the narrower ranges come first.
_RANGES: tuple[_Range, ...] = (
    # The instance's credentials live there (AWS, GCP and Azure; AWS over IPv6; Alibaba Cloud):
    # refused even where private addresses are allowed.
    *_ranges(
        False, "a cloud metadata address", "169.254.169.254/32", "fd00:ec2::254/128", "100.100.100.200/32"
    ),
    *_ranges(False, "the unspecified address", "0.0.0.0/32", "::/128"),
    *_ranges(False, 'a "this network" address (0.0.0.0/8)', "0.0.0.0/8"),
    *_ranges(True, "a loopback address", "127.0.0.0/8", "::1/128"),
    *_ranges(True, "a private address (RFC 1918)", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"),
    *_ranges(True, "a shared address of carrier-grade NAT (100.64.0.0/10)", "100.64.0.0/10"),
    *_ranges(True, "a link-local address", "169.254.0.0/16", "fe80::/10"),
    *_ranges(True, "a unique local address (fc00::/7)", "fc00::/7"),
    *_ranges(True, "a site-local address (fec0::/10)", "fec0::/10"),
    *_ranges(True, "a local-use NAT64 address (64:ff9b:1::/48)", "64:ff9b:1::/48"),
    *_ranges(False, "a broadcast address", "255.255.255.255/32"),
    *_ranges(False, "a multicast address", "224.0.0.0/4", "ff00::/8"),
    *_ranges(False, "a reserved address (240.0.0.0/4)", "240.0.0.0/4"),
    *_ranges(
        False,
        "a documentation address",
        "192.0.2.0/24",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "2001:db8::/32",
        "3fff::/20",
    ),
    *_ranges(False, "a benchmarking address", "198.18.0.0/15", "2001:2::/48"),
    *_ranges(False, "an IETF protocol assignment (192.0.0.0/24)", "192.0.0.0/24"),
    *_ranges(False, "a discard-only address (100::/64)", "100::/64"),
    *_ranges(False, "a Teredo tunnel address", "2001::/32"),
    *_ranges(False, "a deprecated IPv4-compatible address", "::/96"),
)
_NOT_ROUTABLE = _Range(ipaddress.ip_network("::/0"), "not a globally routable address", False)

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def refused_address(address: IPAddress, *, allow_private: bool) -> str | None:
    """Why a webhook may not call `address` (one line), or None when it may."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        for form, inner in embedded:
            found = _range_of(inner)
            if found is not None and not (allow_private and found.private):
                return f"{address} ({form} form of {inner}) is {found.what}: {_consequence(found)}"
        # These forms reach the embedded address itself (through a dual-stack socket, a NAT64
        # gateway, a 6to4 relay): it has just been judged.
        if embedded and not (address.teredo or _is_ipv4_compatible(address)):
            return None
    found = _range_of(address)
    if found is None or (allow_private and found.private):
        return None
    return f"{address} is {found.what}: {_consequence(found)}"


def checked_url(url: str, *, allow_private: bool) -> str:
    """`url` without surrounding whitespace, when its shape lets a webhook call it; raises
    `DestinationRefused` otherwise. No network access: the name is resolved at delivery."""
    url = url.strip()
    if not url:
        raise DestinationRefused("a webhook URL is required")
    if len(url) > MAX_URL_LENGTH:
        raise DestinationRefused(f"a webhook URL has at most {MAX_URL_LENGTH:,} characters")
    if any(character.isspace() or unicodedata.category(character) in ("Cc", "Cf") for character in url):
        raise DestinationRefused("a webhook URL may not contain whitespace or control characters")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as error:
        raise DestinationRefused(f"not a valid URL: {_one_line(str(error))}") from None
    if parsed.scheme != "https" and not (allow_private and parsed.scheme == "http"):
        if allow_private:
            raise DestinationRefused("webhooks call https:// or http:// URLs only")
        raise DestinationRefused(f"webhooks call https:// URLs only (http:// needs {_ALLOW_PRIVATE})")
    authority = _AUTHORITY.match(url)
    if parsed.userinfo or (authority is not None and "@" in authority.group(1)):
        raise DestinationRefused("a webhook URL may not carry credentials (user:password@)")
    host = parsed.raw_host.decode("ascii")
    if not host:
        raise DestinationRefused("a webhook URL needs a host")
    if parsed.port is not None and not 0 < parsed.port < 65_536:
        raise DestinationRefused(f"{parsed.port} is not a valid port")
    _check_host(host, allow_private=allow_private)
    return url


async def resolved_addresses(
    host: str,
    port: int,
    *,
    allow_private: bool,
    # The resolution's own bound, for callers without a budget of their own around it.
    timeout: float,  # noqa: ASYNC109
) -> list[IPAddress]:
    """The addresses `host` resolves to, in the resolver's order without repeats, when every one
    may be called; raises `DestinationRefused` when one may not, or when the name does not
    resolve within `timeout` seconds."""
    literal = _ip_literal(host)
    if literal is not None:
        addresses = [literal]
    else:
        addresses = await _resolve(host, port, within_seconds=timeout)
    for address in addresses:
        reason = refused_address(address, allow_private=allow_private)
        if reason is not None:
            # One refused answer refuses the name: the next connection could use any of them.
            if literal is not None:
                raise DestinationRefused(reason)
            raise DestinationRefused(f"{host} resolves to {address}, and {reason}")
    return addresses


# Name lookups of webhooks in flight at once, per event loop. They run on the loop's default
# thread pool, which the database drivers and the upstream calls share: a lookup that outlives its
# timeout (a name server that never answers) keeps its thread, so a burst of deliveries to such a
# name could otherwise take every thread. A slot is given back when the lookup itself ends.
MAX_LOOKUPS_IN_FLIGHT = 4
_lookup_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


async def _resolve(host: str, port: int, *, within_seconds: float) -> list[IPAddress]:
    loop = asyncio.get_running_loop()
    slots = _lookup_slots.setdefault(loop, asyncio.Semaphore(MAX_LOOKUPS_IN_FLIGHT))
    try:
        async with asyncio.timeout(within_seconds):
            await slots.acquire()
            lookup = loop.create_task(
                loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
            )
            lookup.add_done_callback(lambda _done: slots.release())
            answers = await asyncio.shield(lookup)
    except TimeoutError:
        raise DestinationRefused(f"{host} did not resolve within {within_seconds:g} s") from None
    except OSError as error:
        raise DestinationRefused(
            f"{host} does not resolve ({_one_line(error.strerror or str(error))})"
        ) from None
    except UnicodeError:
        raise DestinationRefused(f"{host} is not a valid host name") from None
    addresses: dict[IPAddress, None] = {}
    for family, _, _, _, sockaddr in answers:
        if family in (socket.AF_INET, socket.AF_INET6) and isinstance(sockaddr[0], str):
            addresses[ipaddress.ip_address(sockaddr[0])] = None
    if not addresses:
        raise DestinationRefused(f"{host} does not resolve to any address")
    return list(addresses)


def _check_host(host: str, *, allow_private: bool) -> None:
    if ":" in host:
        if "%" in host:
            raise DestinationRefused("a webhook URL may not name an IPv6 zone")
        try:
            address: IPAddress = ipaddress.IPv6Address(host)
        except ValueError:
            raise DestinationRefused(f"{host} is not a valid IPv6 address") from None
    else:
        name = host.lower().removesuffix(".")
        if not _ends_in_a_number(name):
            if not allow_private and _is_local_name(name):
                raise DestinationRefused(
                    f"{host} is a local name: webhooks call public addresses only ({_ALLOW_PRIVATE} allows it)"
                )
            return
        try:
            address = ipaddress.IPv4Address(host)
        except ValueError:
            address = _lenient_ipv4(name)
            # Resolvers read forms like 2130706433, 0x7f.1, 127.1 or 0177.0.0.1 as addresses; one
            # spelling only, so that what is checked is what is called.
            reason = refused_address(address, allow_private=allow_private)
            if reason is not None:
                raise DestinationRefused(f"{host} is {address} written another way; {reason}") from None
            raise DestinationRefused(
                f"{host} is an IPv4 address written another way: write it as {address}"
            ) from None
    reason = refused_address(address, allow_private=allow_private)
    if reason is not None:
        raise DestinationRefused(reason)


def _is_local_name(name: str) -> bool:
    return "." not in name or name in _LOCAL_NAMES or name.endswith(_LOCAL_SUFFIXES)


def _ends_in_a_number(name: str) -> bool:
    """Whether a URL parser following the WHATWG URL standard reads `name` as an IPv4 address."""
    last = name.rsplit(".", 1)[-1]
    if last.isascii() and last.isdigit():
        return True
    return last[:2] == "0x" and all(character in "0123456789abcdef" for character in last[2:])


def _lenient_ipv4(name: str) -> ipaddress.IPv4Address:
    """The address `inet_aton` (and the WHATWG URL standard) reads in `name`: one to four parts,
    each decimal, octal with a leading 0 or hexadecimal with 0x, the last filling the remaining
    bytes."""
    parts = name.split(".")
    if len(parts) > 4:
        raise DestinationRefused(f"{name} is not a valid IPv4 address")
    numbers = [_ipv4_part(part, name) for part in parts]
    if any(number > 255 for number in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        raise DestinationRefused(f"{name} is not a valid IPv4 address")
    value = numbers[-1]
    for index, number in enumerate(numbers[:-1]):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def _ipv4_part(part: str, name: str) -> int:
    base = 10
    if part[:2] == "0x":
        part, base = part[2:] or "0", 16
    elif len(part) > 1 and part.startswith("0"):
        part, base = part[1:], 8
    if not (part.isascii() and part.isalnum()):
        raise DestinationRefused(f"{name} is not a valid IPv4 address")
    try:
        return int(part, base)
    except ValueError:
        raise DestinationRefused(f"{name} is not a valid IPv4 address") from None


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    if address.ipv4_mapped is not None:
        return [("IPv4-mapped", address.ipv4_mapped)]
    if address in _NAT64:
        return [("NAT64", ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF))]
    if address.sixtofour is not None:
        return [("6to4", address.sixtofour)]
    if address.teredo is not None:
        server, client = address.teredo
        return [("Teredo", server), ("Teredo", client)]
    if _is_ipv4_compatible(address):
        return [("IPv4-compatible", ipaddress.IPv4Address(int(address)))]
    return []


def _is_ipv4_compatible(address: ipaddress.IPv6Address) -> bool:
    # :: and ::1 are the unspecified and loopback addresses, not IPv4 forms.
    return address in _IPV4_COMPATIBLE and int(address) > 1


def _range_of(address: IPAddress) -> _Range | None:
    for candidate in _RANGES:
        if address.version == candidate.network.version and address in candidate.network:
            return candidate
    return None if address.is_global else _NOT_ROUTABLE


def _consequence(found: _Range) -> str:
    if found.private:
        return f"webhooks call public addresses only ({_ALLOW_PRIVATE} allows it)"
    return "webhooks never call it"


def _one_line(text: str) -> str:
    return " ".join(text.split())
