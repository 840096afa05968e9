"""Pictures of a sweep (matplotlib, Agg): heat maps over two axes and scaling lines.

- heat map: ``value`` (default ``time_us``) over axis ``x`` × axis ``y``; every other axis is
  reduced to its best (smallest) value, so a cell reads "the fastest this pair can be"; one
  picture per device when the study has several. Cells whose points all failed are blank.
- scaling lines: ``value`` against axis ``x``, one line per value of ``series`` (default the
  device), other axes reduced to their best value.

A study names its pictures in ``[[plot]]`` tables; without any, :func:`plot_study` draws a heat
map over the two numeric axes with the most values and scaling lines over the numeric axis
with the most values.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = ["plot_study", "heatmap", "scaling_lines"]


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
    best: dict[tuple, float] = {}
    for r in rows:
        if r.get("status") != "ok" or r.get(value) is None:
            continue
        k = tuple(_axis_value(r, a) for a in keys)
        v = float(r[value])
        if k not in best or v < best[k]:
            best[k] = v
    return best


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s)


def heatmap(rows: Sequence[Mapping[str, Any]], x: str, y: str, path: str | Path, value: str = "time_us",
            title: str = "") -> Path:
    """One heat map of ``value`` over ``x`` × ``y`` (best over the other axes)."""
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
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(xs), 1.0 + 0.5 * len(ys)))
    im = ax.imshow(np.ma.masked_invalid(grid), origin="lower", aspect="auto", cmap="viridis_r")
    ax.set_xticks(range(len(xs)), [str(v) for v in xs])
    ax.set_yticks(range(len(ys)), [str(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    finite = grid[np.isfinite(grid)]
    for i in range(len(ys)):
        for j in range(len(xs)):
            if math.isfinite(grid[i, j]):
                dark = finite.size and grid[i, j] > (finite.min() + finite.max()) / 2
                ax.text(j, i, f"{grid[i, j]:.3g}", ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")
            else:
                ax.text(j, i, "x", ha="center", va="center", fontsize=7, color="grey")
    fig.colorbar(im, ax=ax, label=value)
    ax.set_title(title or f"{value} (best over other axes; x = no feasible point)", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def scaling_lines(rows: Sequence[Mapping[str, Any]], x: str, path: str | Path, series: str = "device",
                  value: str = "time_us", title: str = "") -> Path:
    """``value`` against ``x``, one line per ``series`` value (best over the other axes)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best = _best(rows, (series, x), value)
    fig, ax = plt.subplots(figsize=(6, 4))
    for s in sorted({k[0] for k in best}, key=_sort_key):
        pts = sorted(((xv, v) for (sv, xv), v in best.items() if sv == s), key=lambda p: _sort_key(p[0]))
        numeric = all(isinstance(p[0], (int, float)) for p in pts)
        xs = [p[0] if numeric else i for i, p in enumerate(pts)]
        ax.plot(xs, [p[1] for p in pts], marker="o", label=str(s))
        if not numeric:
            ax.set_xticks(xs, [str(p[0]) for p in pts])
    if all(isinstance(k[1], (int, float)) and k[1] > 0 for k in best) and best:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(x)
    ax.set_ylabel(value)
    ax.grid(True, alpha=0.3)
    ax.legend(title=series, fontsize=8)
    ax.set_title(title or f"{value} vs {x} (best over other axes)", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
                                       title=f"{study.name}: {value}" + (f" on {d}" if d else "")))
        else:
            series = p.get("series", "device")
            name = f"{_slug(study.name)}-{i}-lines-{_slug(value)}-vs-{_slug(p['x'])}.png"
            written.append(scaling_lines(rows, p["x"], out / name, series=series if series != "device"
                                         else "device", value=value,
                                         title=f"{study.name}: {value} vs {p['x']}"))
    return written
