"""aclnnMseLossBackward: conformance against the golden and an fp64 truth, checks, tiling, timing."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import opsim
from opsim.kernels.aclnn import aclnnMseLossBackward, aclnnMseLossBackwardGetWorkspaceSize
from opsim.kernels.ascend import mse_backward as mse
from opsim.simulator import numerics as nx
from opsim.simulator.acl import ACL_MEMCPY_HOST_TO_DEVICE, AclRuntime

ASCEND_FAMILIES = ("atlas-training", "atlas-inference", "atlas-a2", "atlas-a3")
NP_DTYPES = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}

# (gradOutput, self, target) shapes for 0..8 dims, each with some broadcasting
SHAPES_BY_DIMS = {
    0: ((), (), ()),
    1: ((37,), (37,), (1,)),
    2: ((1, 33), (5, 33), (33,)),
    3: ((2, 3, 4), (2, 3, 4), (3, 1)),
    4: ((2, 1, 3, 5), (2, 4, 3, 5), (1, 5)),
    5: ((2, 3, 1, 2, 3), (2, 3, 2, 2, 3), (2, 3, 2, 2, 3)),
    6: ((1, 2, 1, 3, 1, 2), (2, 2, 2, 3, 2, 2), (2, 1, 3, 1, 2)),
    7: ((2, 1, 2, 1, 2, 1, 3), (2, 2, 2, 2, 2, 2, 3), ()),
    8: ((2, 1, 2, 1, 2, 1, 2, 3), (2, 2, 2, 2, 2, 2, 2, 3), (2, 3)),
}


def _inputs(shapes, dtype, rng):
    dt = NP_DTYPES[dtype]
    return [rng.uniform(-2, 2, s).astype(np.float32).astype(dt) for s in shapes]


def _bits(a):
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _dtypes(device):
    return mse.supported_dtypes(opsim.device_spec(device))


@pytest.mark.parametrize("dims", sorted(SHAPES_BY_DIMS))
@pytest.mark.parametrize("device", ASCEND_FAMILIES)
def test_output_is_bitwise_equal_to_golden_and_within_ecosystem_standard(device, dims):
    rng = np.random.default_rng(dims)
    for dtype in _dtypes(device):
        g, x, y = _inputs(SHAPES_BY_DIMS[dims], dtype, rng)
        for reduction in ("none", "mean", "sum"):
            res = opsim.run("mse_loss_backward", device=device, grad_output=g, self=x, target=y,
                            reduction=reduction, trace="off")
            out = res.outputs["out"]
            gold = mse.golden({"grad_output": g, "self": x, "target": y}, {"reduction": reduction})["out"]
            assert out.dtype == x.dtype and out.shape == gold.shape
            assert np.array_equal(_bits(out), _bits(gold)), (device, dtype, reduction)
            truth = mse.truth({"grad_output": g, "self": x, "target": y}, {"reduction": reduction})["out"]
            ok, info = nx.ecosystem_check(out.astype(np.float64), truth, nx.dtype(dtype))
            assert ok, (device, dtype, reduction, info)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_multi_core_double_buffered_run_matches_golden(dtype):
    rng = np.random.default_rng(1)
    g, x, y = _inputs(((70001,), (70001,), (70001,)), dtype, rng)
    res = opsim.run("mse_loss_backward", device="atlas-a2", grad_output=g, self=x, target=y,
                    reduction="mean", trace="off")
    assert res.stats["buffer_num"] == 2 and res.stats["block_dim"] > 1
    gold = mse.golden({"grad_output": g, "self": x, "target": y}, {"reduction": "mean"})["out"]
    assert np.array_equal(_bits(res.outputs["out"]), _bits(gold))


def test_mean_uses_two_over_numel_of_self_as_fp32_constant():
    assert mse.cof_of(1, 3) == float(np.float32(2.0 / 3))
    assert mse.cof_of(0, 3) == 2.0 and mse.cof_of(2, 3) == 2.0


def test_bf16_arithmetic_is_cast_to_fp32_before_compute():
    rng = np.random.default_rng(2)
    g, x, y = _inputs(((256,), (256,), (256,)), "bf16", rng)
    res = opsim.run("mse_loss_backward", device="atlas-a2", grad_output=g, self=x, target=y, reduction="sum")
    names = [s.name for s in res.trace.slices(thread="VECTOR")]
    assert names[:3] == ["Cast", "Cast", "Cast"] and names[-1] == "Cast"
    assert {"Sub", "Muls", "Mul"} <= set(names)


def _fp32_chain(g, x, y, reduction):
    """(x − y)·cof·g in fp32 over the broadcast of all three, cof = fp32(2/numel(self)) for
    mean, else 2 (numerics: cast to fp32, Sub, Muls, Mul), written out here, not via mse.golden."""
    shape = np.broadcast_shapes(np.shape(g), np.shape(x), np.shape(y))
    f = [np.broadcast_to(np.asarray(v).astype(np.float32), shape) for v in (x, y, g)]
    cof = np.float32(2.0 / np.size(x)) if reduction == 1 else np.float32(2.0)
    return ((f[0] - f[1]) * cof) * f[2]


@pytest.mark.parametrize("self_dt,out_dt", [("fp32", "fp16"), ("fp32", "bf16"), ("bf16", "fp32"),
                                            ("fp16", "bf16")])
def test_out_of_another_supported_dtype_gets_the_librarys_cast(self_dt, out_dt):
    """Seed: out supports BFLOAT16, FLOAT16, FLOAT; the library casts the kernel's result (self's
    dtype) to out's dtype (l0op::Cast), so out need not have self's dtype."""
    rng = np.random.default_rng(11)
    g, x, y = _inputs(((3, 70), (3, 70), (70,)), self_dt, rng)
    rt = AclRuntime("atlas-a2")
    assert rt.aclInit() == 0 and rt.aclrtSetDevice(0) == 0
    stream, _ = rt.aclrtCreateStream()
    out_host = np.full((3, 70), 5, NP_DTYPES[out_dt])
    t = [_acl_tensor(rt, a) for a in (g, x, y, out_host)]
    ws, ex, ret = aclnnMseLossBackwardGetWorkspaceSize(*t[:3], 1, t[3])
    assert ret == 0, rt.aclGetRecentErrMsg()
    assert ws >= 3 * 70 * np.dtype(NP_DTYPES[self_dt]).itemsize   # the kernel's result lives there
    wsp, _ = rt.aclrtMalloc(ws)
    assert aclnnMseLossBackward(wsp, ws - 1, ex, stream) == 161002     # a workspace smaller than asked
    assert aclnnMseLossBackward(wsp, ws, ex, stream) == 0
    assert rt.aclrtSynchronizeStream(stream) == 0
    got = np.empty_like(out_host)
    assert rt.aclrtMemcpy(got, got.nbytes, t[3].addr, got.nbytes, 2) == 0
    # rounded to self's dtype by the kernel, then (widened exactly) rounded once more to out's
    expect = _fp32_chain(g, x, y, 1).astype(NP_DTYPES[self_dt]).astype(np.float32).astype(NP_DTYPES[out_dt])
    assert np.array_equal(_bits(got), _bits(expect))
    assert [ln.name for ln in ex.launches] == ["MseLossGradV2", "Cast(out)"]


@pytest.mark.parametrize("shapes,out_shape", [
    (((4, 8), (4, 8), (2, 4, 8)), (2, 4, 8)),     # target has more dimensions
    (((4, 1), (4, 1), (1, 8)), (4, 8)),           # target widens a size-1 dimension
    (((), (5,), (3, 1)), (3, 5)),
])
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_target_broadcasts_with_grad_and_self_and_out_is_the_broadcast_of_all_three(shapes, out_shape, reduction):
    """Seed: out has the shape of gradOutput, self and target broadcast together; the library
    checks target against the broadcast of gradOutput and self with CheckBroadcastShape (either
    way). mean still divides by numel(self)."""
    rng = np.random.default_rng(12)
    g, x, y = _inputs(shapes, "fp32", rng)
    res = opsim.run("mse_loss_backward", device="atlas-a2", grad_output=g, self=x, target=y,
                    reduction=reduction, trace="off")
    assert res.outputs["out"].shape == out_shape
    assert np.array_equal(_bits(res.outputs["out"]), _bits(_fp32_chain(g, x, y, reduction)))


# ---------------------------------------------------------------------------------------------
# Bad inputs: each documented check, through opsim.run and through the aclnn entry points
# ---------------------------------------------------------------------------------------------

def _f32(*shape):
    return np.ones(shape, dtype=np.float32)


BAD_CALLS = [
    # (description, device, kwargs, code, message fragments)
    ("bf16 on the training series", "atlas-training",
     dict(grad_output=np.ones(4, ml_dtypes.bfloat16), self=np.ones(4, ml_dtypes.bfloat16),
          target=np.ones(4, ml_dtypes.bfloat16)), 161002, ["self", "BFLOAT16", "supports FLOAT, FLOAT16"]),
    ("int32 dtype", "atlas-a2", dict(grad_output=np.ones(4, np.int32), self=np.ones(4, np.int32),
                                     target=np.ones(4, np.int32)), 161002, ["INT32"]),
    ("target dtype differs", "atlas-a2", dict(grad_output=_f32(4), self=_f32(4), target=np.ones(4, np.float16)),
     161002, ["target", "FLOAT16", "self's dtype FLOAT"]),
    ("gradOutput dtype differs", "atlas-a2", dict(grad_output=np.ones(4, np.float16), self=_f32(4), target=_f32(4)),
     161002, ["gradOutput"]),
    ("reduction 3", "atlas-a2", dict(grad_output=_f32(4), self=_f32(4), target=_f32(4), reduction=3),
     161002, ["reduction", "3", "between 0 and 2"]),
    ("reduction -1", "atlas-a2", dict(grad_output=_f32(4), self=_f32(4), target=_f32(4), reduction=-1),
     161002, ["reduction", "-1"]),
    ("9 dimensions", "atlas-a2", dict(grad_output=_f32(*[1] * 9), self=_f32(*[1] * 9), target=_f32(*[1] * 9)),
     161002, ["9 dimensions", "at most 8"]),
    ("gradOutput does not broadcast", "atlas-a2", dict(grad_output=_f32(3), self=_f32(4), target=_f32(4)),
     161002, ["gradOutput shape [3]", "self shape [4]"]),
    ("target does not broadcast", "atlas-a2", dict(grad_output=_f32(2, 4), self=_f32(2, 4), target=_f32(3, 4)),
     161002, ["target shape [3, 4]", "[2, 4]"]),
    ("out dtype outside the list", "atlas-a2", dict(grad_output=_f32(2, 4), self=_f32(2, 4), target=_f32(2, 4),
                                                    out=np.zeros((2, 4), np.int32)), 161002, ["out", "INT32"]),
    ("out bf16 on the training series", "atlas-training",
     dict(grad_output=_f32(2, 4), self=_f32(2, 4), target=_f32(2, 4), out=np.zeros((2, 4), ml_dtypes.bfloat16)),
     161002, ["out", "BFLOAT16", "supports FLOAT, FLOAT16"]),
    ("out not the broadcast of all three", "atlas-a2",
     dict(grad_output=_f32(4), self=_f32(4), target=_f32(2, 4), out=_f32(4)), 161002, ["out shape [4]", "[2, 4]"]),
    ("out shape wrong", "atlas-a2", dict(grad_output=_f32(2, 4), self=_f32(2, 4), target=_f32(2, 4),
                                         out=_f32(4, 2)), 161002, ["out shape [4, 2]", "[2, 4]"]),
    ("product not supported", "atlas-200i-500-a2", dict(grad_output=_f32(4), self=_f32(4), target=_f32(4)),
     361001, ["not supported", "Atlas 200I/500 A2"]),
]


@pytest.mark.parametrize("what,device,kwargs,code,fragments", BAD_CALLS, ids=[b[0] for b in BAD_CALLS])
def test_bad_input_is_rejected_with_code_and_message(what, device, kwargs, code, fragments):
    kwargs = {"reduction": "mean", **kwargs}
    with pytest.raises(opsim.OpError) as ei:
        opsim.run("mse_loss_backward", device=device, **kwargs)
    assert ei.value.code == code
    for f in fragments:
        assert f in ei.value.message, (f, ei.value.message)


def _acl_tensor(rt, arr):
    ptr, ret = rt.aclrtMalloc(max(arr.nbytes, 1))
    assert ret == 0
    if arr.nbytes:
        assert rt.aclrtMemcpy(ptr, arr.nbytes, arr, arr.nbytes, ACL_MEMCPY_HOST_TO_DEVICE) == 0
    strides = [int(np.prod(arr.shape[i + 1:])) for i in range(arr.ndim)]
    return rt.aclCreateTensor(list(arr.shape), nx.dtype(arr.dtype).acl, strides, 0, 2, list(arr.shape), ptr)


@pytest.mark.parametrize("what,device,kwargs,code,fragments", BAD_CALLS, ids=[b[0] for b in BAD_CALLS])
def test_bad_input_through_aclnn_returns_code_and_never_raises(what, device, kwargs, code, fragments):
    rt = AclRuntime(device)
    assert rt.aclInit() == 0 and rt.aclrtSetDevice(0) == 0
    out = kwargs.get("out", np.zeros(kwargs["self"].shape, kwargs["self"].dtype))
    t = {k: _acl_tensor(rt, v) for k, v in {**kwargs, "out": out}.items() if isinstance(v, np.ndarray)}
    digest = rt.device.space.snapshot_digest()
    ws, ex, ret = aclnnMseLossBackwardGetWorkspaceSize(t["grad_output"], t["self"], t["target"],
                                                       kwargs.get("reduction", 1), t["out"])
    assert ret == code and ex is None and ws == 0
    for f in fragments:
        assert f in rt.aclGetRecentErrMsg()
    assert rt.device.space.snapshot_digest() == digest


@pytest.mark.parametrize("missing", ["gradOutput", "self", "target", "out"])
def test_null_tensor_gives_161001(missing):
    rt = AclRuntime("atlas-a2")
    rt.aclInit(), rt.aclrtSetDevice(0)
    t = {k: _acl_tensor(rt, _f32(4)) for k in ("gradOutput", "self", "target", "out")}
    t[missing] = None
    ws, ex, ret = aclnnMseLossBackwardGetWorkspaceSize(t["gradOutput"], t["self"], t["target"], 1, t["out"])
    assert ret == 161001 and ex is None
    assert missing in rt.aclGetRecentErrMsg() and "null" in rt.aclGetRecentErrMsg()


def test_execute_with_null_executor_or_twice_returns_codes():
    rt = AclRuntime("atlas-a2")
    rt.aclInit(), rt.aclrtSetDevice(0)
    stream, _ = rt.aclrtCreateStream()
    assert aclnnMseLossBackward(0, 0, None, stream) == 161001
    t = [_acl_tensor(rt, _f32(4)) for _ in range(4)]
    ws, ex, ret = aclnnMseLossBackwardGetWorkspaceSize(*t[:3], 0, t[3])
    assert ret == 0
    assert aclnnMseLossBackward(0, ws, ex, stream) == 0
    assert aclnnMseLossBackward(0, ws, ex, stream) == 161002
    assert "already" in rt.aclGetRecentErrMsg()
    assert rt.aclrtSynchronizeStream(stream) == 0


def test_empty_self_gives_workspace_zero_and_success():
    rt = AclRuntime("atlas-a2")
    rt.aclInit(), rt.aclrtSetDevice(0)
    stream, _ = rt.aclrtCreateStream()
    empty = np.zeros((0, 4), np.float32)
    t = [_acl_tensor(rt, empty) for _ in range(4)]
    ws, ex, ret = aclnnMseLossBackwardGetWorkspaceSize(*t[:3], 1, t[3])
    assert (ws, ret) == (0, 0) and ex is not None
    assert aclnnMseLossBackward(0, ws, ex, stream) == 0
    assert rt.aclrtSynchronizeStream(stream) == 0
    res = opsim.run("mse_loss_backward", grad_output=empty, self=empty, target=empty)
    assert res.outputs["out"].shape == (0, 4) and res.cycles == 0


def test_non_contiguous_acl_views_are_read_and_written_through_strides():
    """aclCreateTensor with strides/offset: the kernel reads a transposed view, writes a strided out."""
    rt = AclRuntime("atlas-a2")
    rt.aclInit(), rt.aclrtSetDevice(0)
    stream, _ = rt.aclrtCreateStream()
    rng = np.random.default_rng(5)
    base = rng.standard_normal((8, 6)).astype(np.float32)
    ptr, _ = rt.aclrtMalloc(base.nbytes)
    rt.aclrtMemcpy(ptr, base.nbytes, base, base.nbytes, ACL_MEMCPY_HOST_TO_DEVICE)
    xt = rt.aclCreateTensor([6, 8], 0, [1, 6], 0, 2, [8, 6], ptr)          # transposed view
    g = _acl_tensor(rt, np.full((6, 8), 0.5, np.float32))
    y = _acl_tensor(rt, np.zeros((6, 8), np.float32))
    out_storage = np.zeros((6, 16), np.float32)
    optr, _ = rt.aclrtMalloc(out_storage.nbytes)
    rt.aclrtMemcpy(optr, out_storage.nbytes, out_storage, out_storage.nbytes, ACL_MEMCPY_HOST_TO_DEVICE)
    out = rt.aclCreateTensor([6, 8], 0, [16, 2], 1, 2, [6, 16], optr)     # every other element, offset 1
    ws, ex, ret = aclnnMseLossBackwardGetWorkspaceSize(g, xt, y, 2, out)
    assert ret == 0
    assert aclnnMseLossBackward(0, ws, ex, stream) == 0 and rt.aclrtSynchronizeStream(stream) == 0
    host = np.zeros_like(out_storage)
    rt.aclrtMemcpy(host, host.nbytes, optr, host.nbytes, 2)
    expect = (base.T.astype(np.float32) * np.float32(2.0)) * np.float32(0.5)
    assert np.array_equal(host[:, 1::2], expect)
    assert np.all(host[:, 0::2] == 0)   # nothing outside the view was touched


# ---------------------------------------------------------------------------------------------
# Tiling and the pipeline
# ---------------------------------------------------------------------------------------------

def test_plan_follows_documented_tiling():
    spec = opsim.device_spec("atlas-a2")
    from opsim.kernels.common import TensorDesc
    d = TensorDesc((1 << 20,), nx.FP32)
    t = mse.plan(spec, {"self": d, "out": d}, {"reduction": 1})
    # maxTile = UB / 16 = 12288 fp32 elements; blockDim = min(48, ceil(total / maxTile))
    assert t.block_dim == min(48, -(-(1 << 20) // 12288))
    assert t.buffer_num == 2 and t.tile_length == 196608 // 32
    assert t.per_core * (t.block_dim - 1) + t.last_core == 1 << 20
    small = TensorDesc((65536,), nx.FP16)
    t = mse.plan(spec, {"self": small, "out": small}, {"reduction": 1})
    assert t.buffer_num == 1 and t.block_dim == 65536 // 8192   # fp16: UB / 24 = 8192


def test_forced_tile_that_does_not_fit_ub_gives_561002_with_bytes():
    x = np.ones(100000, np.float32)
    with pytest.raises(opsim.OpError) as ei:
        opsim.run("mse_loss_backward", grad_output=x, self=x, target=x, tiling={"tile_length": 20000})
    e = ei.value
    assert e.code == 561002
    assert "needs 640000 B" in e.message and "UB has 196608 B" in e.message


@pytest.mark.parametrize("op, device, ub, buffer_num", [
    ("mse_loss_backward", "atlas-a2", 512, None),       # the default double buffering: 1024 B
    ("mse_loss_backward", "atlas-a2", 768, 2),          # forced double buffering, default tile
    ("binary_cross_entropy_backward", "atlas-inference", 1024, None),
])
def test_what_if_ub_too_small_for_one_aligned_tile_is_refused_at_plan_time(op, device, ub, buffer_num):
    # a what-if UB that holds one 32-element tile with one buffer but not with two: the plan used
    # to take the 32-element tile anyway and the run died mid-way with a CapacityError on a core
    x = np.ones(1 << 17, np.float32)
    operands = {"grad_output": x, "self": x, "target": x}
    if op == "binary_cross_entropy_backward":
        operands["weight"] = x
    tiling = {} if buffer_num is None else {"buffer_num": buffer_num}
    with pytest.raises(opsim.OpError) as ei:
        opsim.run(op, device=device, mode="timing", device_overrides={"ub.size": ub}, tiling=tiling,
                  **{k: opsim.TensorSpec(v.shape, "fp32") for k, v in operands.items()})
    e = ei.value
    assert e.code == 561002
    assert f"UB has {ub} B" in e.message and "buffer_num 2" in e.message and "tile_length" in e.message


def _overlaps(a, b):
    return a.start < b.end and b.start < a.end


def _tile_slices(res, core, pipe):
    return {s.tile: s for s in res.trace.slices(process=core, thread=pipe)}


@pytest.mark.parametrize("buffer_num", [1, 2])
def test_double_buffering_overlaps_load_of_next_tile_with_compute(buffer_num):
    x = np.random.default_rng(3).standard_normal(6 * 2048).astype(np.float32)
    res = opsim.run("mse_loss_backward", grad_output=x, self=x, target=x, reduction="none", trace="tile",
                    tiling={"block_dim": 1, "tile_length": 2048, "buffer_num": buffer_num})
    core = "core0.veccore0"
    mte2, vec = _tile_slices(res, core, "MTE2"), _tile_slices(res, core, "VECTOR")
    overlapping = [i for i in range(5) if _overlaps(mte2[i + 1], vec[i])]
    if buffer_num == 2:
        assert len(overlapping) == 5
    else:
        assert overlapping == []
    for pipe in ("MTE2", "VECTOR", "MTE3"):
        sl = sorted(res.trace.slices(process=core, thread=pipe), key=lambda s: s.start)
        assert all(a.end <= b.start for a, b in zip(sl, sl[1:])), f"{pipe} overlaps itself"


def test_double_buffering_is_faster_than_single():
    x = np.ones(8 * 4096, np.float32)
    cyc = {b: opsim.run("mse_loss_backward", grad_output=x, self=x, target=x, trace="off",
                        tiling={"block_dim": 1, "tile_length": 4096, "buffer_num": b}).cycles for b in (1, 2)}
    assert cyc[2] < cyc[1]


def test_48_cores_take_less_than_half_the_cycles_of_one_core():
    n = 1 << 22
    spec = opsim.TensorSpec((n,), "fp32")
    one = opsim.run("mse_loss_backward", mode="timing", trace="off", grad_output=spec, self=spec, target=spec,
                    tiling={"block_dim": 1})
    many = opsim.run("mse_loss_backward", mode="timing", trace="off", grad_output=spec, self=spec, target=spec)
    assert many.stats["block_dim"] == 48
    assert many.cycles < one.cycles / 2
    assert many.stats["links"]["HBM"]["max_rate_GBps"] <= many.stats["links"]["HBM"]["peak_GBps"] + 1e-9


def test_core_mask_puts_blocks_only_on_allowed_cores():
    x = np.ones(200000, np.float32)
    mask = 0b1010_0000_0000_0110
    res = opsim.run("mse_loss_backward", grad_output=x, self=x, target=x, tiling={"core_mask": mask}, trace="launch")
    used = {s.process for s in res.trace.slices(thread="BLOCK")}
    allowed = {opsim.device_spec("atlas-a2") and f"core{i // 2}.veccore{i % 2}" for i in range(48) if mask >> i & 1}
    assert used <= allowed and len(used) == res.stats["block_dim"] == 4
