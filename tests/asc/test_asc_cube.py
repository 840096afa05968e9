"""The cube side of opsim.asc: the low-level path, the Matmul API (cube-only and mixed with a
vector epilogue), precision, overlap in the trace, scaling."""
import numpy as np
import pytest

import opsim.asc as asc
import opsim.asc.lib.host as host
from opsim.simulator import numerics as nx


@asc.jit
def lowlevel_mm(a: asc.GlobalAddress, b: asc.GlobalAddress, c: asc.GlobalAddress, m: int, k: int, n: int):
    ag, bg, cg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    ag.set_global_buffer(a)
    bg.set_global_buffer(b)
    cg.set_global_buffer(c)
    pipe = asc.TPipe()
    qa1, qb1 = asc.TQue(asc.TPosition.A1, 1), asc.TQue(asc.TPosition.B1, 1)
    qa2, qb2 = asc.TQue(asc.TPosition.A2, 1), asc.TQue(asc.TPosition.B2, 1)
    qc = asc.TQue(asc.TPosition.CO1, 1)
    pipe.init_buffer(qa1, 1, m * k * 2)
    pipe.init_buffer(qb1, 1, k * n * 2)
    pipe.init_buffer(qa2, 1, m * k * 2)
    pipe.init_buffer(qb2, 1, k * n * 2)
    pipe.init_buffer(qc, 1, m * n * 4)
    a1, b1 = qa1.alloc_tensor(asc.float16), qb1.alloc_tensor(asc.float16)
    asc.data_copy(a1, ag, asc.Nd2NzParams(1, m, k, 0, k, m, 1, 0))       # ND -> NZ on MTE2
    asc.data_copy(b1, bg, asc.Nd2NzParams(1, k, n, 0, n, k, 1, 0))
    qa1.enque(a1)
    qb1.enque(b1)
    a1, b1 = qa1.deque(asc.float16), qb1.deque(asc.float16)
    a2 = qa2.alloc_tensor(asc.float16)
    for i in range(m // 16):      # row block i of A: fractals i, i + M1, ... -> zZ
        asc.load_data(a2[i * 16 * k:], a1[i * 256:], asc.LoadData2DParams(0, k // 16, m // 16, 0, 0, False, 0))
    b2 = qb2.alloc_tensor(asc.float16)
    for i in range(k // 16):      # row block i of B, each fractal transposed -> nZ
        asc.load_data(b2[i * 16 * n:], b1[i * 256:], asc.LoadData2DParams(0, n // 16, k // 16, 0, 0, True, 0))
    qa2.enque(a2)
    qb2.enque(b2)
    qa1.free_tensor(a1)
    qb1.free_tensor(b1)
    a2, b2 = qa2.deque(asc.float16), qb2.deque(asc.float16)
    c1 = qc.alloc_tensor(asc.float32)
    asc.mmad(c1, a2, b2, asc.MmadParams(m, n, k))
    qc.enque(c1)
    qa2.free_tensor(a2)
    qb2.free_tensor(b2)
    c1 = qc.deque(asc.float32)
    asc.fixpipe(cg, c1, asc.FixpipeParamsV220(n, m, m, n))
    qc.free_tensor(c1)


def test_low_level_cube_path_is_exact():
    rng = np.random.default_rng(0)
    m, k, n = 32, 64, 48
    a = rng.integers(-8, 8, (m, k)).astype(np.float16)
    b = rng.integers(-8, 8, (k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float32)
    res = low_level = lowlevel_mm[1, None](a, b, c, m, k, n)
    assert res.stats["kernel_type"] == "cube"
    assert np.array_equal(c, a.astype(np.float32) @ b.astype(np.float32))
    pipes = {s.thread for s in low_level.trace.slices("core0.cubecore0")}
    assert {"MTE2", "MTE1", "CUBE", "FIXP"} <= pipes


@pytest.mark.parametrize("bias", [False, True])
def test_cube_only_matmul_is_exact_on_integers(example, bias):
    mod = example("matmul_cube_only")
    res, c, want = mod.run(m=64, k=64, n=256, cores=4, bias=bias)
    assert np.array_equal(c, want)
    assert res.stats["kernel_type"] == "cube"


def test_cube_only_matmul_meets_the_fp32_standard_on_real_data(example):
    mod = example("matmul_cube_only")
    rng = np.random.default_rng(9)
    m, k, n = 64, 256, 128
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float32)
    tiling = mod.plan(m, n, k, 4, False)
    mod.matmul_kernel[int(tiling.used_core_num), None](a, b, c, np.zeros((1, n), np.float32), tiling)
    truth = a.astype(np.float64) @ b.astype(np.float64)
    ok, info = nx.mixed_tolerance_check(c, truth, "fp32")
    assert ok, info


def _overlaps(trace, core, p, q):
    a = [(s.start, s.end) for s in trace.slices(core, p)]
    b = [(s.start, s.end) for s in trace.slices(core, q)]
    return any(a0 < b1 and b0 < a1 for a0, a1 in a for b0, b1 in b)


def test_matmul_pipes_overlap_as_the_queues_allow(example):
    mod = example("matmul_cube_only")
    res, c, want = mod.run(m=256, k=512, n=256, cores=1)
    assert np.array_equal(c, want)
    core = "core0.cubecore0"
    assert _overlaps(res.trace, core, "MTE2", "CUBE"), "the next K chunk loads while the cube multiplies"
    assert _overlaps(res.trace, core, "MTE1", "CUBE"), "L0 double buffering: MTE1 under CUBE"
    assert _overlaps(res.trace, core, "FIXP", "CUBE"), "two L0C buffers: tile i drains while i+1 multiplies"


def test_matmul_with_more_cores_takes_fewer_cycles(example):
    mod = example("matmul_cube_only")
    r2, c2, w2 = mod.run(m=128, k=128, n=512, cores=2)
    r8, c8, w8 = mod.run(m=128, k=128, n=512, cores=8)
    assert np.array_equal(c2, w2) and np.array_equal(c8, w8)
    assert r8.stats["block_dim"] > r2.stats["block_dim"]
    assert r8.cycles < r2.cycles


def test_mixed_matmul_leaky_relu_is_exact_and_overlaps_cube_with_vector(example):
    mod = example("matmul_leaky_relu")
    res, c, want = mod.run(m=256, k=128, n=256, vector_cores=2, base_m=64, base_n=128)
    assert np.array_equal(c, want)
    assert res.stats["kernel_type"] == "mix"
    t = res.trace
    cube_pipes = {s.thread for s in t.slices("core0.cubecore0")}
    vec_pipes = {s.thread for s in t.slices("core0.veccore0")}
    assert {"MTE2", "MTE1", "CUBE", "FIXP"} <= cube_pipes
    assert {"MTE2", "VECTOR", "MTE3"} <= vec_pipes
    # the cube computes a later tile while a vector core applies LeakyRelu to an earlier one
    cube = [(s.start, s.end) for s in t.slices("core0.cubecore0", "CUBE")]
    vec = [(s.start, s.end) for s in t.slices("core0.veccore0", "VECTOR")]
    assert any(a0 < b1 and b0 < a1 for a0, a1 in cube for b0, b1 in vec)


def test_mixed_matmul_fp16_random_data_meets_the_standard(example):
    mod = example("matmul_leaky_relu")
    rng = np.random.default_rng(11)
    m, k, n = 128, 128, 128
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    bias = rng.standard_normal((1, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    tiling = mod.plan(m, n, k, 2, 64, 64)
    mod.matmul_leaky_relu_kernel[1, None](a, b, c, bias, 0.01, tiling)
    x = a.astype(np.float64) @ b.astype(np.float64) + bias
    truth = np.where(x >= 0, x, x * 0.01)
    ok, info = nx.mixed_tolerance_check(c, truth, "fp32")
    assert ok, info


@asc.jit
def mixed_iterate_all(a: asc.GlobalAddress, b: asc.GlobalAddress, c: asc.GlobalAddress, tiling: asc.adv.TCubeTiling):
    idx = asc.get_block_idx()
    m_blocks = tiling.m.ceildiv(tiling.single_core_m)
    mi, ni = idx % m_blocks, idx // m_blocks
    ag, bg, cg = asc.GlobalTensor(), asc.GlobalTensor(), asc.GlobalTensor()
    ag.set_global_buffer(a + mi * tiling.k_a * tiling.single_core_m)
    bg.set_global_buffer(b + ni * tiling.single_core_n)
    cg.set_global_buffer(c + mi * tiling.n * tiling.single_core_m + ni * tiling.single_core_n)
    pipe = asc.TPipe()
    mm = asc.adv.Matmul(a=asc.adv.MatmulType(asc.TPosition.GM, asc.CubeFormat.ND, ag.dtype),
                        b=asc.adv.MatmulType(asc.TPosition.GM, asc.CubeFormat.ND, bg.dtype),
                        c=asc.adv.MatmulType(asc.TPosition.GM, asc.CubeFormat.ND, cg.dtype))
    asc.adv.register_matmul(pipe, mm, tiling)
    if idx < tiling.used_core_num:
        mm.set_tensor_a(ag)
        mm.set_tensor_b(bg)
        mm.set_tail(min(tiling.single_core_m, tiling.m - mi * tiling.single_core_m),
                    min(tiling.single_core_n, tiling.n - ni * tiling.single_core_n))
        mm.iterate_all(cg)
        mm.end()
    asc.pipe_barrier(asc.PipeID.PIPE_ALL)


def test_mixed_iterate_all_serves_every_vector_core():
    """The shape of pyasc tutorial 03: every vector core asks its cube core for a block of C."""
    rng = np.random.default_rng(12)
    m, k, n = 128, 64, 256
    a = rng.integers(-4, 4, (m, k)).astype(np.float16)
    b = rng.integers(-4, 4, (k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float32)
    t = host.MultiCoreMatmulTiling(host.get_ascendc_platform())
    t.set_dim(8)
    t.set_org_shape(m, n, k)
    t.set_shape(m, n, k)
    tiling = asc.adv.TCubeTiling()
    assert t.get_tiling(tiling) == 0
    res = mixed_iterate_all[int(tiling.used_core_num) // 2, None](a, b, c, tiling)
    assert res.stats["kernel_type"] == "mix"
    assert np.array_equal(c, a.astype(np.float32) @ b.astype(np.float32))


def test_tiling_helper_balances_the_blocks():
    t = host.MultiCoreMatmulTiling(host.get_ascendc_platform())
    t.set_dim(24)
    t.set_shape(128, 30720, 64)
    tiling = asc.adv.TCubeTiling()
    assert t.get_tiling(tiling) == 0
    assert tiling.used_core_num <= 24
    assert tiling.m.ceildiv(tiling.single_core_m) * tiling.n.ceildiv(tiling.single_core_n) == tiling.used_core_num
    assert tiling.single_core_m % 16 == 0 and tiling.single_core_n % 16 == 0


def test_bf16_matmul_meets_the_fp32_standard(example):
    import ml_dtypes
    mod = example("matmul_cube_only")
    rng = np.random.default_rng(13)
    m, k, n = 64, 128, 128
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = np.zeros((m, n), np.float32)
    tiling = mod.plan(m, n, k, 2, False)
    mod.matmul_kernel[int(tiling.used_core_num), None](a, b, c, np.zeros((1, n), np.float32), tiling)
    truth = a.astype(np.float64) @ b.astype(np.float64)
    ok, info = nx.mixed_tolerance_check(c, truth, "fp32")
    assert ok, info


def test_with_iterate_that_cannot_be_rewritten_is_refused_not_run_once(example):
    example("matmul_leaky_relu")
    src = "\n".join(["def k(mm):", "    with mm.iterate() as count:", "        pass"])
    ns = {}
    exec(compile(src, "<no source>", "exec"), ns)
    from opsim.asc.jit import _rewrite
    assert _rewrite(ns["k"]) is ns["k"]          # no source to rewrite ...

    class FakeMatmul:
        iterate = asc.adv.Matmul.iterate

        def _iterate(self):
            yield 0
    with pytest.raises(Exception, match="for count in matmul.iterate"):
        ns["k"](FakeMatmul())                     # ... so the with form refuses to run its body once


def test_rewritten_iterate_loop_keeps_the_kernel_line_numbers(example):
    mod = example("matmul_leaky_relu")
    origins = []

    class Spy:
        def on_instruction(self, core, pipe, instr, start, end):
            if instr.name == "LeakyRelu":
                origins.append(instr.origin)
    from opsim.simulator import device as device_mod
    orig = device_mod.Device.__init__

    def init(self, *a, **k):
        orig(self, *a, **k)
        self.observers.append(Spy())
    device_mod.Device.__init__ = init
    try:
        mod.run(m=128, k=64, n=128, base_m=64, base_n=64)
    finally:
        device_mod.Device.__init__ = orig
    assert origins
    lines = open(mod.__file__).read().splitlines()
    for o in set(origins):
        path, line = o.rsplit(":", 1)
        assert path == mod.__file__
        assert "asc.leaky_relu(" in lines[int(line) - 1]


@asc.jit
def mixed_lowlevel_relu(a: asc.GlobalAddress, b: asc.GlobalAddress, c: asc.GlobalAddress, m: int, k: int, n: int):
    """The cube core multiplies into C, then tells its vector cores (cross-core flag 3, mode 2);
    each vector core waits, applies Relu to its half of C's rows and writes them back."""
    cg = asc.GlobalTensor()
    cg.set_global_buffer(c)
    if asc.ascend_is_aic():
        lowlevel_mm(a, b, c, m, k, n)
        asc.cross_core_set_flag(3, 2, asc.PipeID.PIPE_FIX)
    if asc.ascend_is_aiv():
        half = m * n // 2
        mine = cg[asc.get_sub_block_idx() * half:]
        t = asc.LocalTensor(asc.float32, asc.TPosition.VECIN, 0, half)
        asc.cross_core_wait_flag(3, 2, asc.PipeID.PIPE_MTE2)
        asc.data_copy(t, mine, half)
        asc.set_flag(asc.HardEvent.MTE2_V, 0)
        asc.wait_flag(asc.HardEvent.MTE2_V, 0)
        asc.relu(t, t, half)
        asc.set_flag(asc.HardEvent.V_MTE3, 0)
        asc.wait_flag(asc.HardEvent.V_MTE3, 0)
        asc.data_copy(mine, t, half)


def test_mixed_kernel_with_manual_cross_core_flags():
    rng = np.random.default_rng(14)
    m, k, n = 32, 32, 32
    a = rng.integers(-8, 8, (m, k)).astype(np.float16)
    b = rng.integers(-8, 8, (k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float32)
    res = mixed_lowlevel_relu[1, None](a, b, c, m, k, n)
    assert res.stats["kernel_type"] == "mix"
    assert np.array_equal(c, np.maximum(a.astype(np.float32) @ b.astype(np.float32), 0))
    fix_end = max(s.end for s in res.trace.slices("core0.cubecore0", "FIXP"))
    first_load = min(s.start for s in res.trace.slices("core0.veccore0", "MTE2"))
    assert first_load >= fix_end, "the vector cores load C only after the cube core's Fixpipe"


def test_cube_work_on_a_coupled_ai_core_is_named_by_its_cube_unit():
    # A coupled AI core (Atlas training series) has every pipe; its trace process is
    # core<i>.veccore0. A fault of its cube unit (here the Fixpipe the part has no model for) must
    # not call that unit a vector core: it names core<i>.cube, with the pipe.
    from opsim.simulator.errors import UnsupportedInstruction
    a = np.ones((32, 64), np.float16)
    b = np.ones((64, 48), np.float16)
    c = np.zeros((32, 48), np.float32)
    with pytest.raises(UnsupportedInstruction) as info:
        lowlevel_mm[1, None](a, b, c, 32, 64, 48, device="atlas-training")
    assert info.value.core == "core0.cube" and info.value.pipe == "FIXP"
    assert "on core0.cube pipe FIXP in Fixpipe" in str(info.value)
    assert "veccore" not in str(info.value)
