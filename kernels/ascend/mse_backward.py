"""aclnnMseLossBackward: out = (self − target) · cof · gradOutput, cof = 2/N (mean) or 2.

Seed: seeds/aclnnMseLossBackward.txt. Checks, tiling and kernel: docs/sources.md#mse-checks, #mse-tiling
(ops-nn mse_loss_grad_v2). Numerics: docs/sources.md#ref-mse — fp16/bf16 are cast to fp32,
Sub, Muls(cof), Mul(grad) in fp32, one RINT cast back.

Host flow as the vendor's: the kernel writes its result in self's dtype; when ``out`` has another
dtype of the supported list, an ``l0op::Cast`` kernel rounds that result once more into ``out``
(the kernel's result then lives in the workspace).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Iterator, Mapping

import numpy as np

from opsim.devices.spec import DeviceSpec
from opsim.kernels.ascend.bce_backward import WORKSPACE_ALIGN, cast_kernel
from opsim.kernels.ascend.elementwise import OVERRIDE_KEYS as ELEMENTWISE_KEYS
from opsim.kernels.ascend.elementwise import ElementwiseTiling, check_overrides, plan_elementwise
from opsim.kernels.common import (ACLNN_ERR_PARAM_INVALID, OpDef, OpError, TensorDesc, broadcast_shapes,
                            check_dtype_in, check_max_dims, check_not_null,
                            check_product, check_reduction, check_same_dtype, reduction_code)
from opsim.simulator import numerics as nx
from opsim.simulator.isa import Cast, Mul, Muls, Sub
from opsim.simulator.memory import align_up
from opsim.simulator.tile import GlobalTensor, KernelContext, LocalTensor, elementwise_pipeline

NAME = "mse_loss_backward"
PRODUCTS = ("training", "inference", "a2", "a3")


def supported_dtypes(spec: DeviceSpec) -> tuple[str, ...]:
    """FLOAT16, FLOAT everywhere; BFLOAT16 only on Atlas A2/A3 (seed)."""
    return ("fp32", "fp16", "bf16") if spec.series in ("a2", "a3") else ("fp32", "fp16")


# ---------------------------------------------------------------------------------------------
# validate
# ---------------------------------------------------------------------------------------------

def validate(spec: DeviceSpec, t: Mapping[str, TensorDesc | None], attrs: Mapping[str, Any]) -> dict[str, TensorDesc]:
    """The documented checks in the documented order (docs/sources.md#mse-checks), then product support."""
    g, x, y, out = t.get("grad_output"), t.get("self"), t.get("target"), t.get("out")
    check_not_null(gradOutput=g, self=x, target=y, out=out)
    assert g is not None and x is not None and y is not None and out is not None   # checked just above
    check_same_dtype("self", x, gradOutput=g, target=y)
    # out's dtype is checked against the list on its own: the library casts the kernel's result
    # to it (l0op::Cast after MseLossGrad; seed: out supports BFLOAT16, FLOAT16, FLOAT;
    # docs/sources.md#mse-checks), so it may differ from self's.
    check_dtype_in(supported_dtypes(spec), spec.product, self=x, out=out)
    reduction = reduction_code(attrs.get("reduction", 1))
    check_reduction(reduction)
    check_max_dims(gradOutput=g, self=x, target=y)
    pair = broadcast_shapes(g.shape, x.shape)
    if pair is None:
        raise OpError(ACLNN_ERR_PARAM_INVALID,
                      f"gradOutput shape {list(g.shape)} and self shape {list(x.shape)} cannot broadcast")
    # target and that shape broadcast with each other, either way (CheckBroadcastShape), and out
    # is the broadcast of all three (seed: "out与gradOutput、self、target broadcast之后的tensor的shape
    # 一致"; docs/sources.md#mse-checks): a target with more dimensions widens the output.
    shape = broadcast_shapes(y.shape, pair)
    if shape is None:
        raise OpError(ACLNN_ERR_PARAM_INVALID,
                      f"target shape {list(y.shape)} cannot broadcast with {list(pair)} "
                      f"(the broadcast of gradOutput and self)")
    if tuple(out.shape) != shape:
        raise OpError(ACLNN_ERR_PARAM_INVALID,
                      f"out shape {list(out.shape)} must equal the broadcast shape {list(shape)} "
                      f"(of gradOutput, self and target)")
    check_product(spec, "aclnnMseLossBackward", PRODUCTS)
    return {"out": TensorDesc(shape, out.dtype)}


# ---------------------------------------------------------------------------------------------
# plan
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MseTiling(ElementwiseTiling):
    """The kernel's element-wise tiling plus the Cast into ``out`` when out's dtype differs."""

    cast_out: ElementwiseTiling | None = None   # the l0op::Cast kernel's tiling
    result_offset: int = -1      # workspace offset of the kernel's result (-1: it writes out)


def plan(spec: DeviceSpec, t: Mapping[str, TensorDesc], attrs: Mapping[str, Any],
         overrides: Mapping[str, Any] | None = None) -> MseTiling:
    ov = check_overrides(overrides)
    out = t["out"]
    x = t["self"]
    item = x.dtype.itemsize
    # UB per element: x, y, dout and out per buffer, plus 16 B of fp32 scratch for 16-bit types:
    # maxTile = UB / (4·sizeof(T) + 16) for fp16/bf16 and UB / 16 for fp32 (docs/sources.md#mse-tiling).
    main = plan_elementwise(spec, out.numel, n_inputs=3, in_itemsize=item, out_itemsize=item,
                            calc_bytes=16 if item == 2 else 0, overrides=ov)
    base = {f.name: getattr(main, f.name) for f in fields(ElementwiseTiling)}
    if out.dtype == x.dtype:
        return MseTiling(**base)
    # the kernel's result (self's dtype) goes to the workspace; the Cast reads it and writes out
    aux_ov = {"core_mask": ov["core_mask"]} if "core_mask" in ov else None
    both16 = item == 2 and out.dtype.itemsize == 2
    cast = plan_elementwise(spec, out.numel, n_inputs=1, in_itemsize=item, out_itemsize=out.dtype.itemsize,
                            calc_bytes=4 if both16 else 0, overrides=aux_ov)
    base["workspace"] = align_up(max(out.numel * item, 1), WORKSPACE_ALIGN)
    return MseTiling(**base, cast_out=cast, result_offset=0)


def workspace(tiling: MseTiling) -> int:
    return tiling.workspace


def cof_of(reduction: int, n: int) -> float:
    """2/N for mean (N = numel(self)), else 2; computed in double, used as an fp32 constant."""
    return float(np.float32(2.0 / n)) if reduction == 1 else 2.0


# ---------------------------------------------------------------------------------------------
# kernel (one block)
# ---------------------------------------------------------------------------------------------

def kernel(ctx: KernelContext, tiling: ElementwiseTiling, g: GlobalTensor, x: GlobalTensor,
           y: GlobalTensor, out: GlobalTensor, cof: float) -> Iterator[Any]:
    start, length = tiling.core_range(ctx.block_idx)
    half = x.dtype.itemsize == 2
    if half:
        # three fp32 scratch tiles (x, y, grad after Cast), each starting 32 B aligned
        n = -(-tiling.tile_length // 8) * 8
        calc = ctx.tbuf(16 * n, nx.FP32)
        xf, yf, gf = calc[0:n], calc[n:2 * n], calc[2 * n:3 * n]

    def compute(ctx: KernelContext, ins: list[LocalTensor], o: LocalTensor, n: int) -> Iterator[Any]:
        xl, yl, gl = ins
        if not half:
            yield Sub(o, xl, yl, count=n)
            yield Muls(o, o, scalar=cof, count=n)
            yield Mul(o, o, gl, count=n)
            return
        yield Cast(xf, xl, "none", n)
        yield Cast(yf, yl, "none", n)
        yield Cast(gf, gl, "none", n)
        yield Sub(xf, xf, yf, count=n)
        yield Muls(xf, xf, scalar=cof, count=n)
        yield Mul(xf, xf, gf, count=n)
        yield Cast(o, xf, "rint", n)

    yield from elementwise_pipeline(ctx, inputs=[x, y, g], output=out, start=start, length=length,
                                    tile_length=tiling.tile_length, buffer_num=tiling.buffer_num,
                                    compute=compute)


def launch(device: Any, stream: Any, tensors: Mapping[str, GlobalTensor], tiling: MseTiling,
           attrs: Mapping[str, Any]) -> list:
    out = tensors["out"]
    shape = out.shape
    x = tensors["self"]
    cof = cof_of(reduction_code(attrs.get("reduction", 1)), max(1, x.numel))
    g = tensors["grad_output"].broadcast_to(shape)
    y = tensors["target"].broadcast_to(shape)
    xb = x.broadcast_to(shape)
    result = out
    if tiling.cast_out is not None:
        ws = tensors["workspace"]
        result = GlobalTensor.contiguous(device, ws.addr + tiling.result_offset, x.dtype, tuple(shape))
    launches = [device.launch(stream, kernel, tiling.block_dim, tiling, g, xb, y, result, cof,
                              unit="vector", core_mask=tiling.core_mask, name="MseLossGradV2")]
    if tiling.cast_out is not None:
        tl = tiling.cast_out
        launches.append(device.launch(stream, cast_kernel, tl.block_dim, tl, result, out, unit="vector",
                                      core_mask=tiling.core_mask, name="Cast(out)"))
    return launches


# ---------------------------------------------------------------------------------------------
# golden: plain numpy in the kernel's op order, written independently of the simulator
# ---------------------------------------------------------------------------------------------

def golden(a: Mapping[str, np.ndarray], attrs: Mapping[str, Any], out_dtype: Any = None) -> dict[str, np.ndarray]:
    """The kernel's result in self's dtype; with ``out_dtype`` (another dtype for out) the
    library's Cast rounds it once more: widened to fp32 (exact), one RNE to out's dtype."""
    g, x, y = np.asarray(a["grad_output"]), np.asarray(a["self"]), np.asarray(a["target"])
    dt = x.dtype
    shape = np.broadcast_shapes(g.shape, x.shape, y.shape)
    reduction = reduction_code(attrs.get("reduction", 1))
    cof = np.float32(2.0 / max(1, x.size)) if reduction == 1 else np.float32(2.0)
    xf = np.broadcast_to(x, shape).astype(np.float32)
    yf = np.broadcast_to(y, shape).astype(np.float32)
    gf = np.broadcast_to(g, shape).astype(np.float32)
    r = ((xf - yf) * cof) * gf
    res = r.astype(dt)   # fp32 -> fp16/bf16 astype is round-to-nearest-even
    if out_dtype is not None and nx.dtype(out_dtype).np_dtype != res.dtype:
        res = res.astype(np.float32).astype(nx.dtype(out_dtype).np_dtype)
    return {"out": res}


def truth(a: Mapping[str, np.ndarray], attrs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """fp64 reference for the precision standard."""
    g, x, y = (np.asarray(a[k]).astype(np.float64) for k in ("grad_output", "self", "target"))
    reduction = reduction_code(attrs.get("reduction", 1))
    cof = 2.0 / max(1, x.size) if reduction == 1 else 2.0
    return {"out": (x - y) * cof * g}


def infer(spec: DeviceSpec, t: Mapping[str, TensorDesc | None],
          attrs: Mapping[str, Any]) -> dict[str, TensorDesc | None]:
    """The output opsim.run allocates when the caller gives none: the broadcast shape, self's dtype."""
    g, x, y = t.get("grad_output"), t.get("self"), t.get("target")
    if g is None or x is None or y is None:
        return {"out": None}
    shape = broadcast_shapes(broadcast_shapes(g.shape, x.shape) or x.shape, y.shape) or x.shape
    return {"out": TensorDesc(shape, x.dtype)}


def example(rng: np.random.Generator, spec: DeviceSpec, dtype: str = "fp32",
            shape: tuple[int, ...] = (64, 256)) -> dict[str, Any]:
    dt = nx.dtype(dtype).np_dtype
    return {"grad_output": rng.standard_normal(shape).astype(np.float32).astype(dt),
            "self": rng.standard_normal(shape).astype(np.float32).astype(dt),
            "target": rng.standard_normal(shape).astype(np.float32).astype(dt),
            "reduction": "mean"}


def example_shapes(spec: DeviceSpec, dtype: str = "fp32", shape: tuple[int, ...] = (64, 256)) -> dict[str, Any]:
    """``example`` without data: grad_output, self and target of ``shape`` (any rank)."""
    shape = tuple(shape)
    return {"grad_output": (shape, dtype), "self": (shape, dtype), "target": (shape, dtype),
            "reduction": "mean"}


OP = OpDef(
    name=NAME,
    inputs=("grad_output", "self", "target"),
    outputs=("out",),
    attrs={"reduction": 1},
    products=PRODUCTS,
    validate=validate,
    plan=plan,
    launch=launch,
    golden=golden,
    example=example,
    infer=infer,
    dtypes=supported_dtypes,
    workspace=workspace,
    summary="MSE loss gradient: (self - target) * cof * gradOutput",
    example_shapes=example_shapes,
    tiling_keys=ELEMENTWISE_KEYS,
)
