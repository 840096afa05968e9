"""``asc.transpose(dst, src)``: one 16 x 16 block of 16-bit elements transposed (Ascend C
Transpose, basic form; docs/sources.md#transpose), in place or not; float16 and int16; the
enhanced form and other dtypes are refused at the call."""
import numpy as np
import pytest

import opsim
import opsim.asc as asc
from opsim.simulator.errors import UnsupportedInstruction

K = 16


@asc.jit
def transpose_kernel(x: asc.GlobalAddress, z: asc.GlobalAddress, in_place: bool):
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    zg.set_global_buffer(z)
    pipe = asc.TPipe()
    qx, qz = asc.TQue(asc.TPosition.VECIN, 1), asc.TQue(asc.TPosition.VECOUT, 1)
    pipe.init_buffer(qx, 1, K * K * x.dtype.sizeof())
    pipe.init_buffer(qz, 1, K * K * x.dtype.sizeof())
    xl = qx.alloc_tensor(x.dtype)
    asc.data_copy(xl, xg, K * K)
    qx.enque(xl)
    xl = qx.deque(x.dtype)
    if in_place:
        asc.transpose(xl, xl)
        asc.set_flag(asc.HardEvent.V_MTE3, 0)
        asc.wait_flag(asc.HardEvent.V_MTE3, 0)
        asc.data_copy(zg, xl, K * K)
        qx.free_tensor(xl)
        return
    zl = qz.alloc_tensor(z.dtype)
    asc.transpose(zl, xl)
    qz.enque(zl)
    qx.free_tensor(xl)
    zl = qz.deque(z.dtype)
    asc.data_copy(zg, zl, K * K)
    qz.free_tensor(zl)


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("dtype", [np.float16, np.int16])
def test_transpose_is_the_16x16_transpose_bitwise(dtype, in_place):
    rng = np.random.default_rng(7)
    x = rng.integers(-30000, 30000, K * K).astype(np.int16).view(dtype)    # any 16-bit patterns, NaNs too
    z = np.zeros_like(x)
    transpose_kernel[1, None](x, z, in_place)
    assert np.array_equal(z.view(np.int16), x.view(np.int16).reshape(K, K).T.reshape(-1))


def test_transpose_costs_its_table_entry_and_is_clean_for_the_sanitizer():
    x = np.arange(K * K, dtype=np.float16)
    res = transpose_kernel[1, None](x, np.zeros_like(x), False, sanitize=True)
    assert res.sanitizer.ok, str(res.sanitizer)
    spec = opsim.device_spec("atlas-a2")
    k, b = spec.vector.cost["Transpose"]["fp16"]
    (s,) = [s for s in res.trace.slices(thread="VECTOR") if s.name == "Transpose"]
    assert s.end - s.start == int(np.ceil(k * K * K + b)) + round(spec.vector.head)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8])
def test_other_dtypes_are_refused_naming_the_dtype_and_the_allowed_ones(dtype):
    x = np.zeros(K * K, dtype)
    with pytest.raises(UnsupportedInstruction, match=r"transpose with dst of \w+ .*test_transpose.py:\d+.*"
                                                     r"16-bit elements: float16 or int16"):
        transpose_kernel[1, None](x, np.zeros_like(x), False)


@asc.jit
def transpose_ext_kernel(x: asc.GlobalAddress):
    xl = asc.LocalTensor(x.dtype, asc.TPosition.VECIN, 0, K * K)
    tmp = asc.LocalTensor(asc.int8, asc.TPosition.VECCALC, 4096, 1024)
    asc.transpose(xl, xl, tmp, None)


def test_the_enhanced_form_is_refused_naming_the_call():
    with pytest.raises(UnsupportedInstruction, match=r"transpose with a shared_tmp_buffer and TransposeParamsExt"):
        transpose_ext_kernel[1, None](np.zeros(K * K, np.float16))
