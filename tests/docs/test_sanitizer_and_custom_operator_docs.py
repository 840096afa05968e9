"""docs/sanitizer.md and docs/custom-operators.md are followed verbatim: their ```python blocks
run, in order, in one namespace per document, from the repository root."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("sanitizer.md", "custom-operators.md")


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


@pytest.mark.parametrize("doc", DOCS)
def test_every_python_block_of_the_document_runs(doc: str, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    blocks = python_blocks((ROOT / "docs" / doc).read_text())
    assert len(blocks) >= 3
    monkeypatch.chdir(ROOT)
    from opsim.kernels import registry
    registry.names()                     # operators the documents register vanish after the test
    monkeypatch.setattr(registry, "_OPS", dict(registry._OPS))
    monkeypatch.setattr(registry, "_FILES", dict(registry._FILES))
    namespace: dict = {"__name__": f"docs_{doc.replace('-', '_').replace('.', '_')}"}
    for i, block in enumerate(blocks):
        code = compile(block, f"docs/{doc} python block {i + 1}", "exec")
        exec(code, namespace)            # noqa: S102 - the point of the test
