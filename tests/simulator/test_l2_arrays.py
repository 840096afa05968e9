"""The L2 state in arrays (simulator/l2_arrays.py) against the OrderedDict walk it replaces while
every line weighs one: the same hits, LRU order, dirty lines and write-backs for any sequence of
accesses, stores, invalidations, saved and restored states and samples."""
from __future__ import annotations

import numpy as np
import pytest

from opsim.simulator.l2 import L2Cache, StridedRuns

LINE = 512
BASE = 0x124000000000            # a GM address like the device's: far from 0


def _pair(lines: int, write_back: bool) -> tuple[L2Cache, L2Cache]:
    """A cache on the arrays and one moved to the OrderedDict walk before any access."""
    arrays, ordered = L2Cache(lines * LINE, LINE, write_back), L2Cache(lines * LINE, LINE, write_back)
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
def test_the_arrays_leave_the_cache_as_the_ordered_walk(seed, lines, write_back, repeat):
    # ``repeat``: how often an access is the last one again (a tile read twice in a row: the
    # arrays take the lines they just touched as the most recent ones, in order, until anything
    # else touches the cache)
    rng = np.random.default_rng(seed * 100 + lines + int(repeat * 10))
    arrays, ordered = _pair(lines, write_back)
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
                runs = _random_runs(rng, 3 * lines)
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


def test_lines_too_far_apart_for_the_arrays_move_the_state_to_the_ordered_walk():
    from opsim.simulator.l2_arrays import MAX_SPAN
    arrays, ordered = _pair(16, True)
    far = BASE + (MAX_SPAN + 5) * LINE
    for c in (arrays, ordered):
        c.access_runs(((BASE, 4 * LINE),), write=True)
        assert c.access_runs([(far, 2 * LINE), (BASE, LINE)], write=False) == LINE
    assert arrays._arr is None
    _same(arrays, ordered)


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


def test_the_arrays_span_a_bounded_number_of_lines_relative_to_the_cache():
    # tensors far apart must not cost arrays as wide as the gap (9 bytes per line of span, copied
    # by every save_state): beyond span_limit(capacity) lines the state moves to the ordered walk
    from opsim.simulator.l2_arrays import MIN_SPAN, span_limit
    lines = 1 << 18
    limit = span_limit(lines)
    assert MIN_SPAN <= limit <= 8 * lines
    cache = L2Cache(lines * LINE, LINE, True)
    cache.access_runs([(BASE, 4 * LINE)], write=False)
    cache.access_runs([(BASE + (limit // 2) * LINE, 4 * LINE)], write=True)
    assert cache._arr is not None and cache._arr.stamp.size <= limit
    cache.access_runs([(BASE + (limit + 8) * LINE, 4 * LINE)], write=False)
    assert cache._arr is None
    assert cache.used_lines() == 12.0 and len(cache.dirty_lines()) == 4


@pytest.mark.parametrize("how", ["runs", "lines"])
def test_runs_or_lines_given_as_an_iterator_are_all_touched_when_the_state_moves(how):
    # the arrays read the runs, find them too far apart and hand the state to the ordered walk,
    # which must still see every run (an iterator is read once, before either)
    far = BASE + (1 << 40)
    results = []
    for wrap in (list, iter):
        cache = L2Cache(64 * LINE, LINE, True)
        if how == "runs":
            cache.access_runs(wrap([(BASE, 8 * LINE), (far, 8 * LINE)]), write=False)
            hit = cache.access_runs([(BASE, 8 * LINE)], write=False)
        else:
            cache.access_lines(wrap([BASE // LINE, far // LINE]), weight=1.0)
            hit = cache.access_lines([BASE // LINE], weight=1.0)
        results.append((cache.lru_order(), hit))
    assert results[0] == results[1]
    assert results[0][1] > 0
