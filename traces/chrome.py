"""Chrome Trace Event JSON export in the layout of the vendor's op-simulator traces.

One process per core (``core0.veccore0``, ``core0.cubecore0``, ``dsp.core3``), one thread per pipe
(``MTE2``, ``VECTOR``, ``MTE3``…), ``X`` events carrying the instruction's arguments, ``C``
counters, flows for flag hand-offs, ``displayTimeUnit`` ns. ``ts``/``dur`` are microseconds.
"""
from __future__ import annotations

import json
from typing import Any

from traces.trace import PIPE_ORDER, Trace


def _process_sort_key(name: str) -> tuple:
    # host rows first, then cores in numeric order, then memory links
    if name.startswith("host"):
        return (0, name)
    if name.startswith("core") or name.startswith("dsp.core"):
        digits = "".join(ch if ch.isdigit() else " " for ch in name).split()
        return (1, [int(d) for d in digits], name)
    return (2, name)


def to_chrome(trace: Trace, path: str | None = None) -> dict:
    us = 1e6 / trace.clock_hz
    events: list[dict[str, Any]] = []
    procs = sorted(trace.processes, key=_process_sort_key)
    pid_of = {p: i + 1 for i, p in enumerate(procs)}
    for p, pid in pid_of.items():
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": p}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                       "args": {"sort_index": pid}})
    tid_of: dict[int, tuple[int, int]] = {}
    threads_seen: dict[tuple[int, str], int] = {}
    for t, (p, th) in enumerate(trace.tracks):
        pid = pid_of[p]
        key = (pid, th)
        if key not in threads_seen:
            order = PIPE_ORDER.index(th) if th in PIPE_ORDER else len(PIPE_ORDER) + len(threads_seen)
            tid = order + 1
            threads_seen[key] = tid
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": th}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                           "args": {"sort_index": tid}})
        tid_of[t] = (pid, threads_seen[key])
    for i in range(len(trace)):
        pid, tid = tid_of[trace.s_track[i]]
        start, end = trace.s_start[i], trace.s_end[i]
        args: dict[str, Any] = {"start_cycle": start, "cycles": end - start}
        if trace.s_elements[i]:
            args["elements"] = trace.s_elements[i]
        if trace.s_bytes[i]:
            args["bytes"] = trace.s_bytes[i]
        if trace.s_tile[i] >= 0:
            args["tile"] = trace.s_tile[i]
        if trace.s_addr[i] >= 0:
            args["addr"] = hex(trace.s_addr[i])
        if trace.s_detail[i] >= 0:
            args["detail"] = trace.string(trace.s_detail[i])
        events.append({"ph": "X", "name": trace.string(trace.s_name[i]), "cat": "instr", "pid": pid,
                       "tid": tid, "ts": start * us, "dur": (end - start) * us, "args": args})
    for n, (a, b, name) in enumerate(trace.flows()):
        pa, ta = tid_of[trace.s_track[a]]
        pb, tb = tid_of[trace.s_track[b]]
        events.append({"ph": "s", "id": n, "name": name, "cat": "sync", "pid": pa, "tid": ta,
                       "ts": trace.s_end[a] * us})
        events.append({"ph": "f", "id": n, "name": name, "cat": "sync", "pid": pb, "tid": tb,
                       "ts": trace.s_start[b] * us, "bp": "e"})
    for proc, series, time, value in trace.counters():
        events.append({"ph": "C", "name": series, "pid": pid_of[proc], "tid": 0, "ts": time * us,
                       "args": {series: value}})
    doc = {"traceEvents": events, "displayTimeUnit": "ns", "profilingType": "op", "schemaVersion": 1,
           "otherData": {"clock_hz": trace.clock_hz, "level": trace.level, **_jsonable(trace.metadata)}}
    if path is not None:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, separators=(",", ":"))
    return doc


def _jsonable(meta: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in meta.items():
        try:
            json.dumps(v)
            out[k] = v
        except TypeError:
            out[k] = str(v)
    return out
