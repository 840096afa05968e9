"""A cube-only matmul with the Matmul high-level API (the shape of pyasc tutorial
04_matmul_cube_only): C = A . B (+ bias), fp16 in, fp32 out, on the cube cores.

The host plans the split with ``host.MultiCoreMatmulTiling``; each block computes its
single_core_m x single_core_n part of C (``calc_offsets``), the Matmul object issues the
GM -> L1 -> L0 copies, the Mmads and the Fixpipe of every base tile.

Run: ``python examples/kernels/matmul_cube_only.py`` -- checks against numpy (fp32 accumulation
of exact fp16 products) and prints the timing.
"""
from __future__ import annotations

import numpy as np

import opsim.asc as asc
import opsim.asc.lib.host as host
import opsim.asc.lib.runtime as rt


@asc.jit(matmul_cube_only=True)
def matmul_kernel(a: asc.GlobalAddress, b: asc.GlobalAddress, c: asc.GlobalAddress, bias: asc.GlobalAddress,
                  tiling: asc.adv.TCubeTiling):
    if asc.ascend_is_aic():
        off_a, off_b, off_c, off_bias, tail_m, tail_n = calc_offsets(tiling)
        ag, bg, cg, biasg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
        ag.set_global_buffer(a + off_a)
        bg.set_global_buffer(b + off_b)
        cg.set_global_buffer(c + off_c)
        biasg.set_global_buffer(bias + off_bias)
        pipe = asc.TPipe()
        mm = asc.adv.Matmul(
            a=asc.adv.MatmulType(asc.TPosition.GM, asc.CubeFormat.ND, ag.dtype),
            b=asc.adv.MatmulType(asc.TPosition.GM, asc.CubeFormat.ND, bg.dtype),
            c=asc.adv.MatmulType(asc.TPosition.GM, asc.CubeFormat.ND, cg.dtype),
            bias=asc.adv.MatmulType(asc.TPosition.GM, asc.CubeFormat.ND, biasg.dtype),
        )
        asc.adv.register_matmul(pipe, mm, tiling)
        if asc.get_block_idx() < tiling.used_core_num:
            mm.set_tensor_a(ag)
            mm.set_tensor_b(bg)
            if tiling.is_bias:
                mm.set_bias(biasg)
            mm.set_tail(tail_m, tail_n, tiling.k_a)
            mm.iterate_all(cg)
            mm.end()
        asc.pipe_barrier(asc.PipeID.PIPE_ALL)


@asc.jit
def calc_offsets(tiling: asc.adv.TCubeTiling):
    """Element offsets of this block's A rows, B columns, C block and bias; its tail sizes."""
    idx = asc.get_block_idx()
    m_blocks = tiling.m.ceildiv(tiling.single_core_m)
    mi, ni = idx % m_blocks, idx // m_blocks
    off_a = mi * tiling.k_a * tiling.single_core_m
    off_b = ni * tiling.single_core_n
    off_c = mi * tiling.n * tiling.single_core_m + ni * tiling.single_core_n
    tail_m = min(tiling.single_core_m, tiling.m - mi * tiling.single_core_m)
    tail_n = min(tiling.single_core_n, tiling.n - ni * tiling.single_core_n)
    return off_a, off_b, off_c, off_b, tail_m, tail_n


def plan(m: int, n: int, k: int, cores: int, bias: bool) -> asc.adv.TCubeTiling:
    t = host.MultiCoreMatmulTiling(host.get_ascendc_platform())
    t.set_a_type(host.TPosition.GM, host.CubeFormat.ND, host.DataType.DT_FLOAT16, False)
    t.set_b_type(host.TPosition.GM, host.CubeFormat.ND, host.DataType.DT_FLOAT16, False)
    t.set_c_type(host.TPosition.GM, host.CubeFormat.ND, host.DataType.DT_FLOAT)
    t.set_bias_type(host.TPosition.GM, host.CubeFormat.ND, host.DataType.DT_FLOAT)
    t.set_dim(cores)
    t.set_org_shape(m, n, k)
    t.set_shape(m, n, k)
    t.enable_bias(bias)
    t.set_buffer_space(-1, -1, -1)
    tiling = asc.adv.TCubeTiling()
    assert t.get_tiling(tiling) == 0, "the tiling does not fit"
    return tiling


def run(m: int = 128, k: int = 64, n: int = 1024, cores: int = 8, bias: bool = False, **launch):
    rng = np.random.default_rng(4)
    a = rng.integers(-5, 5, (m, k)).astype(np.float16)
    b = rng.integers(-5, 5, (k, n)).astype(np.float16)
    bv = rng.integers(-5, 5, (1, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    tiling = plan(m, n, k, cores, bias)
    res = matmul_kernel[int(tiling.used_core_num), rt.current_stream()](a, b, c, bv, tiling, **launch)
    want = a.astype(np.float32) @ b.astype(np.float32) + (bv if bias else 0)
    return res, c, want


def main() -> None:
    for bias in (False, True):
        res, c, want = run(bias=bias)
        # small integers: every product and partial sum is exact in fp32, so any order agrees
        assert np.array_equal(c, want), "matmul_cube_only: result differs from numpy"
        print(f"matmul (cube only{', bias' if bias else ''}): {c.shape[0]}x{c.shape[1]}: "
              f"{res.cycles} cycles, {res.time_us:.2f} us on {res.stats['block_dim']} cube cores, equal to numpy")


if __name__ == "__main__":
    main()
