"""docs/writing-kernels.md is followed verbatim: its code blocks run, in order, as one program."""
import pathlib

import pytest

from markdown_blocks import python_blocks, run_markdown

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("doc", ["writing-kernels.md"])
def test_doc_code_blocks_run(doc, capsys):
    ns = run_markdown(DOCS / doc)
    out = capsys.readouterr().out
    assert "cycles" in out
    assert ns["cycles"][2] < ns["cycles"][1]


def test_the_runner_executes_every_block_and_reports_failures(tmp_path):
    md = tmp_path / "x.md"
    md.write_text("text\n```python\nx = 1\n```\nmore\n```python\ny = x + 1\n```\n```\nnot python\n```\n")
    assert len(python_blocks(md.read_text())) == 2
    assert run_markdown(md)["y"] == 2
    md.write_text("```python\nraise ValueError('boom')\n```\n")
    with pytest.raises(ValueError, match="boom"):
        run_markdown(md)
