"""Each vector call of opsim.asc computes what numpy computes (fp32 compute, one rounding) and
costs its cost-table entry; unmodelled forms fail at the call, naming it and the line."""
import numpy as np
import pytest

import opsim
import opsim.asc as asc
from opsim.simulator.errors import MemoryFault, UnsupportedInstruction
from opsim.simulator.isa_ext import tree_sum

N = 256


@asc.jit
def unary_kernel(x: asc.GlobalAddress, z: asc.GlobalAddress, n: int, op: str, scalar: float):
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    zg.set_global_buffer(z)
    xl = asc.LocalTensor(x.dtype, asc.TPosition.VECIN, 0, n)
    zl = asc.LocalTensor(z.dtype, asc.TPosition.VECOUT, 4 * n, n)
    asc.data_copy(xl, xg, n)
    asc.set_flag(asc.HardEvent.MTE2_V, 0)
    asc.wait_flag(asc.HardEvent.MTE2_V, 0)
    fn = getattr(asc, op)
    if op in ("adds", "muls", "maxs", "mins", "leaky_relu"):
        fn(zl, xl, scalar, n)
    elif op == "duplicate":
        fn(zl, scalar, n)
    else:
        fn(zl, xl, n)
    asc.set_flag(asc.HardEvent.V_MTE3, 0)
    asc.wait_flag(asc.HardEvent.V_MTE3, 0)
    asc.data_copy(zg, zl, n)


@asc.jit
def binary_kernel(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, n: int, op: str):
    xg, yg, zg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    yg.set_global_buffer(y)
    zg.set_global_buffer(z)
    xl = asc.LocalTensor(x.dtype, asc.TPosition.VECIN, 0, n)
    yl = asc.LocalTensor(x.dtype, asc.TPosition.VECIN, 4 * n, n)
    zl = asc.LocalTensor(z.dtype, asc.TPosition.VECOUT, 8 * n, n)
    asc.data_copy(xl, xg, n)
    asc.data_copy(yl, yg, n)
    asc.set_flag(asc.HardEvent.MTE2_V, 0)
    asc.wait_flag(asc.HardEvent.MTE2_V, 0)
    getattr(asc, op)(zl, xl, yl, n)
    asc.set_flag(asc.HardEvent.V_MTE3, 0)
    asc.wait_flag(asc.HardEvent.V_MTE3, 0)
    asc.data_copy(zg, zl, n)


def _data(dtype, positive=False):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(N).astype(np.float32)
    if positive:
        x = np.abs(x) + np.float32(0.1)
    return x.astype(dtype)


UNARY = {
    "exp": lambda a, s: np.exp(a), "ln": lambda a, s: np.log(a), "abs": lambda a, s: np.abs(a),
    "sqrt": lambda a, s: np.sqrt(a), "reciprocal": lambda a, s: np.float32(1) / a,
    "rsqrt": lambda a, s: np.float32(1) / np.sqrt(a), "relu": lambda a, s: np.maximum(a, np.float32(0)),
    "adds": lambda a, s: a + s, "muls": lambda a, s: a * s, "maxs": lambda a, s: np.maximum(a, s),
    "mins": lambda a, s: np.minimum(a, s), "leaky_relu": lambda a, s: np.where(a >= 0, a, a * s),
    "duplicate": lambda a, s: np.full_like(a, s),
}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
          "min": np.minimum}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_and_scalar_ops_match_numpy_bitwise(op, dtype):
    x = _data(dtype, positive=op in ("ln", "sqrt", "rsqrt"))
    z = np.zeros_like(x)
    s = 0.3
    unary_kernel[1, None](x, z, N, op, s)
    # golden: widen to fp32, one op with the scalar rounded to the dtype, round once
    sf = np.float32(dtype(s))
    with np.errstate(all="ignore"):
        want = UNARY[op](x.astype(np.float32), sf).astype(np.float32).astype(dtype)
    assert np.array_equal(z.view(np.uint8), want.view(np.uint8)), op


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_ops_match_numpy_bitwise(op, dtype):
    x, y = _data(dtype), _data(dtype)[::-1].copy()
    z = np.zeros_like(x)
    binary_kernel[1, None](x, y, z, N, op)
    want = BINARY[op](x.astype(np.float32), y.astype(np.float32)).astype(dtype)
    assert np.array_equal(z, want)


def test_vector_instruction_costs_its_table_entry():
    x = _data(np.float32)
    z = np.zeros_like(x)
    res = unary_kernel[1, None](x, z, N, "exp", 0.0)
    spec = opsim.device_spec("atlas-a2")
    k, b = spec.vector.cost["Exp"]["fp32"]
    exp = [s for s in res.trace.slices(thread="VECTOR") if s.name == "Exp"]
    assert len(exp) == 1
    head = round(spec.vector.head)
    assert exp[0].end - exp[0].start == int(np.ceil(k * N + b)) + head


@asc.jit
def cmp_select_kernel(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, n: int):
    xg, yg, zg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    yg.set_global_buffer(y)
    zg.set_global_buffer(z)
    pipe = asc.TPipe()
    buf = asc.TBuf(asc.TPosition.VECCALC)
    pipe.init_buffer(buf, 4 * n * 3 + 256)
    xl = buf.get_with_offset(n, 0, asc.float32)
    yl = buf.get_with_offset(n, 4 * n, asc.float32)
    zl = buf.get_with_offset(n, 8 * n, asc.float32)
    mask = buf.get_with_offset(n // 8, 12 * n, asc.uint8)
    asc.data_copy(xl, xg, n)
    asc.data_copy(yl, yg, n)
    asc.set_flag(asc.HardEvent.MTE2_V, 0)
    asc.wait_flag(asc.HardEvent.MTE2_V, 0)
    asc.compare(mask, xl, yl, asc.CMPMODE.GT, n)
    asc.select(zl, mask, xl, yl, asc.SELMODE.VSEL_TENSOR_TENSOR_MODE, n)   # max(x, y) via mask
    asc.compare_scalar(mask, zl, 0.5, asc.CMPMODE.LT, n)
    asc.select(zl, mask, zl, 0.5, asc.SELMODE.VSEL_TENSOR_SCALAR_MODE, n)  # then max(., 0.5)
    asc.set_flag(asc.HardEvent.V_MTE3, 0)
    asc.wait_flag(asc.HardEvent.V_MTE3, 0)
    asc.data_copy(zg, zl, n)


def test_compare_and_select():
    x, y = _data(np.float32), _data(np.float32)[::-1].copy()
    z = np.zeros_like(x)
    cmp_select_kernel[1, None](x, y, z, N)
    m = np.where(x > y, x, y)
    assert np.array_equal(z, np.where(m < np.float32(0.5), m, np.float32(0.5)))


@asc.jit
def reduce_kernel(x: asc.GlobalAddress, z: asc.GlobalAddress, n: int, rows: int):
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    zg.set_global_buffer(z)
    xl = asc.LocalTensor(asc.float32, asc.TPosition.VECIN, 0, n)
    out = asc.LocalTensor(asc.float32, asc.TPosition.VECOUT, 4 * n, 64)
    work = asc.LocalTensor(asc.float32, asc.TPosition.VECCALC, 4 * n + 256, 64)
    asc.data_copy(xl, xg, n)
    asc.set_flag(asc.HardEvent.MTE2_V, 0)
    asc.wait_flag(asc.HardEvent.MTE2_V, 0)
    asc.reduce_sum(out, xl, work, n)
    asc.reduce_max(out[8:], xl, work, n)
    asc.reduce_min(out[16:], xl, work, n)
    # one repeat per row of 64: sums into out[24:24 + rows], maxima with their index after
    asc.whole_reduce_sum(out[24:], xl, 64, rows, 1, 1, 8)
    asc.whole_reduce_max(out[32:], xl, 64, rows, 2, 1, 8, asc.ReduceOrder.ORDER_VALUE_INDEX)
    asc.set_flag(asc.HardEvent.V_MTE3, 0)
    asc.wait_flag(asc.HardEvent.V_MTE3, 0)
    asc.data_copy(zg, out, 64)


def test_reductions_follow_the_documented_order():
    x = _data(np.float32)
    z = np.zeros(64, np.float32)
    rows = N // 64
    reduce_kernel[1, None](x, z, N, rows)
    per_repeat = [tree_sum(x[i:i + 64]) for i in range(0, N, 64)]
    assert z[0] == tree_sum(np.array(per_repeat, np.float32))
    assert abs(float(z[0]) - float(x.astype(np.float64).sum())) < 1e-4
    assert z[8] == x.max() and z[16] == x.min()
    assert np.array_equal(z[24:24 + rows], np.array(per_repeat, np.float32))
    maxima = z[32:32 + 2 * rows:2]
    idx = z[33:33 + 2 * rows:2].view(np.uint32)
    assert np.array_equal(maxima, x.reshape(rows, 64).max(axis=1))
    assert np.array_equal(idx, x.reshape(rows, 64).argmax(axis=1))


@pytest.mark.parametrize("n", [88, 120])
def test_a_sum_of_negative_zeros_is_negative_zero_whatever_the_count(n):
    # IEEE: -0 + -0 = -0, so every order of the given elements sums them to -0.0; the tree's
    # padding of a repeat whose count is not a power of two must not bring in a +0.0
    x = np.full(n, -0.0, np.float32)
    z = np.ones(64, np.float32)
    reduce_kernel[1, None](x, z, n, 1)
    golden = np.float32(-0.0)
    for v in x:
        golden = np.float32(golden + v)
    assert np.signbit(golden)
    assert z[0] == 0 and np.signbit(z[0])                       # ReduceSum
    assert np.signbit(tree_sum(x[:24]))                         # a WholeReduceSum repeat of mask 24


@asc.jit
def masked_kernel(x: asc.GlobalAddress, z: asc.GlobalAddress, mode: str):
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    zg.set_global_buffer(z)
    xl = asc.LocalTensor(asc.float32, asc.TPosition.VECIN, 0, 256)
    zl = asc.LocalTensor(asc.float32, asc.TPosition.VECOUT, 1024, 256)
    asc.data_copy(xl, xg, 256)
    asc.set_flag(asc.HardEvent.MTE2_V, 0)
    asc.wait_flag(asc.HardEvent.MTE2_V, 0)
    if mode == "full":            # 4 full repeats of 64 fp32, default strides = 256 contiguous
        asc.add(zl, xl, xl, 64, 4, asc.BinaryRepeatParams())
    else:                         # half masks over strided repeats: not modelled
        asc.add(zl, xl, xl, 32, 4, asc.BinaryRepeatParams())
    asc.set_flag(asc.HardEvent.V_MTE3, 0)
    asc.wait_flag(asc.HardEvent.V_MTE3, 0)
    asc.data_copy(zg, zl, 256)


def test_repeat_form_with_full_masks_is_the_count_form():
    x = _data(np.float32)
    z = np.zeros_like(x)
    masked_kernel[1, None](x, z, "full")
    assert np.array_equal(z, x + x)


def test_unmodelled_repeat_form_names_the_call_and_the_line():
    x = _data(np.float32)
    z = np.zeros_like(x)
    with pytest.raises(UnsupportedInstruction) as err:
        masked_kernel[1, None](x, z, "half")
    msg = str(err.value)
    assert "add" in msg and "test_vector_api.py:" in msg
    line = int(msg.split("test_vector_api.py:")[1].split(")")[0])
    assert "asc.add(zl, xl, xl, 32" in open(__file__).read().splitlines()[line - 1]
    assert not z.any(), "a faulting launch leaves the host arrays as they were"


def test_bf16_arithmetic_is_not_an_a2_instruction():
    import ml_dtypes
    x = _data(np.float32).astype(ml_dtypes.bfloat16)
    z = np.zeros_like(x)
    with pytest.raises(UnsupportedInstruction, match="bf16") as err:
        unary_kernel[1, None](x, z, N, "exp", 0.0)
    assert "test_vector_api.py:" in str(err.value), "refused at the call, naming the kernel line"


def test_integer_arithmetic_is_refused_at_the_call_as_unmodelled():
    x = np.arange(N, dtype=np.int32)
    z = np.zeros_like(x)
    with pytest.raises(UnsupportedInstruction, match="integer vector arithmetic is not modelled") as err:
        unary_kernel[1, None](x, z, N, "abs", 0.0)
    assert "test_vector_api.py:" in str(err.value), "refused at the call, naming the kernel line"
    assert not z.any()


@asc.jit
def pad_rows_kernel(x: asc.GlobalAddress, z: asc.GlobalAddress, rows: int, cols: int, pad: float):
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    zg.set_global_buffer(z)
    pitch = (cols * 4 + 31) // 32 * 8                       # fp32 elements per 32 B-aligned UB row
    t = asc.LocalTensor(asc.float32, asc.TPosition.VECIN, 0, rows * pitch)
    # rows of `cols` fp32 (not a multiple of 32 B) land 32 B aligned in UB ...
    asc.data_copy_pad(t, xg, asc.DataCopyExtParams(rows, cols * 4, 0, 0, 0),
                      asc.DataCopyPadExtParams(asc.float32, False, 0, 0, 0))
    asc.set_flag(asc.HardEvent.MTE2_V, 0)
    asc.wait_flag(asc.HardEvent.MTE2_V, 0)
    asc.muls(t, t, 2.0, rows * pitch)
    asc.set_flag(asc.HardEvent.V_MTE3, 0)
    asc.wait_flag(asc.HardEvent.V_MTE3, 0)
    # ... and go back packed; a single short row with a padding value round-trips too
    asc.data_copy_pad(zg, t, asc.DataCopyExtParams(rows, cols * 4, 0, 0, 0))


def test_data_copy_pad_of_rows_not_a_multiple_of_32_bytes():
    rows, cols = 6, 13
    x = np.arange(rows * cols, dtype=np.float32)
    z = np.zeros_like(x)
    res = pad_rows_kernel[1, None](x, z, rows, cols, 0.0)
    assert np.array_equal(z, x * np.float32(2))
    loads = [s for s in res.trace.slices(thread="MTE2")]
    assert len(loads) == 1, "one DataCopyPad instruction moves all rows"


@asc.jit
def host_arithmetic_on_get_value_kernel(x: asc.GlobalAddress, how: str):
    t = asc.LocalTensor(asc.float32, asc.TPosition.VECIN, 0, 8)
    v = t.get_value(0)
    if how == "mul":
        _ = v * 2.0                               # the line the error names
    elif how == "radd":
        _ = 1.0 + v
    elif how == "compare":
        _ = v > 0
    else:
        _ = float(v)


@pytest.mark.parametrize("how", ["mul", "radd", "compare", "float"])
def test_host_arithmetic_on_get_value_is_refused_naming_the_line(how):
    # "Host arithmetic on it is refused" (docs/writing-kernels.md): only float() used to say
    # so; `v * 2` was a bare TypeError about DeferredScalar, an opsim internal
    with pytest.raises(UnsupportedInstruction, match=r"get_value\(\) result in host Python arithmetic "
                                                     r".*test_vector_api.py:\d+"):
        host_arithmetic_on_get_value_kernel[1, None](np.zeros(8, np.float32), how)


@asc.jit
def tbuf_span_kernel(x: asc.GlobalAddress, n: int, offset: int, how: str):
    pipe = asc.TPipe()
    buf = asc.TBuf(asc.TPosition.VECCALC)
    pipe.init_buffer(buf, 256)
    if how == "get":
        buf.get(asc.float32, n)
    else:
        buf.get_with_offset(n, offset, asc.float32)


@pytest.mark.parametrize("n,offset,how,ok", [
    (64, 0, "get", True), (65, 0, "get", False),
    (32, 128, "offset", True), (33, 128, "offset", False), (8, -32, "offset", False),
])
def test_a_tbuf_tensor_must_lie_inside_its_buffer(n, offset, how, ok):
    # a 256 B buffer: 64 fp32 from byte 0, 32 from byte 128; past its end the tensor overlapped
    # the next allocation unnoticed
    x = np.zeros(64, np.float32)
    if ok:
        tbuf_span_kernel[1, None](x, n, offset, how)
        return
    with pytest.raises(MemoryFault, match=r"TBuf\.get\w* of .* the buffer holds 256 B \(at .*test_vector_api.py"):
        tbuf_span_kernel[1, None](x, n, offset, how)


@asc.jit
def reduce_work_kernel(x: asc.GlobalAddress, z: asc.GlobalAddress, n: asc.ConstExpr[int], op: str,
                       work_len: asc.ConstExpr[int]):
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    zg.set_global_buffer(z)
    xl = asc.LocalTensorAuto(x.dtype, n)
    out = asc.LocalTensorAuto(x.dtype, 16)
    work = asc.LocalTensorAuto(x.dtype, work_len)
    asc.data_copy(xl, xg, count=n)
    asc.duplicate(out, 0.0, 16)
    getattr(asc, op)(out, xl, work, n)
    asc.data_copy(zg, out, count=16)


def _documented_work(op: str, n: int, itemsize: int) -> int:
    # Ascend C ReduceSum / ReduceMax / ReduceMin (docs/sources.md#reduce-work): the first round's
    # outputs -- one per repeat of 256 B (count / elementsPerRepeat, at least 1), two for max/min
    # (value and index) -- rounded up to whole 32 B blocks, in elements of the operands' dtype
    per_repeat, per_block = 256 // itemsize, 32 // itemsize
    first = max(1, n // per_repeat) * (1 if op == "reduce_sum" else 2)
    return -(-first // per_block) * per_block


@pytest.mark.parametrize("op, n, dtype", [("reduce_sum", 2048, np.float32), ("reduce_max", 2048, np.float32),
                                          ("reduce_min", 4096, np.float16), ("reduce_sum", 64, np.float16)])
def test_a_reduce_work_below_the_documented_minimum_is_refused_naming_it(op, n, dtype):
    x = np.ones(n, dtype)
    need = _documented_work(op, n, np.dtype(dtype).itemsize)
    z = np.zeros(16, dtype)
    res = reduce_work_kernel[1, None](x, z, n, op, need, sanitize=True)        # the minimum runs clean
    assert res.sanitizer.ok and z[0] == (n if op == "reduce_sum" else 1)
    short = need - 32 // np.dtype(dtype).itemsize                                 # one 32 B block less
    if short < 1:
        short = need - 1
    fp = "fp32" if dtype == np.float32 else "fp16"
    name = {"reduce_sum": "ReduceSum", "reduce_max": "ReduceMax", "reduce_min": "ReduceMin"}[op]
    with pytest.raises(MemoryFault, match=rf"{name}'s work \(shared_tmp_buffer\) .* holds {short} elements; "
                                          rf"{n} {fp} elements need at least {need} \({need * np.dtype(dtype).itemsize} B: .* "
                                          rf"the minimum Ascend C documents for {name}\).*test_vector_api.py:\d+") as err:
        reduce_work_kernel[1, None](x, np.zeros(16, dtype), n, op, short, sanitize=True)
    (finding,) = err.value.sanitizer.findings                                   # the sanitizer's kind
    assert (finding.check, finding.kind) == ("memcheck", "out-of-bounds")
