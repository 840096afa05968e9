"""aclnnBinaryCrossEntropyBackward: checks, host flow, kernel numerics, tiling, traces."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import opsim
from opsim.kernels.aclnn import aclnnBinaryCrossEntropyBackward, aclnnBinaryCrossEntropyBackwardGetWorkspaceSize
from opsim.kernels.ascend import bce_backward as bce
from opsim.kernels.common import ACL_FORMAT_ND
from opsim.simulator import numerics as nx
from opsim.simulator.acl import (ACL_BF16, ACL_FLOAT, ACL_FLOAT16, ACL_MEMCPY_DEVICE_TO_HOST,
                           ACL_MEMCPY_HOST_TO_DEVICE, AclRuntime)

OP = "binary_cross_entropy_backward"
BF16 = ml_dtypes.bfloat16
PRODUCT_DTYPES = [("atlas-training", np.float32), ("atlas-training", np.float16),
                  ("atlas-inference", np.float32), ("atlas-inference", np.float16),
                  ("atlas-a2", np.float32), ("atlas-a2", np.float16), ("atlas-a2", BF16),
                  ("atlas-a3", np.float32), ("atlas-a3", np.float16), ("atlas-a3", BF16)]


def operands(shape, dtype, seed=0, g_shape=None, y_shape=None, w_shape=None, endpoints=True, weight=True):
    """x in (0, 1) with 0 and 1 included; fp32 also gets y != x at the endpoints (the clamp then
    gives -+1e12, representable in fp32 and bf16, not in fp16)."""
    rng = np.random.default_rng(seed)
    g_shape = shape if g_shape is None else g_shape
    y_shape = shape if y_shape is None else y_shape
    w_shape = shape if w_shape is None else w_shape
    x = rng.uniform(0.01, 0.99, shape).astype(np.float32)
    y = rng.uniform(0.0, 1.0, y_shape).astype(np.float32)
    if endpoints and x.size >= 4 and y.shape == x.shape:
        flat_x, flat_y = x.reshape(-1), y.reshape(-1)
        flat_x[:4] = [0.0, 1.0, 0.0, 1.0]
        flat_y[:4] = [0.0, 1.0, 1.0, 0.0] if dtype != np.float16 else [0.0, 1.0, 0.0, 1.0]
    out = {"grad_output": rng.uniform(0.5, 2.0, g_shape).astype(np.float32).astype(dtype),
           "self": x.astype(dtype), "target": y.astype(dtype)}
    if weight:
        out["weight"] = rng.uniform(0.5, 2.0, w_shape).astype(np.float32).astype(dtype)
    return out


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def run(device="atlas-a2", reduction=1, **kw):
    return opsim.run(OP, device=device, trace="off", reduction=reduction, **kw)


# ---------------------------------------------------------------------------------------------
# numerics
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("device,dtype", PRODUCT_DTYPES,
                         ids=[f"{d}-{np.dtype(t).name}" for d, t in PRODUCT_DTYPES])
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_every_product_is_bitwise_equal_to_the_golden(device, dtype, reduction):
    a = operands((3, 130), dtype, g_shape=(3, 1), w_shape=(130,))
    res = run(device, reduction, **a)
    np.testing.assert_array_equal(bits(res.outputs["out"]), bits(bce.golden(a, {"reduction": reduction})["out"]))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_the_ecosystem_standard_holds_against_fp64_including_the_clamp(dtype, reduction):
    a = operands((2048,), dtype, seed=4)
    if reduction == 1:
        # mean scales by 1/2048: scale the upstream gradient up so fp16 results stay normal
        # numbers (in the subnormal range no fp16 result can meet a relative-error standard)
        a["grad_output"] = (a["grad_output"].astype(np.float32) * 2048).astype(dtype)
    out = run("atlas-a2", reduction, **a).outputs["out"]
    ok, info = nx.ecosystem_check(out, bce.truth(a, {"reduction": reduction})["out"], nx.dtype(dtype))
    assert ok, info
    assert out[0] == 0 and out[1] == 0                       # x = y = 0, 1: 0 / max(0, eps) = 0
    if dtype != np.float16:
        # x = 0, y = 1 and x = 1, y = 0: (x - y) / 1e-12 = -+1e12 times grad and weight
        assert out[2] < -1e11 and out[3] > 1e11


@pytest.mark.parametrize("shape,g_shape,y_shape,w_shape", [
    ((), (), (), ()),
    ((5,), (1,), (5,), (1,)),
    ((2, 3), (3,), (2, 1), (1, 3)),
    ((2, 1, 4), (1, 4), (2, 1, 4), (4,)),
    ((2, 2, 1, 3), (2, 1, 1, 3), (3,), (2, 2, 1, 3)),
    ((1, 2, 2, 2, 3), (3,), (1, 2, 2, 2, 3), (2, 1, 1, 1)),
    ((2, 1, 2, 1, 2, 3), (1,), (2, 1, 2, 1, 2, 3), (2, 1, 1, 3)),
    ((1, 2, 1, 2, 1, 2, 3), (2, 1, 2, 1, 2, 3), (1, 1, 1, 1, 1, 1, 3), (3,)),
    ((2, 1, 2, 1, 2, 1, 2, 3), (1, 1, 1, 1, 1, 1, 1, 3), (2, 1, 2, 1, 2, 1, 2, 3), (2, 1, 1, 1, 1, 1, 1, 1)),
], ids=[f"{n}d" for n in range(9)])
def test_zero_to_eight_dims_with_broadcast_grad_target_and_weight(shape, g_shape, y_shape, w_shape):
    a = operands(shape, np.float32, g_shape=g_shape, y_shape=y_shape, w_shape=w_shape, endpoints=False)
    res = run("atlas-a2", 1, **a)
    assert res.outputs["out"].shape == shape
    np.testing.assert_array_equal(bits(res.outputs["out"]), bits(bce.golden(a, {"reduction": 1})["out"]))
    ok, info = nx.ecosystem_check(res.outputs["out"], bce.truth(a, {"reduction": 1})["out"], "fp32")
    assert ok, info


def test_mean_multiplies_by_a_host_computed_reciprocal_not_a_divide():
    # 3 elements: x (1 - x) products and grads chosen so that r * fp32(1/3) != r / 3
    a = {"grad_output": np.array([1.0, 1.0, 1.0], np.float32), "self": np.array([0.5, 0.25, 0.75], np.float32),
         "target": np.array([0.0, 0.0, 0.0], np.float32), "weight": np.array([1.0, 3.0, 7.0], np.float32)}
    out = run("atlas-a2", 1, **a).outputs["out"]
    f = np.float32
    r = (a["self"] - a["target"]) / np.maximum((f(1) - a["self"]) * a["self"], f(1e-12)) * a["weight"]
    np.testing.assert_array_equal(out, r * f(1.0 / 3))
    assert not np.array_equal(r * f(1.0 / 3), r / f(3))



@pytest.mark.parametrize("mode", ["full", "numeric"])
def test_mean_cof_is_one_divided_by_each_dimension_in_fp32_as_the_tbe_tiling_does(mode):
    # The TBE tiling divides 1.0f by each dimension of self's shape in turn, in float; for
    # (3, 41) that chain is 1 ulp above fp32(1/123), so the outputs differ from x * fp32(1/N)
    shape = (3, 41)
    a = operands(shape, np.float32, seed=11, endpoints=False)
    f = np.float32
    cof = f(f(f(1.0) / f(3)) / f(41))
    assert cof != f(1.0 / 123)
    x, y, g, w = a["self"], a["target"], a["grad_output"], a["weight"]
    r = (x - y) / np.maximum((x * f(-1) + f(1)) * x, f(1e-12)) * w * g
    out = opsim.run(OP, device="atlas-a2", mode=mode, reduction=1, **a).outputs["out"]
    np.testing.assert_array_equal(bits(out), bits(r * cof))
    assert not np.array_equal(r * cof, r * f(1.0 / 123))

def test_a_missing_weight_is_ones_from_an_oneslike_kernel():
    a = operands((4, 100), np.float16, weight=False)
    res = run("atlas-a2", 2, **a)
    ones = dict(a, weight=np.ones((4, 100), np.float16))
    np.testing.assert_array_equal(bits(res.outputs["out"]), bits(bce.golden(ones, {"reduction": 2})["out"]))
    assert res.stats["launches"] == 2 and res.stats["workspace_bytes"] >= 4 * 100 * 2


def test_mixed_dtypes_are_promoted_and_out_gets_its_own_dtype():
    rng = np.random.default_rng(9)
    a = {"grad_output": rng.uniform(0.5, 2, (6, 40)).astype(BF16), "self": rng.uniform(0.01, 0.99, (6, 40)).astype(np.float16),
         "target": rng.uniform(0, 1, (40,)).astype(np.float16), "weight": rng.uniform(0.5, 2, (6, 40)).astype(np.float32)}
    res = run("atlas-a2", 1, out=np.zeros((6, 40), np.float16), **a)
    assert res.outputs["out"].dtype == np.float16
    np.testing.assert_array_equal(bits(res.outputs["out"]), bits(bce.golden(a, {"reduction": 1}, out_dtype="fp16")["out"]))
    # casts of grad (bf16), self and target (fp16) to fp32, the kernel, the cast to fp16
    assert res.stats["launches"] == 5
    res16 = run("atlas-a2", 0, out=np.zeros((6, 40), np.float32),
                **{k: v.astype(np.float16) for k, v in a.items()})
    gold = bce.golden({k: v.astype(np.float16) for k, v in a.items()}, {"reduction": 0}, out_dtype="fp32")["out"]
    np.testing.assert_array_equal(res16.outputs["out"], gold)        # rounded to fp16 first, then widened
    assert np.array_equal(gold, gold.astype(np.float16).astype(np.float32))


def test_the_bf16_path_computes_in_fp32_on_a2():
    # the A2 vector unit has no bf16 arithmetic: a kernel that forgot the cast would fault
    a = operands((64,), BF16)
    res = opsim.run(OP, device="atlas-a2", trace="instruction", reduction=0, **a)
    names = {(s.name, s.detail) for s in res.trace.slices() if s.thread == "VECTOR"}
    assert ("Cast", "bf16->fp32 none") in names and ("Cast", "fp32->bf16 rint") in names
    assert all(d in ("fp32", "bf16->fp32 none", "fp32->bf16 rint") for n, d in names)


def test_an_empty_self_needs_no_workspace_and_launches_nothing():
    a = operands((0, 3), np.float32, endpoints=False)
    res = run("atlas-a2", 1, **a)
    assert res.outputs["out"].shape == (0, 3) and res.stats.get("empty")
    rt, tensors = acl_setup("atlas-a2", a, np.zeros((0, 3), np.float32))
    ws, ex, ret = aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(tensors["grad_output"], tensors["self"],
                                                                  tensors["target"], tensors["weight"], 1,
                                                                  tensors["out"])
    assert (ws, ret) == (0, 0)
    stream, _ = rt.aclrtCreateStream()
    assert aclnnBinaryCrossEntropyBackward(0, 0, ex, stream) == 0
    assert rt.device.launches == []


# ---------------------------------------------------------------------------------------------
# validation: documented order, codes and messages
# ---------------------------------------------------------------------------------------------

def descs(**over):
    from opsim.kernels.common import TensorDesc
    base = {k: TensorDesc((4, 8), nx.FP32) for k in ("grad_output", "self", "target", "weight", "out")}
    base.update(over)
    return base


def validate(device="atlas-a2", reduction=1, **over):
    return bce.validate(opsim.device_spec(device), descs(**over), {"reduction": reduction})


def td(shape=(4, 8), dtype="fp32", fmt=ACL_FORMAT_ND):
    from opsim.kernels.common import TensorDesc
    return TensorDesc(shape, nx.dtype(dtype), None, fmt)


@pytest.mark.parametrize("over,reduction,device,code,words", [
    ({"grad_output": None}, 1, "atlas-a2", 161001, ["gradOutput is a null pointer"]),
    ({"out": None}, 1, "atlas-a2", 161001, ["out is a null pointer"]),
    ({"weight": td((1,) * 9)}, 1, "atlas-a2", 161002, ["weightOptional has 9 dimensions", "at most 8"]),
    ({"self": td(dtype="bf16")}, 1, "atlas-training", 161002, ["self has dtype BFLOAT16", "supports FLOAT, FLOAT16"]),
    ({"target": td(dtype="int32")}, 1, "atlas-a2", 161002, ["target has dtype INT32"]),
    ({"target": td(fmt=0)}, 1, "atlas-a2", 161002, ["target has format NCHW", "self's format ND"]),
    ({"out": td((4, 9))}, 1, "atlas-a2", 161002, ["out shape [4, 9] must equal self shape [4, 8]"]),
    ({"weight": td((2, 8))}, 1, "atlas-a2", 161002, ["weightOptional shape [2, 8] cannot broadcast"]),
    ({"grad_output": td((1, 4, 8))}, 1, "atlas-a2", 161002, ["gradOutput shape [1, 4, 8] cannot broadcast"]),
    ({}, 3, "atlas-a2", 161002, ["reduction is 3", "between 0 and 2"]),
    ({}, 1, "atlas-200i-500-a2", 361001, ["not supported", "Atlas 200I/500 A2"]),
])
def test_each_check_returns_its_code_and_a_message(over, reduction, device, code, words):
    with pytest.raises(opsim.OpError) as exc:
        validate(device, reduction, **over)
    assert exc.value.code == code
    for w in words:
        assert w in exc.value.message


def test_checks_run_in_the_documented_order():
    # null beats dims, dims beat dtype, dtype beats format, format beats shape, shape beats reduction
    cases = [({"self": None, "weight": td((1,) * 9)}, 161001, "self is a null pointer"),
             ({"out": td((1,) * 9, "int8")}, 161002, "9 dimensions"),
             ({"target": td((3,), "int8", fmt=0)}, 161002, "dtype INT8"),
             ({"target": td((3,), fmt=0)}, 161002, "format NCHW"),
             ({"target": td((3,))}, 161002, "cannot broadcast")]
    for over, code, words in cases:
        with pytest.raises(opsim.OpError) as exc:
            validate("atlas-a2", 7, **over)
        assert exc.value.code == code and words in exc.value.message
    with pytest.raises(opsim.OpError) as exc:      # every parameter check precedes the product check
        validate("atlas-200i-500-a2", 7)
    assert exc.value.code == 161002


def test_bf16_is_accepted_only_on_a2_and_a3():
    for device in ("atlas-a2", "atlas-a3"):
        validate(device, self=td(dtype="bf16"), out=td(dtype="bf16"))
    for device in ("atlas-training", "atlas-inference"):
        with pytest.raises(opsim.OpError):
            validate(device, self=td(dtype="bf16"))


# ---------------------------------------------------------------------------------------------
# the aclnn two-phase API
# ---------------------------------------------------------------------------------------------

ACL_DT = {np.dtype(np.float32): ACL_FLOAT, np.dtype(np.float16): ACL_FLOAT16, np.dtype(BF16): ACL_BF16}


def acl_setup(device, host, out_host, out_strides=None):
    rt = AclRuntime(device, trace_level="off")
    assert rt.aclInit(None) == 0 and rt.aclrtSetDevice(0) == 0
    tensors = {}
    for name, arr in {**host, "out": out_host}.items():
        storage = max(arr.nbytes, 32) * (2 if name == "out" and out_strides else 1)
        ptr, ret = rt.aclrtMalloc(storage)
        assert ret == 0
        if name != "out" and arr.nbytes:
            assert rt.aclrtMemcpy(ptr, storage, arr, arr.nbytes, ACL_MEMCPY_HOST_TO_DEVICE) == 0
        strides = out_strides if name == "out" and out_strides else None
        st_shape = [storage // arr.itemsize] if strides else list(arr.shape)
        tensors[name] = rt.aclCreateTensor(list(arr.shape), ACL_DT[arr.dtype], strides, 0, ACL_FORMAT_ND,
                                           st_shape, ptr)
    tensors.setdefault("weight", None)
    return rt, tensors


def test_the_two_phase_api_writes_a_strided_out_and_refuses_a_second_run():
    a = operands((8, 16), np.float32, g_shape=(16,))
    out_host = np.zeros((8, 16), np.float32)
    rt, t = acl_setup("atlas-a3", a, out_host, out_strides=[32, 1])       # every other row of storage
    ws, ex, ret = aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(t["grad_output"], t["self"], t["target"],
                                                                  t["weight"], 0, t["out"])
    assert ret == 0 and ws == 0
    stream, _ = rt.aclrtCreateStream()
    assert aclnnBinaryCrossEntropyBackward(0, ws, ex, stream) == 0
    assert rt.aclrtSynchronizeStream(stream) == 0
    storage = np.zeros((8, 32), np.float32)
    assert rt.aclrtMemcpy(storage, storage.nbytes, t["out"].addr, storage.nbytes, ACL_MEMCPY_DEVICE_TO_HOST) == 0
    np.testing.assert_array_equal(storage[:, :16], bce.golden(a, {"reduction": 0})["out"])
    assert (storage[:, 16:] == 0).all()
    assert aclnnBinaryCrossEntropyBackward(0, ws, ex, stream) == 161002
    assert "already run" in rt.aclGetRecentErrMsg()


def test_the_two_phase_api_reports_workspace_and_refuses_a_short_one():
    a = operands((4, 64), np.float16, weight=False)
    rt, t = acl_setup("atlas-a2", a, np.zeros((4, 64), np.float16))
    ws, ex, ret = aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(t["grad_output"], t["self"], t["target"],
                                                                  None, 1, t["out"])
    assert ret == 0 and ws >= 4 * 64 * 2                        # OnesLike(self) lives there
    stream, _ = rt.aclrtCreateStream()
    assert aclnnBinaryCrossEntropyBackward(0, 0, ex, stream) == 161002
    wsp, _ = rt.aclrtMalloc(ws)
    ws2, ex2, _ = aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(t["grad_output"], t["self"], t["target"],
                                                                  None, 1, t["out"])
    assert aclnnBinaryCrossEntropyBackward(wsp, ws2, ex2, stream) == 0 and rt.aclrtSynchronizeStream(stream) == 0
    out = np.zeros((4, 64), np.float16)
    assert rt.aclrtMemcpy(out, out.nbytes, t["out"].addr, out.nbytes, ACL_MEMCPY_DEVICE_TO_HOST) == 0
    np.testing.assert_array_equal(bits(out), bits(bce.golden(a, {"reduction": 1})["out"]))


def test_the_two_phase_api_returns_codes_not_exceptions():
    a = operands((4, 8), np.float32)
    rt, t = acl_setup("atlas-200i-500-a2", a, np.zeros((4, 8), np.float32))
    ws, ex, ret = aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(t["grad_output"], t["self"], t["target"],
                                                                  t["weight"], 1, t["out"])
    assert (ex, ret) == (None, 361001) and "not supported" in rt.aclGetRecentErrMsg()
    rt, t = acl_setup("atlas-a2", a, np.zeros((4, 8), np.float32))
    assert aclnnBinaryCrossEntropyBackwardGetWorkspaceSize(None, t["self"], t["target"], None, 1, t["out"])[2] == 161001


# ---------------------------------------------------------------------------------------------
# tiling and traces
# ---------------------------------------------------------------------------------------------

def test_the_ub_plan_follows_the_elementwise_tiling_and_honours_overrides():
    spec = opsim.device_spec("atlas-a2")
    big = {k: td((1 << 20,), "fp16") for k in ("grad_output", "self", "target", "weight", "out")}
    t = bce.plan(spec, big, {"reduction": 1})
    # 4 fp16 inputs + fp16 out per buffer, double buffered, + 12 B fp32 scratch per element
    assert t.ub_bytes_per_element == 2 * (4 * 2 + 2) + 12 and t.buffer_num == 2
    assert t.ub_bytes <= spec.ub.size and t.block_dim == spec.vector_cores
    a = operands((3000,), np.float32)
    base = run("atlas-a2", 1, **a)
    forced = opsim.run(OP, device="atlas-a2", trace="off", reduction=1,
                       tiling={"block_dim": 3, "tile_length": 256, "buffer_num": 2}, **a)
    assert (forced.tiling.block_dim, forced.tiling.tile_length, forced.tiling.buffer_num) == (3, 256, 2)
    np.testing.assert_array_equal(bits(forced.outputs["out"]), bits(base.outputs["out"]))
    with pytest.raises(opsim.OpError) as exc:
        opsim.run(OP, device="atlas-a2", tiling={"tile_length": 1 << 20}, **a)
    assert exc.value.code == 561002 and "does not fit the UB" in exc.value.message


def test_traces_show_vector_cores_with_mte2_vector_and_mte3_threads():
    a = operands((4, 2048), np.float32)
    res = opsim.run(OP, device="atlas-a2", trace="instruction", reduction=1, tiling={"block_dim": 2}, **a)
    busy = {(s.process, s.thread) for s in res.trace.slices() if s.thread in ("MTE2", "VECTOR", "MTE3")}
    assert busy == {(c, p) for c in ("core0.veccore0", "core0.veccore1") for p in ("MTE2", "VECTOR", "MTE3")}
