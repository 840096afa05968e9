"""Matmul + LeakyRelu, a mixed kernel (the shape of pyasc tutorial 05_matmul_leakyrelu):
C = LeakyRelu(A . B + bias). The cube core computes base tiles of A . B + bias; each vector
core takes its tiles into UB (``get_tensor_c``), applies LeakyRelu and writes them to C with a
strided DataCopy. Block i is one cube core with its two vector cores; every vector core is a
Matmul client that owns single_core_m x single_core_n of C.

Run: ``python examples/kernels/matmul_leaky_relu.py`` -- checks against numpy and prints the
timing and how the cube and vector pipes overlapped.
"""
from __future__ import annotations

import numpy as np

import opsim.asc as asc
import opsim.asc.lib.host as host
import opsim.asc.lib.runtime as rt


@asc.jit(always_compile=True)
def matmul_leaky_relu_kernel(a: asc.GlobalAddress, b: asc.GlobalAddress, c: asc.GlobalAddress,
                             bias: asc.GlobalAddress, alpha: float, tiling: asc.adv.TCubeTiling):
    off_a, off_b, off_c, off_bias = block_offsets(tiling)
    ag, bg, cg, biasg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    ag.set_global_buffer(a + off_a)
    bg.set_global_buffer(b + off_b)
    cg.set_global_buffer(c + off_c)
    biasg.set_global_buffer(bias + off_bias)
    tile_bytes = tiling.base_m * tiling.base_n * c.dtype.sizeof()
    pipe = asc.TPipe()
    out_q = asc.TQue(asc.TPosition.VECOUT, 1)
    pipe.init_buffer(que=out_q, num=1, len=tile_bytes)
    mm = asc.adv.Matmul(
        a=asc.adv.MatmulType(asc.TPosition.GM, asc.CubeFormat.ND, ag.dtype),
        b=asc.adv.MatmulType(asc.TPosition.GM, asc.CubeFormat.ND, bg.dtype),
        c=asc.adv.MatmulType(asc.TPosition.VECCALC, asc.CubeFormat.ND, cg.dtype),
        bias=asc.adv.MatmulType(asc.TPosition.GM, asc.CubeFormat.ND, biasg.dtype),
    )
    asc.adv.register_matmul(pipe, mm, tiling)
    mm.set_tensor_a(ag)
    mm.set_tensor_b(bg)
    mm.set_bias(biasg)
    rounds_m = tiling.single_core_m // tiling.base_m
    with mm.iterate() as count:
        t = out_q.alloc_tensor(c.dtype)
        mm.get_tensor_c(t, en_sequential_write=True)
        asc.leaky_relu(t, t, alpha, count=tiling.base_m * tiling.base_n)
        out_q.enque(t)
        t = out_q.deque(c.dtype)
        start = count % rounds_m * tiling.base_m * tiling.n + count // rounds_m * tiling.base_n
        rows = asc.DataCopyParams(
            block_count=tiling.base_m,
            block_len=tiling.base_n * c.dtype.sizeof() // asc.property(asc.DEFAULT_C0_SIZE),
            src_stride=0,
            dst_stride=(tiling.n - tiling.base_n) * c.dtype.sizeof() // asc.property(asc.DEFAULT_C0_SIZE),
        )
        asc.data_copy(cg[start:], t, repeat_params=rows)
        out_q.free_tensor(t)
    mm.end()
    asc.pipe_barrier(asc.PipeID.PIPE_ALL)


@asc.jit
def block_offsets(tiling: asc.adv.TCubeTiling):
    idx = asc.get_block_idx()
    m_blocks = tiling.m.ceildiv(tiling.single_core_m)
    mi, ni = idx % m_blocks, idx // m_blocks
    return (mi * tiling.k_a * tiling.single_core_m, ni * tiling.single_core_n,
            mi * tiling.n * tiling.single_core_m + ni * tiling.single_core_n, ni * tiling.single_core_n)


def plan(m: int, n: int, k: int, vector_cores: int, base_m: int, base_n: int) -> asc.adv.TCubeTiling:
    t = host.MultiCoreMatmulTiling(host.get_ascendc_platform())
    t.set_a_type(host.TPosition.GM, host.CubeFormat.ND, host.DataType.DT_FLOAT16, False)
    t.set_b_type(host.TPosition.GM, host.CubeFormat.ND, host.DataType.DT_FLOAT16, False)
    t.set_c_type(host.TPosition.VECCALC, host.CubeFormat.ND, host.DataType.DT_FLOAT)
    t.set_bias_type(host.TPosition.GM, host.CubeFormat.ND, host.DataType.DT_FLOAT)
    t.set_dim(vector_cores)
    t.set_org_shape(m, n, k)
    t.set_shape(m, n, k)
    t.enable_bias(True)
    t.set_traverse(host.MatrixTraverse.FIRSTM)
    t.set_fix_split(base_m, base_n, -1)
    t.set_buffer_space(-1, -1, -1)
    tiling = asc.adv.TCubeTiling()
    assert t.get_tiling(tiling) == 0, "the tiling does not fit"
    return tiling


def golden(a: np.ndarray, b: np.ndarray, bias: np.ndarray, alpha: float) -> np.ndarray:
    x = a.astype(np.float32) @ b.astype(np.float32) + bias
    return np.where(x >= 0, x, x * np.float32(alpha)).astype(np.float32)


def run(m: int = 256, k: int = 128, n: int = 256, vector_cores: int = 2, base_m: int = 128, base_n: int = 128,
        alpha: float = 0.001, **launch):
    rng = np.random.default_rng(6)
    a = rng.integers(-5, 5, (m, k)).astype(np.float16)
    b = rng.integers(-5, 5, (k, n)).astype(np.float16)
    bias = rng.integers(-5, 5, (1, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    tiling = plan(m, n, k, vector_cores, base_m, base_n)
    groups = int(tiling.used_core_num) // 2          # one block = one cube core + two vector cores
    res = matmul_leaky_relu_kernel[groups, rt.current_stream()](a, b, c, bias, alpha, tiling, **launch)
    return res, c, golden(a, b, bias, alpha)


def main() -> None:
    res, c, want = run()
    assert np.array_equal(c, want), "matmul_leaky_relu: result differs from numpy"
    busy = res.stats["pipe_busy"]
    print(f"matmul + leaky_relu: {c.shape[0]}x{c.shape[1]}: {res.cycles} cycles, {res.time_us:.2f} us; "
          f"busiest CUBE {busy.get('CUBE', 0)}, FIXP {busy.get('FIXP', 0)}, VECTOR {busy.get('VECTOR', 0)} cycles; "
          f"equal to numpy")


if __name__ == "__main__":
    main()
