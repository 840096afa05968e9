"""aclnnEmbeddingDenseBackward: precision against an fp64 truth, padding and frequency scaling,
index dtypes, determinism, the UB-derived limit, timing and traces, and every documented check."""
from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import opsim
from opsim.kernels.aclnn import aclnnEmbeddingDenseBackward, aclnnEmbeddingDenseBackwardGetWorkspaceSize
from opsim.kernels.ascend import embedding_backward as eb
from opsim.kernels.common import TensorDesc
from opsim.simulator import numerics as nx
from opsim.simulator.acl import (ACL_MEMCPY_DEVICE_TO_HOST, ACL_MEMCPY_HOST_TO_DEVICE, ACL_OPT_DETERMINISTIC,
                           AclRuntime)

NP = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}
OP = "embedding_dense_backward"


def _zipf(rng, n, nw):
    """Heavy duplicates: a few rows take hundreds of the n indices (docs/sources.md#scatter-add-order)."""
    return ((rng.zipf(1.3, n) - 1) % nw).astype(np.int32)


def _grad(rng, shape, dtype="fp32"):
    return rng.standard_normal(shape).astype(np.float32).astype(NP[dtype])


SORT_DIM = eb.SMALL_DIM_THRESH + 8    # embeddingDim past the A2 small-dim branch: the sort path


def _run(device="atlas-a2", **kw):
    kw.setdefault("trace", "off")
    return opsim.run(OP, device=device, **kw)


def _truth(g, idx, **attrs):
    return eb.truth({"grad": g, "indices": idx}, attrs)["out"]


def _golden(g, idx, **attrs):
    return eb.golden({"grad": g, "indices": idx}, attrs)["out"]


def _bits(a):
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8).tobytes()


def _launch_names(res):
    return [s.name for s in res.trace.slices(process="host")]


# ---------------------------------------------------------------------------------------------
# precision, padding, scaling, index dtypes
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_zipf_heavy_duplicates_meet_the_ecosystem_standard_against_fp64_truth(dtype):
    rng = np.random.default_rng(7)
    n, nw, emb = 2000, 50, 32
    idx = _zipf(rng, n, nw)
    assert np.bincount(idx).max() > 300          # genuinely heavy duplicates
    g = _grad(rng, (n, emb), dtype)
    out = _run(grad=g, indices=idx, num_weights=nw).outputs["out"]
    assert out.dtype == g.dtype and out.shape == (nw, emb)
    ok, info = nx.ecosystem_check(out, _truth(g, idx, num_weights=nw), dtype)
    assert ok, info
    ok, info = nx.mixed_tolerance_check(out, _golden(g, idx, num_weights=nw), dtype)
    assert ok, info


def test_training_series_meets_the_standard_and_its_deterministic_path_equals_the_golden_bitwise():
    rng = np.random.default_rng(8)
    n, nw, emb = 600, 20, 24
    idx = _zipf(rng, n, nw).reshape(20, 30)       # multi-dimensional indices, grad [20, 30, 24]
    g = _grad(rng, (20, 30, emb), "fp16")
    res = _run("atlas-training", grad=g, indices=idx, num_weights=nw)
    ok, info = nx.ecosystem_check(res.outputs["out"], _truth(g, idx, num_weights=nw), "fp16")
    assert ok, info
    # owner-computes: each out row summed by one core in position order = sequential fp32 golden
    det = _run("atlas-training", grad=g, indices=idx, num_weights=nw, deterministic=True)
    assert _bits(det.outputs["out"]) == _bits(_golden(g, idx, num_weights=nw))


@pytest.mark.parametrize("device", ["atlas-a2", "atlas-training"])
def test_padding_row_is_exactly_zero_and_padding_rows_are_never_added(device):
    rng = np.random.default_rng(9)
    nw, emb, pad = 12, 16, 3
    idx = rng.integers(0, nw, 300).astype(np.int64)
    idx[::4] = pad
    g = _grad(rng, (300, emb))
    res = _run(device, grad=g, indices=idx, num_weights=nw, padding_idx=pad, trace="instruction")
    out = res.outputs["out"]
    assert np.all(out[pad] == 0) and not np.signbit(out[pad]).any()
    assert np.count_nonzero(out[np.arange(nw) != pad]) > 0
    ok, info = nx.ecosystem_check(out, _truth(g, idx, num_weights=nw, padding_idx=pad), "fp32")
    assert ok, info
    # no atomic add ever targets the padding row (out is zeroed from its first byte by ZerosLike,
    # or by the MemSet on the A2 small-dim branch, which has no ZerosLike)
    launches = {s.name: (s.start, s.end) for s in res.trace.slices(process="host")}
    z0, z1 = launches["ZerosLike" if device != "atlas-a2" else "MemSet"]
    out_addr = min(s.addr for s in res.trace.slices(thread="MTE3") if z0 <= s.start < z1)
    pad_row = range(out_addr + pad * emb * 4, out_addr + (pad + 1) * emb * 4)
    adds = [s for s in res.trace.slices(thread="MTE3") if s.detail.endswith("atomic add")]
    assert len(adds) > 0 and not any(s.addr in pad_row for s in adds)
    if device == "atlas-a2":
        # embeddingDim 16 takes the small-dim branch: ops-nn embedding_dense_grad_v2_small_dim.h
        # CopyIn loads each core's rows in one copy, padding rows too; ComputeAndCopyOut skips them
        assert res.tiling.small_dim_kernel
        t0, t1 = launches["EmbeddingDenseGradV2"]
        loads = [s for s in res.trace.slices(thread="MTE2")
                 if t0 <= s.start < t1 and s.name == "DataCopyPad" and s.elements % emb == 0 and s.elements > 1]
        assert sum(s.elements for s in loads) == idx.size * emb
        adds = [s for s in res.trace.slices(thread="VECTOR") if t0 <= s.start < t1 and s.name == "Add"]
        assert len(adds) == int(np.count_nonzero(idx != pad))


def test_negative_padding_index_means_none():
    rng = np.random.default_rng(10)
    idx = np.array([0, 1, 1, 2], np.int32)
    g = _grad(rng, (4, 8))
    for pad in (-1, -5, 2 ** 64 - 1):  # uint64 image of -1 through aclnn
        attrs = {"num_weights": 3, "padding_idx": pad}
        out = _run(grad=g, indices=idx, **attrs).outputs["out"]
        assert np.array_equal(out[2], g[3]) and np.array_equal(out[0], g[0])


@pytest.mark.parametrize("name,value", [("padding_idx", 2 ** 64 + 2), ("padding_idx", 2 ** 64),
                                        ("padding_idx", -2 ** 63 - 1), ("num_weights", 2 ** 64)])
def test_a_uint64_parameter_outside_its_range_is_refused_not_wrapped(name, value):
    """paddingIdx and numWeights are uint64 in C: 2^64 + 2 cannot be passed, and wrapping it
    modulo 2^64 made row 2 the padding row without a word. Refused with 161002, through
    opsim.run and through aclnn, with the parameter, the value and the range."""
    idx = np.array([0, 1, 2, 2], np.int32)
    attrs = {"num_weights": 3, "padding_idx": -1, name: value}
    param = {"padding_idx": "paddingIdx", "num_weights": "numWeights"}[name]
    with pytest.raises(opsim.OpError) as err:
        _run(grad=np.ones((4, 8), np.float32), indices=idx, **attrs)
    assert err.value.code == 161002
    assert f"{param} is {value}" in err.value.message and str(2 ** 64 - 1) in err.value.message
    rt = AclRuntime("atlas-a2")
    assert rt.aclInit() == 0 and rt.aclrtSetDevice(0) == 0
    tensors = []
    for arr in (np.ones((4, 8), np.float32), idx, np.zeros((3, 8), np.float32)):
        ptr, _ = rt.aclrtMalloc(arr.nbytes)
        assert rt.aclrtMemcpy(ptr, arr.nbytes, arr, arr.nbytes, ACL_MEMCPY_HOST_TO_DEVICE) == 0
        tensors.append(rt.aclCreateTensor(list(arr.shape), nx.dtype(arr.dtype).acl, None, 0, 2, None, ptr))
    ws, ex, ret = aclnnEmbeddingDenseBackwardGetWorkspaceSize(tensors[0], tensors[1], attrs["num_weights"],
                                                              attrs["padding_idx"], False, tensors[2])
    assert (ws, ex, ret) == (0, None, 161002) and f"{param} is {value}" in rt.aclGetRecentErrMsg()


@pytest.mark.parametrize("device", ["atlas-a2", pytest.param("atlas-training", marks=pytest.mark.slow)])
def test_scale_grad_by_freq_divides_each_sum_by_its_count_after_summing(device):
    # rows of 3.0: index 1 three times -> 9 x fp32(1/3) = 3; index 2 once -> 3; index 0 never -> 0
    idx = np.array([1, 2, 1, 1], np.int32)
    g = np.full((4, 8), 3.0, np.float32)
    out = _run(device, grad=g, indices=idx, num_weights=4, scale_grad_by_freq=True).outputs["out"]
    assert np.all(out[1] == 3.0) and np.all(out[2] == 3.0) and np.all(out[[0, 3]] == 0.0)
    # and on heavy duplicates, against the fp64 truth (sum / count) and the fp32 golden
    rng = np.random.default_rng(11)
    nw = 30
    idx = _zipf(rng, 800, nw)
    g = _grad(rng, (800, 16), "fp16")
    attrs = dict(num_weights=nw, padding_idx=0, scale_grad_by_freq=True)
    out = _run(device, grad=g, indices=idx, **attrs).outputs["out"]
    ok, info = nx.ecosystem_check(out, _truth(g, idx, **attrs), "fp16")
    assert ok, info
    assert np.all(out[0] == 0)
    det = _run(device, grad=g, indices=idx, deterministic=True, **attrs).outputs["out"]
    if device == "atlas-training":
        assert _bits(det) == _bits(_golden(g, idx, **attrs))


def test_scale_path_counts_and_scales_inside_the_one_kernel_launch_with_counts_in_the_workspace():
    # ops-nn embedding_dense_grad_v2.cpp ProcessAndScale: InitWorkspace, SyncAll, the rows (AddFreq
    # adds each flushed run's length to the counts), SyncAll, the scale kernel -- one launch
    rng = np.random.default_rng(12)
    # (embeddingDim past the small-dim branch: the sort path's row kernel)
    res = _run(grad=_grad(rng, (64, SORT_DIM)), indices=rng.integers(0, 5, 64).astype(np.int32), num_weights=5,
               scale_grad_by_freq=True, trace="instruction")
    names = _launch_names(res)
    assert names == ["Sort", "ZerosLike", "MemSet", "EmbeddingDenseGradV2"]
    count_adds = [s for s in res.trace.slices(thread="MTE3") if s.detail.endswith("atomic add") and s.nbytes == 4]
    assert count_adds and {s.process for s in res.trace.slices(thread="VECTOR") if s.name == "Muls"}
    assert res.tiling.region("counts")[1] == 5 * 4
    assert res.tiling.region("keys0")[1] == res.tiling.region("pos0")[1] == 64 * 4   # the sort buffers
    assert res.tiling.block_dim == 5                       # capped by numWeights with scale
    assert res.stats["workspace_bytes"] == res.tiling.workspace > 0


@pytest.mark.parametrize("idt", ["fp32", "fp16", "fp64", "int32", "int64", "int16", "int8", "uint8", "bool"])
def test_every_supported_index_dtype_selects_the_right_rows(idt):
    rng = np.random.default_rng(13)
    nw = 2 if idt == "bool" else 11
    base = rng.integers(0, nw, 96)
    idx = base.astype(nx.dtype(idt).np_dtype)
    g = _grad(rng, (96, 8))
    expect = _truth(g, base.astype(np.int64), num_weights=nw)
    for device in ("atlas-a2",) if idt not in ("int64", "fp16", "int8") else ("atlas-a2", "atlas-training"):
        out = _run(device, grad=g, indices=idx, num_weights=nw).outputs["out"]
        ok, info = nx.ecosystem_check(out, expect, "fp32")
        assert ok, (device, info)


def test_golden_accumulates_one_fp32_add_at_a_time_in_position_order():
    rng = np.random.default_rng(14)
    idx = rng.integers(0, 3, 400)
    g = (rng.standard_normal((400, 4)) * 10.0 ** rng.integers(-3, 4, (400, 1))).astype(np.float32)
    expect = np.zeros((3, 4), np.float32)
    for i, k in enumerate(idx):
        expect[k] = expect[k] + g[i]
    assert _bits(_golden(g, idx, num_weights=3)) == _bits(expect)


def test_float_indices_are_truncated_like_the_int32_cast():
    g = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([1.9, 0.2, 1.0], np.float32)
    out = _run(grad=g, indices=idx, num_weights=2).outputs["out"]
    assert np.array_equal(out[0], g[1]) and np.array_equal(out[1], g[0] + g[2])


def test_empty_grad_or_indices_zero_fills_out():
    rt, stream, mk = _acl_setup("atlas-a2")
    garbage = np.full((4, 8), 7.0, np.float32)
    _, g = mk(np.zeros((0, 8), np.float32))
    _, i = mk(np.zeros((0,), np.int32))
    o_ptr, o = mk(garbage)
    ws, ex, ret = aclnnEmbeddingDenseBackwardGetWorkspaceSize(g, i, 4, -1, False, o)
    assert ret == 0 and ws == 0
    assert aclnnEmbeddingDenseBackward(0, 0, ex, stream) == 0
    assert rt.aclrtSynchronizeStream(stream) == 0
    host = np.ones((4, 8), np.float32)
    rt.aclrtMemcpy(host, host.nbytes, o_ptr, host.nbytes, ACL_MEMCPY_DEVICE_TO_HOST)
    assert np.all(host == 0)


# ---------------------------------------------------------------------------------------------
# determinism
# ---------------------------------------------------------------------------------------------

def _zipf_case():
    rng = np.random.default_rng(21)
    nw = 40
    idx = _zipf(rng, 1500, nw)
    return _grad(rng, (1500, 16)), idx, nw


@pytest.mark.slow          # the deterministic kernel walks every row (4-6 s)
def test_deterministic_mode_is_bitwise_identical_across_five_seeds():
    g, idx, nw = _zipf_case()
    outs = [_run(grad=g, indices=idx, num_weights=nw, deterministic=True, seed=s).outputs["out"]
            for s in range(5)]
    assert len({_bits(o) for o in outs}) == 1
    ok, info = nx.ecosystem_check(outs[0], _truth(g, idx, num_weights=nw), "fp32")
    assert ok, info


def test_default_mode_differs_bitwise_between_seeds_on_heavy_duplicates_within_tolerance():
    g, idx, nw = _zipf_case()
    truth = _truth(g, idx, num_weights=nw)
    runs = [_run(grad=g, indices=idx, num_weights=nw, seed=s) for s in range(5)]
    outs = [r.outputs["out"] for r in runs]
    assert len({_bits(o) for o in outs}) >= 2
    for o in outs:
        ok, info = nx.ecosystem_check(o, truth, "fp32")
        assert ok, info
    # same seed, same bits and same trace
    again = _run(grad=g, indices=idx, num_weights=nw, seed=3)
    assert _bits(again.outputs["out"]) == _bits(outs[3]) and again.cycles == runs[3].cycles


def test_deterministic_mode_leaves_each_index_to_one_core():
    g, idx, nw = _zipf_case()
    res = _run(grad=g, indices=idx, num_weights=nw, deterministic=True, trace="instruction")
    emb = g.shape[1]
    writers: dict[int, set] = {}
    stores = [s for s in res.trace.slices(thread="MTE3") if s.detail.endswith("atomic add")]
    base = min(s.addr for s in stores)           # out row 0 is the lowest address written
    for s in stores:
        writers.setdefault((s.addr - base) // (emb * 4), set()).add(s.process)
    assert len(writers) == len(np.unique(idx))
    assert all(len(cores) == 1 for cores in writers.values())
    assert len({c for cores in writers.values() for c in cores}) > 1


@pytest.mark.slow          # the deterministic kernel walks every row (4-6 s)
def test_acl_deterministic_option_selects_the_deterministic_scheme():
    g, idx, nw = _zipf_case()
    outs = []
    for seed in range(3):
        rt, stream, mk = _acl_setup("atlas-a2", seed=seed)
        assert rt.aclrtCtxSetSysParamOpt(ACL_OPT_DETERMINISTIC, 1) == 0
        _, gt = mk(g)
        _, it = mk(idx)
        o_ptr, ot = mk(np.zeros((nw, g.shape[1]), np.float32))
        ws, ex, ret = aclnnEmbeddingDenseBackwardGetWorkspaceSize(gt, it, nw, -1, False, ot)
        assert ret == 0 and ex.attrs["deterministic"] is True
        wptr, _ = rt.aclrtMalloc(ws)
        assert aclnnEmbeddingDenseBackward(wptr, ws, ex, stream) == 0
        assert rt.aclrtSynchronizeStream(stream) == 0
        host = np.empty((nw, g.shape[1]), np.float32)
        rt.aclrtMemcpy(host, host.nbytes, o_ptr, host.nbytes, ACL_MEMCPY_DEVICE_TO_HOST)
        outs.append(host)
    assert len({_bits(o) for o in outs}) == 1
    direct = _run(grad=g, indices=idx, num_weights=nw, deterministic=True).outputs["out"]
    assert _bits(direct) == _bits(outs[0])


# ---------------------------------------------------------------------------------------------
# the UB-derived limit of the Atlas training series
# ---------------------------------------------------------------------------------------------

def _seed_bound(num_weights, core_num, idx_bytes, const=180192):
    """The seed's bound (the documented formula, exact rational arithmetic)."""
    counts = num_weights // core_num + num_weights % core_num
    return Fraction(const - counts * idx_bytes, 36 if idx_bytes == 4 else 20)


@pytest.mark.parametrize("num_weights", [1, 31, 32, 100, 1000, 4099, 30000, 65537])
@pytest.mark.parametrize("idt,idx_bytes", [("int32", 4), ("int64", 8)])
def test_training_scale_limit_equals_the_seed_formula(num_weights, idt, idx_bytes):
    spec = opsim.device_spec("atlas-training")
    assert spec.kernels["embedding_dense_backward"]["ub_budget"] == 196608
    limit = eb.scale_limit(spec, num_weights, idt)
    bound = _seed_bound(num_weights, 32, idx_bytes)
    assert limit < bound <= limit + 1               # the largest E with E < bound
    descs = {"grad": TensorDesc((10, limit), nx.FP32), "indices": TensorDesc((10,), nx.dtype(idt)),
             "out": TensorDesc((num_weights, limit), nx.FP32)}
    attrs = {"num_weights": num_weights, "scale_grad_by_freq": True}
    eb.validate(spec, descs, attrs)
    over = {**descs, "grad": TensorDesc((10, limit + 1), nx.FP32),
            "out": TensorDesc((num_weights, limit + 1), nx.FP32)}
    with pytest.raises(opsim.OpError) as e:
        eb.validate(spec, over, attrs)
    assert e.value.code == 161002
    assert f"embeddingDim (grad's last dimension) {limit + 1}" in e.value.message
    assert f"largest allowed is {limit}" in e.value.message
    assert eb.validate(spec, over, {**attrs, "scale_grad_by_freq": False})   # only with scale


@pytest.mark.parametrize("num_weights", [1000, 32000])
def test_int64_indices_admit_wider_rows_because_a_32_byte_block_holds_fewer_of_them(num_weights):
    # each int64 index and count takes twice the bytes, yet int64 admits wider rows: the plan
    # holds whole 32 B blocks of indices, each index with its fp32 row, and must hold one block,
    # which is 8 rows for int32 and 4 for int64 (docs/sources.md#embedding-ub-limit)
    spec = opsim.device_spec("atlas-training")
    attrs = {"num_weights": num_weights, "scale_grad_by_freq": True}

    def planned(idt, e):
        descs = {"grad": TensorDesc((4096, e), nx.FP32), "indices": TensorDesc((4096,), nx.dtype(idt)),
                 "out": TensorDesc((num_weights, e), nx.FP32)}
        return eb.plan(spec, descs, attrs)

    lim32, lim64 = eb.scale_limit(spec, num_weights, "int32"), eb.scale_limit(spec, num_weights, "int64")
    assert lim64 > lim32
    at32, at64 = planned("int32", lim32), planned("int64", lim64)
    assert (at32.ub_indices, at64.ub_indices) == (8, 4)           # one 32 B block of indices each
    assert at32.ub_bytes <= at32.ub_budget and at64.ub_bytes <= at64.ub_budget
    # at int32's widest row, int64 fits one block of 4 rows but not two: 8 rows do not fit either
    assert planned("int64", lim32).ub_indices == 4
    cs = eb.counts_size(num_weights, spec.cores.aic)
    row = 4 * lim32
    assert 8 * (row + 8) + 8 * cs + row > at32.ub_budget - 16384


@pytest.mark.parametrize("budget", [131072, 262144])
def test_overriding_the_ub_budget_moves_the_limit_as_the_formula_says(budget):
    spec = opsim.device_spec("atlas-training")
    what_if = spec.replace("kernels.embedding_dense_backward.ub_budget", budget)
    for nw in (100, 5000):
        for idt, b in (("int32", 4), ("int64", 8)):
            moved = eb.scale_limit(what_if, nw, idt)
            bound = _seed_bound(nw, 32, b, const=budget - 16416)
            assert moved < bound <= moved + 1
            assert (moved > eb.scale_limit(spec, nw, idt)) == (budget > 196608)
    # the public API sees the what-if too: refused on the catalogue device, accepted with 256 KiB
    e = eb.scale_limit(spec, 100, "int32") + 1
    kw = dict(grad=opsim.TensorSpec((16, e), "fp32"), indices=opsim.TensorSpec((16,), "int32"),
              num_weights=100, scale_grad_by_freq=True, mode="timing")
    with pytest.raises(opsim.OpError) as err:
        _run("atlas-training", **kw)
    assert err.value.code == 161002
    if budget > 196608:
        res = _run("atlas-training", device_overrides={"kernels.embedding_dense_backward.ub_budget": budget}, **kw)
        assert res.cycles > 0 and res.stats["ub_peak_bytes"] <= budget


def test_v1_plan_stays_within_the_budget_and_chunks_wide_rows_without_scale():
    spec = opsim.device_spec("atlas-training")
    descs = {"grad": TensorDesc((64, 9000), nx.FP32), "indices": TensorDesc((64,), nx.INT32),
             "out": TensorDesc((10, 9000), nx.FP32)}
    t = eb.plan(spec, descs, {"num_weights": 10})
    assert t.path == "v1" and t.e_chunk < 9000 and t.ub_indices >= 8
    assert t.ub_bytes <= 196608 - 16384


# ---------------------------------------------------------------------------------------------
# timing and traces
# ---------------------------------------------------------------------------------------------

def test_sort_accumulation_and_atomic_flushes_are_visible_per_core():
    g, idx, nw = _zipf_case()
    g = _grad(np.random.default_rng(22), (idx.size, SORT_DIM))     # past the small-dim branch
    res = _run(grad=g, indices=idx, num_weights=nw, trace="instruction")
    names = _launch_names(res)
    assert names == ["Sort", "ZerosLike", "MemSet", "EmbeddingDenseGradV2"]
    tr = res.trace
    sorts = [s for s in tr.slices(thread="VECTOR") if s.name == "Sort"]
    assert len(sorts) == 1 and sorts[0].elements == idx.size     # one TIK batch (<= 4096) on one core
    adders = {s.process for s in tr.slices(thread="VECTOR") if s.name == "Add"}
    flushers = {s.process for s in tr.slices(thread="MTE3") if s.detail.endswith("atomic add")}
    assert len(adders) > 1 and adders <= flushers
    assert len(flushers) == res.tiling.block_dim == 48


def _flushes(res):
    return sum(1 for s in res.trace.slices(thread="MTE3") if s.detail.endswith("atomic add"))


def test_more_duplicate_indices_give_fewer_atomic_flushes():
    # embeddingDim 8: the small-dim kernel (embedding_dense_grad_v2_small_dim.h) stores once per
    # run of equal indices in a core's UB tile, with no LIMIT_COUNT_NUM flush
    rng = np.random.default_rng(31)
    n, emb = 960, 8
    g = _grad(rng, (n, emb))
    distinct = _run(grad=g, indices=rng.permutation(n).astype(np.int32), num_weights=n, trace="instruction")
    some = _run(grad=g, indices=(np.arange(n) // 4).astype(np.int32), num_weights=n, trace="instruction")
    spread = _run(grad=g, indices=(np.arange(n) % 240).astype(np.int32), num_weights=n, trace="instruction")
    one = _run(grad=g, indices=np.zeros(n, np.int32), num_weights=n, trace="instruction")
    assert one.tiling.small_dim_kernel and one.tiling.block_dim == 48
    assert _flushes(distinct) == n                   # every row its own flush
    assert _flushes(one) == 48                       # one index: one run per core (20 rows, one tile)
    assert _flushes(some) == n // 4                  # runs of 4 inside a core's tile
    assert _flushes(spread) == n                     # duplicates in other tiles are not merged in UB
    assert _flushes(distinct) > _flushes(some) > _flushes(one)


def test_a2_row_kernel_flushes_a_run_when_the_accumulator_already_holds_ten_rows():
    # embedding_dense_grad_v2.h ComputeAndCopyOut: isLimite = (addCount == LIMIT_COUNT_NUM) is
    # checked before the Add, so a run flushes after its 11th row, then at the slice's last row
    rng = np.random.default_rng(33)
    g = _grad(rng, (21, SORT_DIM))                 # past the small-dim branch
    res = _run(grad=g, indices=np.zeros(21, np.int32), num_weights=1, tiling={"block_dim": 1}, trace="instruction")
    assert _flushes(res) == 2                      # rows 1-11, rows 12-21 (not ceil(21 / 10) = 3)
    ok, info = nx.mixed_tolerance_check(res.outputs["out"], _golden(g, np.zeros(21, np.int32), num_weights=1), "fp32")
    assert ok, info


def test_bandwidth_never_exceeds_the_spec():
    g, idx, nw = _zipf_case()
    for device in ("atlas-a2", "atlas-training"):
        res = _run(device, grad=g, indices=idx, num_weights=nw, trace="tile")
        for name, link in res.stats["links"].items():
            assert link["max_rate_GBps"] <= link["peak_GBps"] * (1 + 1e-9), (device, name)
        assert res.stats["bandwidth_GBps"] <= res.stats["peak_bandwidth_GBps"]


@pytest.mark.slow
def test_sorts_beyond_one_tik_batch_merge_through_gm_and_keep_every_row():
    # the TIK Sort sorts 4096 indices per batch in UB and merges batches pairwise through GM
    # (sort_in_gm_new: B(B-1)/2 vmrgsort steps); with distinct indices every output row is one
    # grad row, so the result is exact whatever the order
    rng = np.random.default_rng(41)
    n, emb = 9000, 8
    idx = rng.permutation(n).astype(np.int32)
    g = _grad(rng, (n, emb))
    # deterministic: emb 8 with determinism off takes the small-dim branch, which has no Sort
    res = _run(grad=g, indices=idx, num_weights=n, trace="instruction", deterministic=True)
    assert res.tiling.sort_runs == 3 and res.tiling.merge_passes == 3
    t0, t1 = {s.name: (s.start, s.end) for s in res.trace.slices(process="host")}["Sort"]
    merges = [s for s in res.trace.slices(thread="VECTOR") if t0 <= s.start < t1 and s.name == "MrgSort"]
    assert len(merges) == 3 and {s.process for s in merges} == {"core0.veccore0"}
    assert _bits(res.outputs["out"]) == _bits(_golden(g, idx, num_weights=n))
    with pytest.raises(opsim.OpError) as e:      # a UB that cannot hold the TIK batches is refused
        _run(grad=g, indices=idx, num_weights=n, deterministic=True, device_overrides={"ub.size": 24576})
    assert e.value.code == 561002 and "TIK Sort" in e.value.message


@pytest.mark.slow          # the deterministic kernel walks every row (4-6 s)
def test_embedding_dim_chunks_do_not_change_the_deterministic_bits():
    g, idx, nw = _zipf_case()
    whole = _run(grad=g, indices=idx, num_weights=nw, deterministic=True)
    chunked = _run(grad=g, indices=idx, num_weights=nw, deterministic=True, tiling={"e_chunk": 5}, trace="instruction")
    assert chunked.tiling.e_chunk == 5
    assert _bits(whole.outputs["out"]) == _bits(chunked.outputs["out"])
    with pytest.raises(opsim.OpError) as e:
        _run(grad=g, indices=idx, num_weights=nw, tiling={"e_chunk": 20000})
    assert e.value.code == 561002 and "maxFormerNum" in e.value.message


def test_max_former_num_follows_the_documented_formula():
    spec = opsim.device_spec("atlas-a2")
    for dt, expect in (("fp32", 14656), ("fp16", 10992)):
        d = {"grad": TensorDesc((600, 20000), nx.dtype(dt)), "indices": TensorDesc((600,), nx.INT32),
             "out": TensorDesc((10, 20000), nx.dtype(dt))}
        t = eb.plan(spec, d, {"num_weights": 10}, {"cast_grad": False} if dt == "fp16" else None)
        assert t.e_chunk == expect


def test_large_half_grads_skip_the_cast_and_sum_in_the_kernel():
    # the cast conditions (docs/sources.md#embedding-paths): forced off here for a small case
    rng = np.random.default_rng(51)
    idx = rng.integers(0, 200, 600).astype(np.int32)
    g = _grad(rng, (600, 16), "fp16")
    res = _run(grad=g, indices=idx, num_weights=200, tiling={"cast_grad": False}, trace="launch")
    assert "CastGrad" not in _launch_names(res) and "CastOut" not in _launch_names(res)
    ok, info = nx.mixed_tolerance_check(res.outputs["out"], _truth(g, idx, num_weights=200), "fp16")
    assert ok, info
    spec = opsim.device_spec("atlas-a2")
    big = {"grad": TensorDesc((30000, 2048), nx.FP16), "indices": TensorDesc((30000,), nx.INT32),
           "out": TensorDesc((1000, 2048), nx.FP16)}
    assert not eb.plan(spec, big, {"num_weights": 1000}).cast_grad
    assert eb.plan(spec, big, {"num_weights": 1000, "scale_grad_by_freq": True}).cast_grad
    # the determinism setting plays no part in IsNeedCast: uncast rows take ProcessForHalf (key 0)
    det = eb.plan(spec, big, {"num_weights": 1000, "deterministic": True})
    assert not det.cast_grad and det.half_kernel and not det.det_kernel and det.tiling_key == 0
    few_rows = {"grad": TensorDesc((500, 120000), nx.BF16), "indices": TensorDesc((500,), nx.INT32),
                "out": TensorDesc((1000, 120000), nx.BF16)}
    assert eb.plan(spec, few_rows, {"num_weights": 1000}).cast_grad          # gradRow < 512
    small = {"grad": TensorDesc((4000, 64), nx.FP16), "indices": TensorDesc((4000,), nx.INT32),
             "out": TensorDesc((100, 64), nx.FP16)}
    assert eb.plan(spec, small, {"num_weights": 100}).cast_grad               # < 100 MiB


# ---------------------------------------------------------------------------------------------
# bad inputs: each check, its code and message; nothing written
# ---------------------------------------------------------------------------------------------

def _acl_setup(device, seed=0):
    rt = AclRuntime(device, trace_level="off", seed=seed)
    assert rt.aclInit(None) == 0 and rt.aclrtSetDevice(0) == 0
    stream, ret = rt.aclrtCreateStream()
    assert ret == 0

    def mk(host, dtype=None, fmt=2):
        host = np.array(host, order="C")     # keeps 0-d arrays 0-d
        ptr, ret = rt.aclrtMalloc(max(host.nbytes, 32))
        assert ret == 0
        if host.nbytes:
            assert rt.aclrtMemcpy(ptr, host.nbytes, host, host.nbytes, ACL_MEMCPY_HOST_TO_DEVICE) == 0
        t = rt.aclCreateTensor(list(host.shape), dtype if dtype is not None else host.dtype, None, 0, fmt,
                               list(host.shape), ptr)
        assert t is not None
        return ptr, t
    return rt, stream, mk


CASES = {
    # name: (device, grad, indices, numWeights, out, kwargs, code, message fragment)
    "grad null": ("atlas-a2", None, ((6,), "int32"), 4, ((4, 8), "fp32"), {}, 161001, "grad is a null pointer"),
    "indices null": ("atlas-a2", ((6, 8), "fp32"), None, 4, ((4, 8), "fp32"), {}, 161001, "indices is a null pointer"),
    "out null": ("atlas-a2", ((6, 8), "fp32"), ((6,), "int32"), 4, None, {}, 161001, "out is a null pointer"),
    "grad dtype": ("atlas-a2", ((6, 8), "int32"), ((6,), "int32"), 4, ((4, 8), "int32"), {}, 161002, "grad has dtype INT32"),
    "bf16 on training": ("atlas-training", ((6, 8), "bf16"), ((6,), "int32"), 4, ((4, 8), "bf16"), {}, 161002,
                         "grad has dtype BFLOAT16"),
    "indices dtype": ("atlas-a2", ((6, 8), "fp32"), ((6,), "bf16"), 4, ((4, 8), "fp32"), {}, 161002,
                      "indices has dtype BFLOAT16"),
    "out dtype": ("atlas-a2", ((6, 8), "fp32"), ((6,), "int32"), 4, ((4, 8), "fp16"), {}, 161002,
                  "out has dtype FLOAT16; it must equal grad's dtype FLOAT"),
    "grad 9 dims": ("atlas-a2", ((1,) * 8 + (8,), "fp32"), ((1,), "int32"), 4, ((4, 8), "fp32"), {}, 161002,
                    "grad has 9 dimensions"),
    "grad 1 dim": ("atlas-a2", ((8,), "fp32"), ((1,), "int32"), 4, ((4, 8), "fp32"), {}, 161002, "grad has 1 dimension"),
    "indices 0 dims": ("atlas-a2", ((1, 8), "fp32"), ((), "int32"), 4, ((4, 8), "fp32"), {}, 161002,
                       "indices has 0 dimensions"),
    "rows mismatch": ("atlas-a2", ((2, 3, 8), "fp32"), ((5,), "int32"), 4, ((4, 8), "fp32"), {}, 161002,
                      "grad shape [2, 3, 8] is not match with indices shape [5]"),
    "out shape": ("atlas-a2", ((6, 8), "fp32"), ((6,), "int32"), 4, ((5, 8), "fp32"), {}, 161002,
                  "out shape [5, 8] must be 2-D [numWeights, embeddingDim] = [4, 8]"),
    "format": ("atlas-a2", ((6, 8), "fp32"), ((6,), "int32"), 4, ((4, 8), "fp32"), {"fmt": 29}, 161002,
               "has format FRACTAL_NZ, a private format; only ND"),
    "product a3": ("atlas-a3", ((6, 8), "fp32"), ((6,), "int32"), 4, ((4, 8), "fp32"), {}, 361001,
                   "aclnnEmbeddingDenseBackward is not supported on Atlas A3"),
    "product inference": ("atlas-inference", ((6, 8), "fp32"), ((6,), "int32"), 4, ((4, 8), "fp32"), {}, 361001,
                          "is not supported on Atlas inference series"),
    "scale limit": ("atlas-training", ((6, 5006), "fp32"), ((6,), "int32"), 4, ((4, 5006), "fp32"), {"scale": True},
                    161002, "must be < (180192 - countsSize * 4) / 36 = 180176/36"),
    "index beyond numWeights": ("atlas-a2", ((6, 8), "fp32"), ((6,), "int32"), 4, ((4, 8), "fp32"), {"bad": (4, 4)}, 361001,
                                "indices[4] (flat position 4) = 4 is outside [0, numWeights=4)"),
    "negative index": ("atlas-training", ((6, 8), "fp32"), ((6,), "int64"), 4, ((4, 8), "fp32"), {"bad": (2, -1)},
                       361001, "indices[2] (flat position 2) = -1 is outside"),
    "nan index": ("atlas-a2", ((6, 8), "fp32"), ((6,), "fp32"), 4, ((4, 8), "fp32"), {"bad": (1, np.nan)},
                  361001, "it selects no row"),
}


def _host(spec, rng):
    if spec is None:
        return None
    shape, dt = spec
    d = nx.dtype(dt)
    if d.is_float:
        return rng.standard_normal(shape).astype(np.float32).astype(d.np_dtype)
    return rng.integers(0, 4, shape).astype(d.np_dtype)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_refused_with_its_code_and_message_and_nothing_is_written(case):
    device, gs, isp, nw, os_, kw, code, fragment = CASES[case]
    rng = np.random.default_rng(61)
    rt, stream, mk = _acl_setup(device)
    g = _host(gs, rng)
    i = _host(isp, rng)
    if "bad" in kw:
        pos, val = kw["bad"]
        i[pos] = val
    o = _host(os_, rng)
    fmt = kw.get("fmt", 2)
    gt = mk(g, fmt=fmt)[1] if g is not None else None
    it = mk(i)[1] if i is not None else None
    ot = mk(o)[1] if o is not None else None
    digest = rt.device.space.snapshot_digest()
    ws, ex, ret = aclnnEmbeddingDenseBackwardGetWorkspaceSize(gt, it, nw, -1, kw.get("scale", False), ot)
    assert ret == code and ex is None
    assert fragment in rt.aclGetRecentErrMsg(), rt.aclGetRecentErrMsg()
    assert rt.aclrtSynchronizeStream(stream) == 0
    assert rt.device.space.snapshot_digest() == digest
    # the same call through opsim.run raises the same code (or, for a bad index, a MemoryFault)
    kwargs = dict(grad=g, indices=i, num_weights=nw, scale_grad_by_freq=kw.get("scale", False))
    if o is not None:
        kwargs["out"] = o
    if "fmt" in kw or g is None or i is None or o is None:
        return                            # only expressible through aclTensor
    if "bad" in kw:
        with pytest.raises(opsim.MemoryFault, match=r"flat position \d+"):
            _run(device, **kwargs)
    else:
        with pytest.raises(opsim.OpError) as e:
            _run(device, **kwargs)
        assert e.value.code == code and fragment in e.value.message


@pytest.mark.parametrize("device", ["atlas-a2", "atlas-training"])
def test_plain_formats_such_as_torch_npus_ncl_are_accepted_and_private_ones_refused(device):
    """The library refuses only private formats (IsPrivateFormat: NC1HWC0, FRACTAL_Z, NZ, ...;
    docs/sources.md#embedding-checks). torch_npu tags a 3-D tensor NCL (47), a 4-D one NCHW (0):
    a [B, T, E] grad from it must run, and give the same sums as an ND one."""
    rng = np.random.default_rng(64)
    g = _grad(rng, (2, 3, 8))
    i = np.array([[0, 1, 3], [1, 1, 0]], np.int64)
    expect = np.zeros((4, 8), np.float64)
    np.add.at(expect, i.reshape(-1), g.reshape(6, 8).astype(np.float64))
    for fmt, nd in ((47, 3), (0, 4), (1, 4), (30, 5)):
        rt, stream, mk = _acl_setup(device)
        gt = mk(g.reshape((1,) * (nd - 3) + g.shape), fmt=fmt)[1]
        it = mk(i)[1]                     # 2-D: torch_npu tags it ND
        o_ptr, ot = mk(np.full((4, 8), 7, np.float32))
        ws, ex, ret = aclnnEmbeddingDenseBackwardGetWorkspaceSize(gt, it, 4, -1, False, ot)
        assert ret == 0, (fmt, rt.aclGetRecentErrMsg())
        w = rt.aclrtMalloc(ws)[0] if ws else 0
        assert aclnnEmbeddingDenseBackward(w, ws, ex, stream) == 0
        assert rt.aclrtSynchronizeStream(stream) == 0
        out = np.zeros((4, 8), np.float32)
        assert rt.aclrtMemcpy(out, out.nbytes, o_ptr, out.nbytes, ACL_MEMCPY_DEVICE_TO_HOST) == 0
        np.testing.assert_allclose(out, expect, rtol=1e-6, atol=1e-6)
    for fmt, name in ((3, "NC1HWC0"), (4, "FRACTAL_Z"), (29, "FRACTAL_NZ"), (32, "NDC1HWC0"),
                      (33, "FRACTAL_Z_3D"), (12, "NC1HWC0_C04"), (50, "FRACTAL_NZ_C0_16")):
        for which in ("grad", "indices", "out"):
            rt, stream, mk = _acl_setup(device)
            gt = mk(g, fmt=fmt if which == "grad" else 2)[1]
            it = mk(i, fmt=fmt if which == "indices" else 2)[1]
            ot = mk(np.zeros((4, 8), np.float32), fmt=fmt if which == "out" else 2)[1]
            _, ex, ret = aclnnEmbeddingDenseBackwardGetWorkspaceSize(gt, it, 4, -1, False, ot)
            assert (ret, ex) == (161002, None), (fmt, which)
            msg = rt.aclGetRecentErrMsg()
            assert f"{which} has format {name}" in msg and "private" in msg and "ND" in msg, msg


def test_bad_index_written_after_get_workspace_size_is_refused_at_execute_before_any_write():
    rt, stream, mk = _acl_setup("atlas-a2")
    rng = np.random.default_rng(62)
    g = _grad(rng, (6, 8))
    i_ptr, it = mk(np.array([0, 1, 2, 3, 0, 1], np.int32))
    _, gt = mk(g)
    o_ptr, ot = mk(np.full((4, 8), 5.0, np.float32))
    ws, ex, ret = aclnnEmbeddingDenseBackwardGetWorkspaceSize(gt, it, 4, -1, False, ot)
    assert ret == 0
    bad = np.array([0, 1, 2, 3, 9, 7], np.int32)
    rt.aclrtMemcpy(i_ptr, bad.nbytes, bad, bad.nbytes, ACL_MEMCPY_HOST_TO_DEVICE)
    wptr, _ = rt.aclrtMalloc(ws)
    digest = rt.device.space.snapshot_digest()
    assert aclnnEmbeddingDenseBackward(wptr, ws, ex, stream) == 361001
    assert "flat position 4) = 9" in rt.aclGetRecentErrMsg()
    assert rt.aclrtSynchronizeStream(stream) == 0
    assert rt.device.space.snapshot_digest() == digest       # out included: nothing ran


def test_padding_index_outside_num_weights_is_skipped_not_a_fault():
    g = np.ones((3, 8), np.float32)
    out = _run(grad=g, indices=np.array([0, 7, 1], np.int32), num_weights=2, padding_idx=7).outputs["out"]
    assert np.all(out == 1.0)


def test_num_weights_is_checked():
    g = np.ones((3, 8), np.float32)
    i = np.zeros(3, np.int32)
    for nw, msg in ((-1, "numWeights is -1"), (2.5, "numWeights is 2.5"), (None, "numWeights is required")):
        with pytest.raises(opsim.OpError) as e:
            _run(grad=g, indices=i, num_weights=nw, out=np.zeros((2, 8), np.float32))
        assert e.value.code == 161002 and msg in e.value.message


def test_indices_beyond_the_float_sort_range_are_refused_on_a2():
    kw = dict(grad=opsim.TensorSpec((4, 1)), indices=opsim.TensorSpec((4,), "int64"),
              num_weights=eb.INT32_INF + 1, mode="timing")
    with pytest.raises(opsim.OpError) as e:
        _run(**kw)
    assert e.value.code == 561002 and "2139095040" in e.value.message and "float32 bit patterns" in e.value.message


def test_unknown_tiling_override_is_refused():
    with pytest.raises(opsim.OpError) as e:
        _run(grad=np.ones((2, 8), np.float32), indices=np.zeros(2, np.int32), num_weights=1,
             tiling={"tile_length": 64})
    assert e.value.code == 161002 and "allowed: block_dim, e_chunk, cast_grad" in e.value.message


def test_numeric_mode_is_the_golden_and_checks_indices_too():
    rng = np.random.default_rng(71)
    g, idx = _grad(rng, (20, 8)), rng.integers(0, 5, 20).astype(np.int32)
    res = _run(grad=g, indices=idx, num_weights=5, mode="numeric")
    assert _bits(res.outputs["out"]) == _bits(_golden(g, idx, num_weights=5))
    idx[3] = 5
    with pytest.raises(opsim.MemoryFault, match="flat position 3"):
        _run(grad=g, indices=idx, num_weights=5, mode="numeric")


def test_a_ub_budget_beyond_the_ub_is_refused_by_plan_with_the_numbers():
    g = opsim.TensorSpec((20000, 64), "fp32")
    idx = opsim.TensorSpec((20000,), "int32")
    with pytest.raises(opsim.OpError) as ei:
        opsim.run("embedding_dense_backward", device="atlas-training", mode="timing", grad=g, indices=idx,
                  num_weights=1000, scale_grad_by_freq=True, trace="off",
                  device_overrides={"kernels.embedding_dense_backward.ub_budget": 393216})
    assert ei.value.code == 561002
    assert "the UB has 262144 B" in ei.value.message and "393216" in ei.value.message


# ---------------------------------------------------------------------------------------------
# Atlas A2 small-dim branch (aclnn CheckIsSmallDimMode)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_a2_small_dim_call_has_no_sort_and_no_zeroslike_launch(dtype):
    # the demo's default call: embeddingDim 64 <= 512, numWeights 1000 <= 2^24, determinism off
    rng = np.random.default_rng(40)
    g, idx = _grad(rng, (512, 64), dtype), rng.integers(0, 1000, 512).astype(np.int32)
    res = _run(grad=g, indices=idx, num_weights=1000, trace="instruction")
    expect = ["MemSet", "EmbeddingDenseGradV2"]
    if dtype == "fp16":
        expect = ["CastGrad"] + expect + ["CastOut"]
    assert _launch_names(res) == expect
    assert res.tiling.small_dim and res.tiling.small_dim_kernel
    assert res.tiling.region("keys0") is None and res.tiling.region("alist") is None
    # the kernel sorts its own UB tile: one Sort per core (512 rows / 48 cores fit one tile)
    t0, t1 = {s.name: (s.start, s.end) for s in res.trace.slices(process="host")}["EmbeddingDenseGradV2"]
    sorts = [s for s in res.trace.slices(thread="VECTOR") if t0 <= s.start < t1 and s.name == "Sort"]
    assert len({s.process for s in sorts}) == len(sorts) == res.tiling.block_dim == 48
    # runs of one index from several cores meet through atomic adds: within tolerance
    ok, info = nx.mixed_tolerance_check(res.outputs["out"], _golden(g, idx, num_weights=1000), dtype)
    assert ok, info


@pytest.mark.parametrize("emb", [24, 20])        # 20: rows padded to 32 B in UB (embeddingDimAlign)
def test_a2_small_dim_sum_is_bitwise_the_golden_when_each_index_stays_in_one_tile(emb):
    # 512 rows on 48 cores: 10 rows per core, 42 on the last (Tiling4SmallDim); each index's
    # rows lie in one core's tile, shuffled: the kernel sorts the tile and sums each run from 0
    # in position order, then one atomic add into the zeroed out -- the golden's order
    rng = np.random.default_rng(41)
    n = 512
    idx = np.empty(n, np.int32)
    for c in range(48):
        lo, hi = eb.small_dim_rows(n, 48, c)
        idx[lo:hi] = rng.permutation((np.arange(lo, hi) // 5))
    g = _grad(rng, (n, emb))
    res = _run(grad=g, indices=idx, num_weights=n // 5 + 1)
    assert res.tiling.small_dim_kernel
    assert _bits(res.outputs["out"]) == _bits(_golden(g, idx, num_weights=n // 5 + 1))


def test_a2_small_dim_tiles_a_core_rows_by_max_row_in_ub():
    # maxRowInUb = ((192 KiB - 20480) / 4 - 512 - 256) / (10 + 512) = 82 rows of embeddingDim 512
    rng = np.random.default_rng(42)
    g, idx = _grad(rng, (200, 512)), rng.integers(0, 50, 200).astype(np.int32)
    res = _run(grad=g, indices=idx, num_weights=50, tiling={"block_dim": 1}, trace="instruction")
    assert res.tiling.sd_max_rows == eb.small_dim_max_rows(196608, 512) == 82
    assert [s.elements for s in res.trace.slices(thread="VECTOR") if s.name == "Sort"] == [96, 96, 64]
    ok, info = nx.mixed_tolerance_check(res.outputs["out"], _golden(g, idx, num_weights=50), "fp32")
    assert ok, info


@pytest.mark.parametrize("emb,attrs", [
    (eb.SMALL_DIM_THRESH + 1, {}),                 # embeddingDim 513
    (64, {"deterministic": True}),
])
def test_a2_past_the_small_dim_thresholds_the_sort_path_runs(emb, attrs):
    rng = np.random.default_rng(43)
    g, idx = _grad(rng, (96, emb)), rng.integers(0, 30, 96).astype(np.int32)
    res = _run(grad=g, indices=idx, num_weights=30, trace="instruction", **attrs)
    names = _launch_names(res)
    assert names[:3] == ["Sort", "ZerosLike", "MemSet"] and not res.tiling.small_dim_kernel
    assert not res.tiling.small_dim
    ok, info = nx.mixed_tolerance_check(res.outputs["out"], _golden(g, idx, num_weights=30, **attrs), "fp32")
    assert ok, info


def test_a2_small_dim_with_scale_counts_runs_and_scales_inside_the_one_launch():
    # embedding_dense_grad_v2.cpp ProcessAndScale<true, false> (tiling key 101): InitWorkspace,
    # SyncAll, the small-dim kernel (CopyOut adds each run's length to the counts), SyncAll, scale
    rng = np.random.default_rng(44)
    g, idx = _grad(rng, (64, 8)), rng.integers(0, 5, 64).astype(np.int32)
    res = _run(grad=g, indices=idx, num_weights=5, scale_grad_by_freq=True, trace="instruction")
    assert _launch_names(res) == ["MemSet", "EmbeddingDenseGradV2"] and res.tiling.small_dim_kernel
    assert res.tiling.block_dim == 5                       # coreNum capped by numWeights with scale
    count_adds = [s for s in res.trace.slices(thread="MTE3") if s.detail.endswith("atomic add") and s.nbytes == 4]
    assert count_adds and {s.process for s in res.trace.slices(thread="VECTOR") if s.name == "Muls"}
    ok, info = nx.mixed_tolerance_check(res.outputs["out"], _golden(g, idx, num_weights=5, scale_grad_by_freq=True),
                                        "fp32")
    assert ok, info


# ---------------------------------------------------------------------------------------------
# scaleGradByFreq on Atlas A2: the scale stage plans the UB afresh (ProcessAndScale's
# tpipe.Destroy(), docs/sources.md#embedding-a2-scale-stage)
# ---------------------------------------------------------------------------------------------

def _scaled_sums(g, idx, nw, pad):
    """Plain numpy: each index's grad rows summed in fp64, divided by the index's count (0 -> 1),
    the padding row zero."""
    out = np.zeros((nw, g.shape[1]), np.float64)
    for row, k in zip(g.astype(np.float64), idx):
        if k != pad:
            out[k] += row
    counts = np.bincount(idx, minlength=nw)
    return out / np.maximum(counts, 1)[:, None]


@pytest.mark.parametrize("device, emb, det", [
    ("atlas-a2", 2048, False), ("atlas-a2", 2048, True), ("atlas-a2", 1024, False),
    ("atlas-a2-910b1", 1024, False), ("atlas-a2-910b3", 1024, False), ("atlas-a2-910b4", 1024, True),
])
def test_a2_scale_runs_in_timing_mode_on_rows_whose_accumulators_and_the_scale_buffers_overflow_the_ub(
        device, emb, det):
    # the accumulation kernel's grad row and two accumulators (3 x emb x 4 B) and the scale
    # kernel's buffers do not fit the 192 KiB UB together: the scale stage runs after
    # tpipe.Destroy(), so only the larger of the two plans is ever held
    res = _run(device, mode="timing", grad=opsim.TensorSpec((4096, emb), "fp32"),
               indices=opsim.TensorSpec((4096,), "int32"), num_weights=512, scale_grad_by_freq=True,
               deterministic=det)
    assert res.tiling.row_kernel != det and res.tiling.det_kernel == det
    assert res.stats["ub_peak_bytes"] <= opsim.device_spec(device).ub.size
    est = _run(device, mode="estimate", grad=opsim.TensorSpec((4096, emb), "fp32"),
               indices=opsim.TensorSpec((4096,), "int32"), num_weights=512, scale_grad_by_freq=True,
               deterministic=det)
    assert abs(est.cycles / res.cycles - 1) < 0.1


@pytest.mark.parametrize("det", [False, True])
def test_a2_scale_on_wide_rows_in_full_mode_is_the_scaled_sum_with_the_padding_row_zero(det):
    rng = np.random.default_rng(71)
    nw, pad = 40, 3
    idx = rng.integers(0, nw, 96).astype(np.int32)
    g = _grad(rng, (96, 2048))
    res = _run(grad=g, indices=idx, num_weights=nw, padding_idx=pad, scale_grad_by_freq=True, deterministic=det,
               sanitize=True)
    assert res.sanitizer.ok, str(res.sanitizer)           # no race between the stages' buffers
    out = res.outputs["out"]
    assert np.all(out[pad] == 0)
    ok, info = nx.mixed_tolerance_check(out, _scaled_sums(g, idx, nw, pad).astype(np.float32), "fp32")
    assert ok, info


@pytest.mark.slow
def test_a2_small_dim_scale_with_many_weights_frees_the_counts_zero_buffer_before_the_scale_stage():
    # numWeights / 48 cores > 2560 counts per core: InitWorkspace's zero buffer (over 10 KiB)
    # and the scale kernel's buffers do not fit together (slow: the scale stage steps each of
    # the 130,000 rows, ~50 s)
    res = _run(mode="timing", grad=opsim.TensorSpec((64, 8), "fp32"), indices=opsim.TensorSpec((64,), "int32"),
               num_weights=130000, scale_grad_by_freq=True)
    assert res.tiling.small_dim_kernel and res.cycles > 0


def test_a2_scale_through_aclnn_returns_success_and_the_scaled_sums():
    rt, stream, mk = _acl_setup("atlas-a2")
    rng = np.random.default_rng(72)
    nw = 40
    idx = rng.integers(0, nw, 96).astype(np.int32)
    g = _grad(rng, (96, 1024))
    _, gt = mk(g)
    _, it = mk(idx)
    o_ptr, ot = mk(np.full((nw, 1024), 7.0, np.float32))
    ws, ex, ret = aclnnEmbeddingDenseBackwardGetWorkspaceSize(gt, it, nw, -1, True, ot)
    assert ret == 0
    wptr, _ = rt.aclrtMalloc(ws)
    assert aclnnEmbeddingDenseBackward(wptr, ws, ex, stream) == 0
    # before the fix: 507015 (ACL_ERROR_RT_AICORE_EXCEPTION) here, "CapacityError ... UB: cannot allocate"
    assert rt.aclrtSynchronizeStream(stream) == 0, rt.aclGetRecentErrMsg()
    host = np.empty((nw, 1024), np.float32)
    rt.aclrtMemcpy(host, host.nbytes, o_ptr, host.nbytes, ACL_MEMCPY_DEVICE_TO_HOST)
    ok, info = nx.mixed_tolerance_check(host, _scaled_sums(g, idx, nw, -1).astype(np.float32), "fp32")
    assert ok, info


def test_a_block_dim_override_of_the_training_deterministic_kernel_is_refused_not_ignored():
    # owner-computes: one block per owner of out rows (100 rows over 32 cores: 4 rows per owner,
    # 25 owners); block_dim 7 ran as 25 blocks without a word
    rng = np.random.default_rng(21)
    g = rng.standard_normal((64, 16)).astype(np.float32)
    idx = rng.integers(0, 100, 64).astype(np.int64)
    kw = dict(grad=g, indices=idx, num_weights=100, deterministic=True)
    with pytest.raises(opsim.OpError) as e:
        _run("atlas-training", tiling={"block_dim": 7}, **kw)
    assert e.value.code == 561002
    assert e.value.message == ("block_dim 7: the deterministic kernel of atlas-training runs one block per owner "
                               "of output rows, ceil(num_weights 100 / 4 rows per owner) = 25; allowed: block_dim "
                               "25 (or no block_dim override)")
    same = _run("atlas-training", tiling={"block_dim": 25}, **kw)
    assert same.tiling.block_dim == 25
    assert _bits(same.outputs["out"]) == _bits(_golden(g, idx, num_weights=100))
    # the non-deterministic kernel still takes the block count it is given
    assert _run("atlas-training", tiling={"block_dim": 7}, grad=g, indices=idx, num_weights=100).tiling.block_dim == 7
