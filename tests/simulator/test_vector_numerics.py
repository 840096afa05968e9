"""Vector instructions compute element-wise in fp32 and round once to the destination dtype,
whichever operand the destination aliases (the numerics write into their operands in place)."""
from __future__ import annotations

import numpy as np
import pytest

from opsim import devices
from opsim.simulator import isa
from opsim.simulator import numerics as nx
from opsim.simulator.device import Device
from opsim.simulator.isa import Copy, DataCopy
from opsim.simulator.tile import GlobalTensor

A2 = devices.load("atlas-a2")
N = 64
SCALAR = 0.3

# the golden of each instruction, written independently of simulator/isa.py
BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
          "Max": np.maximum, "Min": np.minimum}
WITH_SCALAR = {"Adds": np.add, "Muls": np.multiply, "Maxs": np.maximum, "Mins": np.minimum}
UNARY = {"Exp": np.exp, "Ln": np.log, "Abs": np.abs, "Sqrt": np.sqrt,
         "Reciprocal": lambda a: np.float32(1.0) / a}


def _inputs(np_dtype: type) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(N) * 3).astype(np_dtype)
    y = (rng.standard_normal(N) * 3).astype(np_dtype)
    x[:4] = [0.0, -0.0, 1.0, -2.5]
    y[:4] = [0.0, 2.0, -0.0, 1e-3]
    return x, y


def _run(name: str, np_dtype: type, alias: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    dt = nx.dtype(np.dtype(np_dtype))
    op = getattr(isa, name)

    def kernel(ctx, gx, gy, gout):
        q = ctx.queue("VECIN", 1, 2 * N * dt.itemsize)
        t = q.alloc(dt)
        yield DataCopy(t[0:N], gx[0:N], N)
        yield DataCopy(t[N:2 * N], gy[0:N], N)
        q.enque(t)
        t = q.deque()
        o = ctx.queue("VECOUT", 1, N * dt.itemsize)
        ot = o.alloc(dt)
        a, b = t[0:N], t[N:2 * N]
        dst = {"fresh": ot[0:N], "src0": a, "src1": b}[alias]
        if name in BINARY:
            yield op(dst, a, b, count=N)
        elif name in WITH_SCALAR:
            yield op(dst, a, scalar=SCALAR, count=N)
        else:
            yield op(dst, a, count=N)
        if alias != "fresh":
            yield Copy(ot[0:N], dst, N)
        o.enque(ot)
        ot = o.deque()
        yield DataCopy(gout[0:N], ot[0:N], N)
        q.free(t)
        o.free(ot)

    dev = Device(A2)
    tensors = []
    for arr in (x, y, np.zeros(N, np_dtype)):
        addr = dev.malloc(arr.nbytes)
        dev.write(addr, arr)
        tensors.append(GlobalTensor.contiguous(dev, addr, dt, arr.shape))
    s = dev.create_stream()
    dev.launch(s, kernel, 1, *tensors)
    dev.synchronize(s)
    return dev.read(tensors[2].addr, N * dt.itemsize).view(np_dtype)


CASES = [(name, alias) for name in [*BINARY, *WITH_SCALAR, *UNARY]
         for alias in ("fresh", "src0", "src1") if alias != "src1" or name in BINARY]


@pytest.mark.parametrize("np_dtype", [np.float32, np.float16])
@pytest.mark.parametrize(("name", "alias"), CASES)
def test_vector_instruction_rounds_once_from_fp32_whatever_the_destination_aliases(name, alias, np_dtype):
    x, y = _inputs(np_dtype)
    got = _run(name, np_dtype, alias, x, y)
    xf, yf = x.astype(np.float32), y.astype(np.float32)
    with np.errstate(all="ignore"):
        if name in BINARY:
            want32 = BINARY[name](xf, yf)
        elif name in WITH_SCALAR:
            # the constant is rounded to fp32, then to the tensor's dtype, then widened again
            scalar = np.float32(np.float32(SCALAR).astype(np_dtype))
            want32 = WITH_SCALAR[name](xf, scalar)
        else:
            want32 = UNARY[name](xf)
        want = want32.astype(np.float32).astype(np_dtype)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


@pytest.mark.parametrize("np_dtype", [np.float32, np.float16])
def test_duplicate_fills_the_value_rounded_to_the_dtype_and_keeps_the_sign_of_zero(np_dtype):
    # fills in turn with -0.0, 0.0, 0.1 and -0.0 again: each tile gets its own value's bits
    dt = nx.dtype(np.dtype(np_dtype))
    values = [-0.0, 0.0, 0.1, -0.0]

    def kernel(ctx, gout):
        o = ctx.queue("VECOUT", 1, N * dt.itemsize)
        for i, v in enumerate(values):
            t = o.alloc(dt)
            yield isa.Duplicate(t[0:N], v, count=N)
            o.enque(t)
            t = o.deque()
            yield DataCopy(gout[i * N:(i + 1) * N], t[0:N], N)
            o.free(t)

    dev = Device(A2)
    addr = dev.malloc(len(values) * N * dt.itemsize)
    gout = GlobalTensor.contiguous(dev, addr, dt, (len(values) * N,))
    s = dev.create_stream()
    dev.launch(s, kernel, 1, gout)
    dev.synchronize(s)
    got = dev.read(addr, len(values) * N * dt.itemsize).view(np_dtype).reshape(len(values), N)
    for row, v in zip(got, values):
        want = np.full(N, np.float32(v)).astype(np_dtype)      # fp32 first, then RNE to the dtype
        np.testing.assert_array_equal(row.view(np.uint8), want.view(np.uint8))
