"""One POST of a delivery to a subscriber's URL, and what came of it.

A send never raises for what the destination or the network does: every outcome is a `Sent`,
whose `error` is one line an operator can read. Only a 2xx answer is a success; a redirect is
never followed (it would lead a delivery to a URL nobody checked) and counts as a failure.

The URL is checked (`destinations.py`), its name resolved once, every address it resolves to
checked, and the connection made to those addresses, never to the name again: a name whose answer
changes between the check and the connection (DNS rebinding) cannot lead to a refused address.
The request still names the host in `Host` and, for https, in TLS (SNI and the certificate's
verification). The whole exchange (resolution, connection, request, the answer's head and body)
takes at most `timeout_seconds`; at most `max_response_bytes` of the answer are read, and the
first 1,000 characters of it are kept for the operator.
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import ipaddress
import ssl
import time
from collections.abc import AsyncGenerator, Iterator, Mapping
from dataclasses import dataclass

import httpx

from marketplace.webhooks.destinations import (
    DestinationRefused,
    IPAddress,
    checked_url,
    resolved_addresses,
)

USER_AGENT = "marketplace-webhooks/1.0"
EXCERPT_CHARACTERS = 1_000
_TIMEOUT_SECONDS = 5.0

# Set on every request by `post`, whatever the caller's headers say.
_OWN_HEADERS = ("Host", "Connection", "Content-Length", "Transfer-Encoding")


@dataclass(frozen=True)
class Sent:
    """What came of one POST: the answer's status (None without an answer), the failure in one
    line (None for a 2xx answer), the start of the answer's body and how long it all took."""

    status: int | None
    error: str | None
    response_excerpt: str
    duration_seconds: float

    @property
    def ok(self) -> bool:
        return self.error is None and self.status is not None and 200 <= self.status < 300


def sending_client() -> httpx.AsyncClient:
    """The client deliveries are sent with: no redirects, no proxies or certificates from the
    environment, no cookies kept, no idle connections kept."""
    return httpx.AsyncClient(
        follow_redirects=False,
        trust_env=False,
        timeout=httpx.Timeout(_TIMEOUT_SECONDS),
        # No idle connection is kept: connections are made to addresses, and one made for a host
        # (its certificate verified for that name) must not carry another host's delivery.
        # As many as a worker may send at once (MARKETPLACE_WEBHOOKS_CONCURRENCY is at most 256).
        limits=httpx.Limits(max_connections=256, max_keepalive_connections=0),
        # Receivers share addresses (a hosting platform's front): a cookie one of them sets must
        # not reach another.
        cookies=http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[])),
        headers={"User-Agent": USER_AGENT},
    )


async def post(
    client: httpx.AsyncClient,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    allow_private: bool,
    timeout_seconds: float = 5.0,
    max_response_bytes: int = 65_536,
) -> Sent:
    """POST `body` to `url` with `headers` (`Content-Type: application/json` and the service's
    `User-Agent` unless given) and report the outcome; raises only on cancellation."""
    started = time.monotonic()
    exchange = _Exchange()
    try:
        async with asyncio.timeout(timeout_seconds):
            await _send(
                client, url, body, headers, allow_private, timeout_seconds, max_response_bytes, exchange
            )
    except DestinationRefused as refused:
        exchange.failure = f"destination refused: {refused}"
    except TimeoutError:
        exchange.failure = f"timed out after {timeout_seconds:g} s"
    except httpx.TimeoutException:
        exchange.failure = f"timed out after {round(time.monotonic() - started, 1):g} s"
    except httpx.TransportError as error:
        exchange.failure = _transport_failure(error)
    return exchange.sent(time.monotonic() - started)


class _Exchange:
    """What is known of the answer so far: a timeout can cut the body short after the status."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.body = bytearray()
        self.failure: str | None = None

    def sent(self, duration_seconds: float) -> Sent:
        error = self.failure
        if self.status is not None and not 200 <= self.status < 300:
            # The answer's status says more than what went wrong after it.
            error = f"HTTP {self.status}"
            if 300 <= self.status < 400:
                error = f"redirect (HTTP {self.status}) not followed"
        # Each character takes at least one byte, so this much holds the excerpt.
        excerpt = bytes(self.body[: 4 * EXCERPT_CHARACTERS]).decode("utf-8", errors="replace")
        # Kept in a text column, which PostgreSQL refuses NUL in.
        excerpt = excerpt.replace("\x00", "\ufffd")
        return Sent(self.status, error, excerpt[:EXCERPT_CHARACTERS], duration_seconds)


async def _send(
    client: httpx.AsyncClient,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    allow_private: bool,
    timeout_seconds: float,
    max_response_bytes: int,
    exchange: _Exchange,
) -> None:
    target = httpx.URL(checked_url(url, allow_private=allow_private))
    host = target.raw_host.decode("ascii")
    port = target.port or (443 if target.scheme == "https" else 80)
    addresses = await resolved_addresses(host, port, allow_private=allow_private, timeout=timeout_seconds)
    request_headers = _request_headers(headers, host=target.netloc.decode("ascii"))
    extensions: dict[str, object] = {"timeout": client.timeout.as_dict()}
    if target.scheme == "https" and not _is_address(host):
        # TLS names the host (SNI) and verifies the certificate for it, not for the address.
        extensions["sni_hostname"] = host
    response = await _first_answer(client, addresses, target, request_headers, body, extensions)
    try:
        exchange.status = response.status_code
        chunks = response.aiter_raw()
        try:
            async for chunk in chunks:
                exchange.body += chunk[: max_response_bytes - len(exchange.body)]
                if len(exchange.body) >= max_response_bytes:
                    break
        finally:
            # Closed now rather than when collected, which may be after the event loop is gone.
            if isinstance(chunks, AsyncGenerator):
                await chunks.aclose()
    finally:
        await response.aclose()


async def _first_answer(
    client: httpx.AsyncClient,
    addresses: list[IPAddress],
    target: httpx.URL,
    headers: httpx.Headers,
    body: bytes,
    extensions: dict[str, object],
) -> httpx.Response:
    """The answer's head from the first of `addresses` that takes the connection."""
    for address in addresses[:-1]:
        try:
            return await client.send(
                _request(address, target, headers, body, extensions), stream=True, follow_redirects=False
            )
        except (httpx.ConnectError, httpx.ConnectTimeout):
            continue
    return await client.send(
        _request(addresses[-1], target, headers, body, extensions), stream=True, follow_redirects=False
    )


def _request(
    address: IPAddress, target: httpx.URL, headers: httpx.Headers, body: bytes, extensions: dict[str, object]
) -> httpx.Request:
    # Built here rather than by the client: neither its default headers nor its cookies go to a
    # receiver.
    return httpx.Request(
        "POST", target.copy_with(host=str(address)), headers=headers, content=body, extensions=extensions
    )


def _request_headers(given: Mapping[str, str], *, host: str) -> httpx.Headers:
    headers = httpx.Headers(
        {
            "Host": host,
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            # Read as sent: a compressed answer could expand past the bound in one chunk.
            "Accept-Encoding": "identity",
        }
    )
    headers.update({name: value for name, value in given.items() if name.title() not in _OWN_HEADERS})
    # The connection is made for this delivery's host alone (see `sending_client`).
    headers["Connection"] = "close"
    return headers


def _transport_failure(error: httpx.TransportError) -> str:
    for cause in _causes(error):
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS certificate not accepted: {_one_line(cause.verify_message or str(cause))}"
        if isinstance(cause, ssl.SSLError):
            return f"TLS failed: {_one_line(cause.reason or str(cause))}"
    detail = _one_line(str(error)) or type(error).__name__
    if isinstance(error, httpx.ConnectError):
        return f"could not connect: {detail}"
    if isinstance(error, httpx.RemoteProtocolError):
        return f"the receiver broke the HTTP exchange: {detail}"
    if isinstance(error, httpx.ReadError):
        return f"connection lost while reading the answer: {detail}"
    if isinstance(error, httpx.WriteError):
        return f"connection lost while sending: {detail}"
    return f"{type(error).__name__}: {detail}"


def _causes(error: BaseException) -> Iterator[BaseException]:
    """`error` and what it was raised from, exception groups included."""
    pending = [error]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                pending.append(linked)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _one_line(text: str) -> str:
    return " ".join(text.split())
