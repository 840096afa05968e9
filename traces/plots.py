"""Pictures of a trace (matplotlib, Agg, PNG): timeline, bandwidth, utilisation, roofline.

Every function draws on its own :class:`matplotlib.figure.Figure` with an Agg canvas (no pyplot,
no global backend switch, so it works headless and inside other programs), saves a PNG when given
a path, and returns a :class:`Picture` with the figure and the numbers it drew, which the tests
check against the trace.

- ``timeline``: one row per (core, pipe), one bar per slice, optionally within a time window.
- ``bandwidth``: each link's bandwidth counter over time against its capacity, and the L2 hit rate.
- ``utilisation``: heat map of busy % per core (rows) and pipe (columns).
- ``roofline``: cube flops or vector element-ops per second against ops per HBM/DDR byte, under the
  GM and compute roofs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from opsim.traces.layout import PIPES, ns_of, process_sort_key
from opsim.traces.summary import bandwidth_series, busy_matrix, summarize
from opsim.traces.trace import PIPE_ORDER, Trace

KINDS = ("timeline", "bandwidth", "utilisation", "roofline")

PIPE_COLOURS = {"MTE2": "#1f77b4", "MTE1": "#17becf", "CUBE": "#d62728", "FIXP": "#9467bd",
                "VECTOR": "#2ca02c", "MTE3": "#ff7f0e", "DMA": "#8c564b", "SCALAR": "#7f7f7f",
                "FLOWCTRL": "#bcbd22"}
MAX_TIMELINE_ROWS = 400


@dataclass
class Picture:
    """A drawn figure and what it shows (for checks and for callers that want the numbers)."""

    kind: str
    figure: Any
    path: str | None
    info: dict[str, Any] = field(default_factory=dict)

    def png_bytes(self, dpi: int = 100) -> bytes:
        import io
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=dpi)
        return buf.getvalue()


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - matplotlib is in the dev and plot extras
        raise ImportError("pictures need matplotlib (pip install 'opsim[plot]')") from exc
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _title(trace: Trace, what: str) -> str:
    m = trace.metadata
    who = " on ".join(x for x in (str(m.get("operator", "")), str(m.get("device", ""))) if x)
    return f"{what}: {who}" if who else what


def _finish(pic: Picture, dpi: int = 100) -> Picture:
    if pic.path is not None:
        pic.figure.savefig(pic.path, format="png", dpi=dpi)
    return pic


def plot(trace: Trace, kind: str = "timeline", path: str | None = None, **options: Any) -> Picture:
    """Draw ``kind`` (one of :data:`KINDS`) for ``trace``; save a PNG to ``path`` if given."""
    fns = {"timeline": timeline, "bandwidth": bandwidth, "utilisation": utilisation,
           "roofline": roofline}
    if kind not in fns:
        raise ValueError(f"plot kind {kind!r} is not one of {', '.join(KINDS)}")
    return fns[kind](trace, path, **options)


def timeline(trace: Trace, path: str | None = None, window: tuple[float, float] | None = None,
             max_rows: int = MAX_TIMELINE_ROWS) -> Picture:
    """Pipeline timeline: cores × pipes, one bar per slice; ``window`` = (start, end) in µs."""
    us_of = lambda c: ns_of(c, trace.clock_hz) / 1000.0  # noqa: E731  (the export's time grid)
    cols = trace.columns()
    tracks = trace.tracks
    rows = sorted({t for t in range(len(tracks)) if tracks[t][1] in PIPES and np.any(cols["track"] == t)},
                  key=lambda t: (process_sort_key(tracks[t][0]), PIPE_ORDER.index(tracks[t][1])))
    truncated = len(rows) > max_rows
    rows = rows[:max_rows]
    start, end = us_of(cols["start"]), us_of(cols["end"])
    sel = np.ones(len(trace), dtype=bool)
    if window is not None:
        lo, hi = float(window[0]), float(window[1])
        if not hi > lo:
            raise ValueError(f"timeline window {window} must be (start, end) in us with end > start")
        if len(trace):
            first, last = float(start.min()), float(end.max())
            if hi < first or lo > last:
                # every bar would be left out: an empty picture looks like an idle machine
                raise ValueError(f"timeline window {lo:g}:{hi:g} us lies outside the trace, which spans "
                                 f"{first:g}:{last:g} us")
        sel &= (end >= lo) & (start <= hi)
    fig = _figure(12, min(2.0 + 0.22 * max(len(rows), 1), 60))
    ax = fig.add_subplot()
    bars = 0
    labels = []
    for y, t in enumerate(rows):
        core, pipe = tracks[t]
        m = sel & (cols["track"] == t)
        spans = np.stack([start[m], end[m] - start[m]], axis=1)
        if len(spans):
            # thin white edges keep back-to-back instructions of a busy pipe distinguishable
            ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=PIPE_COLOURS.get(pipe, "#333333"),
                           edgecolors="white", linewidth=0.5 if len(spans) <= 400 else 0)
        bars += len(spans)
        labels.append(f"{core} {pipe}")
    if rows:
        ax.set_yticks(range(len(rows)), labels, fontsize=7 if len(rows) > 24 else 9)
        ax.set_ylim(len(rows) - 0.5, -0.5)
    else:
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no pipe slices (trace level launch)", ha="center", transform=ax.transAxes)
    ax.set_xlabel("time (µs)")
    if window is not None:
        ax.set_xlim(*window)
    elif len(trace):
        t0, t1 = trace.run_window()
        ax.set_xlim(float(us_of(t0)), float(us_of(t1)) or 1.0)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(_title(trace, "pipeline timeline") + (f" (first {max_rows} rows)" if truncated else ""),
                 loc="left")
    handles = [_patch(PIPE_COLOURS[p], p) for p in PIPE_ORDER
               if p in PIPE_COLOURS and any(tracks[t][1] == p for t in rows)]
    if handles:
        fig.legend(handles=handles, loc="outside lower center", fontsize=8, ncols=len(handles),
                   frameon=False)
    info = {"rows": labels, "bars": bars, "window": window, "truncated": truncated}
    return _finish(Picture("timeline", fig, path, info))


def _patch(colour: str, label: str) -> Any:
    from matplotlib.patches import Patch
    return Patch(facecolor=colour, label=label)


def bandwidth(trace: Trace, path: str | None = None) -> Picture:
    """Each link's bandwidth (GB/s) over time as a step line, with its capacity dashed."""
    series, hit = bandwidth_series(trace)
    caps = trace.metadata.get("link_capacity_GBps") or {}
    fig = _figure(12, 6 if hit[0] else 4.5)
    axes = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1)) if hit[0] else [fig.add_subplot()]
    ax = axes[0]
    us = 1e6 / trace.clock_hz
    _, t_end = trace.run_window()
    drawn = {}
    for k, (name, (ts, vs)) in enumerate(sorted(series.items())):
        colour = f"C{k}"
        x = np.append(np.asarray(ts, dtype=float), max(t_end, ts[-1])) * us
        y = np.append(np.asarray(vs), vs[-1])
        ax.step(x, y, where="post", color=colour, label=f"{name}", linewidth=1.2)
        if name in caps:
            ax.axhline(caps[name], color=colour, linestyle="--", linewidth=0.8,
                       label=f"{name} peak {caps[name]:g} GB/s")
        drawn[name] = len(ts)
    ax.set_ylabel("GB/s")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.set_title(_title(trace, "link bandwidth"))
    if drawn:
        ax.legend(fontsize=8, loc="upper right")
    else:
        ax.text(0.5, 0.5, "no bandwidth counters (trace level below tile)", ha="center",
                transform=ax.transAxes)
    if hit[0]:
        hx = np.append(np.asarray(hit[0], dtype=float), max(t_end, hit[0][-1])) * us
        axes[1].step(hx, np.append(hit[1], hit[1][-1]), where="post", color="C3")
        axes[1].set_ylabel("L2 hit %")
        axes[1].set_ylim(0, 100)
        axes[1].grid(alpha=0.3)
    axes[-1].set_xlabel("time (µs)")
    return _finish(Picture("bandwidth", fig, path, {"links": drawn, "capacity_GBps": dict(caps),
                                                     "l2_points": len(hit[0])}))


def utilisation(trace: Trace, path: str | None = None) -> Picture:
    """Heat map of busy % of the run per core (rows) and pipe (columns)."""
    s = summarize(trace)
    cores, pipes, m = busy_matrix(s)
    fig = _figure(2.5 + 1.1 * max(len(pipes), 1), min(2.0 + 0.25 * max(len(cores), 1), 40))
    ax = fig.add_subplot()
    if cores:
        im = ax.imshow(np.ma.masked_invalid(m), aspect="auto", cmap="viridis", vmin=0, vmax=100,
                       interpolation="nearest")
        ax.set_xticks(range(len(pipes)), pipes)
        ax.set_yticks(range(len(cores)), cores, fontsize=7 if len(cores) > 24 else 9)
        if len(cores) <= 64:
            for i in range(len(cores)):
                for j in range(len(pipes)):
                    if not np.isnan(m[i, j]):
                        ax.text(j, i, f"{m[i, j]:.0f}", ha="center", va="center", fontsize=7,
                                color="white" if m[i, j] < 60 else "black")
        fig.colorbar(im, ax=ax, label="busy % of the run")
    else:
        ax.text(0.5, 0.5, "no pipe slices (trace level launch)", ha="center", transform=ax.transAxes)
    ax.set_title(_title(trace, "utilisation"))
    return _finish(Picture("utilisation", fig, path, {"cores": cores, "pipes": pipes, "busy_pct": m}))


def roofline(trace: Trace, path: str | None = None) -> Picture:
    """The run on a roofline: ops/s vs ops per HBM/DDR byte (log-log), cube flops or vector
    element-ops; the L2 roof is drawn dashed, with the run placed by its L2-served bytes."""
    s = summarize(trace)
    r = s.roofline
    fig = _figure(8, 5.5)
    ax = fig.add_subplot()
    info: dict[str, Any] = {}
    if r is None or r.peak_ops_per_s is None or not r.points():
        ax.text(0.5, 0.5, "not enough in the trace for a roofline\n(needs vector and GM slices and "
                "device peaks in the metadata)", ha="center", transform=ax.transAxes)
        return _finish(Picture("roofline", fig, path, info))
    gm, *others = r.points()
    x, y = gm.intensity, gm.ops_per_s
    xs = np.geomspace(*r.extent(), 256)
    ax.loglog(xs, np.minimum(r.peak_ops_per_s, xs * gm.bytes_per_s) / 1e9, color="black", linewidth=1.5,
              label=f"roof: {gm.link} {gm.bytes_per_s / 1e9:g} GB/s, "
                    f"{r.dtype} {r.peak_ops_per_s / 1e12:.2f} T {r.unit}/s")
    for p in others:        # the L2: its roof dashed, the run placed by the bytes it served
        ax.loglog(xs, np.minimum(r.peak_ops_per_s, xs * p.bytes_per_s) / 1e9, color="grey",
                  linestyle="--", linewidth=1, label=f"{p.link} roof {p.bytes_per_s / 1e9:g} GB/s "
                                                     f"(against ops per {p.link}-served byte)")
        ax.loglog([p.intensity], [p.ops_per_s / 1e9], marker="o", markersize=8, markerfacecolor="none",
                  color="grey", linestyle="none",
                  label=f"this run per {p.link}-served byte: {p.intensity:.3f} ops/B")
    ax.loglog([x], [y / 1e9], marker="o", markersize=9, color="C3", linestyle="none",
              label=f"this run: {y / 1e9:.2f} G/s at {x:.3f} ops/B")
    ax.set_xlabel(f"arithmetic intensity ({r.unit} per {r.link} byte)")
    ax.set_ylabel(f"performance (G {r.unit}/s)")
    ax.grid(which="major", alpha=0.3)
    # minor ticks of log axes cost as much to lay out as the rest of the figure (measured 2x)
    from matplotlib.ticker import NullLocator
    ax.xaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_minor_locator(NullLocator())
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(_title(trace, "roofline"))
    info = {"point": (x, y), "roof_at_point": gm.roof, "ridge": gm.ridge, "points": r.points(),
            "peak_ops_per_s": r.peak_ops_per_s, "peak_bytes_per_s": r.peak_bytes_per_s}
    return _finish(Picture("roofline", fig, path, info))
