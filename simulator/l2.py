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

State: until a line weighing more than one line of capacity is shown to it (a sample), the cache
keeps its LRU state in numpy arrays indexed by line (simulator/l2_arrays.py), where an access of
distinct lines costs a few array operations (the arrays hold the pages of GM in use, wherever they
lie); then (or when the resident lines are scattered over more pages than the arrays hold) it
moves the state, in LRU order, to an OrderedDict walked line by line. Both
give the same hits, LRU order, dirty lines and write-backs (tests/simulator/test_l2_arrays.py).
"""
from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from itertools import chain, filterfalse, islice, repeat
from operator import length_hint
from typing import Iterable, Iterator, overload

import numpy as np

from opsim.simulator.l2_arrays import LineArrays

_HASH = np.uint64(0x9E3779B97F4A7C15)    # Fibonacci hashing of line indices


class StridedRuns(Sequence[tuple[int, int]]):
    """``rows`` runs of ``run`` bytes, ``stride`` bytes apart from address ``a0``: the rows of a
    strided transfer (a tile of a matrix), a sequence of (address, bytes) pairs.

    :meth:`L2Cache.access_runs` walks the lines of such rows without making the pairs: a cube
    tile load touches hundreds of rows of one line each, and the per-row bookkeeping was most of
    the L2 model's cost.
    """

    __slots__ = ("a0", "stride", "run", "rows")

    def __init__(self, a0: int, stride: int, run: int, rows: int) -> None:
        self.a0, self.stride, self.run, self.rows = a0, stride, run, rows

    def __iter__(self) -> Iterator[tuple[int, int]]:
        if self.stride:
            return zip(range(self.a0, self.a0 + self.stride * self.rows, self.stride), repeat(self.run))
        return repeat((self.a0, self.run), max(self.rows, 0))

    def __len__(self) -> int:
        return max(self.rows, 0)

    @overload
    def __getitem__(self, i: int) -> tuple[int, int]: ...

    @overload
    def __getitem__(self, i: slice) -> list[tuple[int, int]]: ...

    def __getitem__(self, i: int | slice) -> tuple[int, int] | list[tuple[int, int]]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        k = i + len(self) if i < 0 else i
        if not 0 <= k < len(self):
            raise IndexError(f"row {i} of {len(self)}")
        return (self.a0 + k * self.stride, self.run)


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
        # every resident line occupies exactly one line of capacity (no sample has left a
        # heavier one): then _used == len(_lru) and a new line evicts exactly one line
        self._uniform = True
        # every weight ever given is a whole number >= 1: capacity totals are then exact sums of
        # whole numbers, so _used == len(_lru) holds exactly when every resident line weighs one
        # (access_runs sets _uniform again then; a sample's heavier lines are evicted or re-weighed)
        self._whole = True
        # (first line, step, rows) of the last access when it was one-line rows walked in bulk
        # (_access_rows): its lines are then the most recent ones, in that order, until anything
        # else touches the cache (every other access, sample, invalidation or restore clears it)
        self._tail: tuple[int, int, int] | None = None
        self.pending_writeback = 0.0           # bytes of dirty lines evicted, not yet charged
        self.writeback_bytes = 0               # bytes written back to HBM so far (charged)
        # the state in arrays indexed by line (simulator/l2_arrays.py) while no sampled line was
        # ever shown to the cache (every line weighs one); None: in _lru/_dirty/_used (a sample
        # with a weight other than one, or resident lines over more pages than the arrays hold,
        # moved it there)
        self._arr: LineArrays | None = LineArrays(self.capacity_chunks, chunk)
        self._shapes: dict[tuple[int, int, int], np.ndarray] = {}   # _row_lines
        # the lines of the last access on the arrays, when LineArrays.touch took them all: they
        # are then the most recent lines, in that order, until anything else touches the cache
        # (every other access, invalidation or restore clears it), so reading them again moves
        # nothing -- all hits, the same cache (a panel of the FLCE read twice in a row)
        self._recent: tuple[int, int, int, int] | None = None
        self._parts: dict[tuple[int, int, int], np.ndarray] = {}    # _line_bytes

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
        hit = self.access_runs(((addr, nbytes),), write=write)
        if count and not write:
            self.count(hit, nbytes - hit)
        return hit

    def access_runs(self, runs: Iterable[tuple[int, int]], *, write: bool) -> int:
        """Touch each (address, bytes) run in turn; return the bytes that were resident (hits;
        0 for a write). The totals are not counted (the caller does, :meth:`count`).

        Lines are touched one by one in address order, run after run: a resident line moves to
        the most-recent end (re-weighed to one line of capacity if a sample left it heavier), a
        new line is inserted and the least-recently-used lines are evicted as soon as the cache
        is over capacity, so a line this very access pushed out misses when it is touched
        again. This loop is the whole cost of the L2 model for a transfer (a strided tile
        touches hundreds of rows of a line or two each; a streaming tile tens of new lines), so
        it is written for that: bound methods and the used-capacity total in locals, one dict
        lookup per line, the eviction of :meth:`_evict` inline. (Bulk
        ``OrderedDict.update`` of new lines was slower than this loop: it goes through the
        generic mapping protocol per key.) The rows of a strided tile, when every line weighs
        one, are walked in bulk (:meth:`_access_rows`, :meth:`_access_blocks`): C-level passes
        that provably leave the same cache, hits and write-backs as the line-by-line walk.
        """
        if self._arr is not None:
            if type(runs) is not list and type(runs) is not tuple and type(runs) is not StridedRuns:
                runs = list(runs)       # read once here: the walk below may need them again
            hit = self._arr_access(runs, write)
            if hit is not None:
                return hit
        c = self.chunk
        if not self._uniform and self._whole and self._used == len(self._lru):
            self._uniform = True        # the last heavier line a sample left is gone (see _whole)
        if type(runs) is StridedRuns and runs.run > 0 and runs.a0 % c + runs.run <= c \
                and runs.stride % c == 0:
            # every row lies in one line, and the rows' lines are equally spaced
            return self._access_rows(runs.a0 // c, runs.stride // c, runs.rows, runs.run, write)
        if type(runs) is StridedRuns and self._uniform and runs.run > 0 and runs.stride % c == 0:
            span = (runs.a0 % c + runs.run - 1) // c + 1        # lines per row (two or more here)
            if runs.stride >= span * c and 0 < runs.rows * span <= self.capacity_chunks:
                # rows of several lines that share none: the walk of _access_blocks
                self._tail = None
                return self._access_blocks(runs.a0, runs.stride, runs.run, runs.rows, span, write)
        self._tail = None
        return self._walk(runs, write)

    def _arr_access(self, runs: Iterable[tuple[int, int]], write: bool, hits: bool = False) -> int | None:
        """:meth:`access_runs` on the arrays (the state while every line weighs one): one run,
        the rows of a strided transfer, or runs whose lines ascend, touched in a few array
        operations when :meth:`LineArrays.touch` proves the walk's outcome, else walked line by
        line. None (nothing touched): the arrays had no room for the access's pages (the resident
        lines lie in too many others), and the state was moved to the OrderedDict for the caller's
        walk. A write returns 0 unless ``hits``."""
        arr = self._arr
        assert arr is not None
        c = self.chunk
        mark = write and self.write_back
        hits = hits or not write
        recent, self._recent = self._recent, None
        if (type(runs) is tuple or type(runs) is list) and len(runs) == 1:
            # one run (a DMA transfer of contiguous bytes): its lines are a slice of the arrays
            a, n = runs[0]
            if n <= 0:
                self._recent = recent           # nothing touched
                return 0
            end = a + n
            first, last = a // c, (end - 1) // c
            count = last - first + 1
            key = (first, 1, count, 1)          # the lines touched, as rows (below)
            if key == recent and not mark:
                self._recent = key
                return n if hits else 0
            i0 = arr.start(first, last)          # (-1: over two pages, or a page without slots)
            covered = i0 >= 0 or arr.cover(first, last)
            if covered and count <= arr.cap:
                got = arr.touch(slice(i0, i0 + count) if i0 >= 0 else arr.locate(first, count), count, mark)
                if got is not None:
                    self._recent = key
                    res, nres, owed = got
                    if owed:
                        self.pending_writeback += owed * c
                    if not hits:
                        return 0
                    if nres == count:
                        return n
                    missed = (count - nres) * c
                    if res is None or not res[0]:
                        missed -= a - first * c
                    if res is None or not res[-1]:
                        missed -= (last + 1) * c - end
                    return n - missed
            elif covered and not mark:
                # a run longer than the cache, nothing to mark dirty after it: its lines are
                # touched in the same order in pieces of a cache's worth (each one distinct
                # lines the arrays can take at once), the rest walked if a piece cannot be
                hit = 0
                for p0 in range(first, last + 1, arr.cap):
                    p1 = min(p0 + arr.cap - 1, last)
                    pa, pend = max(a, p0 * c), min(end, (p1 + 1) * c)
                    got = arr.touch(arr.locate(p0, p1 + 1 - p0), p1 + 1 - p0, False)
                    if got is None:
                        h, owed = arr.walk(((pa, end - pa),), False)
                        if owed:
                            self.pending_writeback += owed
                        return hit + h if hits else 0
                    res, nres, owed = got
                    if owed:
                        self.pending_writeback += owed * c
                    missed = (p1 + 1 - p0 - nres) * c
                    if missed:
                        if res is None or not res[0]:
                            missed -= pa - p0 * c
                        if res is None or not res[-1]:
                            missed -= (p1 + 1) * c - pend
                    hit += pend - pa - missed
                return hit if hits else 0
        elif type(runs) is StridedRuns:
            a0, stride, run, rows = runs.a0, runs.stride, runs.run, runs.rows
            if run <= 0 or rows <= 0:
                self._recent = recent           # nothing touched
                return 0
            off = a0 % c
            first = a0 // c
            span = (off + run - 1) // c + 1
            if stride % c == 0 and (rows == 1 or stride >= span * c) and rows * span <= arr.cap:
                step = stride // c if rows > 1 else span
                if step == span:                # contiguous lines: the key of one run (above)
                    key = (first, 1, rows * span, 1)
                else:
                    key = (first, step, span, rows)
                if key == recent and not mark:
                    self._recent = key
                    return rows * run if hits else 0
                end = first + step * (rows - 1) + span - 1     # the last line
                i0 = arr.start(first, end)
                if i0 < 0 and first >> arr.bits == end >> arr.bits and arr.cover(first, end):
                    i0 = arr.start(first, end)          # (one page, given its slots just now)
                idx: np.ndarray | slice | None = None
                if i0 >= 0:                             # one page: slots as the lines
                    if span == 1:                       # one line a row: a slice (strided or not)
                        idx = slice(i0, i0 + step * rows, step)
                    elif step == span:                  # the rows' lines are contiguous
                        idx = slice(i0, i0 + rows * span)
                    else:
                        idx = self._row_lines(step, span, rows) + i0
                else:                                   # over pages: the slots of each line
                    lines = first + (np.arange(0, step * rows, step, dtype=np.int64) if span == 1 else
                                     np.arange(rows * span, dtype=np.int64) if step == span else
                                     self._row_lines(step, span, rows))
                    idx = arr.cover_lines(lines, dense=step <= 1 << arr.bits)   # (None: no room)
                if idx is not None:
                    got = arr.touch(idx, rows * span, mark)
                    if got is not None:
                        self._recent = key
                        res, nres, owed = got
                        if owed:
                            self.pending_writeback += owed * c
                        if not hits or not nres:
                            return 0
                        if span == 1 or res is None:
                            return nres * run if span == 1 or nres < rows * span else rows * run
                        # line i of a row holds the row's bytes [i*c - off, (i+1)*c - off), clipped
                        return int(res.reshape(rows, span).sum(axis=0) @ self._line_bytes(span, off, run))
            runs = list(runs)
        else:
            runs = list(runs)
        if len(runs) > 1:
            # lines in ascending order across the runs (each run starts past the last one's
            # lines): distinct, touched in one pass with each line's bytes (a run may start in
            # the line the last one ended in: touched twice in a row, that line is resident at
            # its second touch, which moves nothing -- a hit of its bytes)
            prev = -1
            firsts: list[int] = []
            lasts: list[int] = []
            heads: list[int] = []
            tails: list[int] = []
            again = 0                   # bytes of such second touches
            ascending = True
            for a, n in runs:
                if n <= 0:
                    continue
                end = a + n
                first, last = a // c, (end - 1) // c
                if first == prev:
                    again += min(end, (first + 1) * c) - a
                    if last == first:
                        continue
                    a, first = (first + 1) * c, first + 1
                elif first < prev:
                    ascending = False
                    break
                prev = last
                firsts.append(first)
                lasts.append(last)
                heads.append(a - first * c)
                tails.append((last + 1) * c - end)
            if ascending and firsts:
                counts = np.array(lasts, dtype=np.int64) - firsts + 1
                total = int(counts.sum())
                if total <= arr.cap:
                    starts = np.cumsum(counts) - counts
                    lines = (np.arange(total, dtype=np.int64)
                             + np.repeat(np.array(firsts, dtype=np.int64) - starts, counts))
                    slots = arr.cover_lines(lines)
                    got = arr.touch(slots, total, mark) if slots is not None else None
                    if got is not None:
                        res, nres, owed = got
                        if owed:
                            self.pending_writeback += owed * c
                        if not hits:
                            return 0
                        part = np.full(total, c, dtype=np.int64)
                        np.subtract.at(part, starts, heads)
                        np.subtract.at(part, starts + counts - 1, tails)
                        return (int(part[res].sum()) if res is not None else int(part.sum()) if nres else 0) + again
        # the walk, line by line, over lines the arrays cover
        lo = min((a // c for a, n in runs if n > 0), default=None)
        if lo is None:
            self._recent = recent               # nothing touched
            return 0
        b = arr.bits
        pages = sorted({p for a, n in runs if n > 0 for p in range((a // c) >> b, ((a + n - 1) // c >> b) + 1)})
        if not arr.map_pages(pages):
            self._to_ordered()
            return None
        hit, owed = arr.walk(runs, mark)
        if owed:
            self.pending_writeback += owed
        return hit if hits else 0

    def _row_lines(self, step: int, span: int, rows: int) -> np.ndarray:
        """The line indices, relative to the first, of ``rows`` rows of ``span`` lines each,
        ``step`` lines apart, in touch order (kept: a tiled kernel moves tiles of a few shapes,
        and making them was several array operations per transfer)."""
        key = (step, span, rows)
        rel = self._shapes.get(key)
        if rel is None:
            if len(self._shapes) >= 64:
                self._shapes.clear()
            rel = self._shapes[key] = (np.arange(0, step * rows, step, dtype=np.int64)[:, None]
                                       + np.arange(span, dtype=np.int64)).ravel()
        return rel

    def _line_bytes(self, span: int, off: int, run: int) -> np.ndarray:
        """The bytes a row of ``run`` bytes starting ``off`` bytes into its first line holds in
        each of its ``span`` lines (kept, as :meth:`_row_lines`)."""
        key = (span, off, run)
        part = self._parts.get(key)
        if part is None:
            if len(self._parts) >= 64:
                self._parts.clear()
            c = self.chunk
            part = self._parts[key] = (np.minimum(np.arange(1, span + 1) * c, off + run)
                                       - np.maximum(np.arange(span) * c, off))
        return part

    def _to_ordered(self) -> None:
        """Move the state from the arrays to the OrderedDict walk's (for good)."""
        arr = self._arr
        if arr is None:
            return
        self._lru = OrderedDict.fromkeys(arr.order(), 1.0)
        self._dirty = arr.dirty_lines()
        self._used = float(arr.used)
        self._tail = None
        self._arr = None

    def lru_order(self) -> list[int]:
        """Resident lines, least recently used first (for tests and inspection)."""
        return self._arr.order() if self._arr is not None else list(self._lru)

    def dirty_lines(self) -> set[int]:
        """Resident lines written since they were filled (write-back)."""
        return self._arr.dirty_lines() if self._arr is not None else set(self._dirty)

    def used_lines(self) -> float:
        """Lines of capacity the resident lines occupy."""
        return float(self._arr.used) if self._arr is not None else self._used

    def _walk(self, runs: Iterable[tuple[int, int]], write: bool) -> int:
        """The line-by-line walk of :meth:`access_runs` (with its shortcuts for runs that
        stream into a uniform cache or fit in the room left)."""
        c = self.chunk
        lru = self._lru
        get = lru.get
        to_end = lru.move_to_end
        popfront = lru.popitem
        cap = self.capacity_chunks
        dirty = self._dirty            # empty unless the L2 is write-back
        mark = write and self.write_back
        used = self._used
        hit = 0
        for a, n in runs:
            if n <= 0:
                continue
            end = a + n
            first, last = a // c, (end - 1) // c
            if first == last and not mark:
                # a run inside one line (most rows of a strided tile): the loop below, unrolled
                old = get(first)
                if old is None:
                    lru[first] = 1.0
                    used += 1.0
                else:
                    to_end(first)
                    hit += n
                    if old != 1.0:
                        lru[first] = 1.0
                        used += 1.0 - old
                while used > cap and len(lru) > 1:      # as _evict, inline (a full cache
                    ch, w = popfront(False)             # evicts on every new line)
                    used -= w
                    if ch in dirty:
                        dirty.discard(ch)
                        self.pending_writeback += w * c
                continue
            run_a, run_first = a, first     # the walk below may start further in (below)
            if self._uniform and last - first < cap:
                # Every resident line weighs one (no sample): the resident lines the run starts
                # with are touched before anything is evicted; if the rest of the run is not
                # resident, each of its lines is a miss that, in a full cache, evicts the
                # least-recently-used line, which is never a line of this run (the run is shorter
                # than the cache). So the new lines are inserted, then as many old lines evicted
                # as the walk below would, in the same order (a streaming tile: one line shared
                # with the previous tile, the rest new).
                x = first
                while x <= last and x in lru:
                    to_end(x)
                    x += 1
                if x > last or lru.keys().isdisjoint(range(x, last + 1)):
                    for line in range(x, last + 1):
                        lru[line] = 1.0
                    used += last + 1 - x
                    if used > cap:
                        self._drop_lru(int(used) - cap)     # whole lines (uniform)
                        used = float(cap)
                    if mark:
                        dirty.update(range(first, last + 1))
                    if x > last:
                        hit += n
                    else:
                        missed = (last + 1 - x) * c - ((last + 1) * c - end)
                        if x == first:
                            missed -= a - first * c
                        hit += n - missed
                    continue
                if x > first:   # the resident lines before x are touched (hits): walk the rest
                    hit += x * c - a
                    a, n, first = x * c, end - x * c, x
            if used + (last - first + 1) <= cap:
                # Room for every line of the run: a touch adds at most one line of capacity, so
                # nothing is evicted while the run is walked and no eviction test is needed per
                # line (the usual case for a streaming tile until the cache fills). Capacity
                # totals are whole numbers of lines, so adding them up after the walk is exact.
                first_missed = first not in lru
                last_missed = last not in lru
                nmiss = 0
                for line in range(first, last + 1):
                    old = get(line)
                    if old is None:
                        lru[line] = 1.0
                        nmiss += 1
                    else:
                        to_end(line)
                        if old != 1.0:
                            lru[line] = 1.0
                            used += 1.0 - old
                used += nmiss
                if mark:
                    dirty.update(range(run_first, last + 1))    # all resident: none was evicted
                missed = nmiss * c
                if nmiss:
                    if first_missed:
                        missed -= a - first * c
                    if last_missed:
                        missed -= (last + 1) * c - end
                hit += n - missed
                continue
            # lines that were not resident: how many, the first and the last (their bytes are
            # whole lines except where the run starts or ends inside the first or last line)
            nmiss = 0
            lo = hi = -1
            for line in range(first, last + 1):
                old = get(line)
                if old is None:
                    lru[line] = 1.0
                    used += 1.0
                    if not nmiss:
                        lo = line
                    nmiss += 1
                    hi = line
                else:
                    to_end(line)
                    if old != 1.0:
                        lru[line] = 1.0
                        used += 1.0 - old
                while used > cap and len(lru) > 1:      # as _evict: a dirty line is owed to HBM
                    ch, w = popfront(False)
                    used -= w
                    if ch in dirty:
                        dirty.discard(ch)
                        self.pending_writeback += w * c
            if mark:
                # resident lines of the store turn dirty; a line this very run pushed out again
                # is owed to HBM at once
                for line in range(run_first, last + 1):
                    if line in lru:
                        dirty.add(line)
                    else:
                        self.pending_writeback += min(end, (line + 1) * c) - max(run_a, line * c)
            if nmiss:
                missed = nmiss * c
                if lo == first:
                    missed -= a - first * c
                if hi == last:
                    missed -= (last + 1) * c - end
                hit += n - missed
            else:
                hit += n
        self._used = used
        return 0 if write else hit

    def _drop_lru(self, over: int) -> None:
        """Evict the ``over`` least-recently-used lines, each weighing one line of capacity (the
        cache is uniform; the caller takes ``over`` off the used capacity); the bytes of dirty
        ones are owed to HBM (as :meth:`_evict`: whole lines, so the sum is exact in any order).
        The lines are listed first and then deleted: no (line, weight) pair per line."""
        lru = self._lru
        evicted = list(islice(lru, over))
        for line in evicted:
            del lru[line]
        dirty = self._dirty
        if dirty:
            owed = dirty.intersection(evicted)
            if owed:
                dirty.difference_update(owed)
                self.pending_writeback += len(owed) * self.chunk

    def _touch_distinct(self, rest: list[int], mark: bool) -> list[int] | None:
        """Touch ``rest``, distinct lines none of which this access touched yet, in order, in a
        uniform cache, when that provably needs no line-by-line walk; return the lines that were
        not resident (misses), or None, having changed nothing, when it does.

        The walk moves a resident line to the most-recent end, inserts a missing one and evicts
        the least-recently-used line while the cache is over capacity: ``over`` = the lines
        resident + the misses - the capacity evictions in all. The line evicted is always the
        least recent one not touched yet (a touched line is more recent than every untouched
        one). If the ``over`` least recent lines are not lines of ``rest``, no line of ``rest``
        is touched before they go, so they are the lines evicted, in that order; no line of
        ``rest`` is evicted, so every resident one is a hit. (The lines this access touched
        before ``rest`` are the most recent ones: the access holds at most as many lines as the
        cache, so ``over`` never reaches them.) The walk's cache is then: the missing lines
        inserted, all of ``rest`` moved to the most-recent end in order, the ``over`` lines
        evicted (:meth:`_drop_lru`) -- C-level passes instead of a Python step per line (a cube
        store whose rows share their first line with the previous tile's: half hits, half
        misses, in a full cache)."""
        lru = self._lru
        missing = list(filterfalse(lru.__contains__, rest))
        over = int(self._used) + len(missing) - self.capacity_chunks    # whole lines (uniform)
        if over > 0 and len(missing) < len(rest) and not set(islice(lru, over)).isdisjoint(rest):
            return None             # a line of rest would be evicted before its touch: walk
        for line in missing:
            lru[line] = 1.0
        deque(map(lru.move_to_end, rest), 0)
        self._used += len(missing)
        if over > 0:
            self._drop_lru(over)
            self._used -= over
        if mark:
            self._dirty.update(rest)
        return missing

    def _access_blocks(self, a0: int, stride: int, run: int, rows: int, span: int, write: bool) -> int:
        """:meth:`access_runs` of ``rows`` runs of ``run`` bytes, ``stride`` bytes apart (a whole
        number of lines), each over ``span`` lines and no two sharing a line, in a uniform cache
        that can hold all ``rows * span`` lines: the bulk walk of :meth:`_access_rows` (the
        resident lines before the first one that is not move to the most-recent end in one pass; if
        none after it is resident, the rest are misses inserted in order and the least-recently-
        used lines evicted, never lines of this access), else the walk of the rows from the one
        holding the first line that was not resident (its leading lines, just moved, are
        touched again: they are the most-recent lines in that order, so nothing changes)."""
        c = self.chunk
        lru = self._lru
        first = a0 // c
        step = stride // c
        starts = range(first, first + step * rows, step)
        ends = range(first + span, first + span + step * rows, step)
        mark = write and self.write_back
        try:
            deque(map(lru.move_to_end, chain.from_iterable(map(range, starts, ends))), 0)
        except KeyError as e:           # the first line that was not resident (the ones before moved)
            miss: int = e.args[0]
        else:
            if mark:
                self._dirty.update(chain.from_iterable(map(range, starts, ends)))
            return 0 if write else rows * run
        r, i = divmod(miss - first, step)
        rest = slice(r + 1, rows)
        if lru.keys().isdisjoint(chain(range(miss + 1, starts[r] + span),
                                       chain.from_iterable(map(range, starts[rest], ends[rest])))):
            fresh = (rows - r) * span - i
            over = int(self._used) + fresh - self.capacity_chunks     # _used == len(lru): whole lines
            if over > 0:
                self._drop_lru(over)
                self._used -= over
            for line in chain(range(miss, starts[r] + span), chain.from_iterable(map(range, starts[rest], ends[rest]))):
                lru[line] = 1.0
            self._used += fresh
            if mark:
                self._dirty.update(chain.from_iterable(map(range, starts, ends)))
            # the hits: the whole rows before row r, and row r's lines before line i (the first
            # starts a0 % c bytes into its line)
            return 0 if write else r * run + (i * c - a0 % c if i else 0)
        missing = self._touch_distinct(
            list(chain(range(miss, starts[r] + span), chain.from_iterable(map(range, starts[rest], ends[rest])))),
            False)
        if missing is not None:
            if mark:
                self._dirty.update(chain.from_iterable(map(range, starts, ends)))
            if write:
                return 0
            # the hits: every byte but those of the missed lines (line i of a row holds the
            # row's bytes [i * c - a0 % c, (i + 1) * c - a0 % c), clipped to the row)
            off = a0 % c
            missed = 0
            for line in missing:
                i = (line - first) % step
                missed += min((i + 1) * c, off + run) - max(i * c, off)
            return rows * run - missed
        if mark and r:
            self._dirty.update(chain.from_iterable(map(range, starts[:r], ends[:r])))
        hit = self._walk([(a0 + k * stride, run) for k in range(r, rows)], write)
        return 0 if write else r * run + hit

    def _access_rows(self, first: int, step: int, count: int, run: int, write: bool) -> int:
        """:meth:`access_runs` of ``count`` rows of ``run`` bytes that each lie in one line, the
        lines ``first + k * step``: the same steps per line as the general loop (touch, evict,
        mark), with no per-row address arithmetic.

        With every line weighing one, distinct lines (``step`` != 0) and no more rows than the
        cache holds, the walk is done in bulk, which gives the same cache: the leading resident
        lines move to the most-recent end in one C-level pass (a panel read again: usually all of
        them); if none of the rest is resident, those are all misses, inserted in order, and
        each evicts the least-recently-used line, which is never a line of this access (it has
        at most as many lines as the cache, so the lines it did not touch are evicted first);
        the lines evicted are then the ``over`` least recent ones, in order. Otherwise the walk
        goes on line by line from the first line that was not resident."""
        lru = self._lru
        get = lru.get
        to_end = lru.move_to_end
        popfront = lru.popitem
        cap = self.capacity_chunks
        c = self.chunk
        dirty = self._dirty
        mark = write and self.write_back
        used = self._used
        misses = 0
        lines: Iterable[int]
        tail, self._tail = self._tail, None
        if step and self._uniform and 0 < count <= cap:
            rows = range(first, first + step * count, step)
            key = (first, step, count)
            if key == tail:
                # the same rows as the last access (a panel read again at once): they are the
                # most recent lines already, in this order, so touching them moves nothing
                self._tail = key
                if mark:
                    dirty.update(rows)
                return 0 if write else count * run
            it = iter(rows)
            try:
                deque(map(to_end, it), 0)       # every line resident: all hits, moved in order
            except KeyError:                    # rows[j] is not resident; those before it moved
                j = count - length_hint(it) - 1
            else:
                self._tail = key
                if mark:
                    dirty.update(rows)
                return 0 if write else count * run
            if mark and j:
                dirty.update(rows[:j])
            rest = rows[j:]
            if lru.keys().isdisjoint(rest[1:]):
                over = int(used) + len(rest) - cap          # used == len(lru): whole lines
                if over > 0:
                    self._drop_lru(over)
                    used -= over
                for line in rest:
                    lru[line] = 1.0
                self._used = used + len(rest)
                if mark:
                    dirty.update(rest)
                self._tail = key                # moved, then inserted: the newest lines, in order
                return 0 if write else j * run
            missing = self._touch_distinct(list(rest), mark)
            if missing is not None:
                self._tail = key                # all moved to the most-recent end, in order
                return 0 if write else (count - len(missing)) * run
            lines = rest
        else:
            lines = range(first, first + step * count, step) if step else repeat(first, max(count, 0))
        for line in lines:
            old = get(line)
            if old is None:
                lru[line] = 1.0
                used += 1.0
                misses += 1
            else:
                to_end(line)
                if old != 1.0:
                    lru[line] = 1.0
                    used += 1.0 - old
            while used > cap and len(lru) > 1:          # as _evict
                ch, w = popfront(False)
                used -= w
                if ch in dirty:
                    dirty.discard(ch)
                    self.pending_writeback += w * c
            if mark:
                if line in lru:
                    dirty.add(line)
                else:                                   # pushed out by its own touch: owed now
                    self.pending_writeback += run
        self._used = used
        return 0 if write else (max(count, 0) - misses) * run

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
        if self._arr is not None:
            if float(weight) == 1.0:
                c = self.chunk
                lines = list(lines)     # read once here: the walk below may need them again
                hit = self._arr_access([(int(ch) * c, c) for ch in lines], write, hits=True)
                if hit is not None:
                    return hit // c
            else:
                self._to_ordered()
        lru = self._lru
        cap = self.capacity_chunks
        self._tail = None
        w = float(weight)
        if w != 1.0:
            self._uniform = False
            if not (w >= 1.0 and w.is_integer()):
                self._whole = False
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
        if self._arr is not None:
            if nbytes > 0:
                self._recent = None
                self._arr.invalidate(addr // self.chunk, (addr + nbytes - 1) // self.chunk)
            return
        if nbytes <= 0 or not self._lru:
            return
        self._tail = None
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
        if self._arr is not None:
            return (self._arr.copy(), self.pending_writeback, self.hit_bytes, self.miss_bytes, self.writeback_bytes)
        return (OrderedDict(self._lru), self._used, set(self._dirty), self.pending_writeback, self._uniform,
                self.hit_bytes, self.miss_bytes, self.writeback_bytes)

    def restore_state(self, state: tuple) -> None:
        """Put back a state taken by :meth:`save_state`."""
        self._tail = None
        self._recent = None
        if isinstance(state[0], LineArrays):
            arr, self.pending_writeback, self.hit_bytes, self.miss_bytes, self.writeback_bytes = state
            self._arr = arr.copy()
            self._lru, self._used, self._dirty, self._uniform = OrderedDict(), 0.0, set(), True
            return
        self._arr = None
        lru, used, dirty, pending, self._uniform, hit, miss, wb = state
        self._lru = OrderedDict(lru)
        self._used = used
        self._dirty = set(dirty)
        self.pending_writeback = pending
        self.hit_bytes, self.miss_bytes, self.writeback_bytes = hit, miss, wb

    @property
    def hit_rate(self) -> float:
        total = self.hit_bytes + self.miss_bytes
        return self.hit_bytes / total if total else 0.0
