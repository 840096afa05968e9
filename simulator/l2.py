"""The Ascend L2 as an LRU cache over fixed-size chunks of GM.

Reads of resident chunks are hits (served by the L2 link at the L2 rate); the rest are misses
(served by HBM) and fill the cache. Writes allocate, so a later read of the data hits. With the
write-through policy a store costs HBM bandwidth when it is made. With write-back (``[l2]
write_policy`` of the device file) a store is taken by the L2 and marks its lines dirty; a
dirty line costs HBM bandwidth when an access (a read's fill or a store) evicts it: the cache
adds its bytes to :attr:`L2Cache.pending_writeback`, which the device takes
(:meth:`L2Cache.take_writeback`) and charges on the HBM link as part of the evicting transfer.
Dirty lines still resident when a run ends are not written back (they are in the L2). Host
copies (aclrtMemcpy) do not pass through the AI-core L2; a host write or free drops the lines
it covers, dirty or not. Chunk size and policy are in the device file.

Set sampling (timing-only launches with ``l2_sample`` = P, simulator/device.py): a transfer
shows the model only the lines it touches whose hashed line index is a multiple of P
(:meth:`L2Cache.sample`), each standing for P lines. Such an entry occupies P lines of the
capacity, so the sample fills the cache as the whole traffic would, and a reuse is a hit only
if the bytes touched since would have left it resident (an unweighted sample would make the
cache look P times larger). The sample is a function of the address alone, so data written
through one view and read through another (rows vs. a panel of an NZ matrix) meets the same
lines. The hash keeps power-of-two strides from aliasing with P. The most recent access
decides what an entry stands for.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Iterable

import numpy as np

_HASH = np.uint64(0x9E3779B97F4A7C15)    # Fibonacci hashing of line indices
_INLINE_LINES = 16                        # runs of fewer lines: access_runs walks them inline


class L2Cache:
    def __init__(self, size: int, chunk: int, write_back: bool = False) -> None:
        if chunk <= 0 or size < chunk:
            raise ValueError(f"L2 size {size} and chunk {chunk} must satisfy 0 < chunk <= size")
        self.chunk = chunk
        self.capacity_chunks = size // chunk
        self._lru: OrderedDict[int, float] = OrderedDict()   # chunk -> lines of capacity it holds
        self._used = 0.0
        self.hit_bytes = 0
        self.miss_bytes = 0
        self.write_back = bool(write_back)
        self._dirty: set[int] = set()          # resident lines written since they were filled
        self.pending_writeback = 0.0           # bytes of dirty lines evicted, not yet charged
        self.writeback_bytes = 0               # bytes written back to HBM so far (charged)

    def _evict(self) -> None:
        """Drop least-recently-used lines until the cache fits; a dirty line's bytes (lines of
        capacity it stood for x chunk) are owed to HBM."""
        lru, cap = self._lru, self.capacity_chunks
        while self._used > cap and len(lru) > 1:
            ch, w = lru.popitem(last=False)
            self._used -= w
            if ch in self._dirty:
                self._dirty.discard(ch)
                self.pending_writeback += w * self.chunk

    def take_writeback(self) -> int:
        """Bytes of dirty lines evicted since the last call (whole bytes), now to be charged."""
        nbytes = int(round(self.pending_writeback))
        self.pending_writeback -= nbytes
        self.writeback_bytes += nbytes
        return nbytes

    def access(self, addr: int, nbytes: int, *, write: bool, count: bool = True) -> int:
        """Touch [addr, addr+nbytes); return how many of the bytes were resident (hits). Each
        touched line occupies one line of capacity (a line a sample left weighing more is
        re-weighed). ``count=False`` leaves the hit/miss totals to the caller (:meth:`count`)."""
        if nbytes <= 0:
            return 0
        c = self.chunk
        first, last = addr // c, (addr + nbytes - 1) // c
        lru = self._lru
        cap = self.capacity_chunks
        w = 1.0
        hit = 0
        # Lines are touched in address order. The resident ones are found with one set
        # intersection and the runs of new lines between them are inserted in bulk, so a
        # streaming access costs a few C-level calls instead of a Python step per line.
        present = sorted(lru.keys() & set(range(first, last + 1))) if lru else ()
        run_start = first
        for ch in (*present, last + 1):
            if run_start < ch:                               # new lines [run_start, ch)
                lru.update(dict.fromkeys(range(run_start, ch), w))
                self._used += w * (ch - run_start)
                if self._used > cap:
                    self._evict()
            if ch > last:
                break
            old = lru.get(ch)
            if old is None:                                  # evicted by this very access
                lru[ch] = w
                self._used += w
            else:
                lru.move_to_end(ch)
                hit += min(addr + nbytes, (ch + 1) * c) - max(addr, ch * c)
                if old != w:
                    lru[ch] = w
                    self._used += w - old
            if self._used > cap:
                self._evict()
            run_start = ch + 1
        if write:
            if self.write_back:
                # the lines of this store that are still resident (all but those a store larger
                # than the cache pushed out again, whose bytes are owed to HBM at once)
                for ch in range(first, last + 1):
                    if ch in lru:
                        self._dirty.add(ch)
                    else:
                        self.pending_writeback += min(addr + nbytes, (ch + 1) * c) - max(addr, ch * c)
            return 0
        if count:
            self.count(hit, nbytes - hit)
        return hit

    def access_runs(self, runs: Iterable[tuple[int, int]], *, write: bool) -> int:
        """:meth:`access` of each (address, bytes) run in turn, hits summed, totals not counted.

        The same LRU updates in the same order as one ``access(a, n, write=write, count=False)``
        per run. A short run (the rows of a strided tile: often hundreds per transfer, each a
        line or two) is walked line by line inline, which is what :meth:`access` amounts to
        (weights are whole numbers, so the order of the additions does not matter); that
        per-run call is where a strided transfer spent its time. Long runs go to
        :meth:`access`, which inserts runs of new lines in bulk.
        """
        c = self.chunk
        lru = self._lru
        cap = self.capacity_chunks
        dirty = self._dirty            # empty unless the L2 is write-back
        mark = write and self.write_back
        hit = 0
        for a, n in runs:
            if n <= 0:
                continue
            first, last = a // c, (a + n - 1) // c
            if last - first >= _INLINE_LINES:
                hit += self.access(a, n, write=write, count=False)
                continue
            end = a + n
            missed = 0          # the run's bytes in lines that were not resident (usually few)
            for line in range(first, last + 1):
                old = lru.get(line)
                if old is None:
                    lru[line] = 1.0
                    self._used += 1.0
                    missed += min(end, (line + 1) * c) - max(a, line * c)
                else:
                    lru.move_to_end(line)
                    if old != 1.0:
                        lru[line] = 1.0
                        self._used += 1.0 - old
                while self._used > cap and len(lru) > 1:
                    ch, w = lru.popitem(last=False)   # as _evict: a dirty line is owed to HBM
                    self._used -= w
                    if ch in dirty:
                        dirty.discard(ch)
                        self.pending_writeback += w * c
            if mark:
                # as access(): resident lines of the store turn dirty; a line this very run
                # pushed out again is owed to HBM at once
                for line in range(first, last + 1):
                    if line in lru:
                        dirty.add(line)
                    else:
                        self.pending_writeback += min(end, (line + 1) * c) - max(a, line * c)
            hit += n - missed
        return 0 if write else hit

    def sample(self, geometry: tuple[int, int, int, int], period: int) -> np.ndarray:
        """Indices (ascending) of the sampled lines among those a transfer of equally spaced
        runs ``geometry`` = (first address, stride, bytes per run, runs) touches: those whose
        hashed index is a multiple of ``period``. Empty if it touches none."""
        a0, stride, run, count = geometry
        c = self.chunk
        if count <= 0 or run <= 0:
            return np.empty(0, dtype=np.int64)
        starts = a0 + stride * np.arange(count, dtype=np.int64)
        first = starts // c
        n = (starts + run - 1) // c - first + 1
        offsets = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
        lines = np.repeat(first, n) + offsets
        keep = lines[((lines.astype(np.uint64) * _HASH) >> np.uint64(40)) % np.uint64(period) == 0]
        # runs closer than a line share their boundary lines: count each once (the sample is small)
        return np.unique(keep) if count > 1 and stride - run < c else keep

    def access_lines(self, lines: Iterable[int], *, weight: float, write: bool = False) -> int:
        """Touch whole lines (a sample, each occupying ``weight`` lines of capacity); return
        how many were resident. The caller counts the bytes (:meth:`count`). ``write`` with
        write-back marks the lines dirty."""
        lru = self._lru
        cap = self.capacity_chunks
        w = float(weight)
        hit = 0
        mark = write and self.write_back
        for ch in lines:
            old = lru.get(ch)
            if mark:
                self._dirty.add(ch)
            if old is None:
                lru[ch] = w
                self._used += w
                if self._used > cap:
                    self._evict()
                    if mark and ch not in lru:          # pushed out at once: owed now
                        self._dirty.discard(ch)
                        self.pending_writeback += w * self.chunk
            else:
                hit += 1
                lru.move_to_end(ch)
                if old != w:
                    lru[ch] = w
                    self._used += w - old
        return hit

    def count(self, hit: int, miss: int) -> None:
        """Add a read's hit and miss bytes to the totals behind :attr:`hit_rate`."""
        self.hit_bytes += hit
        self.miss_bytes += miss

    def invalidate(self, addr: int, nbytes: int) -> None:
        """Drop chunks of [addr, addr+nbytes) (host writes and frees make cached copies stale)."""
        if nbytes <= 0 or not self._lru:
            return
        c = self.chunk
        first, last = addr // c, (addr + nbytes - 1) // c
        # walk whichever is smaller: the range's lines or the resident lines
        lines = range(first, last + 1) if last - first < len(self._lru) else \
            [ch for ch in self._lru if first <= ch <= last]
        for ch in lines:
            self._used -= self._lru.pop(ch, 0.0)
            self._dirty.discard(ch)

    def save_state(self) -> tuple:
        """A copy of the cache's state (lines in LRU order, dirty lines, counters), for
        :meth:`restore_state` (the fast-forward tries accesses ahead and may take them back)."""
        return (OrderedDict(self._lru), self._used, set(self._dirty), self.pending_writeback,
                self.hit_bytes, self.miss_bytes, self.writeback_bytes)

    def restore_state(self, state: tuple) -> None:
        """Put back a state taken by :meth:`save_state`."""
        lru, used, dirty, pending, hit, miss, wb = state
        self._lru = OrderedDict(lru)
        self._used = used
        self._dirty = set(dirty)
        self.pending_writeback = pending
        self.hit_bytes, self.miss_bytes, self.writeback_bytes = hit, miss, wb

    @property
    def hit_rate(self) -> float:
        total = self.hit_bytes + self.miss_bytes
        return self.hit_bytes / total if total else 0.0
