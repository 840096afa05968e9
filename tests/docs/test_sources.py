"""Every citation in the repository resolves in docs/sources.md (the provenance ships)."""
from __future__ import annotations

import pathlib
import re
import subprocess
import tomllib

import pytest

from opsim.devices import sources as S
from opsim.devices.report import catalogue_table

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = ROOT / "docs" / "sources.md"
# the project's reference set lives outside the repository: citing it by name is a dead link
LEGACY = re.compile(r"(?<![\w/.-])(?:[\w./-]*/)?(hardware|kernels|numerics|simulators|DESIGN)\.md\b")
DOC_KEY = re.compile(r"\[([A-Z][A-Z0-9]*(?:-[A-Z0-9]+)*)\]")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".yaml", ".yml", ".json", ".html"}


def _repo_files() -> list[pathlib.Path]:
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\n")
        files = [ROOT / f for f in out if f]
    except (OSError, subprocess.CalledProcessError):   # not a git checkout: walk the tree
        files = [p for p in ROOT.rglob("*") if ".venv" not in p.parts and ".git" not in p.parts]
    return [p for p in files if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.name == "Makefile")]


def _entries() -> dict[str, S.SourceEntry]:
    return S.load_sources(SOURCES)


def _anchors() -> set[str]:
    return set(_entries()) | S.section_anchors(SOURCES)


def _doc_keys() -> set[str]:
    keys = set()
    for e in _entries().values():
        if e.id.startswith("doc-"):
            keys.update(re.findall(r"`([^`]+)`", e.summary.split(".")[0]))
    return {k.split(":")[0] for k in keys}


def _strings(node, path=""):
    """(dotted path, key, text) of every source/assumption string of a device file."""
    if isinstance(node, dict):
        for k, v in node.items():
            sub = f"{path}.{k}" if path else k
            if k in ("source", "assumption") and isinstance(v, str):
                yield path, k, v
            else:
                yield from _strings(v, sub)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, f"{path}[{i}]")


def test_every_entry_has_a_well_formed_unique_id_and_facts_carry_a_source():
    text = SOURCES.read_text(encoding="utf-8")
    ids = re.findall(r"^### (.+?)\s*$", text, flags=re.M)
    assert len(ids) == len(set(ids)), "duplicate ids"
    for i in ids:
        assert re.fullmatch(S.ID, i), f"id {i!r}: lower-case words joined by hyphens"
    for e in _entries().values():
        if e.section in ("Hardware", "Kernels and host API", "Numerics", "Traces"):
            assert e.sources, f"entry {e.id} has no 'Source:' line"
        if e.section == "Documents":
            assert e.summary.startswith("Key `"), f"document {e.id} names no key"


@pytest.mark.parametrize("path", sorted((ROOT / "devices").glob("*.toml")), ids=lambda p: p.name)
def test_every_device_source_starts_with_a_citation_that_resolves(path):
    anchors, keys = _anchors(), _doc_keys()
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    strings = list(_strings(raw))
    assert strings
    for where, kind, text in strings:
        if kind == "source":
            assert re.match(r"docs/sources\.md#", text), f"{path.name} {where}: source must start " \
                f"with docs/sources.md#<id>: {text!r}"
        for i in S.cited_ids(text) + S.assumption_ids(text):
            assert i in anchors, f"{path.name} {where}: {i!r} is not in docs/sources.md ({text!r})"
        for key in DOC_KEY.findall(text):
            if key.startswith("AICore") or key.endswith("Rates"):
                continue   # INI section names such as [AICoreMemoryRates]
            assert key in keys, f"{path.name} {where}: document key [{key}] is not in docs/sources.md"


def test_no_citation_anywhere_in_the_repository_is_left_unresolved():
    anchors, entries = _anchors(), _entries()
    problems = []
    for path in _repo_files():
        if path == SOURCES:
            continue
        rel = path.relative_to(ROOT)
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for i in S.cited_ids(line):
                if i not in anchors:
                    problems.append(f"{rel}:{n}: sources.md#{i} does not resolve")
            for mention, hit in S.design_ids(line, entries):
                if hit is None:
                    problems.append(f"{rel}:{n}: {mention!r} has no design note in docs/sources.md")
            for i in S.assumption_ids(line):
                if i not in anchors:
                    problems.append(f"{rel}:{n}: assumption {i.upper()} is not listed")
            for m in LEGACY.finditer(line):
                name = m.group(0)
                if (ROOT / name).is_file() or (path.parent / name).is_file():
                    continue
                if m.group(1) == "DESIGN" and "design-notes" in anchors:
                    continue   # the design notes section of docs/sources.md stands for DESIGN.md
                problems.append(f"{rel}:{n}: {name!r} is not a file of the repository")
    assert not problems, "\n".join(problems)


def test_resolving_a_device_source_gives_the_entry_and_its_document():
    text = "docs/sources.md#mte-load-store: GE-PERF Load a = 9.9074 (assumption A-3)"
    got = [e.id for e in S.resolve(text, SOURCES, documents=True)]
    assert got[:2] == ["mte-load-store", "a-3"]
    assert "doc-ge-perf" in got
    ge = _entries()["doc-ge-perf"]
    assert "hicann/ge" in ge.summary and "74573e24c43f" in ge.summary


def test_a_citation_to_a_missing_id_is_reported():
    cite = "docs/sources" + ".md#no-such-entry, #soc-a2-a3"   # split: this file is scanned too
    assert S.cited_ids(f"x ({cite})") == ["no-such-entry", "soc-a2-a3"]
    assert "no-such-entry" not in _anchors()


def test_the_device_catalogue_prints_the_resolved_sources():
    text = catalogue_table(["atlas-a2"])
    assert "sources (docs/sources.md#<id>):" in text
    assert "mte-load-store: The same GE model" in text
    assert "hicann/ge" in text          # the document behind it, with its version


def test_the_html_report_lists_the_sources_behind_the_device_numbers():
    from opsim import devices
    from opsim.traces.report import render_report, spec_provenance_rows
    html = render_report(title="t", facts=[], trace=None,
                         spec_rows=spec_provenance_rows(devices.load("atlas-a2")))
    assert "Sources (docs/sources.md)" in html
    assert "mte-load-store" in html and "hicann/ge" in html
