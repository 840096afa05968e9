"""The report's pictures as SVG, drawn directly from the trace (no matplotlib).

The HTML report (:mod:`traces.report`) shows the same four pictures as :mod:`traces.plots` —
pipeline timeline, link bandwidth (with the L2 hit rate), utilisation heat map, roofline — but as
small vector images written by hand: rendering them through matplotlib and PNG took ~95% of
``opsim demo`` (about 1 s per picture), this takes a few milliseconds. ``opsim trace plot`` and
:func:`traces.plots.plot` still draw PNGs with matplotlib for anyone who wants a raster file.

Lighter, not poorer: a timeline row merges bars closer than half a pixel (a busy pipe's
back-to-back instructions would otherwise emit one element each for nothing the eye can see);
every other mark of the matplotlib pictures is kept.

Each function returns an :class:`SvgPicture`: the SVG text and the numbers it drew.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from opsim.traces.layout import PIPES, ns_of, process_sort_key
from opsim.traces.plots import KINDS, MAX_TIMELINE_ROWS, PIPE_COLOURS
from opsim.traces.summary import bandwidth_series, busy_matrix, summarize
from opsim.traces.trace import PIPE_ORDER, Trace

__all__ = ["KINDS", "SvgPicture", "picture", "timeline", "bandwidth", "utilisation", "roofline"]

FONT = 'font-family="system-ui, -apple-system, Segoe UI, sans-serif"'
# matplotlib's default colour cycle (C0..C9), so the SVG and PNG pictures agree
CYCLE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
         "#bcbd22", "#17becf")
# viridis at 0, 0.125, ..., 1 (interpolated linearly in between)
VIRIDIS = ((68, 1, 84), (71, 44, 122), (59, 81, 139), (44, 113, 142), (33, 144, 141),
           (39, 173, 129), (92, 200, 99), (170, 220, 50), (253, 231, 37))


@dataclass
class SvgPicture:
    """One drawn picture: ``svg`` is a complete ``<svg>`` document; ``info`` what it shows."""

    kind: str
    svg: str
    info: dict[str, Any] = field(default_factory=dict)


def picture(trace: Trace, kind: str, **options: Any) -> SvgPicture:
    """Draw ``kind`` (one of :data:`KINDS`) for ``trace`` as SVG."""
    fns = {"timeline": timeline, "bandwidth": bandwidth, "utilisation": utilisation,
           "roofline": roofline}
    if kind not in fns:
        raise ValueError(f"plot kind {kind!r} is not one of {', '.join(KINDS)}")
    return fns[kind](trace, **options)


# -- drawing primitives ------------------------------------------------------------------------
def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _n(x: float) -> str:
    """A coordinate with at most two decimals (keeps the files small)."""
    return f"{x:.2f}".rstrip("0").rstrip(".")


class _Canvas:
    def __init__(self, width: float, height: float) -> None:
        self.width, self.height = width, height
        self.parts: list[str] = []

    def add(self, element: str) -> None:
        self.parts.append(element)

    def text(self, x: float, y: float, s: str, size: int = 11, anchor: str = "start",
             colour: str = "#1b1f24", rotate: bool = False, weight: str = "normal") -> None:
        tr = f' transform="rotate(-90 {_n(x)} {_n(y)})"' if rotate else ""
        self.add(f'<text x="{_n(x)}" y="{_n(y)}" font-size="{size}" text-anchor="{anchor}" '
                 f'fill="{colour}" font-weight="{weight}"{tr}>{_e(s)}</text>')

    def line(self, x0: float, y0: float, x1: float, y1: float, colour: str = "#1b1f24",
             width: float = 1.0, dash: str = "", opacity: float = 1.0) -> None:
        d = f' stroke-dasharray="{dash}"' if dash else ""
        o = f' stroke-opacity="{opacity}"' if opacity < 1 else ""
        self.add(f'<line x1="{_n(x0)}" y1="{_n(y0)}" x2="{_n(x1)}" y2="{_n(y1)}" stroke="{colour}" '
                 f'stroke-width="{width}"{d}{o}/>')

    def polyline(self, xs: Sequence[float], ys: Sequence[float], colour: str, width: float = 1.2,
                 dash: str = "") -> None:
        pts = " ".join(f"{_n(x)},{_n(y)}" for x, y in zip(xs, ys))
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="{width}"{d}/>')

    def rect(self, x: float, y: float, w: float, h: float, fill: str, stroke: str = "",
             stroke_width: float = 0.0) -> None:
        s = f' stroke="{stroke}" stroke-width="{stroke_width}"' if stroke else ""
        self.add(f'<rect x="{_n(x)}" y="{_n(y)}" width="{_n(max(w, 0.0))}" height="{_n(h)}" '
                 f'fill="{fill}"{s}/>')

    def svg(self) -> str:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_n(self.width)}" '
                f'height="{_n(self.height)}" viewBox="0 0 {_n(self.width)} {_n(self.height)}" {FONT}>'
                f'<rect width="100%" height="100%" fill="#ffffff"/>' + "".join(self.parts) + "</svg>")


def _nice_ticks(lo: float, hi: float, target: int = 6) -> list[float]:
    """Round tick values (1, 2, 5 × 10^k steps) covering [lo, hi]."""
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    out = []
    v = first
    while v <= hi + step * 1e-9:
        out.append(0.0 if abs(v) < step * 1e-9 else v)
        v += step
    return out


def _tick_label(v: float) -> str:
    return f"{v:.6g}"


def _frame(c: _Canvas, x0: float, y0: float, x1: float, y1: float) -> None:
    c.add(f'<rect x="{_n(x0)}" y="{_n(y0)}" width="{_n(x1 - x0)}" height="{_n(y1 - y0)}" '
          f'fill="none" stroke="#1b1f24" stroke-width="0.8"/>')


class _Axis:
    """Maps data values to pixels, linear or log10."""

    def __init__(self, lo: float, hi: float, p0: float, p1: float, log: bool = False) -> None:
        self.log = log
        if log:
            lo, hi = math.log10(lo), math.log10(hi)
        if not hi > lo:
            hi = lo + 1.0
        self.lo, self.hi, self.p0, self.p1 = lo, hi, p0, p1

    def __call__(self, v: float) -> float:
        if self.log:
            v = math.log10(v)
        return self.p0 + (v - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)

    def ticks(self) -> list[float]:
        if self.log:
            return [10.0 ** k for k in range(math.ceil(self.lo - 1e-9), math.floor(self.hi + 1e-9) + 1)]
        return _nice_ticks(self.lo, self.hi)


def _x_axis(c: _Canvas, ax: _Axis, y_bottom: float, y_top: float, label: str, grid: bool = True) -> None:
    for v in ax.ticks():
        x = ax(v)
        if grid:
            c.line(x, y_top, x, y_bottom, "#1b1f24", 0.6, opacity=0.15)
        c.line(x, y_bottom, x, y_bottom + 4)
        c.text(x, y_bottom + 15, _log_label(v) if ax.log else _tick_label(v), 10, "middle")
    if label:
        c.text((ax.p0 + ax.p1) / 2, y_bottom + 30, label, 11, "middle")


def _y_axis(c: _Canvas, ax: _Axis, x_left: float, x_right: float, label: str, grid: bool = True) -> None:
    for v in ax.ticks():
        y = ax(v)
        if grid:
            c.line(x_left, y, x_right, y, "#1b1f24", 0.6, opacity=0.15)
        c.line(x_left - 4, y, x_left, y)
        c.text(x_left - 6, y + 3.5, _log_label(v) if ax.log else _tick_label(v), 10, "end")
    if label:
        c.text(x_left - 44, (ax.p0 + ax.p1) / 2, label, 11, "middle", rotate=True)


def _log_label(v: float) -> str:
    k = round(math.log10(v))
    return f"1e{k}" if abs(k) > 3 else f"{v:g}"


def _title(trace: Trace, what: str) -> str:
    m = trace.metadata
    who = " on ".join(x for x in (str(m.get("operator", "")), str(m.get("device", ""))) if x)
    return f"{what}: {who}" if who else what


def _legend(c: _Canvas, x: float, y: float, items: Sequence[tuple[str, str, str]]) -> None:
    """Legend rows (colour, label, style: 'box' | 'line' | 'dash' | 'dot' | 'ring') from (x, y) down."""
    if items:   # a light backing so lines under the legend do not run through its text
        width = 24 + 6.2 * max(len(label) for _, label, _ in items)
        c.add(f'<rect x="{_n(x - 4)}" y="{_n(y - 12)}" width="{_n(width)}" height="{_n(14 * len(items) + 4)}" '
              f'fill="#ffffff" fill-opacity="0.85" stroke="#d0d7de" stroke-width="0.6"/>')
    for i, (colour, label, style) in enumerate(items):
        yy = y + 14 * i
        if style == "box":
            c.rect(x, yy - 8, 12, 9, colour)
        elif style == "dot":
            c.add(f'<circle cx="{_n(x + 6)}" cy="{_n(yy - 3.5)}" r="4" fill="{colour}"/>')
        elif style == "ring":
            c.add(f'<circle cx="{_n(x + 6)}" cy="{_n(yy - 3.5)}" r="3.5" fill="none" stroke="{colour}" '
                  f'stroke-width="1.3"/>')
        else:
            c.line(x, yy - 3.5, x + 14, yy - 3.5, colour, 1.4, "4 2" if style == "dash" else "")
        c.text(x + 18, yy, label, 10)


# -- the four pictures --------------------------------------------------------------------------
def timeline(trace: Trace, window: tuple[float, float] | None = None,
             max_rows: int = MAX_TIMELINE_ROWS) -> SvgPicture:
    """Pipeline timeline: cores × pipes, one bar per slice (bars closer than half a pixel merged)."""
    cols = trace.columns()
    tracks = trace.tracks
    present = set(np.unique(cols["track"]).tolist()) if len(trace) else set()
    rows = sorted((t for t in present if tracks[t][1] in PIPES),
                  key=lambda t: (process_sort_key(tracks[t][0]), PIPE_ORDER.index(tracks[t][1])))
    truncated = len(rows) > max_rows
    rows = rows[:max_rows]
    start = ns_of(cols["start"], trace.clock_hz) / 1000.0
    end = ns_of(cols["end"], trace.clock_hz) / 1000.0
    if window is not None:
        lo, hi = float(window[0]), float(window[1])
        if not hi > lo:
            raise ValueError(f"timeline window {window} must be (start, end) in us with end > start")
    elif len(trace):
        t0, t1 = trace.run_window()
        lo = float(ns_of(np.asarray([t0]), trace.clock_hz)[0]) / 1000.0
        hi = float(ns_of(np.asarray([t1]), trace.clock_hz)[0]) / 1000.0 or 1.0
    else:
        lo, hi = 0.0, 1.0
    label_w, row_h = 170.0, 14.0
    width = 1100.0
    plot_top = 30.0
    plot_h = row_h * max(len(rows), 1)
    height = plot_top + plot_h + 62.0
    c = _Canvas(width, height)
    x_of = _Axis(lo, hi, label_w, width - 20)
    c.text(label_w, 18, _title(trace, "pipeline timeline") +
           (f" (first {max_rows} rows)" if truncated else ""), 13, weight="600")
    bars = drawn = 0
    labels = []
    order = np.argsort(cols["track"], kind="stable") if len(trace) else np.zeros(0, dtype=np.int64)
    sorted_tracks = cols["track"][order] if len(trace) else cols["track"]
    px_per_us = (x_of.p1 - x_of.p0) / (x_of.hi - x_of.lo)
    for y, t in enumerate(rows):
        core, pipe = tracks[t]
        a, b = np.searchsorted(sorted_tracks, [t, t + 1])
        idx = np.sort(order[a:b])
        s, e = start[idx], end[idx]
        if window is not None:
            keep = (e >= lo) & (s <= hi)
            s, e = s[keep], e[keep]
        bars += len(s)
        labels.append(f"{core} {pipe}")
        top = plot_top + y * row_h + 0.1 * row_h
        colour = PIPE_COLOURS.get(pipe, "#333333")
        edge = len(s) <= 400            # thin white edges separate back-to-back instructions
        for x0, x1 in _merge(np.clip((s - lo) * px_per_us + x_of.p0, x_of.p0, x_of.p1),
                             np.clip((e - lo) * px_per_us + x_of.p0, x_of.p0, x_of.p1),
                             0.0 if edge else 0.5):
            c.rect(x0, top, x1 - x0, 0.8 * row_h, colour, "#ffffff" if edge else "", 0.5 if edge else 0)
            drawn += 1
        c.text(label_w - 6, top + 0.6 * row_h, f"{core} {pipe}", 9 if len(rows) <= 24 else 8, "end")
    if not rows:
        c.text((label_w + width) / 2, plot_top + plot_h / 2, "no pipe slices (trace level launch)", 11,
               "middle")
    _frame(c, x_of.p0, plot_top, x_of.p1, plot_top + plot_h)
    _x_axis(c, x_of, plot_top + plot_h, plot_top, "time (µs)")
    legend = [p for p in PIPE_ORDER if p in PIPE_COLOURS and any(tracks[t][1] == p for t in rows)]
    for i, p in enumerate(legend):
        x = label_w + i * 90
        c.rect(x, height - 14, 12, 9, PIPE_COLOURS[p])
        c.text(x + 16, height - 6, p, 10)
    info = {"rows": labels, "bars": bars, "drawn": drawn, "window": window, "truncated": truncated}
    return SvgPicture("timeline", c.svg(), info)


def _merge(x0: np.ndarray, x1: np.ndarray, gap: float) -> list[tuple[float, float]]:
    """Merge pixel spans whose gap is at most ``gap`` (input sorted by start)."""
    out: list[tuple[float, float]] = []
    if not len(x0):
        return out
    if gap <= 0:
        return list(zip(x0.tolist(), x1.tolist()))
    # a new bar starts where the gap to the furthest end so far exceeds ``gap``
    reach = np.maximum.accumulate(x1)
    breaks = np.flatnonzero(x0[1:] - reach[:-1] > gap) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks - 1, [len(x0) - 1]))
    return list(zip(x0[starts].tolist(), reach[ends].tolist()))


def bandwidth(trace: Trace) -> SvgPicture:
    """Each link's bandwidth (GB/s) over time as a step line, its capacity dashed; L2 hit rate."""
    series, hit = bandwidth_series(trace)
    caps = trace.metadata.get("link_capacity_GBps") or {}
    us = 1e6 / trace.clock_hz
    t_start, t_end = trace.run_window()
    width, left, right = 1100.0, 80.0, 1080.0
    top, main_h = 30.0, 260.0
    hit_h = 90.0 if hit[0] else 0.0
    height = top + main_h + (hit_h + 16 if hit[0] else 0) + 46
    c = _Canvas(width, height)
    c.text(left, 18, _title(trace, "link bandwidth"), 13, weight="600")
    t_last = max([t_end] + [ts[-1] for ts, _ in series.values()] + hit[0][-1:])
    t_first = min([t_start] + [ts[0] for ts, _ in series.values()] + hit[0][:1])
    x_of = _Axis(t_first * us, t_last * us, left, right)
    y_max = max([max(vs) for _, vs in series.values()] + [caps[n] for n in series if n in caps] + [1e-9])
    y_of = _Axis(0.0, y_max * 1.05, top + main_h, top)
    _y_axis(c, y_of, left, right, "GB/s")
    drawn: dict[str, int] = {}
    legend = []
    for k, (name, (ts, vs)) in enumerate(sorted(series.items())):
        colour = CYCLE[k % len(CYCLE)]
        xs, ys = _steps([t * us for t in ts] + [max(t_end, ts[-1]) * us], vs + vs[-1:])
        c.polyline([x_of(x) for x in xs], [y_of(y) for y in ys], colour)
        legend.append((colour, name, "line"))
        if name in caps:
            c.line(left, y_of(caps[name]), right, y_of(caps[name]), colour, 0.8, "5 3")
            legend.append((colour, f"{name} peak {caps[name]:g} GB/s", "dash"))
        drawn[name] = len(ts)
    _frame(c, left, top, right, top + main_h)
    if drawn:
        _legend(c, right - 210, top + 16, legend)
    else:
        c.text((left + right) / 2, top + main_h / 2, "no bandwidth counters (trace level below tile)",
               11, "middle")
    bottom = top + main_h
    if hit[0]:
        h_top = bottom + 16
        h_of = _Axis(0.0, 100.0, h_top + hit_h, h_top)
        xs, ys = _steps([t * us for t in hit[0]] + [max(t_end, hit[0][-1]) * us], hit[1] + hit[1][-1:])
        for v in (0, 50, 100):
            c.line(left, h_of(v), right, h_of(v), "#1b1f24", 0.6, opacity=0.15)
            c.text(left - 6, h_of(v) + 3.5, str(v), 10, "end")
        c.polyline([x_of(x) for x in xs], [h_of(y) for y in ys], CYCLE[3])
        c.text(left - 44, h_top + hit_h / 2, "L2 hit %", 11, "middle", rotate=True)
        _frame(c, left, h_top, right, h_top + hit_h)
        bottom = h_top + hit_h
    _x_axis(c, x_of, bottom, top, "time (µs)")
    return SvgPicture("bandwidth", c.svg(), {"links": drawn, "capacity_GBps": dict(caps),
                                             "l2_points": len(hit[0])})


def _steps(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    """Points of a 'post' step line through (xs[i], ys[i])."""
    px, py = [xs[0]], [ys[0]]
    for i in range(1, len(xs)):
        px += [xs[i], xs[i]]
        py += [ys[i - 1], ys[i]]
    return px, py


def _viridis(v: float) -> str:
    v = min(max(v / 100.0, 0.0), 1.0) * (len(VIRIDIS) - 1)
    i = min(int(v), len(VIRIDIS) - 2)
    f = v - i
    r, g, b = (round(a + (bb - a) * f) for a, bb in zip(VIRIDIS[i], VIRIDIS[i + 1]))
    return f"#{r:02x}{g:02x}{b:02x}"


def utilisation(trace: Trace) -> SvgPicture:
    """Heat map of busy % of the run per core (rows) and pipe (columns), with the values."""
    s = summarize(trace)
    cores, pipes, m = busy_matrix(s)
    cell_w, cell_h = 64.0, 18.0 if len(cores) <= 64 else 10.0
    left, top = 150.0, 30.0
    width = left + cell_w * max(len(pipes), 1) + 110
    height = top + cell_h * max(len(cores), 1) + 40
    c = _Canvas(width, height)
    c.text(8, 18, _title(trace, "utilisation"), 13, weight="600")
    if cores:
        for i, core in enumerate(cores):
            y = top + i * cell_h
            c.text(left - 6, y + cell_h * 0.68, core, 9 if len(cores) <= 24 else 8, "end")
            for j in range(len(pipes)):
                v = m[i, j]
                if np.isnan(v):
                    continue
                c.rect(left + j * cell_w, y, cell_w, cell_h, _viridis(v))
                if len(cores) <= 64:
                    c.text(left + (j + 0.5) * cell_w, y + cell_h * 0.68, f"{v:.0f}", 9, "middle",
                           "#ffffff" if v < 60 else "#000000")
        bottom = top + cell_h * len(cores)
        for j, p in enumerate(pipes):
            c.text(left + (j + 0.5) * cell_w, bottom + 14, p, 10, "middle")
        _frame(c, left, top, left + cell_w * len(pipes), bottom)
        # colour bar
        bx = left + cell_w * len(pipes) + 20
        for k in range(20):
            c.rect(bx, bottom - (k + 1) * (bottom - top) / 20, 14, (bottom - top) / 20 + 0.5,
                   _viridis(5 * k + 2.5))
        for v in (0, 50, 100):
            c.text(bx + 18, bottom - v / 100 * (bottom - top) + 3.5, str(v), 9)
        c.text(bx + 50, (top + bottom) / 2, "busy % of the run", 10, "middle", rotate=True)
    else:
        c.text(width / 2, top + 20, "no pipe slices (trace level launch)", 11, "middle")
    return SvgPicture("utilisation", c.svg(), {"cores": cores, "pipes": pipes, "busy_pct": m})


def roofline(trace: Trace) -> SvgPicture:
    """The run on a roofline: ops/s vs ops per HBM/DDR byte (log-log), cube flops or vector
    element-ops; the L2 roof is drawn dashed, with the run placed by its L2-served bytes."""
    s = summarize(trace)
    r = s.roofline
    width, height, left, right, top, bottom = 760.0, 470.0, 90.0, 740.0, 30.0, 410.0
    c = _Canvas(width, height)
    c.text(left, 18, _title(trace, "roofline"), 13, weight="600")
    if r is None or r.peak_ops_per_s is None or not r.points():
        c.text(width / 2, height / 2, "not enough in the trace for a roofline (needs vector and GM "
               "slices and device peaks in the metadata)", 11, "middle")
        return SvgPicture("roofline", c.svg(), {})
    peak = r.peak_ops_per_s
    gm, *others = r.points()
    x, y = gm.intensity, gm.ops_per_s
    lo, hi = r.extent()
    # the roofs are straight lines on log axes: their ends and ridges are all the points needed
    xs = np.asarray(sorted({lo, hi, *(p.ridge for p in (gm, *others) if lo < p.ridge < hi)}))
    curves = [np.minimum(peak, xs * p.bytes_per_s) / 1e9 for p in (gm, *others)]
    point = max(y / 1e9, 1e-30)
    y_lo = min(min(float(cv.min()) for cv in curves), point) / 2
    y_hi = max(max(float(cv.max()) for cv in curves), point) * 2
    x_of = _Axis(lo, hi, left, right, log=True)
    y_of = _Axis(y_lo, y_hi, bottom, top, log=True)
    _x_axis(c, x_of, bottom, top, f"arithmetic intensity ({r.unit} per {gm.link} byte)")
    _y_axis(c, y_of, left, right, f"performance (G {r.unit}/s)")
    c.polyline([x_of(v) for v in xs], [y_of(v) for v in curves[0]], "#000000", 1.5)
    legend = [("#000000", f"roof: {gm.link} {gm.bytes_per_s / 1e9:g} GB/s, {r.dtype} "
                          f"{peak / 1e12:.2f} T {r.unit}/s", "line")]
    for p, curve in zip(others, curves[1:]):    # the L2: its roof dashed, the run by the bytes it served
        c.polyline([x_of(v) for v in xs], [y_of(v) for v in curve], "#808080", 1.0, "5 3")
        legend.append(("#808080", f"{p.link} roof {p.bytes_per_s / 1e9:g} GB/s "
                                  f"(against ops per {p.link}-served byte)", "dash"))
        c.add(f'<circle cx="{_n(x_of(p.intensity))}" cy="{_n(y_of(point))}" r="5" fill="none" '
              f'stroke="#808080" stroke-width="1.5"/>')
        legend.append(("#808080", f"this run per {p.link}-served byte: {p.intensity:.3f} ops/B", "ring"))
    c.add(f'<circle cx="{_n(x_of(x))}" cy="{_n(y_of(point))}" r="5.5" fill="{CYCLE[3]}"/>')
    legend.append((CYCLE[3], f"this run: {y / 1e9:.2f} G/s at {x:.3f} ops/B", "dot"))
    _frame(c, left, top, right, bottom)
    _legend(c, right - 330, bottom - 14 * len(legend) - 4, legend)
    info = {"point": (x, y), "roof_at_point": gm.roof, "ridge": gm.ridge, "points": r.points(),
            "peak_ops_per_s": peak, "peak_bytes_per_s": r.peak_bytes_per_s}
    return SvgPicture("roofline", c.svg(), info)
