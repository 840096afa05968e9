"""Read a Chrome Trace Event JSON file written by :mod:`traces.chrome` back into a Trace.

Slices come back in file order (which is the order they were recorded in), with their exact
cycles from ``args.start_cycle``/``args.cycles``; sub-lanes ``PIPE#k`` fold back onto their pipe;
flows bind to the slices named in their ``args.slice``; counters get their cycle back from ``ts``
(written at full precision). Exporting the loaded trace again gives the same bytes.

A file from another tool that lacks our arguments still loads: cycles then come from ``ts``/``dur``
and the clock, and flows bind to the slice that encloses their timestamp on their thread.
"""
from __future__ import annotations

import bisect
import gzip
import json
from typing import Any

from opsim.traces.chrome import join_series
from opsim.traces.layout import base_thread
from opsim.traces.trace import LEVELS, Trace



class TraceFormatError(ValueError):
    """The file is not a Chrome trace this loader understands."""


def read_json(path: str) -> dict[str, Any]:
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
            doc = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, EOFError) as exc:
        raise TraceFormatError(f"{path}: not a readable JSON trace ({exc})") from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceFormatError(f"{path}: no traceEvents array (not a Chrome trace file)")
    return doc


def load_chrome(source: str | dict[str, Any]) -> Trace:
    """A :class:`Trace` from a path (``.json`` or ``.json.gz``) or an already parsed document."""
    doc = read_json(source) if isinstance(source, str) else source
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise TraceFormatError("no traceEvents array (not a Chrome trace document)")
    other = dict(doc.get("otherData") or {})
    clock_hz = float(other.pop("clock_hz", 1e9))
    level = other.pop("level", "instruction")
    if level not in LEVELS:
        level = "instruction"
    other.pop("run_cycles", None)
    trace = Trace(level, clock_hz, metadata=other)
    cycles_per_us = clock_hz / 1e6

    proc_name: dict[Any, str] = {}
    thread_name: dict[tuple[Any, Any], str] = {}
    for ev in events:
        if ev.get("ph") == "M":
            args = ev.get("args") or {}
            if ev.get("name") == "process_name":
                proc_name[ev.get("pid")] = str(args.get("name", ev.get("pid")))
            elif ev.get("name") == "thread_name":
                thread_name[(ev.get("pid"), ev.get("tid"))] = str(args.get("name", ev.get("tid")))

    track_of: dict[tuple[Any, Any], int] = {}
    # per (pid, tid) row: slice starts in µs and indices, for binding flows without args
    rows: dict[tuple[Any, Any], list[tuple[float, float, int]]] = {}
    flow_start: dict[Any, tuple[int, str]] = {}
    pending_flows: list[tuple[int, int, str]] = []
    for ev in events:
        ph = ev.get("ph")
        if ph == "X":
            pid, tid = ev.get("pid"), ev.get("tid")
            key = (pid, tid)
            t = track_of.get(key)
            if t is None:
                proc = proc_name.get(pid, str(pid))
                thread = base_thread(thread_name.get(key, str(tid)))
                t = track_of[key] = trace.track(proc, thread)
            args = ev.get("args") or {}
            ts, dur = float(ev.get("ts", 0.0)), float(ev.get("dur", 0.0))
            start = int(args["start_cycle"]) if "start_cycle" in args else round(ts * cycles_per_us)
            end = start + (int(args["cycles"]) if "cycles" in args else round(dur * cycles_per_us))
            addr = args.get("addr")
            if addr is None and isinstance(args.get("addr_range"), str):
                addr = args["addr_range"].split("-")[0]
            idx = trace.add_slice(
                t, str(ev.get("name", "")), start, end,
                elements=int(args.get("elements", 0)), nbytes=int(args.get("bytes", 0)),
                tile=int(args.get("tile", args.get("block", -1))),
                addr=int(addr, 16) if isinstance(addr, str) else (int(addr) if addr is not None else -1),
                detail=" ".join(str(args[k]) for k in ("dtype", "detail") if args.get(k)))
            rows.setdefault(key, []).append((ts, ts + dur, idx))
        elif ph in ("s", "f"):
            args = ev.get("args") or {}
            ident = (ev.get("cat"), ev.get("id"))
            where = args.get("slice")
            if where is None:
                where = _enclosing(rows.get((ev.get("pid"), ev.get("tid")), []), float(ev.get("ts", 0.0)))
            if where is None:
                continue
            if ph == "s":
                flow_start[ident] = (int(where), str(ev.get("name", "flag")))
            else:
                src = flow_start.pop(ident, None)
                if src is not None:
                    pending_flows.append((src[0], int(where), src[1]))
        elif ph == "C":
            proc = proc_name.get(ev.get("pid"), str(ev.get("pid")))
            time = round(float(ev.get("ts", 0.0)) * cycles_per_us)
            for key, value in (ev.get("args") or {}).items():
                trace.add_counter(proc, join_series(str(ev.get("name", "")), key), time, float(value))
    for a, b, name in pending_flows:
        trace.add_flow(a, b, name)
    return trace


def _enclosing(row: list[tuple[float, float, int]], ts: float) -> int | None:
    """The slice of a row whose [start, end] contains ``ts`` (rows are in start order)."""
    if not row:
        return None
    i = bisect.bisect_right(row, (ts, float("inf"), 1 << 62)) - 1
    if i >= 0 and row[i][0] <= ts <= row[i][1]:
        return row[i][2]
    return None
