"""LeakyRelu, element-wise, double buffered with TQues; fp32/fp16 computed in place, bf16 cast
to fp32 and back (the A2 vector unit has no bf16 arithmetic).

Run: ``python examples/kernels/leaky_relu.py`` -- checks against numpy and prints the timing.
"""
from __future__ import annotations

import numpy as np

import opsim.asc as asc
import opsim.asc.lib.runtime as rt
from opsim.simulator import numerics as nx


@asc.jit
def leaky_relu_kernel(x: asc.GlobalAddress, y: asc.GlobalAddress, block_length: int, alpha: float,
                      tile_length: asc.ConstExpr[int]):
    start = asc.get_block_idx() * block_length
    xg, yg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x + start, block_length)
    yg.set_global_buffer(y + start, block_length)
    pipe = asc.TPipe()
    qin = asc.TQue(asc.TPosition.VECIN, 2)
    qout = asc.TQue(asc.TPosition.VECOUT, 2)
    pipe.init_buffer(qin, 2, tile_length * x.dtype.sizeof())
    pipe.init_buffer(qout, 2, tile_length * y.dtype.sizeof())
    widen = x.dtype == asc.bfloat16
    if widen:                                   # fp32 scratch for the cast
        calc = asc.TBuf(asc.TPosition.VECCALC)
        pipe.init_buffer(calc, tile_length * 4)
        xf = calc.get(asc.float32)
    for i in range(block_length // tile_length):
        xl = qin.alloc_tensor(x.dtype)
        asc.data_copy(xl, xg[i * tile_length:], tile_length)
        qin.enque(xl)
        xl = qin.deque(x.dtype)
        yl = qout.alloc_tensor(y.dtype)
        if widen:
            asc.cast(xf, xl, asc.RoundMode.CAST_NONE, tile_length)
            asc.leaky_relu(xf, xf, alpha, tile_length)
            asc.cast(yl, xf, asc.RoundMode.CAST_RINT, tile_length)
        else:
            asc.leaky_relu(yl, xl, alpha, tile_length)
        qout.enque(yl)
        qin.free_tensor(xl)
        yl = qout.deque(y.dtype)
        asc.data_copy(yg[i * tile_length:], yl, tile_length)
        qout.free_tensor(yl)


def golden(x: np.ndarray, alpha: float) -> np.ndarray:
    """x if x >= 0 else x * alpha, in fp32 with alpha rounded to the computing dtype, one rounding."""
    compute = np.float16 if x.dtype == np.float16 else np.float32
    a = np.float32(compute(alpha))
    xf = x.astype(np.float32)
    return np.where(xf >= 0, xf, xf * a).astype(x.dtype)


def run(n: int = 8 * 4096, block_dim: int = 8, dtype: str = "fp32", alpha: float = 0.01,
        tile_length: int = 1024, **launch) -> tuple[asc.KernelResult, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    x = rng.standard_normal(n).astype(np.float32).astype(nx.dtype(dtype).np_dtype)
    y = np.zeros_like(x)
    res = leaky_relu_kernel[block_dim, rt.current_stream()](x, y, n // block_dim, alpha, tile_length, **launch)
    return res, x, y


def main() -> None:
    for dtype in ("fp32", "fp16", "bf16"):
        res, x, y = run(dtype=dtype)
        same = np.array_equal(y.view(np.uint8), golden(x, 0.01).view(np.uint8))
        assert same, f"leaky_relu {dtype}: result differs from the numpy golden"
        print(f"leaky_relu {dtype}: {x.size} elements: {res.cycles} cycles, {res.time_us:.2f} us, "
              f"bitwise equal to numpy")


if __name__ == "__main__":
    main()
