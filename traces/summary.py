"""What a trace says about a run, computed from the trace alone.

Per core and pipe: busy cycles and busy % of the run. Per link: bytes carried (the integral of the
bandwidth counter, or the run's own count in the metadata where the trace has no counter),
achieved vs peak GB/s, the highest rate seen. Per core: the peak occupancy of the local memory
(UB, or the DSP's private memory): the run's own count in the metadata, else the occupancy
counters; a trace with neither has no UB peak (None, not 0). The L2 hit rate. And the bound — memory,
vector, cube, scalar or launch — with the reason, by the same rule ``opsim.run`` applies to the
live device: a run is launch bound when the launch overhead is at least half of its time, else
bound by the category of its busiest pipe (MTE*/DMA/FIXP memory, VECTOR vector, CUBE cube,
SCALAR scalar). Everything that rule needs beyond the slices (link capacities, launch overhead,
clock, peak rates) travels in the trace's metadata.

At ``tile`` level a slice covers a whole tile of one pipe including short waits inside it, so busy
figures are upper bounds; at ``launch`` level there are no pipe slices and only the launch rule
can decide.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from opsim.traces.bounds import cap_text, core_kind
from opsim.traces.layout import GM_PIPES, PIPES, process_sort_key
from opsim.traces.trace import PIPE_ORDER, Trace

BOUND_OF_PIPE = {"MTE2": "memory", "MTE3": "memory", "MTE1": "memory", "FIXP": "memory",
                 "DMA": "memory", "VECTOR": "vector", "CUBE": "cube", "SCALAR": "scalar"}
LOCAL_MEMORIES = ("UB", "PRIVATE")


@dataclass(frozen=True)
class PipeUse:
    core: str
    pipe: str
    busy_cycles: int
    busy_pct: float
    slices: int


@dataclass(frozen=True)
class LinkUse:
    name: str
    bytes: float
    achieved_GBps: float
    peak_GBps: float | None
    max_GBps: float

    @property
    def utilisation(self) -> float | None:
        return self.achieved_GBps / self.peak_GBps if self.peak_GBps else None


@dataclass(frozen=True)
class Roofline:
    """Where the run sits: operations per HBM/DDR byte and per second, against the roofs.

    The memory roof is the GM link (HBM/DDR) and the intensity counts the bytes that link
    carried; the L2 roof (``l2_bytes_per_s``) is drawn apart, with the run placed a second time
    by the bytes the L2 served (:meth:`points`, what every picture draws).

    A run with cube work (``Mmad``) is placed by its cube flops (2 per multiply-accumulate)
    against the cube peak; otherwise by its vector element-operations (one per element per
    vector instruction) against the vector peak of the dtype that did most of them.
    """

    ops: float                  # operations of ``unit``
    gm_bytes: float             # bytes the GM link (HBM/DDR) carried (L2 hits are not GM traffic)
    seconds: float
    dtype: str                  # dtype whose peak makes the compute roof
    peak_ops_per_s: float | None
    peak_bytes_per_s: float | None   # GM link
    l2_bytes_per_s: float | None = None
    unit: str = "vector element-ops"
    link: str = "GM"            # the GM link's name (HBM, DDR)
    l2_bytes: float = 0.0       # bytes the L2 served (its own roof)

    @property
    def intensity(self) -> float:
        return self.ops / self.gm_bytes if self.gm_bytes else float("inf")

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.seconds if self.seconds else 0.0

    def roof(self, intensity: float) -> float | None:
        """Attainable ops/s at ``intensity`` under the GM roof and the compute roof."""
        if self.peak_ops_per_s is None or self.peak_bytes_per_s is None:
            return None
        return min(self.peak_ops_per_s, intensity * self.peak_bytes_per_s)

    def points(self) -> tuple["RooflinePoint", ...]:
        """Where a picture places the run (both the PNG and the SVG draw these): by the bytes the
        GM link carried under the GM roof, and, when the L2 served bytes, a second time by those
        under the L2 roof. Empty without the compute and GM peaks or GM bytes."""
        peak = self.peak_ops_per_s
        if peak is None or self.peak_bytes_per_s is None or not self.gm_bytes:
            return ()
        out = [RooflinePoint(self.link, self.intensity, self.ops_per_s, self.peak_bytes_per_s,
                             min(peak, self.intensity * self.peak_bytes_per_s), peak / self.peak_bytes_per_s)]
        if self.l2_bytes and self.l2_bytes_per_s:
            x = self.ops / self.l2_bytes
            out.append(RooflinePoint("L2", x, self.ops_per_s, self.l2_bytes_per_s,
                                     min(peak, x * self.l2_bytes_per_s), peak / self.l2_bytes_per_s))
        return tuple(out)

    def extent(self) -> tuple[float, float]:
        """The intensities a picture spans: two decades beyond every point and every ridge."""
        pts = self.points()
        xs = [p.intensity for p in pts] + [p.ridge for p in pts]
        return (min(xs) / 100, max(xs) * 100) if xs else (1.0, 1.0)


@dataclass(frozen=True)
class RooflinePoint:
    """The run against one memory link's roof: its operations per byte that link carried."""

    link: str                   # the GM link's name (HBM, DDR) or "L2"
    intensity: float            # operations per byte the link carried
    ops_per_s: float
    bytes_per_s: float          # the link's peak
    roof: float                 # attainable ops/s at ``intensity``: min(compute peak, intensity x link peak)
    ridge: float                # the intensity where the link's roof meets the compute roof


@dataclass(frozen=True)
class Summary:
    operator: str
    device: str
    level: str
    clock_hz: float
    start: int
    end: int
    launches: int
    pipes: tuple[PipeUse, ...]
    links: tuple[LinkUse, ...]
    local_peak: dict[str, int]          # core -> peak bytes of its UB / private memory
    ub_peak_bytes: int | None           # None: the trace records no local-memory occupancy
    l2_hit_rate: float | None
    bound: str
    bound_reason: str
    roofline: Roofline | None
    notes: tuple[str, ...] = field(default=())

    @property
    def cycles(self) -> int:
        return self.end - self.start

    @property
    def time_us(self) -> float:
        return self.cycles * 1e6 / self.clock_hz

    def pipe_busy(self) -> dict[str, int]:
        """Busiest core's busy cycles per pipe (what ``stats['pipe_busy']`` reports)."""
        out: dict[str, int] = {}
        for p in self.pipes:
            out[p.pipe] = max(out.get(p.pipe, 0), p.busy_cycles)
        return out

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cycles"], d["time_us"] = self.cycles, self.time_us
        if self.roofline is not None:
            d["roofline"].update(intensity=self.roofline.intensity, ops_per_s=self.roofline.ops_per_s)
        return d

    def table(self) -> str:
        """The summary as plain-text tables (what ``opsim trace summary`` prints)."""
        return format_summary(self)


def summarize(trace: Trace) -> Summary:
    meta = trace.metadata
    clk = trace.clock_hz
    start, end = trace.run_window()
    cycles = end - start
    notes: list[str] = []
    cols = trace.columns()
    tracks = trace.tracks
    dur = cols["end"] - cols["start"]

    # pipes: busy = sum of slice durations on each (core, pipe) row
    pipe_rows = [t for t, (p, th) in enumerate(tracks) if th in PIPES]
    busy = np.bincount(cols["track"], weights=dur, minlength=len(tracks)) if len(trace) else np.zeros(len(tracks))
    count = np.bincount(cols["track"], minlength=len(tracks)) if len(trace) else np.zeros(len(tracks), int)
    pipes = []
    for t in pipe_rows:
        if count[t] == 0:
            continue
        core, pipe = tracks[t]
        b = int(busy[t])
        pipes.append(PipeUse(core, pipe, b, 100.0 * b / cycles if cycles else 0.0, int(count[t])))
    pipes.sort(key=lambda u: (process_sort_key(u.core), PIPE_ORDER.index(u.pipe)))
    launches = sum(int(count[t]) for t, (p, _) in enumerate(tracks) if p == "host")
    if trace.level == "tile":
        notes.append("tile level: a slice spans a whole tile of a pipe, so busy % is an upper bound")
    if trace.level == "launch":
        notes.append("launch level: no pipe slices; only the launch rule can decide the bound")

    # counters: links (GB/s step functions), L2 hit rate, local-memory occupancy
    series: dict[tuple[str, str], tuple[list[int], list[float]]] = {}
    for proc, name, time, value in trace.counters():
        ts, vs = series.setdefault((proc, name), ([], []))
        ts.append(time)
        vs.append(value)
    caps = meta.get("link_capacity_GBps") or {}
    seconds = cycles / clk if cycles else 0.0
    links = []
    exact = meta.get("link_bytes_carried") or {}
    top = meta.get("link_max_GBps") or {}
    for (proc, name), (ts, vs) in series.items():
        if proc != "memory" or not name.endswith(" GB/s"):
            continue
        link = name[:-len(" GB/s")]
        carried = _integral(np.asarray(ts), np.asarray(vs), end, start) * 1e9 / clk   # GB/s x cycles -> bytes
        # the link's own byte count when the run recorded it (exact; the counter integrates to it
        # within float rounding, but a trace of an older opsim counted the allocated rate, a hair
        # above the carried one where a transfer ends part-way through a cycle)
        carried = float(exact.get(link, carried))
        links.append(LinkUse(link, carried, carried / seconds / 1e9 if seconds else 0.0,
                             caps.get(link), float(top.get(link, max(vs) if vs else 0.0))))
    uncounted = []
    for link, cap in caps.items():
        if not any(u.name == link for u in links):
            # no bandwidth counter (launch level): the run's own byte count and highest rate, if
            # it recorded them; without the latter the average is the most the trace can say
            carried = float(exact.get(link, 0.0))
            rate = carried / seconds / 1e9 if seconds else 0.0
            links.append(LinkUse(link, carried, rate, cap, float(top.get(link, rate))))
            if carried:
                uncounted.append(link)
    if uncounted:
        own = all(link in top for link in uncounted)
        notes.append(f"{', '.join(uncounted)}: no bandwidth counter in the trace; bytes "
                     + ("and max GB/s are the run's own count" if own else
                        "are the run's own count and max GB/s is the average"))
    links.sort(key=lambda u: u.name)
    hit = series.get(("memory", "L2 hit rate %"))
    l2_hit_rate = hit[1][-1] / 100.0 if hit else None
    # the run's own per-core peaks when it recorded them (every level, DSP work areas included);
    # else the occupancy counters; a trace with neither says nothing rather than 0
    local_peak: dict[str, int] = {str(c): int(v) for c, v in (meta.get("local_peak_bytes") or {}).items()}
    if not local_peak:
        for (proc, name), (_, vs) in series.items():
            if name.split(" ")[0] in LOCAL_MEMORIES and name.endswith(" bytes"):
                local_peak[proc] = max(local_peak.get(proc, 0), int(max(vs)))
    ub_peak = max(local_peak.values()) if local_peak else None

    bound, reason = _bound(trace, pipes, cycles, launches, links, meta)
    return Summary(
        operator=str(meta.get("operator", "")), device=str(meta.get("device", "")), level=trace.level,
        clock_hz=clk, start=start, end=end, launches=launches, pipes=tuple(pipes), links=tuple(links),
        local_peak=local_peak, ub_peak_bytes=ub_peak, l2_hit_rate=l2_hit_rate, bound=bound,
        bound_reason=reason, roofline=_roofline(trace, cols, seconds, meta, links), notes=tuple(notes))


def _integral(times: np.ndarray, values: np.ndarray, end: int, start: int | None = None) -> float:
    """∫ of a step function (value i holds from times[i] to times[i+1], the last one to ``end``),
    from ``start`` (default: its first step) to ``end``."""
    if not len(times):
        return 0.0
    edges = np.append(times, max(end, int(times[-1]))).astype(np.float64)
    if start is None:
        return float(np.sum(values * np.diff(edges)))
    lo, hi = np.clip(edges[:-1], start, end), np.clip(edges[1:], start, end)
    return float(np.sum(values * (hi - lo)))


def classify_bound(busy: Mapping[str, tuple[int, str]], cycles: int, launch_overhead: int,
                   tail: str = "", cap: Callable[[str, str], str] | None = None) -> tuple[str, str]:
    """The bound of a run and the reason, from each pipe's busy cycles on its busiest core.

    ``busy`` maps pipe -> (busy cycles, core). A run is launch bound when the launch overhead is
    at least half of its cycles; otherwise it is bound by the category of its busiest pipe
    (MTE*/DMA/FIXP memory, VECTOR vector, CUBE cube, SCALAR scalar). The simulator's statistics,
    the estimate and the trace summary all use this one rule. ``cap(pipe, core)`` names what
    limits the binding pipe (traces/bounds.py); its text follows the busy figure.
    """
    if cycles and launch_overhead * 2 >= cycles:
        return "launch", (f"launch overhead {launch_overhead} of {cycles} cycles "
                          f"({100 * launch_overhead / cycles:.0f}%)")
    by_cat: dict[str, tuple[int, str, str]] = {}
    for pipe, (b, core) in busy.items():
        cat = BOUND_OF_PIPE.get(pipe, "memory")
        if b > by_cat.get(cat, (-1, "", ""))[0]:
            by_cat[cat] = (b, pipe, core)
    if not by_cat or max(v[0] for v in by_cat.values()) == 0:
        return "none", "no work"
    cat, (b, pipe, core) = max(by_cat.items(), key=lambda kv: kv[1][0])
    where = f" on {core}" if core else ""
    capped = cap(pipe, core) if cap is not None else ""
    return cat, (f"{pipe} busy {b} of {cycles} cycles ({100 * b / max(cycles, 1):.0f}%){where}"
                 f"{'; ' + capped if capped else ''}{tail}")


def _bound(trace: Trace, pipes: list[PipeUse], cycles: int, launches: int, links: list[LinkUse],
           meta: dict[str, Any]) -> tuple[str, str]:
    overhead = int(meta.get("launch_overhead_cycles", 0)) * launches
    busy: dict[str, tuple[int, str]] = {}
    for u in pipes:
        if u.busy_cycles > busy.get(u.pipe, (-1, ""))[0]:
            busy[u.pipe] = (u.busy_cycles, u.core)
    if trace.level == "launch" and not (cycles and overhead * 2 >= cycles) and not any(b for b, _ in busy.values()):
        return "unknown", "launch-level trace: no pipe slices to tell which pipe limits the run"
    used: dict[str, set[str]] = {}
    for u in pipes:
        used.setdefault(core_kind(u.core), set()).add(u.core)
    link_use = {u.name: (u.achieved_GBps, u.peak_GBps) for u in links}

    def cap(pipe: str, core: str) -> str:
        kind = core_kind(core)
        total = int(meta.get("cube_cores" if kind == "cube" else "vector_cores", 0) or 0)
        n = len(used.get(kind, ()))
        return cap_text(pipe, kind, n, max(total, n), meta, link_use, trace.clock_hz)
    return classify_bound(busy, cycles, overhead, "", cap)


def _roofline(trace: Trace, cols: dict[str, np.ndarray], seconds: float,
              meta: dict[str, Any], links: Sequence[LinkUse] = ()) -> Roofline | None:
    if not len(trace) or not seconds:
        return None
    tracks = trace.tracks
    caps = meta.get("link_capacity_GBps") or {}
    gm_link = meta.get("gm_link")
    # the memory roof is the GM link's (HBM/DDR): the bytes it carried, from its bandwidth
    # counter; the DMA slices' bytes count L2 hits too and would put a run above its roof
    carried = {u.name: u.bytes for u in links}
    if gm_link in carried and carried[gm_link] > 0:
        gm_bytes = float(carried[gm_link])
    else:
        gm = np.array([th in GM_PIPES for _, th in tracks], dtype=bool)
        gm_bytes = float(cols["bytes"][gm[cols["track"]]].sum())
    l2_bytes = float(carried.get("L2", 0.0))
    peak_bw = caps[gm_link] * 1e9 if gm_link in caps else None
    l2 = caps["L2"] * 1e9 if "L2" in caps else None

    cube = np.array([th == "CUBE" for _, th in tracks], dtype=bool)[cols["track"]]
    if cols["elements"][cube].sum() > 0:
        # Mmad slices carry m*k*n multiply-accumulates and a "MxKxN dtype" detail
        macs = _by_dtype(trace, cols, cube, lambda d: d.split(" ")[1] if " " in d else "")
        dtype = max(macs, key=macs.__getitem__)
        peaks = meta.get("cube_macs_per_cycle") or {}
        cores = int(meta.get("cube_cores", 0))
        per_core = peaks.get(dtype) or (max(peaks.values()) if peaks else None)
        peak = 2 * per_core * cores * trace.clock_hz if per_core and cores else None
        return Roofline(2.0 * sum(macs.values()), gm_bytes, seconds, dtype, peak, peak_bw, l2,
                        unit="cube flops", link=str(gm_link or "GM"), l2_bytes=l2_bytes)

    vec = np.array([th == "VECTOR" for _, th in tracks], dtype=bool)[cols["track"]]
    # the compute roof is the peak of the dtype that did most of the vector work
    ops = _by_dtype(trace, cols, vec, lambda d: d.split(" ")[0].split("->")[-1])
    peaks = meta.get("vector_peak_elements_per_cycle") or {}
    cores = int(meta.get("vector_cores", 0))
    dtype = max(ops, key=ops.__getitem__) if ops else ""
    if dtype not in peaks and peaks:
        dtype = max(peaks, key=peaks.__getitem__)
    if not sum(ops.values()):   # no vector work in the trace (a launch-level trace): no point to place
        return None
    per_core = peaks.get(dtype)
    peak = per_core * cores * trace.clock_hz if per_core and cores else None
    return Roofline(float(sum(ops.values())), gm_bytes, seconds, dtype, peak, peak_bw, l2,
                    link=str(gm_link or "GM"), l2_bytes=l2_bytes)


def _by_dtype(trace: Trace, cols: dict[str, np.ndarray], sel: np.ndarray, dtype_of) -> dict[str, float]:
    """Elements of the selected slices summed per dtype (parsed from the slice detail)."""
    out: dict[str, float] = {}
    for d, e in zip(cols["detail"][sel].tolist(), cols["elements"][sel].tolist()):
        key = dtype_of(trace.string(d)) if d >= 0 else ""
        out[key] = out.get(key, 0.0) + e
    return out


# -- text ---------------------------------------------------------------------------------------

def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths)))
    out = [line, "-" * len(line)]
    for r in rows:
        out.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(out)


def busy_matrix(s: Summary) -> tuple[list[str], list[str], np.ndarray]:
    """(cores, pipes, busy % matrix with NaN where a core has no such pipe row)."""
    cores = sorted({u.core for u in s.pipes}, key=process_sort_key)
    pipes = [p for p in PIPE_ORDER if any(u.pipe == p for u in s.pipes)]
    m = np.full((len(cores), len(pipes)), np.nan)
    for u in s.pipes:
        m[cores.index(u.core), pipes.index(u.pipe)] = u.busy_pct
    return cores, pipes, m


def format_summary(s: Summary) -> str:
    head = [f"{s.operator or 'run'} on {s.device or '?'} ({s.level} level)",
            f"run        {s.cycles} cycles = {s.time_us:.3f} us at {s.clock_hz / 1e9:g} GHz, "
            f"{s.launches} launch{'es' if s.launches != 1 else ''}",
            f"bound      {s.bound}: {s.bound_reason}"]
    if s.ub_peak_bytes is not None:
        # a DSP core's local memory is its private memory, not a UB
        dsp = bool(s.local_peak) and all(core_kind(c) == "dsp" for c in s.local_peak)
        head.append(f"local peak {s.ub_peak_bytes} B (DSP private memory)" if dsp
                    else f"UB peak    {s.ub_peak_bytes} B")
    if s.l2_hit_rate is not None:
        head.append(f"L2 hits    {100 * s.l2_hit_rate:.1f}% of bytes read")
    r = s.roofline
    roof = r.roof(r.intensity) if r is not None else None   # None without a GM or compute peak
    if r is not None and r.peak_ops_per_s and roof is not None:
        head.append(f"roofline   {r.ops_per_s / 1e9:.2f} G {r.dtype} {r.unit}/s at "
                    f"{r.intensity:.3f} per {r.link} byte; roof there {roof / 1e9:.2f} G/s")
    parts = ["\n".join(head)]
    cores, pipes, m = busy_matrix(s)
    if cores:
        rows = [[c] + ["" if np.isnan(v) else f"{v:.1f}" for v in m[i]] for i, c in enumerate(cores)]
        parts.append("busy % of the run per core and pipe\n" + _table(["core"] + pipes, rows))
    if s.links:
        rows = [[u.name, f"{u.bytes:.0f}", f"{u.achieved_GBps:.2f}",
                 "" if u.peak_GBps is None else f"{u.peak_GBps:.1f}",
                 "" if u.utilisation is None else f"{100 * u.utilisation:.2f}", f"{u.max_GBps:.2f}"]
                for u in s.links]
        parts.append("links\n" + _table(["link", "bytes", "achieved GB/s", "peak GB/s", "util %",
                                         "max GB/s"], rows))
    if s.local_peak:
        rows = [[c, str(v)] for c, v in sorted(s.local_peak.items(), key=lambda kv: process_sort_key(kv[0]))]
        parts.append("local memory peak per core\n" + _table(["core", "peak bytes"], rows))
    if s.notes:
        parts.append("\n".join(f"note: {n}" for n in s.notes))
    return "\n\n".join(parts) + "\n"


def bandwidth_series(trace: Trace) -> tuple[dict[str, tuple[list[int], list[float]]], tuple[list[int], list[float]]]:
    """The trace's link bandwidth counters as {link: (times, GB/s)} and the L2 hit-rate counter
    as (times, %): what the bandwidth pictures (PNG and SVG) draw."""
    series: dict[str, tuple[list[int], list[float]]] = {}
    hit: tuple[list[int], list[float]] = ([], [])
    for proc, name, time, value in trace.counters():
        if proc == "memory" and name.endswith(" GB/s"):
            ts, vs = series.setdefault(name[:-5], ([], []))
            ts.append(time)
            vs.append(value)
        elif proc == "memory" and name == "L2 hit rate %":
            hit[0].append(time)
            hit[1].append(value)
    return series, hit
