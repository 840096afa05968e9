"""The L2 state in arrays (simulator/l2_arrays.py) against the OrderedDict walk it replaces while
every line weighs one: the same hits, LRU order, dirty lines and write-backs for any sequence of
accesses, stores, invalidations, saved and restored states and samples."""
from __future__ import annotations

import numpy as np
import pytest

from opsim.simulator.l2 import L2Cache, StridedRuns
from opsim.simulator.l2_arrays import PAGE_BITS, LineArrays

LINE = 512
BASE = 0x124000000000            # a GM address like the device's: far from 0


def _pair(lines: int, write_back: bool, page_bits: int = PAGE_BITS,
          max_lines: int | None = None) -> tuple[L2Cache, L2Cache]:
    """A cache on the arrays (pages of 2^page_bits lines, at most ``max_lines`` of them) and
    one moved to the OrderedDict walk before any access."""
    arrays, ordered = L2Cache(lines * LINE, LINE, write_back), L2Cache(lines * LINE, LINE, write_back)
    arrays._arr = LineArrays(lines, LINE, page_bits, max_lines)
    ordered._to_ordered()
    assert arrays._arr is not None and ordered._arr is None
    return arrays, ordered


def _same(a: L2Cache, b: L2Cache) -> None:
    assert a.lru_order() == b.lru_order()
    assert a.dirty_lines() == b.dirty_lines()
    assert a.used_lines() == b.used_lines()
    assert a.pending_writeback == b.pending_writeback and type(a.pending_writeback) is float
    assert type(a.used_lines()) is float
    assert (a.hit_bytes, a.miss_bytes, a.writeback_bytes) == (b.hit_bytes, b.miss_bytes, b.writeback_bytes)


def _random_runs(rng: np.random.Generator, span: int):
    """One access: a run, equally spaced rows (one line, several, sharing lines, backwards),
    or a list of runs (ascending, touching, overlapping, empty)."""
    kind = int(rng.integers(6))
    a = BASE + int(rng.integers(0, span * LINE))
    if kind == 0:
        return ((a, int(rng.integers(0, 12 * LINE))),)
    if kind == 1:
        off = int(rng.integers(0, LINE))        # rows inside one line each
        return StridedRuns(a - a % LINE + off, int(rng.integers(1, 8)) * LINE, int(rng.integers(1, LINE - off + 1)),
                           int(rng.integers(0, 20)))
    if kind == 2:
        k = int(rng.integers(1, 4))
        return StridedRuns(a - a % LINE + int(rng.integers(0, LINE)), int(rng.integers(k, 3 * k + 1)) * LINE,
                           int(rng.integers(1, k * LINE)), int(rng.integers(1, 12)))
    if kind == 3:
        return StridedRuns(a, int(rng.choice([0, 100, -2 * LINE, 700])), int(rng.integers(1, 900)),
                           int(rng.integers(1, 10)))
    if kind == 4:       # ascending runs, some starting in the line the last one ended in
        runs, x = [], a
        for _ in range(int(rng.integers(2, 6))):
            x += int(rng.integers(0, 3 * LINE))
            n = int(rng.integers(0, 3 * LINE))
            runs.append((x, n))
            x += n
        return runs
    return [(BASE + int(rng.integers(0, span * LINE)), int(rng.integers(0, 4 * LINE))) for _ in range(3)]


@pytest.mark.parametrize("repeat", [0.0, 0.4])
@pytest.mark.parametrize("write_back", [False, True])
@pytest.mark.parametrize("lines", [8, 48, 400])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("pages", ["default", "small"])
def test_the_arrays_leave_the_cache_as_the_ordered_walk(pages, seed, lines, write_back, repeat):
    # ``repeat``: how often an access is the last one again (a tile read twice in a row: the
    # arrays take the lines they just touched as the most recent ones, in order, until anything
    # else touches the cache). ``pages``: "small" gives the arrays pages of 4 lines, slots for
    # the cache's lines and any access, and runs over 4 times the pages that fit: accesses
    # over pages, and pages given back and reused
    rng = np.random.default_rng(seed * 100 + lines + int(repeat * 10))
    if pages == "small":
        arrays, ordered = _pair(lines, write_back, page_bits=2, max_lines=4 * (lines + 48))
        span = 16 * lines
    else:
        arrays, ordered = _pair(lines, write_back)
        span = 3 * lines
    saved: list = []
    runs = None
    for step in range(600):
        u = rng.random()
        if u < 0.06:
            a, n = BASE + int(rng.integers(0, 3 * lines * LINE)), int(rng.integers(0, 8 * LINE))
            arrays.invalidate(a, n)
            ordered.invalidate(a, n)
        elif u < 0.09:
            saved = [arrays.save_state(), ordered.save_state()]
        elif u < 0.11 and saved:
            arrays.restore_state(saved[0])
            ordered.restore_state(saved[1])
        elif u < 0.15:      # a sample of weight one keeps the arrays
            picked = sorted({int(x) for x in rng.integers(0, 3 * lines, 6)})
            lines_ = [BASE // LINE + x for x in picked]
            write = bool(rng.random() < 0.5)
            assert arrays.access_lines(lines_, weight=1, write=write) == \
                ordered.access_lines(lines_, weight=1, write=write)
        else:
            if runs is None or rng.random() >= repeat:
                runs = _random_runs(rng, span)
            write = bool(rng.random() < 0.3)
            hit = arrays.access_runs(runs, write=write)
            assert hit == ordered.access_runs(runs, write=write), step
            assert type(hit) is int             # not a numpy integer (totals, stats, JSON)
            if not write and rng.random() < 0.5:
                arrays.count(7, 3)
                ordered.count(7, 3)
        assert arrays.take_writeback() == ordered.take_writeback()
        _same(arrays, ordered)
    assert arrays._arr is not None          # never left the arrays


def test_streaming_beyond_the_cache_evicts_the_least_recent_lines_in_bulk():
    # the MSE pattern: runs of new lines into a full cache, stores among them, a line shared
    # with the previous run; then the stored data read again after it left the cache
    arrays, ordered = _pair(64, True)
    for k in range(200):
        a = BASE + k * 24 * LINE + (LINE // 2 if k % 5 == 0 else 0)
        write = k % 4 == 3
        assert arrays.access_runs(((a, 24 * LINE),), write=write) == ordered.access_runs(((a, 24 * LINE),), write=write)
        if k % 3 == 0:      # read again a run that left the cache (its stores were written back)
            b = BASE + max(k - 4, 0) * 24 * LINE
            assert arrays.access_runs(((b, 30 * LINE),), write=False) == ordered.access_runs(((b, 30 * LINE),), write=False)
    _same(arrays, ordered)
    assert arrays.take_writeback() == ordered.take_writeback() > 0


def test_a_sample_heavier_than_one_line_moves_the_state_to_the_ordered_walk():
    arrays, ordered = _pair(32, True)
    for c in (arrays, ordered):
        c.access_runs(StridedRuns(BASE, 4 * LINE, 2 * LINE, 6), write=True)
        c.access_lines([BASE // LINE + 1, BASE // LINE + 40], weight=4, write=False)
    assert arrays._arr is None
    _same(arrays, ordered)
    for c in (arrays, ordered):
        c.access_runs(((BASE, 64 * LINE),), write=False)
    _same(arrays, ordered)
    assert arrays.take_writeback() == ordered.take_writeback()


def test_lines_far_apart_stay_on_the_arrays():
    # the arrays give slots to the pages in use, not to the span between them (four tensors of
    # 4 GiB: the MSE at 2^30)
    from opsim.simulator.l2_arrays import MAX_SPAN
    arrays, ordered = _pair(16, True)
    far = BASE + (MAX_SPAN + 5) * LINE
    for c in (arrays, ordered):
        c.access_runs(((BASE, 4 * LINE),), write=True)
        assert c.access_runs([(far, 2 * LINE), (BASE, LINE)], write=False) == LINE
        assert c.access_runs(((far + LINE, 3 * LINE),), write=True) == 0
    assert arrays._arr is not None and len(arrays._arr.pmap) == 2       # two pages in use
    _same(arrays, ordered)


@pytest.mark.parametrize("write_back", [False, True])
def test_streaming_over_far_more_pages_than_the_arrays_hold_reuses_the_pages_left_empty(write_back):
    # 8 streams far apart, each a run of lines a step: the pages behind the cache's lines are
    # given back and reused, so the arrays never hold more than their limit
    lines, bits = 64, 3
    arrays, ordered = _pair(lines, write_back, page_bits=bits, max_lines=4 * lines)
    limit = arrays._arr.max_pages << bits
    for k in range(300):
        for s in range(8):
            a = BASE + s * (1 << 30) + k * 5 * LINE + (LINE // 3 if k % 7 == 0 else 0)
            write = (k + s) % 3 == 0
            assert arrays.access_runs(((a, 5 * LINE),), write=write) == \
                ordered.access_runs(((a, 5 * LINE),), write=write)
        if k % 10 == 0:       # rows of a tile over two pages, and a run read again
            runs = StridedRuns(BASE + k * 5 * LINE, 3 * LINE, LINE, 6)
            assert arrays.access_runs(runs, write=False) == ordered.access_runs(runs, write=False)
        assert arrays.take_writeback() == ordered.take_writeback()
        assert arrays._arr is not None and arrays._arr.stamp.size <= limit
    _same(arrays, ordered)
    assert len(arrays._arr.pmap) < 300 * 5 * 8 >> bits     # pages were given back


def test_resident_lines_over_more_pages_than_the_arrays_hold_move_the_state_to_the_ordered_walk():
    lines = 1 << 10
    arrays, ordered = _pair(lines, True, page_bits=4, max_lines=64 * 16)
    pages = arrays._arr.max_pages
    for k in range(pages + 20):         # a line in each page, all resident
        for c in (arrays, ordered):
            assert c.access_runs(((BASE + k * 16 * LINE, LINE),), write=k % 2 == 1) == 0
        assert (arrays._arr is None) == (k >= pages)
    _same(arrays, ordered)
    assert arrays.used_lines() == pages + 20 and len(arrays.dirty_lines()) == (pages + 20) // 2


def test_a_saved_state_of_either_kind_restores_into_either():
    arrays, ordered = _pair(16, True)
    for c in (arrays, ordered):
        c.access_runs(((BASE, 6 * LINE),), write=True)
    s_arr, s_ord = arrays.save_state(), ordered.save_state()
    for c in (arrays, ordered):
        c.access_runs(((BASE + 40 * LINE, 14 * LINE),), write=False)
    assert arrays.take_writeback() == ordered.take_writeback() > 0
    arrays.restore_state(s_ord)          # the ordered state into the arrays' cache, and back
    ordered.restore_state(s_arr)
    _same(arrays, ordered)
    assert arrays._arr is None and ordered._arr is not None
    for c in (arrays, ordered):
        assert c.access_runs(((BASE, 3 * LINE),), write=False) == 3 * LINE
    _same(arrays, ordered)


def test_the_arrays_hold_a_bounded_number_of_lines_relative_to_the_cache():
    # 9 bytes per line the arrays hold, copied by every save_state: at most span_limit(capacity)
    # lines and two pages, whatever the accesses
    from opsim.simulator.l2_arrays import MIN_SPAN, span_limit
    lines = 1 << 18
    limit = span_limit(lines)
    assert MIN_SPAN <= limit <= 8 * lines
    cache = L2Cache(lines * LINE, LINE, True)
    assert cache._arr is not None and cache._arr.max_pages == (limit >> PAGE_BITS) + 2
    for k in range(0, 4 * limit, limit // 4):
        cache.access_runs([(BASE + k * LINE, 4 * LINE)], write=k % 2 == 0)
        assert cache._arr is not None and cache._arr.stamp.size <= limit + (2 << PAGE_BITS)
    assert cache.used_lines() == 64.0 and len(cache.dirty_lines()) == 64


@pytest.mark.parametrize("how", ["runs", "lines"])
def test_runs_or_lines_given_as_an_iterator_are_all_touched_when_the_state_moves(how):
    # the arrays read the runs, find them too far apart and hand the state to the ordered walk,
    # which must still see every run (an iterator is read once, before either)
    far = BASE + (1 << 40)
    results = []
    for wrap in (list, iter):
        cache = L2Cache(64 * LINE, LINE, True)
        cache._arr = LineArrays(64, LINE, page_bits=2, max_lines=4)    # slots for 3 pages
        if how == "runs":
            cache.access_runs(wrap([(BASE, 8 * LINE), (far, 8 * LINE)]), write=False)
            hit = cache.access_runs([(BASE, 8 * LINE)], write=False)
        else:
            cache.access_lines(wrap([BASE // LINE, far // LINE]), weight=1.0)
            hit = cache.access_lines([BASE // LINE], weight=1.0)
        results.append((cache.lru_order(), hit))
    assert results[0] == results[1]
    assert results[0][1] > 0
