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
import math
import os
import zlib
from typing import Any

from opsim.traces.chrome import join_series
from opsim.traces.layout import base_thread
from opsim.traces.trace import LEVELS, Trace



class TraceFormatError(ValueError):
    """The file is not a Chrome trace this loader understands."""


DEFAULT_MAX_TRACE_BYTES = 1 << 30
_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20
# past 64 MiB of JSON, a compression ratio over 200 is a gzip bomb, not a trace (traces: ~10x)
_BOMB_MIN, _BOMB_RATIO = 64 << 20, 200
# |ts| and dur bound in µs (about 31 years): beyond it cycle numbers stop fitting int64 columns
_MAX_US = 1e15


def max_trace_bytes() -> int:
    """Bytes of JSON (after decompression) a trace file may hold: ``OPSIM_MAX_TRACE_BYTES`` or
    1 GiB. Reading stops at the limit, so a gzip bomb costs at most this much (and one that
    decompresses over 200 times its size is refused after 64 MiB)."""
    text = os.environ.get("OPSIM_MAX_TRACE_BYTES")
    if text and text.strip():
        try:
            value = int(float(text))
        except ValueError:
            value = 0
        if value > 0:
            return value
        raise TraceFormatError(f"environment variable OPSIM_MAX_TRACE_BYTES={text!r} must be a positive integer")
    return DEFAULT_MAX_TRACE_BYTES


def _read_bounded(path: str) -> bytes:
    """The file's bytes, decompressed if it is gzip (by its magic number, whatever its name)."""
    limit = max_trace_bytes()
    with open(path, "rb") as raw:
        compressed = raw.read(2) == _GZIP_MAGIC
        raw.seek(0)
        fh: Any = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
        parts, total = [], 0
        while True:
            chunk = fh.read(_CHUNK)
            if not chunk:
                break
            total += len(chunk)
            if compressed and total > _BOMB_MIN and total > _BOMB_RATIO * max(raw.tell(), 1):
                raise TraceFormatError(f"{path}: the trace decompresses more than {_BOMB_RATIO} times its "
                                       f"compressed size (a gzip bomb?); JSON traces compress about 10x")
            if total > limit:
                what = "decompresses to more than" if compressed else "is larger than"
                raise TraceFormatError(f"{path}: the trace {what} {limit} bytes (limit OPSIM_MAX_TRACE_BYTES; "
                                       f"raise it for a larger trace)")
            parts.append(chunk)
    return b"".join(parts)


def read_json(path: str) -> dict[str, Any]:
    if os.path.exists(path) and not os.path.isfile(path):
        raise TraceFormatError(f"{path}: not a regular file")
    data = b""
    try:
        data = _read_bounded(path)
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        if data[:1] != b"\x0a":
            raise TraceFormatError(f"{path}: not a readable JSON trace ({exc})") from None
        # most likely the Perfetto protobuf `opsim run --trace F.pftrace` writes (its first byte
        # is the tag of Trace.packet, field 1): the codec's complaint would not say so
        raise TraceFormatError(f"{path}: not a JSON trace (a Perfetto protobuf file?); opsim trace reads "
                               f"the Chrome JSON of `opsim run --trace F.json` (or .json.gz)") from None
    except (OSError, json.JSONDecodeError, EOFError, zlib.error) as exc:
        raise TraceFormatError(f"{path}: not a readable JSON trace ({exc})") from None
    except RecursionError:
        raise TraceFormatError(f"{path}: not a readable JSON trace (nested too deeply)") from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceFormatError(f"{path}: no traceEvents array (not a Chrome trace file)")
    return doc


def load_chrome(source: str | dict[str, Any]) -> Trace:
    """A :class:`Trace` from a path (``.json`` or ``.json.gz``) or an already parsed document.

    Anything malformed (an event that is not an object, a time that is not a finite number, a
    negative duration, arguments of the wrong type …) raises :class:`TraceFormatError` naming
    the event's index and field."""
    where = source if isinstance(source, str) else "trace"
    doc = read_json(source) if isinstance(source, str) else source
    if not isinstance(doc, dict):
        raise TraceFormatError(f"{where}: a trace document is a JSON object or array")
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise TraceFormatError("no traceEvents array (not a Chrome trace document)")
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise TraceFormatError(f"{where}: event {i} is {type(ev).__name__}, not a JSON object")
    try:
        return _load(doc, events, where)
    except _EventError as exc:
        raise TraceFormatError(f"{where}: event {exc.index}: {exc.message}") from None
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError, IndexError) as exc:
        # a shape of bad input not checked field by field below
        raise TraceFormatError(f"{where}: malformed trace ({type(exc).__name__}: {exc})") from None


class _EventError(Exception):
    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index, self.message = index, message


def _number(ev: dict[str, Any], key: str, i: int, low: float = -_MAX_US) -> float:
    if key not in ev:
        # not time 0: an event without its time (or a slice without its length) is a broken file
        raise _EventError(i, f"a '{ev.get('ph')}' event needs '{key}'; it has none")
    value = ev[key]
    if isinstance(value, str):   # some profilers write times as decimal strings
        try:
            v = float(value)
        except ValueError:
            raise _EventError(i, f"'{key}' must be a number, got {value!r}") from None
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _EventError(i, f"'{key}' must be a number, got {value!r}")
    else:
        v = float(value)
    if not (low <= v <= _MAX_US):   # also false for NaN
        raise _EventError(i, f"'{key}' = {value!r} is not a finite number in [{low:g}, {_MAX_US:g}]")
    return v


def _int_arg(args: dict[str, Any], key: str, i: int, default: int = 0, low: int = -(1 << 62)) -> int:
    value = args.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _EventError(i, f"args.{key} must be an integer, got {value!r}")
    try:
        v = int(value, 0) if isinstance(value, str) else int(value)
    except (ValueError, OverflowError):
        raise _EventError(i, f"args.{key} must be an integer, got {value!r}") from None
    if not low <= v < (1 << 62):
        raise _EventError(i, f"args.{key} = {value!r} is out of range [{low}, 2**62)")
    return v


def _args(ev: dict[str, Any], i: int) -> dict[str, Any]:
    args = ev.get("args")
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise _EventError(i, f"'args' must be a JSON object, got {type(args).__name__}")
    return args


def _key(value: Any) -> Any:
    """An id/pid/tid as a dictionary key (ids of other tools may be numbers or strings)."""
    return value if isinstance(value, (int, float, str, type(None))) else json.dumps(value, sort_keys=True)


def _load(doc: dict[str, Any], events: list[dict[str, Any]], where: str) -> Trace:
    other_raw = doc.get("otherData") or {}
    if not isinstance(other_raw, dict):
        raise TraceFormatError(f"{where}: 'otherData' must be a JSON object")
    other = dict(other_raw)
    clock = other.pop("clock_hz", 1e9)
    if isinstance(clock, bool) or not isinstance(clock, (int, float)) or not 1 <= clock <= 1e13:
        raise TraceFormatError(f"{where}: otherData.clock_hz = {clock!r} must be a clock rate in Hz "
                               f"(1 to 1e13)")
    clock_hz = float(clock)
    level = other.pop("level", "instruction")
    if level not in LEVELS:
        level = "instruction"
    other.pop("run_cycles", None)
    trace = Trace(level, clock_hz, metadata=other)
    cycles_per_us = clock_hz / 1e6

    proc_name: dict[Any, str] = {}
    thread_name: dict[tuple[Any, Any], str] = {}
    for i, ev in enumerate(events):
        if ev.get("ph") == "M":
            args = _args(ev, i)
            pid = _key(ev.get("pid"))
            if ev.get("name") == "process_name":
                proc_name[pid] = str(args.get("name", pid))
            elif ev.get("name") == "thread_name":
                thread_name[(pid, _key(ev.get("tid")))] = str(args.get("name", ev.get("tid")))

    track_of: dict[tuple[Any, Any], int] = {}
    # per (pid, tid) row: slice starts in µs and indices, for binding flows without args
    rows: dict[tuple[Any, Any], list[tuple[float, float, int]]] = {}
    flow_start: dict[Any, tuple[int, str]] = {}
    pending_flows: list[tuple[int, int, str]] = []
    n_slices = 0
    for i, ev in enumerate(events):
        ph = ev.get("ph")
        if ph == "X":
            pid, tid = _key(ev.get("pid")), _key(ev.get("tid"))
            key = (pid, tid)
            t = track_of.get(key)
            if t is None:
                proc = proc_name.get(pid, str(pid))
                thread = base_thread(thread_name.get(key, str(tid)))
                t = track_of[key] = trace.track(proc, thread)
            args = _args(ev, i)
            ts, dur = _number(ev, "ts", i), _number(ev, "dur", i, low=0.0)
            start = _int_arg(args, "start_cycle", i) if "start_cycle" in args else round(ts * cycles_per_us)
            cycles = _int_arg(args, "cycles", i, low=0) if "cycles" in args else round(dur * cycles_per_us)
            end = start + cycles
            addr = args.get("addr")
            if addr is None and isinstance(args.get("addr_range"), str):
                addr = args["addr_range"].split("-")[0]
            if isinstance(addr, str) and not addr.lower().startswith("0x"):
                addr = "0x" + addr
            idx = trace.add_slice(
                t, str(ev.get("name", "")), start, end,
                elements=_int_arg(args, "elements", i) if "elements" in args else 0,
                nbytes=_int_arg(args, "bytes", i) if "bytes" in args else 0,
                tile=_int_arg(args, "tile", i) if "tile" in args else (
                    _int_arg(args, "block", i) if "block" in args else -1),
                addr=_int_arg({"addr": addr}, "addr", i) if addr is not None else -1,
                detail=" ".join(str(args[k]) for k in ("dtype", "detail") if args.get(k)))
            n_slices += 1
            rows.setdefault(key, []).append((ts, ts + dur, idx))
        elif ph in ("s", "f"):
            args = _args(ev, i)
            ident = (_key(ev.get("cat")), _key(ev.get("id")))
            where_slice = args.get("slice")
            if where_slice is None:
                row = rows.get((_key(ev.get("pid")), _key(ev.get("tid"))), [])
                where_slice = _enclosing(row, _number(ev, "ts", i))
            elif isinstance(where_slice, bool) or not isinstance(where_slice, int) \
                    or not 0 <= where_slice < n_slices:
                raise _EventError(i, f"args.slice = {where_slice!r} is not the index of a slice before it")
            if where_slice is None:
                continue
            if ph == "s":
                flow_start[ident] = (int(where_slice), str(ev.get("name", "flag")))
            else:
                src = flow_start.pop(ident, None)
                if src is not None:
                    pending_flows.append((src[0], int(where_slice), src[1]))
        elif ph == "C":
            proc = proc_name.get(_key(ev.get("pid")), str(ev.get("pid")))
            time = round(_number(ev, "ts", i) * cycles_per_us)
            for key_, value in _args(ev, i).items():
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise _EventError(i, f"counter args.{key_} = {value!r} must be a finite number")
                trace.add_counter(proc, join_series(str(ev.get("name", "")), key_), time, float(value))
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
