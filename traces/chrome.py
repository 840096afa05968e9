"""Chrome Trace Event JSON export in the layout of the vendor's op-simulator traces.

Layout (docs/sources.md#chrome-trace-format, #vendor-op-trace-layout): one process per core (``core0.veccore0``,
``core0.cubecore0``, ``dsp.core3``) with ``process_name`` and ``process_sort_index`` metadata,
one thread per pipe (``MTE2``, ``VECTOR``, ``MTE3``, ``CUBE``, ``MTE1``, ``FIXP``, ``SCALAR``,
``DMA``) plus a ``BLOCK`` row, a ``host`` process with one thread per stream for the launches,
and a ``memory`` process with the link counters. Each instruction (or, at tile level, each tile
of a pipe) is an ``X`` event whose ``args`` carry the instruction, dtype, elements, bytes, tile
index, address range and exact cycles. Flag hand-offs are flow arrows (v1 ``s``/``f`` with
``cat: "sync"``). Counters are ``C`` events: ``HBM``/``L2`` bandwidth in GB/s and the L2 hit rate
in ``memory``, the UB occupancy in bytes in each core. ``ts``/``dur`` are microseconds,
``displayTimeUnit`` is ns, ``otherData`` holds the run's metadata (device, operator, shapes,
dtypes, tiling, opsim version, clock, link capacities…).

Counter series are stored in the trace as ``"<name> <unit>"`` (``"HBM GB/s"``); they are written
as ``{"name": "HBM", "args": {"GB/s": v}}`` so a viewer shows the track as ``HBM GB/s``.

The loader (:mod:`traces.loader`) reads this back into a :class:`~traces.trace.Trace` and a
second export is byte-identical to the first.
"""
from __future__ import annotations

import gzip
import io
import json
from typing import IO, Any, Iterator


from opsim.traces.layout import PIPES, Layout, layout
from opsim.traces.trace import Trace

FLOW_CAT = "sync"

# bytes per element, for the address range of instructions that report elements but no bytes
ITEMSIZE = {"fp32": 4, "fp16": 2, "bf16": 2, "fp64": 8, "int8": 1, "uint8": 1, "int16": 2,
            "int32": 4, "int64": 8, "bool": 1}


def split_series(series: str) -> tuple[str, str]:
    """``"HBM GB/s"`` -> (``"HBM"``, ``"GB/s"``); a series without a unit gets key ``value``."""
    name, sep, unit = series.rpartition(" ")
    return (name, unit) if sep and name else (series, "value")


def join_series(name: str, key: str) -> str:
    return name if key == "value" else f"{name} {key}"


def split_detail(detail: str) -> tuple[str, str]:
    """``"fp32"`` -> (fp32, ""); ``"fp32->fp16 rint"`` -> (fp32->fp16, rint); ``"atomic add"`` -> ("", …)."""
    head, _, rest = detail.partition(" ")
    if all(part in ITEMSIZE for part in head.split("->")):
        return head, rest
    return "", detail


def _itemsize(detail: str) -> int:
    # "fp32" or, for a Cast, "fp32->fp16 rint": the destination dtype is what the address range spans
    dt = detail.split("->")[-1].split(" ")[0] if detail else ""
    return ITEMSIZE.get(dt, 0)


def _jsonable(meta: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in meta.items():
        try:
            json.loads(json.dumps(v))
            out[k] = v
        except (TypeError, ValueError):
            out[k] = str(v)
    return out


def _header(trace: Trace, lay: Layout) -> dict[str, Any]:
    return {"displayTimeUnit": "ns", "profilingType": "op", "schemaVersion": 1,
            "otherData": {"clock_hz": trace.clock_hz, "level": trace.level,
                          "run_cycles": list(lay.run_cycles), **_jsonable(trace.metadata)}}


def iter_events(trace: Trace, lay: Layout | None = None) -> Iterator[str]:
    """The JSON text of every event in file order: metadata, slices (in trace order), flows,
    counters. Slices are formatted directly (no dict per event): at 10^6 events the dict-then-
    encode route costs about twice as much."""
    lay = lay or layout(trace)
    dumps = json.dumps
    sep = (",", ":")
    us_per_cycle = 1e6 / trace.clock_hz
    for pid, proc in enumerate(lay.processes, start=1):
        yield dumps({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0,
                     "args": {"name": proc}}, separators=sep)
        yield dumps({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": 0,
                     "args": {"sort_index": pid}}, separators=sep)
        for k, (row, tid) in enumerate(lay.threads[pid]):
            yield dumps({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0,
                         "args": {"name": row}}, separators=sep)
            yield dumps({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "ts": 0,
                         "args": {"sort_index": k}}, separators=sep)

    strings = trace._strings
    tracks = trace._tracks
    tile_level = trace.level == "tile"
    s_track, s_name, s_start, s_end = trace.s_track, trace.s_name, trace.s_start, trace.s_end
    s_el, s_by, s_tile, s_addr, s_det = (trace.s_elements, trace.s_bytes, trace.s_tile, trace.s_addr,
                                         trace.s_detail)
    pids = lay.slice_pid.tolist()
    tids = lay.slice_tid.tolist()
    t0 = lay.start_ns.tolist()
    t1 = lay.end_ns.tolist()
    kind_of_track: dict[int, str] = {}
    quoted: dict[int, str] = {}              # string id -> JSON string literal
    detail_of: dict[int, tuple[str, int]] = {}   # detail id -> (JSON args fragment, itemsize)
    for i in range(len(trace)):
        tr = s_track[i]
        kind = kind_of_track.get(tr)
        if kind is None:
            th = strings[tracks[tr][1]]
            proc = strings[tracks[tr][0]]
            kind = ("tile" if tile_level else "instruction") if th in PIPES else (
                "block" if th == "BLOCK" else ("launch" if proc == "host" else "slice"))
            kind_of_track[tr] = kind
        nid = s_name[i]
        name = quoted.get(nid)
        if name is None:
            name = quoted[nid] = dumps(strings[nid])
        pipe_row = kind == "instruction" or kind == "tile"
        parts = [f'{{"ph":"X","name":{name},"cat":"{kind}","pid":{pids[i]},"tid":{tids[i]},'
                 f'"ts":{t0[i] / 1000!r},"dur":{(t1[i] - t0[i]) / 1000!r},"args":{{']
        if pipe_row:
            parts.append(f'"instruction":{name},')
        d = s_det[i]
        size = 0
        if d >= 0:
            frag = detail_of.get(d)
            if frag is None:
                detail = strings[d]
                if pipe_row:
                    dtype, rest = split_detail(detail)
                    text = (f'"dtype":{dumps(dtype)},' if dtype else "") + \
                           (f'"detail":{dumps(rest)},' if rest else "")
                else:
                    text = f'"detail":{dumps(detail)},'
                frag = detail_of[d] = (text, _itemsize(detail))
            parts.append(frag[0])
            size = frag[1]
        el, by = s_el[i], s_by[i]
        if el:
            parts.append(f'"elements":{el},')
        if by:
            parts.append(f'"bytes":{by},')
        tile = s_tile[i]
        if tile >= 0:
            parts.append(f'"block":{tile},' if kind == "block" else f'"tile":{tile},')
        a = s_addr[i]
        if a >= 0:
            span = by or el * size
            parts.append(f'"addr_range":"{a:#x}-{a + span:#x}",' if span else f'"addr":"{a:#x}",')
        start = s_start[i]
        parts.append(f'"start_cycle":{start},"cycles":{s_end[i] - start}}}}}')
        yield "".join(parts)

    # Flows: the start sits just inside the end of the producer slice and the finish just inside
    # the start of the consumer slice, so both viewers bind each end to the right slice.
    for n, (a, b, name) in enumerate(trace.flows()):
        sa = t1[a] - 1 if t1[a] - t0[a] >= 2 else t0[a]
        fb = t0[b] + 1 if t1[b] - t0[b] >= 2 else t0[b]
        q = dumps(name)
        yield (f'{{"ph":"s","name":{q},"cat":"{FLOW_CAT}","id":{n},"pid":{pids[a]},"tid":{tids[a]},'
               f'"ts":{sa / 1000!r},"args":{{"slice":{a}}}}}')
        yield (f'{{"ph":"f","bp":"e","name":{q},"cat":"{FLOW_CAT}","id":{n},"pid":{pids[b]},'
               f'"tid":{tids[b]},"ts":{fb / 1000!r},"args":{{"slice":{b}}}}}')

    series_of = [tuple(dumps(x) for x in split_series(strings[s])) for _, s in trace._counter_tracks]
    c_track, c_time, c_value = trace.c_track, trace.c_time, trace.c_value
    cpid = lay.counter_pid
    for i in range(len(c_track)):
        c = c_track[i]
        name, key = series_of[c]
        yield (f'{{"ph":"C","name":{name},"pid":{cpid[c]},"tid":0,"ts":{c_time[i] * us_per_cycle!r},'
               f'"args":{{{key}:{dumps(c_value[i])}}}}}')


def to_chrome(trace: Trace) -> dict[str, Any]:
    """The whole document as a dict (small traces, tests): exactly what the file holds."""
    return json.loads(dumps(trace))


def write_chrome(trace: Trace, path: str, chunk: int = 20000) -> None:
    """Stream the document to ``path`` (gzip when it ends in ``.gz``, in any case), ``chunk``
    events at a time."""
    lay = layout(trace)
    head = _header(trace, lay)
    if path.lower().endswith(".gz"):
        # mtime=0 and no file name in the gzip header (GzipFile stores the name it was given):
        # the same run writes the same bytes, whatever the file is called (as `gzip -n`)
        with open(path, "wb") as dest, gzip.GzipFile(filename="", mode="wb", fileobj=dest, mtime=0) as raw, \
                io.TextIOWrapper(raw, encoding="utf-8") as fh:
            _write(fh, head, iter_events(trace, lay), chunk)
        return
    with open(path, "w", encoding="utf-8") as fh:
        _write(fh, head, iter_events(trace, lay), chunk)


def _write(fh: IO[str], head: dict[str, Any], events: Iterator[str], chunk: int) -> None:
    fh.write('{"traceEvents":[')
    buf: list[str] = []
    first = True
    for ev in events:
        buf.append(ev)
        if len(buf) >= chunk:
            fh.write(("" if first else ",") + ",".join(buf))
            first = False
            buf.clear()
    if buf:
        fh.write(("" if first else ",") + ",".join(buf))
    fh.write("],")
    fh.write(json.dumps(head, separators=(",", ":"))[1:])


def dumps(trace: Trace) -> str:
    """The exact text :func:`write_chrome` writes."""
    import io
    buf = io.StringIO()
    lay = layout(trace)
    _write(buf, _header(trace, lay), iter_events(trace, lay), 20000)
    return buf.getvalue()
