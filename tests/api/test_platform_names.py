"""MARKETPLACE_CHAT_NAME / MARKETPLACE_STATS_NAME: the configured words wherever the contract writes
`chat` and `stats` (paths, keys, route names, messages, the OpenAPI document), nothing else changed.

The contract's own tests also run under other names (tests/platform_names.py); these check the
renamed bytes themselves, without translation.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest

from marketplace.api.v1 import ROUTES, route_table
from marketplace.app import build_app
from marketplace.config import Settings
from marketplace.platform_names import ROUTE_WORDS, PlatformNames, name_problem
from marketplace.services import Services
from tests.catalogue import MEMBER_CHAT_ID, OWNER_CHAT_ID, catalogue
from tests.conftest import GRANT_SECRET, Loader
from tests.platform_names import RENAMED

# A service configured with other names (the names do not depend on the database).
renamed_service = pytest.mark.parametrize(
    ("profile", "platform_names"), [("sqlite", "renamed")], indirect=True
)


@pytest.fixture
async def raw(services: Services, load: Loader) -> AsyncIterator[httpx.AsyncClient]:
    """A client that sends and reads the bytes as they are (no translation to the contract's words)."""
    await load(catalogue())
    transport = httpx.ASGITransport(app=build_app(services=services), client=("127.0.0.1", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://marketplace.test") as http:
        yield http


@renamed_service
async def test_the_platform_routes_answer_under_the_configured_names_only(raw: httpx.AsyncClient) -> None:
    assert (await raw.post(f"/api/v1/discord/{MEMBER_CHAT_ID}")).status_code == 200
    assert (await raw.get("/api/v1/bstats/1/players")).status_code == 200
    assert (await raw.get("/api/v1/discord/authentication")).status_code == 302
    for method, path in (
        ("POST", f"/api/v1/chat/{MEMBER_CHAT_ID}"),
        ("POST", "/api/v1/chat"),
        ("GET", "/api/v1/chat/authentication"),
        ("GET", "/api/v1/stats/url/1"),
        ("GET", "/api/v1/stats/1/players"),
    ):
        answer = await raw.request(method, path)
        assert (answer.status_code, answer.content) == (404, b'{"message":"Not found."}'), path


@renamed_service
async def test_the_author_object_names_the_linked_account_after_the_chat_platform(
    raw: httpx.AsyncClient,
) -> None:
    answer = await raw.get("/api/v1/author/1")
    assert answer.content == b'{"id":1,"discord":"' + OWNER_CHAT_ID.encode() + b'","name":"Alice"}'


@renamed_service
async def test_member_accesses_read_the_field_named_after_the_platform(raw: httpx.AsyncClient) -> None:
    found = await raw.post("/api/v1/discord", json={"discord": MEMBER_CHAT_ID})
    assert found.status_code == 200
    assert [(access["user_id"], access["plugin_id"]) for access in found.json()] == [(2, 1), (2, 7)]
    form = await raw.post("/api/v1/discord", data={"discord": MEMBER_CHAT_ID})
    assert form.content == found.content


@renamed_service
async def test_a_missing_platform_field_is_refused_with_the_platforms_capitalised_name(
    raw: httpx.AsyncClient,
) -> None:
    for body in ({"chat": MEMBER_CHAT_ID}, {"discord": "   "}, {"discord": 12}):
        answer = await raw.post("/api/v1/discord", json=body)
        assert (answer.status_code, answer.content) == (400, b'{"message":"Discord not found"}')


@renamed_service
async def test_the_sign_in_redirect_names_the_chat_platform(raw: httpx.AsyncClient) -> None:
    answer = await raw.get("/api/v1/discord/authentication")
    assert answer.headers["location"] == "http://marketplace.test/auth/discord/redirect"


@renamed_service
async def test_route_names_carry_the_configured_words(raw: httpx.AsyncClient, services: Services) -> None:
    from sqlalchemy import select

    from marketplace.models import Activity

    granted = await raw.post(
        f"/api/v1/discord/{MEMBER_CHAT_ID}/apply/8", json={"custom_password": GRANT_SECRET}
    )
    assert granted.content == b'{"message":"ok"}'
    async with services.sessions() as session:
        assert (await session.scalars(select(Activity.via))).all() == ["api.v1.discord.grant"]
    names = {route.name for route in route_table(RENAMED)}
    assert {
        "api.v1.discord.auth",
        "api.v1.discord.grant",
        "api.v1.bstats.url",
        "api.v1.bstats.bstats",
    } <= names
    assert not any(re.search(r"\b(chat|stats)\b", route.name + route.path) for route in route_table(RENAMED))


@renamed_service
async def test_the_openapi_document_follows_the_platform_names(raw: httpx.AsyncClient) -> None:
    served = await raw.get("/openapi.json")
    document = served.json()
    paths = set(document["paths"])
    assert {
        "/discord/{user}/apply/{resource}",
        "/bstats/url/{resource}",
        "/bstats/{resource}/{chart}",
    } <= paths
    assert not any(re.search(r"/(chat|stats)\b", path) for path in paths)
    operation_ids = {
        operation["operationId"] for item in document["paths"].values() for operation in item.values()
    }
    assert {route.name for route in route_table(RENAMED)} <= operation_ids
    assert list(document["components"]["schemas"]["Author"]["properties"]) == ["id", "discord", "name"]
    assert "Discord not found" in served.text
    assert not re.search(r"\b(chat|Chat|stats)\b", served.text)


def test_the_names_that_collide_with_a_route_segment_are_the_route_tables_own_words() -> None:
    literal_segments = {
        segment for route in ROUTES for segment in route.path.split("/") if segment and "{" not in segment
    }
    assert ROUTE_WORDS == literal_segments - {"chat", "stats"}


@pytest.mark.parametrize(
    ("chat", "stats", "problem"),
    [
        ("Discord", "stats", "use 1 to 32 lower-case letters and digits"),
        ("dis-cord", "stats", "use 1 to 32 lower-case letters and digits"),
        ("", "stats", "use 1 to 32 lower-case letters and digits"),
        ("d" * 33, "stats", "use 1 to 32 lower-case letters and digits"),
        ("discörd", "stats", "use 1 to 32 lower-case letters and digits"),
        ("discord\n", "stats", "use 1 to 32 lower-case letters and digits"),
        ("discord", "bstats\n", "use 1 to 32 lower-case letters and digits"),
        ("name", "stats", "'name' is already a key of the objects that carry it (id, name)"),
        ("id", "stats", "'id' is already a key of the objects that carry it (id, name)"),
        ("resource", "stats", "'resource' is already a segment of the API's paths"),
        ("discord", "licence", "'licence' is already a segment of the API's paths"),
        ("discord", "apply", "'apply' is already a segment of the API's paths"),
        ("same", "same", "the chat platform and the statistics service need different names"),
    ],
)
def test_a_platform_name_that_is_not_a_lower_case_word_or_collides_is_an_invalid_setting(
    chat: str, stats: str, problem: str
) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=re.escape(problem)):
        Settings(_env_file=None, chat_name=chat, stats_name=stats)  # type: ignore[call-arg]


def test_the_defaults_are_the_contracts_words_and_keep_the_route_table() -> None:
    names = Settings(_env_file=None).platform_names  # type: ignore[call-arg]
    assert names == PlatformNames("chat", "stats")
    assert route_table(names) is ROUTES
    assert name_problem("discord", "bstats") is None


def test_renaming_is_by_whole_word_and_keeps_the_contracts_capitalisation() -> None:
    assert RENAMED.rename("Chat not found") == "Discord not found"
    assert RENAMED.rename("/chat/{user}/apply/{resource}") == "/discord/{user}/apply/{resource}"
    assert RENAMED.rename("api.v1.stats.stats") == "api.v1.bstats.bstats"
    assert RENAMED.rename("chat_id statistics chatbot") == "chat_id statistics chatbot"
    swapped = PlatformNames(chat="stats", stats="chat")
    assert swapped.rename("/chat/x /stats/y") == "/stats/x /chat/y"
