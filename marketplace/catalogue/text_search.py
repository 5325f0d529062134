"""The `q` filter of search: which resources hold the text, and the index that narrows them down.

The rule (current-api.md, NOTES.md): `q` is a case-insensitive substring of the name or the tagline,
`%` and `_` keeping their pattern meaning. That condition (`holds_text`) decides every answer; an
index only narrows the rows it is checked on, and must never leave out a row the condition keeps:

- PostgreSQL, a query word (ASCII letters and digits only): the full-text index of every suffix of
  every word of the lowered text (migration 0007) finds, with the prefix query `'q':*`, exactly
  the rows where some word holds `q`. Every occurrence of such a `q` lies inside one run of ASCII
  letters and digits, so no row is left out, even where `q` sits inside a longer word.
- PostgreSQL, any other text: the trigram indexes on name and tagline serve the condition itself.
- SQLite: the FTS5 trigram table of the lowered name and tagline (migration 0007) finds the rows
  holding every literal run of at least 3 characters of the lowered pattern (the parts between
  `%` and `_`): a row matching the pattern holds each. Shorter runs give the index nothing to
  look up, so such a `q` is checked row by row, as before.

The page itself is read one of two ways, by how dense the matches are (`walks_the_listing`).
"""

from __future__ import annotations

import re

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    ScalarSelect,
    String,
    bindparam,
    cast,
    column,
    func,
    literal_column,
    or_,
    select,
    table,
)
from sqlalchemy.dialects.postgresql import TSQUERY

from marketplace.database.engine import unicode_lower
from marketplace.models import Resource

PATTERN = bindparam("pattern", None, type_=String)
# What the index is asked: a tsquery on PostgreSQL, an FTS5 query on SQLite.
PREFILTER = bindparam("prefilter", None, type_=String)

# A query word the suffix index answers: every occurrence of it lies within one indexed word.
_QUERY_WORD = re.compile(r"[A-Za-z0-9]+")
# The trigram tokenizer indexes runs of 3 characters: a shorter literal narrows nothing.
TRIGRAM = 3
_WILDCARDS = re.compile(r"[%_]")

# SQLite's FTS5 table of lowered names and taglines (migration 0007); its rowid is the resource id.
_RESOURCE_SEARCH = table("resource_search", column("rowid"))
# The number triggers move on every write that can change what a search finds (migration 0007).
_SEARCH_GENERATION = table("search_generation", column("id", Integer), column("value", BigInteger))


def search_generation() -> ScalarSelect[int]:
    """The current search generation, as a value a statement reads in its own snapshot."""
    return select(_SEARCH_GENERATION.c.value).where(_SEARCH_GENERATION.c.id == 1).scalar_subquery()


def substring_pattern(q: str) -> str:
    """The LIKE pattern of `q`: its `%` and `_` widen the match."""
    return f"%{q}%"


def holds_text() -> ColumnElement[bool]:
    """The rule itself: the name or the tagline matches the pattern, whatever the case."""
    return or_(Resource.name.ilike(PATTERN), Resource.tag.ilike(PATTERN))


def holds_text_unindexed() -> ColumnElement[bool]:
    """The same condition wrapped so that no index serves it and the planner takes it to keep
    about half of the rows (a boolean expression it cannot see into): the database then checks
    it on each row of the listing's id order until the page is full, rather than collect every
    match first, or scan the whole table when it guesses that few rows match. Name and tagline
    are never null, so the wrapping changes no answer."""
    return func.coalesce(holds_text(), False)


def suffix_candidates() -> ColumnElement[bool]:
    """PostgreSQL: the rows with a word holding the query word (`PREFILTER` is `'word':*`)."""
    return func.resource_search_suffixes(Resource.name, Resource.tag).op("@@")(cast(PREFILTER, TSQUERY))


def trigram_candidates() -> ColumnElement[bool]:
    """SQLite: the rows whose lowered name or tagline holds every literal run of the pattern."""
    matching = select(_RESOURCE_SEARCH.c.rowid).where(
        literal_column("resource_search").op("MATCH")(PREFILTER)
    )
    return Resource.id.in_(matching)


def prefilter_for(dialect_name: str, q: str) -> str | None:
    """What the text index of the named database is asked for `q` (`suffix_candidates`,
    `trigram_candidates`); None when it cannot narrow the search."""
    if dialect_name == "postgresql":
        return f"'{q.lower()}':*" if _QUERY_WORD.fullmatch(q) else None
    if dialect_name == "sqlite":
        # The pattern lowered as the condition lowers it (the service's lower(), on the whole pattern).
        runs = [run for run in _WILDCARDS.split(unicode_lower(substring_pattern(q))) if len(run) >= TRIGRAM]
        if runs:
            # Each run a phrase (a substring, for the trigram tokenizer); `"` is written twice inside one.
            return " AND ".join('"' + run.replace('"', '""') + '"' for run in runs)
    return None


def walks_the_listing(*, matching: int, listed: int, rows_needed: int) -> bool:
    """Whether the page is cheaper read by walking the listing in id order, checking each row, than
    by collecting every match from an index and sorting them.

    Walking reads about `rows_needed * listed / matching` rows before it has the page; collecting
    reads `matching` rows. Dense matches (a common word) are walked, sparse ones collected.
    """
    return matching > 0 and rows_needed * listed < matching * matching
