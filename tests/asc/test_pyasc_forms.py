"""The call forms pyasc documents for vector calls run as written: a bitwise mask given as a
list of 64-bit words, and the reduce calls' own repeat form (mask, repeat_time, src_rep_stride)."""
import numpy as np
import pytest

import opsim.asc as asc
import opsim.asc.lib.runtime as rt
from opsim.simulator.errors import UnsupportedInstruction

FULL = (1 << 64) - 1


@asc.jit
def masked_add(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, mask: list):
    xg, yg, zg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    yg.set_global_buffer(y)
    zg.set_global_buffer(z)
    xl, yl, zl = (asc.LocalTensorAuto(x.dtype, 64) for _ in range(3))
    asc.data_copy(xl, xg, count=64)
    asc.data_copy(yl, yg, count=64)
    asc.duplicate(zl, 0.0, 64)
    asc.add(zl, xl, yl, mask, 1, asc.BinaryRepeatParams())    # one repeat, a bitwise mask {high, low}
    asc.data_copy(zg, zl, count=64)


@pytest.mark.parametrize("low, lanes", [(FULL, 64), ((1 << 16) - 1, 16)])
def test_a_list_mask_selects_its_lanes(low, lanes):
    rng = np.random.default_rng(0)
    x, y = rng.random(64, dtype=np.float32), rng.random(64, dtype=np.float32)
    z = np.zeros_like(x)
    masked_add[1, rt.current_stream()](x, y, z, [0, low])
    golden = np.zeros_like(x)
    golden[:lanes] = (x[:lanes].astype(np.float64) + y[:lanes]).astype(np.float32)
    assert np.array_equal(z, golden)


@asc.jit
def reduce_forms(x: asc.GlobalAddress, z: asc.GlobalAddress, n: asc.ConstExpr[int], mask: int, repeat: int,
                 stride: int):
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    zg.set_global_buffer(z)
    xl = asc.LocalTensorAuto(x.dtype, n)
    out = asc.LocalTensorAuto(x.dtype, 16)
    work = asc.LocalTensorAuto(x.dtype, n)
    asc.data_copy(xl, xg, count=n)
    asc.duplicate(out, 0.0, 16)
    asc.reduce_sum(out, xl, work, n)                           # the count form
    asc.reduce_sum(out[8:], xl, work, mask, repeat, stride)    # the repeat form
    asc.data_copy(zg, out, count=16)


def test_reduce_repeat_form_sums_what_the_count_form_sums():
    x = np.random.default_rng(1).random(512, dtype=np.float32)
    z = np.zeros(16, np.float32)
    reduce_forms[1, rt.current_stream()](x, z, 512, 64, 8, 8)
    assert z[8] == z[0]
    assert abs(float(z[0]) - x.astype(np.float64).sum()) <= 512 * 2.0 ** -24 * x.sum()


def test_reduce_repeat_form_that_skips_elements_is_refused_naming_it():
    x = np.ones(512, np.float32)
    with pytest.raises(UnsupportedInstruction, match=r"reduce_sum in the repeat form with mask 32, 8 repeats and "
                                                     r"src_rep_stride 8 is not supported by opsim.asc \(called at "
                                                     r".*test_pyasc_forms.py:\d+\)"):
        reduce_forms[1, rt.current_stream()](x, np.zeros(16, np.float32), 512, 32, 8, 8)


@asc.jit
def int_index_views(x: asc.GlobalAddress, z: asc.GlobalAddress):
    # pyasc's g[i] and t[i] are views from element i (Ascend C operator[]), as g[i:] and t[i:]
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    zg.set_global_buffer(z)
    xl = asc.LocalTensorAuto(x.dtype, 64)
    asc.data_copy(xl, xg[64], count=64)              # x[64:128]
    zl = asc.LocalTensorAuto(x.dtype, 64)
    asc.duplicate(zl, 0.0, 64)
    asc.adds(zl[8], xl[8], 1.0, 56)                  # lanes 8.. only
    asc.data_copy(zg[0], zl, count=64)


def test_an_int_index_is_the_view_from_that_element():
    x = np.arange(128, dtype=np.float32)
    z = np.full(64, -1.0, np.float32)
    int_index_views[1, rt.current_stream()](x, z)
    golden = np.zeros(64, np.float32)
    golden[8:] = x[72:128] + 1
    assert np.array_equal(z, golden)


def test_global_tensor_get_value_is_refused_naming_it():
    @asc.jit
    def gm_scalar(x: asc.GlobalAddress):
        xg = asc.GlobalTensor()
        xg.set_global_buffer(x)
        xg.get_value(0)

    with pytest.raises(UnsupportedInstruction, match=r"GlobalTensor.get_value \(a scalar read of GM\) is not "
                                                     r"supported by opsim.asc \(called at .*test_pyasc_forms.py"):
        gm_scalar[1, rt.current_stream()](np.zeros(8, np.float32))


@asc.jit
def tbuf_alloc(x: asc.GlobalAddress, z: asc.GlobalAddress, n: asc.ConstExpr[int]):
    # pyasc's TBuf is a TQueBind: alloc_tensor / free_tensor as in its bilinear-interpolation sample
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    zg.set_global_buffer(z)
    pipe = asc.TPipe()
    tmp_buf = asc.TBuf(asc.TPosition.VECCALC)
    pipe.init_buffer(buf=tmp_buf, num=n * 4)
    xl = asc.LocalTensorAuto(x.dtype, n)
    asc.data_copy(xl, xg, count=n)
    tmp = tmp_buf.alloc_tensor(asc.float32)
    asc.muls(tmp, xl, 3.0, n)
    asc.data_copy(zg, tmp, count=n)
    tmp_buf.free_tensor(tmp)


def test_tbuf_alloc_tensor_gives_its_buffer():
    x = np.arange(64, dtype=np.float32)
    z = np.zeros_like(x)
    res = tbuf_alloc[1, rt.current_stream()](x, z, 64, sanitize=True)
    assert np.array_equal(z, x * 3)
    assert res.sanitizer.ok, res.sanitizer.text()


@asc.jit
def copy_kernel(x: asc.GlobalAddress, z: asc.GlobalAddress, n: asc.ConstExpr[int], mask: int, repeat: int,
                params: asc.CopyRepeatParams):
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    zg.set_global_buffer(z)
    pipe = asc.TPipe()
    qin, qout = asc.TQue(asc.TPosition.VECIN, 1), asc.TQue(asc.TPosition.VECOUT, 1)
    pipe.init_buffer(que=qin, num=1, len=n * x.dtype.sizeof())
    pipe.init_buffer(que=qout, num=1, len=n * z.dtype.sizeof())
    xl = qin.alloc_tensor(x.dtype)
    asc.data_copy(xl, xg, count=n)
    qin.enque(xl)
    src = qin.deque(x.dtype)
    dst = qout.alloc_tensor(x.dtype)
    asc.duplicate(dst, 0, n)
    asc.copy(dst, src, mask, repeat, params)          # pyasc's generalization/basic/test_copy.py form
    qout.enque(dst)
    qin.free_tensor(src)
    zl = qout.deque(z.dtype)
    asc.data_copy(zg, zl, count=n)
    qout.free_tensor(zl)


@pytest.mark.parametrize("dtype, mask, repeat", [(np.float32, 64, 4), (np.float16, 128, 2), (np.float32, 24, 1)])
def test_copy_repeat_form_copies_mask_times_repeat_elements(dtype, mask, repeat):
    x = np.random.default_rng(3).standard_normal(1024).astype(dtype)
    z = np.ones_like(x)
    copy_kernel[1, rt.current_stream()](x, z, x.size, mask, repeat, asc.CopyRepeatParams(1, 1, 8, 8))
    golden = np.zeros_like(x)
    golden[:mask * repeat] = x[:mask * repeat]
    assert np.array_equal(z, golden)


def test_copy_with_gaps_is_refused_naming_it():
    x = np.ones(1024, np.float32)
    with pytest.raises(UnsupportedInstruction, match=r"copy in the repeat form with mask 64, 4 repeats .* is not "
                                                     r"supported by opsim.asc \(called at .*test_pyasc_forms.py"):
        copy_kernel[1, rt.current_stream()](x, np.zeros_like(x), 1024, 64, 4, asc.CopyRepeatParams(1, 1, 16, 16))
