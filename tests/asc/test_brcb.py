"""``asc.brcb(dst, src0, repeat_times, BrcbRepeatParams)``: each of 8 src elements a repeat
fills one 32 B block of dst (Ascend C Brcb, docs/sources.md#brcb), bit for bit, in the default
strides; other strides, dtypes, repeat counts, overlapping operands and devices without a Brcb
cost entry are refused at the call naming what and what is allowed."""
import ml_dtypes
import numpy as np
import pytest

import opsim
import opsim.asc as asc
from opsim.simulator import numerics as nx
from opsim.simulator.errors import UnsupportedInstruction

DST_AT = 16384          # byte offset of dst in UB: past the largest src (255 x 8 fp32 = 8160 B)


@asc.jit
def brcb_kernel(x: asc.GlobalAddress, z: asc.GlobalAddress, n_src: int, n_dst: int, repeat: int,
                blk: int, rep: int, sync: str):
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    zg.set_global_buffer(z)
    xl = asc.LocalTensor(x.dtype, asc.TPosition.VECIN, 0, n_src)
    zl = asc.LocalTensor(z.dtype, asc.TPosition.VECOUT, DST_AT, n_dst)
    asc.data_copy(xl, xg, n_src)
    asc.data_copy(zl, zg, n_dst)          # dst's bytes beyond the broadcast must come back as they went in
    if sync != "no_load_wait":
        asc.set_flag(asc.HardEvent.MTE2_V, 0)
        asc.wait_flag(asc.HardEvent.MTE2_V, 0)
    if sync == "alias":
        asc.brcb(xl, xl, repeat, asc.BrcbRepeatParams(blk, rep))
    else:
        asc.brcb(zl, xl, repeat, asc.BrcbRepeatParams(blk, rep))
    if sync != "no_store_wait":
        asc.set_flag(asc.HardEvent.V_MTE3, 0)
        asc.wait_flag(asc.HardEvent.V_MTE3, 0)
    else:                                   # the store still after the loads: only brcb is unordered
        asc.set_flag(asc.HardEvent.MTE2_MTE3, 0)
        asc.wait_flag(asc.HardEvent.MTE2_MTE3, 0)
    asc.data_copy(zg, zl, n_dst)


def _bits(n, dtype, seed):
    """n elements of any bit pattern (NaNs with payloads, infinities, subnormals too)."""
    width = np.dtype(dtype).itemsize
    u = np.uint16 if width == 2 else np.uint32
    return np.random.default_rng(seed).integers(0, np.iinfo(u).max, n, dtype=u, endpoint=True).view(dtype)


def _operands(dtype, repeat):
    item = np.dtype(dtype).itemsize
    n_src = max(32 // item, -(-repeat * 8 * item // 32) * 32 // item)    # whole 32 B blocks for the load
    n_dst = (repeat + 1) * 256 // item                                    # one 256 B repeat more than written
    return _bits(n_src, dtype, 1 + repeat), _bits(n_dst, dtype, 100 + repeat)


def _golden(x, z0, repeat):
    """numpy: element b of src repeated over the 32 B block b of dst; the rest of dst as it was."""
    per_block = 32 // x.itemsize
    want = z0.copy()
    want[:repeat * 8 * per_block] = np.repeat(x[:repeat * 8], per_block)
    return want


def _run(dtype, repeat, blk=1, rep=8, sync="both", **launch):
    x, z0 = _operands(dtype, repeat)
    z = z0.copy()
    res = brcb_kernel[1, None](x, z, x.size, z.size, repeat, blk, rep, sync, **launch)
    return x, z0, z, res


DTYPES = [np.float16, np.float32, ml_dtypes.bfloat16, np.int16, np.int32]


@pytest.mark.parametrize("repeat", [0, 1, 2, 7, 32, 255])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_brcb_broadcasts_each_src_element_into_a_32B_block_bitwise(dtype, repeat):
    x, z0, z, _ = _run(dtype, repeat)
    assert np.array_equal(z.view(np.uint8), _golden(x, z0, repeat).view(np.uint8))


def test_dst_blk_stride_0_counts_as_1():
    x, z0, z, _ = _run(np.float16, 3, blk=0)
    assert np.array_equal(z.view(np.uint16), _golden(x, z0, 3).view(np.uint16))


@pytest.mark.parametrize("dtype, entry", [(np.float16, "fp16"), (np.int16, "fp16"), (ml_dtypes.bfloat16, "fp16"),
                                          (np.float32, "fp32"), (np.int32, "fp32")])
def test_brcb_costs_its_table_entry_for_the_dst_elements(dtype, entry):
    repeat = 5
    *_, res = _run(dtype, repeat)
    spec = opsim.device_spec("atlas-a2")
    k, b = spec.vector.cost["Brcb"][entry]
    n = repeat * 256 // np.dtype(dtype).itemsize
    (s,) = [s for s in res.trace.slices(thread="VECTOR") if s.name == "Brcb"]
    assert s.end - s.start == int(np.ceil(k * n + b)) + round(spec.vector.head)


@pytest.mark.parametrize("blk, rep, named, allowed", [
    (2, 8, "dst_blk_stride 2", "only dst_blk_stride 1 \\(or 0, which counts as 1\\)"),
    (1, 16, "dst_rep_stride 16", "only dst_rep_stride 8"),
    (1, 0, "dst_rep_stride 0", "only dst_rep_stride 8"),
])
def test_strides_not_modelled_are_refused_naming_the_parameter_value_and_what_is_allowed(blk, rep, named, allowed):
    with pytest.raises(UnsupportedInstruction, match=rf"brcb with {named} .*test_brcb.py:\d+.*{allowed}"):
        _run(np.float16, 2, blk=blk, rep=rep)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float64, np.int64])
def test_other_dtypes_are_refused_naming_the_dtype_and_the_allowed_ones(dtype):
    x, z = np.zeros(64, dtype), np.zeros(512, dtype)
    with pytest.raises(UnsupportedInstruction, match=r"brcb with dst of \w+ .*test_brcb.py:\d+.*"
                                                     r"float16, bfloat16, float32, int16 or int32"):
        brcb_kernel[1, None](x, z, x.size, z.size, 1, 1, 8, "both")


@pytest.mark.parametrize("repeat", [256, -1])
def test_a_repeat_count_outside_0_255_is_refused(repeat):
    x, z = np.zeros(16, np.float16), np.zeros(16, np.float16)
    with pytest.raises(ValueError, match=rf"brcb repeat_times {repeat} .*test_brcb.py:\d+.*an int in 0..255"):
        brcb_kernel[1, None](x, z, x.size, z.size, repeat, 1, 8, "both")


def test_src_and_dst_in_one_memory_range_are_refused():
    with pytest.raises(ValueError, match=r"brcb with src0 and dst overlapping .*test_brcb.py:\d+.*"
                                         r"must not share memory"):
        _run(np.float32, 1, sync="alias")


@asc.jit
def mixed_kernel(x: asc.GlobalAddress, what: str):
    xl = asc.LocalTensor(x.dtype, asc.TPosition.VECIN, 0, 64)
    zl = asc.LocalTensor(asc.float32 if what == "dtype" else x.dtype, asc.TPosition.VECOUT, 4096, 128)
    asc.brcb(zl, xl, 1, asc.UnaryRepeatParams() if what == "params" else asc.BrcbRepeatParams())


def test_mixed_dtypes_and_other_params_structs_are_type_errors():
    x = np.zeros(64, np.float16)
    with pytest.raises(TypeError, match=r"brcb of fp16 into fp32 .*dst and src0 have one dtype"):
        mixed_kernel[1, None](x, "dtype")
    with pytest.raises(TypeError, match=r"brcb takes BrcbRepeatParams, got UnaryRepeatParams"):
        mixed_kernel[1, None](x, "params")


@pytest.mark.parametrize("device", ["atlas-inference", "atlas-training", "atlas-200i-500-a2"])
def test_devices_without_a_brcb_entry_refuse_it(device):
    with pytest.raises(UnsupportedInstruction, match=rf"brcb on {device} \(no Brcb entry in its vector cost table\)"):
        _run(np.float16, 1, device=device)


def test_atlas_a3_has_brcb():
    x, z0, z, _ = _run(np.float32, 4, device="atlas-a3")
    assert np.array_equal(z.view(np.uint32), _golden(x, z0, 4).view(np.uint32))


# ---------------------------------------------------------------------------------------------
# the sanitizer: what Brcb reads and writes
# ---------------------------------------------------------------------------------------------

ROWS = 64


@asc.jit
def brcb_queue_kernel(x: asc.GlobalAddress, z: asc.GlobalAddress, repeat: int):
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    zg.set_global_buffer(z)
    pipe = asc.TPipe()
    qx, qz = asc.TQue(asc.TPosition.VECIN, 1), asc.TQue(asc.TPosition.VECOUT, 1)
    pipe.init_buffer(qx, 1, repeat * 8 * x.dtype.sizeof())
    pipe.init_buffer(qz, 1, repeat * 256)
    xl = qx.alloc_tensor(x.dtype)
    asc.data_copy(xl, xg, repeat * 8)
    qx.enque(xl)
    xl = qx.deque(x.dtype)
    zl = qz.alloc_tensor(z.dtype)
    asc.brcb(zl, xl, repeat, asc.BrcbRepeatParams(1, 8))
    qz.enque(zl)
    qx.free_tensor(xl)
    zl = qz.deque(z.dtype)
    asc.data_copy(zg, zl, repeat * 256 // z.dtype.sizeof())
    qz.free_tensor(zl)


def test_a_tque_brcb_kernel_is_clean_for_the_sanitizer_and_bitwise():
    x = _bits(4 * 8, np.float32, 5)
    z = np.zeros(4 * 64, np.float32)
    res = brcb_queue_kernel[1, None](x, z, 4, sanitize=True)
    assert res.sanitizer.ok, str(res.sanitizer)
    assert np.array_equal(z.view(np.uint32), np.repeat(x, 8).view(np.uint32))


@pytest.mark.parametrize("sync, other", [("no_load_wait", "asc.data_copy(xl, xg, n_src)"),
                                         ("no_store_wait", "asc.data_copy(zg, zl, n_dst)")])
def test_a_missing_flag_around_brcb_is_a_race_on_its_src_or_its_dst(sync, other):
    *_, res = _run(np.float16, 4, sync=sync, sanitize=True)
    races = res.sanitizer.by_check("racecheck")
    lines = pathlib_lines()
    want = {lines["asc.brcb(zl, xl, repeat"], lines[other]}
    assert any({ln.rsplit("/", 1)[-1] for ln in f.lines} == want for f in races), str(res.sanitizer)


def pathlib_lines() -> dict[str, str]:
    """"test_brcb.py:<line>" of the first line of this file holding each text."""
    import pathlib
    out: dict[str, str] = {}
    for i, line in enumerate(pathlib.Path(__file__).read_text().splitlines(), 1):
        for text in ("asc.brcb(zl, xl, repeat", "asc.data_copy(xl, xg, n_src)", "asc.data_copy(zg, zl, n_dst)"):
            if text in line and text not in out:
                out[text] = f"test_brcb.py:{i}"
    return out


def test_the_instruction_reads_8_elements_and_writes_256_bytes_a_repeat():
    from opsim.simulator.isa_ext import Brcb

    class T:        # a stand-in operand: what accesses() reads of a LocalTensor
        def __init__(self, addr, item):
            self.addr, self.core, self.dtype = addr, type("C", (), {"name": "core0"}), type("D", (), {"itemsize": item})
            self.region = type("R", (), {"name": "UB"})

    for item in (2, 4):
        acc = Brcb(T(4096, item), T(0, item), 3).accesses(None)
        assert sorted(acc) == [("core0/UB", 0, 3 * 8 * item, False), ("core0/UB", 4096, 3 * 256, True)]


# ---------------------------------------------------------------------------------------------
# a softmax over rows of one 32 B block: brcb broadcasts each row's max and sum over its row
# ---------------------------------------------------------------------------------------------

@asc.jit
def row_softmax_kernel(x: asc.GlobalAddress, y: asc.GlobalAddress, rows: int):
    xg, yg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    yg.set_global_buffer(y)
    n = rows * 8                                                         # 8 fp32 = one block a row
    xl = asc.LocalTensor(asc.float32, asc.TPosition.VECIN, 0, n)
    stat = asc.LocalTensor(asc.float32, asc.TPosition.VECCALC, n * 4, rows)          # a value a row
    wide = asc.LocalTensor(asc.float32, asc.TPosition.VECCALC, n * 4 + rows * 4, n)  # it, over the row
    yl = asc.LocalTensor(asc.float32, asc.TPosition.VECOUT, 2 * n * 4 + rows * 4, n)
    asc.data_copy(xl, xg, n)
    asc.set_flag(asc.HardEvent.MTE2_V, 0)
    asc.wait_flag(asc.HardEvent.MTE2_V, 0)
    asc.whole_reduce_max(stat, xl, 8, rows, 1, 1, 1, asc.ReduceOrder.ORDER_ONLY_VALUE)
    asc.brcb(wide, stat, rows // 8, asc.BrcbRepeatParams(1, 8))
    asc.sub(xl, xl, wide, n)                                             # x - row max
    asc.exp(xl, xl, n)
    asc.whole_reduce_sum(stat, xl, 8, rows, 1, 1, 1)
    asc.brcb(wide, stat, rows // 8, asc.BrcbRepeatParams(1, 8))
    asc.div(yl, xl, wide, n)
    asc.set_flag(asc.HardEvent.V_MTE3, 0)
    asc.wait_flag(asc.HardEvent.V_MTE3, 0)
    asc.data_copy(yg, yl, n)


def test_brcb_as_the_row_broadcast_of_a_softmax_on_atlas_a2():
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((ROWS, 8)) * 4).astype(np.float32)
    x[3] += 80.0                         # a row far from the others: wrong without its own max
    y = np.zeros_like(x)
    res = row_softmax_kernel[1, None](x, y, ROWS, device="atlas-a2", sanitize=True)
    assert res.sanitizer.ok, str(res.sanitizer)
    xf = x.astype(np.float64)
    e = np.exp(xf - xf.max(axis=1, keepdims=True))
    ok, stats = nx.ecosystem_check(y, e / e.sum(axis=1, keepdims=True), "fp32")
    assert ok, stats
    assert len([s for s in res.trace.slices(thread="VECTOR") if s.name == "Brcb"]) == 2
