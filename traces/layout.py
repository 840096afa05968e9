"""Row layout shared by the exporters: which process and thread each slice lands on, and when.

The vendor's op-simulator traces (docs/sources.md#vendor-op-trace-layout) have one process per core
(``core0.veccore0``, ``core0.cubecore0``, ``dsp.core3``) and one thread per pipe. We add a ``host``
process (one thread per stream, the launches) first and a ``memory`` process (link bandwidth and L2
counters) last. Threads inside a core: the ``BLOCK`` row, then the pipes in the vendor's order.

Perfetto requires slices on one thread to nest strictly; same-pipe work that overlaps is split
into sub-lanes ``PIPE#1``, ``PIPE#2``… (the PyPTO convention). An in-order pipe never overlaps
itself, so in practice every slice stays on lane 0, but the exporter does not rely on that.

Times: slices are exported on a whole-nanosecond grid. Viewers convert ``ts`` and ``dur``
separately to integer nanoseconds; with both already whole, ``end = ts + dur`` of one slice is
exactly the ``ts`` of the next one and back-to-back slices never overlap by a rounding nanosecond.
Exact cycles travel in the slice arguments (``start_cycle``, ``cycles``).
"""
from __future__ import annotations

import heapq
import re
from dataclasses import dataclass

import numpy as np

from opsim.traces.trace import PIPE_ORDER, Trace

_CORE_RE = re.compile(r"^core(\d+)\.(cubecore|veccore)(\d+)$")
_DSP_RE = re.compile(r"^dsp\.core(\d+)$")
_NUM_RE = re.compile(r"(\d+)")

# Pipes that move bytes to or from global memory (their slices carry GM bytes).
GM_PIPES = ("MTE2", "MTE3", "DMA", "FIXP")
# Rows that hold instructions of a pipe (not the BLOCK row, not host streams).
PIPES = frozenset(PIPE_ORDER)


def process_sort_key(name: str) -> tuple:
    """host first, then cores by number (cube core before its vector cores), DSP cores, memory last."""
    if name == "host" or name.startswith("host"):
        return (0, 0, 0, 0, name)
    m = _CORE_RE.match(name)
    if m:
        return (1, int(m.group(1)), 0 if m.group(2) == "cubecore" else 1, int(m.group(3)), name)
    m = _DSP_RE.match(name)
    if m:
        return (2, int(m.group(1)), 0, 0, name)
    if name == "memory":
        return (4, 0, 0, 0, name)
    return (3, 0, 0, 0, name)


def _natural(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in _NUM_RE.split(name))


def thread_sort_key(name: str) -> tuple:
    """BLOCK, then pipes in the vendor's order, then anything else (streams) in natural order."""
    if name == "BLOCK":
        return (0, 0, ())
    if name in PIPES:
        return (1, PIPE_ORDER.index(name), ())
    return (2, 0, _natural(name))


def lane_name(thread: str, lane: int) -> str:
    return thread if lane == 0 else f"{thread}#{lane}"


def base_thread(name: str) -> str:
    """``MTE2#1`` -> ``MTE2`` (sub-lanes fold back onto their pipe)."""
    head, sep, tail = name.rpartition("#")
    return head if sep and tail.isdigit() else name


def ns_of(cycles: np.ndarray | int, clock_hz: float) -> np.ndarray:
    """Cycles -> whole nanoseconds (round half to even, deterministic)."""
    return np.rint(np.asarray(cycles, dtype=np.float64) * (1e9 / clock_hz)).astype(np.int64)


@dataclass
class Layout:
    """Where every slice of a trace goes in an exported file."""

    processes: list[str]                         # in display order; pid = index + 1
    threads: dict[int, list[tuple[str, int]]]    # pid -> [(thread row name, tid)] in display order
    slice_pid: np.ndarray                        # per slice
    slice_tid: np.ndarray                        # per slice
    start_ns: np.ndarray
    end_ns: np.ndarray
    counter_pid: dict[int, int]                  # counter track -> pid
    run_cycles: tuple[int, int]

    def pid(self, process: str) -> int:
        return self.processes.index(process) + 1


def layout(trace: Trace) -> Layout:
    n = len(trace)
    track = np.frombuffer(trace.s_track, dtype=np.int32) if n else np.zeros(0, np.int32)
    start = np.frombuffer(trace.s_start, dtype=np.int64) if n else np.zeros(0, np.int64)
    end = np.frombuffer(trace.s_end, dtype=np.int64) if n else np.zeros(0, np.int64)
    start_ns = ns_of(start, trace.clock_hz)
    end_ns = ns_of(end, trace.clock_hz)
    lanes = _lanes(track, start_ns, end_ns)

    used_tracks = np.unique(track) if n else np.zeros(0, np.int32)
    names = {int(t): trace.track_names(int(t)) for t in used_tracks}
    procs = {p for p, _ in names.values()}
    counter_procs = {trace.string(p) for p, _ in trace._counter_tracks}
    processes = sorted(procs | counter_procs, key=process_sort_key)
    pid_of = {p: i + 1 for i, p in enumerate(processes)}

    # rows per process: (base thread, lane) pairs that carry slices
    rows: dict[int, set[tuple[str, int]]] = {pid: set() for pid in pid_of.values()}
    if n:
        width = int(lanes.max()) + 1
        key = track.astype(np.int64) * width + lanes
        ukeys, inverse = np.unique(key, return_inverse=True)
        for k in ukeys:
            p, th = names[int(k // width)]
            rows[pid_of[p]].add((th, int(k % width)))
    threads: dict[int, list[tuple[str, int]]] = {}
    tid_of: dict[tuple[int, str, int], int] = {}
    # tids are unique across the whole file (some viewers key threads by tid alone): pid * stride
    # + row, with a stride of 1000 unless a process has more rows (overlapping slices' lanes)
    stride = 1000
    while any(len(pairs) >= stride for pairs in rows.values()):
        stride *= 10
    for pid, pairs in rows.items():
        ordered = sorted(pairs, key=lambda tl: (thread_sort_key(tl[0]), tl[1]))
        threads[pid] = []
        for k, (th, lane) in enumerate(ordered):
            tid = pid * stride + k + 1
            threads[pid].append((lane_name(th, lane), tid))
            tid_of[(pid, th, lane)] = tid
    slice_pid = np.zeros(n, dtype=np.int64)
    slice_tid = np.zeros(n, dtype=np.int64)
    if n:
        key_pid = np.empty(len(ukeys), dtype=np.int64)
        key_tid = np.empty(len(ukeys), dtype=np.int64)
        for j, k in enumerate(ukeys):
            p, th = names[int(k // width)]
            key_pid[j] = pid_of[p]
            key_tid[j] = tid_of[(pid_of[p], th, int(k % width))]
        slice_pid = key_pid[inverse]
        slice_tid = key_tid[inverse]
    counter_pid = {c: pid_of[trace.string(p)] for c, (p, _) in enumerate(trace._counter_tracks)}
    return Layout(processes, threads, slice_pid, slice_tid, start_ns, end_ns, counter_pid,
                  trace.run_window())


def _lanes(track: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """Sub-lane of every slice: 0 unless it overlaps earlier work on the same track."""
    n = len(track)
    lanes = np.zeros(n, dtype=np.int64)
    if n < 2:
        return lanes
    order = np.lexsort((np.arange(n), start_ns, track))
    t, s, e = track[order], start_ns[order], end_ns[order]
    # Running maximum of the ends within each track: shift every track into its own band of
    # time so that one accumulate over the whole array never mixes two tracks.
    rank = np.concatenate(([0], np.cumsum(t[1:] != t[:-1])))
    band = int(max(e.max(), s.max())) - int(min(s.min(), 0)) + 1
    s2 = s + rank * band
    e2 = e + rank * band
    clash = s2[1:] < np.maximum.accumulate(e2)[:-1]
    if not clash.any():
        return lanes
    # rare: assign lanes greedily, each slice (in start order) to the lowest-numbered lane whose
    # last slice has ended. Lanes that ended before a start stay free for every later start, so
    # two heaps (busy lanes by end, free lanes by number) give O(n log n) per track.
    bounds = np.flatnonzero(np.diff(rank)) + 1
    first = np.concatenate(([0], bounds))
    last = np.concatenate((bounds, [n]))
    for tr in np.unique(t[1:][clash]):
        k = int(np.searchsorted(t, tr))   # tracks are sorted: the track's run in ``order``
        j = int(np.searchsorted(first, k))
        idx = order[first[j]:last[j]]
        busy: list[tuple[int, int]] = []   # (end, lane)
        free: list[int] = []
        n_lanes = 0
        for i, st, en in zip(idx.tolist(), start_ns[idx].tolist(), end_ns[idx].tolist()):
            while busy and busy[0][0] <= st:
                heapq.heappush(free, heapq.heappop(busy)[1])
            if free:
                lane = heapq.heappop(free)
            else:
                lane, n_lanes = n_lanes, n_lanes + 1
            lanes[i] = lane
            heapq.heappush(busy, (en, lane))
    return lanes
