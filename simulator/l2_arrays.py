"""The L2 model's LRU state while every resident line weighs one line of capacity (no sampled
line was ever shown to the cache), in numpy arrays indexed by line: the same cache as the
OrderedDict walk of :class:`opsim.simulator.l2.L2Cache`, at a fraction of the cost per line.

Recency is a stamp: every touch gives its line the next number, so the least-recently-used line
is the resident line with the smallest stamp. ``stamp[i]`` holds it (0: not resident),
``dirty[i]`` whether the line was written since it was filled (write-back), where ``i`` is the
line's slot (below). The eviction order is a queue of (slot, stamp) pairs appended at every
touch; a pair whose stamp is no longer its slot's is stale (the line was touched again, evicted
or invalidated) and is skipped, so the first valid pairs are the least-recently-used lines, in
order (a lazily deleted LRU list).

Slots come in pages: the lines of GM are split into pages of ``2^page_bits`` lines (4,096 by
default: 2 MiB of GM in 512 B lines), and a page of GM that an access touches is given a page of
slots (``pmap``: GM page -> first slot). So the arrays hold only the pages in use, wherever they
lie: four tensors of 4 GiB each, streamed by 48 cores, need about as many pages as the cache
holds lines, not slots for 16 GiB. When every page of slots is taken, the pages holding no
resident line are given back (a page of slots is reused only then, and as stamps only grow, a
stale queue pair can never match the slot's new stamps). The arrays hold at most
:func:`span_limit` lines; an access whose pages would need more (the resident lines scattered
over more pages than that) hands the state to the OrderedDict walk.

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

# the most lines the arrays hold: 8 times the cache's lines, at least 2^20 lines and at most
# 2^24 -- 9 bytes of state per line, 28 MiB for a 192 MiB L2 (the fast-forward's save_state
# copies them whole). Resident lines scattered over more pages than that hand the state to the
# OrderedDict walk, whose memory is the resident lines only.
MAX_SPAN = 1 << 24
MIN_SPAN = 1 << 20
SPAN_PER_LINE = 8
# lines per page of slots: 2^PAGE_BITS (a DMA transfer of a tile lies within one page but for
# about one in a hundred; those take an index array instead of a slice)
PAGE_BITS = 12


# the longest ramp (0, 1, 2, ...) a cache keeps for the indices of strided touches (512 KiB)
RAMP_MAX = 1 << 16


def span_limit(capacity: int) -> int:
    """The most lines the arrays of a cache of ``capacity`` lines hold."""
    return min(MAX_SPAN, max(MIN_SPAN, SPAN_PER_LINE * capacity))

try:        # the C function (numpy.count_nonzero is a Python wrapper around it: 4x the call)
    from numpy._core.multiarray import count_nonzero as _count
except ImportError:         # numpy < 2
    _count = np.count_nonzero
_nnz = cast(Callable[[np.ndarray], np.integer], _count)   # a numpy integer: int() it
_min = np.minimum.reduce        # ndarray.min() without its Python wrapper (half the cost)


class LineArrays:
    """LRU state of a uniform L2 (every line one line of capacity), in slots given by page."""

    def __init__(self, capacity: int, chunk: int, page_bits: int = PAGE_BITS,
                 max_lines: int | None = None) -> None:
        self.cap = capacity
        self.chunk = chunk
        self.bits = page_bits
        self.mask = (1 << page_bits) - 1
        # GM page -> its first slot (page number << bits); slot page -> GM page (-1: free)
        self.pmap: dict[int, int] = {}
        self.vpage = np.zeros(0, dtype=np.int64)
        self.free: list[int] = []                       # free slot pages (the last taken first)
        limit = span_limit(capacity) if max_lines is None else max_lines
        self.max_pages = -(-limit >> page_bits) + 2     # (+2: any span of the limit's lines fits)
        self.stamp = np.zeros(0, dtype=np.int64)        # last touch of each slot's line (0: none)
        self.dirty = np.zeros(0, dtype=bool)
        self.queue = np.zeros(0, dtype=np.int64)        # slots in touch order (with stale ones)
        self.qstamp = np.zeros(0, dtype=np.int64)       # the stamp each queued touch gave
        self.head = 0                                   # queue[head:tail] may hold valid touches
        self.tail = 0
        self.clock = 0                                  # the last stamp given
        self.used = 0                                   # resident lines
        self._ramp = np.arange(1024, dtype=np.int64)     # 0, 1, 2, ... (stamps and indices from it)

    # -- slots -----------------------------------------------------------------------------------
    def cover(self, lo: int, hi: int) -> bool:
        """Give slots to every line of [lo, hi]; False if the arrays would then hold more than
        their limit (nothing touched: the caller hands the state to the OrderedDict walk)."""
        b = self.bits
        p0, p1 = lo >> b, hi >> b
        pmap = self.pmap
        if p0 == p1:
            return p0 in pmap or self.map_pages((p0,))
        return self.map_pages(range(p0, p1 + 1))

    def cover_lines(self, lines: np.ndarray, dense: bool = False) -> np.ndarray | None:
        """Give slots to an ascending array of lines (the rows of a strided tile, runs far
        apart) and return their slots; None if the arrays have no room (as :meth:`cover`).
        ``dense``: no page between the first line's and the last's is skipped (rows at most a
        page apart), so the pages are that range, found without sorting."""
        b = self.bits
        p0, p1 = int(lines[0]) >> b, int(lines[-1]) >> b
        inv = None
        if dense or p1 - p0 <= 1:
            pages: list[int] | range = range(p0, p1 + 1)
        else:
            uniq, inv = np.unique(lines >> b, return_inverse=True)
            pages = uniq.tolist()
        if not self.map_pages(pages):
            return None
        pmap = self.pmap
        if p0 == p1:
            return lines + (pmap[p0] - (p0 << b))
        # a line's slot: the line shifted by its page's
        shift = np.array([pmap[p] - (p << b) for p in pages], dtype=np.int64)
        return lines + (shift[(lines >> b) - p0] if inv is None else shift[inv])

    def map_pages(self, pages: Iterable[int]) -> bool:
        """Give a page of slots to each GM page of ``pages`` (distinct) that has none."""
        pmap = self.pmap
        pages = list(pages)
        need = [p for p in pages if p not in pmap]
        if not need:
            return True
        if len(need) > len(self.free) and not self._make_room(len(need), pages):
            return False
        b = self.bits
        free, vpage = self.free, self.vpage
        for p in need:
            s = free.pop()
            pmap[p] = s << b
            vpage[s] = p
        return True

    def _make_room(self, n: int, wanted: list[int]) -> bool:
        """At least ``n`` free slot pages: more pages while under the limit, else the pages
        that hold no resident line given back (none of ``wanted``: the access's GM pages)."""
        have = self.vpage.size
        if have < self.max_pages:
            grow = min(self.max_pages, max(2 * have, have + n - len(self.free), 16))
            size = grow << self.bits
            stamp = np.zeros(size, dtype=np.int64)
            dirty = np.zeros(size, dtype=bool)
            stamp[:self.stamp.size] = self.stamp
            dirty[:self.dirty.size] = self.dirty
            vpage = np.full(grow, -1, dtype=np.int64)
            vpage[:have] = self.vpage
            self.stamp, self.dirty, self.vpage = stamp, dirty, vpage
            # (the new pages are taken in ascending order: ``free`` is popped from its end)
            self.free = list(range(grow - 1, have - 1, -1)) + self.free
            if len(self.free) >= n:
                return True
        live = self.stamp.reshape(-1, 1 << self.bits).any(axis=1)
        keep = set(wanted)
        pmap, vpage, free = self.pmap, self.vpage, self.free
        for s in np.flatnonzero(~live & (vpage >= 0)).tolist():
            p = int(vpage[s])
            if p not in keep:
                del pmap[p]
                vpage[s] = -1
                free.append(s)
        return len(free) >= n

    def locate(self, first: int, count: int) -> slice | np.ndarray:
        """The slots of lines [first, first + count) (covered): a slice within one page."""
        b = self.bits
        if (first + count - 1) >> b == first >> b:
            i0 = self.pmap[first >> b] + (first & self.mask)
            return slice(i0, i0 + count)
        idx = self.cover_lines(np.arange(first, first + count, dtype=np.int64), dense=True)
        assert idx is not None          # (covered: no page to map)
        return idx

    def start(self, first: int, last: int) -> int:
        """The slot of line ``first`` when lines [first, last] lie in one page that has slots
        (their slots are then a slice from it); else -1."""
        b = self.bits
        if last >> b != first >> b:
            return -1
        s = self.pmap.get(first >> b)
        return -1 if s is None else s + (first & self.mask)

    def lines_of(self, slots: np.ndarray) -> np.ndarray:
        """The GM lines of an array of slots that hold lines."""
        b = self.bits
        return (self.vpage[slots >> b] << b) + (slots & self.mask)

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
        stamp, dirty = self.stamp, self.dirty
        pmap, b, mask = self.pmap, self.bits, self.mask
        hit = 0
        owed = 0
        used, clock, head = self.used, self.clock, self.head
        for a, n in runs:
            if n <= 0:
                continue
            end = a + n
            first, last = a // c, (end - 1) // c
            for line in range(first, last + 1):
                i = pmap[line >> b] + (line & mask)
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
                    i = pmap[line >> b] + (line & mask)
                    if stamp[i]:
                        dirty[i] = True
                    else:                       # pushed out by its own run: owed now
                        owed += min(end, (line + 1) * c) - max(a, line * c)
        self.used, self.clock, self.head = used, clock, head
        return hit, owed

    def invalidate(self, first: int, last: int) -> None:
        """Drop lines [first, last] (dirty or not)."""
        b = self.bits
        p0, p1 = first >> b, last >> b
        pmap = self.pmap
        # the pages with slots among the range's (whichever is fewer to look at)
        pages = [p for p in range(p0, p1 + 1) if p in pmap] if p1 - p0 < len(pmap) else \
            [p for p in pmap if p0 <= p <= p1]
        for p in pages:
            s = pmap[p]
            lo = s + (first - (p << b) if p == p0 else 0)
            hi = s + (last - (p << b) + 1 if p == p1 else 1 << b)
            seg = self.stamp[lo:hi]
            self.used -= int(_nnz(seg))
            seg[:] = 0
            self.dirty[lo:hi] = False

    def order(self) -> list[int]:
        """Resident lines, least recent first."""
        res = np.flatnonzero(self.stamp)
        return self.lines_of(res[np.argsort(self.stamp[res], kind="stable")]).tolist()

    def dirty_lines(self) -> set[int]:
        return set(self.lines_of(np.flatnonzero(self.dirty)).tolist())

    def copy(self) -> LineArrays:
        other = LineArrays(self.cap, self.chunk, self.bits)
        other.max_pages = self.max_pages
        other.pmap, other.vpage, other.free = dict(self.pmap), self.vpage.copy(), list(self.free)
        other.head, other.tail, other.clock, other.used = self.head, self.tail, self.clock, self.used
        other.stamp, other.dirty = self.stamp.copy(), self.dirty.copy()
        # the queue from its head only (the touches before it are gone)
        other.queue, other.qstamp = self.queue[self.head:self.tail].copy(), self.qstamp[self.head:self.tail].copy()
        other.head, other.tail = 0, self.tail - self.head
        other._ramp = self._ramp
        return other
