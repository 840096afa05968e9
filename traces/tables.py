"""Profiler tables shaped like the vendor's: op_summary, PipeUtilization, instr_exe, code_exe.

Column names follow the vendor's documented ones (docs/profiling.md lists each with its source
and says where opsim differs):

- :func:`op_summary` -- one row per kernel launch, as msprof's ``op_summary_*.csv`` (one aclnn
  call can be several launches, as on the device): Op Name, OP Type, Task Type, Block Dim, Mix
  Block Dim, Task Duration(us), shapes and dtypes of the launch's GM tensors, and per core kind
  the time and the ratio of each pipe's busy cycles to the core's cycles (``aiv_vec_ratio``,
  ``aic_cube_ratio``, ...), plus the bytes of the launch per link as bandwidths
  (``main_mem_read_bw(GB/s)``, ``l2_read_bw(GB/s)``, ``l2_write_bw(GB/s)``: a store a write-back
  L2 takes is an L2 write, on the GM link only when the L2 evicts its dirty line; N/A on a device
  without an L2);
- :func:`pipe_utilization` -- one row per block (core) of each launch, as msOpProf's
  ``PipeUtilization.csv``;
- :func:`instr_exe` / :func:`code_exe` -- cycles per instruction kind and per kernel source line
  of each core, as the msOpProf simulator's ``core*_instr_exe.csv`` / ``core*_code_exe.csv``
  (opsim writes one file with a ``core`` column instead of a file per core).

The rows are built from :class:`LaunchRecord` s: plain data that the simulator fills from a live
device (``opsim.simulator.profile.launch_records``) or that :func:`records_from_trace` reads back
from a trace file, so ``opsim run --csv`` and ``opsim trace summary --csv`` share one code path.
"""
from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

# pipe -> the vendor's column stem per core kind
AIC_PIPES = (("CUBE", "cube"), ("SCALAR", "scalar"), ("MTE1", "mte1"), ("MTE2", "mte2"),
             ("FIXP", "fixpipe"))
AIV_PIPES = (("VECTOR", "vec"), ("SCALAR", "scalar"), ("MTE2", "mte2"), ("MTE3", "mte3"))
DSP_PIPES = (("VECTOR", "vec"), ("SCALAR", "scalar"), ("DMA", "dma"))

# aclDataType names as msprof prints them
DTYPE_NAMES = {"fp32": "FLOAT", "fp16": "FLOAT16", "bf16": "DT_BF16", "int8": "INT8", "int16": "INT16",
               "int32": "INT32", "int64": "INT64", "uint8": "UINT8", "bool": "BOOL", "fp64": "DOUBLE"}


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: str
    format: str = "ND"


@dataclass(frozen=True)
class LaunchRecord:
    """What one kernel launch did, as plain data (cycles are device cycles)."""

    name: str
    op_type: str
    unit: str                          # "vector" | "cube" | "mix" | "dsp"
    architecture: str                  # "split" | "coupled" | "dsp"
    block_dim: int
    mix_block_dim: int
    stream: int
    issue: int                         # the task began (the stream reached it; after launch.gap
                                       # when queued behind the previous task of the stream)
    start: int                         # blocks may start (after the launch overhead)
    end: int
    wait: int                          # cycles since the previous launch on the stream ended
    clock_hz: float
    inputs: tuple[TensorInfo, ...] = ()
    outputs: tuple[TensorInfo, ...] = ()
    core_cycles: Mapping[str, int] = field(default_factory=dict)        # core -> cycles of its blocks
    busy: Mapping[tuple[str, str], int] = field(default_factory=dict)   # (core, pipe) -> busy cycles
    link_bytes: Mapping[str, int] = field(default_factory=dict)         # "HBM read" ... -> bytes
    # (core, pipe, instruction, origin, calls, cycles, bytes)
    instructions: tuple[tuple[str, str, str, str | None, int, int, int], ...] = ()
    blocks: tuple[tuple[int, str, int, int], ...] = ()                  # (block, core, start, end)
    # False when the source recorded no pipe activity (a launch-level trace): the pipe columns
    # then say N/A, not 0
    pipes_recorded: bool = True
    # False on a device without an L2 (the DSPs): the l2_*_bw columns then say N/A, as msprof
    # does for a metric the chip lacks, not 0.0 for a link that does not exist
    l2: bool = True

    @property
    def cycles(self) -> int:
        return self.end - self.issue

    def us(self, cycles: float) -> float:
        return cycles * 1e6 / self.clock_hz

    def kind_of(self, core: str) -> str:
        """"aic", "aiv" or "dsp": which column family a core's figures go to."""
        if self.architecture == "dsp":
            return "dsp"
        if "cubecore" in core:
            return "aic"
        if self.architecture == "coupled" and self.unit == "cube":
            return "aic"
        return "aiv"

    @property
    def task_type(self) -> str:
        if self.unit == "mix":
            return "MIX_AIC"
        if self.architecture == "dsp":
            return "DSP"
        if self.unit == "cube" or self.architecture == "coupled":
            return "AI_CORE"
        return "AI_VECTOR_CORE"


def _shapes(ts: Sequence[TensorInfo]) -> str:
    return ";".join(",".join(str(d) for d in t.shape) for t in ts)


def _dtypes(ts: Sequence[TensorInfo]) -> str:
    return ";".join(DTYPE_NAMES.get(t.dtype, t.dtype.upper()) for t in ts)


def _formats(ts: Sequence[TensorInfo]) -> str:
    return ";".join(t.format for t in ts)


def _pipes(kind: str) -> tuple[tuple[str, str], ...]:
    return {"aic": AIC_PIPES, "aiv": AIV_PIPES, "dsp": DSP_PIPES}[kind]


def _prefix(kind: str) -> str:
    return "aiv" if kind == "dsp" else kind


OP_SUMMARY_HEAD = ["Op Name", "OP Type", "Task Type", "Stream ID", "Task Start Time(us)",
                   "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Mix Block Dim",
                   "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes",
                   "Output Data Types", "Output Formats"]


def _kind_columns(kind: str) -> list[str]:
    p = _prefix(kind)
    cols = [f"{p}_time(us)", f"{p}_total_cycles"]
    for _, stem in _pipes(kind):
        cols += [f"{p}_{stem}_time(us)", f"{p}_{stem}_ratio"]
    return cols


def op_summary(records: Sequence[LaunchRecord], gm_link: str = "HBM") -> tuple[list[str], list[list[Any]]]:
    """(header, rows): one row per launch (see the module docstring)."""
    kinds = [k for k in ("aic", "aiv", "dsp") if any(r.kind_of(c) == k for r in records for c in r.core_cycles)]
    if "dsp" in kinds:
        kinds = ["dsp"]
    head = list(OP_SUMMARY_HEAD)
    for k in kinds:
        head += _kind_columns(k)
    head += ["main_mem_read_bw(GB/s)", "main_mem_write_bw(GB/s)", "l2_read_bw(GB/s)", "l2_write_bw(GB/s)"]
    rows = []
    for r in records:
        row: list[Any] = [r.name, r.op_type, r.task_type, r.stream, _r(r.us(r.issue)), _r(r.us(r.cycles)),
                          _r(r.us(r.wait)), r.block_dim, r.mix_block_dim, _shapes(r.inputs),
                          _dtypes(r.inputs), _formats(r.inputs), _shapes(r.outputs), _dtypes(r.outputs),
                          _formats(r.outputs)]
        for k in kinds:
            cores = [c for c in r.core_cycles if r.kind_of(c) == k]
            if not cores:
                row += ["N/A"] * len(_kind_columns(k))
                continue
            total = sum(r.core_cycles[c] for c in cores)
            row += [_r(r.us(total / len(cores))), int(round(total / len(cores)))]
            for pipe, _ in _pipes(k):
                if not r.pipes_recorded:
                    row += ["N/A", "N/A"]
                    continue
                busy = sum(r.busy.get((c, pipe), 0) for c in cores)
                row += [_r(r.us(busy / len(cores))), _r(busy / total if total else 0.0)]
        seconds = r.cycles / r.clock_hz if r.cycles else 0.0
        # each on the link that carried it: a write-back L2 takes stores on the L2 link
        # (Device.gm_transfer's "L2 write"), the GM link sees only the dirty lines it evicts
        bw = [r.link_bytes.get(f"{gm_link} read", 0), r.link_bytes.get(f"{gm_link} write", 0),
              r.link_bytes.get("L2 read", 0), r.link_bytes.get("L2 write", 0)]
        row += [_r(b / seconds / 1e9 if seconds else 0.0) for b in bw]
        if not r.l2:
            row[-2:] = ["N/A", "N/A"]
        rows.append(row)
    return head, rows


def pipe_utilization(records: Sequence[LaunchRecord]) -> tuple[list[str], list[list[Any]]]:
    """(header, rows): one row per block of each launch, PipeUtilization-style."""
    kinds = [k for k in ("aic", "aiv", "dsp") if any(r.kind_of(c) == k for r in records for c in r.core_cycles)]
    head = ["Op Name", "block_id", "sub_block_id"]
    for k in kinds:
        head += _kind_columns(k)
    rows = []
    for r in records:
        blocks = r.blocks or tuple((i, c, 0, n) for i, (c, n) in enumerate(r.core_cycles.items()))
        per_core: dict[str, list[int]] = {}
        for b, core, _, _ in blocks:
            per_core.setdefault(core, []).append(b)
        for core in sorted(r.core_cycles, key=_core_key):
            k = r.kind_of(core)
            row: list[Any] = [r.name, ";".join(str(b) for b in sorted(per_core.get(core, []))), core]
            total = r.core_cycles[core]
            for kk in kinds:
                if kk != k:
                    row += [""] * len(_kind_columns(kk))
                    continue
                row += [_r(r.us(total)), total]
                for pipe, _ in _pipes(kk):
                    if not r.pipes_recorded:
                        row += ["N/A", "N/A"]
                        continue
                    busy = r.busy.get((core, pipe), 0)
                    row += [_r(r.us(busy)), _r(busy / total if total else 0.0)]
            rows.append(row)
    return head, rows


# bytes: of copies
INSTR_HEAD = ["Op Name", "core", "instr", "pipe", "call_count", "cycles", "running_time(us)", "bytes"]
CODE_HEAD = ["Op Name", "core", "code", "call_count", "cycles", "running_time(us)"]


def instr_exe(records: Sequence[LaunchRecord]) -> tuple[list[str], list[list[Any]]]:
    """(header, rows): calls and busy cycles per (launch, core, pipe, instruction), hottest first."""
    rows: list[list[Any]] = []
    for r in records:
        agg: dict[tuple[str, str, str], list[int]] = {}
        for core, pipe, name, _, calls, cycles, nbytes in r.instructions:
            a = agg.setdefault((core, name, pipe), [0, 0, 0])
            a[0] += calls
            a[1] += cycles
            a[2] += nbytes
        for (core, name, pipe), (calls, cycles, nbytes) in agg.items():
            rows.append([r.name, core, name, pipe, calls, cycles, _r(r.us(cycles)), nbytes])
    rows.sort(key=lambda row: (-row[5], _core_key(row[1]), row[2]))
    return list(INSTR_HEAD), rows


def code_exe(records: Sequence[LaunchRecord]) -> tuple[list[str], list[list[Any]]]:
    """(header, rows): calls and busy cycles per (launch, core, kernel source line), hottest
    first. Empty unless the run stamped source lines (``device.source_lines``)."""
    rows: list[list[Any]] = []
    for r in records:
        agg: dict[tuple[str, str], list[int]] = {}
        for core, _, _, origin, calls, cycles, _ in r.instructions:
            if origin is None:
                continue
            a = agg.setdefault((core, short_origin(origin)), [0, 0])
            a[0] += calls
            a[1] += cycles
        for (core, code), (calls, cycles) in agg.items():
            rows.append([r.name, core, code, calls, cycles, _r(r.us(cycles))])
    rows.sort(key=lambda row: (-row[4], _core_key(row[1]), row[2]))
    return list(CODE_HEAD), rows


TABLES = {"op_summary": op_summary, "pipe_utilization": pipe_utilization, "instr_exe": instr_exe,
          "code_exe": code_exe}


def short_origin(origin: str) -> str:
    """"file.py:line" with the file relative to the opsim package when it is one of ours."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path, _, line = origin.rpartition(":")
    if path.startswith(root + os.sep):
        path = os.path.relpath(path, root)
    return f"{path}:{line}"


def _core_key(name: str) -> tuple:
    from opsim.traces.layout import process_sort_key
    return process_sort_key(name)


def _r(x: float) -> float:
    return float(f"{x:.6g}")


def to_csv(table: tuple[list[str], list[list[Any]]], path: str | None = None) -> str:
    """The table as CSV text (written to ``path`` when given)."""
    head, rows = table
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(head)
    w.writerows(rows)
    text = buf.getvalue()
    if path is not None:
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    return text


def write_tables(records: Sequence[LaunchRecord], path: str, gm_link: str = "HBM") -> dict[str, str]:
    """Write op_summary to ``path`` and the other tables beside it (``F`` -> ``F`` plus
    ``<stem>_pipe_utilization.csv``, ``<stem>_instr_exe.csv``, ``<stem>_code_exe.csv``);
    returns {table: file}."""
    stem, ext = os.path.splitext(path)
    ext = ext or ".csv"
    out = {"op_summary": path}
    to_csv(op_summary(records, gm_link), path)
    for name in ("pipe_utilization", "instr_exe", "code_exe"):
        p = f"{stem}_{name}{ext}"
        to_csv(TABLES[name](records), p)
        out[name] = p
    return out


# -- from a trace ---------------------------------------------------------------------------------

def records_from_trace(trace: Any) -> list[LaunchRecord]:
    """Launch records read back from a trace: launches from the host rows, each core's blocks
    from its BLOCK row, busy cycles and instruction counts from the pipe slices inside them.

    Needs a trace at ``launch`` level or finer (pipe figures need ``tile`` or ``instruction``:
    a launch-level trace gives records whose pipe columns are N/A; at ``tile`` level a slice is a
    tile of a pipe's instructions with the waits inside it, so busy figures are upper bounds and
    instr_exe counts tiles). Tensor
    shapes and per-link bytes come from the ``launches`` entry of the trace metadata that
    ``opsim.run`` writes; source lines are not in traces, so code_exe is empty.
    """
    meta = trace.metadata
    arch = str(meta.get("architecture", ""))
    # the links the device had: no L2 link on the DSPs (a trace without the table: by architecture)
    caps = meta.get("link_capacity_GBps")
    l2 = "L2" in caps if isinstance(caps, dict) and caps else arch != "dsp"
    cols = trace.columns()
    tracks = trace.tracks
    names = cols["name"]
    host = [i for i in range(len(trace)) if tracks[cols["track"][i]][0] == "host"]
    host.sort(key=lambda i: (int(cols["start"][i]), i))
    saved = list(meta.get("launches") or [])
    block_rows = {t: p for t, (p, th) in enumerate(tracks) if th == "BLOCK"}
    sel = np.isin(cols["track"], list(block_rows)) if block_rows else np.zeros(len(trace), bool)
    block_idx = np.nonzero(sel)[0]
    pipe_tracks: dict[str, list[tuple[int, str]]] = {}
    from opsim.traces.layout import PIPES
    for t, (p, th) in enumerate(tracks):
        if th in PIPES:
            pipe_tracks.setdefault(p, []).append((t, th))
    by_track: dict[int, np.ndarray] = {}
    order = np.argsort(cols["track"], kind="stable")
    tr_sorted = cols["track"][order]
    for t in {t for v in pipe_tracks.values() for t, _ in v}:
        lo, hi = np.searchsorted(tr_sorted, [t, t + 1])
        by_track[t] = order[lo:hi]
    used_blocks: set[int] = set()
    by_name = trace.level == "instruction"
    out: list[LaunchRecord] = []
    prev_end: dict[str, int] = {}
    for n, i in enumerate(host):
        name = trace.string(int(names[i]))
        issue, end = int(cols["start"][i]), int(cols["end"][i])
        stream_name = tracks[cols["track"][i]][1]
        d = int(cols["detail"][i])
        detail = trace.string(d) if d >= 0 else ""
        block_dim = int(detail.split("=", 1)[1]) if detail.startswith("block_dim=") else 0
        info = saved[n] if n < len(saved) and saved[n].get("name") == name else {}
        blocks = []
        for jj in block_idx:
            j = int(jj)
            if j in used_blocks:
                continue
            s, e = int(cols["start"][j]), int(cols["end"][j])
            label = trace.string(int(names[j]))
            if issue <= s and e <= end and label.startswith(f"{name} block "):
                used_blocks.add(j)
                blocks.append((int(label.rsplit(" ", 1)[1]), block_rows[int(cols["track"][j])], s, e))
        core_cycles: dict[str, int] = {}
        busy: dict[tuple[str, str], int] = {}
        instr: dict[tuple[str, str, str], list[int]] = {}
        for _, core, s, e in blocks:
            core_cycles[core] = core_cycles.get(core, 0) + e - s
            for t, pipe in pipe_tracks.get(core, ()):
                idx = by_track[t]
                st = cols["start"][idx]
                inside = idx[(st >= s) & (st < e)]
                if not len(inside):
                    continue
                dur = cols["end"][inside] - cols["start"][inside]
                busy[(core, pipe)] = busy.get((core, pipe), 0) + int(dur.sum())
                nb = cols["bytes"][inside]
                for nm in np.unique(names[inside]):
                    m = names[inside] == nm
                    # below instruction level a slice is a tile of a pipe's instructions
                    key = (core, pipe, trace.string(int(nm)) if by_name else "(tile slices)")
                    a = instr.setdefault(key, [0, 0, 0])
                    a[0] += int(m.sum())
                    a[1] += int(dur[m].sum())
                    a[2] += int(nb[m].sum()) if pipe in ("MTE1", "MTE2", "MTE3", "FIXP", "DMA") else 0
        kinds = {("cube" if "cubecore" in c else "vector") for c in core_cycles}
        unit = info.get("unit") or ("mix" if len(kinds) == 2 else "cube" if kinds == {"cube"} else
                                    "dsp" if any(c.startswith("dsp") for c in core_cycles) else "vector")
        wait = issue - prev_end[stream_name] if stream_name in prev_end else 0
        prev_end[stream_name] = end
        out.append(LaunchRecord(
            name=name, op_type=name, unit=unit,
            architecture=arch or ("dsp" if unit == "dsp" else "split"),
            block_dim=int(info.get("block_dim", block_dim)),
            mix_block_dim=int(info.get("mix_block_dim", sum("veccore" in c for c in core_cycles)
                                       if unit == "mix" else 0)),
            stream=int(stream_name[len("stream"):]) if stream_name.startswith("stream") and
            stream_name[len("stream"):].isdigit() else 0,
            issue=issue, start=int(info.get("start", issue)), end=end, wait=wait, clock_hz=trace.clock_hz,
            inputs=tuple(TensorInfo(tuple(t[0]), t[1], t[2]) for t in info.get("inputs", ())),
            outputs=tuple(TensorInfo(tuple(t[0]), t[1], t[2]) for t in info.get("outputs", ())),
            core_cycles=core_cycles, busy=busy, link_bytes=dict(info.get("link_bytes", {})),
            instructions=tuple((c, p, nm, None, a[0], a[1], a[2]) for (c, p, nm), a in instr.items()),
            blocks=tuple(blocks), pipes_recorded=trace.level != "launch", l2=l2))
    return out


def launch_metadata(records: Iterable[LaunchRecord]) -> list[dict[str, Any]]:
    """What a trace's metadata keeps of each launch (``records_from_trace`` reads it back)."""
    return [{"name": r.name, "unit": r.unit, "block_dim": r.block_dim, "mix_block_dim": r.mix_block_dim,
             "start": r.start,
             "inputs": [[list(t.shape), t.dtype, t.format] for t in r.inputs],
             "outputs": [[list(t.shape), t.dtype, t.format] for t in r.outputs],
             "link_bytes": dict(r.link_bytes)} for r in records]
