"""Closed-form estimate of aclnnFusedLinearCrossEntropyLossGrad (``mode="estimate"``, docs/sources.md#design-modes-s7).

The call is one mixed AIC/AIV launch (kernels/ascend/flce_grad.py). Its time is the launch
overhead plus its phases, each ending at a cross-core barrier:

- memory-saving mode: the cube cores form the logits (matmul 0, fp32 results written by
  Fixpipe), then every vector core waits for every cube core;
- the vector stage: each vector core turns its rows into the logit gradient S (load a row chunk,
  [Adds, Exp, Div,] the target update, Muls, Cast, store it in NZ), two row buffers in place;
- the cube stage: input_grad = S·W and weight_grad = Sᵀ·input, the tiles of ``tiling.assignment``
  one after another on each cube core.

**Programs, not formulas.** A pipe executes its queue in order, flags order the pipes, and the
core's dispatcher stalls when a pipe's queue (16 entries, simulator/core.py) is full, which
limits how far the cube's MTE2 can load ahead of MTE1/CUBE (an L1 chunk's loads are only
issued once the previous chunk's LoadData/Mmad are queued). So each core's program is replayed
as the kernel yields it (the same TQue flags, the same queue depth) through a recurrence of
start and end times, without SimPy: ``_Core``. The cost of an instruction comes from the cost
tables the simulator uses (Mmad fractals / cube.macs_per_cycle, LoadData bytes / rates.l1_to_l0a
or l1_to_l0b, DMA start-up plus bytes / rate, vector ``k·N + b``, pipe heads); in timing mode
the cube kernel groups L1 chunks into coarse instructions (``tiling.coarsen``), which the replay
mirrors. The vector stage is the replay of the vector core with the most rows: all vector cores
run the same program in lockstep, so a row's load shares HBM with every core's loads. With a
write-through L2 (or none) every core's stores share it too
(``kernels.analytic.lockstep_copy_cycles``); with a write-back L2 (the device's
``l2.write_policy``, as ``Device.gm_transfer`` has it) the L2 takes the stores on the L2 link
and HBM sees only the dirty lines an access evicts, which that access waits for (``_vector_l2``:
the loads' misses allocate round by round; a batch's S enters with its last row, as the kernel
shows it to the L2 model).

**L2.** Whether a cube load is served by the L2 (``rates.l2_read``) or HBM (``rates.gm_read``)
decides whether the cube stage is cube- or MTE2-bound, so the hit fraction of every tile's A and
B panels is modelled: the cores' j-th tiles form wave j (the assignment deals tiles round-robin);
a wave touches the distinct A and B panels (a tile row's rows × K, or K × a tile column) of its
tiles and allocates its result tiles, in an LRU over panels of ``l2.size`` bytes. A panel in the
LRU hits; one that is not misses, shared among the cores of the wave that load it (whoever loads
first misses); a panel of a tensor seen through another view (S by rows for input_grad and by
columns for weight_grad, W and input by rows in the logits matmul) hits for the fraction of that
tensor resident under the other view, and takes those lines over (a tensor holds its lines once).
Where an operand starts within an L2 line (as opsim.run places it, ``fresh_placement``) decides
which lines the pieces of a panel share with each other and with neighbouring panels: a new
panel hits what an earlier piece of its own or a resident neighbour brought in
(``_line_sharing``). What the vector stage streams (the rows it reads, the S it
writes) is resident at the start of the cube stage as far as it fits, S the most recent (Fixpipe
results and S are dirty in a write-back L2); the logits the vector stage reads back in
memory-saving mode hit for their resident part and become recent, each round of reads taking
the same share of every logits tile, before the batch's S enters (``_vector_l2``). This follows any
tile traversal ``plan`` chooses, since it reads the assignment. One timing-mode effect of the
simulator is mirrored: sharers of a panel drift apart when a coarse chunk's miss makes one of
them lag too far (``DRIFT_LIMIT``).

**Links.** A cube core loads misses at ``rates.gm_read`` and hits at ``rates.l2_read``, both
capped by a fair share of their link (HBM with the other cores' misses, the L2 link with their
hits, and the Fixpipe stores on the link that takes them: the L2 link with a write-back L2, else
HBM), from the fraction of the time the cores keep each part of a transfer in flight, pass after
pass until no link is asked for more than it carries.

**Cost.** Cores with the same program (tile shapes and L2 behaviour) are replayed once; a loop
whose iteration shifts every time of the replay by the same amount is extended by that shift
(``_Core.repeat``), so an estimate takes milliseconds (about 0.1–0.3 s at V = 256 Ki, BT = H =
4096), typically less than ``plan``'s traversal search.
"""
from __future__ import annotations

import itertools
import math
from collections import OrderedDict, deque
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from opsim.devices.spec import DeviceSpec
from opsim.kernels.analytic import (Estimate, fresh_placement, head_cycles, l2_read_rate, lockstep_copy_cycles,
                                    stores_to_l2, vector_cycles)
from opsim.kernels.ascend.flce_grad import (L0_BUFFERS, L1_BUFFERS, MEMORY_SAVING, META_ROWS,
                                      FlceTiling, MatmulTiling, coarse_chunks, l0_steps)
from opsim.kernels.common import TensorDesc
from opsim.simulator.core import large_head_from
from opsim.simulator.cube import align16, ceil_div, nz_bytes

__all__ = ["estimate", "DRIFT_LIMIT"]

# passes of a cube phase at most, each with the link shares the previous one's transfers leave
# (two suffice unless a what-if link is far narrower than the device's)
_LINK_PASSES = 8

# The cores of a wave share a panel chunk (one misses, the others hit) while they load it close
# together. The one that misses falls behind by the chunk's miss time minus its hit time; when
# that lag times the bytes all cube cores load per cycle exceeds DRIFT_LIMIT L2 sizes, the
# sharers have drifted apart and each misses. A calibration against the simulator in timing mode
# (BT = H = 4096, bf16: sharing held at 2.6 L2 sizes, V = 65536 memory-saving, and was lost at
# 3.5, V = 131072 high-performance; docs/estimate.md), not a hardware fact. Only coarse timing-mode
# chunks (tiling.coarsen) are large enough to reach it, and since the plan keeps the cube cores'
# coarse chunks within one L2 size together (flce_grad.plan), only a ``coarsen`` override does.
DRIFT_LIMIT = 3.0


# ---------------------------------------------------------------------------------------------
# the replay of one core's program: in-order pipes, flags, bounded dispatch
# ---------------------------------------------------------------------------------------------

class _Core:
    """Start and end times of a core's instructions as the simulator's core runs them.

    ``op(pipe, cycles)`` is a busy instruction, ``set``/``wait`` a flag. The dispatcher pushes
    entries in program order and stalls while the target pipe already holds ``depth`` entries;
    a pipe pops its next entry when the previous one ended (a WaitFlag then blocks the pipe until
    its flag is set). Times are floats; only differences matter.
    """

    __slots__ = ("depth", "pushed", "free", "pops", "flags", "busy", "first")

    def __init__(self, start: float, depth: int) -> None:
        self.depth = depth
        self.pushed = start
        self.free: dict[str, float] = {}
        self.pops: dict[str, deque] = {}
        self.flags: dict[tuple, deque] = {}
        self.busy: dict[str, float] = {}
        self.first: dict[str, int] = {}     # pipes that paid their head -> the cycles paid

    def _pop(self, pipe: str) -> float:
        q = self.pops.get(pipe)
        if q is None:
            q = self.pops[pipe] = deque(maxlen=self.depth)
        t = self.pushed
        if len(q) == self.depth and q[0] > t:
            t = q[0]                        # wait until the entry `depth` earlier left the queue
        self.pushed = t
        pop = max(self.free.get(pipe, t), t)
        q.append(pop)
        return pop

    def op(self, pipe: str, cycles: float) -> float:
        end = self._pop(pipe) + cycles
        self.free[pipe] = end
        self.busy[pipe] = self.busy.get(pipe, 0.0) + cycles
        return end

    def set(self, src: str, dst: str, key: Any) -> None:
        t = self._pop(src)
        self.free[src] = t
        self.flags.setdefault((src, dst, key), deque()).append(t)

    def wait(self, src: str, dst: str, key: Any) -> None:
        t = self._pop(dst)
        q = self.flags.get((src, dst, key))
        if q:
            t = max(t, q.popleft())
        self.free[dst] = t

    def wait_until(self, pipe: str, when: float) -> None:
        """A cross-core wait: ``pipe`` blocks until ``when`` (set by other cores)."""
        self.free[pipe] = max(self._pop(pipe), when)

    def head(self, spec: DeviceSpec, pipe: str, block_dim: int, load_bytes: int = 0) -> int:
        """The pipe head, paid by the first busy instruction of the block on ``pipe``; a later
        load of ``load_bytes`` that makes it larger (MTE2's large-load form) pays the
        difference, as the simulator's ``pay_head`` does (assumption A-10)."""
        paid = self.first.get(pipe)
        if paid is not None and not 0 < large_head_from(spec, pipe) <= load_bytes:
            return 0
        cost = head_cycles(spec, pipe, block_dim, load_bytes)
        if paid is not None and cost <= paid:
            return 0
        self.first[pipe] = cost
        return cost - (paid or 0)

    @property
    def end(self) -> float:
        return max(self.free.values(), default=self.pushed)

    # -- steady state ----------------------------------------------------------------------------
    # A time at or below the dispatcher's (``pushed``, which never decreases) acts exactly like
    # ``pushed`` in every later max(), so the state is compared with such times clamped. If an
    # iteration of a loop moved every clamped time by the same d, the next identical iteration
    # moves them by d again (the recurrence is built of max and +): it can be skipped by a shift.

    def snapshot(self) -> tuple[tuple, list[float]]:
        t = self.pushed
        sig: list = []
        vals = [t]
        for p, v in self.free.items():
            sig.append(p)
            vals.append(v if v > t else t)
        for p, q in self.pops.items():
            sig.append((p, len(q)))
            vals.extend(v if v > t else t for v in q)
        for k, q in self.flags.items():
            sig.append((k, len(q)))
            vals.extend(v if v > t else t for v in q)
        return tuple(sig), vals

    def advance(self, d: float, busy: Mapping[str, float]) -> None:
        """Skip iterations that would move every time by ``d`` and add ``busy`` cycles."""
        t = self.pushed
        self.free = {p: (v if v > t else t) + d for p, v in self.free.items()}
        for q in self.pops.values():
            vals = [(v if v > t else t) + d for v in q]
            q.clear()
            q.extend(vals)
        for q in self.flags.values():
            vals = [(v if v > t else t) + d for v in q]
            q.clear()
            q.extend(vals)
        self.pushed = t + d
        for p, b in busy.items():
            self.busy[p] = self.busy.get(p, 0.0) + b

    def repeat(self, count: int, body: Any, ques: Iterable["_Que"] = (), period: int = 2) -> None:
        """Run ``body()`` ``count`` times; once ``period`` iterations shift the whole state
        uniformly (two buffers alternate: period 2), the rest but a remainder are a shift."""
        if count < 2 * period + 1:     # too short for a skip to pay
            for _ in range(count):
                body()
            return
        ques = tuple(ques)
        hist: list = []
        i = 0
        while i < count:
            body()
            i += 1
            sig, vals = self.snapshot()
            sig = (sig, tuple((tuple(q.free_ids), tuple(q.fifo), tuple(q.used)) for q in ques))
            hist.append((sig, vals, dict(self.busy)))
            if len(hist) > period:
                s0, v0, b0 = hist[-1 - period]
                if s0 == sig and len(v0) == len(vals) and count - i >= period:
                    d = vals[0] - v0[0]
                    tol = 1e-6 * (1.0 + abs(d))
                    if d > 0 and all(abs(a - b - d) <= tol for a, b in zip(vals, v0)):
                        r = (count - i) // period
                        self.advance(r * d, {p: r * (b - b0.get(p, 0.0)) for p, b in self.busy.items()})
                        i += r * period
                        hist.clear()
                        continue
                del hist[0]


class _Que:
    """A TQue of ``depth`` buffers between two pipes, inserting the flags Ascend C's do."""

    __slots__ = ("core", "name", "producer", "consumer", "free_ids", "used", "fifo")

    def __init__(self, core: _Core, name: str, producer: str, consumer: str, depth: int) -> None:
        self.core, self.name, self.producer, self.consumer = core, name, producer, consumer
        self.free_ids = deque(range(depth))
        self.used = [False] * depth
        self.fifo: deque = deque()

    def alloc(self) -> int:
        i = self.free_ids.popleft()
        if self.used[i]:
            self.core.wait(self.consumer, self.producer, (self.name, i))
        self.used[i] = True
        return i

    def enque(self, i: int) -> None:
        self.core.set(self.producer, self.consumer, (self.name, i))
        self.fifo.append(i)

    def deque(self) -> int:
        i = self.fifo.popleft()
        self.core.wait(self.producer, self.consumer, (self.name, i))
        return i

    def free(self, i: int) -> None:
        self.core.set(self.consumer, self.producer, (self.name, i))
        self.free_ids.append(i)


# ---------------------------------------------------------------------------------------------
# the L2: an LRU over matmul panels, wave by wave
# ---------------------------------------------------------------------------------------------

# (tensor, view) of the A and B operands of each matmul, by matmul name
_VIEWS = {"logits": (("input", "rows"), ("weight", "rows")),
          "input_grad": (("s", "rows"), ("weight", "cols")),
          "weight_grad": (("s", "cols"), ("input", "cols"))}


class _L2:
    """Panels of the matmul operands (and result tiles, which stores allocate) in LRU order."""

    def __init__(self, size: int, tensors: Mapping[str, int], write_back: bool = False,
                 line: int = 0, origin: Mapping[str, int] | None = None) -> None:
        self.size = size
        # the line size and where the operands start (``fresh_placement``): for the lines
        # neighbouring panels share (``_line_sharing``)
        self.line = line
        self.origin = dict(origin or {})
        self.tensors = dict(tensors)          # tensor -> bytes
        self.lru: OrderedDict[tuple, float] = OrderedDict()
        self.used = 0.0
        self.by_view: dict[tuple[str, str], float] = {}
        # a write-back L2 (the device's l2.write_policy) takes stores and writes a line to HBM
        # only when it evicts it dirty: entries stored to, and the bytes written back so far
        self.write_back = write_back
        self.dirty: set[tuple] = set()
        self.written_back = 0.0

    def copy(self) -> "_L2":
        new = _L2(self.size, self.tensors, self.write_back, self.line, self.origin)
        new.lru = OrderedDict(self.lru)
        new.used = self.used
        new.by_view = dict(self.by_view)
        new.dirty = set(self.dirty)
        new.written_back = self.written_back
        return new

    def resident(self, tensor: str, view: str | None = None) -> float:
        """Fraction of ``tensor`` resident (under ``view``, or under any other view)."""
        total = self.tensors.get(tensor, 0)
        if not total:
            return 0.0
        got = sum(b for (t, v), b in self.by_view.items() if t == tensor and (v == view if view else True))
        return min(1.0, got / total)

    def other_views(self, tensor: str, view: str) -> float:
        """Fraction resident under other views of the part of ``tensor`` not (yet) held under
        ``view``: the other views' entries lose what a panel of ``view`` takes over (``adopt``),
        so they stand for the rest of the tensor."""
        total = self.tensors.get(tensor, 0)
        if not total:
            return 0.0
        got = sum(b for (t, v), b in self.by_view.items() if t == tensor and v != view)
        rest = total - self.by_view.get((tensor, view), 0.0)
        return min(1.0, got / rest) if rest > 0 else 1.0

    def shrink(self, key: tuple, part: float) -> None:
        """Take ``part`` bytes out of entry ``key`` (read on under another entry, or taken over
        by another view); the entry goes, clean, once (all but rounding of) it is used up."""
        b = self.lru[key]
        if b - part <= 1e-9 * b:
            del self.lru[key]
            self.dirty.discard(key)
        else:
            self.lru[key] = b - part
        self.used -= part
        self.by_view[key[:2]] -= part

    def adopt(self, key: tuple, nbytes: float) -> None:
        """A new panel ``key`` took over ``nbytes`` that were resident under other views of its
        tensor: the lines are the same, so those entries shrink by that much, evenly (a panel
        crosses every tile of another view), and the panel is dirty if what it took mostly
        was. Else the tensor would hold twice its lines in the L2 and evict the rest (S by
        columns after the vector stage's S stream: 4.2 MB of S missed that the simulator hits,
        BT 1000 / H 1024 / V 8192 memory-saving, L2 / 4)."""
        others = [k for k in self.lru if k[0] == key[0] and k[1] != key[1]]
        have = sum(self.lru[k] for k in others)
        if have <= 0 or nbytes <= 0:
            return
        scale = min(1.0, nbytes / have)
        dirty = 0.0
        for k in others:
            part = self.lru[k] * scale
            if k in self.dirty:
                dirty += part
            self.shrink(k, part)
        if dirty * 2 > have * scale:
            self.dirty.add(key)

    def touch(self, key: tuple, nbytes: float, write: bool = False) -> bool:
        """Make ``key`` most recent (``write``: stored to, dirty in a write-back L2); True if it
        was resident."""
        if write and self.write_back:
            self.dirty.add(key)
        if key in self.lru:
            self.lru.move_to_end(key)
            return True
        self.lru[key] = nbytes
        self.used += nbytes
        tv = key[:2]
        self.by_view[tv] = self.by_view.get(tv, 0.0) + nbytes
        while self.used > self.size and len(self.lru) > 1:
            old, b = self.lru.popitem(last=False)
            self.used -= b
            self.by_view[old[:2]] -= b
            if old in self.dirty:
                self.dirty.discard(old)
                self.written_back += b
        return False


Miss = tuple[float, float]   # (probability that this core's load is the wave's first, fraction missed then)
# ({chunks apart: fraction of a panel's bytes in lines a piece of the same panel that many L1
#   chunks earlier touches}, {neighbouring panel: fraction of the panel's bytes in lines that
#   panel's pieces also touch}, bytes of the lines a chunk's pieces touch per byte they load)
Share = tuple[dict[int, float], dict[int, float], float]


def _shares(start: np.ndarray, end: np.ndarray, panel: np.ndarray, order: np.ndarray, chunk: np.ndarray,
            run: np.ndarray, line: int, mult: np.ndarray | None = None,
            heavy: tuple[np.ndarray, int, np.ndarray] | None = None) -> dict[int, Share]:
    """Line sharing of pieces [start, end) (byte addresses) of panels loaded in ``order``, as
    the simulator's L2 counts it (simulator/l2.py: a line's bytes hit if the line is resident):
    of the pieces of one panel that touch a line, the first to be loaded misses its bytes there
    and the later ones hit (if the line outlived the L1 chunks between them: ``chunk``, each
    piece's), unless they are one contiguous run of a copy with it (``run``: the L2 counts a
    run's bytes on a line once); the first piece's bytes hit too if another panel touching the
    line brought it in (that panel is its neighbour).

    ``mult`` (per piece) and ``heavy`` (lines [lo, lo + n) weighing w, as (lo, n, w), lo
    ascending) count a piece and a line that many times (``_row_shares``): every sum is of whole
    bytes, so the weighted sums equal those of the pieces repeated, bit for bit."""
    head = start // line
    tail = (end - 1) // line
    head_b = np.minimum(end, (head + 1) * line) - start
    two = tail != head
    lines = np.concatenate([head, tail[two]])
    nbytes = np.concatenate([head_b, (end - tail * line)[two]])
    pan = np.concatenate([panel, panel[two]])
    odr = np.concatenate([order, order[two]])
    chk = np.concatenate([chunk, chunk[two]])
    rid = np.concatenate([run, run[two]])
    part = nbytes < line                 # only a line a piece covers in part is shared
    lines, nbytes, pan, odr, chk, rid = lines[part], nbytes[part], pan[part], odr[part], chk[part], rid[part]
    if heavy is not None:               # a line's bytes counted as often as the line occurs
        lo, n, w = heavy
        at = np.maximum(np.searchsorted(lo, lines, "right") - 1, 0)
        nbytes = nbytes * np.where((lines >= lo[at]) & (lines < lo[at] + n), w[at], 1)
    size, cover = end - start, (tail - head + 1) * line
    if mult is not None:
        size, cover = size * mult, cover * mult
    totals = np.bincount(panel, weights=size.astype(np.float64))
    # a piece takes whole lines of the L2 (a 512 B piece off its line: two); the pieces of a
    # chunk share no line unless they are shorter than one
    lined = np.bincount(panel, weights=cover.astype(np.float64), minlength=len(totals))
    out: dict[int, Share] = {}
    idx = np.lexsort((odr, pan, lines))
    lines, nbytes, pan, chk, rid = lines[idx], nbytes[idx], pan[idx], chk[idx], rid[idx]
    first = np.ones(len(lines), dtype=bool)
    first[1:] = (lines[1:] != lines[:-1]) | (pan[1:] != pan[:-1])
    # a later piece of a panel on a line: chunks after the panel's first piece there
    lead = np.maximum.accumulate(np.where(first, np.arange(len(first)), 0))
    apart = chk - chk[lead]
    own: dict[int, dict[int, float]] = {}
    later = ~first & (rid != rid[lead])
    if len(lines) and later.any():
        span = int(chk.max()) + 1
        keys, inv = np.unique(pan[later] * span + apart[later], return_inverse=True)
        got = np.bincount(inv, weights=nbytes[later].astype(np.float64))
        for k, b in zip(keys.tolist(), got.tolist()):
            p, d = divmod(k, span)
            own.setdefault(p, {})[d] = b / totals[p]
    # one entry per (line, panel): its neighbour is the next panel on the line, else the previous
    fl, fp, fb = lines[first], pan[first], nbytes[first]
    nb = np.full(len(fl), -1, dtype=np.int64)
    same_next = np.zeros(len(fl), dtype=bool)
    same_next[:-1] = fl[1:] == fl[:-1]
    same_prev = np.zeros(len(fl), dtype=bool)
    same_prev[1:] = same_next[:-1]
    nb[same_prev] = fp[np.flatnonzero(same_prev) - 1]
    nb[same_next] = fp[np.flatnonzero(same_next) + 1]
    has = nb >= 0
    beside: dict[int, dict[int, float]] = {}
    pairs = fp[has] * len(totals) + nb[has]
    if len(pairs):
        keys, inv = np.unique(pairs, return_inverse=True)
        got = np.bincount(inv, weights=fb[has].astype(np.float64))
        for k, b in zip(keys.tolist(), got.tolist()):
            p, q = divmod(k, len(totals))
            beside.setdefault(p, {})[q] = b / totals[p]
    for p in range(len(totals)):
        if totals[p] > 0:
            out[p] = (own.get(p, {}), beside.get(p, {}), float(lined[p] / totals[p]))
    return out


def _row_shares(base: int, stride: int, off: np.ndarray, length: np.ndarray, order0: np.ndarray,
                panel: np.ndarray, chunk: np.ndarray, run: np.ndarray, line: int) -> dict[int, Share] | None:
    """``_shares`` of pieces laid out in rows: piece (r, i) is [base + r * stride + off[i],
    + length[i]) (within its row's ``stride`` bytes), loaded ``order0[i] + r``-th, of panel,
    chunk and run ``panel[r, i]``, ``chunk[r, i]``, ``run[r, i]`` (a negative run: the piece
    alone); None if every piece starts and ends on a line.

    Rows repeat their place on the lines every P = line / gcd(stride, line) rows, so in a
    stretch of rows alike (the same panels, chunks and runs, or lone pieces, row after row) a
    line that starts in a row looks like the one starting P rows on, as long as the rows it
    reaches (the next D = ceil(line / stride)) are in the stretch too. Of a stretch [a, b) the
    first P + D rows are kept and then whole periods dropped, up to b; the rows behind move up
    by a whole number of lines, so a line across the cut looks like the one it was a whole
    number of periods on, and the first period's rows and the lines that start in them are
    counted once more per period dropped: the sums of every row, exactly (the weight's 262144
    rows of 8 KiB by 16 column tiles, BT 4000 / H 4096: 4 Mi pieces sorted, 2.5 s, against 1024,
    every row of the 32 chunks alike)."""
    rows, width = panel.shape
    if rows > 1:
        alike = ((panel[1:] == panel[:-1]) & (chunk[1:] == chunk[:-1])
                 & ((run[1:] == run[:-1]) | ((run[1:] < 0) & (run[:-1] < 0)))).all(axis=1)
        cuts = np.flatnonzero(~alike) + 1
    else:
        cuts = np.zeros(0, dtype=np.int64)
    period = line // math.gcd(stride, line)
    reach = -(-line // stride)
    keep = np.ones(rows, dtype=bool)
    mult = np.ones(rows, dtype=np.int64)
    blocks: list[tuple[int, int]] = []       # (first row of a weighed period, periods dropped)
    for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), rows]):
        drop = (b - a - period - reach) // period
        if drop > 0:
            cut = a + period + reach
            keep[cut:cut + drop * period] = False
            mult[a:a + period] += drop
            blocks.append((a, drop))
    kept = np.flatnonzero(keep)
    left = np.arange(len(kept), dtype=np.int64)      # the kept rows, renumbered
    start = base + (left * stride)[:, None] + off[None, :]
    end = start + length[None, :]
    if not (np.any(start % line) or np.any(end % line)):
        return None                         # every piece on whole lines: nothing shared
    heavy = None
    if blocks:
        # a row's new number: the rows dropped before it subtracted (a block's rows: none)
        renum = np.cumsum(keep) - 1
        lo = np.array([-(-(base + int(renum[a]) * stride) // line) for a, _ in blocks], dtype=np.int64)
        heavy = (lo, period * stride // line, np.array([d + 1 for _, d in blocks], dtype=np.int64))
    shape = (len(kept), width)
    return _shares(start.ravel(), end.ravel(), np.ascontiguousarray(panel[kept]).ravel(),
                   (order0[None, :] + left[:, None]).ravel(),
                   np.ascontiguousarray(chunk[kept]).ravel().astype(np.int64),
                   np.ascontiguousarray(run[kept]).ravel().astype(np.int64), line,
                   np.broadcast_to(mult[kept][:, None], shape).ravel(), heavy)


def _line_sharing(tiling: FlceTiling, phase: set[int], origin: Mapping[str, int],
                  line: int) -> dict[tuple[str, str], dict[int, Share]]:
    """Per (tensor, view) of the phase's matmul operands, the line sharing of its panels
    (``_shares``) for tensors starting at the byte addresses ``origin`` (``fresh_placement``).
    A panel is loaded an L1 chunk at a time (the kernel's coarse chunks, ``coarse_chunks``),
    each copy its rows in address order: ND row panels (input, weight in the logits matmul) in
    pieces of a row's chunk, ND column panels (weight, input as B of the gradients) a row's
    columns of the tile, and the NZ S by 16-column blocks. Lines are shared only when a piece
    does not start or end on a line: an operand not starting on a line (opsim.run places them
    back to back, 32 B aligned), a row or tile not a whole number of lines. Each view is laid
    out in rows of a fixed pitch (``_row_shares``): ND rows and S's blocks."""
    item = 2 if tiling.dtype in ("fp16", "bf16") else 4
    out: dict[tuple[str, str], dict[int, Share]] = {}
    for i in sorted(phase):
        mm = tiling.matmuls[i]
        chunks = coarse_chunks(mm.k, mm.chunk_k, max(1, tiling.coarsen))
        k0s = np.cumsum((0,) + chunks[:-1], dtype=np.int64)
        kks = np.asarray(chunks, dtype=np.int64)
        nch = len(kks)
        for (tensor, view), side in zip(_VIEWS[mm.name], ("a", "b")):
            base = origin.get(tensor)
            if base is None:
                continue
            if tensor == "s":       # NZ: 16-column blocks of align16(BT) rows, contiguous
                r16 = align16(tiling.bt)
                stride = r16 * 16 * item
                if view == "rows":          # a block's rows of every tile, block after block
                    t = np.arange(mm.tiles_m, dtype=np.int64)
                    rows = np.minimum(mm.base_m, mm.m - t * mm.base_m)
                    b = np.arange(ceil_div(mm.k, 16), dtype=np.int64)
                    off, length, order0 = t * mm.base_m * 16 * item, rows * 16 * item, np.zeros_like(t)
                    shape = (len(b), len(t))
                    panel = np.broadcast_to(t[None, :], shape)
                    chunk = np.broadcast_to((np.searchsorted(k0s, b * 16, "right") - 1)[:, None], shape)
                    # a tile of all r16 rows: its blocks are one run (GmMatrix.run_geometry)
                    run = np.where((rows == r16)[None, :], panel * (int(chunk.max()) + 1) + chunk,
                                   -1 - np.arange(panel.size).reshape(shape))
                else:                       # S's columns of a tile (16 a block), rows of a chunk
                    b = np.arange(ceil_div(mm.m, 16), dtype=np.int64)
                    off, length, order0 = k0s * 16 * item, kks * 16 * item, np.arange(nch) * len(b)
                    shape = (len(b), nch)
                    panel = np.broadcast_to((b * 16 // mm.base_m)[:, None], shape)
                    chunk = np.broadcast_to(np.arange(nch)[None, :], shape)
                    run = np.where((kks == r16)[None, :], panel * nch + chunk,
                                   -1 - np.arange(panel.size).reshape(shape))
            elif view == "rows":            # a row's piece per chunk; the K of a row contiguous
                stride = mm.k * item
                r = np.arange(mm.m if side == "a" else mm.n, dtype=np.int64)
                tile = mm.base_m if side == "a" else mm.base_n
                off, length, order0 = k0s * item, kks * item, np.arange(nch) * len(r)
                shape = (len(r), nch)
                panel = np.broadcast_to((r // tile)[:, None], shape)
                chunk = np.broadcast_to(np.arange(nch)[None, :], shape)
                # a chunk of whole rows: the tile's rows are one run
                run = np.where((kks == mm.k)[None, :], panel * nch + chunk,
                               -1 - np.arange(panel.size).reshape(shape))
            else:                           # rows of K, the tile's columns of N
                stride = mm.n * item
                t = np.arange(mm.tiles_n, dtype=np.int64)
                cols = np.minimum(mm.base_n, mm.n - t * mm.base_n)
                r = np.arange(mm.k, dtype=np.int64)
                off, length, order0 = t * mm.base_n * item, cols * item, np.zeros_like(t)
                shape = (len(r), len(t))
                panel = np.broadcast_to(t[None, :], shape)
                chunk = np.broadcast_to((np.searchsorted(k0s, r, "right") - 1)[:, None], shape)
                # a tile of all the columns: a chunk's rows are one run
                run = (chunk if mm.tiles_n == 1 else -1 - np.arange(panel.size).reshape(shape))
            got = _row_shares(base, stride, off, length, order0, panel, chunk, run, line)
            if got is not None:
                out[(tensor, view)] = got
    return out



def _lined(sharing: Mapping[tuple[str, str], Mapping[int, Share]], key: tuple) -> float:
    """Bytes of L2 lines a chunk of panel ``key`` takes per byte it loads (``_shares``)."""
    share = sharing.get(key[:2], {}).get(key[2])
    return share[2] if share is not None else 1.0


def _miss_fractions(l2: _L2 | None, tiling: FlceTiling, phase: set[int], out_items: Mapping[int, int],
                    apart: frozenset = frozenset(),
                    sharing: Mapping[tuple[str, str], Mapping[int, Share]] | None = None,
                    ) -> dict[tuple[int, int], tuple[Miss, Miss]]:
    """(core, position in its list) -> how the tile's A and B loads miss the L2.
    ``apart``: (matmul, "a" | "b") whose panel loads the cores of a wave do not share (they
    drifted apart: each misses what is not resident from earlier waves). ``sharing``: per
    (tensor, view), the panels' L2 lines shared between their pieces and with neighbouring
    panels (``_line_sharing``): a new panel hits the part of a line an earlier piece of its own
    or a resident neighbour brought in, and half the part it shares with a neighbour loaded in
    the same wave."""
    sharing = sharing or {}
    item = 2 if tiling.dtype in ("fp16", "bf16") else 4
    lists = [[(j, x) for j, x in enumerate(tiles) if x[0] in phase] for tiles in tiling.assignment]
    out: dict[tuple[int, int], tuple[Miss, Miss]] = {}
    if l2 is None:
        for c, tiles in enumerate(lists):
            for j, _ in tiles:
                out[(c, j)] = ((1.0, 1.0), (1.0, 1.0))
        return out
    # per matmul: the views of A and B, rows of each tile row, columns of each tile column
    views = [_VIEWS[mm.name] for mm in tiling.matmuls]
    rows = [[min(mm.base_m, mm.m - t * mm.base_m) for t in range(mm.tiles_m)] for mm in tiling.matmuls]
    cols = [[min(mm.base_n, mm.n - t * mm.base_n) for t in range(mm.tiles_n)] for mm in tiling.matmuls]
    kbytes = [mm.k * item for mm in tiling.matmuls]
    nchunks = [len(coarse_chunks(mm.k, mm.chunk_k, max(1, tiling.coarsen))) for mm in tiling.matmuls]
    waves = max((len(x) for x in lists), default=0)
    for w in range(waves):
        users: dict[tuple, int] = {}
        sizes: dict[tuple, int] = {}
        matmul_of: dict[tuple, int] = {}
        results: dict[int, int] = {}
        wave = [(c, tiles[w]) for c, tiles in enumerate(lists) if w < len(tiles)]
        for _c, (_, (i, tm, tn)) in wave:
            (ta, va), (tb, vb) = views[i]
            ka, kb = (ta, va, tm), (tb, vb, tn)
            users[ka] = users.get(ka, 0) + 1
            users[kb] = users.get(kb, 0) + 1
            sizes[ka] = rows[i][tm] * kbytes[i]
            sizes[kb] = cols[i][tn] * kbytes[i]
            matmul_of[ka] = matmul_of[kb] = i
            results[i] = results.get(i, 0) + rows[i][tm] * cols[i][tn] * out_items[i]
        miss: dict[tuple, Miss] = {}
        before = {key: key in l2.lru for key in users}
        # the distinct bytes the wave moves per L1 chunk (its panels, its results): a line a
        # panel's piece brought in outlives d chunks if d of them do not fill the L2
        per_chunk = sum(sizes[k] * _lined(sharing, k) / nchunks[matmul_of[k]] for k in users) + sum(
            b / nchunks[i] for i, b in results.items())
        for key, n in users.items():
            if before[key]:
                l2.touch(key, sizes[key])
                miss[key] = (0.0, 0.0)
                continue
            # the first of the wave's cores to load it misses (whoever that is) what is neither
            # resident under another view nor in a line a resident piece brings in
            seen = l2.other_views(key[0], key[1])
            l2.touch(key, sizes[key])
            l2.adopt(key, sizes[key] * seen)
            saved = 0.0
            share = sharing.get(key[:2], {}).get(key[2])
            if share is not None:
                own, beside, _ = share
                saved = sum(f for d, f in own.items() if d * per_chunk < l2.size)
                for t, f in beside.items():
                    nb = (key[0], key[1], t)
                    if nb in users:      # loaded in this wave too: first to a line half the time
                        saved += f * (1.0 if before[nb] else 0.5)
                    elif nb in l2.lru:
                        saved += f
            miss[key] = (1.0 / n, (1.0 - seen) * max(0.0, 1.0 - saved))
        for c, (j, (i, tm, tn)) in wave:
            (ta, va), (tb, vb) = views[i]
            ma, mb = miss[(ta, va, tm)], miss[(tb, vb, tn)]
            if (i, "a") in apart and ma[0] > 0:
                ma = (1.0, ma[1])
            if (i, "b") in apart and mb[0] > 0:
                mb = (1.0, mb[1])
            out[(c, j)] = (ma, mb)
        for i, nbytes in results.items():      # the results allocate in the L2 (stores do)
            name = tiling.matmuls[i].name
            l2.touch(("logits" if name == "logits" else "result", "tiles", w, name), nbytes, write=True)
    return out


def _vector_l2(l2: _L2, tiling: FlceTiling, rows_bytes: int, s_bytes: int, rows_name: str,
               slices: int = 8) -> tuple[float, list[tuple[list[float], float]] | None]:
    """The vector stage through the L2, batch by batch of META_ROWS rows (every vector core its
    batch at once): the rows are read round by round, then the batch's S enters (dirty), as the
    kernel shows it to the L2 model with the batch's last row (flce_grad._vector_rows,
    ``l2_rows``).

    A round reads the same fraction of every tile of the rows tensor (every vector core its own
    rows, all at once, and a row crosses every tile column): the part of it resident in the L2
    (the logits the memory-saving mode's Fixpipe stored, dirty) hits and becomes the most
    recent, as a read of a resident line does in the simulator's LRU; the rest misses and
    allocates. So the batch's S evicts what is older than every row read -- the logits matmul's
    panels -- and not the logits read just before it (a model that let S evict the unread
    logits in proportion to the panels missed 30 % of the logits that the simulator hits and
    wrote the dirty ones back, BT 1000 / H 1024 / V 8192 memory-saving with a 48 MiB L2).

    Returns the fraction of the rows read from the L2, and with a write-back L2, per batch: the
    bytes written back per byte the rounds' loads miss (at that fraction), and the bytes each
    core writes back when the S enters (``_vector_stage``); None for a write-through L2."""
    _, nrows = tiling.rows_of(0)
    stored = [k for k in l2.lru if k[0] == rows_name and k[1] == "tiles"]   # unread, in LRU order
    unread = 1.0                # fraction of every stored tile not read yet
    hits = 0.0
    rounds: list[list[tuple[float, float]]] = []     # per batch, per round: (bytes read, written back)
    ends: list[float] = []
    for b0 in range(0, nrows, META_ROWS):
        frac = min(META_ROWS, nrows - b0) / nrows
        rounds.append([])
        for r in range(slices):
            read = rows_bytes * frac / slices
            take = min(1.0, read / rows_bytes / unread) if unread > 0 else 1.0
            hit = 0.0
            for key in stored:          # the round's share of every resident tile moves on
                b = l2.lru.get(key)
                if b is None:
                    continue
                part = b * take
                hit += part
                l2.shrink(key, part)
            unread = max(0.0, unread - read / rows_bytes)
            hit = min(hit, read)
            wb = l2.written_back
            if hit > 0:                 # still resident (and dirty as stored): no eviction
                l2.touch((rows_name, "read", b0, r), hit, write=True)
            if read - hit > 0:
                l2.touch((rows_name, "stream", b0, r), read - hit)
            hits += hit
            rounds[-1].append((read, l2.written_back - wb))
        wb = l2.written_back
        for r in range(slices):       # in slices, so that what survives is the most recent S
            l2.touch(("s", "stream", b0, r), s_bytes * frac / slices, write=True)
        ends.append((l2.written_back - wb) / tiling.aiv_num)
    from_l2 = hits / rows_bytes if rows_bytes else 0.0
    if not l2.write_back:
        return from_l2, None
    missed = 1.0 - from_l2
    out = [([w / (read * missed) if read * missed > 0 else 0.0 for read, w in rs], e)
           for rs, e in zip(rounds, ends)]
    return from_l2, out


# ---------------------------------------------------------------------------------------------
# the cube cores
# ---------------------------------------------------------------------------------------------

class _CubeCosts:
    """Cycles of the cube instructions of one tile shape (the simulator's cost rules)."""

    def __init__(self, spec: DeviceSpec, tiling: FlceTiling, rates: tuple[float, float, float]) -> None:
        self.spec = spec
        self.item = 2 if tiling.dtype in ("fp16", "bf16") else 4
        # FLCE is validated for parts with a cube, its Fixpipe and MTE2 (kernels' product check)
        assert spec.cube is not None and spec.fixp is not None and spec.mte2 is not None
        self.macs = spec.cube.macs_per_cycle[tiling.dtype]
        self.frac = spec.cube.m * spec.cube.k * spec.cube.n
        self.hbm, self.l2, self.fixp = rates     # per-transfer bytes/cycle: misses, hits, Fixpipe
        self.m1 = spec.mte1.startup if spec.mte1 is not None else 0
        self.startup = spec.mte2.startup

    def transfer(self, nbytes: float, miss: float) -> int:
        """Data cycles of a load whose ``miss`` fraction misses: hit and miss parts move at
        once on their links (Device.gm_transfer)."""
        hit = nbytes * (1.0 - miss)
        return max(math.ceil(hit / self.l2) if hit >= 1 else 0,
                   math.ceil(nbytes * miss / self.hbm) if nbytes * miss >= 1 else 0)

    def load(self, nbytes: int, miss: Miss, reps: int) -> float:
        """CopyGmToL1, expected cycles: the first core of the wave to load a panel misses its
        non-resident part, the others hit."""
        p, frac = miss
        data = p * self.transfer(nbytes, frac) + (1.0 - p) * self.transfer(nbytes, 0.0)
        return self.startup * reps + data

    def in_flight(self, nbytes: int, miss: Miss) -> tuple[float, float]:
        """Expected cycles the load's miss part is on HBM and its hit part on the L2 link (the
        parts of a load move at once, each at its own rate)."""
        p, frac = miss
        return (p * nbytes * frac / self.hbm,
                (p * nbytes * (1.0 - frac) + (1.0 - p) * nbytes) / self.l2)

    def load_data(self, rows: int, cols: int, to_a: bool, reps: int) -> int:
        rate = self.spec.rates.l1_to_l0a if to_a else self.spec.rates.l1_to_l0b
        return math.ceil(nz_bytes(rows, cols, self.item) / rate) + reps * self.m1

    def mmad(self, m: int, k: int, n: int) -> int:
        c = self.spec.cube
        assert c is not None                # checked in __init__
        return math.ceil(ceil_div(m, c.m) * ceil_div(k, c.k) * ceil_div(n, c.n) * self.frac / self.macs)

    def fixpipe(self, m: int, n: int, out_item: int) -> int:
        assert self.spec.fixp is not None   # checked in __init__
        return self.spec.fixp.startup + math.ceil(m * n * out_item / self.fixp)


class _CubeCore:
    """One cube core's queues and program (flce_grad._aic_program)."""

    def __init__(self, spec: DeviceSpec, tiling: FlceTiling, start: float) -> None:
        self.spec, self.tiling = spec, tiling
        self.core = _Core(start, spec.scalar.queue_depth)
        c = self.core
        self.a1 = _Que(c, "A1", "MTE2", "MTE1", L1_BUFFERS)
        self.b1 = _Que(c, "B1", "MTE2", "MTE1", L1_BUFFERS)
        # L0A and L0B: one ping-pong pool, one flag pair per slot (flce_grad._L0PingPong)
        self.l0 = _Que(c, "L0", "MTE1", "CUBE", L0_BUFFERS)
        self.co1 = _Que(c, "CO1", "CUBE", "FIXP", tiling.l0c_depth)
        self.ques = (self.a1, self.b1, self.l0, self.co1)

    # transfer cycles in flight (misses, hits, Fixpipe stores: for the link shares), counted
    # with the busy cycles so that a skipped steady state adds them too
    @property
    def miss_cycles(self) -> float:
        return self.core.busy.get("~miss", 0.0)

    @property
    def hit_cycles(self) -> float:
        return self.core.busy.get("~hit", 0.0)

    @property
    def fixp_cycles(self) -> float:
        return self.core.busy.get("~fixp", 0.0)

    def tile(self, costs: _CubeCosts, mm: MatmulTiling, tm: int, tn: int, miss_a: Miss, miss_b: Miss,
             out_item: int) -> None:
        spec, c, bd = self.spec, self.core, self.tiling.block_dim
        coarse = max(1, self.tiling.coarsen)
        ml = min(mm.base_m, mm.m - tm * mm.base_m)
        nl = min(mm.base_n, mm.n - tn * mm.base_n)
        item = costs.item
        acc = self.co1.alloc()
        busy = c.busy

        def chunk(kk: int) -> None:
            reps = ceil_div(kk, mm.chunk_k)
            piece = ceil_div(kk, reps)          # one load of a coarse copy: k of one chunk
            for q, nbytes, miss, one in ((self.a1, ml * kk * item, miss_a, ml * piece * item),
                                         (self.b1, kk * nl * item, miss_b, piece * nl * item)):
                b = q.alloc()
                cyc = costs.load(nbytes, miss, reps)
                c.op("MTE2", cyc + c.head(spec, "MTE2", bd, one))
                f = miss[0] * miss[1]                    # expected fraction of bytes missed
                busy["~bytes"] = busy.get("~bytes", 0.0) + nbytes
                busy["~missbytes"] = busy.get("~missbytes", 0.0) + nbytes * f
                # the link shares count each part's own time on its link: the load's time split
                # by bytes put a miss that 1 core in 24 takes at 1/24 of its weight twice over
                on_hbm, on_l2 = costs.in_flight(nbytes, miss)
                busy["~miss"] = busy.get("~miss", 0.0) + on_hbm
                busy["~hit"] = busy.get("~hit", 0.0) + on_l2
                q.enque(b)
            a1, b1 = self.a1.deque(), self.b1.deque()
            for _, ks, rep in l0_steps(kk, mm.base_k, mm.step_k):
                slot = self.l0.alloc()
                c.op("MTE1", costs.load_data(ml, ks, True, rep))
                c.op("MTE1", costs.load_data(ks, nl, False, rep))
                self.l0.enque(slot)
                slot = self.l0.deque()
                c.op("CUBE", costs.mmad(ml, ks, nl))
                self.l0.free(slot)
            self.a1.free(a1)
            self.b1.free(b1)

        # the kernel's coarse chunks (flce_grad.coarse_chunks): runs of equal extents
        for kk, run in itertools.groupby(coarse_chunks(mm.k, mm.chunk_k, coarse)):
            c.repeat(sum(1 for _ in run), lambda kk=kk: chunk(kk), self.ques)
        self.co1.enque(acc)
        acc = self.co1.deque()
        cyc = costs.fixpipe(ml, nl, out_item)
        c.op("FIXP", cyc + c.head(spec, "FIXP", bd))
        assert spec.fixp is not None        # checked by _CubeCosts
        busy["~fixp"] = busy.get("~fixp", 0.0) + cyc - spec.fixp.startup
        self.co1.free(acc)


def _runs(keys: list, longest: int = 8) -> list[tuple[int, int, int]]:
    """(start, group size, repetitions) covering ``keys``: at each position the group of up to
    ``longest`` keys that repeats back to back over the most keys (a tile traversal in bands
    repeats a short pattern of L2 misses and hits), else a single key."""
    out = []
    k, n = 0, len(keys)
    while k < n:
        best = (1, 1)
        for size in range(1, longest + 1):
            if k + 2 * size > n:
                break
            reps = 1
            while k + (reps + 1) * size <= n and keys[k + reps * size:k + (reps + 1) * size] == keys[k:k + size]:
                reps += 1
            if reps > 1 and size * reps > best[0] * best[1]:
                best = (size, reps)
        out.append((k, best[0], best[1]))
        k += best[0] * best[1]
    return out


def _cube_stage(spec: DeviceSpec, tiling: FlceTiling, l2: _L2 | None, phase: set[int], start: float,
                out_items: Mapping[int, int],
                state: list[_CubeCore] | None) -> tuple[float, list[_CubeCore], _L2 | None]:
    """A cube phase with its L2 behaviour: a first replay assumes that the cores of a wave share
    the panels they load; the operands whose chunks drift the sharers apart (DRIFT_LIMIT) are
    replayed with every core missing them."""
    before = l2.copy() if l2 is not None else None
    sharing = _line_sharing(tiling, phase, l2.origin, l2.line) if l2 is not None and l2.line else {}
    misses = _miss_fractions(l2, tiling, phase, out_items, sharing=sharing)
    end, cores = _cube_phase(spec, tiling, phase, start, misses, out_items, state)
    if l2 is None or not cores:
        return end, cores, l2
    span = max(end - start, 1.0)
    per_cycle = sum(cc.core.busy.get("~bytes", 0.0) for cc in cores) / span
    item = 2 if tiling.dtype in ("fp16", "bf16") else 4
    assert spec.mte2 is not None            # required of every Ascend spec (devices/spec.py)
    gm_read = float(spec.rates.gm_read or spec.mte2.base)
    l2_read = float(spec.rates.l2_read or gm_read)
    apart = set()
    for i in phase:
        mm = tiling.matmuls[i]
        kc = min(mm.k, mm.chunk_k * max(1, tiling.coarsen))
        for side, nbytes in (("a", mm.base_m * kc * item), ("b", kc * mm.base_n * item)):
            lag = nbytes / gm_read - nbytes / l2_read
            if lag * per_cycle > DRIFT_LIMIT * l2.size:
                apart.add((i, side))
    if not apart:
        return end, cores, l2
    l2 = before
    misses = _miss_fractions(l2, tiling, phase, out_items, frozenset(apart), sharing)
    end, cores = _cube_phase(spec, tiling, phase, start, misses, out_items, state)
    return end, cores, l2


def _cube_phase(spec: DeviceSpec, tiling: FlceTiling, phase: set[int], start: float,
                misses: Mapping[tuple[int, int], tuple[Miss, Miss]], out_items: Mapping[int, int],
                cores_state: list[_CubeCore] | None) -> tuple[float, list[_CubeCore]]:
    """End of a cube phase (the last core's last Fixpipe) from ``start``; the link rates from
    the fraction of the time the cores keep transfers in flight: a pass with the cores' own
    rates, then passes with the shares the previous pass's transfers leave each, until the
    cores no longer ask a link for more than it carries (``_LINK_PASSES`` at most)."""
    cap_hbm = spec.bytes_per_cycle(spec.gm.bandwidth)
    cap_l2 = spec.bytes_per_cycle(spec.l2.bandwidth) if spec.l2 is not None else 0.0
    # Fixpipe stores go to the L2 link when a write-back L2 takes them (Device.gm_transfer)
    fixp_on_l2 = stores_to_l2(spec)
    assert spec.mte2 is not None and spec.fixp is not None   # Ascend spec; FLCE parts have a Fixpipe
    gm_read = float(spec.rates.gm_read or spec.mte2.base)
    l2_read = float(spec.rates.l2_read or gm_read)
    fixp = float(spec.fixp.base)
    rates = (gm_read, l2_read, fixp)
    bd = tiling.block_dim
    result: list[_CubeCore] = []
    end = start
    for attempt in range(_LINK_PASSES):
        result = []
        costs = _CubeCosts(spec, tiling, rates)
        replayed: dict[tuple, _CubeCore] = {}
        for c in range(bd):
            mine = [(j, x) for j, x in enumerate(tiling.assignment[c] if c < len(tiling.assignment) else ())
                    if x[0] in phase]
            keys = []
            for j, (i, tm, tn) in mine:
                mm = tiling.matmuls[i]
                keys.append((i, min(mm.base_m, mm.m - tm * mm.base_m), min(mm.base_n, mm.n - tn * mm.base_n),
                             misses[(c, j)]))
            seq = (tuple(keys), cores_state is not None and bool(cores_state[c].core.first))
            if seq in replayed:        # cores with the same program take the same time
                result.append(replayed[seq])
                continue
            cc = _CubeCore(spec, tiling, start)
            if cores_state is not None:        # the same block continues: heads already paid
                cc.core.first = dict(cores_state[c].core.first)
            cc.core.wait_until("MTE2", start)
            for k, size, reps in _runs(keys):   # repeating groups of tiles: steady states skip
                group = [(tiling.matmuls[i], tm, tn, *misses[(c, j)], out_items[i])
                         for j, (i, tm, tn) in mine[k:k + size]]
                cc.core.repeat(reps, lambda g=group, cc=cc, costs=costs: [cc.tile(costs, *x) for x in g], cc.ques)
            replayed[seq] = cc
            result.append(cc)
        end = max((cc.core.end for cc in result), default=start)
        span = max(end - start, 1.0)
        # transfers in flight on average: misses share HBM, hits the L2 link, stores the one
        # that takes them
        fixp_n = sum(cc.fixp_cycles for cc in result) / span
        n_hbm = sum(cc.miss_cycles for cc in result) / span + (0.0 if fixp_on_l2 else fixp_n)
        n_l2 = sum(cc.hit_cycles for cc in result) / span + (fixp_n if fixp_on_l2 else 0.0)
        l2_share = cap_l2 / max(1.0, n_l2) if cap_l2 else math.inf
        new = (min(gm_read, cap_hbm / max(1.0, n_hbm)), min(l2_read, l2_share),
               min(fixp, l2_share if fixp_on_l2 else cap_hbm / max(1.0, n_hbm)))
        if attempt == 0 and all(abs(a - b) <= 1e-3 * a for a, b in zip(new, rates)):
            break
        # the shares of this pass hold (no link asked for more than it carries): done -- as
        # after the second pass always, unless a link is so narrow that the second pass, which
        # still moved at shares of the faster first one, overran it (FLCE at 50 GB/s of HBM)
        if attempt > 0 and all(b >= a * (1 - 1e-3) for a, b in zip(rates, new)):
            break
        rates = new if attempt == 0 else tuple(min(a, b) for a, b in zip(rates, new))  # type: ignore[assignment]
    return end, result


# ---------------------------------------------------------------------------------------------
# the vector cores
# ---------------------------------------------------------------------------------------------

def _vector_stage(spec: DeviceSpec, tiling: FlceTiling, start: float, rows_from_l2: float,
                  int_item: int, packed: bool,
                  writeback: Sequence[tuple[Sequence[float], float]] | None = None) -> tuple[float, _Core]:
    """End of the vector stage: the replay of the vector core with the most rows
    (flce_grad._vector_rows); every vector core does the same at the same time.

    ``writeback``: with a write-back L2, per batch of META_ROWS rows (``_vector_l2``), the HBM
    bytes written back per byte the row loads allocate in the L2, round by round (the batch's
    rows split evenly), and the bytes a core writes back when the batch's S enters the L2 (with
    its last row: the kernel's ``l2_rows``); None: stores go to HBM (a write-through L2, or
    none)."""
    ms = tiling.mode == MEMORY_SAVING
    v, chunk = tiling.v, tiling.vec_chunk
    item = 2 if tiling.dtype in ("fp16", "bf16") else 4
    cores = tiling.aiv_num
    bd = tiling.block_dim
    _, nrows = tiling.rows_of(0)
    c = _Core(start, spec.scalar.queue_depth)
    if nrows == 0:
        return start, c
    if ms:
        c.wait_until("MTE2", start)
    chunks = [min(chunk, v - c0) for c0 in range(0, v, chunk)]
    assert spec.mte2 is not None and spec.mte3 is not None   # required of every Ascend spec

    def vec_cycles(n: int) -> int:
        vec = (vector_cycles(spec, "Muls", "fp32", n) + vector_cycles(spec, "Cast_fp32_" + tiling.dtype, "fp32", n)
               + vector_cycles(spec, "Adds", "fp32", 8))
        if ms:
            vec += (vector_cycles(spec, "Adds", "fp32", n) + vector_cycles(spec, "Exp", "fp32", n)
                    + vector_cycles(spec, "Div", "fp32", n))
        return vec

    def through_costs() -> list[list[int]]:
        # a row chunk's load shares the link with every core's loads and the store of the chunk
        # before (the same chunk of the previous row when a row is one chunk); loads of the
        # recomputed logits are served by the L2 for the resident fraction
        out = []
        for k, n in enumerate(chunks):
            prev = chunks[k - 1]
            lb, sb = n * 4, align16(prev) * item
            hit_part = lb * rows_from_l2
            beside, store_prev, alone = lockstep_copy_cycles(spec, lb - hit_part, sb, cores)
            hit = math.ceil(hit_part / l2_read_rate(spec, cores)) if hit_part >= 1 else 0
            out.append([max(beside, hit), store_prev, max(alone, hit), vec_cycles(n)])
        return out

    def back_costs(f: float, end_wb: float = 0.0) -> list[list[int]]:
        # a write-back L2 takes the stores on the L2 link at the MTE3 path's rate; HBM carries
        # the loads' misses and the dirty lines evicted by what the loads and stores allocate
        # (``f`` bytes per byte), which the transfers wait for (Device.gm_transfer). Every core
        # does the same at once: HBM is shared evenly among them, and the L2 link between the
        # loads' hits and the previous chunk's stores (``lockstep_copy_cycles``).
        assert spec.mte2 is not None and spec.mte3 is not None and spec.l2 is not None
        share = spec.bytes_per_cycle(spec.gm.bandwidth) / cores
        dl = spec.mte2.base + spec.mte2.shared / cores
        ds = min(spec.mte3.base + spec.mte3.shared / cores, spec.bytes_per_cycle(spec.l2.bandwidth) / cores)
        l2r = l2_read_rate(spec, cores)
        out = []
        for k, n in enumerate(chunks):
            prev = chunks[k - 1]
            lb, sb = n * 4, align16(prev) * item
            hit, miss = lb * rows_from_l2, lb * (1.0 - rows_from_l2)
            wl, ws = f * miss, 0.0
            hit_c: float = hit / l2r
            store_c: float = sb / ds
            hit_b = hit_c
            if hit >= 1 and sb:
                hit_b, store_c, hit_c = lockstep_copy_cycles(spec, hit, sb, cores, load_from_l2=True)
            beside = max(miss / dl, (miss + wl + ws) / share, hit_b)
            alone = max(miss / dl, (miss + wl) / share, hit_c)
            # the last chunk's store of a batch's last row waits for what the batch's S evicts
            store = max(store_c, (ws + (end_wb if k == 0 else 0.0)) / share)
            out.append([math.ceil(beside), math.ceil(store), math.ceil(alone), vec_cycles(n)])
        return out

    def rotate(cs: list[list[int]]) -> list[list[int]]:
        # the store of chunk k runs beside the load of chunk k + 1
        return [[ld, cs[(k + 1) % len(cs)][1], alone, vec] for k, (ld, _, alone, vec) in enumerate(cs)]
    assert spec.mte2 is not None and spec.mte3 is not None   # required of every Ascend spec
    st2, st3 = spec.mte2.startup, spec.mte3.startup
    meta_copies = 3 + (2 if ms else 0)
    state: dict[str, Any] = {"slot": 0, "used": [False, False], "first": True}

    def row(costs: list[list[int]]) -> None:
        used = state["used"]
        for k, (load_b, store, load_a, vec) in enumerate(costs):   # (chunk k: rotate keeps loads)
            slot = state["slot"]
            if used[slot]:
                c.wait("MTE3", "MTE2", slot)
            # the first load of the stage runs before any store
            c.op("MTE2", st2 + (load_a if state["first"] else load_b) + c.head(spec, "MTE2", bd, chunks[k] * 4))
            state["first"] = False
            used[slot] = True
            c.set("MTE2", "VECTOR", slot)
            c.wait("MTE2", "VECTOR", slot)
            c.op("VECTOR", vec + c.head(spec, "VECTOR", bd))
            c.set("VECTOR", "MTE3", slot)
            c.wait("VECTOR", "MTE3", slot)
            c.op("MTE3", st3 + store + c.head(spec, "MTE3", bd))
            c.set("MTE3", "MTE2", slot)
            state["slot"] = slot ^ 1

    for b0 in range(0, nrows, META_ROWS):
        nb = min(META_ROWS, nrows - b0)
        if b0:
            c.wait("VECTOR", "MTE2", "meta")
        meta_sizes = [nb * 4, nb * int_item, (ceil_div(nb, 8) + 1) if packed else nb] + ([nb * 4] * 2 if ms else [])
        for k in range(meta_copies):
            lone = lockstep_copy_cycles(spec, meta_sizes[k], 0, cores)[0]
            c.op("MTE2", st2 + lone + c.head(spec, "MTE2", bd, meta_sizes[k]))
        c.set("MTE2", "VECTOR", "meta")
        c.wait("MTE2", "VECTOR", "meta")
        # identical rows (those of one round of the L2 stream): a steady state is a shift
        if writeback is None:
            plain = rotate(through_costs())
            c.repeat(nb, lambda cs=plain: row(cs))
        else:
            fs, end_wb = writeback[b0 // META_ROWS]
            for r, f in enumerate(fs):
                lo, hi = r * nb // len(fs), (r + 1) * nb // len(fs)
                last = hi == nb
                if hi - last > lo:
                    costs = rotate(back_costs(f))
                    c.repeat(hi - last - lo, lambda cs=costs: row(cs))
                if last:
                    row(rotate(back_costs(f, end_wb)))
        c.set("VECTOR", "MTE2", "meta")
    return c.end, c


# ---------------------------------------------------------------------------------------------
# the call
# ---------------------------------------------------------------------------------------------

def estimate(spec: DeviceSpec, t: Mapping[str, TensorDesc | None], attrs: Mapping[str, Any],
             tiling: FlceTiling) -> Estimate:
    """Closed-form cycles of the mixed launch (module docstring): the phases one after another,
    each the slowest core's replay, plus the launch overhead."""
    ms = tiling.mode == MEMORY_SAVING
    item = 2 if tiling.dtype in ("fp16", "bf16") else 4
    bt, h, v = tiling.bt, tiling.h, tiling.v
    mt = t.get("masked_target")
    tm = t.get("target_mask")
    int_item = mt.dtype.itemsize if mt is not None else 8
    packed = tm is not None and tm.dtype.name == "uint8"
    s_bytes = nz_bytes(bt, v, item)
    rows_bytes = bt * v * 4
    tensors = {"input": bt * h * item, "weight": v * h * item, "s": s_bytes, "logits": rows_bytes,
               "softmax": rows_bytes}
    # where opsim.run puts the operands and the workspace (S in it) on the device
    at = fresh_placement(spec, [(n, d.nbytes) for n, d in t.items() if d is not None]
                         + [("workspace", tiling.workspace)])
    origin: dict[str, int] = {n: at[n] for n in ("input", "weight") if n in at}
    origin["s"] = at["workspace"] + tiling.ws_s_offset
    l2 = (_L2(spec.l2.size, tensors, write_back=spec.l2.write_policy == "write-back",
              line=spec.l2.chunk, origin=origin)
          if spec.l2 is not None else None)
    out_items = {i: (4 if mm.name == "logits" else item) for i, mm in enumerate(tiling.matmuls)}
    overhead = spec.launch.overhead
    now = float(overhead)
    notes = []
    busy: dict[str, float] = {}
    state = None
    if ms:
        end, state, l2 = _cube_stage(spec, tiling, l2, {0}, now, out_items, None)
        notes.append(f"logits {end - now:.0f}")
        now = end
    logits_l2, writeback = 0.0, None
    if l2 is not None:
        logits_l2, writeback = _vector_l2(l2, tiling, rows_bytes, s_bytes, "logits" if ms else "softmax")
    end, vcore = _vector_stage(spec, tiling, now, logits_l2, int_item, packed, writeback)
    notes.append(f"vector {end - now:.0f}")
    now = end
    grads = {i for i, mm in enumerate(tiling.matmuls) if mm.name != "logits"}
    end, cubes, l2 = _cube_stage(spec, tiling, l2, grads, now, out_items, state)
    notes.append(f"grads {end - now:.0f}")
    for c, cc in enumerate(cubes):      # the busiest core per pipe, both cube phases
        for p, b in cc.core.busy.items():
            if not p.startswith("~"):
                busy[p] = max(busy.get(p, 0.0), b + (state[c].core.busy.get(p, 0.0) if state else 0.0))
    for p, b in vcore.busy.items():
        busy[p] = max(busy.get(p, 0.0), b)
    # bytes moved: the cube's panel loads (re-reads included) and results, the vector cores'
    # row loads, per-row scalars and S stores
    cube_loads = sum(cc.core.busy.get("~bytes", 0.0) for cc in cubes) + sum(
        cc.core.busy.get("~bytes", 0.0) for cc in state or ())
    meta = bt * (4 + int_item + (1 if tm is None or not packed else 0)) + (bt + 7) // 8 * packed + (8 * bt if ms else 0)
    chunks = [min(tiling.vec_chunk, v - c0) for c0 in range(0, v, tiling.vec_chunk)]
    reads = cube_loads + rows_bytes + meta
    # the cube's expected hits are served by the L2, not HBM, and so is the resident part of the
    # logits the vector stage reads back in memory-saving mode (as its cycles price them): counted
    # on HBM, they put the HBM rate at twice its peak with a 50 GB/s what-if HBM
    cube_hits = cube_loads - sum(cc.core.busy.get("~missbytes", 0.0) for cc in cubes) - sum(
        cc.core.busy.get("~missbytes", 0.0) for cc in state or ())
    row_hits = rows_bytes * logits_l2
    writes = (bt * sum(align16(n) for n in chunks) * item + bt * h * item + v * h * item
              + (rows_bytes if ms else 0))
    return Estimate(cycles=int(math.ceil(end)), pipe_busy={p: int(round(b)) for p, b in busy.items()},
                    bytes_read=int(reads), bytes_written=int(writes), block_dim=tiling.block_dim,
                    ub_bytes=tiling.ub_bytes, workspace_bytes=tiling.workspace, launches=1, model="flce",
                    l2_bytes_read=int(max(0.0, cube_hits) + row_hits),
                    notes="mixed launch: " + ", ".join(notes) + " cycles",
                    extra={"estimate_phases": tuple(notes)})
