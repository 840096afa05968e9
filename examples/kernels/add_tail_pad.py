"""Vector add of any length over several cores: whole 32 B blocks per core, a shorter last
block, and a tail tile that is not a whole number of 32 B blocks, copied with DataCopyPad.

The multi-core tiling of pyasc's python/test/generalization/basic/test_vadd_tiling.py (lengths
such as 1000 and 9999 over 16 cores) in the TPipe/TQue framework of tutorial 02_add_framework;
where that test lets the last tiles run past the end of the data, this kernel stops at it:
every block but the last gets ``block_length`` elements (a multiple of 32 B), the last one the
rest, and each block's last tile moves only its ``tail`` elements with ``data_copy_pad``
(``DataCopyExtParams`` in bytes, no padding) -- ``data_copy`` needs whole 32 B blocks.

Run: ``python examples/kernels/add_tail_pad.py`` -- checks fp32 and fp16 at lengths 9999 and
1000 bitwise against a float64 golden rounded once to the dtype, with the sanitizer on (its
memcheck would report a read past the end or of bytes never loaded), and prints the timing.
"""
from __future__ import annotations

import numpy as np

import opsim.asc as asc
import opsim.asc.lib.runtime as rt


@asc.jit
def add_tail_kernel(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, total_length: int,
                    block_length: int, tile_length: asc.ConstExpr[int]):
    start = asc.get_block_idx() * block_length
    length = min(block_length, total_length - start)           # the last block is shorter
    x_gm, y_gm, z_gm = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    x_gm.set_global_buffer(x + start, length)
    y_gm.set_global_buffer(y + start, length)
    z_gm.set_global_buffer(z + start, length)
    pipe = asc.TPipe()
    in_x = asc.TQue(asc.TPosition.VECIN, 2)
    in_y = asc.TQue(asc.TPosition.VECIN, 2)
    out_z = asc.TQue(asc.TPosition.VECOUT, 2)
    pipe.init_buffer(que=in_x, num=2, len=tile_length * x.dtype.sizeof())
    pipe.init_buffer(que=in_y, num=2, len=tile_length * y.dtype.sizeof())
    pipe.init_buffer(que=out_z, num=2, len=tile_length * z.dtype.sizeof())
    tiles = asc.ceildiv(length, tile_length)
    for i in range(tiles):
        count = min(tile_length, length - i * tile_length)     # the tail tile is shorter
        copy_in(i, x_gm, y_gm, in_x, in_y, tile_length, count)
        compute(in_x, in_y, out_z, x.dtype, count)
        copy_out(i, z_gm, out_z, tile_length, count)


@asc.jit
def copy_in(i: int, x_gm: asc.GlobalTensor, y_gm: asc.GlobalTensor, in_x: asc.TQue, in_y: asc.TQue,
            tile_length: int, count: int):
    x_local = in_x.alloc_tensor(x_gm.dtype)
    y_local = in_y.alloc_tensor(y_gm.dtype)
    nbytes = count * x_gm.dtype.sizeof()
    if nbytes % 32 == 0:
        asc.data_copy(x_local, x_gm[i * tile_length:], count=count)
        asc.data_copy(y_local, y_gm[i * tile_length:], count=count)
    else:                                                       # not whole 32 B blocks: DataCopyPad
        params = asc.DataCopyExtParams(1, nbytes, 0, 0, 0)
        pad = asc.DataCopyPadExtParams(x_gm.dtype, False, 0, 0, 0)
        asc.data_copy_pad(x_local, x_gm[i * tile_length:], params, pad)
        asc.data_copy_pad(y_local, y_gm[i * tile_length:], params, pad)
    in_x.enque(x_local)
    in_y.enque(y_local)


@asc.jit
def compute(in_x: asc.TQue, in_y: asc.TQue, out_z: asc.TQue, dtype: asc.DataType, count: int):
    x_local = in_x.deque(dtype)
    y_local = in_y.deque(dtype)
    z_local = out_z.alloc_tensor(dtype)
    asc.add(z_local, x_local, y_local, count)                   # only the elements loaded
    out_z.enque(z_local)
    in_x.free_tensor(x_local)
    in_y.free_tensor(y_local)


@asc.jit
def copy_out(i: int, z_gm: asc.GlobalTensor, out_z: asc.TQue, tile_length: int, count: int):
    z_local = out_z.deque(z_gm.dtype)
    nbytes = count * z_gm.dtype.sizeof()
    if nbytes % 32 == 0:
        asc.data_copy(z_gm[i * tile_length:], z_local, count=count)
    else:
        asc.data_copy_pad(z_gm[i * tile_length:], z_local, asc.DataCopyExtParams(1, nbytes, 0, 0, 0))
    out_z.free_tensor(z_local)


def plan(total: int, cores: int, itemsize: int) -> tuple[int, int]:
    """(blocks, block_length): ``block_length`` a multiple of 32 B, enough blocks to cover ``total``."""
    align = 32 // itemsize
    block_length = -(-total // cores)
    block_length = -(-block_length // align) * align
    return -(-total // block_length), block_length


def golden(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x + y in float64, rounded once to the dtype (the device adds in fp32 and rounds once)."""
    return (x.astype(np.float64) + y.astype(np.float64)).astype(x.dtype)


def run(total: int = 9999, cores: int = 16, tile_length: int = 256, dtype=np.float32, **launch):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(total).astype(dtype)
    y = rng.standard_normal(total).astype(dtype)
    z = np.zeros_like(x)
    blocks, block_length = plan(total, cores, x.itemsize)
    res = add_tail_kernel[blocks, rt.current_stream()](x, y, z, total, block_length, tile_length, **launch)
    return res, x, y, z


def main() -> None:
    for dtype in (np.float32, np.float16):
        for total in (9999, 1000):
            res, x, y, z = run(total=total, dtype=dtype, sanitize=True)
            assert np.array_equal(z, golden(x, y)), f"add_tail {np.dtype(dtype)} {total}: differs from the golden"
            assert res.sanitizer.ok, res.sanitizer.text()
            print(f"add_tail {np.dtype(dtype)}: {total} elements on {res.stats['block_dim']} blocks: "
                  f"{res.cycles} cycles, {res.time_us:.2f} us, bitwise equal to the golden; sanitizer: no findings")


if __name__ == "__main__":
    main()
