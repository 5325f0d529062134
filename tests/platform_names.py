"""The contract's tests under other platform names.

The contract writes `chat` and `stats`; a service configured with other words must answer the
same bytes with those words in their places. `ContractWordsTransport` lets a test written in the
contract's words talk to such a service: it sends each request with the configured words (the
path's first segment under `/api/v1`, the `chat` body field) and gives back each answer with the
contract's words, after checking that the answer holds none of them where the configured word
belongs (so a place the service forgot to rename fails the test instead of passing through).
"""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qsl, urlencode

import httpx
import pytest

from marketplace.platform_names import PlatformNames

# Words no test catalogue holds, so that translating answers back cannot touch their data.
RENAMED = PlatformNames(chat="discord", stats="bstats")

# Where the contract writes the chat word in an answer: the author's key, the 400 message, the
# sign-in redirect.
_CONTRACT_WORDS_IN_ANSWERS = (b'"chat":', b"Chat not found", b"/auth/chat/")

# Runs a module's tests that reach the app under the contract's words and under other ones
# (`pytest_generate_tests` in tests/conftest.py).
contract_and_renamed = pytest.mark.contract_and_renamed


class ContractWordsTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, names: PlatformNames) -> None:
        self.inner = inner
        self.names = names
        self._back = re.compile(rb"\b(" + names.chat.encode() + rb"|" + names.stats.encode() + rb")\b", re.I)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(self._configured(request))
        body = await response.aread()
        for contract_word in _CONTRACT_WORDS_IN_ANSWERS:
            assert contract_word not in body, f"the answer still says {contract_word!r}: {body!r}"
        headers = httpx.Headers(response.headers)
        if "location" in headers:
            assert "/auth/chat/" not in headers["location"]
            headers["location"] = self._contract(headers["location"].encode()).decode()
        return httpx.Response(
            response.status_code,
            headers=headers,
            content=self._contract(body),
            extensions=response.extensions,
        )

    def _configured(self, request: httpx.Request) -> httpx.Request:
        path = request.url.raw_path
        segments = path.split(b"/")
        if path.startswith(b"/api/v1/") and len(segments) > 3:
            segments[3] = self.names.rename(segments[3].decode()).encode()
        content = request.content
        if segments[3:4] == [self.names.chat.encode()] and len(segments) == 4 and request.method == "POST":
            content = self._renamed_chat_field(request.headers.get("content-type", ""), content)
        headers = httpx.Headers(request.headers)
        headers.pop("content-length", None)
        return httpx.Request(
            request.method,
            request.url.copy_with(raw_path=b"/".join(segments)),
            headers=headers,
            content=content,
            extensions=request.extensions,
        )

    def _renamed_chat_field(self, content_type: str, content: bytes) -> bytes:
        """The `chat` field of `POST /chat` under its configured name, in JSON or form bodies."""
        if "json" in content_type:
            try:
                document = json.loads(content)
            except ValueError:
                return content
            if isinstance(document, dict) and "chat" in document:
                document = {
                    self.names.chat if key == "chat" else key: value for key, value in document.items()
                }
                return json.dumps(document).encode()
            return content
        if "x-www-form-urlencoded" in content_type:
            fields = parse_qsl(content.decode("latin-1"), keep_blank_values=True)
            return urlencode(
                [(self.names.chat if key == "chat" else key, value) for key, value in fields]
            ).encode()
        return content

    def _contract(self, text: bytes) -> bytes:
        def contract_word(found: re.Match[bytes]) -> bytes:
            word = found.group(1)
            contract = b"chat" if word.lower() == self.names.chat.encode() else b"stats"
            return contract.capitalize() if word[:1].isupper() else contract

        return self._back.sub(contract_word, text)
