"""``asc.axpy``: dst = src * scalar + dst (Ascend C Axpy, docs/sources.md#axpy), the product
rounded to dst's dtype before the add, in the dtype pairs the Ascend C page lists; costed by the
device's ``Axpy`` entry; dst is read as well as written."""
import numpy as np
import pytest

import opsim
import opsim.asc as asc
from opsim.simulator.errors import UnsupportedInstruction

N = 512


@asc.jit
def axpy_kernel(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, n: int, a: float, form: str):
    xg, yg, zg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    yg.set_global_buffer(y)
    zg.set_global_buffer(z)
    xl = asc.LocalTensor(x.dtype, asc.TPosition.VECIN, 0, n)
    dl = asc.LocalTensor(y.dtype, asc.TPosition.VECOUT, 4 * n, n)
    asc.data_copy(xl, xg, n)
    asc.data_copy(dl, yg, n)
    asc.set_flag(asc.HardEvent.MTE2_V, 0)
    asc.wait_flag(asc.HardEvent.MTE2_V, 0)
    if form == "count":
        asc.axpy(dl, xl, a, count=n)
    elif form == "repeat":           # full masks, dense strides: 256 B of dst per repeat
        per = 256 // y.dtype.sizeof()
        asc.axpy(dl, xl, a, mask=per, repeat_times=n // per, repeat_params=asc.UnaryRepeatParams(1, 1, 8, 8))
    else:                            # the scalar read on the device from x[3]
        asc.axpy(dl, xl, xl.get_value(3), n)
    asc.set_flag(asc.HardEvent.V_MTE3, 0)
    asc.wait_flag(asc.HardEvent.V_MTE3, 0)
    asc.data_copy(zg, dl, n)


def _data(dtype, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(N) * 8).astype(np.float32).astype(dtype)


def _golden(x, y, a):
    """numpy: the product rounded to y's dtype, then the sum rounded to it (fp32 in between)."""
    prod = (x.astype(np.float32) * np.float32(a)).astype(y.dtype)
    return (prod.astype(np.float32) + y.astype(np.float32)).astype(y.dtype)


@pytest.mark.parametrize("form", ["count", "repeat"])
@pytest.mark.parametrize("src, dst", [(np.float16, np.float16), (np.float32, np.float32), (np.float16, np.float32)])
def test_axpy_is_the_rounded_product_then_the_rounded_sum_bitwise(src, dst, form):
    x, y = _data(src, 1), _data(dst, 2)
    a = 0.3
    z = np.zeros_like(y)
    axpy_kernel[1, None](x, y, z, N, a, form)
    want = _golden(x, y, src(a))        # the scalar has src's type
    assert np.array_equal(z.view(np.uint8), want.view(np.uint8))


def test_fp16_axpy_rounds_the_product_before_the_add():
    # x * a = 2^-11 * (1 + 2^-11 - 2^-21): rounded to fp16 it is 2^-11, and 1 + 2^-11 is a tie that
    # rounds to even (1.0); the exact 1 + x * a lies above the tie and rounds once to 1 + 2^-10
    x = np.full(N, 1 + 2.0 ** -10, np.float16)
    a = 2.0 ** -11 * (1 - 2.0 ** -11)
    y = np.ones(N, np.float16)
    z = np.zeros_like(y)
    axpy_kernel[1, None](x, y, z, N, a, "count")
    fused = np.float16(np.float64(x[0]) * a + 1.0)
    assert fused == np.float16(1 + 2.0 ** -10) and np.all(z == np.float16(1.0))


def test_a_get_value_scalar_is_read_on_the_device():
    x, y = _data(np.float32, 3), _data(np.float32, 4)
    z = np.zeros_like(y)
    axpy_kernel[1, None](x, y, z, N, 0.0, "device")
    assert np.array_equal(z, _golden(x, y, x[3]))


def test_axpy_costs_its_table_entry_in_dst_dtype():
    x, y = _data(np.float16, 1), _data(np.float32, 2)
    res = axpy_kernel[1, None](x, y, np.zeros_like(y), N, 2.0, "count")
    spec = opsim.device_spec("atlas-a2")
    k, b = spec.vector.cost["Axpy"]["fp32"]
    (s,) = [s for s in res.trace.slices(thread="VECTOR") if s.name == "Axpy"]
    assert s.end - s.start == int(np.ceil(k * N + b)) + round(spec.vector.head)


@pytest.mark.parametrize("src, dst, what", [
    (np.float32, np.float16, "src fp32 and dst fp16"),
    (np.int32, np.int32, "src int32 and dst int32"),
    (np.float16, np.int16, "src fp16 and dst int16"),
])
def test_a_dtype_pair_axpy_lacks_is_refused_naming_it_and_the_allowed_ones(src, dst, what):
    x, y = np.ones(N, src), np.ones(N, dst)
    with pytest.raises(UnsupportedInstruction, match=rf"axpy with {what}.*test_axpy.py:\d+.*"
                                                     r"fp16/fp16, fp32/fp32, fp16/fp32"):
        axpy_kernel[1, None](x, y, np.zeros_like(y), N, 1.0, "count")


def test_bf16_axpy_is_refused_on_a2():
    import ml_dtypes
    x = np.ones(N, ml_dtypes.bfloat16)
    with pytest.raises(UnsupportedInstruction, match="axpy with src bf16 and dst bf16"):
        axpy_kernel[1, None](x, x.copy(), np.zeros_like(x), N, 1.0, "count")


def test_dst_is_an_accumulator_for_the_sanitizer():
    x, y = _data(np.float32, 1), _data(np.float32, 2)
    res = axpy_kernel[1, None](x, y, np.zeros_like(y), N, 2.0, "count", sanitize=True)
    assert res.sanitizer.ok, str(res.sanitizer)
    from opsim.simulator.isa_ext import Axpy

    class T:        # a stand-in operand: what accesses() reads of a LocalTensor
        def __init__(self, addr, item):
            self.addr, self.core, self.dtype = addr, type("C", (), {"name": "core0"}), type("D", (), {"itemsize": item})
            self.region = type("R", (), {"name": "UB"})

    acc = Axpy(T(1024, 4), T(0, 2), 2.0, 64).accesses(None)
    assert ("core0/UB", 1024, 256, False) in acc and ("core0/UB", 1024, 256, True) in acc
    assert ("core0/UB", 0, 128, False) in acc
