"""The words that stand for the chat platform's and the statistics service's names.

The contract writes `chat` and `stats` where a deployment names the real services. With
`MARKETPLACE_CHAT_NAME` and `MARKETPLACE_STATS_NAME` set, every place the contract writes the word
(paths, JSON keys, route names, message texts, the OpenAPI document) says the configured word
instead, with the contract's capitalisation (`Chat not found` is `Discord not found` for
`discord`); the defaults are the contract's words, so nothing changes by default.

The route table, the messages and the document are written once with the contract's words and
renamed here; this module imports nothing of the service, so that the settings can check a name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

CONTRACT_CHAT = "chat"
CONTRACT_STATS = "stats"

_NAME = re.compile(r"[a-z0-9]{1,32}")
_CONTRACT_WORDS = re.compile(r"\b(chat|Chat|stats|Stats)\b")
# The literal segments of the other routes' paths (pinned to the route table by a test): a
# platform named after one of them would read as that route's path, or the other way round.
ROUTE_WORDS = frozenset(
    {"licence", "resource", "search", "user", "versions", "version", "author", "gift", "payment"}
    | {"authentication", "apply", "url"}
)


# The author object's other keys: the chat platform's name is a key beside them.
AUTHOR_KEYS = frozenset({"id", "name"})


def name_problem(name: str, other: str, *, beside_keys: frozenset[str] = frozenset()) -> str | None:
    """Why `name` cannot stand for a platform beside the other one's `other` (and, as a JSON key,
    beside `beside_keys`), or None."""
    if not _NAME.fullmatch(name):
        return "use 1 to 32 lower-case letters and digits"
    if name in beside_keys:
        return f"{name!r} is already a key of the objects that carry it ({', '.join(sorted(beside_keys))})"
    if name in ROUTE_WORDS:
        return f"{name!r} is already a segment of the API's paths ({', '.join(sorted(ROUTE_WORDS))})"
    if name == other:
        return "the chat platform and the statistics service need different names"
    return None


@dataclass(frozen=True)
class PlatformNames:
    chat: str = CONTRACT_CHAT
    stats: str = CONTRACT_STATS

    @property
    def are_the_contracts(self) -> bool:
        return self.chat == CONTRACT_CHAT and self.stats == CONTRACT_STATS

    @cached_property
    def chat_not_found(self) -> str:
        """The message of `POST /chat` without a usable field."""
        return self.rename("Chat not found")

    def rename(self, text: str) -> str:
        """`text`, written with the contract's words, with the configured ones in their place."""
        if self.are_the_contracts:
            return text
        return _CONTRACT_WORDS.sub(lambda found: self._replacement(found.group(1)), text)

    def _replacement(self, word: str) -> str:
        configured = self.chat if word.lower() == CONTRACT_CHAT else self.stats
        return configured.capitalize() if word[0].isupper() else configured
