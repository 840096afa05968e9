"""aclnnEmbeddingDenseBackward on Atlas A2: the deterministic kernel (tiling key 10/11) and the
uncast fp16/bf16 kernels (ProcessForHalf, key 0; the small-dim kernel with the outCasted
workspace, key 100), as ops-nn writes them (docs/sources.md#embedding-a2-determinist,
#embedding-a2-uncast-half). The goldens below are plain numpy in the source's summation order,
written from the source's description, not from opsim's kernels."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import opsim
from opsim.kernels.ascend import embedding_backward as eb
from opsim.kernels.common import TensorDesc
from opsim.simulator import numerics as nx

OP = "embedding_dense_backward"
NP = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}
CORES = 48                       # atlas-a2 vector cores
SORT_DIM = eb.SMALL_DIM_THRESH + 8


def _run(**kw):
    kw.setdefault("trace", "off")
    return opsim.run(OP, device="atlas-a2", **kw)


def _bits(a):
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8).tobytes()


def _names(res):
    return [s.name for s in res.trace.slices(process="host")]


def _slices(n, parts):
    q, r = divmod(n, parts)
    out, lo = [], 0
    for b in range(parts):
        hi = lo + q + (1 if b < r else 0)
        out.append((lo, hi))
        lo = hi
    return out


def _runs(keys, lo, hi):
    """[(key, start, end)] of equal keys in keys[lo:hi]."""
    out, s = [], lo
    for j in range(lo + 1, hi + 1):
        if j == hi or keys[j] != keys[s]:
            out.append((int(keys[s]), s, j))
            s = j
    return out


def _chunk_sum(rows, size):
    """fp32: each chunk of ``size`` rows summed from 0 in order, the chunks added in order."""
    total = np.zeros(rows[0].shape, np.float32)
    for c in range(0, len(rows), size):
        part = np.zeros(rows[0].shape, np.float32)
        for r in rows[c:c + size]:
            part = part + r.astype(np.float32)
        total = total + part
    return total


def det_golden(g, idx, nw, cores=CORES, pad=-1):
    """Deterministic kernel: the core holding a run's first sorted row sums it, its rows inside
    that core's slice from the last to the first, then the rows past the slice in order, each
    part in chunks of 10 summed from 0 and added into the zeroed out row."""
    order = np.argsort(idx, kind="stable")
    keys = idx[order]
    n = idx.size
    bounds = _slices(n, min(cores, n))
    out = np.zeros((nw, g.shape[1]), np.float32)
    for k, a, e in _runs(keys, 0, n):
        if k == pad:
            continue
        hi = next(h for lo, h in bounds if lo <= a < h)
        back = [g[order[j]] for j in range(min(e, hi) - 1, a - 1, -1)]
        fwd = [g[order[j]] for j in range(hi, e)]
        for part in (back, fwd):
            for c in range(0, len(part), 10):
                out[k] = out[k] + _chunk_sum(part[c:c + 10], 10)
    return out


def half_golden(g, idx, nw, cores=CORES):
    """ProcessForHalf: each core sums its runs in fp32 (11 rows per accumulator before the UB
    cache); a core's first and last index go to two stage slots, any other straight to out
    (RINT cast); the stage slots, in core order, are grouped by index and summed the same way."""
    order = np.argsort(idx, kind="stable")
    keys = idx[order]
    n = idx.size
    dt = g.dtype
    out = np.zeros((nw, g.shape[1]), dt)
    zero = np.zeros(g.shape[1], np.float32)
    slots = []
    for lo, hi in _slices(n, min(cores, n)):
        first, end = int(keys[lo]), int(keys[hi - 1])
        s0 = s1 = zero
        for k, a, e in _runs(keys, lo, hi):
            total = _chunk_sum([g[order[j]] for j in range(a, e)], 11)
            if first == end:
                s0 = total
            elif k == first:
                s0 = total
            elif k == end:
                s1 = total
            else:
                out[k] = total.astype(dt)
        slots += [(first, s0), (end, s1)]
    i = 0
    while i < len(slots):
        j = i
        while j < len(slots) and slots[j][0] == slots[i][0]:
            j += 1
        out[slots[i][0]] = _chunk_sum([s for _, s in slots[i:j]], 11).astype(dt)
        i = j
    return out


def _zipf(rng, n, nw):
    return ((rng.zipf(1.3, n) - 1) % nw).astype(np.int32)


# -- the deterministic kernel (fp32 rows) ------------------------------------------------------

def test_deterministic_call_runs_the_determinist_kernel_after_the_sort_on_min_cores_rows():
    rng = np.random.default_rng(1)
    idx = _zipf(rng, 1500, 40)
    g = rng.standard_normal((1500, 16)).astype(np.float32)
    res = _run(grad=g, indices=idx, num_weights=40, deterministic=True, trace="instruction")
    assert _names(res) == ["Sort", "ZerosLike", "MemSet", "EmbeddingDenseGradV2"]
    t = res.tiling
    assert t.det_kernel and t.tiling_key == 10 and not t.row_kernel and t.block_dim == CORES
    t0, t1 = {s.name: (s.start, s.end) for s in res.trace.slices(process="host")}["EmbeddingDenseGradV2"]
    cores = {s.process for s in res.trace.slices(thread="MTE2") if t0 <= s.start < t1}
    assert len(cores) == CORES
    # per row the index is loaded before the position (two 4 B loads, each waited on by the scalar)
    small = [s for s in res.trace.slices(thread="MTE2") if t0 <= s.start < t1 and s.nbytes == 4]
    assert len(small) >= 2 * idx.size


def test_deterministic_sum_is_bitwise_the_source_order_and_the_same_for_every_seed():
    rng = np.random.default_rng(2)
    idx = _zipf(rng, 800, 40)
    g = rng.standard_normal((800, 16)).astype(np.float32)
    outs = [_run(grad=g, indices=idx, num_weights=40, deterministic=True, seed=s).outputs["out"] for s in range(3)]
    assert len({_bits(o) for o in outs}) == 1
    want = det_golden(g, idx, 40)
    assert _bits(outs[0]) == _bits(want)
    # the order matters: a plain position-order sum differs in some bits
    assert _bits(want) != _bits(eb.golden({"grad": g, "indices": idx}, {"num_weights": 40})["out"])


def test_deterministic_sum_with_padding_and_embedding_chunks_keeps_the_order():
    rng = np.random.default_rng(3)
    idx = _zipf(rng, 700, 25)
    g = rng.standard_normal((700, 20)).astype(np.float32)
    res = _run(grad=g, indices=idx, num_weights=25, deterministic=True, padding_idx=1, tiling={"e_chunk": 8})
    assert res.tiling.e_chunk == 8
    assert _bits(res.outputs["out"]) == _bits(det_golden(g, idx, 25, pad=1))


def test_deterministic_flushes_every_ten_rows_of_a_run():
    # AtomicAddInUb increments the count before the check (addCount == LIMIT_COUNT_NUM): 21 rows of
    # one index on one core flush after rows 10 and 20 and at the slice's first row: 3 stores
    g = np.random.default_rng(4).standard_normal((21, SORT_DIM)).astype(np.float32)
    idx = np.zeros(21, np.int32)
    res = _run(grad=g, indices=idx, num_weights=1, deterministic=True, tiling={"block_dim": 1},
               trace="instruction")
    stores = [s for s in res.trace.slices(thread="MTE3") if s.detail.endswith("atomic add")]
    assert len(stores) == 3
    assert _bits(res.outputs["out"]) == _bits(det_golden(g, idx, 1, cores=1))


def test_deterministic_scale_counts_and_scales_inside_the_one_launch():
    # tiling key 11: ProcessAndScale<false, true> (InitWorkspace, SyncAll, the kernel, SyncAll, scale)
    rng = np.random.default_rng(5)
    idx = rng.integers(0, 30, 400).astype(np.int32)
    g = rng.standard_normal((400, 24)).astype(np.float32)
    res = _run(grad=g, indices=idx, num_weights=30, deterministic=True, scale_grad_by_freq=True,
               trace="launch")
    assert _names(res) == ["Sort", "ZerosLike", "MemSet", "EmbeddingDenseGradV2"]
    assert res.tiling.tiling_key == 11 and res.tiling.block_dim == 30
    counts = np.bincount(idx, minlength=30).astype(np.float32)
    want = det_golden(g, idx, 30, cores=30) * (np.float32(1) / np.maximum(counts, 1))[:, None]
    assert _bits(res.outputs["out"]) == _bits(want.astype(np.float32))


def test_deterministic_scale_of_rows_too_wide_to_share_the_ub_with_the_scale_stage_is_bitwise_the_source_order():
    # 2048 fp32 per row: the kernel's row and two accumulators (24 KiB) and the scale kernel's
    # buffers overflow the 192 KiB UB together; ProcessAndScale destroys the first TPipe before
    # the scale kernel plans its own, so the call runs, with the padding row zero
    rng = np.random.default_rng(6)
    idx = rng.integers(0, 30, 90).astype(np.int32)
    g = rng.standard_normal((90, 2048)).astype(np.float32)
    res = _run(grad=g, indices=idx, num_weights=30, padding_idx=4, deterministic=True, scale_grad_by_freq=True)
    assert res.tiling.tiling_key == 11 and res.tiling.block_dim == 30
    counts = np.bincount(idx, minlength=30).astype(np.float32)
    want = det_golden(g, idx, 30, cores=30, pad=4) * (np.float32(1) / np.maximum(counts, 1))[:, None]
    assert np.all(res.outputs["out"][4] == 0)
    assert _bits(res.outputs["out"]) == _bits(want.astype(np.float32))


def test_a_hot_index_is_summed_by_one_core_in_deterministic_mode_so_the_kernel_takes_longer():
    # one index for all 960 rows: by default every core sums its 20 rows and flushes them
    # atomically; in deterministic mode core 0 walks its 20 rows and continues through the other
    # cores' 940 (ContinueCompute) while they stop at their first row: one core does all the work
    g = np.random.default_rng(9).standard_normal((960, SORT_DIM)).astype(np.float32)
    idx = np.zeros(960, np.int32)
    off = _run(grad=g, indices=idx, num_weights=1, trace="instruction")
    det = _run(grad=g, indices=idx, num_weights=1, trace="instruction", deterministic=True)
    k = {s.name: s.end - s.start for s in off.trace.slices(process="host")}["EmbeddingDenseGradV2"]
    kd = {s.name: s.end - s.start for s in det.trace.slices(process="host")}["EmbeddingDenseGradV2"]
    adders = {s.process for s in det.trace.slices(thread="VECTOR") if s.name == "Add"}
    assert len(adders) == 1 and len({s.process for s in off.trace.slices(thread="VECTOR") if s.name == "Add"}) == CORES
    assert kd > 10 * k
    assert _bits(det.outputs["out"]) == _bits(det_golden(g, idx, 1))


# -- uncast fp16/bf16 rows ---------------------------------------------------------------------

def test_uncast_half_rows_take_process_for_half_with_determinism_on_or_off():
    spec = opsim.device_spec("atlas-a2")
    big = {"grad": TensorDesc((8192, 1024), nx.BF16), "indices": TensorDesc((8192,), nx.INT32),
           "out": TensorDesc((151936, 1024), nx.BF16)}
    for det in (False, True):
        t = eb.plan(spec, big, {"num_weights": 151936, "deterministic": det})
        assert not t.cast_grad and t.half_kernel and not t.det_kernel and t.tiling_key == 0
        assert t.region("stage") is not None and t.region("stage_idx") is not None
        assert t.region("acc32") is None and t.acc_dtype == "bf16"
    # past 100 MiB but embeddingDim <= 512, determinism off: the small-dim kernel on 2-byte rows
    sd = {"grad": TensorDesc((8192, 512), nx.FP16), "indices": TensorDesc((8192,), nx.INT32),
          "out": TensorDesc((151936, 512), nx.FP16)}
    t = eb.plan(spec, sd, {"num_weights": 151936})
    assert t.small_dim_kernel and t.tiling_key == 100 and t.region("outcast") is not None
    assert t.sd_max_rows == eb.small_dim_max_rows(spec.ub.size, 512, 2)
    assert eb.plan(spec, sd, {"num_weights": 151936, "deterministic": True}).half_kernel
    with pytest.raises(opsim.OpError) as e:
        eb.plan(spec, sd, {"num_weights": 151936, "scale_grad_by_freq": True}, {"cast_grad": False})
    assert e.value.code == 561002 and "scaleGradByFreq" in e.value.message


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("det", [False, True])
def test_process_for_half_is_bitwise_the_source_order(dtype, det):
    # embeddingDim past the small-dim branch, in chunks of 256 (two formerEmbeddingDim passes and a tail)
    rng = np.random.default_rng(6)
    idx = _zipf(rng, 800, 40)
    g = rng.standard_normal((800, SORT_DIM)).astype(np.float32).astype(NP[dtype])
    res = _run(grad=g, indices=idx, num_weights=40, tiling={"cast_grad": False, "e_chunk": 256},
               deterministic=det, trace="launch")
    assert _names(res) == ["Sort", "ZerosLike", "MemSet", "EmbeddingDenseGradV2"]
    assert res.tiling.half_kernel and res.outputs["out"].dtype == NP[dtype]
    assert _bits(res.outputs["out"]) == _bits(half_golden(g, idx, 40))


def test_process_for_half_writes_out_without_atomics_and_merges_core_edges_after_sync_all():
    rng = np.random.default_rng(7)
    idx = np.sort(rng.integers(0, 30, 600)).astype(np.int32)
    g = rng.standard_normal((600, SORT_DIM)).astype(ml_dtypes.bfloat16)
    res = _run(grad=g, indices=idx, num_weights=30, tiling={"cast_grad": False}, trace="instruction")
    assert not [s for s in res.trace.slices(thread="MTE3") if s.detail.endswith("atomic add")]
    # every core stores its first and last index (outIndex, 4 B) and their sums (outStage, fp32);
    # after the SyncAll the 2 x 48 stage rows are read back once each (ProcessGmData)
    t0, t1 = {s.name: (s.start, s.end) for s in res.trace.slices(process="host")}["EmbeddingDenseGradV2"]
    idx_stores = [s for s in res.trace.slices(thread="MTE3") if t0 <= s.start < t1 and s.nbytes == 4]
    assert len(idx_stores) == 2 * CORES and len({s.process for s in idx_stores}) == CORES
    stage_loads = [s for s in res.trace.slices(thread="MTE2") if t0 <= s.start < t1 and s.detail == "fp32"]
    assert len(stage_loads) == 2 * CORES
    assert min(s.start for s in stage_loads) >= max(s.end for s in idx_stores)
    assert _bits(res.outputs["out"]) == _bits(half_golden(g, idx, 30))


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_small_dim_half_rows_sum_in_the_fp32_workspace_then_cast(dtype):
    # key 100, isDifferentDtype_: InitOutput + SyncAll, rows cast to fp32 in UB, fp32 atomics into
    # outCasted, SyncAll, each core casts its share with RINT. Each index in one core's tile: one
    # atomic add per index into zeros, so the bits are the position-order fp32 sum, rounded once
    rng = np.random.default_rng(8)
    n = 512
    idx = np.empty(n, np.int32)
    for c in range(CORES):
        lo, hi = eb.small_dim_rows(n, CORES, c)
        idx[lo:hi] = rng.permutation(np.arange(lo, hi) // 5)
    g = rng.standard_normal((n, 20)).astype(np.float32).astype(NP[dtype])
    res = _run(grad=g, indices=idx, num_weights=n // 5 + 1, tiling={"cast_grad": False}, trace="instruction")
    assert _names(res) == ["MemSet", "EmbeddingDenseGradV2"] and res.tiling.tiling_key == 100
    casts = [s for s in res.trace.slices(thread="VECTOR") if s.name == "Cast"]
    assert {s.process for s in casts} == {s.process for s in res.trace.slices(thread="MTE2")}
    want = eb.golden({"grad": g, "indices": idx}, {"num_weights": n // 5 + 1})["out"]
    assert _bits(res.outputs["out"]) == _bits(want)


def test_the_determinism_setting_changes_nothing_for_uncast_half_rows():
    # the op_api's IsNeedCast ignores the setting and the tiling's deterministic mode needs 4-byte
    # rows: with uncast rows both settings launch the same ProcessForHalf kernel (no CastGrad and
    # CastOut pair, as opsim ran before), so the time and the bits are the same
    rng = np.random.default_rng(10)
    idx = _zipf(rng, 300, 20)
    g = rng.standard_normal((300, SORT_DIM)).astype(ml_dtypes.bfloat16)
    runs = [_run(grad=g, indices=idx, num_weights=20, tiling={"cast_grad": False}, deterministic=d,
                 trace="launch") for d in (False, True)]
    assert _names(runs[0]) == _names(runs[1]) == ["Sort", "ZerosLike", "MemSet", "EmbeddingDenseGradV2"]
    assert runs[0].cycles == runs[1].cycles
    assert _bits(runs[0].outputs["out"]) == _bits(runs[1].outputs["out"]) == _bits(half_golden(g, idx, 20))


@pytest.mark.parametrize("case,key", [
    (dict(emb=64), 100),                                   # small-dim kernel: SyncAll
    (dict(emb=SORT_DIM, scale_grad_by_freq=True), 1),      # ProcessAndScale: SyncAlls
    (dict(emb=SORT_DIM, scale_grad_by_freq=True, deterministic=True), 11),
    (dict(emb=SORT_DIM, dtype="fp16", cast_grad=False), 0),   # ProcessForHalf: SyncAll
])
@pytest.mark.parametrize("mode", ["timing", "estimate"])
def test_a_block_dim_beyond_the_cores_is_refused_for_a_kernel_that_syncs_all_blocks(case, key, mode):
    # SyncAll waits for every block of the launch: with more blocks than cores the timing run
    # ended in a DeadlockError and estimate mode returned cycles for a launch that cannot finish
    case = dict(case)
    emb, dt = case.pop("emb"), case.pop("dtype", "fp32")
    tiling = {"block_dim": CORES + 1}
    if "cast_grad" in case:
        tiling["cast_grad"] = case.pop("cast_grad")
    rng = np.random.default_rng(0)
    grad = rng.standard_normal((256, emb)).astype(NP[dt])
    idx = rng.integers(0, 300, 256).astype(np.int32)
    with pytest.raises(opsim.OpError) as e:
        _run(mode=mode, grad=grad, indices=idx, num_weights=300, padding_idx=-1, tiling=tiling, **case)
    assert e.value.code == 561002
    assert (f"block_dim {CORES + 1} exceeds the {CORES} vector cores of atlas-a2" in e.value.message
            and f"tiling key {key}" in e.value.message and "at most 48" in e.value.message), e.value.message


@pytest.mark.parametrize("det", [False, True])
def test_the_fp32_kernels_without_syncall_run_more_blocks_than_cores(det):
    # the fp32 row and deterministic kernels without scaleGradByFreq have no SyncAll: their
    # blocks run in waves
    rng = np.random.default_rng(0)
    grad = rng.standard_normal((256, SORT_DIM)).astype(np.float32)
    idx = rng.integers(0, 300, 256).astype(np.int32)
    res = _run(mode="full", grad=grad, indices=idx, num_weights=300, padding_idx=-1, deterministic=det,
               tiling={"block_dim": 2 * CORES})
    want = np.zeros((300, SORT_DIM), np.float64)
    np.add.at(want, idx, grad.astype(np.float64))
    assert res.tiling.block_dim == 2 * CORES
    np.testing.assert_allclose(res.outputs["out"], want, rtol=1e-5, atol=1e-5)


def test_scale_stage_moves_one_row_chunk_and_its_4_byte_count_per_step_as_the_vendor_kernel():
    # EmbeddingDenseGradV2ScaleKernel (docs/sources.md#embedding-a2-scale-stage): Tiling4Scale gives
    # the first numWeights % coreNum cores one row more than numWeights / coreNum; Process runs the
    # chunk passes dimJ = 0 .. embeddingDim / formerEmbeddingDim inclusive (here 520 / 520 = 1: the
    # whole row, then a tail pass of 0 elements), each row loading its chunk and its 4 B count and
    # scaling with one Muls of the 64-element repeats (512) and one of the rest (8)
    nw, emb = 100, SORT_DIM
    res = _run(mode="timing", trace="instruction", grad=opsim.TensorSpec((256, emb), "fp32"),
               indices=opsim.TensorSpec((256,), "int32"), num_weights=nw, scale_grad_by_freq=True)
    assert res.tiling.row_kernel and res.tiling.e_chunk == emb
    rows = sorted(hi - lo for lo, hi in _slices(nw, CORES))   # Tiling4Scale's split over the 48 blocks
    per_core, muls = [], []
    for proc in sorted({s.process for s in res.trace.slices() if "veccore" in s.process}):
        mine = [s for s in res.trace.slices() if s.process == proc]
        cnt = [s for s in mine if s.thread == "MTE2" and s.name == "DataCopyPad" and s.nbytes == 4
               and s.detail == "fp32"]
        n = len(cnt) // 2
        per_core.append(n)
        assert len(cnt) == 2 * n                     # one count load per row and pass
        loads = [s.nbytes for s in mine if s.thread == "MTE2" and s.name == "DataCopyPad"][-4 * n:]
        stores = [s.nbytes for s in mine if s.thread == "MTE3" and s.name == "DataCopyPad"][-2 * n:]
        assert loads == [emb * 4, 4] * n + [0, 4] * n, proc
        assert stores == [emb * 4] * n + [0] * n, proc
        muls.extend(s.elements for s in mine if s.name == "Muls")
    assert sorted(per_core) == rows
    assert muls == [512, 8] * nw
    # the scale stage's own UB: two in and two out buffers of one 32 B aligned chunk, two of 32 B
    assert eb.scale_ub_bytes(emb) == 4 * emb * 4 + 64


# the scale stage's UB (docs/sources.md#embedding-a2-scale-stage): 2 + 2 buffers of one 32 B aligned
# fp32 chunk and 2 of 32 B. The UB of atlas-a2 (196608 B) holds a chunk of 12280 (4 x 12280 x 4 + 64 =
# 196544 B) but not the next 32 B step, 12288 (196672 B); maxFormerNum is 14656 for fp32 rows
SCALE_FIT = 12280


def _scale_call(mode, emb, rows=8, nw=4, **kw):
    if mode in ("full", "numeric"):
        rng = np.random.default_rng(emb)
        g = rng.standard_normal((rows, emb)).astype(np.float32)
        i = (np.arange(rows) % nw).astype(np.int32)
    else:
        g, i = opsim.TensorSpec((rows, emb), "fp32"), opsim.TensorSpec((rows,), "int32")
    return g, i, _run(mode=mode, grad=g, indices=i, num_weights=nw, scale_grad_by_freq=True, **kw)


@pytest.mark.parametrize("emb", [SCALE_FIT + 1, 12284, 13000, 20000])
@pytest.mark.parametrize("mode", ["estimate", "timing", "full", "numeric"])
def test_a_scale_stage_chunk_wider_than_the_ub_is_refused_by_plan_with_the_numbers(emb, mode):
    # the published scale kernel would ask InitBuffer for more than the UB: opsim refuses the call
    # before anything runs (it failed mid-run with a CapacityError on VECOUT[1]); numeric mode
    # plans the call too, so it refuses what the other modes refuse
    with pytest.raises(opsim.OpError) as e:
        _scale_call(mode, emb)
    chunk = min(emb, 14656)
    need = 4 * (-(-chunk // 8) * 8) * 4 + 64
    msg = e.value.message
    assert e.value.code == 561002
    assert f"embedding dim {emb}" in msg and f"= {need} B of UB" in msg and "the UB has 196608 B" in msg
    assert f"embedding dim at most {SCALE_FIT}" in msg and f"e_chunk at most {SCALE_FIT}" in msg


def test_the_widest_scale_stage_chunk_runs_in_every_mode():
    for mode in ("estimate", "timing"):
        _, _, res = _scale_call(mode, SCALE_FIT)
        assert res.cycles > 0
    g, i, res = _scale_call("full", SCALE_FIT)
    counts = np.bincount(i, minlength=4).astype(np.float32)
    want = np.zeros((4, SCALE_FIT), np.float32)
    np.add.at(want, i, g)
    want /= counts[:, None]
    np.testing.assert_allclose(res.outputs["out"], want, rtol=1e-6, atol=1e-6)
    # a wider row runs when the caller narrows the chunk to the allowed width
    for mode in ("timing", "full"):
        _, _, res = _scale_call(mode, 13000, tiling={"e_chunk": SCALE_FIT})
        assert res.tiling.e_chunk == SCALE_FIT


def test_aclnn_refuses_a_scale_stage_wider_than_the_ub_at_get_workspace_size():
    from opsim.kernels.aclnn import aclnnEmbeddingDenseBackwardGetWorkspaceSize
    from opsim.simulator.acl import ACL_MEMCPY_HOST_TO_DEVICE, AclRuntime
    rt = AclRuntime("atlas-a2", trace_level="off")
    assert rt.aclInit(None) == 0 and rt.aclrtSetDevice(0) == 0

    def mk(host):
        ptr, ret = rt.aclrtMalloc(host.nbytes)
        assert ret == 0 and rt.aclrtMemcpy(ptr, host.nbytes, host, host.nbytes, ACL_MEMCPY_HOST_TO_DEVICE) == 0
        return rt.aclCreateTensor(list(host.shape), host.dtype, None, 0, 2, list(host.shape), ptr)

    emb = SCALE_FIT + 1
    gt, it = mk(np.ones((8, emb), np.float32)), mk((np.arange(8) % 4).astype(np.int32))
    ot = mk(np.full((4, emb), 3.0, np.float32))
    digest = rt.device.space.snapshot_digest()
    ws, ex, ret = aclnnEmbeddingDenseBackwardGetWorkspaceSize(gt, it, 4, -1, True, ot)
    assert ret == 561002 and ex is None
    assert f"embedding dim {emb}" in rt.aclGetRecentErrMsg()
    assert rt.device.space.snapshot_digest() == digest
