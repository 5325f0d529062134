"""A generated catalogue of any size: users, chat accounts, categories, resources, versions, reviews
and accesses, with names and taglines made from word lists, the same for the same seed and size.

Rows are tuples in the column order of `TABLES` (database-neutral values: `datetime`, `Decimal`,
`bool`); `fill.py` writes them. The proportions follow the catalogue the service serves in
production: 5 versions, half a user and 2.5 accesses per resource.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

# Bumped whenever the generated rows change, so that a kept database is refilled.
GENERATOR_VERSION = 1

PREFIXES = (
    "Ultra", "Simple", "Advanced", "Better", "Mega", "Super", "Easy", "Smart", "Epic", "Custom",
    "Lite", "Hyper", "Fast", "Classic", "Modern", "Quantum", "Pixel", "Nova", "Titan", "Royal",
    "Magic", "Cosmic", "Iron", "Golden", "Crystal", "Shadow", "Legendary", "Open", "True", "Pocket",
)  # fmt: skip
CORES = (
    "Shop", "Economy", "Chat", "Warps", "Homes", "Teleport", "Claims", "Land", "Guard", "Auction",
    "Crates", "Kits", "Quests", "Jobs", "Skills", "Pets", "Mobs", "Holograms", "Scoreboard", "Tab",
    "Vault", "Permissions", "AntiCheat", "Backup", "Votes", "Rewards", "Parkour", "Minigames",
    "BedWars", "SkyWars", "Duels", "Arena", "Spawn", "Portals", "Signs", "Menus", "NPCs", "Trade",
    "Bank", "Lottery", "Chests", "Furnaces", "Enchants", "Bosses", "Dungeons", "Clans", "Factions",
    "Towns", "Nations", "Mail", "Tickets", "Reports", "Bans", "Mutes", "Nicknames", "Titles",
    "Cosmetics", "Particles", "Hats", "Emotes", "Stats", "Leaderboards", "Discord", "Webhooks",
    "Maps", "Worlds", "Regions", "Farming", "Fishing", "Mining", "Lumber", "Crafting", "Recipes",
    "Brewing", "Spawners", "Elevators", "Trains", "Vehicles", "Weather", "Seasons", "Time",
)  # fmt: skip
SUFFIXES = (
    "Pro", "Plus", "X", "Reloaded", "Premium", "Core", "Manager", "System", "Deluxe", "Ultimate",
    "Remastered", "Engine", "Suite", "Tools", "Lib", "API", "Next", "Max", "Zero", "Evolved",
)  # fmt: skip
OPENINGS = (
    "A lightweight", "The most complete", "A fully configurable", "A fast and simple",
    "An async", "A modern", "A battle-tested", "The original", "A free", "A premium",
    "An all-in-one", "A flexible", "A tiny", "A powerful", "A beautiful", "A drop-in",
)  # fmt: skip
SUBJECTS = (
    "shop", "economy", "chat", "warp", "home", "teleport", "claim", "protection", "auction",
    "crate", "kit", "quest", "job", "skill", "pet", "mob", "hologram", "scoreboard", "tablist",
    "permission", "anticheat", "backup", "vote", "reward", "parkour", "minigame", "arena",
    "portal", "menu", "npc", "trade", "bank", "lottery", "enchantment", "boss", "dungeon",
    "clan", "faction", "town", "ticket", "punishment", "cosmetic", "particle", "leaderboard",
)  # fmt: skip
KINDS = ("plugin", "system", "manager", "addon", "engine", "toolkit", "framework", "module")
FEATURES = (
    "with GUI support", "with MySQL and SQLite storage", "with PlaceholderAPI hooks",
    "with per-world settings", "with Folia support", "for Paper and Spigot",
    "with a web dashboard", "with Discord integration", "with full translations",
    "without lag", "with BungeeCord and Velocity sync", "with holograms and particles",
    "with economy rewards", "with customizable messages", "with an in-game editor",
    "with player statistics", "with cross-server support", "with Vault support",
)  # fmt: skip
AUDIENCES = (
    "for your server", "for survival servers", "for minigame networks", "for creative worlds",
    "for RPG servers", "for skyblock", "for prison servers", "for small communities",
    "for large networks", "for roleplay servers", "for factions servers", "",
)  # fmt: skip
FIRST_NAMES = (
    "Alex", "Sam", "Max", "Leo", "Mia", "Noah", "Emma", "Liam", "Zoe", "Lucas", "Nina", "Hugo",
    "Lena", "Jonas", "Elias", "Sara", "Theo", "Iris", "Oscar", "Clara", "Felix", "Maya", "Ivan",
    "Yuki", "Kenji", "Anya", "Mateo", "Sofia", "Omar", "Lina", "Arthur", "Chloé", "Björn", "Zoë",
)  # fmt: skip
HANDLES = (
    "Dark", "Wolf", "Ninja", "Craft", "Block", "Pixel", "Dragon", "Shadow", "Creeper", "Ender",
    "Diamond", "Red", "Blue", "Storm", "Frost", "Fire", "Night", "Sky", "Stone", "Iron", "Gold",
    "Ghost", "Fox", "Bear", "Hawk", "Dev", "Code", "Byte", "Mod", "Builder", "Miner", "Knight",
)  # fmt: skip
RELEASE_TITLES = (
    "Bug fixes", "Performance improvements", "Support for the latest game version", "New GUI",
    "Translations update", "Database migration fixes", "Folia support", "Hotfix", "Big update",
    "New commands and permissions", "Config reload without restart", "Memory leak fixed", "",
)  # fmt: skip
CATEGORY_NAMES = (
    "Economy", "Chat", "Admin tools", "Fun", "Minigames", "Protection", "World management",
    "Game mechanics", "Libraries", "Bungee and proxies", "Discord", "Cosmetics", "Teleportation",
    "Building", "Anticheat", "Statistics", "Misc", "RPG", "PvP", "Survival", "Skyblock",
    "Prison", "Factions", "Utilities",
)  # fmt: skip

START = datetime(2019, 1, 1)
END = datetime(2026, 10, 1)


@dataclass(frozen=True)
class Size:
    """How many rows of each table a catalogue of `resources` resources has."""

    resources: int

    @property
    def users(self) -> int:
        return max(10, self.resources // 2)

    @property
    def versions(self) -> int:
        return self.resources * 5

    @property
    def accesses(self) -> int:
        return self.resources * 5 // 2

    @property
    def reviews(self) -> int:
        return self.resources // 2

    @property
    def categories(self) -> int:
        return len(CATEGORY_NAMES)


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[str, ...]


TABLES = {
    table.name: table
    for table in (
        Table("categories", ("id", "name")),
        Table("users", tuple("id name email avatar closed banned deleted_at created_at updated_at".split())),
        Table("chat_accounts", ("id", "user_id", "chat_id", "created_at")),
        Table(
            "resources",
            tuple(
                "id user_id category_id name tag description price status deleted_at unique_id stats_id "
                "icon slug download current_version_id created_at updated_at".split()
            ),
        ),
        Table(
            "versions",
            tuple(
                "id resource_id version title download changelog file_name file_size checksum "
                "created_at updated_at".split()
            ),
        ),
        Table("reviews", ("id", "resource_id", "user_id", "rating", "created_at")),
        Table(
            "accesses",
            tuple("id user_id resource_id payment_id source revoked created_at updated_at".split()),
        ),
    )
}

# Resource statuses by share of the catalogue; `deleted` is a soft-deleted published resource.
STATUS_SHARES = (
    ("published", 0.88),
    ("unlisted", 0.04),
    ("draft", 0.04),
    ("pending", 0.015),
    ("rejected", 0.005),
    ("deleted", 0.02),
)

Row = tuple[object, ...]


def chat_id(user_id: int) -> str:
    """The chat-platform snowflake a user linked (18 digits, distinct per user)."""
    return str(300_000_000_000_000_000 + user_id * 104_729)


def _moment(rng: random.Random, position: float) -> datetime:
    """A second of the catalogue's history near `position` (0: first day, 1: last day)."""
    span = (END - START).total_seconds()
    seconds = min(span, max(0.0, position * span + rng.uniform(-86_400 * 20, 86_400 * 20)))
    return START + timedelta(seconds=int(seconds))


def resource_name(rng: random.Random) -> str:
    """A name such as "Ultra Shop Pro 3", "Crates", "Smart Bank Manager"."""
    parts = []
    if rng.random() < 0.6:
        parts.append(rng.choice(PREFIXES))
    parts.append(rng.choice(CORES))
    if rng.random() < 0.25:
        parts.append(rng.choice(CORES))
    if rng.random() < 0.5:
        parts.append(rng.choice(SUFFIXES))
    if rng.random() < 0.2:
        parts.append(str(rng.randint(2, 5)))
    return " ".join(parts)


def tagline(rng: random.Random) -> str:
    """A tagline of 6 to 12 words, at most 160 characters."""
    words = f"{rng.choice(OPENINGS)} {rng.choice(SUBJECTS)} {rng.choice(KINDS)} {rng.choice(FEATURES)}"
    audience = rng.choice(AUDIENCES)
    if audience and len(words.split()) + len(audience.split()) <= 12:
        words = f"{words} {audience}"
    while len(words.split()) < 6:
        words = f"{words} {rng.choice(AUDIENCES[:-1])}"
    return " ".join(words.split()[:12])[:160]


def user_name(rng: random.Random, user_id: int) -> str:
    style = rng.random()
    if style < 0.4:
        return f"{rng.choice(HANDLES)}{rng.choice(HANDLES)}{rng.randint(1, 999)}"
    if style < 0.7:
        return f"{rng.choice(FIRST_NAMES)}{rng.choice(('_', '', '.'))}{rng.choice(HANDLES)}"
    if style < 0.85:
        return f"xX{rng.choice(HANDLES)}{rng.choice(HANDLES)}Xx"
    return f"{rng.choice(FIRST_NAMES).lower()}{user_id}"


def _status(rng: random.Random) -> str:
    draw = rng.random()
    for status, share in STATUS_SHARES:
        if draw < share:
            return status
        draw -= share
    return "published"


def _version_number(index: int, major: int) -> str:
    minor, patch = divmod(index, 3)
    return f"{major}.{minor}.{patch}"


@dataclass
class Catalogue:
    """The rows of one generated catalogue; every table's rows are produced on demand."""

    size: Size
    seed: int = 1

    def rng(self, table: str) -> random.Random:
        # One stream per table: a table's rows do not depend on the order tables are written in.
        return random.Random(f"{self.seed}:{self.size.resources}:{table}")

    def categories(self) -> Iterator[Row]:
        yield from enumerate(CATEGORY_NAMES, start=1)

    def users(self) -> Iterator[Row]:
        rng = self.rng("users")
        count = self.size.users
        for user_id in range(1, count + 1):
            name = user_name(rng, user_id)
            created = _moment(rng, user_id / count)
            deleted = created + timedelta(days=30) if rng.random() < 0.01 else None
            closed = rng.random() < 0.005
            avatar = f"avatars/{user_id}.png" if rng.random() < 0.5 else None
            email = f"user{user_id}@example.com"
            yield (user_id, name, email, avatar, closed, False, deleted, created, created)

    def chat_accounts(self) -> Iterator[Row]:
        """Six users in ten linked a chat account."""
        rng = self.rng("chat_accounts")
        account_id = 0
        for user_id in range(1, self.size.users + 1):
            if rng.random() < 0.6:
                account_id += 1
                yield (account_id, user_id, chat_id(user_id), _moment(rng, user_id / self.size.users))

    def _version_counts(self) -> Iterator[tuple[int, str, int]]:
        """(resource id, status, number of versions) of every resource; about 5 versions each."""
        rng = self.rng("version_counts")
        for resource_id in range(1, self.size.resources + 1):
            status = _status(rng)
            count = rng.randint(0, 2) if status in ("draft", "pending") else rng.randint(1, 9)
            yield resource_id, status, count

    def resources(self) -> Iterator[Row]:
        rng = self.rng("resources")
        total = self.size.resources
        next_version = 1
        for resource_id, status, count in self._version_counts():
            name = resource_name(rng)
            created = _moment(rng, resource_id / total)
            current = None
            if count:
                # One author in twenty uploaded a build without promoting it.
                last = next_version + count - 1
                current = last - 1 if count > 1 and rng.random() < 0.05 else last
            next_version += count
            free = rng.random() < 0.6
            price = (
                Decimal("0.00") if free else Decimal(rng.choice((199, 299, 499, 799, 999, 1499, 2999))) / 100
            )
            deleted = created + timedelta(days=90) if status == "deleted" else None
            yield (
                resource_id,
                rng.randint(1, self.size.users),
                rng.randint(1, len(CATEGORY_NAMES)) if rng.random() < 0.9 else None,
                name,
                tagline(rng),
                "",
                price,
                "published" if status == "deleted" else status,
                deleted,
                f"{resource_id:032x}" if rng.random() < 0.1 else None,
                str(10_000 + resource_id) if rng.random() < 0.3 else None,
                f"images/{resource_id}.png" if rng.random() < 0.7 else None,
                "-".join(name.lower().split()),
                int(rng.paretovariate(1.2) * 20),
                current,
                created,
                created + timedelta(days=rng.randint(0, 400)),
            )

    def versions(self) -> Iterator[Row]:
        rng = self.rng("versions")
        total = self.size.resources
        version_id = 0
        for resource_id, _, count in self._version_counts():
            major = rng.choice((1, 1, 1, 2, 2, 3, 4))
            moment = _moment(rng, resource_id / total)
            for index in range(count):
                version_id += 1
                number = _version_number(index, major)
                yield (
                    version_id,
                    resource_id,
                    number,
                    rng.choice(RELEASE_TITLES),
                    int(rng.paretovariate(1.3) * 10),
                    None,
                    f"plugin-{resource_id}-{number}.jar",
                    rng.randint(20_000, 4_000_000),
                    None,
                    moment,
                    moment,
                )
                moment += timedelta(days=rng.randint(1, 60))

    def reviews(self) -> Iterator[Row]:
        rng = self.rng("reviews")
        for review_id in range(1, self.size.reviews + 1):
            resource_id = _popular(rng, self.size.resources)
            yield (
                review_id,
                resource_id,
                rng.randint(1, self.size.users),
                rng.choice((5, 5, 5, 4, 4, 3, 2, 1)),
                _moment(rng, resource_id / self.size.resources),
            )

    def accesses(self) -> Iterator[Row]:
        """One row per member and resource: each member owns a run of resources `step` apart."""
        rng = self.rng("accesses")
        resources, users, wanted = self.size.resources, self.size.users, self.size.accesses
        step = next(p for p in (104_729, 7_919, 613, 97, 7, 1) if resources % p or p == 1)
        access_id = 0
        user_id = 0
        while access_id < wanted:
            user_id = user_id % users + 1
            owned = min(resources, wanted - access_id, int(rng.expovariate(1 / 5)) + 1)
            start = rng.randint(0, resources - 1)
            for index in range(owned):
                access_id += 1
                source = rng.choices(("purchase", "manual", "gift"), (0.75, 0.2, 0.05))[0]
                moment = _moment(rng, rng.random())
                yield (
                    access_id,
                    user_id,
                    (start + index * step) % resources + 1,
                    None,
                    source,
                    rng.random() < 0.03,
                    moment,
                    moment,
                )
            if user_id == users and access_id < wanted:
                # Every member had a turn: the next round gives runs starting elsewhere, which
                # could repeat a pair; stop at the rows written.
                break

    def rows(self, table: str) -> Iterator[Row]:
        producer = getattr(self, table)
        rows: Iterator[Row] = producer()
        return rows


def _popular(rng: random.Random, count: int) -> int:
    """An id in 1..count, the low ids far more often (a heavy tail, as downloads are)."""
    return (int(rng.paretovariate(0.6)) - 1) % count + 1
