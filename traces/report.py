"""A self-contained HTML report of one run, and an index page over several.

One file, nothing fetched when it is opened: the pictures are inline SVG images (drawn by
:mod:`traces.svg` without matplotlib, a few ms each), the styles are
inline, the only script is a few lines that mark how many pictures decoded (the browser test
reads it). Sections: what ran and the verdict (cycles, time, bound and why), the trace summary
(busy % per core and pipe, links achieved vs peak, UB peak, L2 hit rate), the four pictures
(timeline, bandwidth, utilisation, roofline), the tiling, the run statistics, and the device
spec with the provenance of every number.

This module takes plain data (a :class:`~traces.trace.Trace`, a stats dict, provenance rows);
:func:`write_report` also accepts anything shaped like ``opsim.RunResult`` (duck-typed, so the
traces layer never imports opsim or the simulator).
"""
from __future__ import annotations

import base64
import html
import json
import os
import re
from dataclasses import fields, is_dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from opsim.traces.svg import KINDS, picture
from opsim.traces.summary import Summary, busy_matrix, summarize
from opsim.traces.trace import Trace

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto;
       max-width: 1200px; padding: 0 16px; color: #1b1f24; background: #fff; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 28px;
     border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
.sub { color: #57606a; margin-top: 0; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: #f6f8fa; } td.l, th.l { text-align: left; }
.verdict { font-size: 16px; padding: 10px 14px; background: #f6f8fa; border-left: 4px solid #0969da; }
.bound { font-weight: 600; }
img { max-width: 100%; border: 1px solid #d0d7de; margin: 8px 0; }
.kind-source { color: #1a7f37; } .kind-assumption { color: #9a6700; } .kind-override { color: #cf222e; }
.note { color: #57606a; font-size: 12px; }
details { margin: 8px 0; } summary { cursor: pointer; }
"""

# Marks <body data-images-loaded="n/m"> once the page has loaded; no network, no other effect.
SCRIPT = """
window.addEventListener("load", function () {
  var imgs = document.images, ok = 0;
  for (var i = 0; i < imgs.length; i++) { if (imgs[i].complete && imgs[i].naturalWidth > 0) ok++; }
  document.body.setAttribute("data-images-loaded", ok + "/" + imgs.length);
});
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.6g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return ", ".join(f"{k}={_fmt(x)}" for k, x in v.items())
    return str(v)


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], left: int = 1,
           classes: Sequence[str] | None = None) -> str:
    out = ["<table><tr>"]
    out += [f'<th class="{"l" if i < left else ""}">{_e(h)}</th>' for i, h in enumerate(headers)]
    out.append("</tr>")
    for r in rows:
        out.append("<tr>")
        for i, c in enumerate(r):
            cls = "l" if i < left else ""
            if classes and i < len(classes) and classes[i]:
                cls += " " + classes[i].format(value=c)
            out.append(f'<td class="{cls.strip()}">{_e(_fmt(c))}</td>')
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


def _kv(pairs: Iterable[tuple[str, Any]]) -> str:
    return _table(["", "value"], [(k, v) for k, v in pairs], left=2)


def _img(trace: Trace, kind: str, **options: Any) -> str:
    # an <img> with a data: URL, not inline <svg>: each picture stays an image of its own
    # (its ids and styles cannot clash with the page's, the browser check counts it as decoded)
    data = base64.b64encode(picture(trace, kind, **options).svg.encode("utf-8")).decode("ascii")
    return f'<img alt="{_e(kind)}" src="data:image/svg+xml;base64,{data}">'


def _summary_html(s: Summary) -> str:
    parts = []
    cores, pipes, m = busy_matrix(s)
    if cores:
        rows = [[c] + ["" if np.isnan(v) else f"{v:.1f}" for v in m[i]] for i, c in enumerate(cores)]
        body = _table(["core"] + pipes, rows)
        parts.append("<h3>Busy % of the run per core and pipe</h3>" +
                     (f"<details><summary>{len(cores)} cores</summary>{body}</details>"
                      if len(cores) > 16 else body))
    if s.links:
        rows = [[u.name, f"{u.bytes:.0f}", f"{u.achieved_GBps:.2f}",
                 "" if u.peak_GBps is None else f"{u.peak_GBps:.1f}",
                 "" if u.utilisation is None else f"{100 * u.utilisation:.2f}", f"{u.max_GBps:.2f}"]
                for u in s.links]
        parts.append("<h3>Links: achieved vs peak</h3>" +
                     _table(["link", "bytes (from the trace)", "achieved GB/s", "peak GB/s", "util %",
                             "max GB/s"], rows))
    facts = []
    if s.ub_peak_bytes is not None:     # a trace that does not record it shows no row, not 0
        facts.append(("UB / local memory peak", f"{s.ub_peak_bytes} B"))
    if s.l2_hit_rate is not None:
        facts.append(("L2 hit rate (bytes read)", f"{100 * s.l2_hit_rate:.1f}%"))
    r = s.roofline
    points = r.points() if r is not None else ()    # none without a GM or compute peak
    if r is not None and points:
        gm = points[0]
        facts.append((r.unit, f"{r.ops:.0f} ({r.dtype})"))
        facts.append(("HBM/DDR bytes (GM link)", f"{r.gm_bytes:.0f}"))
        facts.append(("arithmetic intensity", f"{gm.intensity:.4f} per GM byte"))
        facts.append(("achieved", f"{r.ops_per_s / 1e9:.2f} G/s (roof there "
                                  f"{gm.roof / 1e9:.2f} G/s)"))
        for p in points[1:]:    # the roofline's second placement, by the bytes the L2 served
            facts.append((f"{p.link}-served bytes", f"{r.l2_bytes:.0f}"))
            facts.append((f"arithmetic intensity ({p.link})", f"{p.intensity:.4f} per {p.link}-served byte "
                                                              f"({p.link} roof there {p.roof / 1e9:.2f} G/s)"))
    if facts:
        parts.append(_kv(facts))
    if s.notes:
        parts.append("".join(f'<p class="note">{_e(n)}</p>' for n in s.notes))
    return "".join(parts)


def _launches_html(trace: Trace, records: Sequence[Any] | None = None) -> str:
    """The op_summary table (one row per kernel launch, docs/profiling.md), its main columns:
    from the run's own launch records when given, else read back from the trace."""
    from opsim.traces.tables import op_summary, records_from_trace
    note = ""
    if not records:
        records = records_from_trace(trace)
        if trace.level == "tile":
            note = (" Read from a tile-level trace: a slice spans a tile of a pipe with the waits "
                    "inside it, so the ratios are upper bounds.")
        elif trace.level == "launch":
            note = " Read from a launch-level trace: it has no pipe slices, so the pipe columns are N/A."
    if not records:
        return ""
    head, rows = op_summary(records, str(trace.metadata.get("gm_link", "HBM")))
    keep = [i for i, h in enumerate(head) if h in (
        "Op Name", "Task Type", "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Mix Block Dim",
        "Input Shapes", "Output Shapes") or h.endswith("_ratio") or h.endswith("bw(GB/s)")]
    return ("<h2>Launches (op_summary)</h2>"
            '<p class="note">One row per kernel launch; ratios are busy cycles over the cores\' '
            f"block cycles; bandwidths are the launch's bytes on each link over its duration.{_e(note)}</p>" +
            _table([head[i] for i in keep], [[r[i] for i in keep] for r in rows], left=2))


def render_report(*, title: str, facts: Sequence[tuple[str, Any]], trace: Trace | None,
                  stats: Mapping[str, Any] | None = None, tiling: Mapping[str, Any] | None = None,
                  spec_rows: Sequence[Sequence[Any]] = (), timeline_rows: int = 96,
                  records: Sequence[Any] | None = None) -> str:
    """The report as one HTML string (plain data in, no opsim or simulator objects).

    ``records``: the run's launch records (``traces.tables.LaunchRecord``), exact at any trace
    level; without them the op_summary table is read back from the trace."""
    stats = dict(stats or {})
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
             f"<link rel=\"icon\" href=\"data:,\"><title>{_e(title)}</title>"
             f"<style>{CSS}</style></head><body>",
             f"<h1>{_e(title)}</h1>"]
    s = summarize(trace) if trace is not None else None
    bound = s.bound if s is not None and s.bound not in ("unknown", "none") else stats.get("bound")
    reason = (s.bound_reason if s is not None and s.bound not in ("unknown", "none")
              else stats.get("bound_reason", ""))
    cycles = stats.get("cycles", s.cycles if s is not None else None)
    time_us = stats.get("time_us", s.time_us if s is not None else None)
    if cycles is not None:
        parts.append(f'<p class="verdict">{_e(cycles)} cycles = {_e(_fmt(time_us))} µs; '
                     f'<span class="bound">{_e(bound or "?")} bound</span>: {_e(reason or "")}</p>')
    parts.append("<h2>Run</h2>" + _kv(facts))
    if s is not None and trace is not None:     # s is the trace's summary
        parts.append(f"<h2>Trace summary ({_e(s.level)} level)</h2>" + _summary_html(s))
        parts.append(_launches_html(trace, records))
        parts.append("<h2>Pictures</h2>")
        for kind in KINDS:
            opts = {"max_rows": timeline_rows} if kind == "timeline" else {}
            parts.append(f"<h3>{_e(kind)}</h3>" + _img(trace, kind, **opts))
    else:
        parts.append('<p class="note">No trace was recorded for this run (trace level off or '
                     'numeric mode), so there is no timeline.</p>')
    if tiling:
        parts.append("<h2>Tiling</h2>" + _kv(tiling.items()))
    if stats:
        flat = [(k, v) for k, v in stats.items() if not isinstance(v, Mapping)]
        nested = [(k, v) for k, v in stats.items() if isinstance(v, Mapping)]
        parts.append("<h2>Run statistics</h2>" + _kv(flat))
        for k, v in nested:
            if v and all(isinstance(x, Mapping) for x in v.values()):
                cols = sorted({c for x in v.values() for c in x})
                parts.append(f"<h3>{_e(k)}</h3>" +
                             _table([k] + cols, [[name] + [x.get(c, "") for c in cols]
                                                 for name, x in v.items()]))
            else:
                parts.append(f"<h3>{_e(k)}</h3>" + _kv(v.items()))
    if spec_rows:
        parts.append("<h2>Device spec and provenance</h2>"
                     '<p class="note">Every number of the device file with its source, or the word '
                     'assumption, or the what-if override that changed it.</p>' +
                     _table(["field", "value", "kind", "source / assumption"], spec_rows, left=4,
                            classes=["", "", "kind-{value}", ""]))
        # the docs/sources.md entries those texts cite, with the documents behind them
        from opsim.devices.sources import resolve
        cited: list = []
        for row in spec_rows:
            for entry in resolve(str(row[3]), documents=True):
                if entry not in cited:
                    cited.append(entry)
        if cited:
            # addresses as text without their scheme: the report links to nothing outside itself
            def bare(s: str) -> str:
                return re.sub(r"https?://", "", s)
            parts.append("<h3>Sources (docs/sources.md)</h3>" +
                         _table(["id", "fact", "source"],
                                [[e.id, bare(e.summary), bare(" ".join(e.sources))] for e in cited],
                                left=3))
    if trace is not None and trace.metadata:
        meta = {k: v for k, v in trace.metadata.items() if k != "tiling"}
        parts.append("<h2>Trace metadata</h2>" +
                     _kv((k, json.dumps(v, default=str) if isinstance(v, (dict, list)) else v)
                         for k, v in meta.items()))
    parts.append(f"<script>{SCRIPT}</script></body></html>")
    return "".join(parts)


def _tiling_dict(tiling: Any) -> dict[str, Any]:
    if tiling is None:
        return {}
    if isinstance(tiling, Mapping):
        return dict(tiling)
    if is_dataclass(tiling):
        return {f.name: getattr(tiling, f.name) for f in fields(tiling)
                if isinstance(getattr(tiling, f.name), (int, float, str, bool, type(None)))}
    return {"tiling": str(tiling)}


def spec_provenance_rows(spec: Any) -> list[tuple[str, str, str, str]]:
    """(field, value, kind, text) rows of a DeviceSpec (empty when there is none)."""
    if spec is None:
        return []
    from opsim.devices.report import provenance_rows
    return provenance_rows(spec)


def write_report(result: Any, path: str, spec: Any = None) -> str:
    """Write the HTML report of ``result`` (an ``opsim.RunResult`` or alike) to ``path``.

    ``spec`` is the :class:`devices.DeviceSpec` the run used; without it ``result.spec`` (an
    ``opsim.RunResult`` carries the spec it ran on, what-if overrides and device files included)
    or, for a result without one, the catalogue entry named ``result.device`` is shown.
    Returns ``path``.
    """
    trace = getattr(result, "trace", None)
    stats = dict(getattr(result, "stats", None) or {})
    device = getattr(result, "device", "")
    if spec is None:
        spec = getattr(result, "spec", None)
    if spec is None and device:
        try:
            from opsim.devices import load
            spec = load(device)
        except Exception:   # an ad-hoc device file that is gone: report without the spec
            spec = None
    meta = trace.metadata if trace is not None else {}
    outputs = getattr(result, "outputs", None) or {}
    facts: list[tuple[str, Any]] = [
        ("operator", getattr(result, "op", meta.get("operator", ""))),
        ("device", device or meta.get("device", "")),
        ("product", getattr(spec, "product", meta.get("product", ""))),
        ("mode", getattr(result, "mode", meta.get("mode", ""))),
    ]
    if meta.get("shapes"):
        facts.append(("shapes", meta["shapes"]))
    if meta.get("dtypes"):
        facts.append(("dtypes", meta["dtypes"]))
    for name, arr in outputs.items():
        facts.append((f"output {name}", f"{list(np.shape(arr))} {getattr(arr, 'dtype', '')}"))
    facts += [("cycles", getattr(result, "cycles", stats.get("cycles"))),
              ("time (µs)", getattr(result, "time_us", stats.get("time_us"))),
              ("trace level", trace.level if trace is not None else "off"),
              ("opsim version", meta.get("opsim_version", ""))]
    title = f"{facts[0][1]} on {facts[1][1]}"
    page = render_report(title=title, facts=facts, trace=trace, stats=stats,
                         tiling=_tiling_dict(getattr(result, "tiling", None)) or meta.get("tiling"),
                         spec_rows=spec_provenance_rows(spec),
                         records=tuple(getattr(result, "launch_records", None) or ()))
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path


INDEX_COLUMNS = ("op", "device", "dtype", "cycles", "time_us", "bound", "check")


def write_index(entries: list[dict[str, Any]], path: str, title: str = "opsim runs") -> str:
    """An index page linking the reports (``entry["report"]``) and traces (``entry["trace"]``)."""
    extra = sorted({k for e in entries for k in e} - set(INDEX_COLUMNS) - {"report", "trace"})
    cols = [c for c in INDEX_COLUMNS if any(c in e for e in entries)] + extra
    rows = []
    for e in entries:
        cells = [f'<td class="l">{_e(_fmt(e.get(c, "")))}</td>' if i < 2 else
                 f"<td>{_e(_fmt(e.get(c, '')))}</td>" for i, c in enumerate(cols)]
        links = []
        if e.get("report"):
            links.append(f'<a href="{_e(e["report"])}">report</a>')
        if e.get("trace"):
            links.append(f'<a href="{_e(e["trace"])}">trace</a>')
        rows.append("<tr>" + "".join(cells) + f'<td class="l">{" · ".join(links)}</td></tr>')
    head = "".join(f'<th class="{"l" if i < 2 else ""}">{_e(c)}</th>' for i, c in enumerate(cols))
    page = (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<link rel=\"icon\" href=\"data:,\"><title>{_e(title)}</title><style>{CSS}</style></head>"
            f"<body><h1>{_e(title)}</h1><p class=\"sub\">{len(entries)} runs. Traces open in "
            f"ui.perfetto.dev or chrome://tracing.</p><table><tr>{head}<th class=\"l\">files</th></tr>"
            + "".join(rows) + f"</table><script>{SCRIPT}</script></body></html>")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path
