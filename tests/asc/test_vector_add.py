"""The pyasc-style vector adds (manual flags, TQue) run unchanged on opsim: bits, overlap, scaling."""
import numpy as np

import opsim.asc as asc


def _pipe_intervals(trace, core, pipe):
    return [(s.start, s.end) for s in trace.slices(core, pipe)]


def test_manual_flags_add_is_bitwise_numpy(example):
    mod = example("add_manual_flags")
    res = mod.main(n=8 * 1024, block_dim=8)
    assert res.cycles > 0 and res.time_us > 0
    assert res.stats["block_dim"] == 8
    assert set(res.outputs) == {"z"}


def test_tque_double_buffering_beats_single(example):
    mod = example("add_tque")
    single = mod.run(8 * 4096, 8, buffer_num=1)
    double = mod.run(8 * 4096, 8, buffer_num=2)
    assert double.cycles < single.cycles


def test_tque_double_buffering_overlaps_mte2_with_vector(example):
    mod = example("add_tque")
    res = mod.run(8 * 4096, 8, buffer_num=2)
    mte2 = _pipe_intervals(res.trace, "core0.veccore0", "MTE2")
    vec = _pipe_intervals(res.trace, "core0.veccore0", "VECTOR")
    mte3 = _pipe_intervals(res.trace, "core0.veccore0", "MTE3")
    assert mte2 and vec and mte3
    overlap = any(a0 < b1 and b0 < a1 for a0, a1 in mte2 for b0, b1 in vec)
    assert overlap, "with two buffers a load runs while the vector unit adds"
    # and the store of one tile runs while a later tile is loaded
    assert any(a0 < b1 and b0 < a1 for a0, a1 in mte2 for b0, b1 in mte3)


def test_single_buffer_manual_flags_never_overlap_load_and_add(example):
    mod = example("add_manual_flags")
    res = mod.main(n=8 * 1024, block_dim=8, buffer_num=1)
    mte2 = _pipe_intervals(res.trace, "core0.veccore0", "MTE2")
    vec = _pipe_intervals(res.trace, "core0.veccore0", "VECTOR")
    assert not any(a0 < b1 and b0 < a1 for a0, a1 in mte2 for b0, b1 in vec)


def test_more_blocks_take_fewer_cycles(example):
    mod = example("add_tque")
    n = 48 * 1024
    r8 = mod.run(n, 8, buffer_num=2)
    r48 = mod.run(n, 48, buffer_num=2)
    assert r48.cycles < r8.cycles


def test_fp16_add_is_bitwise_numpy(example):
    mod = example("add_tque")
    mod.run(8 * 2048, 8, buffer_num=2, dtype=np.float16)


def test_every_instruction_names_the_kernel_source_line(example):
    mod = example("add_tque")
    origins = []

    class Spy:
        def on_instruction(self, core, pipe, instr, start, end):
            if instr.name != "BlockEnd":         # the dispatcher's own end-of-block fence
                origins.append(getattr(instr, "origin", None))
    from opsim.simulator import device as device_mod
    orig = device_mod.Device.__init__

    def init(self, *a, **k):
        orig(self, *a, **k)
        self.observers.append(Spy())
    device_mod.Device.__init__ = init
    try:
        mod.run(8 * 1024, 1, buffer_num=2)
    finally:
        device_mod.Device.__init__ = orig
    assert origins and all(o and ":" in o for o in origins)
    files = {o.rsplit(":", 1)[0] for o in origins}
    assert files == {mod.__file__}
    lines = {int(o.rsplit(":", 1)[1]) for o in origins}
    src = open(mod.__file__).read().splitlines()
    assert any("asc.add(" in src[i - 1] for i in lines)
    assert any("data_copy" in src[i - 1] for i in lines)


def test_launch_outside_and_bad_block_dim_are_clear_errors(example):
    mod = example("add_tque")
    import pytest
    with pytest.raises(TypeError, match="launch it as"):
        mod.add_kernel(1, 2, 3)
    with pytest.raises(ValueError, match="block_dim"):
        mod.add_kernel[0, None]
    with pytest.raises(Exception, match="outside a kernel"):
        asc.get_block_idx()
