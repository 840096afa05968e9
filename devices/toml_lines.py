"""Where a dotted field sits in a TOML file: the line a device-file error points at.

``tomllib`` gives values, not positions, so the loader's messages name a field
(``'gm.bandwidth'``) but not where to look. This module scans the text for table headers
(``[gm]``, ``[vector.cost]``) and ``key =`` lines and maps each dotted path to its first line.
A field that is missing maps to the table that should hold it. Quoted keys and arrays of tables
are not used by device files and are not resolved.
"""
from __future__ import annotations

import re

__all__ = ["field_lines", "field_line", "with_line"]

_HEADER = re.compile(r"^\s*\[\s*([A-Za-z0-9_\-]+(?:\s*\.\s*[A-Za-z0-9_\-]+)*)\s*\]\s*(?:#.*)?$")
_ASSIGN = re.compile(r"^\s*([A-Za-z0-9_\-]+(?:\s*\.\s*[A-Za-z0-9_\-]+)*)\s*=")
# how the loader's messages name a field: field 'a.b', fields 'a.b', field(s) a.b, number at 'a.b',
# field(s) ['a']
_FIELD_IN_MESSAGE = re.compile(
    r"(?:\bfields?(?:\(s\))?|\bnumber at)\s+\[?'?([A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]+)*)")


def _dotted(key: str) -> list[str]:
    return [p.strip() for p in key.split(".")]


def field_lines(text: str) -> dict[str, int]:
    """Dotted path -> 1-based line of its first definition (table header or ``key =``)."""
    out: dict[str, int] = {}
    table: list[str] = []
    in_string = False   # inside a multi-line string, whose lines are no keys
    for no, line in enumerate(text.splitlines(), start=1):
        if not in_string:
            m = _HEADER.match(line)
            if m:
                table = _dotted(m.group(1))
                out.setdefault(".".join(table), no)
            else:
                m = _ASSIGN.match(line)
                if m:
                    out.setdefault(".".join(table + _dotted(m.group(1))), no)
        if line.count('"""') % 2 == 1 or line.count("'''") % 2 == 1:
            in_string = not in_string
    return out


def field_line(text: str, field: str) -> int | None:
    """The line of ``field`` (``"vector.cost.Add.fp16"``), else of its nearest enclosing table
    that the text defines; None when neither is found."""
    lines = field_lines(text)
    parts = re.sub(r"\[\d+\]", "", field).split(".")
    for i in range(len(parts), 0, -1):
        no = lines.get(".".join(parts[:i]))
        if no is not None:
            return no
    return None


def with_line(message: str, where: str, text: str) -> str:
    """``message`` (``"<where>: ... field 'x.y' ..."``) as ``"<where>:<line>: ..."`` when it names a
    field the text locates; unchanged otherwise."""
    m = _FIELD_IN_MESSAGE.search(message)
    prefix = f"{where}: "
    if m is None or not message.startswith(prefix):
        return message
    no = field_line(text, m.group(1))
    if no is None:
        return message
    return f"{where}:{no}: {message[len(prefix):]}"
