"""Pictures of a sweep (matplotlib, Agg): heat maps over two axes and scaling lines.

- heat map: ``value`` (default ``time_us``) over axis ``x`` × axis ``y``; every other axis is
  reduced to its best setting (the fastest point), so a cell reads "the fastest this pair can
  be" (another value: its value at that point); one
  picture per device when the study has several. Cells whose points all failed are blank.
- scaling lines: ``value`` against axis ``x``, one line per value of ``series`` (default the
  device), the other axes reduced to their fastest setting.

A study names its pictures in ``[[plot]]`` tables; without any, :func:`plot_study` draws a heat
map over the two numeric axes with the most values and scaling lines over the numeric axis
with the most values.

Axis titles, tick labels and the value's unit come from :mod:`opsim.study_labels` (an operand
table reads ``grad 4096x1024``, a byte count ``128 KiB``, a core mask ``0xf`` / ``4 cores``);
a heat map is sized to its labels and turns long x tick labels.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from opsim.study_labels import axis_labels, cell_text, value_label

__all__ = ["plot_study", "heatmap", "heatmap_figure", "scaling_lines", "scaling_figure"]


def _axis_value(row: Mapping[str, Any], axis: str) -> Any:
    v = row.get(f"axis:{axis}", row.get(axis))
    if isinstance(v, str) and v[:1] in "[{":
        try:
            return json.dumps(json.loads(v))
        except ValueError:
            return v
    return v


def _sort_key(v: Any) -> tuple:
    return (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v))


def _best(rows: Sequence[Mapping[str, Any]], keys: Sequence[str], value: str) -> dict[tuple, float]:
    """``value`` of the fastest point (smallest ``time_us``) of each combination of ``keys``: the
    other axes reduced to their best setting. Smallest ``value`` would be the best only for a
    time; for a bandwidth or a utilisation it would pick the slowest point."""
    best: dict[tuple, tuple[float, float]] = {}
    for r in rows:
        if r.get("status") != "ok" or r.get(value) is None:
            continue
        k = tuple(_axis_value(r, a) for a in keys)
        v = float(r[value])
        rank = float(r["time_us"]) if r.get("time_us") is not None else v
        if k not in best or rank < best[k][0]:
            best[k] = (rank, v)
    return {k: v for k, (_, v) in best.items()}


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s)


def heatmap(rows: Sequence[Mapping[str, Any]], x: str, y: str, path: str | Path, value: str = "time_us",
            title: str = "") -> Path:
    """One heat map of ``value`` over ``x`` × ``y`` (at the fastest setting of the other axes)."""
    import matplotlib.pyplot as plt
    fig = heatmap_figure(rows, x, y, value, title)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def heatmap_figure(rows: Sequence[Mapping[str, Any]], x: str, y: str, value: str = "time_us",
                   title: str = "") -> Any:
    """The matplotlib figure :func:`heatmap` saves (the caller closes it)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    best = _best(rows, (x, y), value)
    xs = sorted({_axis_value(r, x) for r in rows}, key=_sort_key)
    ys = sorted({_axis_value(r, y) for r in rows}, key=_sort_key)
    grid = np.full((len(ys), len(xs)), np.nan)
    for (xv, yv), v in best.items():
        grid[ys.index(yv), xs.index(xv)] = v
    xl, yl = axis_labels(x, xs), axis_labels(y, ys)
    # room for the labels: a column holds its cell text or its (rotated) tick label, the y tick
    # labels and the colorbar sit beside the grid
    ychars = max((len(t) for t in yl.ticks), default=1)
    xchars = max((len(line) for t in xl.ticks for line in t.split("\n")), default=1)
    rotate = xchars * 0.075 > 0.95
    width = 2.6 + 0.075 * ychars + 0.95 * len(xs)
    height = 2.0 + 0.45 * len(ys) + (0.06 * xchars if rotate else 0.0)
    fig, ax = plt.subplots(figsize=(max(width, 5.0), max(height, 3.0)))
    im = ax.imshow(np.ma.masked_invalid(grid), origin="lower", aspect="auto", cmap="viridis_r")
    ax.set_xticks(range(len(xs)), list(xl.ticks), rotation=30 if rotate else 0,
                  ha="right" if rotate else "center", fontsize=8)
    ax.set_yticks(range(len(ys)), list(yl.ticks), fontsize=8)
    ax.set_xlabel(xl.text, fontsize=9)
    ax.set_ylabel(yl.text, fontsize=9)
    finite = grid[np.isfinite(grid)]
    for i in range(len(ys)):
        for j in range(len(xs)):
            if math.isfinite(grid[i, j]):
                dark = finite.size and grid[i, j] > (finite.min() + finite.max()) / 2
                ax.text(j, i, cell_text(grid[i, j]), ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")
            else:
                ax.text(j, i, "x", ha="center", va="center", fontsize=7, color="grey")
    fig.colorbar(im, ax=ax, label=value_label(value))
    head = title or value_label(value)
    ax.set_title(f"{head}\nat the fastest setting of the other axes; x = no feasible point", fontsize=9)
    fig.tight_layout()
    return fig


def scaling_lines(rows: Sequence[Mapping[str, Any]], x: str, path: str | Path, series: str = "device",
                  value: str = "time_us", title: str = "") -> Path:
    """``value`` against ``x``, one line per ``series`` value (at the fastest setting of the other axes)."""
    import matplotlib.pyplot as plt
    fig = scaling_figure(rows, x, series, value, title)
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def scaling_figure(rows: Sequence[Mapping[str, Any]], x: str, series: str = "device",
                   value: str = "time_us", title: str = "") -> Any:
    """The matplotlib figure :func:`scaling_lines` saves (the caller closes it)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best = _best(rows, (series, x), value)
    xvals = sorted({k[1] for k in best}, key=_sort_key)
    xl = axis_labels(x, xvals)
    tick = dict(zip(xvals, xl.ticks))
    sl = axis_labels(series, sorted({k[0] for k in best}, key=_sort_key))
    numeric = all(isinstance(v, (int, float)) for v in xvals)
    fig, ax = plt.subplots(figsize=(6.5, 4.4))
    for s, name in zip(sorted({k[0] for k in best}, key=_sort_key), sl.ticks):
        pts = sorted(((xv, v) for (sv, xv), v in best.items() if sv == s), key=lambda p: _sort_key(p[0]))
        ax.plot([p[0] if numeric else xvals.index(p[0]) for p in pts], [p[1] for p in pts], marker="o",
                label=name)
    if numeric and xvals and all(v > 0 for v in xvals):
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
    # ticks at the values the study ran, labelled as the axis names them (not 2^k between them)
    ax.set_xticks([v if numeric else i for i, v in enumerate(xvals)], [tick[v] for v in xvals], fontsize=8)
    ax.set_xlabel(xl.text, fontsize=9)
    ax.set_ylabel(value_label(value), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(title=sl.text, fontsize=8, title_fontsize=8)
    head = title or f"{value_label(value)} vs {xl.title}"
    ax.set_title(f"{head}\nat the fastest setting of the other axes", fontsize=9)
    fig.tight_layout()
    return fig


def _numeric_axes(study: Any) -> list[tuple[str, int]]:
    out = []
    for k, vals in study.axes:
        if len(vals) > 1 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            out.append((k, len(vals)))
    return sorted(out, key=lambda kv: -kv[1])


def plot_study(result: Any, out_dir: str | Path) -> list[Path]:
    """Draw the study's plots (or the default pair) from a SweepResult into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = result.rows()
    study = result.study
    specs = list(study.plots)
    if not specs:
        numeric = _numeric_axes(study)
        if len(numeric) >= 2:
            specs.append({"kind": "heatmap", "x": numeric[0][0], "y": numeric[1][0]})
        if numeric:
            specs.append({"kind": "lines", "x": numeric[0][0], "series": "device"})
    devices = sorted({r.get("device") for r in rows if r.get("device")})
    written: list[Path] = []
    for i, p in enumerate(specs):
        value = p.get("value", "time_us")
        if p["kind"] == "heatmap":
            groups = devices if len(devices) > 1 and "device" not in (p["x"], p["y"]) else [None]
            for d in groups:
                sel = [r for r in rows if d is None or r.get("device") == d]
                name = f"{_slug(study.name)}-{i}-heatmap-{_slug(p['y'])}-x-{_slug(p['x'])}" + (
                    f"-{_slug(d)}" if d else "") + ".png"
                written.append(heatmap(sel, p["x"], p["y"], out / name, value,
                                       title=f"{study.name}: {value_label(value)}" + (f" on {d}" if d else "")))
        else:
            series = p.get("series", "device")
            name = f"{_slug(study.name)}-{i}-lines-{_slug(value)}-vs-{_slug(p['x'])}.png"
            written.append(scaling_lines(rows, p["x"], out / name, series=series if series != "device"
                                         else "device", value=value,
                                         title=f"{study.name}: {value_label(value)} vs "
                                               f"{axis_labels(p['x'], []).title}"))
    return written
