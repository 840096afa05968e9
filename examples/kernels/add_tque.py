"""Vector add with TPipe/TQue double buffering (the shape of pyasc tutorial 02_add_framework).

CopyIn, Compute and CopyOut are jit sub-functions; the queues insert the flags: ``enque`` /
``deque`` hand a buffer from producer to consumer, ``free_tensor`` / ``alloc_tensor`` hand it
back. With ``buffer_num=2`` the load of tile i+1 overlaps the add of tile i.

Run: ``python examples/kernels/add_tque.py`` -- compares single and double buffering.
"""
from __future__ import annotations

import numpy as np

import opsim.asc as asc
import opsim.asc.lib.runtime as rt

TILE_NUM = 8


@asc.jit
def add_kernel(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int,
               tile_length: asc.ConstExpr[int], buffer_num: asc.ConstExpr[int]):
    start = asc.get_block_idx() * block_length
    xg, yg, zg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x + start)
    yg.set_global_buffer(y + start)
    zg.set_global_buffer(z + start)
    pipe = asc.TPipe()
    qx = asc.TQue(asc.TPosition.VECIN, buffer_num)
    qy = asc.TQue(asc.TPosition.VECIN, buffer_num)
    qz = asc.TQue(asc.TPosition.VECOUT, buffer_num)
    pipe.init_buffer(qx, buffer_num, tile_length * x.dtype.sizeof())
    pipe.init_buffer(qy, buffer_num, tile_length * y.dtype.sizeof())
    pipe.init_buffer(qz, buffer_num, tile_length * z.dtype.sizeof())
    for i in range(block_length // tile_length):
        copy_in(i, xg, yg, qx, qy, tile_length)
        compute(zg, qx, qy, qz, tile_length)
        copy_out(i, zg, qz, tile_length)


@asc.jit
def copy_in(i: int, xg: asc.GlobalTensor, yg: asc.GlobalTensor, qx: asc.TQue, qy: asc.TQue,
            tile_length: asc.ConstExpr[int]):
    xl = qx.alloc_tensor(xg.dtype)
    yl = qy.alloc_tensor(yg.dtype)
    asc.data_copy(xl, xg[i * tile_length:], tile_length)
    asc.data_copy(yl, yg[i * tile_length:], tile_length)
    qx.enque(xl)
    qy.enque(yl)


@asc.jit
def compute(zg: asc.GlobalTensor, qx: asc.TQue, qy: asc.TQue, qz: asc.TQue, tile_length: asc.ConstExpr[int]):
    xl = qx.deque(zg.dtype)
    yl = qy.deque(zg.dtype)
    zl = qz.alloc_tensor(zg.dtype)
    asc.add(zl, xl, yl, tile_length)
    qz.enque(zl)
    qx.free_tensor(xl)
    qy.free_tensor(yl)


@asc.jit
def copy_out(i: int, zg: asc.GlobalTensor, qz: asc.TQue, tile_length: asc.ConstExpr[int]):
    zl = qz.deque(zg.dtype)
    asc.data_copy(zg[i * tile_length:], zl, tile_length)
    qz.free_tensor(zl)


def run(n: int, block_dim: int, buffer_num: int, dtype=np.float32, tiles: int = TILE_NUM, **launch) -> asc.KernelResult:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(n).astype(dtype)
    y = rng.standard_normal(n).astype(dtype)
    z = np.zeros_like(x)
    block_length = n // block_dim
    res = add_kernel[block_dim, rt.current_stream()](x, y, z, block_length, block_length // tiles, buffer_num,
                                                     **launch)
    # numpy computes x + y correctly rounded in the array dtype, as the vector unit does
    assert np.array_equal(z, x + y), "add_tque: result differs from numpy"
    return res


def main(n: int = 8 * 4096, block_dim: int = 8) -> dict[int, asc.KernelResult]:
    out = {}
    for buffer_num in (1, 2):
        res = run(n, block_dim, buffer_num)
        out[buffer_num] = res
        print(f"add (TQue, buffer_num={buffer_num}): {n} fp32 on {block_dim} blocks: {res.cycles} cycles, "
              f"{res.time_us:.2f} us, bitwise equal to numpy")
    return out


if __name__ == "__main__":
    main()
