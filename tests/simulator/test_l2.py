"""The L2 model: LRU over lines, sampled (weighted) lines and the hit/miss totals."""
from __future__ import annotations

import numpy as np
import pytest

from opsim.simulator.l2 import L2Cache

LINE = 512


def test_a_weighted_line_occupies_that_many_lines_of_capacity():
    l2 = L2Cache(8 * LINE, LINE)
    l2.access_lines([0, 1], weight=4)                     # full: 8 of 8 lines
    assert l2.access_lines([0], weight=4) == 1
    l2.access_lines([2], weight=4)                        # evicts the least recent (line 1)
    assert l2.access_lines([1], weight=4) == 0
    assert l2.access(2 * LINE, LINE, write=False) == LINE  # and a full access re-weighs it to 1


def test_unit_weight_keeps_one_line_per_line():
    l2 = L2Cache(8 * LINE, LINE)
    l2.access(0, 8 * LINE, write=True)
    assert l2.access(0, 8 * LINE, write=False) == 8 * LINE
    l2.access(8 * LINE, LINE, write=False)                # the ninth line evicts line 0
    assert l2.access(0, LINE, write=False) == 0


def test_an_access_that_does_not_count_leaves_the_totals_to_the_caller():
    l2 = L2Cache(8 * LINE, LINE)
    l2.access(0, LINE, write=False, count=False)
    assert l2.access(0, LINE, write=False, count=False) == LINE
    assert (l2.hit_bytes, l2.miss_bytes) == (0, 0)
    l2.count(3 * LINE, LINE)
    assert l2.hit_rate == 0.75


def test_invalidate_frees_the_capacity_of_weighted_lines():
    l2 = L2Cache(8 * LINE, LINE)
    l2.access_lines([0], weight=8)
    l2.invalidate(0, LINE)
    l2.access(LINE, 8 * LINE, write=False)                # fits only if line 0's 8 were given back
    assert l2.access(LINE, 8 * LINE, write=False) == 8 * LINE


def test_the_sample_is_a_function_of_the_address_alone():
    l2 = L2Cache(2 ** 30, LINE)
    whole = set(l2.sample((0, 0, 4096 * LINE, 1), 16).tolist())      # one run of 4096 lines
    rows = set(l2.sample((0, 64 * LINE, 8 * LINE, 64), 16).tolist())  # 64 runs of 8 lines, 64 apart
    touched = {r * 64 + i for r in range(64) for i in range(8)}
    assert rows == whole & touched


def test_power_of_two_strides_do_not_alias_with_the_period():
    # runs of 2 lines every 256 lines: a plain `line % 64` sample would see all of them or none
    l2 = L2Cache(2 ** 30, LINE)
    picked = l2.sample((0, 256 * LINE, 2 * LINE, 4096), 64)
    assert 0.5 * 8192 / 64 < picked.size < 1.5 * 8192 / 64


def test_write_back_charges_dirty_lines_when_they_are_evicted_not_when_written():
    from opsim.simulator.l2 import L2Cache
    c = L2Cache(4 * 512, 512, write_back=True)          # 4 lines
    c.access(0, 2048, write=True)                       # 4 dirty lines, all resident
    assert c.take_writeback() == 0
    assert c.access(0, 512, write=False) == 512         # a read of written data hits
    c.access(4096, 1024, write=False)                   # fills 2 lines: evicts 2 dirty lines (LRU)
    assert c.take_writeback() == 1024 and c.writeback_bytes == 1024
    c.access(8192, 4096, write=False)                   # evicts the rest: 2 lines dirty, 2 clean
    assert c.take_writeback() == 1024
    c.invalidate(8192, 4096)                            # host writes drop lines without a write-back
    assert c.take_writeback() == 0


def test_write_through_never_owes_a_write_back():
    from opsim.simulator.l2 import L2Cache
    c = L2Cache(4 * 512, 512)
    c.access(0, 2048, write=True)
    c.access(4096, 4096, write=False)
    assert c.take_writeback() == 0 and c.writeback_bytes == 0


def test_streaming_stores_beyond_the_l2_owe_all_but_the_last_l2_full_to_hbm():
    from opsim.simulator.l2 import L2Cache
    c = L2Cache(1 << 20, 512, write_back=True)          # a 1 MiB L2, 4 MiB of stores
    for off in range(0, 4 << 20, 32 << 10):
        c.access(off, 32 << 10, write=True)
    assert c.take_writeback() == (4 << 20) - (1 << 20)


@pytest.mark.parametrize("write_back", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_access_runs_leaves_the_cache_as_one_access_per_run_would(seed, write_back):
    # small cache, runs inside one line, across a few lines, longer than the cache, repeated
    # lines, sampled (heavier) entries:
    # the batched walk must hit, insert and evict exactly as the run-by-run one
    rng = np.random.default_rng(seed)
    one, batched = L2Cache(64 * 32, 32, write_back), L2Cache(64 * 32, 32, write_back)
    for cache in (one, batched):
        cache.access_lines([3, 5, 7, 11], weight=4.0)
    for step in range(40):
        sizes = np.where(rng.random(12) < 0.2, rng.integers(0, 1500, 12), rng.integers(0, 80, 12))
        runs = [(int(a), int(n)) for a, n in zip(rng.integers(0, 4096, 12), sizes)]
        write = bool(step % 3 == 0)
        want = sum(one.access(a, n, write=write, count=False) for a, n in runs)
        assert batched.access_runs(runs, write=write) == want
        assert batched.lru_order() == one.lru_order()
        assert batched.used_lines() == one.used_lines()
        # and a write-back cache owes HBM the same dirty lines
        assert batched.dirty_lines() == one.dirty_lines()
        assert batched.pending_writeback == one.pending_writeback


def _cache(lines: int, write_back: bool, state: str) -> L2Cache:
    """An L2 of ``lines`` lines with its state in arrays (as made) or moved to the OrderedDict
    walk (as after a sample heavier than one line)."""
    l2 = L2Cache(lines * LINE, LINE, write_back=write_back)
    if state == "ordered":
        l2._to_ordered()
    return l2


class _ReferenceLRU:
    """A line-by-line LRU written for the test: a list in recency order, one line per line."""

    def __init__(self, lines: int, write_back: bool) -> None:
        self.lines, self.write_back = lines, write_back
        self.order: list[int] = []
        self.dirty: set[int] = set()
        self.owed = 0

    def touch_runs(self, runs, write: bool) -> int:
        hit = 0
        for a, n in runs:
            for line in range(a // LINE, (a + n - 1) // LINE + 1 if n > 0 else a // LINE):
                part = min(a + n, (line + 1) * LINE) - max(a, line * LINE)
                if line in self.order:
                    self.order.remove(line)
                    hit += part
                self.order.append(line)
                while len(self.order) > self.lines:
                    gone = self.order.pop(0)
                    if gone in self.dirty:
                        self.dirty.discard(gone)
                        self.owed += LINE
            if write and self.write_back and n > 0:
                for line in range(a // LINE, (a + n - 1) // LINE + 1):
                    if line in self.order:
                        self.dirty.add(line)
                    else:
                        self.owed += min(a + n, (line + 1) * LINE) - max(a, line * LINE)
        return 0 if write else hit


@pytest.mark.parametrize("write_back", [False, True])
@pytest.mark.parametrize("state", ["arrays", "ordered"])
def test_runs_touch_lines_in_order_as_a_line_by_line_lru(write_back, state):
    # single-line rows, partial lines, runs longer than the cache, re-touched lines, stores
    rng = np.random.default_rng(7)
    l2, ref = _cache(16, write_back, state), _ReferenceLRU(16, write_back)
    for _ in range(400):
        if rng.random() < 0.5:
            a0, stride = int(rng.integers(0, 64 * LINE)), int(rng.choice([LINE, 2 * LINE, 8 * LINE]))
            runs = [(a0 + k * stride, LINE) for k in range(int(rng.integers(1, 24)))]
        else:
            runs = [(int(rng.integers(0, 64 * LINE)), int(rng.integers(0, 20 * LINE))) for _ in range(3)]
        write = bool(rng.random() < 0.3)
        assert l2.access_runs(runs, write=write) == ref.touch_runs(runs, write)
        assert l2.lru_order() == ref.order
        assert l2.take_writeback() == ref.owed
        ref.owed = 0


@pytest.mark.parametrize("write_back", [False, True])
@pytest.mark.parametrize("geometry", [(0, 4 * LINE, LINE, 12), (256, 2 * LINE, 256, 9), (0, 0, LINE, 5),
                                      (3 * LINE, LINE, 700, 6), (40 * LINE, -2 * LINE, LINE, 8)])
@pytest.mark.parametrize("state", ["arrays", "ordered"])
def test_strided_rows_touch_the_lines_their_pairs_would(geometry, write_back, state):
    from opsim.simulator.l2 import StridedRuns
    a0, stride, run, count = geometry
    pairs = [(a0 + k * stride, run) for k in range(count)]
    assert list(StridedRuns(*geometry)) == pairs
    l2, ref = _cache(16, write_back, state), _ReferenceLRU(16, write_back)
    for write in (False, True, False):          # cold, then stores, then warm reads
        l2.access_runs([(5 * LINE, 30 * LINE)], write=False)    # evicts part of it each time
        ref.touch_runs([(5 * LINE, 30 * LINE)], False)
        assert l2.access_runs(StridedRuns(*geometry), write=write) == ref.touch_runs(pairs, write)
        assert l2.lru_order() == ref.order
        assert l2.take_writeback() == ref.owed
        ref.owed = 0


@pytest.mark.parametrize("write_back", [False, True])
@pytest.mark.parametrize("lines", [40, 4096])
@pytest.mark.parametrize("state", ["arrays", "ordered"])
def test_runs_touch_lines_as_a_line_by_line_lru_before_and_after_the_cache_fills(lines, write_back, state):
    # a cache with room walks a run without eviction tests, a full one inserts a run's new lines
    # and then evicts (L2Cache.access_runs): the same order, hits, dirty lines and write-backs
    # as the reference, with resident lines at the start of, inside and after a run
    rng = np.random.default_rng(11)
    l2, ref = _cache(lines, write_back, state), _ReferenceLRU(lines, write_back)
    for _ in range(300):
        runs = [(int(rng.integers(0, 96 * LINE)), int(rng.integers(0, 12 * LINE))) for _ in range(2)]
        write = bool(rng.random() < 0.3)
        assert l2.access_runs(runs, write=write) == ref.touch_runs(runs, write)
        assert l2.lru_order() == ref.order
        assert l2.used_lines() == len(ref.order)
        assert l2.dirty_lines() == ref.dirty
        assert l2.take_writeback() == ref.owed
        ref.owed = 0


@pytest.mark.parametrize("write_back", [False, True])
@pytest.mark.parametrize("span", [1, 3])
@pytest.mark.parametrize("state", ["arrays", "ordered"])
def test_panels_read_again_walk_as_a_line_by_line_lru(span, write_back, state):
    # equally spaced rows of one or of several lines (the cube's panel loads) are walked in bulk
    # when every line weighs one: panels read again (all hits), partly resident (a resident
    # prefix, then misses), mixed, and larger than the cache, in a cache that is full
    from opsim.simulator.l2 import StridedRuns
    rng = np.random.default_rng(span)
    lines = 48
    l2, ref = _cache(lines, write_back, state), _ReferenceLRU(lines, write_back)
    panels = [(int(rng.integers(0, 40)) * LINE + int(rng.integers(0, LINE // 2)) * (span > 1),
               int(rng.choice([span, span + 1, 2 * span + 1])) * LINE, span * LINE - LINE // 2 * (span > 1),
               int(rng.integers(1, 2 * lines // span))) for _ in range(6)]
    for _ in range(300):
        if rng.random() < 0.15:
            runs: list | StridedRuns = [(int(rng.integers(0, 120 * LINE)), int(rng.integers(1, 6 * LINE)))]
        else:
            runs = StridedRuns(*panels[int(rng.integers(len(panels)))])
        write = bool(rng.random() < 0.3)
        assert l2.access_runs(runs, write=write) == ref.touch_runs(list(runs), write)
        assert l2.lru_order() == ref.order
        assert l2.used_lines() == len(ref.order)
        assert l2.dirty_lines() == ref.dirty
        assert l2.take_writeback() == ref.owed
        ref.owed = 0


def test_the_cache_is_uniform_again_once_no_heavier_sampled_line_is_resident():
    # a sampled launch leaves lines weighing P; the fast walks need every line to weigh one, so
    # an access finds the cache uniform again only once the last heavier line was evicted or
    # re-weighed (it looks when it starts: an empty access shows what the next one sees)
    def uniform(l2: L2Cache) -> bool:
        l2.access_runs((), write=False)
        return l2._uniform

    l2 = L2Cache(8 * LINE, LINE)
    l2.access_lines([0, 1], weight=2)
    assert not uniform(l2)
    l2.access(0, LINE, write=False)                       # line 0 re-weighed to one, line 1 still 2
    assert not uniform(l2)
    l2.access(LINE, LINE, write=False)                    # line 1 re-weighed: all weigh one again
    assert uniform(l2)
    l2.access_lines([5], weight=4)
    assert not uniform(l2)
    l2.access(16 * LINE, 6 * LINE, write=False)           # 6 new lines evict line 5 (the LRU one)
    assert 5 not in l2._lru and uniform(l2)
    # a weight that is not a whole number makes capacity sums inexact: never uniform again
    l2.access_lines([9], weight=1.5)
    l2.invalidate(0, 64 * LINE)
    assert not l2._lru and not uniform(l2)


@pytest.mark.parametrize("between", ["sample", "invalidate", "restore", "runs"])
def test_a_panel_read_again_after_another_touch_moves_its_lines_again(between):
    # rows read twice in a row are the most recent lines already (nothing to move); anything
    # that touched the cache in between must make the second read walk them again
    from opsim.simulator.l2 import StridedRuns
    rows = StridedRuns(0, 2 * LINE, LINE, 4)                 # lines 0, 2, 4, 6
    l2, ref = L2Cache(16 * LINE, LINE), _ReferenceLRU(16, False)
    saved = l2.save_state()
    for cache in (l2, ref):
        cache.touch_runs(list(rows), False) if cache is ref else cache.access_runs(rows, write=False)
    if between == "sample":
        l2.access_lines([2], weight=1)                       # a weight-one sample keeps it uniform
        ref.touch_runs([(2 * LINE, LINE)], False)
    elif between == "invalidate":
        l2.invalidate(2 * LINE, LINE)
        ref.order.remove(2)
    elif between == "restore":
        l2.restore_state(saved)
        ref.order.clear()
    else:
        l2.access_runs([(4 * LINE, LINE)], write=False)
        ref.touch_runs([(4 * LINE, LINE)], False)
    assert l2.access_runs(rows, write=False) == ref.touch_runs(list(rows), False)
    assert l2.lru_order() == ref.order
