"""The README's figures and the generated docs match a fresh run (`make docs` regenerates them)."""
from __future__ import annotations

import difflib
import importlib.util
import pathlib
import re

import pytest

from opsim import devices, docfigs

ROOT = pathlib.Path(__file__).resolve().parents[2]
FAST = sorted(n for n, f in docfigs.FIGURES.items() if not f.slow)
SLOW = sorted(n for n, f in docfigs.FIGURES.items() if f.slow)


def _explain(name: str, have: str, new: str) -> str:
    diff = "".join(difflib.unified_diff(have.splitlines(True), new.splitlines(True), "README", "fresh run"))
    how = "`make docs`" + (f" (or python -m opsim.docfigs {name})" if name in docfigs.FIGURES else "")
    return f"{name!r} differs from a fresh run; run {how}:\n{diff}"


def _load(script: str):
    spec = importlib.util.spec_from_file_location(script, ROOT / "benchmarks" / f"{script}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------------------------------------
# The mechanism
# ---------------------------------------------------------------------------------------------

def test_every_marked_block_has_a_figure_and_every_figure_a_block():
    for path in {docfigs.README, *(f.path for f in docfigs.FIGURES.values())}:
        marked = set(docfigs.blocks(path.read_text(encoding="utf-8")))
        registered = {n for n, f in docfigs.FIGURES.items() if f.path == path}
        assert marked == registered, path


def test_write_replaces_only_the_text_between_the_markers(tmp_path, monkeypatch):
    doc = tmp_path / "doc.md"
    doc.write_text("intro 1\n<!-- figure: t -->\nold 2\n<!-- /figure -->\noutro 3\n", encoding="utf-8")
    monkeypatch.setitem(docfigs.FIGURES, "t", docfigs.Figure("t", lambda: "new 4", path=doc))
    assert not docfigs.matches("t")[0]
    assert docfigs.write(["t"]) == ["t"]
    assert doc.read_text(encoding="utf-8") == "intro 1\n<!-- figure: t -->\nnew 4\n<!-- /figure -->\noutro 3\n"
    assert docfigs.write(["t"]) == []          # a second run changes nothing


def test_a_volatile_span_matches_any_value_but_the_rest_must_be_equal(tmp_path, monkeypatch):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- figure: t -->\n8324 cycles in 42.4 s\n<!-- /figure -->\n", encoding="utf-8")
    wall = docfigs._vol("9.9")
    monkeypatch.setitem(docfigs.FIGURES, "t", docfigs.Figure("t", lambda: f"8324 cycles in {wall} s", path=doc))
    assert docfigs.matches("t")[0]
    monkeypatch.setitem(docfigs.FIGURES, "t", docfigs.Figure("t", lambda: f"8325 cycles in {wall} s", path=doc))
    assert not docfigs.matches("t")[0]


def test_every_readme_figure_states_operator_shape_dtype_mode_and_device():
    names = set(devices.catalogue())
    for name, fig in docfigs.FIGURES.items():
        if fig.path != docfigs.README or not fig.run:
            continue
        text = docfigs.current(name)
        assert any(d in text for d in names), f"{name}: names no device"
        assert re.search(r"\b(fp32|fp16|bf16)\b", text), f"{name}: names no dtype"
        assert re.search(r"\b(full|timing|estimate|numeric)\b[` ]*mode|mode = \"", text), f"{name}: no mode"
        assert re.search(r"\d+\s*[x×]\s*\d+|shape|BT \d+|\d+\s+KiB|\b\d{4,}\b", text), f"{name}: no shape"


# ---------------------------------------------------------------------------------------------
# The figures against a fresh run
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FAST)
def test_readme_figure_matches_a_fresh_run(name):
    ok, have, new = docfigs.matches(name)
    assert ok, _explain(name, have, new)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_slow_readme_figure_matches_a_fresh_run(name):
    ok, have, new = docfigs.matches(name)
    assert ok, _explain(name, have, new)


def test_calibration_doc_matches_a_fresh_run():
    cal = _load("calibrate")
    fresh = cal.render(cal.table())
    have = (ROOT / "docs" / "calibration.md").read_text(encoding="utf-8")
    assert have == fresh, _explain("docs/calibration.md", have, fresh)


@pytest.mark.slow
def test_estimate_doc_matches_a_fresh_run():
    est = _load("estimate_error")
    wall = re.compile(r"Generated in \d+ s with \d+\s+worker processes on a \d+-CPU machine")
    fresh = wall.sub("Generated in …", est.render(est.run(2)))
    have = wall.sub("Generated in …", (ROOT / "docs" / "estimate.md").read_text(encoding="utf-8"))
    assert have == fresh, _explain("docs/estimate.md", have, fresh)
