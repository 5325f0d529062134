"""One POST to a subscriber, against receivers served on 127.0.0.1 by the test itself."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from marketplace.webhooks.sending import USER_AGENT, Sent, post, sending_client
from tests.upstream import closed_port_url

Answer = Callable[[asyncio.StreamWriter], Awaitable[None]]


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        values = [value for key, value in self.headers if key.lower() == name.lower()]
        assert len(values) <= 1, f"{name} sent {len(values)} times"
        return values[0] if values else None


class Receiver:
    """An HTTP/1.1 server on 127.0.0.1 answering each path as told; it records every request."""

    def __init__(self) -> None:
        self.answers: dict[str, Answer] = {}
        self.received: list[Received] = []
        self.server_names: list[str | None] = []
        self._connections: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None

    async def start(self, tls: ssl.SSLContext | None = None) -> None:
        if tls is not None:
            tls.sni_callback = self._record_server_name
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=tls)

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        connections = list(self._connections)
        for connection in connections:
            connection.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        await self._server.wait_closed()

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def url(self, path: str, *, host: str = "127.0.0.1", scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.port}{path}"

    def hits(self, path: str) -> int:
        return sum(1 for request in self.received if request.path == path)

    def _record_server_name(self, _: ssl.SSLObject, server_name: str | None, __: ssl.SSLContext) -> None:
        self.server_names.append(server_name)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            request_line, *lines = head.removesuffix("\r\n\r\n").split("\r\n")
            method, path, _ = request_line.split(" ")
            headers = [(name, value.strip()) for name, value in (line.split(":", 1) for line in lines)]
            length = next((int(value) for name, value in headers if name.lower() == "content-length"), 0)
            self.received.append(Received(method, path, headers, await reader.readexactly(length)))
            await self.answers.get(path, answering(404))(writer)
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass  # the client went away: what these tests look at is the client's side
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()


def answering(status: int, body: bytes = b"", headers: Sequence[tuple[str, str]] = ()) -> Answer:
    async def answer(writer: asyncio.StreamWriter) -> None:
        lines = [f"HTTP/1.1 {status} Answer", f"Content-Length: {len(body)}", "Connection: close"]
        lines += [f"{name}: {value}" for name, value in headers]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()

    return answer


async def never_answering(_: asyncio.StreamWriter) -> None:
    await asyncio.sleep(3600)


async def stalling_after_the_head(writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nthe st")
    await writer.drain()
    await asyncio.sleep(3600)


async def hanging_up(writer: asyncio.StreamWriter) -> None:
    writer.transport.abort()


def answering_mebibytes(count: int) -> Answer:
    async def answer(writer: asyncio.StreamWriter) -> None:
        chunk = b"x" * 65_536
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {count * 1_048_576}\r\n\r\n".encode())
        for _ in range(count * 16):
            writer.write(chunk)
            await writer.drain()

    return answer


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    await receiver.start()
    yield receiver
    await receiver.close()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with sending_client() as client:
        yield client


def resolving(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[Sequence[str]]]) -> list[str]:
    """The running loop's resolver gives, for each name of `answers`, its next answer (the last
    one again once they are used up); other names and addresses are resolved as usual. The
    names asked are listed."""
    loop = asyncio.get_running_loop()
    resolve = loop.getaddrinfo
    asked: list[str] = []

    async def getaddrinfo(host: Any, port: Any, **options: Any) -> list[tuple[Any, ...]]:
        if host not in answers:
            return await resolve(host, port, **options)
        asked.append(host)
        answer = answers[host][0] if len(answers[host]) == 1 else answers[host].pop(0)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)) for address in answer]

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    return asked


async def test_a_2xx_answer_is_a_success(receiver: Receiver, client: httpx.AsyncClient) -> None:
    receiver.answers["/hook"] = answering(202, b"queued")
    sent = await post(client, receiver.url("/hook"), b"{}", {}, allow_private=True)
    assert sent.ok
    assert (sent.status, sent.error, sent.response_excerpt) == (202, None, "queued")
    assert 0 <= sent.duration_seconds < 5


async def test_a_5xx_answer_is_a_failure_with_its_status_and_body(
    receiver: Receiver, client: httpx.AsyncClient
) -> None:
    receiver.answers["/hook"] = answering(500, b'{"error":"database down"}')
    sent = await post(client, receiver.url("/hook"), b"{}", {}, allow_private=True)
    assert not sent.ok
    assert (sent.status, sent.error, sent.response_excerpt) == (500, "HTTP 500", '{"error":"database down"}')


@pytest.mark.parametrize("follow_redirects", [False, True])
async def test_a_redirect_is_a_failure_and_never_followed(receiver: Receiver, follow_redirects: bool) -> None:
    receiver.answers["/hook"] = answering(302, headers=[("Location", receiver.url("/elsewhere"))])
    receiver.answers["/elsewhere"] = answering(200)
    # Even with a client that would follow redirects.
    async with httpx.AsyncClient(follow_redirects=follow_redirects) as client:
        sent = await post(client, receiver.url("/hook"), b"{}", {}, allow_private=True)
    assert not sent.ok
    assert (sent.status, sent.error) == (302, "redirect (HTTP 302) not followed")
    assert receiver.hits("/hook") == 1
    assert receiver.hits("/elsewhere") == 0


async def test_a_receiver_that_never_answers_times_out_within_the_timeout(
    receiver: Receiver, client: httpx.AsyncClient
) -> None:
    receiver.answers["/hook"] = never_answering
    started = time.monotonic()
    sent = await post(client, receiver.url("/hook"), b"{}", {}, allow_private=True, timeout_seconds=0.5)
    assert (sent.status, sent.error) == (None, "timed out after 0.5 s")
    assert 0.5 <= sent.duration_seconds < 1.0
    assert time.monotonic() - started < 1.0


async def test_an_answer_cut_short_by_the_timeout_is_a_failure(
    receiver: Receiver, client: httpx.AsyncClient
) -> None:
    receiver.answers["/hook"] = stalling_after_the_head
    sent = await post(client, receiver.url("/hook"), b"{}", {}, allow_private=True, timeout_seconds=0.5)
    assert not sent.ok
    assert (sent.status, sent.error, sent.response_excerpt) == (200, "timed out after 0.5 s", "the st")


async def test_a_large_answer_is_read_up_to_the_bound_only(
    receiver: Receiver, client: httpx.AsyncClient
) -> None:
    receiver.answers["/hook"] = answering_mebibytes(10)
    started = time.monotonic()
    sent = await post(client, receiver.url("/hook"), b"{}", {}, allow_private=True)
    assert time.monotonic() - started < 2
    assert sent.ok
    assert sent.response_excerpt == "x" * 1_000


async def test_the_body_is_read_up_to_max_response_bytes(
    receiver: Receiver, client: httpx.AsyncClient
) -> None:
    receiver.answers["/hook"] = answering(200, b"0123456789abcdef")
    sent = await post(client, receiver.url("/hook"), b"{}", {}, allow_private=True, max_response_bytes=10)
    assert sent.response_excerpt == "0123456789"


async def test_the_excerpt_is_the_first_1000_characters_decoded_with_replacement(
    receiver: Receiver, client: httpx.AsyncClient
) -> None:
    receiver.answers["/hook"] = answering(400, b"\xff caf\xc3\xa9 " + "é".encode() * 2_000)
    sent = await post(client, receiver.url("/hook"), b"{}", {}, allow_private=True)
    assert sent.response_excerpt == "\ufffd café " + "é" * 993


async def test_a_refused_connection_is_a_failure(client: httpx.AsyncClient) -> None:
    sent = await post(client, closed_port_url() + "/hook", b"{}", {}, allow_private=True)
    assert (sent.status, sent.error, sent.response_excerpt) == (None, "connection refused", "")


async def test_a_receiver_hanging_up_without_an_answer_is_a_failure(
    receiver: Receiver, client: httpx.AsyncClient
) -> None:
    receiver.answers["/hook"] = hanging_up
    sent = await post(client, receiver.url("/hook"), b"{}", {}, allow_private=True)
    assert sent.status is None
    assert sent.error is not None
    assert "\n" not in sent.error


async def test_a_refused_destination_is_not_called(receiver: Receiver, client: httpx.AsyncClient) -> None:
    sent = await post(client, receiver.url("/hook"), b"{}", {}, allow_private=False)
    assert (sent.status, sent.error) == (
        None,
        "destination refused: webhooks call https:// URLs only (http:// needs MARKETPLACE_WEBHOOKS_ALLOW_PRIVATE=true)",
    )
    sent = await post(client, receiver.url("/hook", scheme="https"), b"{}", {}, allow_private=False)
    assert sent.error is not None
    assert sent.error.startswith("destination refused: 127.0.0.1 is a loopback address")
    assert receiver.received == []


async def test_a_name_resolving_to_a_refused_address_is_not_called(
    receiver: Receiver, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolving(monkeypatch, {"webhook.test": [["93.184.216.34", "127.0.0.1"]]})
    url = receiver.url("/hook", host="webhook.test", scheme="https")
    sent = await post(client, url, b"{}", {}, allow_private=False)
    assert sent.error is not None
    assert sent.error.startswith(
        "destination refused: webhook.test resolves to 127.0.0.1, and 127.0.0.1 is a loopback"
    )
    assert receiver.received == []


async def test_the_request_carries_the_headers_and_the_body_unchanged(
    receiver: Receiver, client: httpx.AsyncClient
) -> None:
    receiver.answers["/hook?shop=1"] = answering(204)
    body = b'{"event":"ping","name":"caf\xc3\xa9"}\n'
    headers = {"X-Marketplace-Event": "ping", "X-Marketplace-Signature": "t=1,v1=ab12"}
    sent = await post(client, receiver.url("/hook?shop=1"), body, headers, allow_private=True)
    assert sent.ok
    [request] = receiver.received
    assert (request.method, request.path, request.body) == ("POST", "/hook?shop=1", body)
    assert request.header("Host") == f"127.0.0.1:{receiver.port}"
    assert request.header("Content-Type") == "application/json"
    assert request.header("Content-Length") == str(len(body))
    assert request.header("User-Agent") == USER_AGENT == "marketplace-webhooks/1.0"
    assert request.header("X-Marketplace-Event") == "ping"
    assert request.header("X-Marketplace-Signature") == "t=1,v1=ab12"
    assert request.header("Cookie") is None


async def test_given_content_type_and_user_agent_replace_the_defaults(
    receiver: Receiver, client: httpx.AsyncClient
) -> None:
    receiver.answers["/hook"] = answering(200)
    headers = {
        "content-type": "application/cloudevents+json",
        "user-agent": "shop/2",
        "Host": "elsewhere.example",
    }
    await post(client, receiver.url("/hook"), b"{}", headers, allow_private=True)
    [request] = receiver.received
    assert request.header("Content-Type") == "application/cloudevents+json"
    assert request.header("User-Agent") == "shop/2"
    assert request.header("Host") == f"127.0.0.1:{receiver.port}"


async def test_the_connection_goes_to_the_resolved_address_with_the_name_as_host(
    receiver: Receiver, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Resolved again, the name would lead to 127.0.0.2, where nothing listens (DNS rebinding).
    asked = resolving(monkeypatch, {"webhook.test": [["127.0.0.1"], ["127.0.0.2"]]})
    receiver.answers["/hook"] = answering(200)
    sent = await post(client, receiver.url("/hook", host="webhook.test"), b"{}", {}, allow_private=True)
    assert sent.ok, sent.error
    assert asked == ["webhook.test"]
    [request] = receiver.received
    assert request.header("Host") == f"webhook.test:{receiver.port}"


async def test_the_resolved_addresses_are_tried_in_order_until_one_connects(
    receiver: Receiver, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolving(monkeypatch, {"webhook.test": [["127.0.0.2", "127.0.0.1"]]})
    receiver.answers["/hook"] = answering(200)
    sent = await post(client, receiver.url("/hook", host="webhook.test"), b"{}", {}, allow_private=True)
    assert sent.ok, sent.error
    assert receiver.hits("/hook") == 1


async def test_cancellation_is_not_swallowed(receiver: Receiver, client: httpx.AsyncClient) -> None:
    receiver.answers["/hook"] = never_answering
    sending = asyncio.create_task(post(client, receiver.url("/hook"), b"{}", {}, allow_private=True))
    await asyncio.sleep(0.1)
    sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sending


async def test_the_sending_client_follows_no_redirect_and_trusts_no_environment() -> None:
    async with sending_client() as client:
        assert client.follow_redirects is False
        assert client.trust_env is False
        assert client.timeout == httpx.Timeout(5.0)


# HTTPS


@dataclass(frozen=True)
class Authority:
    """A certificate authority made for the test, and a server certificate it signed for `webhook.test`."""

    ca: Path
    certificate: Path
    key: Path


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: str,
    signer: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
) -> x509.Certificate:
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        builder = (
            builder.add_extension(
                x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("webhook.test")]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False
            )
        )
    return builder.sign(signer, hashes.SHA256())


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    """A certificate authority of the test's own and a certificate it signed for `webhook.test`."""
    directory = tmp_path_factory.mktemp("tls")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    server_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("Webhook test CA", ca_key, "Webhook test CA", ca_key, ca=True)
    server = _certificate("webhook.test", server_key, "Webhook test CA", ca_key, ca=False)
    pem = serialization.Encoding.PEM
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    (directory / "server.pem").write_bytes(server.public_bytes(pem))
    (directory / "server.key").write_bytes(
        server_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return Authority(directory / "ca.pem", directory / "server.pem", directory / "server.key")


@pytest.fixture
async def tls_receiver(authority: Authority) -> AsyncIterator[Receiver]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(authority.certificate, authority.key)
    receiver = Receiver()
    await receiver.start(tls=context)
    yield receiver
    await receiver.close()


@pytest.fixture
async def trusting_client(authority: Authority) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        verify=ssl.create_default_context(cafile=authority.ca), trust_env=False
    ) as client:
        yield client


async def test_https_connects_to_the_address_and_verifies_the_certificate_for_the_name(
    tls_receiver: Receiver, trusting_client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolving(monkeypatch, {"webhook.test": [["127.0.0.1"], ["127.0.0.2"]]})
    tls_receiver.answers["/hook"] = answering(200, b"ok")
    url = tls_receiver.url("/hook", host="webhook.test", scheme="https")
    sent = await post(trusting_client, url, b"{}", {}, allow_private=True)
    assert (sent.ok, sent.status, sent.error, sent.response_excerpt) == (True, 200, None, "ok"), sent.error
    assert tls_receiver.server_names == ["webhook.test"]
    [request] = tls_receiver.received
    assert request.header("Host") == f"webhook.test:{tls_receiver.port}"


async def test_https_refuses_a_certificate_not_made_for_the_name(
    tls_receiver: Receiver, trusting_client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolving(monkeypatch, {"other.test": [["127.0.0.1"]]})
    tls_receiver.answers["/hook"] = answering(200)
    for url in (
        tls_receiver.url("/hook", host="other.test", scheme="https"),
        tls_receiver.url("/hook", scheme="https"),
    ):
        sent = await post(trusting_client, url, b"{}", {}, allow_private=True)
        assert sent.status is None
        assert sent.error is not None
        assert sent.error.startswith("TLS certificate not accepted"), sent.error
    assert tls_receiver.server_names == ["other.test", None]
    assert tls_receiver.received == []


async def test_an_unknown_certificate_authority_is_refused(
    tls_receiver: Receiver, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolving(monkeypatch, {"webhook.test": [["127.0.0.1"]]})
    url = tls_receiver.url("/hook", host="webhook.test", scheme="https")
    sent = await post(client, url, b"{}", {}, allow_private=True)
    assert sent.error is not None
    assert sent.error.startswith("TLS certificate not accepted"), sent.error


def test_sent_is_ok_for_a_2xx_status_without_error() -> None:
    assert Sent(200, None, "", 0.1).ok
    assert Sent(299, None, "", 0.1).ok
    assert not Sent(200, "timed out after 5 s", "", 0.1).ok
    assert not Sent(None, "connection refused", "", 0.1).ok
    assert not Sent(302, "redirect (HTTP 302) not followed", "", 0.1).ok
