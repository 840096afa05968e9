"""pyasc's third style: ``asc.LocalTensorAuto`` tensors, whose flags the compiler inserts
(``insert_sync``); the names and options a pyasc program passes (``config.KernelType``,
``config.Platform``); ``duplicate`` of a device scalar; the profiler tables of a launch; and a
clear refusal of the pyasc APIs opsim does not model."""
import numpy as np
import pytest

import opsim.asc as asc
import opsim.asc.lib.runtime as rt
import opsim.asc.runtime.config as config
from opsim.simulator.errors import UnsupportedInstruction


@asc.jit
def auto_add(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: asc.ConstExpr[int],
             tile_length: asc.ConstExpr[int], tile_num: asc.ConstExpr[int]):
    offset = asc.get_block_idx() * block_length
    xg, yg, zg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x + offset)
    yg.set_global_buffer(y + offset)
    zg.set_global_buffer(z + offset)
    for i in range(tile_num):
        xl = asc.LocalTensorAuto(x.dtype, tile_length)
        yl = asc.LocalTensorAuto(y.dtype, tile_length)
        zl = asc.LocalTensorAuto(z.dtype, tile_length)
        load(i, xg, yg, xl, yl, tile_length)
        asc.add(zl, xl, yl, tile_length)
        asc.data_copy(zg[i * tile_length:], zl, count=tile_length)


@asc.jit
def load(i: int, xg: asc.GlobalTensor, yg: asc.GlobalTensor, xl: asc.LocalTensorAuto, yl: asc.LocalTensorAuto,
         tile_length: asc.ConstExpr[int]):
    asc.data_copy(xl, xg[i * tile_length:], count=tile_length)
    asc.data_copy(yl, yg[i * tile_length:], count=tile_length)


def _xy(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)


def test_local_tensor_auto_kernel_gets_the_flags_pyasc_inserts():
    x, y = _xy(8 * 2048)
    z = np.zeros_like(x)
    res = auto_add[8, rt.current_stream()](x, y, z, 2048, 256, 8, sanitize=True)
    assert np.array_equal(z, x + y)
    assert res.sanitizer.ok, res.sanitizer.text()


def test_without_the_inserted_flags_the_same_kernel_races():
    # insert_sync=False: what the compiler would build without its pass; the pipes run ahead
    x, y = _xy(8 * 2048)
    z = np.zeros_like(x)
    racy = asc.jit(insert_sync=False)(auto_add.fn)
    res = racy[8, rt.current_stream()](x, y, z, 2048, 256, 8, sanitize=True)
    kinds = {f.kind for f in res.sanitizer.findings}
    assert "race" in kinds or "uninitialized-read" in kinds


def test_buffers_of_dead_tensors_are_reused_and_the_reuse_is_ordered():
    # 64 tiles of 3 x 32 KiB tensors: 6 MiB if every tensor kept its buffer; the UB holds 192 KiB
    x, y = _xy(64 * 8192, seed=1)
    z = np.zeros_like(x)
    res = auto_add[1, rt.current_stream()](x, y, z, x.size, 8192, 64, sanitize=True)
    assert np.array_equal(z, x + y)
    assert res.sanitizer.ok, res.sanitizer.text()


def test_loads_overlap_the_adds_of_earlier_tiles():
    # the pool cycles through several buffers, so the load of tile i+1 does not wait for the
    # add of tile i (as with a double-buffered TQue)
    x, y = _xy(2 * 8192, seed=2)
    res = auto_add[1, rt.current_stream()](x, y, np.zeros_like(x), x.size, 1024, 16)
    loads = [(s.start, s.end) for s in res.trace.slices("core0.veccore0", "MTE2")]
    adds = [(s.start, s.end) for s in res.trace.slices("core0.veccore0", "VECTOR")]
    assert any(a < d and c < b for a, b in loads for c, d in adds)


@asc.jit
def gm_round_trip(x: asc.GlobalAddress, z: asc.GlobalAddress, n: asc.ConstExpr[int]):
    # z = x + 1 through GM, then z + 1 read back from GM: the MTE2 read of z must wait for the
    # MTE3 write of z (a GM dependency the inserted flags order too)
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    zg.set_global_buffer(z)
    a = asc.LocalTensorAuto(x.dtype, n)
    asc.data_copy(a, xg, count=n)
    b = asc.LocalTensorAuto(x.dtype, n)
    asc.adds(b, a, 1.0, n)
    asc.data_copy(zg, b, count=n)
    c = asc.LocalTensorAuto(x.dtype, n)
    asc.data_copy(c, zg, count=n)
    d = asc.LocalTensorAuto(x.dtype, n)
    asc.adds(d, c, 1.0, n)
    asc.data_copy(zg, d, count=n)


def test_gm_written_then_read_back_is_ordered():
    x = np.arange(4096, dtype=np.float32)
    z = np.zeros_like(x)
    res = gm_round_trip[1, rt.current_stream()](x, z, x.size, sanitize=True)
    assert np.array_equal(z, x + 2)
    assert res.sanitizer.ok, res.sanitizer.text()


@asc.jit(kernel_type=config.KernelType.AIV_ONLY, insert_sync=True)
def add_scalar(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, n: asc.ConstExpr[int]):
    xg, yg, zg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    yg.set_global_buffer(y)
    zg.set_global_buffer(z)
    xl = asc.LocalTensorAuto(x.dtype, n)
    yl = asc.LocalTensorAuto(y.dtype, 16)
    asc.data_copy(xl, xg, count=n)
    asc.data_copy(yl, yg, count=16)
    b = asc.LocalTensorAuto(y.dtype, n)
    asc.duplicate(b, yl.get_value(3), n)               # y[3], only the device has it
    zl = asc.LocalTensorAuto(z.dtype, n)
    asc.add(zl, xl, b, n)
    asc.data_copy(zg, zl, count=n)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_duplicate_broadcasts_a_get_value_scalar(dtype):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(1024).astype(dtype)
    y = rng.standard_normal(16).astype(dtype)
    z = np.zeros_like(x)
    res = add_scalar[1, rt.current_stream()](x, y, z, x.size, sanitize=True)
    golden = (x.astype(np.float64) + np.float64(y[3])).astype(dtype)   # one rounding
    assert np.array_equal(z, golden)
    assert res.sanitizer.ok, res.sanitizer.text()
    assert res.stats["kernel_type"] == "vector"


def test_duplicate_of_a_scalar_of_another_dtype_is_refused_naming_it():
    @asc.jit
    def bad(x: asc.GlobalAddress, z: asc.GlobalAddress):
        xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
        xg.set_global_buffer(x)
        zg.set_global_buffer(z)
        xl = asc.LocalTensorAuto(asc.float16, 16)
        asc.data_copy(xl, xg, count=16)
        zl = asc.LocalTensorAuto(asc.float32, 16)
        asc.duplicate(zl, xl.get_value(0), 16)
        asc.data_copy(zg, zl, count=16)

    with pytest.raises(TypeError, match=r"duplicate of a get_value\(\) scalar of fp16 into a fp32 tensor "
                                        r"\(at .*test_auto_sync.py:\d+\)"):
        bad[1, rt.current_stream()](np.ones(16, np.float16), np.zeros(16, np.float32))


def test_config_kernel_type_and_platform_are_pyasc_s():
    assert [k.name for k in config.KernelType][:2] == ["AIV_ONLY", "AIC_ONLY"]
    assert config.KernelType.MIX_AIC_1_2.kind == "mix" and config.KernelType.AIC_ONLY.kind == "cube"
    before = asc.get_device()
    try:
        config.set_platform(config.Backend.Model, config.Platform.Ascend910B1)
        assert asc.get_device() == "atlas-a2-910b1"
        config.set_platform(config.Backend.Model, config.Platform.Ascend910_9391)
        assert asc.get_device() == "atlas-a3"
        with pytest.raises(ValueError, match=r"soc_version 'Ascend910B2C': opsim has no device for this SoC; "
                                             r"the catalogue's Ascend SoCs are .*Ascend910B1"):
            config.set_platform(config.Backend.Model, config.Platform.Ascend910B2C)
    finally:
        asc.set_device(before)


def test_a_launch_has_the_msprof_tables():
    x, y = _xy(8 * 2048)
    res = auto_add[8, rt.current_stream()](x, y, np.zeros_like(x), 2048, 256, 8)
    tables = res.tables()
    assert set(tables) == {"op_summary", "pipe_utilization", "instr_exe", "code_exe"}
    head, rows = tables["op_summary"]
    assert len(rows) == 1 and rows[0][head.index("Block Dim")] == 8
    head, rows = tables["code_exe"]
    assert any("test_auto_sync.py" in r[head.index("code")] for r in rows)


def test_pyasc_apis_not_modelled_are_refused_naming_the_call_and_line():
    @asc.jit
    def fma_kernel(x: asc.GlobalAddress):
        xl = asc.LocalTensorAuto(x.dtype, 64)
        asc.fused_mul_add(xl, xl, xl, 64)

    with pytest.raises(UnsupportedInstruction, match=r"asc.fused_mul_add \(a pyasc API\) is not supported by "
                                                     r"opsim.asc \(used at .*test_auto_sync.py:\d+\); write it as"):
        fma_kernel[1, rt.current_stream()](np.zeros(64, np.float32))
    with pytest.raises(UnsupportedInstruction, match=r"asc.adv.quant \(a pyasc API\)"):
        _ = asc.adv.quant
    assert not hasattr(asc, "uint32") and getattr(asc.adv, "SoftmaxTiling", None) is None
    with pytest.raises(AttributeError, match="has no attribute 'no_such_call'"):
        _ = asc.no_such_call


@asc.jit
def adds_element(x: asc.GlobalAddress, z: asc.GlobalAddress, idx: int):
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    zg.set_global_buffer(z)
    xl = asc.LocalTensor(x.dtype, asc.TPosition.VECIN, 0, 64)
    zl = asc.LocalTensor(x.dtype, asc.TPosition.VECOUT, 256, 64)
    asc.data_copy(xl, xg, 64)
    asc.set_flag(asc.HardEvent.MTE2_V, 0)
    asc.wait_flag(asc.HardEvent.MTE2_V, 0)
    asc.adds(zl, xl, xl.get_value(idx), 64)
    asc.set_flag(asc.HardEvent.V_MTE3, 0)
    asc.wait_flag(asc.HardEvent.V_MTE3, 0)
    asc.data_copy(zg, zl, 64)


@pytest.mark.parametrize("idx", [0, 3, 63])
def test_get_value_reads_any_element_not_only_32_byte_aligned_ones(idx):
    # GetValue is a scalar load: element 3 (byte 12) is as readable as element 0
    x = np.arange(64, dtype=np.float32) * np.float32(0.5)
    z = np.zeros_like(x)
    adds_element[1, rt.current_stream()](x, z, idx)
    assert np.array_equal(z, x + x[idx])
