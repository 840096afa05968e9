"""Row-wise softmax: each block takes whole rows; per row ReduceMax, subtract it, Exp,
ReduceSum, multiply by the reciprocal. fp16/bf16 rows are cast to fp32 first and back once.

The row maximum and sum stay on the device: ``t.get_value(0)`` hands element 0 of a local
tensor to the next vector instruction as its scalar operand (read when that instruction runs).

Run: ``python examples/kernels/softmax.py`` -- checks against an fp64 softmax with the Ascend
precision standards (docs/sources.md#precision-standards): the ecosystem standard A for fp32, the mixed-tolerance
standard B for fp16/bf16 (whose tiny outputs are subnormal, where a relative error alone says
little), and prints the timing.
"""
from __future__ import annotations

import numpy as np

import opsim.asc as asc
import opsim.asc.lib.runtime as rt
from opsim.simulator import numerics as nx


@asc.jit
def softmax_kernel(x: asc.GlobalAddress, y: asc.GlobalAddress, rows_per_block: int, cols: asc.ConstExpr[int]):
    start = asc.get_block_idx() * rows_per_block * cols
    xg, yg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x + start, rows_per_block * cols)
    yg.set_global_buffer(y + start, rows_per_block * cols)
    pipe = asc.TPipe()
    qin = asc.TQue(asc.TPosition.VECIN, 2)
    qout = asc.TQue(asc.TPosition.VECOUT, 2)
    pipe.init_buffer(qin, 2, cols * x.dtype.sizeof())
    pipe.init_buffer(qout, 2, cols * y.dtype.sizeof())
    calc = asc.TBuf(asc.TPosition.VECCALC)
    pipe.init_buffer(calc, cols * 4 + 64 + 64)
    row = calc.get_with_offset(cols, 0, asc.float32)          # the row in fp32
    stat = calc.get_with_offset(8, cols * 4, asc.float32)     # max / sum scalar
    work = calc.get_with_offset(16, cols * 4 + 32, asc.float32)
    widen = x.dtype != asc.float32
    for r in range(rows_per_block):
        xl = qin.alloc_tensor(x.dtype)
        asc.data_copy(xl, xg[r * cols:], cols)
        qin.enque(xl)
        xl = qin.deque(x.dtype)
        if widen:
            asc.cast(row, xl, asc.RoundMode.CAST_NONE, cols)
        else:
            asc.adds(row, xl, 0.0, cols)                        # copy into the fp32 scratch
        qin.free_tensor(xl)
        asc.reduce_max(stat, row, work, cols)
        asc.muls(stat, stat, -1.0, 1)
        asc.adds(row, row, stat.get_value(0), cols)            # x - max
        asc.exp(row, row, cols)
        asc.reduce_sum(stat, row, work, cols)
        asc.reciprocal(stat, stat, 1)
        yl = qout.alloc_tensor(y.dtype)
        if widen:
            asc.muls(row, row, stat.get_value(0), cols)
            asc.cast(yl, row, asc.RoundMode.CAST_RINT, cols)
        else:
            asc.muls(yl, row, stat.get_value(0), cols)
        qout.enque(yl)
        yl = qout.deque(y.dtype)
        asc.data_copy(yg[r * cols:], yl, cols)
        qout.free_tensor(yl)


def truth(x: np.ndarray) -> np.ndarray:
    xf = x.astype(np.float64)
    e = np.exp(xf - xf.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def check(y: np.ndarray, x: np.ndarray, dtype: str) -> tuple[bool, dict]:
    if dtype == "fp32":
        return nx.ecosystem_check(y, truth(x), dtype)
    return nx.mixed_tolerance_check(y, truth(x), dtype)


def run(rows: int = 64, cols: int = 256, block_dim: int = 8, dtype: str = "fp32", **launch):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32).astype(nx.dtype(dtype).np_dtype)
    y = np.zeros_like(x)
    res = softmax_kernel[block_dim, rt.current_stream()](x, y, rows // block_dim, cols, **launch)
    return res, x, y


def main() -> None:
    for dtype in ("fp32", "fp16", "bf16"):
        res, x, y = run(dtype=dtype)
        ok, info = check(y, x, dtype)
        assert ok, f"softmax {dtype}: outside the precision standard: {info}"
        print(f"softmax {dtype}: {x.shape[0]} x {x.shape[1]}: {res.cycles} cycles, {res.time_us:.2f} us, "
              f"within the {dtype} precision standard")


if __name__ == "__main__":
    main()
