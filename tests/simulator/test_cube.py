"""The cube core: GM->L1 (ND->NZ), LoadData L1->L0A/L0B, Mmad, Fixpipe, capacities, costs."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from opsim import devices
from opsim.simulator import numerics as nx
from opsim.simulator.cube import (CopyGmToL1, CopyUbToNz, Fixpipe, GmMatrix, LoadData, Mmad, align16, nd_to_nz,
                            nz_bytes, nz_to_nd)
from opsim.simulator.device import Device
from opsim.simulator.errors import CapacityError, MemoryFault, SimulatorError
from opsim.simulator.isa import Copy, DataCopy, DataCopyPad
from opsim.simulator.tile import GlobalTensor
from opsim.traces.trace import Trace

SPEC = devices.load("atlas-a2")
BF16 = ml_dtypes.bfloat16


def _device(functional: bool = True) -> tuple[Device, Trace]:
    tr = Trace("instruction", SPEC.clock_hz)
    return Device(SPEC, trace=tr, functional=functional), tr


def _put(dev: Device, x: np.ndarray) -> GlobalTensor:
    addr = dev.malloc(x.nbytes)
    dev.write(addr, np.ascontiguousarray(x))
    return GlobalTensor.contiguous(dev, addr, nx.dtype(x.dtype), x.shape)


def _out(dev: Device, shape: tuple[int, int], dtype) -> GlobalTensor:
    dt = nx.dtype(dtype)
    return GlobalTensor.contiguous(dev, dev.malloc(shape[0] * shape[1] * dt.itemsize), dt, shape)


def _read(dev: Device, t: GlobalTensor) -> np.ndarray:
    return dev.read(t.addr, t.numel * t.dtype.itemsize).view(t.dtype.np_dtype).reshape(t.shape).copy()


def _run(dev: Device, kernel, unit: str = "cube") -> None:
    s = dev.create_stream()
    dev.launch(s, kernel, 1, unit=unit)
    dev.synchronize()


def _matmul_kernel(A: GmMatrix, B: GmMatrix, C: GmMatrix, bm: int, bn: int, bk: int, step: int):
    """A small K-looped matmul through L1 (step base-K tiles per copy) and double-buffered L0."""
    M, K, N = A.rows, A.cols, B.cols
    dt = A.dtype

    def kernel(ctx):
        a1 = ctx.queue("A1", 2, nz_bytes(bm, bk * step, dt.itemsize))
        b1 = ctx.queue("B1", 2, nz_bytes(bk * step, bn, dt.itemsize))
        a2 = ctx.queue("A2", 2, nz_bytes(bm, bk, dt.itemsize))
        b2 = ctx.queue("B2", 2, nz_bytes(bk, bn, dt.itemsize))
        co = ctx.queue("CO1", 1, nz_bytes(bm, bn, 4))
        for m0 in range(0, M, bm):
            for n0 in range(0, N, bn):
                mm, nn = min(bm, M - m0), min(bn, N - n0)
                c = co.alloc(nx.FP32)
                first = True
                for k0 in range(0, K, bk * step):
                    kk = min(bk * step, K - k0)
                    x = a1.alloc(dt)
                    yield CopyGmToL1(x, A, m0, mm, k0, kk)
                    a1.enque(x)
                    y = b1.alloc(dt)
                    yield CopyGmToL1(y, B, k0, kk, n0, nn)
                    b1.enque(y)
                    x, y = a1.deque(), b1.deque()
                    for s in range(0, kk, bk):
                        ks = min(bk, kk - s)
                        p = a2.alloc(dt)
                        yield LoadData(p, x, mm, kk, 0, mm, s, ks)
                        a2.enque(p)
                        q = b2.alloc(dt)
                        yield LoadData(q, y, kk, nn, s, ks, 0, nn)
                        b2.enque(q)
                        p, q = a2.deque(), b2.deque()
                        yield Mmad(c, p, q, mm, ks, nn, accumulate=not first)
                        first = False
                        a2.free(p)
                        b2.free(q)
                    a1.free(x)
                    b1.free(y)
                co.enque(c)
                c = co.deque()
                yield Fixpipe(C, m0, n0, c, mm, nn)
                co.free(c)
    return kernel


# ---------------------------------------------------------------------------------------------
# layouts
# ---------------------------------------------------------------------------------------------

def test_nd_to_nz_puts_16_column_blocks_outermost_and_pads_with_zeros():
    mat = np.arange(20 * 35, dtype=np.float32).reshape(20, 35)
    img = nd_to_nz(mat)
    assert img.shape == (3, 32, 16)                      # ceil(35/16) blocks, rows padded to 32
    assert img[1, 3, 2] == mat[3, 16 + 2]                # element (r, c) at [c//16, r, c%16]
    assert np.all(img[2, :, 3:] == 0) and np.all(img[:, 20:, :] == 0)
    assert np.array_equal(nz_to_nd(img, 20, 35), mat)


def test_gm_to_l1_copy_converts_an_nd_block_to_nz_in_l1():
    dev, _ = _device()
    x = (np.arange(40 * 50) % 251).astype(np.float16).reshape(40, 50)
    A = GmMatrix.nd(_put(dev, x))
    seen = {}

    def kernel(ctx):
        q = ctx.queue("A1", 1, nz_bytes(24, 40, 2))
        t = q.alloc(nx.FP16)
        yield CopyGmToL1(t, A, 5, 20, 3, 33)            # rows 5..24, cols 3..35 of the ND matrix
        q.enque(t)
        t = q.deque()
        seen["l1"] = t
        q.free(t)

    _run(dev, kernel)
    img = seen["l1"].array(nz_bytes(20, 33, 2) // 2)
    assert np.array_equal(nz_to_nd(img, 20, 33), x[5:25, 3:36])
    assert np.all(img.reshape(3, 32, 16)[2, :, 1:] == 0)  # column padding is zero


def test_ub_rows_written_in_nz_read_back_as_the_nd_matrix():
    dev, _ = _device()
    rows, cols = 20, 40
    ws = dev.malloc(nz_bytes(rows, cols, 2))
    S = GmMatrix.nz(dev, ws, nx.BF16, rows, cols)
    data = np.random.default_rng(1).standard_normal((rows, cols)).astype(BF16)
    src = _put(dev, data)

    def kernel(ctx):
        qi = ctx.queue("VECIN", 2, align16(cols) * 2)
        qo = ctx.queue("VECOUT", 2, align16(cols) * 2)
        for r in range(rows):
            t = qi.alloc(nx.BF16)
            yield DataCopyPad(t, src[r * cols:(r + 1) * cols], cols)
            qi.enque(t)
            t = qi.deque()
            o = qo.alloc(nx.BF16)
            yield Copy(o, t, align16(cols))
            qi.free(t)
            qo.enque(o)
            o = qo.deque()
            yield CopyUbToNz(S, r, 0, o, cols)              # ceil(40/16) = 3 blocks of 32 B
            qo.free(o)

    _run(dev, kernel, unit="vector")
    assert np.array_equal(S.read(0, rows, 0, cols), data)
    assert np.array_equal(nz_to_nd(dev.read(ws, nz_bytes(rows, cols, 2)).view(BF16), rows, cols), data)


def test_a_plain_datacopy_into_l1_runs_on_the_cube_cores_mte2():
    dev, tr = _device()
    x = np.arange(256, dtype=np.float16)
    src = _put(dev, x)
    seen = {}

    def kernel(ctx):
        q = ctx.queue("A1", 1, 512)
        t = q.alloc(nx.FP16)
        yield DataCopy(t, src[0:256])
        q.enque(t)
        seen["l1"] = t = q.deque()
        q.free(t)

    _run(dev, kernel)
    assert np.array_equal(seen["l1"].array(256), x)
    assert [s.name for s in tr.slices(process="core0.cubecore0", thread="MTE2")] == ["DataCopy"]


# ---------------------------------------------------------------------------------------------
# numerics
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [BF16, np.float16])
def test_tiled_matmul_equals_fp32_accumulation_rounded_once(dtype):
    dev, _ = _device()
    rng = np.random.default_rng(7)
    M, K, N = 45, 200, 70                                 # none a multiple of 16
    a = rng.standard_normal((M, K)).astype(dtype)
    b = rng.standard_normal((K, N)).astype(dtype)
    C32 = _out(dev, (M, N), nx.FP32)
    C = _out(dev, (M, N), dtype)
    A, B = GmMatrix.nd(_put(dev, a)), GmMatrix.nd(_put(dev, b))
    s = dev.create_stream()
    dev.launch(s, _matmul_kernel(A, B, GmMatrix.nd(C32), 32, 48, 32, 2), 1, unit="cube")
    dev.launch(s, _matmul_kernel(A, B, GmMatrix.nd(C), 32, 48, 32, 2), 1, unit="cube")
    dev.synchronize()
    exact = a.astype(np.float64) @ b.astype(np.float64)
    got32 = _read(dev, C32)
    # fp32 accumulation of exact products: relative error a few fp32 ulps of the row norms
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert np.all(np.abs(got32 - exact) <= 1e-5 * scale)
    # the fp16/bf16 output is that fp32 result rounded once (RNE), not a second rounding
    assert np.array_equal(_read(dev, C), got32.astype(dtype))


def test_mmad_overwrites_or_accumulates_in_l0c():
    dev, _ = _device()
    rng = np.random.default_rng(3)
    a1, b1, a2, b2 = (rng.integers(-3, 4, size=s).astype(BF16) for s in ((16, 32), (32, 16), (16, 32), (32, 16)))
    mats = [GmMatrix.nd(_put(dev, m)) for m in (a1, b1, a2, b2)]
    outs = [_out(dev, (16, 16), nx.FP32) for _ in range(2)]

    def kernel(ctx):
        qa, qb = ctx.queue("A1", 2, 2048), ctx.queue("B1", 2, 2048)
        la, lb = ctx.queue("A2", 1, 1024), ctx.queue("B2", 1, 1024)
        co = ctx.queue("CO1", 1, 1024)
        c = co.alloc(nx.FP32)
        for step, (A, B, acc) in enumerate([(mats[0], mats[1], False), (mats[2], mats[3], True),
                                            (mats[0], mats[1], False)]):
            x, y = qa.alloc(nx.BF16), qb.alloc(nx.BF16)
            yield CopyGmToL1(x, A, 0, 16, 0, 32)
            yield CopyGmToL1(y, B, 0, 32, 0, 16)
            qa.enque(x), qb.enque(y)
            x, y = qa.deque(), qb.deque()
            p, q = la.alloc(nx.BF16), lb.alloc(nx.BF16)
            yield LoadData(p, x, 16, 32, 0, 16, 0, 32)
            yield LoadData(q, y, 32, 16, 0, 32, 0, 16)
            la.enque(p), lb.enque(q)
            p, q = la.deque(), lb.deque()
            yield Mmad(c, p, q, 16, 32, 16, accumulate=acc)
            la.free(p), lb.free(q), qa.free(x), qb.free(y)
            if step >= 1:
                co.enque(c)
                c = co.deque()
                yield Fixpipe(GmMatrix.nd(outs[step - 1]), 0, 0, c, 16, 16)
                co.free(c)
                c = co.alloc(nx.FP32)
        co.enque(c)
        co.free(co.deque())

    _run(dev, kernel)
    f = lambda m: m.astype(np.float64)  # noqa: E731 - small integers: every product and sum is exact
    assert np.array_equal(_read(dev, outs[0]), f(a1) @ f(b1) + f(a2) @ f(b2))
    assert np.array_equal(_read(dev, outs[1]), f(a1) @ f(b1))


def test_load_data_transpose_gives_the_transposed_tile():
    dev, _ = _device()
    s = (np.arange(48 * 32) % 97).astype(BF16).reshape(48, 32)     # stored K x M (as S for Sᵀ·input)
    b = (np.arange(48 * 16) % 13).astype(BF16).reshape(48, 16)     # K x N
    S, B = GmMatrix.nd(_put(dev, s)), GmMatrix.nd(_put(dev, b))
    C = _out(dev, (32, 16), nx.FP32)

    def kernel(ctx):
        qa, qb = ctx.queue("A1", 1, nz_bytes(48, 32, 2)), ctx.queue("B1", 1, nz_bytes(48, 16, 2))
        la, lb, co = ctx.queue("A2", 1, 4096), ctx.queue("B2", 1, 4096), ctx.queue("CO1", 1, 4096)
        x, y = qa.alloc(nx.BF16), qb.alloc(nx.BF16)
        yield CopyGmToL1(x, S, 0, 48, 0, 32)
        yield CopyGmToL1(y, B, 0, 48, 0, 16)
        qa.enque(x), qb.enque(y)
        x, y = qa.deque(), qb.deque()
        p, q = la.alloc(nx.BF16), lb.alloc(nx.BF16)
        yield LoadData(p, x, 48, 32, 0, 48, 0, 32, transpose=True)      # A = sᵀ: 32 x 48
        yield LoadData(q, y, 48, 16, 0, 48, 0, 16)
        la.enque(p), lb.enque(q)
        p, q = la.deque(), lb.deque()
        c = co.alloc(nx.FP32)
        yield Mmad(c, p, q, 32, 48, 16, accumulate=False)
        co.enque(c)
        c = co.deque()
        yield Fixpipe(GmMatrix.nd(C), 0, 0, c, 32, 16)
        co.free(c), la.free(p), lb.free(q), qa.free(x), qb.free(y)

    _run(dev, kernel)
    assert np.array_equal(_read(dev, C), s.astype(np.float64).T @ b.astype(np.float64))


# ---------------------------------------------------------------------------------------------
# costs
# ---------------------------------------------------------------------------------------------

def _one_tile(dev: Device, dtype, m: int, k: int, n: int):
    a = np.ones((m, k), dtype=dtype)
    b = np.ones((k, n), dtype=dtype)
    A, B = GmMatrix.nd(_put(dev, a)), GmMatrix.nd(_put(dev, b))
    C = GmMatrix.nd(_out(dev, (m, n), nx.FP32))
    return _matmul_kernel(A, B, C, align16(m), align16(n), align16(k), 1)


def test_mmad_costs_its_fractals_at_the_spec_mac_rate():
    dev, tr = _device(functional=False)
    _run(dev, _one_tile(dev, BF16, 128, 64, 256))
    (mmad,) = list(tr.slices(thread="CUBE"))
    fractals = (128 // 16) * (64 // 16) * (256 // 16)
    assert mmad.end - mmad.start == fractals * 16 ** 3 // SPEC.cube.macs_per_cycle["bf16"] == 512
    dev, tr = _device(functional=False)
    _run(dev, _one_tile(dev, np.float32, 32, 16, 16))           # fp32 at a quarter of the rate
    (mmad,) = list(tr.slices(thread="CUBE"))
    assert mmad.end - mmad.start == 2 * 1 * 1 * 16 ** 3 // SPEC.cube.macs_per_cycle["fp32"] == 8


def test_load_data_moves_l1_to_l0a_at_512_and_to_l0b_at_256_bytes_per_cycle():
    dev, tr = _device(functional=False)
    _run(dev, _one_tile(dev, BF16, 128, 64, 128))               # A and B tiles of 16 KiB each
    loads = {s.detail.split()[0]: s.end - s.start for s in tr.slices(thread="MTE1")}
    assert loads["L1->L0A"] == math.ceil(128 * 64 * 2 / SPEC.rates.l1_to_l0a) + SPEC.mte1.startup == 32
    assert loads["L1->L0B"] == math.ceil(64 * 128 * 2 / SPEC.rates.l1_to_l0b) + SPEC.mte1.startup == 64


def test_second_gm_to_l1_load_of_a_block_hits_l2_and_is_faster():
    dev, tr = _device(functional=False)
    x = np.zeros((128, 256), dtype=BF16)
    A = GmMatrix.nd(_put(dev, x))

    def kernel(ctx):
        q = ctx.queue("A1", 1, nz_bytes(128, 256, 2))
        for _ in range(2):
            t = q.alloc(nx.BF16)
            yield CopyGmToL1(t, A, 0, 128, 0, 256)
            q.enque(t)
            q.free(q.deque())

    _run(dev, kernel)
    first, second = (s.end - s.start for s in tr.slices(thread="MTE2"))
    nbytes = 128 * 256 * 2
    # misses at the per-AI-core GM rate (32 B/cycle), hits at the L2 rate (110 B/cycle)
    assert second == pytest.approx(nbytes / SPEC.rates.l2_read + SPEC.mte2.startup, abs=2)
    assert first > nbytes / SPEC.rates.gm_read > second


# ---------------------------------------------------------------------------------------------
# capacities and misuse
# ---------------------------------------------------------------------------------------------

def test_a_tile_plan_exceeding_l0c_raises_capacity_error_naming_l0c():
    dev, _ = _device(functional=False)

    def kernel(ctx):
        ctx.queue("CO1", 2, nz_bytes(128, 256, 4))              # 2 x 128 KiB > 128 KiB of L0C
        yield from ()

    with pytest.raises(CapacityError) as e:
        _run(dev, kernel)
    assert e.value.buffer == "L0C" and e.value.available < e.value.needed


@pytest.mark.parametrize("which", ["L0A", "L0B", "L0C"])
def test_an_mmad_tile_larger_than_the_l0_buffer_memory_raises_capacity_error(which):
    dev, _ = _device(functional=False)
    m, k, n = {"L0A": (256, 256, 16), "L0B": (16, 256, 256), "L0C": (256, 16, 256)}[which]

    def kernel(ctx):
        a = ctx.queue("A2", 1, 32768).alloc(nx.BF16)
        b = ctx.queue("B2", 1, 32768).alloc(nx.BF16)
        c = ctx.queue("CO1", 1, 65536).alloc(nx.FP32)
        yield Mmad(c, a, b, m, k, n, accumulate=False)

    with pytest.raises(CapacityError) as e:
        _run(dev, kernel)
    assert e.value.buffer == which


def test_an_mmad_tile_larger_than_its_buffer_overruns_it():
    dev, _ = _device(functional=False)

    def kernel(ctx):
        a = ctx.queue("A2", 1, 1024).alloc(nx.BF16)             # 1 KiB holds 32 x 16 bf16
        b = ctx.queue("B2", 1, 1024).alloc(nx.BF16)
        c = ctx.queue("CO1", 1, 4096).alloc(nx.FP32)
        yield Mmad(c, a, b, 32, 32, 16, accumulate=False)

    with pytest.raises(MemoryFault, match="L0A buffer"):
        _run(dev, kernel)


def test_an_mmad_of_a_shape_seen_before_still_checks_its_own_buffers():
    # the issue cost of a shape is remembered per device spec; the buffer checks are not
    dev, _ = _device(functional=False)

    def kernel(ctx):
        a = ctx.queue("A2", 1, 4096).alloc(nx.BF16)
        b = ctx.queue("B2", 1, 4096).alloc(nx.BF16)
        c = ctx.queue("CO1", 1, 4096).alloc(nx.FP32)
        yield Mmad(c, a, b, 32, 32, 16, accumulate=False)       # fits: the shape is remembered
        small = ctx.queue("A2", 1, 1024).alloc(nx.BF16)         # 1 KiB holds 32 x 16 bf16
        yield Mmad(c, small, b, 32, 32, 16, accumulate=True)

    with pytest.raises(MemoryFault, match="L0A buffer"):
        _run(dev, kernel)


def test_a_load_data_of_a_shape_seen_before_still_checks_its_tile_against_its_l1_block():
    dev, _ = _device(functional=False)

    def kernel(ctx):
        l1 = ctx.queue("A1", 1, nz_bytes(64, 64, 2)).alloc(nx.BF16)
        l0 = ctx.queue("A2", 1, nz_bytes(32, 32, 2)).alloc(nx.BF16)
        yield LoadData(l0, l1, 64, 64, 0, 32, 0, 32)            # fits: the shape is remembered
        yield LoadData(l0, l1, 64, 64, 48, 32, 0, 32)           # rows [48, 80) of a 64-row block

    with pytest.raises(MemoryFault, match="outside the 64 x 64 L1 block"):
        _run(dev, kernel)


def test_coarse_repeat_instructions_are_refused_in_numeric_runs():
    dev, _ = _device(functional=True)

    def kernel(ctx):
        a = ctx.queue("A2", 1, 4096).alloc(nx.BF16)
        b = ctx.queue("B2", 1, 4096).alloc(nx.BF16)
        c = ctx.queue("CO1", 1, 4096).alloc(nx.FP32)
        yield Mmad(c, a, b, 16, 64, 16, accumulate=False, repeat=2)

    with pytest.raises(SimulatorError, match="timing-only"):
        _run(dev, kernel)


def test_coarse_repeat_costs_the_sum_of_its_repeats():
    costs = []
    for repeat in (1, 4):
        dev, tr = _device(functional=False)

        def kernel(ctx, repeat=repeat):
            a = ctx.queue("A2", 1, nz_bytes(128, 64, 2)).alloc(nx.BF16)
            b = ctx.queue("B2", 1, nz_bytes(64, 256, 2)).alloc(nx.BF16)
            c = ctx.queue("CO1", 1, nz_bytes(128, 256, 4)).alloc(nx.FP32)
            yield Mmad(c, a, b, 128, 64 * repeat, 256, accumulate=False, repeat=repeat)

        _run(dev, kernel)
        costs.append(sum(s.end - s.start for s in tr.slices(thread="CUBE")))
    assert costs == [512, 4 * 512]


# ---------------------------------------------------------------------------------------------
# coarse (sampled) loads and the L2 model
# ---------------------------------------------------------------------------------------------

def _coarse_load_kernel(blocks_per_core, cols=(0, 4096)):
    """Each cube core loads its list of 256 x 4096 bf16 ND blocks (2 MiB), columns ``cols``, as
    coarse copies of 256 x 256 pieces (128 KiB of L1)."""
    c0, c1 = cols

    def kernel(ctx):
        q = ctx.queue("A1", 1, nz_bytes(256, 256, 2))
        for block in blocks_per_core[ctx.block_idx]:
            t = q.alloc(nx.BF16)
            yield CopyGmToL1(t, block, 0, 256, c0, c1 - c0, repeat=(c1 - c0) // 256, repeat_axis="cols")
            q.enque(t)
            q.free(q.deque())

    return kernel


def _blocks(dev: Device, n: int) -> list[GmMatrix]:
    return [GmMatrix.nd(_out(dev, (256, 4096), BF16)) for _ in range(n)]


def test_coarse_loads_of_the_same_block_show_every_core_the_same_l2_lines():
    dev = Device(SPEC, functional=False)
    x, y = _blocks(dev, 2)
    nbytes = 256 * 4096 * 2
    s = dev.create_stream()
    dev.launch(s, _coarse_load_kernel([[x], [x], [y]]), 3, unit="cube", l2_sample=64)
    dev.synchronize()
    # x: the first core to load it misses, the second hits every sampled line; y misses
    assert dev.l2.hit_bytes == nbytes and dev.l2.miss_bytes == 2 * nbytes


def test_a_coarse_load_hits_the_lines_its_exact_pieces_share_as_the_pieces_do():
    # rows of 4000 bf16 (8000 B, not a multiple of the 512 B line): every 256-column piece's
    # row run starts in a line the piece before ends in. Loaded piece by piece (the exact
    # schedule) the later piece finds that line in the L2; one coarse copy of the four pieces
    # walked it once, as a miss (0 of 524,288 bytes hit, against 172,032 for the pieces)
    totals = []
    for repeat in (1, 4):
        dev = Device(SPEC, functional=False)
        blk = GmMatrix.nd(_out(dev, (256, 4000), BF16))

        def kernel(ctx, repeat=repeat, blk=blk):
            q = ctx.queue("A1", 1, nz_bytes(256, 256, 2))
            for c0 in range(0, 1024, 256 * repeat):
                t = q.alloc(nx.BF16)
                yield CopyGmToL1(t, blk, 0, 256, c0, 256 * repeat, repeat=repeat, repeat_axis="cols")
                q.enque(t)
                q.free(q.deque())

        _run(dev, kernel)
        totals.append((dev.l2.hit_bytes, dev.l2.miss_bytes))
    assert totals[0][0] > 0
    assert totals[1] == totals[0]


def test_a_sampled_load_finds_what_another_view_of_the_same_bytes_brought_in():
    # the sample is a function of the address: a load of the left half of the block's columns
    # (256 runs of 4 KiB) meets the lines a load of the whole block (one 2 MiB run) left behind
    dev = Device(SPEC, functional=False)
    (x,) = _blocks(dev, 1)
    s = dev.create_stream()
    dev.launch(s, _coarse_load_kernel([[x]]), 1, unit="cube", l2_sample=64)
    dev.synchronize()
    before = dev.l2.hit_bytes
    dev.launch(s, _coarse_load_kernel([[x]], cols=(0, 2048)), 1, unit="cube", l2_sample=64)
    dev.synchronize()
    assert dev.l2.hit_bytes - before == 256 * 2048 * 2


def test_l2_sampling_is_for_timing_runs_only():
    dev = Device(SPEC, functional=True)
    with pytest.raises(SimulatorError, match="timing-only"):
        dev.launch(dev.create_stream(), _coarse_load_kernel([[]]), 1, unit="cube", l2_sample=64)


@pytest.mark.parametrize("between, hits", [(1, True), (2, False)])
def test_a_sampled_load_fills_the_l2_as_its_whole_transfer_would(between, hits):
    # a 5 MiB L2: x (2 MiB) survives one other 2 MiB block but not two, although the L2 is
    # shown only one line in 64 of each copy
    spec = SPEC.replace_many({"l2.size": 5 * 2 ** 20})
    dev = Device(spec, functional=False)
    x, *others = _blocks(dev, 1 + between)
    s = dev.create_stream()
    dev.launch(s, _coarse_load_kernel([[x, *others]]), 1, unit="cube", l2_sample=64)
    dev.synchronize()
    before = dev.l2.hit_bytes
    dev.launch(s, _coarse_load_kernel([[x]]), 1, unit="cube", l2_sample=64)
    dev.synchronize()
    assert dev.l2.hit_bytes - before == (256 * 4096 * 2 if hits else 0)
