"""z = x + y[0]: a scalar broadcast in pyasc's third style, LocalTensorAuto tensors with the
flags inserted by the compiler (the shape of pyasc's python/test/kernels/insert_sync/
test_vadd_scalar.py and kernels/test_vadd.py).

No TPipe, no TQue, no set_flag: every tile creates its tensors afresh with
``asc.LocalTensorAuto``, and because the kernel uses it, opsim inserts the flags between the
pipes that pyasc's insert-sync pass inserts (docs/writing-kernels.md §3b). The scalar y[0] only
exists on the device: ``y_local.get_value(0)`` hands it to ``duplicate``, which broadcasts it
when the instruction executes. ``sanitize=True`` checks that the inserted flags order every
access; the launch's msprof-style op_summary row gives the time per block.

Run: ``python examples/kernels/add_scalar_auto_sync.py`` -- checks fp32 and fp16 bitwise
against a float64 golden rounded once to the dtype, and prints the timing.
"""
from __future__ import annotations

import numpy as np

import opsim.asc as asc
import opsim.asc.lib.runtime as rt
import opsim.asc.runtime.config as config


@asc.jit(kernel_type=config.KernelType.AIV_ONLY)
def add_scalar_kernel(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress,
                      block_length: asc.ConstExpr[int], tile_length: asc.ConstExpr[int],
                      tile_num: asc.ConstExpr[int]):
    offset = asc.get_block_idx() * block_length
    x_gm, y_gm, z_gm = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    x_gm.set_global_buffer(x + offset)
    y_gm.set_global_buffer(y)                       # every block reads y[0]
    z_gm.set_global_buffer(z + offset)
    head = 32 // y.dtype.sizeof()                   # one 32 B block holds y[0]
    for i in range(tile_num):
        x_local = asc.LocalTensorAuto(x.dtype, tile_length)
        y_local = asc.LocalTensorAuto(y.dtype, head)
        asc.data_copy(x_local, x_gm[i * tile_length:], count=tile_length)
        asc.data_copy(y_local, y_gm, count=head)
        y_wide = asc.LocalTensorAuto(y.dtype, tile_length)
        asc.duplicate(y_wide, y_local.get_value(0), tile_length)
        z_local = asc.LocalTensorAuto(z.dtype, tile_length)
        asc.add(z_local, x_local, y_wide, tile_length)
        asc.data_copy(z_gm[i * tile_length:], z_local, count=tile_length)


def golden(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x + y[0] in float64, rounded once to the dtype (the device adds in fp32 and rounds once)."""
    return (x.astype(np.float64) + np.float64(y[0])).astype(x.dtype)


def run(n: int = 8192, block_dim: int = 16, tile_num: int = 8, dtype=np.float32, **launch):
    rng = np.random.default_rng(2025)
    x = rng.standard_normal(n).astype(dtype)
    y = rng.standard_normal(n).astype(dtype)
    z = np.zeros_like(x)
    block_length = n // block_dim
    res = add_scalar_kernel[block_dim, rt.current_stream()](x, y, z, block_length, block_length // tile_num,
                                                            tile_num, **launch)
    return res, x, y, z


def main() -> None:
    for dtype in (np.float32, np.float16):
        res, x, y, z = run(dtype=dtype, sanitize=True)
        assert np.array_equal(z, golden(x, y)), f"add_scalar {np.dtype(dtype)}: differs from the golden"
        assert res.sanitizer.ok, res.sanitizer.text()
        head, rows = res.tables()["op_summary"]
        row = dict(zip(head, rows[0]))
        print(f"add_scalar {np.dtype(dtype)}: {x.size} elements on {row['Block Dim']} blocks: {res.cycles} cycles, "
              f"{res.time_us:.2f} us (op_summary Task Duration {row['Task Duration(us)']} us), bitwise equal to "
              f"the golden; sanitizer: no findings")


if __name__ == "__main__":
    main()
