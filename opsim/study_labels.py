"""Readable names for the axes and values of a study's pictures.

A study axis is a dotted key (``override.kernels.embedding_dense_backward.ub_budget``,
``tiling.block_dim``, ``attr.core_mask``) whose values may be whole operand tables
(``{"grad": [4096, 1024], "indices": [4096]}``). Printed as they are, such keys and values make
tick labels wider than the picture. Here an axis gets a short title (its last key, with its unit
where the key says it is bytes) plus a second line naming the full key, and its values short
tick labels: a table shows only the entries that differ between the axis values (what is the
same everywhere goes to the title line), a shape reads ``4096x1024``, a byte count ``128 KiB``,
a core mask ``0xf`` with its number of cores.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["AxisLabels", "axis_labels", "value_label", "cell_text"]

# the result columns a picture can show, with their units
VALUE_LABELS = {"time_us": "time (µs)", "cycles": "cycles", "bandwidth_GBps": "GM bandwidth (GB/s)",
                "bytes": "bytes moved (B)", "bytes_read": "bytes read (B)", "bytes_written": "bytes written (B)",
                "ub_bytes": "UB peak (B)", "workspace_bytes": "workspace (B)",
                "confirmed_time_us": "simulated time (µs)", "confirmed_cycles": "simulated cycles",
                "estimate_error": "estimate error (fraction)"}
KINDS = {"tiling": "tiling", "attr": "attribute", "override": "what-if device field"}


@dataclass(frozen=True)
class AxisLabels:
    """An axis's title (one line), the line under it (the full key, the common part of its
    values; may be empty) and one tick label per value, in the order given."""

    title: str
    detail: str
    ticks: tuple[str, ...]

    @property
    def text(self) -> str:
        """Title and detail as an axis label (two lines when there is a detail)."""
        return f"{self.title}\n{self.detail}" if self.detail else self.title


def value_label(value: str) -> str:
    """The label of a result column, with its unit (``time_us`` -> ``time (µs)``)."""
    if value in VALUE_LABELS:
        return VALUE_LABELS[value]
    if value.startswith("util_"):
        return f"{value[5:]} busy (fraction of the run)"
    return value


def cell_text(v: float) -> str:
    """A heat-map cell's number in at most five characters where it can be (no 1.21e+03)."""
    if abs(v) >= 1e5:
        return f"{v:.2g}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def _is_bytes(key: str) -> bool:
    last = key.rsplit(".", 1)[-1]
    return last.endswith(("size", "bytes", "budget", "capacity"))


def _bytes(v: Any) -> str:
    if not isinstance(v, int) or isinstance(v, bool):
        return str(v)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= scale and v % (scale // 4) == 0:
            return f"{v / scale:g} {unit}"
    return f"{v} B"


def _mask(v: Any) -> str:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        return str(v)
    n = bin(v).count("1")
    return f"{v:#x}\n{n} core{'s' if n != 1 else ''}"


def _parse(v: Any) -> Any:
    if isinstance(v, str) and v[:1] in "[{":
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def _plain(v: Any) -> str:
    """A value without JSON punctuation: [4096, 1024] -> 4096x1024."""
    if isinstance(v, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in v):
        return "x".join(str(d) for d in v) if v else "scalar"
    if isinstance(v, list):
        return ", ".join(_plain(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k} {_plain(x)}" for k, x in v.items())
    if v is None:
        return "none"
    return str(v)


def _tables(values: Sequence[dict[str, Any]]) -> tuple[list[str], str]:
    """Tick labels of table values: the entries that differ between them; and the common part."""
    keys: list[str] = []
    for d in values:
        keys += [k for k in d if k not in keys]
    varying = [k for k in keys if len({json.dumps(d.get(k), sort_keys=True) for d in values}) > 1]
    common = [k for k in keys if k not in varying]
    ticks = [", ".join(f"{k} {_plain(d[k])}" for k in varying if k in d) or "-" for d in values]
    same = ", ".join(f"{k} {_plain(values[0][k])}" for k in common)
    return ticks, (f"{same} in every point" if same and varying else same)


def axis_labels(key: str, values: Sequence[Any]) -> AxisLabels:
    """Short title, detail line and tick labels of study axis ``key`` over ``values``."""
    parsed = [_parse(v) for v in values]
    head, _, last = key.rpartition(".")
    kind = KINDS.get(key.split(".", 1)[0], "") if head else ""
    detail = [f"{kind} {key.split('.', 1)[1]}"] if kind and "." in key.split(".", 1)[1] else (
        [kind] if kind else [])
    title = last
    if parsed and all(isinstance(v, dict) for v in parsed):
        ticks, same = _tables(parsed)
        if same:
            detail.append(same)
    elif _is_bytes(key) and all(isinstance(v, int) for v in parsed):
        ticks, title = [_bytes(v) for v in parsed], f"{last} (bytes)"
    elif last == "core_mask":
        ticks = [_mask(v) for v in parsed]
    else:
        ticks = [_plain(v) for v in parsed]
    return AxisLabels(title, "; ".join(detail), tuple(ticks))
