"""Atom documents (RFC 4287): a feed and its entries written as UTF-8 XML bytes.

The bytes depend on the feed's values only (no clock, no process state), so that every worker
writes the same document for the same data and its entity tag is the same everywhere. Text is
escaped for XML, and characters XML 1.0 cannot hold at all (most C0 controls, lone surrogates,
U+FFFE and U+FFFF) are dropped, so that any stored name gives a document a parser reads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from xml.sax.saxutils import escape

ATOM_MEDIA_TYPE = "application/atom+xml; charset=utf-8"
ATOM_NAMESPACE = "http://www.w3.org/2005/Atom"
GENERATOR = "marketplace"

# Everything outside XML 1.0's `Char` production.
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ATTRIBUTE_ENTITIES = {'"': "&quot;", "\t": "&#9;", "\n": "&#10;", "\r": "&#13;"}
_TEXT_ENTITIES = {"\r": "&#13;"}


@dataclass(frozen=True, slots=True)
class Person:
    name: str
    uri: str | None = None


@dataclass(frozen=True, slots=True)
class Entry:
    id: str
    title: str
    summary: str
    # The entry's page: its `alternate` link.
    link: str
    published: datetime
    updated: datetime
    author: Person


@dataclass(frozen=True, slots=True)
class Feed:
    id: str
    title: str
    updated: datetime
    # The feed's own address (`self`) and the page it follows (`alternate`).
    self_link: str
    link: str
    entries: Sequence[Entry]
    # Required when an entry has none of its own; every entry here has one.
    author: Person | None = None


def xml_text(text: str) -> str:
    """`text` as XML character data: markup characters escaped, characters XML cannot hold dropped."""
    return escape(_NOT_XML.sub("", text), _TEXT_ENTITIES)


def _attribute(text: str) -> str:
    return '"' + escape(_NOT_XML.sub("", text), _ATTRIBUTE_ENTITIES) + '"'


def timestamp(moment: datetime) -> str:
    """`moment` (naive times are UTC) in RFC 3339 to the second, in UTC: `2024-05-04T10:00:00Z`."""
    utc = moment if moment.tzinfo is None else moment.astimezone(UTC).replace(tzinfo=None)
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def _person(tag: str, person: Person, indent: str) -> list[str]:
    lines = [f"{indent}<{tag}>", f"{indent}  <name>{xml_text(person.name)}</name>"]
    if person.uri is not None:
        lines.append(f"{indent}  <uri>{xml_text(person.uri)}</uri>")
    lines.append(f"{indent}</{tag}>")
    return lines


def _link(rel: str, href: str, indent: str, media_type: str | None = None) -> str:
    typed = "" if media_type is None else f" type={_attribute(media_type)}"
    return f"{indent}<link rel={_attribute(rel)}{typed} href={_attribute(href)}/>"


def _entry(entry: Entry) -> list[str]:
    return [
        "  <entry>",
        f"    <id>{xml_text(entry.id)}</id>",
        f'    <title type="text">{xml_text(entry.title)}</title>',
        f'    <summary type="text">{xml_text(entry.summary)}</summary>',
        _link("alternate", entry.link, "    "),
        f"    <published>{timestamp(entry.published)}</published>",
        f"    <updated>{timestamp(entry.updated)}</updated>",
        *_person("author", entry.author, "    "),
        "  </entry>",
    ]


def render(feed: Feed) -> bytes:
    """The feed as an Atom document: UTF-8 with its XML declaration."""
    lines = [
        '<?xml version="1.0" encoding="utf-8"?>',
        f"<feed xmlns={_attribute(ATOM_NAMESPACE)}>",
        f"  <id>{xml_text(feed.id)}</id>",
        f'  <title type="text">{xml_text(feed.title)}</title>',
        f"  <updated>{timestamp(feed.updated)}</updated>",
        _link("self", feed.self_link, "  ", ATOM_MEDIA_TYPE.split(";", 1)[0]),
        # No type on `alternate`: readers take only a link of no type or an HTML type as the page
        # to open, and the pages linked here are the API's JSON objects.
        _link("alternate", feed.link, "  "),
    ]
    if feed.author is not None:
        lines.extend(_person("author", feed.author, "  "))
    lines.append(f"  <generator>{xml_text(GENERATOR)}</generator>")
    for entry in feed.entries:
        lines.extend(_entry(entry))
    lines.append("</feed>")
    return ("\n".join(lines) + "\n").encode("utf-8")
