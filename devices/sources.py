"""Citations into ``docs/sources.md``: parse the file, find the ids a text cites, resolve them.

A citation is ``docs/sources.md#<id>`` (the ``docs/`` prefix is optional), optionally followed by
more ids as ``, #<id2>, #<id3>``. Assumption ids (``A-3``, ``A-D4``) resolve to the entries
``a-3`` / ``a-d4`` of the Assumptions section, and "DESIGN §N" to the design note whose id ends
in ``-sN``. Every ``### <id>`` heading of the file is an entry; its id is its anchor.

This module reads a Markdown file and imports nothing of opsim's, so the devices layer (the
catalogue's provenance view) can use it.
"""
from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["SourceEntry", "SOURCES_PATH", "load_sources", "cited_ids", "assumption_ids",
           "design_ids", "resolve", "describe", "CITATION_RE"]

# devices/ sits at the repository root beside docs/ (an editable install keeps that layout)
SOURCES_PATH = pathlib.Path(__file__).resolve().parent.parent / "docs" / "sources.md"

ID = r"[a-z0-9]+(?:-[a-z0-9]+)*"
CITATION_RE = re.compile(rf"(?:docs/)?sources\.md#({ID})((?:\s*,\s*#{ID})*)")
ASSUMPTION_RE = re.compile(r"(?<![\w-])A-(D?\d+)(?![\w])")
DESIGN_RE = re.compile(r"DESIGN(?:\.md)?\s*§\s*(\d+)")
_HEADING = re.compile(r"^(#{2,3})\s+(.+?)\s*$")


@dataclass(frozen=True)
class SourceEntry:
    """One ``### <id>`` entry of docs/sources.md."""
    id: str
    section: str          # the enclosing ``##`` heading
    summary: str          # the first sentence of the entry's text
    sources: tuple[str, ...]   # its ``Source:`` lines (empty for assumptions and design notes)
    links: tuple[str, ...] = ()   # ids its ``Source:`` lines link to (documents, other entries)


_LINK = re.compile(r"\[([^\]]+)\]\(#([a-z0-9-]+)\)")


def plain(text: str) -> str:
    """Markdown of an entry as plain text: ``[INI](#doc-ini)`` -> ``INI``, no ``**``."""
    return " ".join(_LINK.sub(r"\1", text).replace("**", "").split())


def linked_ids(text: str) -> list[str]:
    """Ids an entry's text links to (``[INI](#doc-ini)`` -> ``doc-ini``)."""
    return [m.group(2) for m in _LINK.finditer(text)]


def _first_sentence(text: str) -> str:
    text = plain(text)
    m = re.search(r"(?<=[a-z0-9\)`])\.(\s|$)", text)
    return (text[:m.start() + 1] if m else text).strip()


def _parse(text: str) -> dict[str, SourceEntry]:
    entries: dict[str, SourceEntry] = {}
    section, current = "", None
    body: list[str] = []

    def flush() -> None:
        if current is None:
            return
        paras = "\n".join(body).strip().split("\n\n")
        prose = next((p for p in paras if p and not p.lstrip().startswith(("|", "```"))), "")
        raw = [p for p in paras if p.startswith("Source:")]
        links = tuple(dict.fromkeys(i for p in raw for i in linked_ids(p)))
        # a document's whole paragraph is its description (name, version, address)
        summary = plain(prose) if current.startswith("doc-") else _first_sentence(prose)
        entries[current] = SourceEntry(current, section, summary,
                                       tuple(plain(p) for p in raw), links)

    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else _HEADING.match(line)
        if m:
            flush()
            body = []
            if m.group(1) == "##":
                section, current = m.group(2), None
            else:
                current = m.group(2)
            continue
        if current is not None:
            body.append(line)
    flush()
    return entries


@lru_cache(maxsize=4)
def _load(path: str, mtime: float) -> dict[str, SourceEntry]:
    return _parse(pathlib.Path(path).read_text(encoding="utf-8"))


def load_sources(path: str | pathlib.Path | None = None) -> dict[str, SourceEntry]:
    """Entries of docs/sources.md by id; ``{}`` when the file is not there (an installed wheel)."""
    p = pathlib.Path(path) if path is not None else SOURCES_PATH
    if not p.is_file():
        return {}
    return _load(str(p), p.stat().st_mtime)


def section_anchors(path: str | pathlib.Path | None = None) -> set[str]:
    """GitHub-style anchors of the ``##`` section headings (e.g. ``assumptions``)."""
    p = pathlib.Path(path) if path is not None else SOURCES_PATH
    if not p.is_file():
        return set()
    out = set()
    for line in p.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            slug = re.sub(r"[^\w\- ]", "", line[3:].strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def cited_ids(text: str) -> list[str]:
    """The ids of every ``sources.md#…`` citation in ``text``, in order."""
    out: list[str] = []
    for m in CITATION_RE.finditer(text):
        out.append(m.group(1))
        out.extend(re.findall(rf"#({ID})", m.group(2)))
    return out


def assumption_ids(text: str) -> list[str]:
    """``A-3`` -> ``a-3``, ``A-D4`` -> ``a-d4`` for every assumption id named in ``text``."""
    return [f"a-{n.lower()}" for n in ASSUMPTION_RE.findall(text)]


def design_ids(text: str, entries: dict[str, SourceEntry]) -> list[tuple[str, str | None]]:
    """``(mention, id or None)`` for every "DESIGN §N" mention of ``text``."""
    out = []
    for m in DESIGN_RE.finditer(text):
        suffix = f"-s{m.group(1)}"
        hit = next((i for i in entries if i.startswith("design-") and i.endswith(suffix)), None)
        out.append((m.group(0), hit))
    return out


def resolve(text: str, path: str | pathlib.Path | None = None, *,
            documents: bool = False) -> list[SourceEntry]:
    """The entries ``text`` cites (citations, then assumption ids), each once, in order; with
    ``documents`` also the documents those entries' ``Source:`` lines link to."""
    entries = load_sources(path)
    out: list[SourceEntry] = []
    for i in cited_ids(text) + assumption_ids(text):
        e = entries.get(i)
        if e is not None and e not in out:
            out.append(e)
    if documents:
        for e in list(out):
            for i in e.links:
                d = entries.get(i)
                if d is not None and d.id.startswith("doc-") and d not in out:
                    out.append(d)
    return out


def describe(entry: SourceEntry, width: int = 400) -> str:
    """One line for a provenance listing: id, summary and its source lines."""
    text = f"{entry.id}: {entry.summary}"
    for s in entry.sources:
        text += " " + s
    return text if len(text) <= width else text[:width - 1] + "…"
