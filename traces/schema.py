"""Structural checks of an exported Chrome trace (used by the tests and handy for any new exporter).

:func:`check_chrome` returns a list of problems (empty when the document is sound):

- the file layout: ``traceEvents``, ``displayTimeUnit`` ns, the run metadata in ``otherData``;
- every event has ``ph``, ``ts``, ``pid`` and ``tid``; ``X`` events have ``dur >= 0``;
- rows follow the vendor layout: processes ``coreN.veccoreM`` / ``coreN.cubecoreM`` /
  ``dsp.coreN`` / ``host`` / ``memory`` with names and sort indices, threads named after pipes
  (``MTE2``, ``MTE2#1``…), ``BLOCK`` or a stream;
- no pipe thread has overlapping slices, judged the way viewers do: ``ts`` and ``dur`` each rounded
  to whole nanoseconds;
- every flow start has exactly one end (same ``cat`` and ``id``) and both sit inside a slice of their
  thread, so a viewer binds them;
- counters are finite and non-negative;
- every timestamp lies within the run (``otherData.run_cycles``), to the nanosecond.
"""
from __future__ import annotations

import math
import re
from typing import Any

from opsim.traces.layout import PIPES, base_thread

PROCESS_RE = re.compile(r"^(core\d+\.(veccore|cubecore)\d+|dsp\.core\d+|host|memory)$")
STREAM_RE = re.compile(r"^stream\d+$")
REQUIRED_METADATA = ("device", "operator", "shapes", "dtypes", "opsim_version", "clock_hz", "level")


def _ns(us: float) -> int:
    # what Perfetto's JSON importer does with a floating-point µs value
    return int(math.floor(us * 1000.0 + 0.5)) if us >= 0 else -int(math.floor(-us * 1000.0 + 0.5))


def check_chrome(doc: Any, *, require_metadata: bool = True, limit: int = 50) -> list[str]:
    problems: list[str] = []

    def bad(msg: str) -> None:
        if len(problems) < limit:
            problems.append(msg)

    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["document has no traceEvents array"]
    if doc.get("displayTimeUnit") != "ns":
        bad(f"displayTimeUnit is {doc.get('displayTimeUnit')!r}, expected 'ns'")
    other = doc.get("otherData") or {}
    if require_metadata:
        for key in REQUIRED_METADATA:
            if key not in other:
                bad(f"otherData lacks {key!r}")
    clock = float(other.get("clock_hz") or 0)
    run = other.get("run_cycles")
    window = None
    if clock and isinstance(run, list) and len(run) == 2:
        window = (_ns(run[0] * 1e6 / clock) - 1, _ns(run[1] * 1e6 / clock) + 1)

    events = doc["traceEvents"]
    proc_names: dict[Any, str] = {}
    proc_sorted: set[Any] = set()
    thread_names: dict[tuple[Any, Any], str] = {}
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            bad(f"event {i} is not an object")
            continue
        for key in ("ph", "ts", "pid", "tid"):
            if key not in ev:
                bad(f"event {i} ({ev.get('ph')} {ev.get('name')!r}) has no {key}")
        if ev.get("ph") == "M":
            args = ev.get("args") or {}
            if ev.get("name") == "process_name":
                proc_names[ev.get("pid")] = str(args.get("name"))
            elif ev.get("name") == "process_sort_index":
                proc_sorted.add(ev.get("pid"))
            elif ev.get("name") == "thread_name":
                thread_names[(ev.get("pid"), ev.get("tid"))] = str(args.get("name"))
    for pid, name in proc_names.items():
        if not PROCESS_RE.match(name):
            bad(f"process {pid} is named {name!r}, not coreN.veccoreM/cubecoreM, dsp.coreN, host or memory")
        if pid not in proc_sorted:
            bad(f"process {name!r} has no process_sort_index")

    rows: dict[tuple[Any, Any], list[tuple[int, int]]] = {}
    starts: dict[Any, tuple[Any, Any, float, int]] = {}
    ends: dict[Any, tuple[Any, Any, float, int]] = {}
    flow_points: list[tuple[Any, Any, float, str]] = []
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            continue
        ph = ev.get("ph")
        ts = ev.get("ts")
        if ph == "M":
            continue
        if not isinstance(ts, (int, float)) or not math.isfinite(ts):
            bad(f"event {i} has a non-numeric ts {ts!r}")
            continue
        pid, tid = ev.get("pid"), ev.get("tid")
        if pid not in proc_names:
            bad(f"event {i} uses pid {pid} which has no process_name")
        t0 = _ns(ts)
        t1 = t0
        if ph == "X":
            dur = ev.get("dur")
            if not isinstance(dur, (int, float)) or not math.isfinite(dur) or dur < 0:
                bad(f"X event {i} {ev.get('name')!r} has dur {dur!r} (must be a number >= 0)")
                continue
            t1 = t0 + _ns(dur)
            if (pid, tid) not in thread_names:
                bad(f"X event {i} is on pid {pid} tid {tid}, which has no thread_name")
            else:
                th = thread_names[(pid, tid)]
                base = base_thread(th)
                proc = proc_names.get(pid, "")
                if not (base in PIPES or base == "BLOCK" or (proc == "host" and STREAM_RE.match(base))):
                    bad(f"thread {th!r} of {proc!r} is not a pipe, BLOCK or host stream row")
            rows.setdefault((pid, tid), []).append((t0, t1))
        elif ph == "C":
            for k, v in (ev.get("args") or {}).items():
                if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                    bad(f"counter {ev.get('name')!r} {k} at ts {ts} is {v!r} (must be finite, >= 0)")
        elif ph in ("s", "f"):
            flow = (ev.get("cat"), ev.get("id"))
            store = starts if ph == "s" else ends
            if flow in store:
                bad(f"flow {flow} has more than one {'start' if ph == 's' else 'end'}")
            store[flow] = (pid, tid, ts, i)
            flow_points.append((pid, tid, t0, f"flow {key} {ph}"))
        elif ph not in ("i", "I", "b", "e", "n", "B", "E", "t"):
            bad(f"event {i} has unknown phase {ph!r}")
        if window is not None and (t0 < window[0] or t1 > window[1]):
            bad(f"event {i} ({ph} {ev.get('name')!r}) at {t0}-{t1} ns lies outside the run "
                f"{window[0] + 1}-{window[1] - 1} ns")

    for (pid, tid), spans in rows.items():
        spans.sort()
        last_end = None
        for a, b in spans:
            if last_end is not None and a < last_end:
                bad(f"overlapping slices on {proc_names.get(pid, pid)} / {thread_names.get((pid, tid), tid)}: "
                    f"one starts at {a} ns before the previous one ends at {last_end} ns")
                break
            last_end = b if last_end is None else max(last_end, b)
    for key in starts.keys() - ends.keys():
        bad(f"flow {key} starts but never ends")
    for key in ends.keys() - starts.keys():
        bad(f"flow {key} ends but never starts")
    for pid, tid, t, what in flow_points:
        spans = rows.get((pid, tid), [])
        if not any(a <= t <= b for a, b in spans):
            bad(f"{what} at {t} ns is inside no slice of its thread")
    return problems
