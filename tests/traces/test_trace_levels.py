"""Trace levels off/launch/tile/instruction and the columnar storage."""
from __future__ import annotations

from array import array

import numpy as np
import pytest

from opsim.traces.trace import LEVELS, Trace, level_index
from trace_cases import mse_run


def test_off_records_nothing_and_returns_no_trace():
    assert mse_run("off").trace is None


def test_launch_level_has_only_host_launches_and_blocks(mse_runs):
    tr = mse_runs["launch"].trace
    threads = {th for _, th in tr.tracks if any(True for _ in tr.slices(thread=th))}
    assert threads == {"stream0", "BLOCK"}
    assert len(tr) == 1 + 4                      # one launch, four blocks
    assert len(tr.c_track) == 0 and len(tr.f_from) == 0


def test_tile_level_has_one_slice_per_tile_per_pipe_with_the_tile_totals(mse_runs):
    tile, instr = mse_runs["tile"].trace, mse_runs["instruction"].trace
    for core in ("core0.veccore0", "core1.veccore1"):
        for pipe in ("MTE2", "VECTOR", "MTE3"):
            merged = list(tile.slices(core, pipe))
            each = list(instr.slices(core, pipe))
            assert [s.tile for s in merged] == [0, 1, 2, 3]
            for s in merged:
                parts = [p for p in each if p.tile == s.tile]
                assert s.elements == sum(p.elements for p in parts)
                assert s.nbytes == sum(p.nbytes for p in parts)
                assert s.start == parts[0].start and s.end == parts[-1].end


def test_instruction_level_has_one_slice_per_busy_instruction(mse_runs):
    tr = mse_runs["instruction"].trace
    per_tile = {"MTE2": 3, "VECTOR": 3, "MTE3": 1}   # 3 loads; Sub, Muls, Mul; 1 store
    for pipe, n in per_tile.items():
        assert len(list(tr.slices("core0.veccore0", pipe))) == 4 * n
    # busy cycles per pipe equal what the live device counted
    busy = {}
    for s in tr.slices():
        if s.process == "core0.veccore0" and s.thread in per_tile:
            busy[s.thread] = busy.get(s.thread, 0) + s.end - s.start
    assert busy == {p: v for p, v in mse_runs["instruction"].stats["per_core"]["core0.veccore0"].items()
                    if p in per_tile}


def test_storage_is_typed_columns_with_a_fixed_cost_per_slice():
    tr = Trace("instruction", 1e9)
    t = tr.track("core0.veccore0", "VECTOR")
    for i in range(1000):
        tr.add_slice(t, "Add", i, i + 1, elements=64, detail="fp32")
    assert all(isinstance(c, array) for c in (tr.s_track, tr.s_start, tr.s_end, tr.s_detail))
    assert tr.memory_bytes() == 1000 * (4 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4)
    assert tr.string(tr.s_name[0]) == "Add" and len(tr._strings) == 4   # each string interned once
    cols = tr.columns()
    assert cols["start"].dtype == np.int64 and len(cols["start"]) == 1000


def test_unknown_level_is_refused_with_the_allowed_ones():
    with pytest.raises(ValueError, match="off, launch, tile, instruction"):
        level_index("verbose")
    assert LEVELS == ("off", "launch", "tile", "instruction")


def test_same_run_gives_the_same_trace_text():
    from opsim.traces.chrome import dumps
    assert dumps(mse_run("instruction").trace) == dumps(mse_run("instruction").trace)
