"""Closed-form cost model: the simulator's cost tables without the event loop.

(docs/sources.md#design-modes-s7, estimate.)

The same numbers the simulator spends are used here, combined by formulas instead of by SimPy:

- a vector instruction of ``n`` elements costs ``ceil(k·n + b)`` cycles from the spec's
  ``vector.cost`` table (docs/sources.md#vector-cost-table), plus the vector pipe head once per core;
- a DMA copy costs its start-up latency plus ``bytes / rate``; the rate of each of ``c``
  concurrent copies is the calibrated ``base + shared/c`` (docs/sources.md#mte-load-store, ``t = a + b/blockDim``),
  reconciled with the link it rides by max-min fair filling, as ``simulator/links.py`` does:
  loads ride the GM link, stores too unless a write-back L2 takes them on the L2 link
  (``l2.write_policy``, as ``Device.gm_transfer`` routes them), loads the L2 serves the L2 link;
  the first copy on a core pays the pipe head once per launch (MTE2 ``head + head_per_block·blockDim``
  with blockDim the blocks running at once, its large-load form when a load of the block reaches
  ``head_large_from`` bytes, assumption A-10; MTE3 head): blocks beyond the cores run in waves, and
  only the first wave pays heads;
- the launch overhead is paid once per launch;
- pipes overlap as the TQue flags allow: CopyIn of tile ``i`` waits until Compute of tile
  ``i − buffer_num`` has freed its buffer, Compute waits for its CopyIn and for CopyOut of tile
  ``i − buffer_num``, CopyOut waits for its Compute; every pipe is in order. With double
  buffering the steady-state tile period is the largest pipe time of a tile; with one buffer it
  is the compute time plus the larger of the load and store times (the load of the next tile
  overlaps the store of this one). On a DSP loads and stores share the one DMA pipe.

Operators describe the work of one tile (:class:`TileWork`) and hand their tiling's numbers to
:func:`pipeline_estimate`. These closed forms are kept only where they beat the replay of the
kernel program (opsim/estimate.py ``CLOSED_FORM_KEPT``; every other operator, a user's own
kernels included, is estimated by simulator/replay.py). Nothing here imports the simulator's event machinery, so an
estimate costs microseconds: studies rank thousands of points with it and confirm the best with
the simulator.
"""
from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from opsim.devices.spec import DeviceSpec, DmaModel
from opsim.simulator.core import pipe_head_cycles
from opsim.simulator.isa import vector_cost

__all__ = ["TileWork", "Estimate", "vector_cycles", "cast_work", "head_cycles", "copy_rates",
           "pipeline_estimate", "memory_pipes", "shared_rates", "l2_read_rate",
           "dma_cycles", "sequence", "lockstep_copy_cycles", "stores_to_l2", "drain_cycles", "writeback_share",
           "sparse_store_rate", "with_writebacks", "fresh_placement"]


@dataclass(frozen=True)
class TileWork:
    """What one tile of ``n`` elements does on each pipe.

    ``loads``/``stores`` are the bytes of each GM copy (one DataCopy each, each paying its
    start-up); ``l2_loads`` are copies served by the L2 (re-read broadcast operands);
    ``vector`` lists ``(cost-table key, dtype, elements)`` per vector instruction.
    """

    loads: tuple[int, ...]
    vector: tuple[tuple[str, str, int], ...]
    stores: tuple[int, ...]
    l2_loads: tuple[int, ...] = ()


@dataclass(frozen=True)
class Estimate:
    """An analytical estimate of one launch (or a sequence of launches) of an operator."""

    cycles: int
    pipe_busy: Mapping[str, int]          # busiest core's busy cycles per pipe
    bytes_read: int
    bytes_written: int
    block_dim: int
    ub_bytes: int = 0
    workspace_bytes: int = 0
    launches: int = 1
    model: str = "pipeline"               # "pipeline" | "replay" | an operator's own name
    notes: str = ""
    extra: Mapping[str, object] = field(default_factory=dict)
    l2_bytes_read: int = 0                # of bytes_read, those the L2 serves (not HBM traffic)
    # of bytes_written, those a write-back L2 writes back to the GM link within the call (None:
    # what does not fit the L2, the least it can be)
    gm_bytes_written: int | None = None
    # the tensor the launch's stores go into (a label, None: not said): a later launch storing
    # into the same tensor rewrites the L2 lines of it still resident (with_writebacks)
    stores_into: str | None = None
    # of the bytes the launch moves, those that take an L2 line of their own (its HBM reads and
    # its stores into lines not resident; with_writebacks sets it, None: not known): each of them
    # evicts gm_bytes_written / l2_bytes_allocated dirty bytes on average once the L2 is full
    l2_bytes_allocated: int | None = None


# ---------------------------------------------------------------------------------------------
# primitive costs
# ---------------------------------------------------------------------------------------------

def vector_cycles(spec: DeviceSpec, op: str, dtype: str, n: int) -> int:
    """``ceil(k·n + b)`` from the spec's vector cost table: the simulator's own rule."""
    return vector_cost(spec, op, dtype, n)


def cast_work(src: str, dst: str, n: int) -> tuple[tuple[str, str, int], ...]:
    """The vector entry of ``Cast(src -> dst)``; a same-type cast costs nothing (GE-PERF table)."""
    return () if src == dst else ((f"Cast_{src}_{dst}", src, n),)


def memory_pipes(spec: DeviceSpec) -> tuple[str, str]:
    """(load pipe, store pipe): MTE2/MTE3 on Ascend, the one DMA pipe on a DSP."""
    return ("DMA", "DMA") if spec.family == "dsp" else ("MTE2", "MTE3")


def _model(spec: DeviceSpec, pipe: str) -> DmaModel:
    model = {"MTE2": spec.mte2, "MTE3": spec.mte3, "DMA": spec.dma}.get(pipe)
    if model is None:
        raise ValueError(f"{spec.name} has no {pipe} model")
    return model


def head_cycles(spec: DeviceSpec, pipe: str, concurrent: int, load_bytes: int = 0) -> int:
    """One-off cycles of a core's first busy instruction on ``pipe`` in a launch, ``concurrent``
    blocks running at once (the simulator's rule: ``min(block_dim, cores)``); ``load_bytes``: the
    core's largest load of the launch on ``pipe``, which may make MTE2's head its large-load
    form (assumption A-10: the simulator pays the whole of it by the core's first large load)."""
    return pipe_head_cycles(spec, pipe, concurrent, load_bytes)


def stores_to_l2(spec: DeviceSpec) -> bool:
    """Whether a write-back L2 takes the stores on the L2 link (``Device.gm_transfer``: MTE3 and
    Fixpipe stores allocate in the L2; HBM sees only the dirty lines evicted)."""
    return spec.family != "dsp" and spec.l2 is not None and spec.l2.write_policy == "write-back"


def fresh_placement(spec: DeviceSpec, sizes: Sequence[tuple[str, int]]) -> dict[str, int]:
    """The GM address of each buffer, in ``sizes`` order (name, bytes), as a call of opsim.run
    places them on its fresh device: ``Device.malloc`` one after another (the operands in the
    order of the call's descriptors, then the workspace), the aligned first fit of
    ``Region.allocate`` on an empty region -- back to back from ``gm.base``, each rounded up to
    ``gm.alignment`` (a zero-byte buffer still takes one unit). Where a buffer starts within an
    L2 line decides which lines neighbouring pieces of it share."""
    align = spec.gm.alignment
    out: dict[str, int] = {}
    at = -(-spec.gm.base // align) * align
    for name, nbytes in sizes:
        out[name] = at
        at += -(-max(int(nbytes), 1) // align) * align
    return out


def writeback_share(spec: DeviceSpec, read: float, written: float) -> float:
    """Of the bytes a call stores into a write-back L2, the share written back to the GM link
    before the call ends: an LRU L2 holds the last ``l2.size`` bytes the call touched, dirty in
    the share the stores have of what it touches; the rest of them were evicted to HBM. (MSE,
    3 x 256 MiB in, 256 MiB out, 192 MiB L2: 81 %, as the simulator writes back.) 0 without a
    write-back L2 or when everything fits."""
    if not stores_to_l2(spec) or written <= 0:
        return 0.0
    assert spec.l2 is not None
    return max(0.0, 1.0 - spec.l2.size / (read + written))


def with_writebacks(spec: DeviceSpec, parts: Sequence[Estimate], distinct: float | None = None) -> list[Estimate]:
    """The launches of a call, one after another, with the dirty lines a write-back L2 evicts to
    HBM, which a closed form's program does not move: the L2 holds the last ``l2.size`` bytes the
    launches allocated (their HBM reads and their stores, interleaved within a launch), and a
    launch writes back the dirty bytes its allocations push out (embedding on atlas-a2, 4096 x
    2048 rows into 32000: ZerosLike 61 MB of its own 262, MemSet all 262 MB, as timing mode).
    Each launch gets ``gm_bytes_written``, and takes at least its HBM bytes over the HBM link
    (MemSet with half the HBM is HBM-bound: 683k cycles, its program's stores alone 547k).
    ``distinct``: the most bytes of lines the call's stores can touch (the tensors it writes), so
    a launch that stores into the same lines again (atomic adds into a small accumulator)
    allocates them once. The L2 holds lines, not bytes: a launch storing into the tensor an
    earlier one stored into (``Estimate.stores_into``) rewrites the lines of it still resident --
    they stay dirty and turn most recent -- and allocates only the rest (the embedding's
    ZerosLike then MemSet of a 131 MB output in a 192 MB L2 write nothing back, as timing mode;
    counted as new bytes, 60 MB were, +23 % with a quartered HBM). A launch that stores into only
    part of the tensor, or with another split of blocks than the launch that last stored all of
    it, finds those lines at the end of each of that launch's block slices (:func:`_rewritten`)."""
    if not stores_to_l2(spec):
        return list(parts)
    assert spec.l2 is not None
    size = float(spec.l2.size)
    cap = spec.bytes_per_cycle(spec.gm.bandwidth)
    # [bytes, dirty bytes, the tensor its stores went into], the oldest first
    held: deque[list[Any]] = deque()
    sizes: dict[str, float] = {}                # the most bytes a launch stored into each tensor
    slices: dict[str, int] = {}                 # the blocks of the last launch that stored all of it
    used = 0.0
    out = []
    for e in parts:
        reads = float(e.bytes_read - e.l2_bytes_read)
        stores = float(e.bytes_written) if distinct is None else min(float(e.bytes_written), distinct)
        label = e.stores_into
        if label is not None and stores > 0:
            # the launch stores from the tensor's start. A pass over all of it split into blocks
            # as the last one was (each slice alike, so as for one slice): what the L2 holds of
            # it is its end (the lines the earlier pass touched last). Those lines are rewritten,
            # not allocated, if the pass reaches them before its own allocations evict them: what
            # it allocates first must fit in the free space and the lines older than the
            # tensor's. Otherwise the pass chases them out line by line (an LRU over a cyclic pass
            # larger than the cache): every line is allocated (MemSet after ZerosLike of a 262 MB
            # output in a 192 MB L2 writes all 262 MB back, as timing mode). Any other launch:
            # _rewritten.
            whole = sizes[label] = max(sizes.get(label, 0.0), stores)
            resident = sum(seg[1] for seg in held if seg[2] == label)
            first = next((i for i, seg in enumerate(held) if seg[2] == label), len(held))
            slack = size - used + sum(seg[0] for seg in list(held)[:first])
            laid = slices.get(label, 1)
            if stores >= whole * (1 - 1e-9) and max(e.block_dim, 1) == laid:
                before = min(stores, whole - resident)
                again = max(0.0, stores - (whole - resident)) if before * (1 + reads / stores) <= slack + 1e-9 else 0.0
            else:
                again = _rewritten(whole, resident, laid, stores, reads, slack)
            if stores >= whole * (1 - 1e-9):
                slices[label] = max(e.block_dim, 1)
            rewrites = again
            for seg in held:
                if seg[2] == label and again > 0:
                    take = min(seg[1], again)
                    seg[0] -= take
                    seg[1] -= take
                    used -= take
                    again -= take
            held = deque(seg for seg in held if seg[0] > 1e-9)
        else:
            rewrites = 0.0
        alloc = reads + stores
        # the launch's stores and reads fill the L2 in program order: the first ``size - used``
        # bytes take free lines, each later one evicts the oldest (Device.gm_transfer makes the
        # store wait for the HBM write of the dirty lines it evicts)
        free = size - used
        if alloc > 0:
            held.append([alloc, stores, e.stores_into])
            used += alloc
        wb, over = 0.0, used - size
        pieces: list[tuple[float, float]] = []      # (bytes allocated, dirty bytes they evict)
        while over > 1e-9 and held:
            seg = held[0]
            take = min(seg[0], over)
            dirty = take * seg[1] / seg[0]
            wb += dirty
            pieces.append((take, dirty))
            seg[0] -= take
            seg[1] -= dirty
            over -= take
            used -= take
            if seg[0] <= 1e-9:
                held.popleft()
        wb_bytes = int(round(wb))
        e = dataclasses.replace(e, gm_bytes_written=wb_bytes, l2_bytes_allocated=int(round(max(alloc - rewrites, 0.0))))
        overhead = spec.launch.overhead * e.launches
        link = math.ceil((reads + wb_bytes) / cap) + overhead
        if wb_bytes and alloc > 0:
            # a write-back is bound to the stores that evict it: the bytes the launch allocates
            # before the L2 is full move at the program's pace with nothing to write back, and
            # only the rest share the HBM link with the dirty lines they evict -- the program's
            # time spread evenly over what it allocates, each span taking the longer of its
            # share of it and its HBM bytes over the link (ZerosLike of a 131 MB output into an
            # empty 32 MB L2 on a quartered HBM: its first quarter evicts nothing, the rest waits
            # for 97.5 MB of write-back, 415k cycles as timing mode; a whole-launch bound 349k)
            body = float(max(e.cycles - overhead, 0))
            spans = [(min(max(free, 0.0), alloc), 0.0)] + pieces
            spans.append((max(alloc - sum(a for a, _ in spans), 0.0), 0.0))   # rewrites, after the evictions
            link = max(link, math.ceil(sum(max(a / alloc * body, (a * reads / alloc + d) / cap)
                                           for a, d in spans)) + overhead)
        if wb_bytes and link > e.cycles:
            e = dataclasses.replace(e, cycles=link, notes=(e.notes + "; " if e.notes else "") + (
                f"HBM-bound: {int(reads) + wb_bytes} B over the {spec.gm.kind} link, {wb_bytes} B of them dirty "
                f"lines the L2 writes back (the closed form's program has no write-back)"))
        out.append(e)
    return out


def _rewritten(whole: float, resident: float, laid: int, stores: float, reads: float, slack: float) -> float:
    """Bytes of a tensor's resident lines that a launch storing into its first ``stores`` bytes
    rewrites, when its blocks do not walk the tensor as the ``laid`` blocks of the launch that
    last stored all of it did (a scatter into some rows, a pass with another split). That launch's
    blocks stored their equal slices at once, so the L2 holds the end of each slice (the share
    ``resident / whole`` of it), not the tensor's end: the stored span holds the slice ends it
    overlaps (atlas-a2, the scatter of 4096 x 2048 rows into the first 4096 of a 32000-row output
    MemSet just filled: 25 of its 33.5 MB). Its blocks reach those lines in no relation to their
    age, while its own allocations evict the tensor's lines oldest first once the free space and
    the older lines are gone: a line is lost (allocated again) with the share of the tensor's
    resident lines evicted by the time it is reached, averaged over the launch."""
    if resident <= 0 or stores <= 0:
        return 0.0
    f = min(resident / whole, 1.0)
    span = whole / max(laid, 1)
    full, part = divmod(min(stores, whole), span)
    held = full * f * span + max(0.0, part - (1 - f) * span)
    alloc = reads + stores - held           # what the launch allocates with every resident line kept
    if alloc <= slack:
        return held
    # the share of the resident lines evicted grows from 0 once the allocations pass the slack,
    # linearly over the launch, up to all of them: its mean over the launch
    t0, t1 = slack / alloc, (slack + resident) / alloc
    lost = (1 - t0) * (alloc - slack) / (2 * resident) if t1 >= 1 else 1 - (t0 + t1) / 2
    return held * (1 - lost)


def _fill(cap: float, classes: Sequence[tuple[float, float]]) -> list[float]:
    """Max-min fair rates of classes of ``n`` copies each demanding ``d`` bytes/cycle on a link
    of ``cap`` bytes/cycle (progressive filling), in the order given."""
    rates = [d for d, _ in classes]
    left, users = cap, sum(n for _, n in classes)
    for i in sorted(range(len(classes)), key=lambda i: classes[i][0]):
        d, n = classes[i]
        if n == 0:
            continue
        rates[i] = min(d, left / users)
        left -= rates[i] * n
        users -= n
    return rates


def copy_rates(spec: DeviceSpec, loaders: float, storers: float) -> tuple[float, float]:
    """Bytes/cycle of each load and each store when ``loaders`` loads and ``storers`` stores move
    at once: demand ``base + shared/n`` per pool, then max-min fair sharing of the link each
    rides -- both the GM link, or the stores the L2 link when a write-back L2 takes them."""
    load_pipe, store_pipe = memory_pipes(spec)
    ml, ms = _model(spec, load_pipe), _model(spec, store_pipe)
    if load_pipe == store_pipe:
        n = loaders + storers
        dl = ds = ml.base + (ml.shared / n if n else 0.0)
    else:
        dl = ml.base + (ml.shared / loaders if loaders else 0.0)
        ds = ms.base + (ms.shared / storers if storers else 0.0)
    cap = spec.bytes_per_cycle(spec.gm.bandwidth)
    if stores_to_l2(spec):
        assert spec.l2 is not None
        (rl,) = _fill(cap, [(dl, loaders)])
        (rs,) = _fill(spec.bytes_per_cycle(spec.l2.bandwidth), [(ds, storers)])
        return rl, rs
    rl, rs = _fill(cap, [(dl, loaders), (ds, storers)])
    return rl, rs


# ---------------------------------------------------------------------------------------------
# the element-wise CopyIn -> Compute -> CopyOut pipeline
# ---------------------------------------------------------------------------------------------

# Weight of the lockstep (all stores at once) bound against the evenly-spread bound when loads
# and stores of many cores contend for the GM link; see _memory_times and docs/estimate.md.
LOCKSTEP_WEIGHT = 0.5


@dataclass(frozen=True)
class _Stage:
    load: float
    compute: float
    store: float


def _memory_times(spec: DeviceSpec, w: TileWork, concurrent: int, overlap_in: bool,
                  overlap_out: bool, shared_pipe: bool) -> tuple[float, float]:
    """Cycles of a tile's loads and of its stores, data time plus one start-up per copy.

    ``overlap_in``: the tile's loads run while the cores' stores move (contended rates);
    ``overlap_out``: its stores run while loads move.
    """
    load_pipe, store_pipe = memory_pipes(spec)
    ml, ms = _model(spec, load_pipe), _model(spec, store_pipe)
    lb, sb = float(sum(w.loads)), float(sum(w.stores))
    rl_only, _ = copy_rates(spec, concurrent, 0)
    _, rs_only = copy_rates(spec, 0, concurrent)
    n_loads = len(w.loads) + len(w.l2_loads)
    if stores_to_l2(spec) and not shared_pipe:
        # a write-back L2 takes the stores on the L2 link: the HBM loads have the GM link to
        # themselves; the loads the L2 serves share the L2 link with the stores (all cores in
        # lockstep: the tile's stores move while the next tile's loads do)
        assert spec.l2 is not None
        l2b = float(sum(w.l2_loads))
        rs, l2r = rs_only, l2_read_rate(spec, concurrent)
        if l2b and sb:
            ds = ms.base + ms.shared / max(concurrent, 1)
            l2r, rs = _fill(spec.bytes_per_cycle(spec.l2.bandwidth),
                            [(float(spec.rates.l2_read), max(concurrent, 1)), (ds, max(concurrent, 1))])
        return ((lb / rl_only if lb else 0.0) + (l2b / l2r if l2b else 0.0) + ml.startup * n_loads,
                (sb / rs if sb else 0.0) + ms.startup * len(w.stores))
    if shared_pipe or not (overlap_in or overlap_out) or lb == 0 or sb == 0:
        load_data = lb / rl_only if lb else 0.0
        store_data = sb / rs_only if sb else 0.0
    else:
        rl_both, rs_both = copy_rates(spec, concurrent, concurrent)
        # the store runs inside the load window (or the other way round): both at contended
        # rates while both move, then the longer one alone at its own rate
        t_store = sb / rs_both
        if lb >= rl_both * t_store:
            load_both = t_store + (lb - rl_both * t_store) / rl_only
            store_both = t_store
        else:
            load_both = lb / rl_both
            store_both = load_both + (sb - rs_both * load_both) / rs_only
        # Lockstep is an upper bound: identical cores start together, so every store overlaps
        # the loads at once. Once contention bites they drift apart and the stores spread over
        # the period; the lower bound is then the loads at their own rate, or the whole period's
        # bytes of all cores over the GM link. The simulator lands between the two; the
        # estimate takes the weighted middle (LOCKSTEP_WEIGHT, calibrated in docs/estimate.md).
        cap = spec.bytes_per_cycle(spec.gm.bandwidth)
        load_spread = max(lb / rl_only, concurrent * (lb + sb) / cap)
        store_spread = sb / rs_only
        wgt = LOCKSTEP_WEIGHT
        load_data = (wgt * load_both + (1 - wgt) * load_spread) if overlap_in else lb / rl_only
        store_data = (wgt * store_both + (1 - wgt) * store_spread) if overlap_out else sb / rs_only
    l2 = 0.0
    if w.l2_loads and spec.l2 is not None:
        l2_rate = min(spec.rates.l2_read, spec.bytes_per_cycle(spec.l2.bandwidth) / max(concurrent, 1))
        l2 = sum(w.l2_loads) / l2_rate
    return (load_data + l2 + ml.startup * n_loads, store_data + ms.startup * len(w.stores))


def _vector_time(spec: DeviceSpec, w: TileWork) -> float:
    return float(sum(vector_cycles(spec, op, dt, n) for op, dt, n in w.vector))


def _block(spec: DeviceSpec, tiles: Sequence[int], work: Callable[[int], TileWork], buffer_num: int,
           concurrent: int, head_width: int) -> tuple[float, dict[str, float], int, int, int]:
    """Makespan, busy cycles per pipe, bytes read and written, and bytes read from the L2, of
    one block of ``tiles``; ``head_width``: the blocks running at once that the pipe heads are
    priced for, 0 when the block's core has paid them (a later wave).

    The recurrence follows the TQue flags and the program order of each pipe; a long run of
    identical tiles is evaluated for a few tiles and extended by its steady-state period, so
    the cost does not grow with the number of tiles.
    """
    load_pipe, store_pipe = memory_pipes(spec)
    shared_pipe = load_pipe == store_pipe
    # one in-order DMA queue: the shared pipeline issues CopyIn of tile i+1 before CopyOut of
    # tile i (simulator/tile.py elementwise_pipeline, prefetch) when double-buffered
    prefetch = shared_pipe and buffer_num >= 2
    lag = max(1, buffer_num)
    if not tiles:
        return 0.0, {load_pipe: 0.0, "VECTOR": 0.0, store_pipe: 0.0}, 0, 0, 0
    # the block's largest load prices the load head; paid with the first tile, which is
    # where it is: the tiles after the first are as long or shorter (the tail)
    largest = max((b for n in set(tiles) for w in (work(n),) for b in (*w.loads, *w.l2_loads)), default=0)
    heads = {p: float(head_cycles(spec, p, head_width, largest if p == load_pipe else 0)) if head_width else 0.0
             for p in (load_pipe, "VECTOR", store_pipe)}
    keep = 8
    full = len(tiles) - (1 if len(tiles) > 1 and tiles[-1] != tiles[0] else 0)
    skipped = max(0, full - keep)
    sim = list(tiles[:full - skipped]) + list(tiles[full:])
    total = len(sim)
    w0 = work(sim[0])
    # a pipe pays its head on its first busy instruction only: a kernel without loads pays none
    has = {"load": bool(w0.loads or w0.l2_loads), "vector": bool(w0.vector), "store": bool(w0.stores)}
    cache: dict[tuple[int, bool, bool], _Stage] = {}

    def stage(k: int) -> _Stage:
        n = sim[k]
        key = (n, k > 0, k < total - 1)
        if key not in cache:
            w = work(n)
            ld, st = _memory_times(spec, w, concurrent, k > 0, k < total - 1, shared_pipe)
            cache[key] = _Stage(ld, _vector_time(spec, w), st)
        return cache[key]

    def durations(k: int) -> tuple[float, float, float]:
        st = stage(k)
        first = k == 0
        return (st.load + (heads[load_pipe] if first and has["load"] else 0.0),
                st.compute + (heads["VECTOR"] if first and has["vector"] else 0.0),
                st.store + (heads[store_pipe] if first and has["store"] and (
                    not shared_pipe or not has["load"]) else 0.0))

    free = {load_pipe: 0.0, "VECTOR": 0.0, store_pipe: 0.0}
    l_end: dict[int, float] = {}
    c_end: dict[int, float] = {}
    s_end: dict[int, float] = {}

    def load(k: int) -> None:
        l_end[k] = max(free[load_pipe], c_end.get(k - lag, 0.0)) + durations(k)[0]
        free[load_pipe] = l_end[k]

    if prefetch:
        load(0)
    for k in range(total):
        if not prefetch:
            load(k)
        elif k + 1 < total:
            load(k + 1)
        _, vc, sd = durations(k)
        c_end[k] = max(free["VECTOR"], l_end[k], s_end.get(k - lag, 0.0)) + vc
        free["VECTOR"] = c_end[k]
        s_end[k] = max(free[store_pipe], c_end[k]) + sd
        free[store_pipe] = s_end[k]
    makespan = max(free.values())
    busy = {load_pipe: 0.0, "VECTOR": 0.0, store_pipe: 0.0}
    nbytes_r = nbytes_w = nbytes_l2 = 0
    for k in range(total):
        ld, vc, sd = durations(k)
        times = 1 + (skipped if k == full - skipped - 1 and skipped else 0)
        if times > 1:   # the skipped tiles are middle tiles: no heads, contended rates
            st = stage(k)
            ld, vc, sd = st.load, st.compute, st.store
            busy[load_pipe] += durations(k)[0] - ld
            busy["VECTOR"] += durations(k)[1] - vc
            busy[store_pipe] += durations(k)[2] - sd
        busy[load_pipe] += times * ld
        busy["VECTOR"] += times * vc
        busy[store_pipe] += times * sd
        w = work(sim[k])
        nbytes_r += times * (sum(w.loads) + sum(w.l2_loads))
        nbytes_l2 += times * sum(w.l2_loads)
        nbytes_w += times * sum(w.stores)
    if skipped:
        last = full - skipped - 1
        period = max(c_end[last] - c_end[last - 1], s_end[last] - s_end[last - 1],
                     l_end[last] - l_end[last - 1])
        makespan += skipped * period
    return makespan, busy, nbytes_r, nbytes_w, nbytes_l2


def _tiles(length: int, tile_length: int) -> list[int]:
    if length <= 0:
        return []
    full, rem = divmod(length, tile_length)
    return [tile_length] * full + ([rem] if rem else [])


def pipeline_estimate(spec: DeviceSpec, *, block_dim: int, per_core: int, last_core: int,
                      tile_length: int, buffer_num: int, work: Callable[[int], TileWork],
                      cores: int | None = None, ub_bytes: int = 0, workspace_bytes: int = 0,
                      launches: int = 1) -> Estimate:
    """Estimate a CopyIn → Compute → CopyOut launch of ``block_dim`` blocks.

    Blocks ``0 … block_dim−2`` process ``per_core`` elements, the last ``last_core``, in tiles of
    ``tile_length``; ``cores`` is how many cores the launch may use (core mask), so a block_dim
    beyond it runs in waves, as the simulator's launch does.
    """
    cores = spec.vector_cores if cores is None else cores
    concurrent_max = max(1, min(block_dim, cores))
    waves = -(-block_dim // concurrent_max)
    total = 0.0
    busy_core: dict[str, float] = {}
    nread = nwritten = nl2 = 0
    for wave in range(waves):
        first = wave * concurrent_max
        blocks = list(range(first, min(block_dim, first + concurrent_max)))
        concurrent = len(blocks)
        lengths = {per_core}
        if block_dim - 1 in blocks:
            lengths.add(last_core)
        longest = max(lengths)
        # the first wave's blocks are their cores' first: they pay the heads, later waves do not
        head_width = concurrent_max if wave == 0 else 0
        span, busy, r, w, l2 = _block(spec, _tiles(longest, tile_length), work, buffer_num, concurrent,
                                      head_width)
        total += span
        # bytes: every block of the wave; busy: the busiest core accumulates its blocks
        for n in (per_core,) * (concurrent - (1 if block_dim - 1 in blocks else 0)) + (
                (last_core,) if block_dim - 1 in blocks else ()):
            if n == longest:
                nread += r
                nwritten += w
                nl2 += l2
            else:
                _, _, r2, w2, l22 = _block(spec, _tiles(n, tile_length), work, buffer_num, concurrent, head_width)
                nread += r2
                nwritten += w2
                nl2 += l22
        for p, b in busy.items():
            busy_core[p] = busy_core.get(p, 0.0) + b
    cycles = int(math.ceil(total)) + spec.launch.overhead * launches
    return Estimate(cycles=cycles, pipe_busy={p: int(round(b)) for p, b in busy_core.items()},
                    bytes_read=int(nread), bytes_written=int(nwritten), block_dim=block_dim,
                    ub_bytes=ub_bytes, workspace_bytes=workspace_bytes, launches=launches,
                    model="pipeline", l2_bytes_read=int(nl2),
                    notes=f"{waves} wave(s) of up to {concurrent_max} blocks; buffer_num {buffer_num}")


# ---------------------------------------------------------------------------------------------
# building blocks of operator models whose launches are not one element-wise pipeline
# (kernels/ascend/embedding_backward.py, kernels/ascend/flce_estimate.py)
# ---------------------------------------------------------------------------------------------

def shared_rates(spec: DeviceSpec, loaders: float, storers: float) -> tuple[float, float]:
    """:func:`copy_rates` for an average number of copies in flight (cores times the fraction
    of the time each has one on the pipe): a pool's bonus is never split among fewer than one."""
    nl = max(1.0, loaders) if loaders > 0 else 0.0
    ns = max(1.0, storers) if storers > 0 else 0.0
    return copy_rates(spec, nl, ns)


def sparse_store_rate(spec: DeviceSpec, in_flight: float) -> float:
    """Bytes/cycle of a store when the cores' stores rarely coincide: the rate of a store alone
    (its pool bonus whole), but no more than the share of its link (the L2 link with a write-back
    L2, else GM) among the ``in_flight`` stores the cores keep moving on average -- however the
    stores interleave, the link carries no more than its bandwidth."""
    _, alone = copy_rates(spec, 0, 1)
    bw = spec.l2.bandwidth if stores_to_l2(spec) and spec.l2 is not None else spec.gm.bandwidth
    return min(alone, spec.bytes_per_cycle(bw) / max(1.0, in_flight))


def l2_read_rate(spec: DeviceSpec, concurrent: float) -> float:
    """Bytes/cycle of each of ``concurrent`` loads served by the L2: the per-core L2 read rate,
    capped by a fair share of the L2 link (``Device.gm_transfer`` puts hits on that link)."""
    if spec.l2 is None:
        return copy_rates(spec, max(1, round(concurrent)), 0)[0]
    return min(float(spec.rates.l2_read), spec.bytes_per_cycle(spec.l2.bandwidth) / max(1.0, concurrent))


def lockstep_copy_cycles(spec: DeviceSpec, load_bytes: float, store_bytes: float, cores: int,
                         load_from_l2: bool = False) -> tuple[int, int, int]:
    """Data cycles of (a load that runs beside a store, that store, a load alone) when ``cores``
    identical cores do the same at the same time (they start together and stay in lockstep):
    both at the contended rates while both move, then the longer one alone at its own rate.
    Loads served by the L2 ride the L2 link: they contend with the stores a write-back L2 takes
    there, with none otherwise; loads from HBM contend with the stores that go to HBM."""
    _, rs_only = shared_rates(spec, 0, cores)
    if load_from_l2:
        rl_only = l2_read_rate(spec, cores)
        if not stores_to_l2(spec):
            return (math.ceil(load_bytes / rl_only), math.ceil(store_bytes / rs_only) if store_bytes else 0,
                    math.ceil(load_bytes / rl_only))
    else:
        rl_only, _ = shared_rates(spec, cores, 0)
    if store_bytes <= 0:
        return math.ceil(load_bytes / rl_only), 0, math.ceil(load_bytes / rl_only)
    if load_bytes <= 0:
        return 0, math.ceil(store_bytes / rs_only), 0
    if load_from_l2:            # both on the L2 link: the store's demand and the L2 read rate
        assert spec.l2 is not None and spec.mte3 is not None
        n = max(1.0, cores)
        ds = spec.mte3.base + spec.mte3.shared / n
        rl, rs = _fill(spec.bytes_per_cycle(spec.l2.bandwidth), [(float(spec.rates.l2_read), n), (ds, n)])
    else:
        rl, rs = shared_rates(spec, cores, cores)
    t = store_bytes / rs
    if load_bytes >= rl * t:
        load, store = t + (load_bytes - rl * t) / rl_only, t
    else:
        load = load_bytes / rl
        store = load + (store_bytes - rs * load) / rs_only
    return math.ceil(load), math.ceil(store), math.ceil(load_bytes / rl_only)


def drain_cycles(sizes: Sequence[float], time: Callable[[int, float], float]) -> float:
    """Cycles of the largest of transfers that start together, one per core, of ``sizes``
    (bytes, or copies), where ``time(active, amount)`` is what ``amount`` takes while ``active``
    of them still move: the smaller ones end first and leave the link to the rest (the
    simulator's link shares it anew when a transfer ends). Equal sizes take
    ``time(len(sizes), size)``, the lockstep time."""
    left = sorted(x for x in sizes if x > 0)
    t, done = 0.0, 0.0
    for i, x in enumerate(left):
        if x > done:
            t += time(len(left) - i, x - done)
            done = x
    return t


def dma_cycles(startup: float, nbytes: float, rate: float) -> int:
    """One copy: its start-up latency, then ``nbytes`` at ``rate`` bytes/cycle, ending on a whole
    cycle as a link transfer does (``simulator/links.py``)."""
    return int(startup) + (math.ceil(nbytes / rate) if nbytes > 0 else 0)


def sequence(parts: Sequence[Estimate], model: str, notes: str = "", **extra: object) -> Estimate:
    """Launches queued one after another on one stream: cycles, busy cycles and bytes add; the
    UB is the largest any launch uses."""
    busy: dict[str, int] = {}
    for e in parts:
        for p, b in e.pipe_busy.items():
            busy[p] = busy.get(p, 0) + int(b)
    wb = [e.gm_bytes_written for e in parts]
    gm_written = sum(int(w) for w in wb if w is not None) if wb and None not in wb else None
    return Estimate(cycles=sum(int(e.cycles) for e in parts), pipe_busy=busy,
                    bytes_read=sum(int(e.bytes_read) for e in parts),
                    bytes_written=sum(int(e.bytes_written) for e in parts),
                    gm_bytes_written=gm_written,
                    block_dim=max((e.block_dim for e in parts), default=0),
                    ub_bytes=max((e.ub_bytes for e in parts), default=0),
                    workspace_bytes=max((e.workspace_bytes for e in parts), default=0),
                    launches=sum(e.launches for e in parts), model=model, notes=notes, extra=dict(extra),
                    l2_bytes_read=sum(int(e.l2_bytes_read) for e in parts))
