"""The L2 model's LRU state while every resident line weighs one line of capacity (no sampled
line was ever shown to the cache), in numpy arrays indexed by line: the same cache as the
OrderedDict walk of :class:`opsim.simulator.l2.L2Cache`, at a fraction of the cost per line.

Recency is a stamp: every touch gives its line the next number, so the least-recently-used line
is the resident line with the smallest stamp. ``stamp[line - base]`` holds it (0: not resident),
``dirty[line - base]`` whether the line was written since it was filled (write-back). The
eviction order is a queue of (line, stamp) pairs appended at every touch; a pair whose stamp is
no longer its line's is stale (the line was touched again, evicted or invalidated) and is
skipped, so the first valid pairs are the least-recently-used lines, in order (a lazily deleted
LRU list).

An access touches its lines in order; a resident line is a hit, a new one is inserted and the
least-recently-used line is evicted while the cache is over capacity. When the access touches
distinct lines, no more than the cache holds, and the ``over`` lines it must evict (resident +
new - capacity) are not lines of the access, the walk's outcome is computed in a few array
operations: each eviction takes the least recent line not touched yet, and as the ``over``
least recent lines are never touched, they are the lines evicted, in order; no line of the
access is evicted, so every resident one is a hit and every new one a miss; the lines end most
recent in the order they were touched (the walk's order, as their new stamps are increasing).
Otherwise (lines touched twice, an access longer than the cache, a resident line of it that the
walk evicts before touching it) the walk is done line by line, exactly as the OrderedDict's.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import cast

import numpy as np

# the widest span of lines the arrays cover: 8 times the cache's lines, at least 2^20 lines
# (512 MiB of GM in 512 B lines) and at most 2^24 (8 GiB): 9 bytes of state per line of span,
# 28 MiB for a 192 MiB L2. An access beyond it hands the state to the OrderedDict walk, whose
# memory is the resident lines only (tensors far apart would otherwise cost arrays as wide as
# the gap, copied whole by every save_state of the fast-forward)
MAX_SPAN = 1 << 24
MIN_SPAN = 1 << 20
SPAN_PER_LINE = 8


# the longest ramp (0, 1, 2, ...) a cache keeps for the indices of strided touches (512 KiB)
RAMP_MAX = 1 << 16


def span_limit(capacity: int) -> int:
    """The widest span of lines the arrays of a cache of ``capacity`` lines cover."""
    return min(MAX_SPAN, max(MIN_SPAN, SPAN_PER_LINE * capacity))

try:        # the C function (numpy.count_nonzero is a Python wrapper around it: 4x the call)
    from numpy._core.multiarray import count_nonzero as _count
except ImportError:         # numpy < 2
    _count = np.count_nonzero
_nnz = cast(Callable[[np.ndarray], np.integer], _count)   # a numpy integer: int() it
_min = np.minimum.reduce        # ndarray.min() without its Python wrapper (half the cost)


class LineArrays:
    """LRU state of a uniform L2 (every line one line of capacity), indexed by line."""

    def __init__(self, capacity: int, chunk: int) -> None:
        self.cap = capacity
        self.chunk = chunk
        self.base = 0                                   # line of index 0
        self.stamp = np.zeros(0, dtype=np.int64)        # last touch of each line (0: not resident)
        self.dirty = np.zeros(0, dtype=bool)
        self.queue = np.zeros(0, dtype=np.int64)        # indices in touch order (with stale ones)
        self.qstamp = np.zeros(0, dtype=np.int64)       # the stamp each queued touch gave
        self.head = 0                                   # queue[head:tail] may hold valid touches
        self.tail = 0
        self.clock = 0                                  # the last stamp given
        self.used = 0                                   # resident lines
        self.span = span_limit(capacity)                # the widest span the arrays cover
        self._ramp = np.arange(1024, dtype=np.int64)     # 0, 1, 2, ... (stamps and indices from it)

    # -- the arrays ------------------------------------------------------------------------------
    def cover(self, lo: int, hi: int) -> bool:
        """Make lines [lo, hi] indexable (growing the arrays with room to spare); False if the
        arrays would then span more than ``span`` lines (:func:`span_limit`)."""
        n = self.stamp.size
        base = self.base
        if n and base <= lo and hi < base + n:
            return True
        want_lo, want_hi = (min(lo, base), max(hi, base + n - 1)) if n else (lo, hi)
        span = self.span
        if want_hi - want_lo >= span:
            return False
        extra = max(want_hi - want_lo + 1, 1 << 16) // 2
        new_lo = want_lo - extra if not n or lo < base else want_lo
        new_hi = want_hi + extra if not n or hi >= base + n else want_hi
        new_lo = max(new_lo, want_hi - span + 1, 0)
        new_hi = min(new_hi, new_lo + span - 1)
        size = new_hi - new_lo + 1
        stamp = np.zeros(size, dtype=np.int64)
        dirty = np.zeros(size, dtype=bool)
        shift = base - new_lo
        if n:
            stamp[shift:shift + n] = self.stamp
            dirty[shift:shift + n] = self.dirty
            if shift:
                self.queue[self.head:self.tail] += shift
        self.stamp, self.dirty, self.base = stamp, dirty, new_lo
        return True

    def _room(self, n: int) -> None:
        """Room for ``n`` more queued touches: drop the stale ones (the valid ones are at most
        the resident lines) and keep room for three caches' worth of touches after them (a
        pass over the queue per that many touches)."""
        if self.tail + n <= self.queue.size:
            return
        q, qs = self.queue[self.head:self.tail], self.qstamp[self.head:self.tail]
        keep = self.stamp[q] == qs
        q, qs = q[keep], qs[keep]
        size = max(self.queue.size, q.size + n + 3 * self.cap + 1024)
        if size > self.queue.size:
            self.queue = np.zeros(size, dtype=np.int64)
            self.qstamp = np.zeros(size, dtype=np.int64)
        self.queue[:q.size] = q
        self.qstamp[:q.size] = qs
        self.head, self.tail = 0, q.size

    def _front(self, over: int) -> tuple[np.ndarray, int, int]:
        """The ``over`` least-recently-used lines (indices, in order), the stamp of the last of
        them and where the queue resumes after it (nothing is changed)."""
        stamp, queue, qstamp = self.stamp, self.queue, self.qstamp
        h = self.head
        # one pass over a window with room for a few stale touches (a line touched twice, as
        # the boundary line two adjacent tiles share, leaves one): a first pass over exactly
        # ``over`` touches would fail whenever one of them is stale
        k = over + (over >> 2) + 16
        while True:
            seg = queue[h:h + k]
            valid = (stamp[seg] == qstamp[h:h + k]).nonzero()[0]
            if valid.size >= over or h + k >= self.tail:
                break
            k *= 4
        last = int(valid[over - 1])
        if last == over - 1:            # no stale touch among them: the lines are a slice
            return seg[:over], int(qstamp[h + last]), h + over
        return seg[valid[:over]], int(qstamp[h + last]), h + last + 1

    def _evict(self, lines: np.ndarray, resume: int) -> int:
        """Drop ``lines`` (the least recent ones); returns how many of them were dirty."""
        self.stamp[lines] = 0
        d = self.dirty[lines]
        owed = int(_nnz(d))
        if owed:
            self.dirty[lines] = False
        self.head = resume
        self.used -= lines.size
        return owed

    # -- accesses --------------------------------------------------------------------------------
    def touch(self, idx: np.ndarray | slice, n: int, mark: bool) -> tuple[np.ndarray | None, int, int] | None:
        """Touch ``n`` distinct lines (indices ``idx``: an array or a slice, whose step may be
        more than one -- the rows of a strided tile --, in order; n <= capacity) when the walk's
        outcome follows without walking (module docstring): returns (which were resident -- None
        if all or none were --, how many were resident, dirty lines evicted), or None, having
        changed nothing."""
        stamp = self.stamp
        old = stamp[idx]
        nres = int(_nnz(old))
        # (old may be a view: taken before the touch; astype(bool) is old != 0 without the
        # comparison with a Python scalar, which costs twice as much)
        res = old.astype(bool) if 0 < nres < n else None
        over = self.used + n - nres - self.cap
        owed = 0
        if over > 0:
            front, last, resume = self._front(over)
            # a resident line of the access among those to evict (a stamp in 1..last; the
            # lines not resident have stamp 0): walk
            if nres and (int(_min(old)) <= last if res is None else int(_nnz(old <= last)) > n - nres):
                return None
            owed = self._evict(front, resume)
        t = self.tail
        if t + n > self.queue.size:
            self._room(n)
            t = self.tail
        ramp = self._ramp
        if ramp.size < n:
            ramp = self._ramp = np.arange(max(n, 2 * ramp.size), dtype=np.int64)
        stamps = self.qstamp[t:t + n]
        np.add(ramp[:n], self.clock + 1, out=stamps)
        self.clock += n
        stamp[idx] = stamps
        if type(idx) is not slice:
            self.queue[t:t + n] = idx
        elif idx.step is None or idx.step == 1:
            np.add(ramp[:n], idx.start, out=self.queue[t:t + n])
        elif n * idx.step <= RAMP_MAX:
            # the indices start, start + step, ...: a strided view of the ramp (grown to cover it)
            if ramp.size < n * idx.step:
                ramp = self._ramp = np.arange(max(n * idx.step, 2 * ramp.size), dtype=np.int64)
            np.add(ramp[:n * idx.step:idx.step], idx.start, out=self.queue[t:t + n])
        else:
            self.queue[t:t + n] = np.arange(idx.start, idx.start + n * idx.step, idx.step, dtype=np.int64)
        self.tail = t + n
        self.used += n - nres
        if mark:
            self.dirty[idx] = True
        return res, nres, owed

    def walk(self, runs: Iterable[tuple[int, int]], mark: bool) -> tuple[int, int]:
        """The line-by-line walk (the OrderedDict walk's steps, line for line): returns (bytes
        that were resident, bytes owed to HBM: c per dirty line evicted, and the bytes of a
        stored line this very run pushed out again). The caller covered the lines."""
        c, cap = self.chunk, self.cap
        stamp, dirty, base = self.stamp, self.dirty, self.base
        hit = 0
        owed = 0
        used, clock, head = self.used, self.clock, self.head
        for a, n in runs:
            if n <= 0:
                continue
            end = a + n
            first, last = a // c, (end - 1) // c
            for line in range(first, last + 1):
                i = line - base
                if stamp[i]:
                    hit += min(end, (line + 1) * c) - max(a, line * c)
                else:
                    used += 1
                clock += 1
                stamp[i] = clock
                t = self.tail
                if t >= self.queue.size:
                    self.head, self.used = head, used
                    self._room(1)
                    head, t = self.head, self.tail
                self.queue[t] = i
                self.qstamp[t] = clock
                self.tail = t + 1
                if used > cap:
                    queue, qstamp = self.queue, self.qstamp
                    while used > cap:
                        j = int(queue[head])
                        valid = stamp[j] == qstamp[head]
                        head += 1
                        if not valid:
                            continue            # stale: the line was touched again or dropped
                        stamp[j] = 0
                        used -= 1
                        if dirty[j]:
                            dirty[j] = False
                            owed += c
            if mark:
                for line in range(first, last + 1):
                    i = line - base
                    if stamp[i]:
                        dirty[i] = True
                    else:                       # pushed out by its own run: owed now
                        owed += min(end, (line + 1) * c) - max(a, line * c)
        self.used, self.clock, self.head = used, clock, head
        return hit, owed

    def invalidate(self, first: int, last: int) -> None:
        """Drop lines [first, last] (dirty or not)."""
        n = self.stamp.size
        lo, hi = max(first - self.base, 0), min(last - self.base + 1, n)
        if lo >= hi:
            return
        seg = self.stamp[lo:hi]
        self.used -= int(_nnz(seg))
        seg[:] = 0
        self.dirty[lo:hi] = False

    def order(self) -> list[int]:
        """Resident lines, least recent first."""
        res = np.flatnonzero(self.stamp)
        return (res[np.argsort(self.stamp[res], kind="stable")] + self.base).tolist()

    def dirty_lines(self) -> set[int]:
        return set((np.flatnonzero(self.dirty) + self.base).tolist())

    def copy(self) -> LineArrays:
        other = LineArrays(self.cap, self.chunk)
        other.base, other.head, other.tail, other.clock, other.used = \
            self.base, self.head, self.tail, self.clock, self.used
        other.stamp, other.dirty = self.stamp.copy(), self.dirty.copy()
        # the queue from its head only (the touches before it are gone)
        other.queue, other.qstamp = self.queue[self.head:self.tail].copy(), self.qstamp[self.head:self.tail].copy()
        other.head, other.tail = 0, self.tail - self.head
        other._ramp = self._ramp
        return other
