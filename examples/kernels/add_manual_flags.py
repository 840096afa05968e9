"""Vector add with hand-placed flags (the shape of pyasc tutorial 01_add), on opsim.

Each block adds its ``block_length`` elements in tiles. The three local buffers sit at fixed UB
addresses; every tile's copy-in, add and copy-out are ordered by explicit set_flag/wait_flag
pairs: MTE2 -> V (data loaded), V -> MTE3 (result ready), MTE3 -> MTE2 (buffer free again).

Run: ``python examples/kernels/add_manual_flags.py`` -- checks the result against numpy
(bitwise) and prints the simulated time.
"""
from __future__ import annotations

import numpy as np

import opsim.asc as asc
import opsim.asc.lib.runtime as rt

TILE_NUM = 8


@asc.jit
def add_kernel(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, block_length: int,
               buffer_num: asc.ConstExpr[int]):
    start = asc.get_block_idx() * block_length
    xg, yg, zg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x + start, block_length)
    yg.set_global_buffer(y + start, block_length)
    zg.set_global_buffer(z + start, block_length)

    tile = block_length // TILE_NUM // buffer_num
    dtype = x.dtype
    region = tile * buffer_num * dtype.sizeof()          # bytes of one double-buffered operand
    x_ub = asc.LocalTensor(dtype, asc.TPosition.VECIN, 0, tile * buffer_num)
    y_ub = asc.LocalTensor(dtype, asc.TPosition.VECIN, region, tile * buffer_num)
    z_ub = asc.LocalTensor(dtype, asc.TPosition.VECOUT, 2 * region, tile * buffer_num)

    for i in range(TILE_NUM * buffer_num):
        b = i % buffer_num                                 # which half of each buffer
        asc.data_copy(x_ub[b * tile:], xg[i * tile:], tile)
        asc.data_copy(y_ub[b * tile:], yg[i * tile:], tile)
        asc.set_flag(asc.HardEvent.MTE2_V, b)
        asc.wait_flag(asc.HardEvent.MTE2_V, b)
        asc.add(z_ub[b * tile:], x_ub[b * tile:], y_ub[b * tile:], tile)
        asc.set_flag(asc.HardEvent.V_MTE3, b)
        asc.wait_flag(asc.HardEvent.V_MTE3, b)
        asc.data_copy(zg[i * tile:], z_ub[b * tile:], tile)
        asc.set_flag(asc.HardEvent.MTE3_MTE2, b)
        asc.wait_flag(asc.HardEvent.MTE3_MTE2, b)


def main(n: int = 8 * 2048, block_dim: int = 8, buffer_num: int = 2, **launch) -> asc.KernelResult:
    rng = np.random.default_rng(0)
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    z = np.zeros_like(x)
    res = add_kernel[block_dim, rt.current_stream()](x, y, z, n // block_dim, buffer_num, **launch)
    assert np.array_equal(z, x + y), "add_manual_flags: result differs from numpy"
    print(f"add (manual flags): {n} fp32 on {block_dim} blocks: {res.cycles} cycles, {res.time_us:.2f} us, "
          f"bitwise equal to numpy")
    return res


if __name__ == "__main__":
    main()
