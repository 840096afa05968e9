"""Execute the fenced ```python blocks of a Markdown document, in order, in one namespace.

Each block is compiled under the name "<doc>#block<N>" with its source registered in linecache,
so tracebacks, inspect.getsource (which @asc.jit uses) and instruction origins all point at the
block's lines.
"""
from __future__ import annotations

import linecache
import pathlib
import re

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def python_blocks(text: str) -> list[str]:
    return [m.group(1) for m in _FENCE.finditer(text)]


def run_markdown(path: str | pathlib.Path) -> dict:
    """Run every ```python block of ``path``; returns the shared namespace."""
    path = pathlib.Path(path)
    blocks = python_blocks(path.read_text())
    if not blocks:
        raise AssertionError(f"{path} has no ```python blocks")
    ns: dict = {"__name__": f"doc_{path.stem.replace('-', '_')}"}
    for i, src in enumerate(blocks, 1):
        name = f"{path.name}#block{i}"
        lines = src.splitlines(keepends=True)
        linecache.cache[name] = (len(src), None, lines, name)
        exec(compile(src, name, "exec"), ns)
    return ns
