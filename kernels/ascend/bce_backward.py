"""aclnnBinaryCrossEntropyBackward: out = grad · weight · (x − target) / max((1 − x)·x, 1e-12), × 1/N for mean.

Seed: seeds/aclnnBinaryCrossEntropyBackward.txt. Checks and host flow: docs/sources.md#bce-checks
(ops-nn ``op_api/aclnn_binary_cross_entropy_backward.cpp``); compute order: docs/sources.md#bce-kernel (the
TBE kernel: fp16/bf16 cast to fp32, ``x − y``, ``(−1)·x + 1``, ``· x``, ``Maxs(1e-12)``, ``Div``,
``· weight``, ``· grad``, ``· cof`` with the host's ``cof = 1.0f / d0 / d1 / …`` over self's shape
in fp32, Cast RINT back).
Numerics: docs/sources.md#ref-bce.

Host flow as the vendor's: a missing weight becomes ``OnesLike(self)`` (a fill kernel into the
workspace); every input whose dtype differs from the promoted dtype goes through an ``l0op::Cast``
kernel into the workspace; the fused kernel computes in fp32 and rounds once to the promoted
dtype; if ``out`` has another dtype a final Cast kernel writes it. With all dtypes equal and a
weight given there is one launch and no workspace.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Iterator, Mapping

import numpy as np

from opsim.devices.spec import DeviceSpec
from opsim.kernels.ascend.elementwise import OVERRIDE_KEYS as ELEMENTWISE_KEYS
from opsim.kernels.ascend.elementwise import ElementwiseTiling, check_overrides, plan_elementwise
from opsim.kernels.common import (ACLNN_ERR_PARAM_INVALID, FORMAT_NAMES, OpDef, OpError, TensorDesc,
                            acl_dtype_name, broadcast_shapes, check_dtype_in, check_max_dims,
                            check_not_null, check_product, check_reduction, reduction_code)
from opsim.simulator import numerics as nx
from opsim.simulator.isa import Adds, Cast, DataCopyPad, Div, Duplicate, Maxs, Mul, Muls, Sub
from opsim.simulator.memory import align_up
from opsim.simulator.tile import GlobalTensor, KernelContext, LocalTensor, elementwise_pipeline

NAME = "binary_cross_entropy_backward"
# Atlas 200I/500 A2 is the one product the seed marks unsupported (docs/sources.md#bce-checks).
PRODUCTS = ("training", "inference", "a2", "a3")
EPSILON = 1e-12                 # clamp of the product (1 − x)·x (docs/sources.md#bce-kernel)
INPUTS = ("grad_output", "self", "target")
WORKSPACE_ALIGN = 512           # assumption: workspace tensors start on 512 B, like GE's memory blocks


def supported_dtypes(spec: DeviceSpec) -> tuple[str, ...]:
    """FLOAT16, FLOAT everywhere; BFLOAT16 only on Atlas A2/A3 (seed; GetDtypeSupportListV2)."""
    return ("fp32", "fp16", "bf16") if spec.series in ("a2", "a3") else ("fp32", "fp16")


# torch-style promotion among the dtypes that pass the dtype check (op::PromoteType). Anything
# outside this table cannot be promoted; check 3 already rejects such dtypes, so in practice
# check 7 only decides which dtype the kernel computes and rounds in.
_PROMOTE = {frozenset({"fp16"}): "fp16", frozenset({"bf16"}): "bf16", frozenset({"fp32"}): "fp32",
            frozenset({"fp16", "bf16"}): "fp32", frozenset({"fp16", "fp32"}): "fp32",
            frozenset({"bf16", "fp32"}): "fp32", frozenset({"fp16", "bf16", "fp32"}): "fp32"}


def promote(*dtypes: str) -> str | None:
    """The promoted dtype name of ``dtypes``, or None when they cannot be promoted."""
    return _PROMOTE.get(frozenset(dtypes))


# ---------------------------------------------------------------------------------------------
# validate
# ---------------------------------------------------------------------------------------------

def validate(spec: DeviceSpec, t: Mapping[str, TensorDesc | None], attrs: Mapping[str, Any]) -> dict[str, TensorDesc]:
    """The documented checks in the documented order (docs/sources.md#bce-checks), then product support."""
    g, x, y, w, out = (t.get(k) for k in ("grad_output", "self", "target", "weight", "out"))
    # 1. null pointers (weight is optional)
    check_not_null(gradOutput=g, self=x, target=y, out=out)
    assert g is not None and x is not None and y is not None and out is not None   # checked just above
    # 2. at most 8 dimensions
    check_max_dims(gradOutput=g, self=x, target=y, weightOptional=w, out=out)
    # 3. dtypes in the product's list
    check_dtype_in(supported_dtypes(spec), spec.product, self=x, gradOutput=g, target=y, out=out,
                   weightOptional=w)
    # 4. storage formats: target and weight as self
    for name, other in (("target", y), ("weightOptional", w)):
        if other is not None and other.format != x.format:
            raise OpError(ACLNN_ERR_PARAM_INVALID,
                          f"{name} has format {FORMAT_NAMES.get(other.format, other.format)}; it must equal "
                          f"self's format {FORMAT_NAMES.get(x.format, x.format)}")
    # 5. shapes (skipped for an empty self, as the vendor code does)
    if x.numel > 0:
        if tuple(out.shape) != tuple(x.shape):
            raise OpError(ACLNN_ERR_PARAM_INVALID,
                          f"out shape {list(out.shape)} must equal self shape {list(x.shape)}")
        for name, other in (("target", y), ("weightOptional", w), ("gradOutput", g)):
            if other is not None and broadcast_shapes(x.shape, other.shape) != tuple(x.shape):
                raise OpError(ACLNN_ERR_PARAM_INVALID,
                              f"{name} shape {list(other.shape)} cannot broadcast to self shape "
                              f"{list(x.shape)}")
    # 6. reduction
    reduction = reduction_code(attrs.get("reduction", 1))
    check_reduction(reduction)
    # 7. promotion of self, target, gradOutput, weight; the result must cast to out's dtype
    promoted = x.dtype.name
    for name, other in (("target", y), ("gradOutput", g), ("weightOptional", w)):
        if other is None:
            continue
        p = promote(promoted, other.dtype.name)
        if p is None:
            raise OpError(ACLNN_ERR_PARAM_INVALID,
                          f"{name} dtype {acl_dtype_name(other.dtype)} cannot be promoted with "
                          f"{acl_dtype_name(nx.dtype(promoted))}")
        promoted = p
    if not out.dtype.is_float:
        raise OpError(ACLNN_ERR_PARAM_INVALID,
                      f"the promoted dtype {acl_dtype_name(nx.dtype(promoted))} cannot be cast to out's "
                      f"dtype {acl_dtype_name(out.dtype)}")
    check_product(spec, "aclnnBinaryCrossEntropyBackward", PRODUCTS)
    return {"out": TensorDesc(tuple(out.shape), out.dtype)}


def promoted_dtype(t: Mapping[str, TensorDesc | None]) -> nx.DType:
    names = [d.dtype.name for k in ("self", "target", "grad_output", "weight") if (d := t.get(k)) is not None]
    return nx.dtype(promote(*names) or "fp32")


# ---------------------------------------------------------------------------------------------
# plan
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One auxiliary kernel of the host flow: an l0op::Cast or the OnesLike fill."""

    kind: str                   # "cast_in" | "ones" | "cast_out"
    operand: str                # the operand it produces or converts
    offset: int                 # workspace byte offset of the tensor it writes (-1: writes out)
    tiling: ElementwiseTiling


@dataclass(frozen=True)
class BceTiling(ElementwiseTiling):
    """The fused kernel's element-wise tiling plus the host flow around it."""

    promoted: str = "fp32"
    steps: tuple[Step, ...] = ()
    result_offset: int = -1     # workspace offset of the promoted result when out's dtype differs


def plan(spec: DeviceSpec, t: Mapping[str, TensorDesc], attrs: Mapping[str, Any],
         overrides: Mapping[str, Any] | None = None) -> BceTiling:
    ov = check_overrides(overrides)
    x, out = t["self"], t["out"]
    p = promoted_dtype(t)
    item = p.itemsize
    total = x.numel
    # UB per element: x, y, weight, grad and out per buffer; 16-bit types add three fp32
    # calculation buffers (casts of x and y, the denominator) = 12 B (see kernel below).
    main = plan_elementwise(spec, total, n_inputs=4, in_itemsize=item, out_itemsize=item,
                            calc_bytes=12 if item == 2 else 0, overrides=ov)
    aux_ov = {"core_mask": ov["core_mask"]} if "core_mask" in ov else None
    steps: list[Step] = []
    offset = 0

    def reserve(nbytes: int) -> int:
        nonlocal offset
        at = offset
        offset += align_up(max(nbytes, 1), WORKSPACE_ALIGN)
        return at

    for name in ("grad_output", "self", "target", "weight"):
        d = t.get(name)
        if d is not None and d.dtype != p:
            tl = plan_elementwise(spec, d.numel, n_inputs=1, in_itemsize=d.dtype.itemsize,
                                  out_itemsize=item, calc_bytes=0, overrides=aux_ov)
            steps.append(Step("cast_in", name, reserve(d.numel * item), tl))
    if t.get("weight") is None:
        tl = plan_elementwise(spec, total, n_inputs=0, in_itemsize=0, out_itemsize=item, calc_bytes=0,
                              overrides=aux_ov)
        steps.append(Step("ones", "weight", reserve(total * item), tl))
    result_offset = -1
    if out.dtype != p:
        result_offset = reserve(total * item)
        both16 = item == 2 and out.dtype.itemsize == 2
        tl = plan_elementwise(spec, total, n_inputs=1, in_itemsize=item, out_itemsize=out.dtype.itemsize,
                              calc_bytes=4 if both16 else 0, overrides=aux_ov)
        steps.append(Step("cast_out", "out", -1, tl))
    base = {f.name: getattr(main, f.name) for f in fields(ElementwiseTiling)}
    base["workspace"] = offset
    return BceTiling(**base, promoted=p.name, steps=tuple(steps), result_offset=result_offset)


def workspace(tiling: BceTiling) -> int:
    return tiling.workspace


def cof_of(reduction: int, shape: tuple[int, ...]) -> float:
    """The mean factor as the TBE host tiling computes it (docs/sources.md#bce-kernel): 1.0f
    divided by each dimension of self's shape in turn, in fp32 (each dimension converted to
    float first, as C does) -- not fp32(1/numel): the chain is an ulp off for about a fifth of
    2-D shapes, e.g. (3, 41). The kernel multiplies by it (reciprocal-multiply); None/sum do not
    scale, and neither does an empty self (no work; the tiling refuses a 0 dimension)."""
    if reduction != 1 or 0 in shape:
        return 1.0
    cof = np.float32(1.0)
    for d in shape:
        cof = np.float32(cof / np.float32(d))
    return float(cof)


# ---------------------------------------------------------------------------------------------
# kernels (one block each)
# ---------------------------------------------------------------------------------------------

def kernel(ctx: KernelContext, tiling: ElementwiseTiling, x: GlobalTensor, y: GlobalTensor,
           w: GlobalTensor, g: GlobalTensor, out: GlobalTensor, cof: float | None) -> Iterator[Any]:
    """BinaryCrossEntropyGrad on one core's range, in the TBE op order (docs/sources.md#bce-kernel)."""
    start, length = tiling.core_range(ctx.block_idx)
    half = x.dtype.itemsize == 2
    if half:
        n = align_up(tiling.tile_length, 8)     # 32 B aligned fp32 slots
        calc = ctx.tbuf(12 * n, nx.FP32)
        xf, yf, tf = calc[0:n], calc[n:2 * n], calc[2 * n:3 * n]

    def compute(ctx: KernelContext, ins: list[LocalTensor], o: LocalTensor, n: int) -> Iterator[Any]:
        xl, yl, wl, gl = ins
        if not half:
            # fp32 in place: the y slot becomes the denominator once x − y is formed
            yield Sub(o, xl, yl, count=n)                 # x − y
            yield Muls(yl, xl, scalar=-1.0, count=n)      # (−1)·x
            yield Adds(yl, yl, scalar=1.0, count=n)       # 1 − x
            yield Mul(yl, yl, xl, count=n)                # (1 − x)·x
            yield Maxs(yl, yl, scalar=EPSILON, count=n)   # clamp the product
            yield Div(o, o, yl, count=n)
            yield Mul(o, o, wl, count=n)                  # × weight
            yield Mul(o, o, gl, count=n)                  # × grad
            if cof is not None:
                yield Muls(o, o, scalar=cof, count=n)     # × cof (mean)
            return
        yield Cast(xf, xl, "none", n)
        yield Cast(yf, yl, "none", n)
        yield Sub(yf, xf, yf, count=n)
        yield Muls(tf, xf, scalar=-1.0, count=n)
        yield Adds(tf, tf, scalar=1.0, count=n)
        yield Mul(tf, tf, xf, count=n)
        yield Maxs(tf, tf, scalar=EPSILON, count=n)
        yield Div(yf, yf, tf, count=n)
        yield Cast(xf, wl, "none", n)                     # xf is free again: reuse it for weight
        yield Mul(yf, yf, xf, count=n)
        yield Cast(xf, gl, "none", n)
        yield Mul(yf, yf, xf, count=n)
        if cof is not None:
            yield Muls(yf, yf, scalar=cof, count=n)
        yield Cast(o, yf, "rint", n)

    yield from elementwise_pipeline(ctx, inputs=[x, y, w, g], output=out, start=start, length=length,
                                    tile_length=tiling.tile_length, buffer_num=tiling.buffer_num,
                                    compute=compute)


def cast_kernel(ctx: KernelContext, tiling: ElementwiseTiling, src: GlobalTensor,
                dst: GlobalTensor) -> Iterator[Any]:
    """l0op::Cast: one rounding (RINT) to ``dst``'s dtype; fp16↔bf16 goes through fp32 (exact)."""
    start, length = tiling.core_range(ctx.block_idx)
    via32 = src.dtype.itemsize == 2 and dst.dtype.itemsize == 2 and src.dtype != dst.dtype
    if via32:
        tmp = ctx.tbuf(4 * tiling.tile_length, nx.FP32)

    def compute(ctx: KernelContext, ins: list[LocalTensor], o: LocalTensor, n: int) -> Iterator[Any]:
        if via32:
            yield Cast(tmp, ins[0], "none", n)
            yield Cast(o, tmp, "rint", n)
        else:
            yield Cast(o, ins[0], "rint", n)

    yield from elementwise_pipeline(ctx, inputs=[src], output=dst, start=start, length=length,
                                    tile_length=tiling.tile_length, buffer_num=tiling.buffer_num,
                                    compute=compute)


def ones_kernel(ctx: KernelContext, tiling: ElementwiseTiling, dst: GlobalTensor) -> Iterator[Any]:
    """OnesLike(self): Duplicate(1) in UB, copied out tile by tile."""
    start, length = tiling.core_range(ctx.block_idx)
    if length <= 0:
        return
    tile = tiling.tile_length
    outq = ctx.queue("VECOUT", tiling.buffer_num, tile * dst.dtype.itemsize)
    for i in ctx.tiles(-(-length // tile)):
        ctx.tile = i
        off = start + i * tile
        n = min(tile, start + length - off)
        o = outq.alloc(dst.dtype)
        yield Duplicate(o, 1.0, count=n)
        outq.enque(o)
        o = outq.deque()
        yield DataCopyPad(dst[off:off + n], o, n)
        outq.free(o)


def launch(device: Any, stream: Any, tensors: Mapping[str, GlobalTensor], tiling: BceTiling,
           attrs: Mapping[str, Any]) -> list:
    """Queue the host flow on ``stream``: input casts, OnesLike, the fused kernel, the out cast."""
    p = nx.dtype(tiling.promoted)
    x_shape = tensors["self"].shape
    ws = tensors.get("workspace")

    def in_workspace(offset: int, shape: tuple[int, ...]) -> GlobalTensor:
        assert ws is not None           # the tiling placed a buffer in the workspace it asked for
        return GlobalTensor.contiguous(device, ws.addr + offset, p, shape)

    ops = {n: tensors.get(n) for n in (*INPUTS, "weight")}
    out = tensors["out"]
    result = out
    launches = []
    mask = tiling.core_mask
    for step in tiling.steps:
        tl = step.tiling
        if step.kind == "cast_in":
            src = ops[step.operand]
            assert src is not None      # the tiling casts only operands that were given
            dst = in_workspace(step.offset, src.shape)
            launches.append(device.launch(stream, cast_kernel, tl.block_dim, tl, src, dst, unit="vector",
                                          core_mask=mask, name=f"Cast({step.operand})"))
            ops[step.operand] = dst
        elif step.kind == "ones":
            dst = in_workspace(step.offset, x_shape)
            launches.append(device.launch(stream, ones_kernel, tl.block_dim, tl, dst, unit="vector",
                                          core_mask=mask, name="OnesLike"))
            ops["weight"] = dst
    if tiling.result_offset >= 0:
        result = in_workspace(tiling.result_offset, x_shape)
    reduction = reduction_code(attrs.get("reduction", 1))
    cof = cof_of(reduction, tuple(x_shape)) if reduction == 1 else None
    b = {}
    for n in (*INPUTS, "weight"):
        op = ops[n]
        assert op is not None           # an absent weight was made by OnesLike above
        b[n] = op.broadcast_to(x_shape)
    launches.append(device.launch(stream, kernel, tiling.block_dim, tiling, b["self"], b["target"],
                                  b["weight"], b["grad_output"], result, cof, unit="vector",
                                  core_mask=mask, name="BinaryCrossEntropyGrad"))
    for step in tiling.steps:
        if step.kind == "cast_out":
            tl = step.tiling
            launches.append(device.launch(stream, cast_kernel, tl.block_dim, tl, result, out, unit="vector",
                                          core_mask=mask, name="Cast(out)"))
    return launches


# ---------------------------------------------------------------------------------------------
# golden: plain numpy in the kernel's op order, written independently of the simulator
# ---------------------------------------------------------------------------------------------

_NP = {"fp16": np.float16, "fp32": np.float32}


def _np_dtype(name: str) -> Any:
    if name == "bf16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return _NP[name]


def _name_of(a: np.ndarray) -> str:
    return {"float16": "fp16", "float32": "fp32", "bfloat16": "bf16"}[np.dtype(a.dtype).name]


def golden(a: Mapping[str, np.ndarray | None], attrs: Mapping[str, Any],
           out_dtype: Any = None) -> dict[str, np.ndarray]:
    """The vendor flow in numpy: promote, compute in fp32 in the TBE order, round once (RNE) to
    the promoted dtype, then (when ``out_dtype`` differs) round once more to it."""
    g, x, y, w = (a.get(k) for k in ("grad_output", "self", "target", "weight"))
    names = [_name_of(np.asarray(v)) for v in (x, y, g, w) if v is not None]
    promoted = promote(*names)
    assert x is not None and promoted is not None   # validated operands: self given, dtypes promote
    p = _np_dtype(promoted)
    shape = np.shape(x)
    f32 = np.float32

    def up(v: Any) -> np.ndarray:
        # the l0op::Cast to the promoted dtype is exact (it only widens), then fp32 for compute
        return np.broadcast_to(np.asarray(v).astype(p), shape).astype(f32)

    xf, yf, gf = up(x), up(y), up(g)
    wf = up(w) if w is not None else np.ones(shape, f32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = xf - yf
        d = xf * f32(-1.0)
        d = d + f32(1.0)
        d = d * xf
        d = np.maximum(d, f32(EPSILON))
        r = r / d
        r = r * wf
        r = r * gf
        if reduction_code(attrs.get("reduction", 1)) == 1:
            # the host's factor: 1.0f / d0 / d1 / ... in fp32 over self's shape
            cof = f32(1.0)
            for dim in (shape if 0 not in shape else ()):
                cof = f32(cof / f32(dim))
            r = r * cof
    res = np.asarray(r, dtype=f32).astype(p)
    if out_dtype is not None:
        od = nx.dtype(out_dtype).np_dtype
        if od != res.dtype:
            res = res.astype(f32).astype(od)     # widening to fp32 is exact; one RNE to out
    return {"out": res}


def truth(a: Mapping[str, np.ndarray | None], attrs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """fp64 reference of the same formula (the clamp included) for the precision standard."""
    g, x, y, w = (a.get(k) for k in ("grad_output", "self", "target", "weight"))
    assert x is not None                # self is required (validated)
    shape = np.shape(x)
    x64, y64, g64 = (np.broadcast_to(np.asarray(v).astype(np.float64), shape) for v in (x, y, g))
    w64 = np.broadcast_to(np.asarray(w).astype(np.float64), shape) if w is not None else 1.0
    r = g64 * w64 * (x64 - y64) / np.maximum((1.0 - x64) * x64, EPSILON)
    if reduction_code(attrs.get("reduction", 1)) == 1:
        r = r / max(1, int(np.prod(shape, dtype=np.int64)))
    return {"out": np.asarray(r, dtype=np.float64)}


def infer(spec: DeviceSpec, t: Mapping[str, TensorDesc | None],
          attrs: Mapping[str, Any]) -> dict[str, TensorDesc | None]:
    """The output opsim.run allocates when the caller gives none: self's shape, promoted dtype."""
    x = t.get("self")
    if x is None or any(t.get(k) is None for k in INPUTS):
        return {"out": None}
    names = [d.dtype.name for k in ("self", "target", "grad_output", "weight") if (d := t.get(k)) is not None]
    p = promote(*names)
    return {"out": TensorDesc(tuple(x.shape), nx.dtype(p) if p else x.dtype)}


def example(rng: np.random.Generator, spec: DeviceSpec, dtype: str = "fp32",
            shape: tuple[int, ...] = (64, 256)) -> dict[str, Any]:
    dt = nx.dtype(dtype).np_dtype
    return {"grad_output": rng.uniform(0.5, 2.0, shape).astype(np.float32).astype(dt),
            "self": rng.uniform(0.01, 0.99, shape).astype(np.float32).astype(dt),
            "target": rng.uniform(0.0, 1.0, shape).astype(np.float32).astype(dt),
            "weight": rng.uniform(0.5, 2.0, shape).astype(np.float32).astype(dt),
            "reduction": "mean"}


def example_shapes(spec: DeviceSpec, dtype: str = "fp32", shape: tuple[int, ...] = (64, 256)) -> dict[str, Any]:
    """``example`` without data: grad_output, self, target and weight of ``shape`` (any rank)."""
    shape = tuple(shape)
    return {"grad_output": (shape, dtype), "self": (shape, dtype), "target": (shape, dtype),
            "weight": (shape, dtype), "reduction": "mean"}


OP = OpDef(
    name=NAME,
    inputs=INPUTS,
    outputs=("out",),
    attrs={"reduction": 1},
    products=PRODUCTS,
    validate=validate,
    plan=plan,
    launch=launch,
    golden=golden,
    example=example,
    infer=infer,
    optional=("weight",),
    dtypes=supported_dtypes,
    workspace=workspace,
    summary="BCE loss gradient: grad * weight * (self - target) / max((1 - self) * self, 1e-12)",
    example_shapes=example_shapes,
    tiling_keys=ELEMENTWISE_KEYS,
)
