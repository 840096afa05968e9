"""sum(x * x) over all cores: a reduction per tile (``reduce_sum``), a running sum per core,
and one atomic add per core into the single result in GM.

The reduce API as pyasc documents it (python/asc/language/basic/vec_reduce.py:
``reduce_sum(dst, src, shared_tmp_buffer, count)`` and the repeat form ``(mask, repeat_time,
src_rep_stride)``), in the TPipe/TQue framework of tutorial 02_add_framework; the cross-core
step is ``set_atomic_add`` + ``data_copy_pad`` of one element, as Ascend C kernels finish a
global sum. The host zeroes the output first (the atomic adds add into it).

Run: ``python examples/kernels/sum_squares.py`` -- checks the fp32 result against a float64
golden (the device adds in another order, so within the fp32 error bound of the sum, not
bitwise), with the sanitizer on, and prints the timing and the busiest pipe.
"""
from __future__ import annotations

import numpy as np

import opsim.asc as asc
import opsim.asc.lib.runtime as rt


@asc.jit
def sum_squares_kernel(x: asc.GlobalAddress, out: asc.GlobalAddress, block_length: int,
                       tile_length: asc.ConstExpr[int]):
    x_gm, out_gm = asc.GlobalTensor(), asc.GlobalTensor()
    x_gm.set_global_buffer(x + asc.get_block_idx() * block_length, block_length)
    out_gm.set_global_buffer(out, 1)
    pipe = asc.TPipe()
    in_x = asc.TQue(asc.TPosition.VECIN, 2)
    pipe.init_buffer(in_x, 2, tile_length * 4)
    # reduce_sum's scratch: one fp32 per 256 B repeat (64 elements), in whole 32 B blocks of 8 --
    # the minimum Ascend C documents for ReduceSum's work (docs/sources.md#reduce-work)
    work_length = (max(1, tile_length // 64) + 7) // 8 * 8
    calc = asc.TBuf(asc.TPosition.VECCALC)
    pipe.init_buffer(calc, tile_length * 4 + 64 + work_length * 4)
    square = calc.get_with_offset(tile_length, 0, asc.float32)
    part = calc.get_with_offset(8, tile_length * 4, asc.float32)          # this tile's sum
    acc = calc.get_with_offset(8, tile_length * 4 + 32, asc.float32)      # the core's running sum
    work = calc.get_with_offset(work_length, tile_length * 4 + 64, asc.float32)
    asc.duplicate(acc, 0.0, 8)
    for i in range(block_length // tile_length):
        x_local = in_x.alloc_tensor(asc.float32)
        asc.data_copy(x_local, x_gm[i * tile_length:], tile_length)
        in_x.enque(x_local)
        x_local = in_x.deque(asc.float32)
        asc.mul(square, x_local, x_local, tile_length)
        in_x.free_tensor(x_local)
        asc.reduce_sum(part, square, work, tile_length)
        asc.add(acc, acc, part, 1)
    asc.set_flag(asc.HardEvent.V_MTE3, 0)                  # acc is final before MTE3 reads it
    asc.wait_flag(asc.HardEvent.V_MTE3, 0)
    asc.set_atomic_add(asc.float32)                         # the store adds into out[0]
    asc.data_copy_pad(out_gm, acc, asc.DataCopyExtParams(1, 4, 0, 0, 0))
    asc.set_atomic_none()


def golden(x: np.ndarray) -> float:
    return float(np.sum(x.astype(np.float64) ** 2))


def within_bound(got: float, x: np.ndarray) -> bool:
    """|got - exact| within the fp32 error bound of the device's sum: each square and each add
    rounds once (unit roundoff 2^-24), and no element passes through more than ~log2(n) + tiles
    adds in its pairwise tree and the running sum -- bounded here by n adds, the loosest order."""
    exact = golden(x)
    return abs(got - exact) <= (x.size + 1) * 2.0 ** -24 * exact


def run(n: int = 16 * 8192, block_dim: int = 16, tile_length: int = 2048, **launch):
    x = np.random.default_rng(11).standard_normal(n).astype(np.float32)
    out = np.zeros(1, np.float32)
    res = sum_squares_kernel[block_dim, rt.current_stream()](x, out, n // block_dim, tile_length, **launch)
    return res, x, out


def main() -> None:
    res, x, out = run(sanitize=True)
    assert within_bound(float(out[0]), x), f"sum_squares: {out[0]} vs {golden(x)}"
    assert res.sanitizer.ok, str(res.sanitizer)
    rel = abs(float(out[0]) - golden(x)) / golden(x)
    print(f"sum_squares fp32: {x.size} elements on {res.stats['block_dim']} blocks: {res.cycles} cycles, "
          f"{res.time_us:.2f} us, bound {res.stats['bound']}; {out[0]:.6g} vs float64 {golden(x):.9g} "
          f"(relative error {rel:.1e}); sanitizer: no findings")


if __name__ == "__main__":
    main()
