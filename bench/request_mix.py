"""The requests of each measured route, drawn from what the filled database holds.

Each route gets a file of request lines (`METHOD PATH`) that `requests.lua` draws from at random,
so that the workers' answer caches and the database see many keys, the popular ones more often
(Zipf-like: a few plugins get most update checks, the first pages most of the browsing).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import sqlite3
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

API = "/api/v1"
T = TypeVar("T")


@dataclass(frozen=True)
class Population:
    """What the requests may name: visible resources, listed ones, linked members, names, words."""

    visible_ids: list[int]
    listed: int
    chat_ids: list[str]
    user_names: list[str]
    names: list[str]
    words: list[str]


# Words nobody searches for alone.
STOP_WORDS = frozenset({"and", "for", "the", "with", "without", "your", "from", "into", "all"})

_QUERIES = {
    "visible_ids": (
        "SELECT id FROM resources WHERE status IN ('published', 'unlisted') AND deleted_at IS NULL "
        "ORDER BY id"
    ),
    "listed": "SELECT count(*) FROM resources WHERE status = 'published' AND deleted_at IS NULL",
    "chat_ids": (
        "SELECT c.chat_id FROM chat_accounts c JOIN users u ON u.id = c.user_id "
        "WHERE u.deleted_at IS NULL AND NOT u.closed ORDER BY c.id LIMIT 200000"
    ),
    "user_names": "SELECT name FROM users WHERE deleted_at IS NULL ORDER BY id LIMIT 50000",
    "names": "SELECT name, tag FROM resources ORDER BY id LIMIT 5000",
}


def population_from_rows(rows: dict[str, list[tuple[object, ...]]]) -> Population:
    names = [str(row[0]) for row in rows["names"]]
    words = {
        word
        for name, tag in rows["names"]
        for word in f"{name} {tag}".lower().split()
        if len(word) >= 3 and word.isalpha() and word not in STOP_WORDS
    }
    return Population(
        visible_ids=[int(str(row[0])) for row in rows["visible_ids"]],
        listed=int(str(rows["listed"][0][0])),
        chat_ids=[str(row[0]) for row in rows["chat_ids"]],
        user_names=[str(row[0]) for row in rows["user_names"]],
        names=names,
        words=sorted(words),
    )


def sqlite_population(path: Path) -> Population:
    connection = sqlite3.connect(path)
    try:
        return population_from_rows(
            {key: connection.execute(query).fetchall() for key, query in _QUERIES.items()}
        )
    finally:
        connection.close()


def postgresql_population(url: str) -> Population:
    async def read() -> Population:
        import asyncpg  # type: ignore[import-untyped]

        connection = await asyncpg.connect(url)
        try:
            rows = {
                key: [tuple(row) for row in await connection.fetch(query)] for key, query in _QUERIES.items()
            }
        finally:
            await connection.close()
        return population_from_rows(rows)

    return asyncio.run(read())


def zipf_sample(items: Sequence[T], rng: random.Random, count: int, exponent: float) -> list[T]:
    """`count` draws from `items`, the item of rank r drawn in proportion to 1 / r**exponent; the
    ranks are the items' order (shuffle first for popularity unrelated to order)."""
    weights = itertools.accumulate(1.0 / (rank**exponent) for rank in range(1, len(items) + 1))
    return rng.choices(items, cum_weights=list(weights), k=count)


def _shuffled(items: Sequence[T], rng: random.Random) -> list[T]:
    copy = list(items)
    rng.shuffle(copy)
    return copy


def _popular_ids(population: Population, rng: random.Random, count: int) -> list[int]:
    return zipf_sample(_shuffled(population.visible_ids, rng), rng, count, 1.0)


def version_lines(population: Population, rng: random.Random, count: int) -> list[str]:
    return [f"GET {API}/resource/version/{rid}" for rid in _popular_ids(population, rng, count)]


def card_lines(population: Population, rng: random.Random, count: int) -> list[str]:
    return [f"GET {API}/resource/{rid}" for rid in _popular_ids(population, rng, count)]


def versions_lines(population: Population, rng: random.Random, count: int) -> list[str]:
    return [f"GET {API}/resource/versions/{rid}" for rid in _popular_ids(population, rng, count)]


def search_lines(population: Population, rng: random.Random, count: int) -> list[str]:
    sizes = [25 if rng.random() < 0.3 else 15 for _ in range(count)]
    pages = {}
    for size in (15, 25):
        last = max(1, -(-population.listed // size))
        pages[size] = iter(zipf_sample(range(1, last + 1), rng, sizes.count(size), 1.3))
    lines = []
    for size in sizes:
        page = next(pages[size])
        query = f"page={page}" if size == 15 else f"size=25&page={page}"
        lines.append(f"GET {API}/resource/search?{query}")
    return lines


def search_q_lines(population: Population, rng: random.Random, count: int) -> list[str]:
    words = (
        zipf_sample(_shuffled(population.words, rng), rng, count, 1.0)
        if population.words
        else ["shop"] * count
    )
    lines = []
    for word in words:
        draw = rng.random()
        if draw < 0.5:
            query = f"q={quote(word)}"
        elif draw < 0.75:
            query = f"q={quote(word[: rng.randint(3, max(3, min(6, len(word))))])}"
        elif draw < 0.9:
            query = f"q={quote(word)}&page={rng.randint(2, 5)}"
        else:
            # Two consecutive words of a real name, as someone looking for that plugin types them.
            parts = rng.choice(population.names).lower().split() if population.names else [word]
            start = rng.randrange(max(1, len(parts) - 1))
            query = f"q={quote(' '.join(parts[start : start + 2]))}"
        lines.append(f"GET {API}/resource/search?{query}")
    return lines


def chat_member_lines(population: Population, rng: random.Random, count: int) -> list[str]:
    chosen = zipf_sample(_shuffled(population.chat_ids, rng), rng, count, 0.8)
    return [f"POST {API}/chat/{member}" for member in chosen]


def user_name_lines(population: Population, rng: random.Random, count: int) -> list[str]:
    lines = []
    for _ in range(count):
        name = rng.choice(population.user_names)
        prefix = name[: rng.choices((1, 2, 3, 4), (0.1, 0.3, 0.4, 0.2))[0]]
        if rng.random() < 0.5:
            prefix = prefix.lower()
        lines.append(f"GET {API}/resource/user?name={quote(prefix)}")
    return lines


def licence_lines(_population: Population, rng: random.Random, count: int) -> list[str]:
    alphabet = string.ascii_uppercase + string.digits
    return [f"POST {API}/licence/{''.join(rng.choices(alphabet, k=16))}" for _ in range(count)]


@dataclass(frozen=True)
class Route:
    name: str
    label: str
    draws: str
    lines: Callable[[Population, random.Random, int], list[str]]


ROUTES = {
    route.name: route
    for route in (
        Route(
            "version",
            "GET /resource/version/{resource}",
            "visible resources (Published, Unlisted), Zipf s=1 over a shuffled order",
            version_lines,
        ),
        Route("card", "GET /resource/{resource}", "as `version`", card_lines),
        Route("versions", "GET /resource/versions/{resource}", "as `version`", versions_lines),
        Route(
            "search",
            "GET /resource/search?page=P",
            "no `q`; size 15 (7 in 10) or 25; page Zipf s=1.3 over every page of the listed catalogue",
            search_lines,
        ),
        Route(
            "search-q",
            "GET /resource/search?q=...",
            "a word of the names and taglines (not `with`, `for`...; Zipf s=1 over a shuffled order): "
            "whole (1/2), its first 3-6 letters (1/4), whole with page 2-5 (3/20), two words of a real "
            "name (1/10)",
            search_q_lines,
        ),
        Route(
            "chat-member",
            "POST /chat/{user}",
            "snowflakes of members who linked a chat account (not closed, not deleted), Zipf s=0.8",
            chat_member_lines,
        ),
        Route(
            "user-names",
            "GET /resource/user?name=...",
            "the first 1-4 letters of a member's name, lower-cased half of the time",
            user_name_lines,
        ),
        Route("licence", "POST /licence/{key}", "random 16-character keys", licence_lines),
    )
}


def write_request_file(route: Route, population: Population, path: Path, *, count: int, seed: int) -> Path:
    rng = random.Random(f"{seed}:{route.name}")
    path.write_text("\n".join(route.lines(population, rng, count)) + "\n")
    return path
