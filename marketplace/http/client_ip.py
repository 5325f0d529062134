"""The client address: every proxy is trusted, so it comes from `X-Forwarded-For`.

The right-most entry that is a valid IP address and differs from the socket peer is the client;
with no usable entry, the socket peer itself.
"""

from __future__ import annotations

import ipaddress

from starlette.types import Scope


def client_ip(scope: Scope) -> str:
    client = scope.get("client")
    peer = client[0] if client else "127.0.0.1"
    forwarded = ",".join(
        value.decode("latin-1") for name, value in scope.get("headers", ()) if name == b"x-forwarded-for"
    )
    if forwarded:
        address = _rightmost_client(forwarded, peer)
        if address is not None:
            return address
    return str(peer)


def _rightmost_client(header: str, peer: str) -> str | None:
    for entry in reversed(header.split(",")):
        candidate = entry.strip()
        try:
            address = ipaddress.ip_address(candidate)
        except ValueError:
            continue
        normalised = str(address)
        if normalised != peer:
            return normalised
    return None
