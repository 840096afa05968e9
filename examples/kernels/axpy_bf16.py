"""z = a * x + y in bf16: mixed precision, as a real kernel does it where the vector unit has no
bf16 arithmetic (Atlas A2): cast bf16 -> fp32 (exact), compute in fp32, cast back once with
round-to-nearest-even (``RoundMode.CAST_RINT``).

pyasc's python/test/generalization/basic/test_axpy.py calls ``asc.axpy(dst, src, scalar,
count)`` (dst += src * scalar); Axpy has no bf16 form (fp16 and fp32 only, docs/sources.md#axpy),
so this kernel writes it as ``muls`` + ``add`` in fp32 (the order ``asc.axpy`` rounds in), in
the TPipe/TQue framework of tutorial 02_add_framework, with the fp32 intermediates in a TBuf.
``a`` is a kernel parameter: the scalar operand has the tensors' type (fp32 here).

Run: ``python examples/kernels/axpy_bf16.py`` -- checks the result bitwise against numpy
computing the same fp32 steps (upcast, multiply, add, round once to bf16: the device's rule of
docs/writing-kernels.md §2), and within one bf16 ulp of a float64 golden; runs
with the sanitizer on and prints the timing and the VECTOR pipe's share.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

import opsim.asc as asc
import opsim.asc.lib.runtime as rt


@asc.jit
def axpy_kernel(x: asc.GlobalAddress, y: asc.GlobalAddress, z: asc.GlobalAddress, a: float, block_length: int,
                tile_length: asc.ConstExpr[int]):
    start = asc.get_block_idx() * block_length
    x_gm, y_gm, z_gm = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    x_gm.set_global_buffer(x + start, block_length)
    y_gm.set_global_buffer(y + start, block_length)
    z_gm.set_global_buffer(z + start, block_length)
    pipe = asc.TPipe()
    in_x, in_y = asc.TQue(asc.TPosition.VECIN, 2), asc.TQue(asc.TPosition.VECIN, 2)
    out_z = asc.TQue(asc.TPosition.VECOUT, 2)
    for q in (in_x, in_y, out_z):
        pipe.init_buffer(q, 2, tile_length * x.dtype.sizeof())
    wide = asc.TBuf(asc.TPosition.VECCALC)
    pipe.init_buffer(wide, 2 * tile_length * 4)
    xf = wide.get_with_offset(tile_length, 0, asc.float32)
    yf = wide.get_with_offset(tile_length, tile_length * 4, asc.float32)
    for i in range(block_length // tile_length):
        x_local, y_local = in_x.alloc_tensor(x.dtype), in_y.alloc_tensor(y.dtype)
        asc.data_copy(x_local, x_gm[i * tile_length:], tile_length)
        asc.data_copy(y_local, y_gm[i * tile_length:], tile_length)
        in_x.enque(x_local)
        in_y.enque(y_local)
        x_local, y_local = in_x.deque(x.dtype), in_y.deque(y.dtype)
        asc.cast(xf, x_local, asc.RoundMode.CAST_NONE, tile_length)     # bf16 -> fp32 is exact
        asc.cast(yf, y_local, asc.RoundMode.CAST_NONE, tile_length)
        in_x.free_tensor(x_local)
        in_y.free_tensor(y_local)
        asc.muls(xf, xf, a, tile_length)                                  # a * x, rounded to fp32
        asc.add(xf, xf, yf, tile_length)                                  # + y, rounded to fp32
        z_local = out_z.alloc_tensor(z.dtype)
        asc.cast(z_local, xf, asc.RoundMode.CAST_RINT, tile_length)     # one rounding to bf16
        out_z.enque(z_local)
        z_local = out_z.deque(z.dtype)
        asc.data_copy(z_gm[i * tile_length:], z_local, tile_length)
        out_z.free_tensor(z_local)


def golden_fp32_steps(x: np.ndarray, y: np.ndarray, a: float) -> np.ndarray:
    """numpy's fp32 arithmetic on the upcast operands, rounded once to bf16 (ml_dtypes: RNE)."""
    xf, yf = x.astype(np.float32), y.astype(np.float32)
    return (xf * np.float32(a) + yf).astype(ml_dtypes.bfloat16)


def ulps_from_float64(z: np.ndarray, x: np.ndarray, y: np.ndarray, a: float) -> int:
    """The largest distance, in bf16 ulps, of z from a * x + y computed in float64 and rounded to bf16."""
    exact = (np.float64(np.float32(a)) * x.astype(np.float64) + y.astype(np.float64)).astype(ml_dtypes.bfloat16)
    zi = z.view(np.int16).astype(np.int32)
    ei = exact.view(np.int16).astype(np.int32)
    # sign-magnitude bit patterns to a monotonic integer line
    zi = np.where(zi < 0, -(zi & 0x7FFF), zi)
    ei = np.where(ei < 0, -(ei & 0x7FFF), ei)
    return int(np.max(np.abs(zi - ei)))


def run(n: int = 16 * 4096, block_dim: int = 16, tile_length: int = 1024, a: float = 2.5, **launch):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(n) * 10).astype(ml_dtypes.bfloat16)
    y = (rng.standard_normal(n) * 10).astype(ml_dtypes.bfloat16)
    z = np.zeros_like(x)
    res = axpy_kernel[block_dim, rt.current_stream()](x, y, z, a, n // block_dim, tile_length, **launch)
    return res, x, y, z


def main() -> None:
    a = 2.5
    res, x, y, z = run(a=a, sanitize=True)
    assert np.array_equal(z.view(np.uint16), golden_fp32_steps(x, y, a).view(np.uint16)), "axpy bf16: bits differ"
    ulps = ulps_from_float64(z, x, y, a)
    assert ulps <= 1, f"axpy bf16: {ulps} ulps from the float64 golden"
    assert res.sanitizer.ok, res.sanitizer.text()
    busy = res.stats["pipe_busy"]["VECTOR"]
    print(f"axpy bf16: {x.size} elements on {res.stats['block_dim']} blocks: {res.cycles} cycles, "
          f"{res.time_us:.2f} us, bound {res.stats['bound']} (busiest VECTOR {busy}); bitwise the fp32 steps, "
          f"{ulps} ulp from float64; sanitizer: no findings")


if __name__ == "__main__":
    main()
