"""aclnnFusedLinearCrossEntropyLossGrad: the gradient of a vocabulary-parallel linear + CE.

Seed: seeds/aclnnFusedLinearCrossEntropyLossGrad.txt. Checks, codes and kernel structure:
docs/sources.md#flce-kernel (ops-nn matmul/fused_linear_cross_entropy_loss_grad); semantics:
docs/sources.md#ref-megatron-ce (Megatron VocabParallelCrossEntropy backward).

    S = softmax                                   (high-performance mode: softmaxOptional given)
      | exp(input · weightᵀ − logitsMax) / sumExpLogits            (memory-saving mode: recomputed)
    S[row, maskedTarget[row]] −= 1 − targetMask[row]
    S *= grad[:, None];  S → input dtype (RINT)
    input_grad = S · weight        [BT, H]
    weight_grad = Sᵀ · input       [V, H]

One mixed AIC/AIV launch (aivNum = 2 × aicNum). Memory-saving mode first forms the logits on
the cube cores (fp32, ND, into the workspace) and waits for every cube core; the vector cores
then turn each row into the logit gradient — Adds(−logitsMax), Exp, a true Div(sumExpLogits) in
memory-saving mode, the target update, Muls(grad), Cast RINT — and write it in NZ into the
workspace; after every vector core is done the cube cores form both gradients with the
documented Matmul tiles (baseM/N/K 128/256/64, 256×128 when BT ≥ 23296, stepKa = stepKb = 4,
depthA1 = depthB1 = 8 = two L1 buffers of stepK tiles) and double-buffered L0A/L0B. The output
tiles of every matmul are dealt to the cube cores in an L2-aware block traversal
(``tile_traversal``): the cores running side by side share A and B panels in L2.
"""
from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass, field
from typing import Any, Generator, Iterator, Mapping

import numpy as np

from opsim.devices.spec import DeviceSpec
from opsim.kernels.common import (ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR, OpDef, OpError, TensorDesc,
                            check_dtype_in, check_format_nd, check_not_null, check_product,
                            check_same_dtype, plain_overrides, popcount, tiling_error)
from opsim.simulator import numerics as nx
from opsim.simulator.cargs import core_mask_problem
from opsim.simulator.cube import (CopyGmToL1, CopyUbToNz, CrossCoreSetFlag, CrossCoreWaitFlag, Fixpipe, GmMatrix,
                            LoadData, Mmad, align16, ceil_div, nz_bytes)
from opsim.simulator.device import MixKernel
from opsim.simulator.errors import MemoryFault, QueueError
from opsim.simulator.isa import (Adds, Cast, DataCopyPad, Div, Exp, Instruction, Muls, QueueFreeFlag, VectorOp,
                                 vector_cost)
from opsim.simulator.memory import align_up
from opsim.simulator.tile import GlobalSlice, GlobalTensor, KernelContext, LocalTensor

NAME = "fused_linear_cross_entropy_loss_grad"
API = "aclnnFusedLinearCrossEntropyLossGrad"
PRODUCTS = ("a2", "a3")
HIGH_PERFORMANCE = "high_performance"
MEMORY_SAVING = "memory_saving"

# Matmul tiles (docs/sources.md#flce-kernel): baseM/N/K = 128/256/64, swapped to 256x128 when BT >= 23296.
BASE_M, BASE_N, BASE_K = 128, 256, 64
SWAP_BT = 23296
STEP_K = 4            # stepKa = stepKb = 4: one MTE2 copy brings 4 base-K tiles into L1
L1_BUFFERS = 2        # depthA1 = depthB1 = 8 base tiles = 2 buffers of stepK tiles (double buffering)
L0_BUFFERS = 2        # L0A/L0B ping-pong: two slots of one pool (_L0PingPong)
MIN_V_WITH_SOFTMAX = 128
ROW_ALIGN = 64        # a softmax row occupies V*4 B padded to 64 B (docs/sources.md#flce-kernel)
# Assumption: the vector side's fixed buffer (TBUF: per-row grad, maskedTarget, targetMask,
# logitsMax, sumExpLogits of a batch of rows) is 8 KiB; the row buffers get (UB - TBUF)/2 each.
TBUF_BYTES = 8192
META_ROWS = 256       # rows whose scalars one TBUF batch holds (<= 21 B per row + alignment)
# Timing mode: above this many L1 chunks in total the cube side issues coarse instructions (each
# standing for several back-to-back base instructions, simulator/cube.py) to bound the number of
# simulation events, as long as one coarse chunk of every core fits the L2 together (plan);
# numeric runs never coarsen.
FINE_CHUNK_BUDGET = 4096
# A coarse launch samples the L2 (simulator/l2.py): one line in COARSE_L2_PERIOD x coarsen, so
# a coarse transfer of `coarsen` chunks shows the L2 about half the lines of one exact chunk's.
COARSE_L2_PERIOD = 2

# cross-core flag ids
FLAG_LOGITS_ALL, FLAG_LOGITS_READY, FLAG_S_ALL, FLAG_S_READY = 0, 1, 2, 3

OVERRIDE_KEYS = ("block_dim", "base_m", "base_n", "base_k", "step_k", "l0c_depth", "vec_chunk", "coarsen",
                 "core_mask")

# aclnn parameter names of the operands
PARAM = {"grad": "grad", "input": "input", "weight": "weight", "target_mask": "targetMask",
         "masked_target": "maskedTarget", "logits_max": "logitsMaxOptional",
         "sum_exp_logits": "sumExpLogitsOptional", "softmax": "softmaxOptional",
         "input_grad": "inputGradOut", "weight_grad": "weightGradOut"}


# ---------------------------------------------------------------------------------------------
# validate
# ---------------------------------------------------------------------------------------------

def _bad(message: str) -> OpError:
    return OpError(ACLNN_ERR_PARAM_INVALID, message)


def _shape_is(name: str, d: TensorDesc, shape: tuple[int, ...], what: str) -> None:
    if tuple(d.shape) != tuple(shape):
        raise _bad(f"{name} has shape {list(d.shape)}; it must be {list(shape)} ({what})")


def validate(spec: DeviceSpec, t: Mapping[str, TensorDesc | None], attrs: Mapping[str, Any]) -> dict[str, TensorDesc]:
    """The documented checks in the documented order (docs/sources.md#flce-checks): null -> dtype -> format ->
    attribute -> shape, then the platform."""
    g, x, w = t.get("grad"), t.get("input"), t.get("weight")
    tm, mt = t.get("target_mask"), t.get("masked_target")
    lm, se, sm = t.get("logits_max"), t.get("sum_exp_logits"), t.get("softmax")
    ig, wg = t.get("input_grad"), t.get("weight_grad")
    # null
    check_not_null(grad=g, input=x, weight=w, targetMask=tm, maskedTarget=mt, inputGradOut=ig, weightGradOut=wg)
    assert x is not None and w is not None and g is not None and tm is not None and mt is not None \
        and ig is not None and wg is not None           # checked just above
    if sm is None and (lm is None or se is None):
        missing = " and ".join(n for n, d in (("logitsMaxOptional", lm), ("sumExpLogitsOptional", se)) if d is None)
        raise OpError(ACLNN_ERR_PARAM_NULLPTR,
                      f"softmaxOptional is null and {missing} {'is' if ' and ' not in missing else 'are'} null; "
                      f"without softmaxOptional both logitsMaxOptional and sumExpLogitsOptional are required "
                      f"to recompute the softmax")
    # With softmaxOptional (high-performance mode) the vendor checks and passes on only the
    # softmax: logitsMaxOptional and sumExpLogitsOptional are then neither checked (dtype, format,
    # shape) nor read, and are ignored here too (docs/sources.md#flce-checks).
    if sm is not None:
        lm = se = None
    # dtype
    check_dtype_in(("fp32",), API, grad=g)
    check_dtype_in(("fp16", "bf16"), API, input=x)
    check_same_dtype("input", x, weight=w)
    check_dtype_in(("bool", "uint8"), API, targetMask=tm)
    check_dtype_in(("int32", "int64"), API, maskedTarget=mt)
    check_dtype_in(("fp32",), API, logitsMaxOptional=lm, sumExpLogitsOptional=se, softmaxOptional=sm)
    check_same_dtype("input", x, inputGradOut=ig, weightGradOut=wg)
    # format
    check_format_nd(grad=g, input=x, weight=w, targetMask=tm, maskedTarget=mt, logitsMaxOptional=lm,
                    sumExpLogitsOptional=se, softmaxOptional=sm, inputGradOut=ig, weightGradOut=wg)
    # attribute
    ls = attrs.get("label_smoothing", 0.0)
    if isinstance(ls, (bool, np.bool_)) or not isinstance(ls, (int, float, np.integer, np.floating)) or ls != 0:
        raise _bad(f"labelSmoothing is {ls!r}; only 0 is supported")
    # shape
    if x.ndim != 2:
        raise _bad(f"input has shape {list(x.shape)}; it must be 2-D [BT, H]")
    bt, h = x.shape
    if w.ndim != 2:
        raise _bad(f"weight has shape {list(w.shape)}; it must be 2-D [V, H]")
    v = w.shape[0]
    if w.shape[1] != h:
        raise _bad(f"weight has shape {list(w.shape)}; its second dimension must equal input's H = {h}")
    _shape_is("grad", g, (bt,), f"[BT] with BT = {bt} from input")
    if tm.dtype == nx.BOOL:
        _shape_is("targetMask", tm, (bt,), f"BOOL [BT] with BT = {bt} from input")
    elif tm.ndim != 1 or tm.numel * 8 < bt:
        raise _bad(f"targetMask is UINT8 with shape {list(tm.shape)}; a bit-packed mask must be 1-D with "
                   f"size * 8 >= BT = {bt} (at least {ceil_div(bt, 8)} bytes)")
    _shape_is("maskedTarget", mt, (bt,), f"[BT] with BT = {bt} from input")
    if lm is not None:
        _shape_is("logitsMaxOptional", lm, (bt,), f"[BT] with BT = {bt} from input")
    if se is not None:
        _shape_is("sumExpLogitsOptional", se, (bt,), f"[BT] with BT = {bt} from input")
    if sm is not None:
        _shape_is("softmaxOptional", sm, (bt, v), f"[BT, V] with BT = {bt} from input and V = {v} from weight")
        if v < MIN_V_WITH_SOFTMAX:
            raise _bad(f"V = {v} (weight's first dimension) is below {MIN_V_WITH_SOFTMAX}; with softmaxOptional "
                       f"the vocabulary partition must have V >= {MIN_V_WITH_SOFTMAX}")
    _shape_is("inputGradOut", ig, (bt, h), "[BT, H] like input")
    _shape_is("weightGradOut", wg, (v, h), "[V, H] like weight")
    # platform: checked after the vendor's empty-tensor shortcut, so an empty input or weight
    # (nothing to compute, nothing written) succeeds on any SoC (docs/sources.md#flce-checks)
    if x.numel and w.numel:
        check_product(spec, API, PRODUCTS)
    return {"input_grad": TensorDesc((bt, h), x.dtype), "weight_grad": TensorDesc((v, h), x.dtype)}


def infer(spec: DeviceSpec, t: Mapping[str, TensorDesc | None],
          attrs: Mapping[str, Any]) -> dict[str, TensorDesc | None]:
    """The outputs opsim.run allocates when the caller gives none: input's and weight's shapes
    in the input dtype."""
    x, w = t.get("input"), t.get("weight")
    return {"input_grad": TensorDesc(x.shape, x.dtype) if x is not None else None,
            "weight_grad": (TensorDesc(w.shape, x.dtype) if w is not None and x is not None else None)}


# ---------------------------------------------------------------------------------------------
# plan
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MatmulTiling:
    """One of the cube's matmuls: C[m, n] = A[m, k] · B[k, n] in base tiles."""

    name: str
    m: int
    n: int
    k: int
    base_m: int
    base_n: int
    base_k: int
    step_k: int

    @property
    def tiles_m(self) -> int:
        return ceil_div(self.m, self.base_m)

    @property
    def tiles_n(self) -> int:
        return ceil_div(self.n, self.base_n)

    @property
    def tiles(self) -> int:
        return self.tiles_m * self.tiles_n

    @property
    def chunk_k(self) -> int:
        """K extent of one L1 buffer (stepK base-K tiles)."""
        return self.base_k * self.step_k

    @property
    def chunks(self) -> int:
        """L1 chunks per output tile."""
        return ceil_div(self.k, self.chunk_k)

    @property
    def macs(self) -> int:
        return self.m * self.n * self.k


@dataclass(frozen=True)
class FlceTiling:
    """The plan of one call (a pure function of the spec, shapes, dtypes and overrides)."""

    mode: str                    # high_performance | memory_saving
    bt: int
    h: int
    v: int
    dtype: str                   # input dtype
    block_dim: int               # cube cores (aicNum)
    aiv_num: int                 # vector cores = ratio x block_dim
    matmuls: tuple[MatmulTiling, ...]   # (logits,) in memory-saving mode, then input_grad, weight_grad
    assignment: tuple[tuple[tuple[int, int, int], ...], ...]  # per cube core: (matmul, tile_m, tile_n), in
    #                                                         the order it runs them (tile_traversal)
    l0c_depth: int
    l1_bytes: int                # L1 one cube core allocates (A1 + B1)
    l0a_bytes: int
    l0b_bytes: int
    l0c_bytes: int
    vec_chunk: int               # softmax elements per vector task (a row is split above this)
    ub_bytes: int
    ws_s_offset: int             # the logit gradient S [BT, V] in the input dtype, NZ
    ws_s_bytes: int
    ws_logits_offset: int        # memory-saving mode: the recomputed logits [BT, V] fp32, ND
    ws_logits_bytes: int
    workspace: int
    gm_footprint: int            # operands + outputs + workspace
    coarsen: int                 # L1 chunks per cube instruction in timing mode (1 = exact)
    core_mask: int | None = None
    tile_length: int = 0         # (stats) the vector task length, as for the element-wise ops
    buffer_num: int = 2

    @property
    def flops(self) -> int:
        """Cube floating-point operations (2 per MAC) of all the matmuls."""
        return 2 * sum(mm.macs for mm in self.matmuls)

    def rows_of(self, aiv: int) -> tuple[int, int]:
        """(first row, rows) of vector core ``aiv`` (balanced split of BT)."""
        base, rem = divmod(self.bt, self.aiv_num)
        start = aiv * base + min(aiv, rem)
        return start, base + (1 if aiv < rem else 0)


def _check_overrides(ov: Mapping[str, Any] | None) -> dict[str, Any]:
    ov = plain_overrides(ov)
    unknown = set(ov) - set(OVERRIDE_KEYS)
    if unknown:
        raise _bad(f"unknown tiling override(s) {sorted(unknown)}; allowed: {', '.join(OVERRIDE_KEYS)}")
    for k, val in ov.items():
        if k != "core_mask" and (isinstance(val, bool) or not isinstance(val, int) or val <= 0):
            raise tiling_error(f"tiling override {k} = {val!r} must be a positive integer")
    for k in ("base_m", "base_n", "base_k"):
        if k in ov and ov[k] % 16:
            raise tiling_error(f"tiling override {k} = {ov[k]} must be a multiple of 16 (the cube fractal)")
    return ov


def _requested_tiles(ov: Mapping[str, Any], swap: bool) -> dict[str, int]:
    """The base tiles and step_k a tiling asks for (a matmul caps a base tile at its dimension)."""
    bm, bn = (BASE_N, BASE_M) if swap else (BASE_M, BASE_N)
    return {"base_m": ov.get("base_m", bm), "base_n": ov.get("base_n", bn), "base_k": ov.get("base_k", BASE_K),
            "step_k": ov.get("step_k", STEP_K)}


def _matmul(name: str, m: int, n: int, k: int, ov: Mapping[str, Any], swap: bool) -> MatmulTiling:
    t = _requested_tiles(ov, swap)
    return MatmulTiling(name, m, n, k, min(t["base_m"], align16(m)), min(t["base_n"], align16(n)),
                        min(t["base_k"], align16(k)), t["step_k"])


# ---------------------------------------------------------------------------------------------
# local buffers: what a cube core and a vector core allocate, for the plan and the kernel alike
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LocalBuffers:
    """``depth`` buffers of ``nbytes`` each that one core allocates in its local ``memory``
    (one queue or TBuf set). The plan checks them against the memories and the kernel
    allocates exactly these, so an accepted tiling cannot run out of room on a core."""

    memory: str          # L1 | L0A | L0B | L0C | UB
    name: str            # the queue position (A1, B1, A2, B2, CO1, VECIN) or TBuf
    depth: int
    nbytes: int          # one buffer as asked for (the region rounds it up to its alignment)


def cube_buffers(matmuls: tuple[MatmulTiling, ...], item: int, l0c_depth: int) -> tuple[LocalBuffers, ...]:
    """The L1 and L0 queues of a cube core: one set serves every matmul of the launch, sized
    for the largest base tiles and L1 chunk of any of them."""
    bm = max(mm.base_m for mm in matmuls)
    bn = max(mm.base_n for mm in matmuls)
    kc = max(mm.chunk_k for mm in matmuls)
    bk = max(mm.base_k for mm in matmuls)
    return (LocalBuffers("L1", "A1", L1_BUFFERS, nz_bytes(bm, kc, item)),
            LocalBuffers("L1", "B1", L1_BUFFERS, nz_bytes(kc, bn, item)),
            LocalBuffers("L0A", "A2", L0_BUFFERS, nz_bytes(bm, bk, item)),
            LocalBuffers("L0B", "B2", L0_BUFFERS, nz_bytes(bk, bn, item)),
            LocalBuffers("L0C", "CO1", l0c_depth, nz_bytes(bm, bn, 4)))


def vector_buffers(mode: str, vec_chunk: int, packed_mask: bool, int_bytes: int) -> tuple[LocalBuffers, ...]:
    """The UB of a vector core: the per-row scalars of a batch of rows (one VECIN buffer) and
    two fp32 row buffers of ``vec_chunk`` elements (TBufs)."""
    return (LocalBuffers("UB", "VECIN", 1, meta_layout(mode, packed_mask, int_bytes)[1]),
            LocalBuffers("UB", "TBuf", 2, vec_chunk * 4))


def memory_bytes(spec: DeviceSpec, buffers: tuple[LocalBuffers, ...], memory: str) -> int:
    """Bytes ``buffers`` take of ``memory`` once each buffer is rounded up to its alignment
    (the allocator packs them back to back from the empty memory)."""
    buf = getattr(spec, memory.lower())
    align = buf.alignment if buf is not None else 32
    return sum(b.depth * align_up(b.nbytes, align) for b in buffers if b.memory == memory)


def _capacity(spec: DeviceSpec, memory: str) -> int:
    buf = getattr(spec, memory.lower())
    return buf.size if buf is not None else 0


CUBE_MEMORIES = ("L1", "L0A", "L0B", "L0C")
# the tiling parameters that size each memory's buffers
CUBE_PARAMS = {"L1": ("base_m", "base_n", "base_k", "step_k"), "L0A": ("base_m", "base_k"),
               "L0B": ("base_k", "base_n"), "L0C": ("base_m", "base_n", "l0c_depth")}
# the smallest cube tiling: one fractal per base tile, one base-K tile per L1 chunk, one result
SMALLEST_CUBE = {"base_m": 16, "base_n": 16, "base_k": 16, "step_k": 1, "l0c_depth": 1}


def _cube_setup(spec: DeviceSpec, bt: int, h: int, v: int, mode: str, item: int,
                ov: Mapping[str, Any]) -> tuple[tuple[MatmulTiling, ...], int, tuple[LocalBuffers, ...]]:
    """The matmuls, the L0C depth and the cube core's buffers of a tiling."""
    swap = bt >= SWAP_BT
    mms: list[MatmulTiling] = []
    if mode == MEMORY_SAVING:
        mms.append(_matmul("logits", bt, v, h, ov, swap))            # input · Wᵀ
    mms.append(_matmul("input_grad", bt, h, v, ov, swap))            # S · W
    mms.append(_matmul("weight_grad", v, h, bt, ov, swap))           # Sᵀ · input
    matmuls = tuple(mms)
    bm = max(mm.base_m for mm in matmuls)
    bn = max(mm.base_n for mm in matmuls)
    l0c_size = spec.l0c.size if spec.l0c is not None else 0
    # L0C double-buffers only when two result tiles fit (128x256 fp32 = 128 KiB fills it)
    l0c_depth = ov.get("l0c_depth", 2 if 2 * nz_bytes(bm, bn, 4) <= l0c_size else 1)
    return matmuls, l0c_depth, cube_buffers(matmuls, item, l0c_depth)


def _cube_overflows(spec: DeviceSpec, buffers: tuple[LocalBuffers, ...]) -> list[str]:
    """The memories of a cube core that ``buffers`` do not fit."""
    return [m for m in CUBE_MEMORIES if memory_bytes(spec, buffers, m) > _capacity(spec, m)]


def _check_cube_fit(spec: DeviceSpec, shape: tuple[int, int, int], mode: str, item: int, ov: Mapping[str, Any],
                    l0c_depth: int, buffers: tuple[LocalBuffers, ...]) -> None:
    """Refuse (561002) a tiling whose cube buffers do not fit L1 / L0A / L0B / L0C, naming the
    parameters, each memory's buffers, the bytes needed and available, and what would fit."""
    over = _cube_overflows(spec, buffers)
    if not over:
        return
    values = {**_requested_tiles(ov, shape[0] >= SWAP_BT), "l0c_depth": l0c_depth}
    named = ", ".join(f"{k} {val}" + ("" if k in ov else " (default)") for k, val in values.items())
    parts = []
    for m in over:
        bufs = " + ".join(f"{b.name} {b.depth} x {b.nbytes} B" for b in buffers if b.memory == m)
        parts.append(f"{m} needs {memory_bytes(spec, buffers, m)} B ({bufs}), {m} has {_capacity(spec, m)} B")
    sizing = [p for p in values if any(p in CUBE_PARAMS[m] for m in over)]

    def fits(tiling: Mapping[str, Any]) -> bool:
        return not _cube_overflows(spec, _cube_setup(spec, *shape, mode, item, tiling)[2])

    def largest(param: str) -> int:
        # the bytes never shrink as a parameter grows, so a bisection finds the largest that fits
        unit = 16 if param.startswith("base_") else 1
        lo, hi = 0, values[param] // unit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits({**ov, param: mid * unit}) else (lo, mid - 1)
        return lo * unit

    def one_change(params: list[str]) -> dict[str, int]:
        return {p: n for p in params if (n := largest(p))}

    # what fits changing one parameter, the others as they are: a parameter the caller set if one
    # does, else any that sizes the memories that overflow
    found = one_change([p for p in sizing if p in ov]) or one_change(sizing)
    if found:
        hint = "with the others as they are, " + ", ".join(f"the largest {p} that fits is {n}"
                                                            for p, n in found.items())
    else:
        smallest = _cube_setup(spec, *shape, mode, item, SMALLEST_CUBE)[2]
        need = ", ".join(f"{memory_bytes(spec, smallest, m)} B of {m}" for m in over)
        names = ", ".join(sizing[:-1]) + (" or " if len(sizing) > 1 else "") + sizing[-1]
        hint = (f"no {names} alone makes it fit; base_m = base_n = base_k = 16 with step_k 1 and l0c_depth 1 "
                + (f"still needs {need}: no tiling fits" if _cube_overflows(spec, smallest) else f"fits ({need})"))
    raise tiling_error(f"the cube tiling {named} does not fit a cube core of {spec.name}: {'; '.join(parts)}; {hint}")


def _check_vector_fit(spec: DeviceSpec, ov: Mapping[str, Any], vec_chunk: int,
                      buffers: tuple[LocalBuffers, ...]) -> None:
    """Refuse (561002) a ``vec_chunk`` whose row buffers do not fit the UB beside the per-row
    scalars, naming the bytes needed and available and the largest vec_chunk that fits."""
    ub, need = _capacity(spec, "UB"), memory_bytes(spec, buffers, "UB")
    if need <= ub:
        return
    meta = memory_bytes(spec, buffers[:1], "UB")
    largest = max(0, (ub - meta) // 2 // 4) // 16 * 16
    fits = f"the largest vec_chunk that fits is {largest}" if largest else "no vec_chunk fits"
    # name the value the caller gave; the plan rounds it up to whole 16-element (64 B) rows
    given = ov.get("vec_chunk")
    named = (f"vec_chunk {vec_chunk} (default)" if given is None else f"vec_chunk {given}" if given == vec_chunk
             else f"vec_chunk {given} ({vec_chunk} once rounded up to a multiple of 16)")
    raise tiling_error(f"{named} does not fit the UB of a "
                       f"vector core of {spec.name}: two fp32 row buffers (TBuf 2 x {vec_chunk * 4} B) plus the "
                       f"per-row scalars (VECIN 1 x {meta} B) need {need} B, UB has {ub} B; {fits}")

# ---------------------------------------------------------------------------------------------
# tile traversal: which output tiles run side by side on the cube cores
#
# Why: every output tile streams the whole K extent of one A panel (base_m rows of A) and one
# B panel (base_n columns of B) through L1. A 128 x 256 bf16 tile does 2·128·256 / ((128 +
# 256)·2) ≈ 85 FLOP per byte loaded: above the L2 balance of the 910B (354 TFLOP/s / 4.75 TB/s
# ≈ 74 FLOP/B) but far below the HBM balance (354 / 1.38 ≈ 256 FLOP/B), so the cube can only be
# kept busy if most panel loads hit L2, i.e. if the tiles running at the same time share their
# panels. In row-major order a wave of 24 cores covers ~1.5 rows of tiles: for input_grad at
# BT 4096 / H 4096 / V 32000 that is ~16 B panels of 16 MB each, more than the 192 MiB L2, and
# the panels are evicted before the next wave reuses them. Here the tiles are ordered so that
# the wave of ``block_dim`` consecutive tiles (one per core: the least-loaded assignment below
# deals equal tiles round-robin) is a compact block: bands of ``g`` tile rows (or columns)
# walked across, ``g`` tiles down each step, serpentine from band to band so that the first
# wave of a band reuses the last wave's panels. All cores walk their K loop from 0 upwards,
# so the panels a wave shares are read at about the same time. This is modelled on the
# swizzled / grouped block traversal of GPU GEMM libraries and the block swizzle of Ascend
# matmul templates, as a description of the technique (no code copied).
# ---------------------------------------------------------------------------------------------

def _traversal_order(tiles_m: int, tiles_n: int, along_m: bool, g: int) -> tuple[tuple[int, int], ...]:
    """(tm, tn) in traversal order: bands of ``g`` tile rows (``along_m``; the band walks the
    columns, ``g`` rows down each column) or of ``g`` tile columns (the band walks the rows),
    serpentine from band to band (``g`` = 1 along M: row-major with every other row reversed)."""
    outer, inner = (tiles_m, tiles_n) if along_m else (tiles_n, tiles_m)
    order: list[tuple[int, int]] = []
    for band, b0 in enumerate(range(0, outer, g)):
        walk = range(inner) if band % 2 == 0 else range(inner - 1, -1, -1)
        for j in walk:
            for o in range(b0, min(b0 + g, outer)):
                order.append((o, j) if along_m else (j, o))
    return tuple(order)


def _panel_bytes(mm: MatmulTiling, item: int) -> tuple[list[int], list[int]]:
    """Bytes of each A panel (a tile row's rows x K) and each B panel (K x a tile column)."""
    a = [min(mm.base_m, mm.m - t * mm.base_m) * mm.k * item for t in range(mm.tiles_m)]
    b = [min(mm.base_n, mm.n - t * mm.base_n) * mm.k * item for t in range(mm.tiles_n)]
    return a, b


def wave_panel_bytes(mm: MatmulTiling, order: tuple[tuple[int, int], ...], wave: int,
                     item: int) -> list[int]:
    """Per wave of ``wave`` consecutive tiles of ``order``: the bytes of the distinct A and B
    panels its tiles read (what the wave needs resident in L2 to load each panel from HBM once)."""
    a, b = _panel_bytes(mm, item)
    out = []
    for w0 in range(0, len(order), wave):
        tiles = order[w0:w0 + wave]
        out.append(sum(a[r] for r in {t[0] for t in tiles}) + sum(b[c] for c in {t[1] for t in tiles}))
    return out


def _l2_miss_estimate(mm: MatmulTiling, order: tuple[tuple[int, int], ...], wave: int, item: int,
                      out_item: int, l2_bytes: int) -> int:
    """HBM bytes of a traversal under a panel-granular LRU of ``l2_bytes``: each wave touches
    its panels, then allocates its result tiles (stores go through L2). A tie-break between
    blocks of equal size that tells apart the reuse from one wave to the next."""
    a, b = _panel_bytes(mm, item)
    lru: dict[tuple[str, int], int] = {}      # insertion order = recency (oldest first)
    used = miss = 0
    for n, w0 in enumerate(range(0, len(order), wave)):
        tiles = order[w0:w0 + wave]
        keys = [("a", r) for r in sorted({t[0] for t in tiles})] + [("b", c) for c in sorted({t[1] for t in tiles})]
        out = sum(min(mm.base_m, mm.m - r * mm.base_m) * min(mm.base_n, mm.n - c * mm.base_n)
                  for r, c in tiles) * out_item
        for key, size in [(k, a[k[1]] if k[0] == "a" else b[k[1]]) for k in keys] + [(("c", n), out)]:
            if key in lru:
                lru[key] = lru.pop(key)
            else:
                if key[0] != "c":
                    miss += size
                lru[key] = size
                used += size
            while used > l2_bytes and lru:
                used -= lru.pop(next(iter(lru)))
    return miss


def tile_traversal(mm: MatmulTiling, wave: int, item: int, out_item: int,
                   l2_bytes: int) -> tuple[tuple[int, int], ...]:
    """The order in which the tiles of ``mm`` are dealt to the cube cores (see above).

    Candidates: bands along M or N of g = 1 .. ``wave`` tiles. Chosen: the least total bytes
    of distinct panels per wave (the L2 working set of the cores running side by side), then
    the fewest estimated HBM bytes under an LRU of the L2 (reuse from wave to wave), then the
    smaller band, bands along M first. A pure, deterministic function of the tiling."""
    return _tile_traversal(mm, max(1, wave), item, out_item, l2_bytes)


@functools.lru_cache(maxsize=64)
def _tile_traversal(mm: MatmulTiling, wave: int, item: int, out_item: int,
                    l2_bytes: int) -> tuple[tuple[int, int], ...]:
    shapes = [(along_m, g) for along_m in (True, False)
              for g in range(1, min(wave, mm.tiles_m if along_m else mm.tiles_n) + 1)]
    orders = {c: _traversal_order(mm.tiles_m, mm.tiles_n, *c) for c in shapes}
    working = {c: sum(wave_panel_bytes(mm, orders[c], wave, item)) for c in shapes}
    least = min(working.values())
    ties = [c for c in shapes if working[c] == least]
    if len(ties) == 1:
        return orders[ties[0]]
    return orders[min(ties, key=lambda c: (_l2_miss_estimate(mm, orders[c], wave, item, out_item, l2_bytes),
                                           not c[0], c[1]))]


def _assign(matmuls: tuple[MatmulTiling, ...], phases: tuple[tuple[int, ...], ...], cores: int,
            item: int, out_items: tuple[int, ...], l2_bytes: int) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """Tiles to cube cores, phase by phase: each tile, in its matmul's traversal order
    (:func:`tile_traversal`), to the least-loaded core so far (load = padded MACs), ties to the
    lowest core. Equal tiles are thus dealt round-robin and the cores' j-th tiles form the
    j-th wave of the traversal. Deterministic."""
    per_core: list[list[tuple[int, int, int]]] = [[] for _ in range(cores)]
    for phase in phases:
        heap = [(0, j) for j in range(cores)]      # (load, core): the least loaded, lowest core first
        for i in phase:
            mm = matmuls[i]
            for tm, tn in tile_traversal(mm, cores, item, out_items[i], l2_bytes):
                rows = min(mm.base_m, mm.m - tm * mm.base_m)
                cols = min(mm.base_n, mm.n - tn * mm.base_n)
                load, c = heap[0]
                heapq.heapreplace(heap, (load + align16(rows) * align16(cols) * align16(mm.k), c))
                per_core[c].append((i, tm, tn))
    return tuple(tuple(x) for x in per_core)


def _operand_bytes(t: Mapping[str, TensorDesc | None]) -> int:
    return sum(align_up(d.nbytes, 32) for d in t.values() if d is not None)


def plan(spec: DeviceSpec, t: Mapping[str, TensorDesc], attrs: Mapping[str, Any],
         overrides: Mapping[str, Any] | None = None) -> FlceTiling:
    ov = _check_overrides(overrides)
    x, w = t["input"], t["weight"]
    bt, h = x.shape
    v = w.shape[0]
    dt = x.dtype
    mode = HIGH_PERFORMANCE if t.get("softmax") is not None else MEMORY_SAVING
    # cube buffers (the same queues serve every matmul of the launch): refused here when they do
    # not fit, not as a CapacityError on a core once the run has started
    item = dt.itemsize
    matmuls, l0c_depth, cube = _cube_setup(spec, bt, h, v, mode, item, ov)
    _check_cube_fit(spec, (bt, h, v), mode, item, ov, l0c_depth, cube)
    a1, b1 = (b.nbytes for b in cube[:2])
    # cores
    cores = spec.cores.aic
    core_mask = ov.get("core_mask")
    if core_mask is not None:
        problem = core_mask_problem(core_mask, cores, "cube", spec.name)
        if problem:
            raise tiling_error(problem)
        core_mask = int(core_mask)          # a numpy integer as the int the tiling records
        cores = popcount(core_mask)
    ratio = max(1, spec.cores.aiv // spec.cores.aic)
    busiest = max(mm.tiles for mm in matmuls)
    block_dim = ov.get("block_dim", max(1, min(cores, max(busiest, ceil_div(bt, ratio)))))
    if block_dim > cores:
        # the phases end in an all-core cross-core barrier (CrossCoreSetFlag mode 0), which waits
        # for every block of the launch: blocks cannot run in waves, so a block_dim beyond the
        # cores is refused rather than quietly run on fewer blocks than asked for
        among = f"the {cores} cube cores of core_mask {core_mask:#x}" if core_mask is not None \
            else f"the {cores} cube cores of {spec.name}"
        raise tiling_error(f"tiling override block_dim = {block_dim} exceeds {among}: the kernel synchronises "
                           f"all its cube and vector cores between phases (CrossCoreSetFlag mode 0), so every "
                           f"block must run at once; allowed: block_dim 1..{cores}")
    phases = ((0,), (1, 2)) if mode == MEMORY_SAVING else ((0, 1),)
    # results: the fp32 logits (memory-saving mode), then input_grad / weight_grad in the input dtype
    out_items = ((4,) if mode == MEMORY_SAVING else ()) + (item, item)
    assignment = _assign(matmuls, phases, block_dim, item, out_items, spec.l2.size if spec.l2 is not None else 0)
    # vector side: a row of V fp32 (padded to 64 B) per buffer; split when it does not fit
    assert spec.ub is not None              # required of every Ascend spec (devices/spec.py)
    ub = spec.ub.size
    # the default chunk leaves the TBUF_BYTES reservation beside the two row buffers (at least
    # the smallest chunk); the fit is checked on the bytes the kernel allocates
    max_chunk = max(16, ((ub - TBUF_BYTES) // 2 // 4) // (ROW_ALIGN // 4) * (ROW_ALIGN // 4))
    vec_chunk = ov.get("vec_chunk", min(max_chunk, align_up(max(v, 1), ROW_ALIGN // 4)))
    vec_chunk = align_up(vec_chunk, 16)
    packed = t["target_mask"].dtype == nx.UINT8
    vector = vector_buffers(mode, vec_chunk, packed, t["masked_target"].dtype.itemsize)
    _check_vector_fit(spec, ov, vec_chunk, vector)
    # workspace: S in NZ, then (memory-saving) the fp32 logits
    s_bytes = align_up(nz_bytes(bt, v, item), 512)
    logits_bytes = align_up(bt * v * 4, 512) if mode == MEMORY_SAVING else 0
    workspace = s_bytes + logits_bytes
    footprint = _operand_bytes(t) + align_up(workspace, 32)
    # timing-mode coarsening: L1 chunks per cube instruction
    total_chunks = sum(matmuls[i].tiles * matmuls[i].chunks for i in range(len(matmuls)))
    coarsen = 1 if total_chunks <= FINE_CHUNK_BUDGET else ceil_div(total_chunks, FINE_CHUNK_BUDGET)
    l2_size = spec.l2.size if spec.l2 is not None else 0
    if l2_size:
        # ... but never so coarse that the cores' coarse loads together outgrow the L2: the cores
        # sharing a panel then drift apart (one core's miss of a coarse chunk outlasts the L2's
        # memory of the lines it brought) and miss where the exact schedule hits -- a coarsening
        # artefact, not the machine: at BT = H = 4096 on atlas-a2, V = 131072 memory-saving ran
        # 138.9 M cycles at coarsen 192 (71.5 % L2 hits) against 100.4 M at any coarsen <= 128
        # (90.5 %), V = 262144 high-performance 225.5 M at 256 against 150.1 M at 16
        # (a power of two, which divides the K loops of power-of-two shapes evenly)
        fit = max(1, l2_size // (block_dim * (a1 + b1)))
        coarsen = min(coarsen, 1 << (fit.bit_length() - 1))
    coarsen = ov.get("coarsen", coarsen)
    l1, l0a, l0b, l0c = (memory_bytes(spec, cube, m) for m in CUBE_MEMORIES)
    return FlceTiling(mode, bt, h, v, dt.name, block_dim, block_dim * ratio, matmuls, assignment, l0c_depth,
                      l1, l0a, l0b, l0c, vec_chunk, memory_bytes(spec, vector, "UB"), 0, s_bytes, s_bytes,
                      logits_bytes, workspace, footprint, coarsen, core_mask, tile_length=vec_chunk)


# ---------------------------------------------------------------------------------------------
# kernel: vector-side instructions that read a scalar from UB when they execute
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ScalarRef:
    """Element ``index`` of a UB tensor, read when an instruction executes (Ascend C GetValue
    after the MTE2->S hand-off): the per-row grad, logitsMax, sumExpLogits, maskedTarget."""

    tensor: LocalTensor
    index: int
    negate: bool = False

    def check(self) -> None:
        self.tensor.check(self.index + 1, write=False)

    def access(self) -> tuple[str, int, int, bool]:
        t = self.tensor
        return (t.memory_name, t.addr + self.index * t.dtype.itemsize, t.dtype.itemsize, False)

    def value(self) -> float:
        v = self.tensor.array(self.index + 1)[self.index]
        return -float(v) if self.negate else (int(v) if not self.tensor.dtype.is_float else float(v))


@dataclass(frozen=True)
class MaskBitRef:
    """targetMask[row] from UB: a BOOL element, or bit ``row % 8`` (LSB first) of a packed byte."""

    tensor: LocalTensor
    index: int          # element (BOOL) or byte (packed) within the tensor
    bit: int = -1       # -1: BOOL

    def check(self) -> None:
        self.tensor.check(self.index + 1, write=False)

    def access(self) -> tuple[str, int, int, bool]:
        t = self.tensor
        return (t.memory_name, t.addr + self.index * t.dtype.itemsize, t.dtype.itemsize, False)

    def value(self) -> int:
        b = int(self.tensor.array(self.index + 1)[self.index])
        return b & 1 if self.bit < 0 else (b >> self.bit) & 1


class _RefScalar(VectorOp):
    """Mixin: the scalar operand comes from a ScalarRef when the instruction executes."""

    ref: ScalarRef                             # a slot of each concrete class

    def issue(self, pipe: Any) -> int:
        self.ref.check()
        return super().issue(pipe)

    def accesses(self, pipe: Any) -> tuple:
        return (self.ref.access(), *super().accesses(pipe))

    def complete(self, pipe: Any) -> None:
        if pipe.core.device.functional:
            self.scalar = self.ref.value()
        super().complete(pipe)


# Adds, Muls and Div are classes made by type() in simulator/isa.py, which mypy cannot follow
class AddsRef(_RefScalar, Adds):  # type: ignore[valid-type,misc]
    """Adds(dst, src, s) with s read from UB (−logitsMax[row])."""

    __slots__ = ("ref",)

    def __init__(self, dst: LocalTensor, src: LocalTensor, ref: ScalarRef, count: int) -> None:
        super().__init__(dst, src, scalar=0.0, count=count)
        self.ref = ref


class MulsRef(_RefScalar, Muls):  # type: ignore[valid-type,misc]  # as AddsRef
    """Muls(dst, src, s) with s read from UB (grad[row])."""

    __slots__ = ("ref",)

    def __init__(self, dst: LocalTensor, src: LocalTensor, ref: ScalarRef, count: int) -> None:
        super().__init__(dst, src, scalar=0.0, count=count)
        self.ref = ref


class DivRef(_RefScalar, Div):  # type: ignore[valid-type,misc]  # as AddsRef
    """A true divide by sumExpLogits[row]. The kernel duplicates the scalar into a 256 B block
    and divides with a zero source-1 repeat stride; modelled as one Div of ``count`` elements."""

    __slots__ = ("ref",)

    def __init__(self, dst: LocalTensor, src: LocalTensor, ref: ScalarRef, count: int) -> None:
        super().__init__(dst, src, scalar=1.0, count=count)
        self.ref = ref


class TargetUpdate(Instruction):
    """S[row, maskedTarget] −= 1 − targetMask (fp32, one rounding) when the target falls in this
    chunk of the row. The kernel reads maskedTarget and targetMask with GetValue and updates one
    element; modelled on the VECTOR pipe as a masked Adds over one 32 B block (8 fp32)."""

    __slots__ = ("buf", "count", "col0", "v", "target", "mask", "row")
    pipe = "VECTOR"
    name = "Adds"

    def __init__(self, buf: LocalTensor, count: int, col0: int, v: int, target: ScalarRef, mask: MaskBitRef,
                 row: int) -> None:
        self.tile, self.origin = -1, None     # Instruction.__init__ inline (one per row chunk)
        self.buf, self.count, self.col0, self.v = buf, int(count), int(col0), int(v)
        self.target, self.mask, self.row = target, mask, int(row)

    def issue(self, pipe: Any) -> int:
        self.buf.check(self.count, write=True)
        self.target.check()
        self.mask.check()
        # Pipe.head_cycles only while the head is pending (a call fewer per row chunk after)
        return vector_cost(pipe.core.device.spec, "Adds", "fp32", 8) + (pipe.head_cycles() if pipe.head_pending else 0)

    def complete(self, pipe: Any) -> None:
        if not pipe.core.device.functional:
            return
        update = 1 - self.mask.value()
        if update == 0:
            return                          # subtracting 0 leaves the row as it is
        t = int(self.target.value())        # maskedTarget is INT32/INT64: an int already
        if not 0 <= t < self.v:
            raise MemoryFault(f"maskedTarget[{self.row}] = {t} is outside [0, {self.v}) of the vocabulary "
                              f"partition although targetMask[{self.row}] = 0", address=self.buf.addr)
        if self.col0 <= t < self.col0 + self.count:
            a = self.buf.array(self.count)
            a[t - self.col0] = np.float32(a[t - self.col0]) - np.float32(update)

    def accesses(self, pipe: Any) -> tuple:
        # a read-modify-write of one element of the chunk (which one is data-dependent)
        return (self.target.access(), self.mask.access(), self.buf.access(self.count, False),
                self.buf.access(self.count, True))

    def describe(self) -> str:
        return f"TargetUpdate(row {self.row})"

    def trace_args(self) -> tuple[int, int, int, str]:
        return 8, 0, self.buf.addr, "fp32 target -= 1 - mask"


# ---------------------------------------------------------------------------------------------
# kernel: the programs of one block
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FlceOperands:
    """The GM operands as the programs see them."""

    grad: GlobalTensor
    target_mask: GlobalTensor
    masked_target: GlobalTensor
    logits_max: GlobalTensor | None
    sum_exp_logits: GlobalTensor | None
    rows: GlobalTensor                  # softmax (HP) or the workspace logits (MS), [BT, V] fp32
    input: GmMatrix
    weight: GmMatrix
    # workspace (not operands of the operator: the profiler's op_summary leaves them out)
    s_nz: GmMatrix = field(metadata={"workspace": True})             # the logit gradient, NZ
    logits: GmMatrix | None = field(metadata={"workspace": True})    # the recomputed logits, ND fp32
    input_grad: GmMatrix
    weight_grad: GmMatrix
    packed_mask: bool = False


def _aiv_program(ctx: KernelContext, tiling: FlceTiling, ops: FlceOperands) -> Iterator[Any]:
    """A vector core: its rows of the logit gradient, written in NZ into the workspace."""
    ms = tiling.mode == MEMORY_SAVING
    if ms:   # the logits must be complete: every cube core has finished the first matmul
        yield CrossCoreWaitFlag(FLAG_LOGITS_READY, mode=2, pipe="MTE2")
    r0, nrows = tiling.rows_of(ctx.block_idx)
    frees: list[int] = []
    if nrows:
        frees = yield from _vector_rows(ctx, tiling, ops, r0, nrows, ms)
    # every vector core done (mode 0), then tell this group's cube core (mode 2)
    yield CrossCoreSetFlag(FLAG_S_ALL, mode=0, pipe="MTE3")
    yield CrossCoreWaitFlag(FLAG_S_ALL, mode=0, pipe="MTE3")
    yield CrossCoreSetFlag(FLAG_S_READY, mode=2, pipe="MTE3")
    for ev in frees:   # the last buffer releases: no flag is left set when the kernel ends
        ctx.emit_wait("MTE3", "MTE2", ev)


def meta_layout(mode: str, packed: bool, int_bytes: int) -> tuple[dict[str, int], int]:
    """Byte offsets (32 B aligned) of the per-row scalars of one batch in the TBUF, and the
    bytes of the batch (at most TBUF_BYTES)."""
    sizes = {"grad": META_ROWS * 4, "target": META_ROWS * int_bytes,
             "mask": ceil_div(META_ROWS, 8) + 1 if packed else META_ROWS}
    if mode == MEMORY_SAVING:
        sizes.update(max=META_ROWS * 4, sum=META_ROWS * 4)
    offsets, off = {}, 0
    for k, n in sizes.items():
        offsets[k] = off
        off = align_up(off + n, 32)
    return offsets, off


def _vector_rows(ctx: KernelContext, tiling: FlceTiling, ops: FlceOperands, r0: int, nrows: int,
                 ms: bool) -> Generator[Any, None, list[int]]:
    """The rows [r0, r0+nrows); returns the MTE3 -> MTE2 release flags still set at the end."""
    v, chunk = tiling.v, tiling.vec_chunk
    dt = nx.dtype(tiling.dtype)
    int_dt = ops.masked_target.dtype
    offsets, _ = meta_layout(tiling.mode, ops.packed_mask, int_dt.itemsize)
    # the buffers the plan checked against the UB (vector_buffers)
    meta_buf, row_buf = vector_buffers(tiling.mode, chunk, ops.packed_mask, int_dt.itemsize)
    meta_q = ctx.queue(meta_buf.name, meta_buf.depth, meta_buf.nbytes)
    # two row buffers bound to one another as VECIN -> VECOUT (the cast is in place), with the
    # MTE2 -> V -> MTE3 -> MTE2 hand-offs Ascend C's TQueBind inserts
    bufs = [ctx.tbuf(row_buf.nbytes, nx.FP32) for _ in range(row_buf.depth)]
    ev_in = [ctx.next_event_id("MTE2", "VECTOR") for _ in range(2)]
    ev_out = [ctx.next_event_id("VECTOR", "MTE3") for _ in range(2)]
    ev_free = [ctx.next_event_id("MTE3", "MTE2") for _ in range(2)]
    used = [False, False]
    slot = 0
    rows, rows_numel = ops.rows, ops.rows.numel
    # (slot, n) -> (buf[0:n], the buffer as the output dtype, its first n): the same few views
    # every row chunk, made once (a view is a value: sharing it changes no instruction)
    views: dict[tuple[int, int], tuple[LocalTensor, LocalTensor, LocalTensor]] = {}
    for b0 in range(r0, r0 + nrows, META_ROWS):
        nb = min(META_ROWS, r0 + nrows - b0)
        meta = meta_q.alloc(nx.UINT8)
        grad_t = meta[offsets["grad"]:offsets["grad"] + nb * 4].reinterpret(nx.FP32)
        tgt_t = meta[offsets["target"]:offsets["target"] + nb * int_dt.itemsize].reinterpret(int_dt)
        yield DataCopyPad(grad_t, ops.grad[b0:b0 + nb], nb)
        yield DataCopyPad(tgt_t, ops.masked_target[b0:b0 + nb], nb)
        if ops.packed_mask:
            k0, k1 = b0 // 8, (b0 + nb - 1) // 8 + 1
            mask_t = meta[offsets["mask"]:offsets["mask"] + (k1 - k0)]
            yield DataCopyPad(mask_t, ops.target_mask[k0:k1], k1 - k0)
        else:
            mask_t = meta[offsets["mask"]:offsets["mask"] + nb].reinterpret(nx.BOOL)
            yield DataCopyPad(mask_t, ops.target_mask[b0:b0 + nb], nb)
        if ms:
            assert ops.logits_max is not None and ops.sum_exp_logits is not None   # memory-saving mode has them
            max_t = meta[offsets["max"]:offsets["max"] + nb * 4].reinterpret(nx.FP32)
            sum_t = meta[offsets["sum"]:offsets["sum"] + nb * 4].reinterpret(nx.FP32)
            yield DataCopyPad(max_t, ops.logits_max[b0:b0 + nb], nb)
            yield DataCopyPad(sum_t, ops.sum_exp_logits[b0:b0 + nb], nb)
        meta_q.enque(meta)
        meta = meta_q.deque()
        for i in range(nb):
            row = b0 + i
            ctx.tile = row
            target = ScalarRef(tgt_t, i)
            mask = (MaskBitRef(mask_t, row // 8 - b0 // 8, row % 8) if ops.packed_mask else MaskBitRef(mask_t, i))
            for c0 in range(0, v, chunk):
                n = min(chunk, v - c0)
                buf = bufs[slot]
                try:
                    buf_n, out, out_n = views[slot, n]
                except KeyError:
                    out = buf.reinterpret(dt)
                    buf_n, out, out_n = views[slot, n] = (buf[0:n], out, out[0:n])
                if used[slot]:
                    ctx.emit_wait("MTE3", "MTE2", ev_free[slot])
                used[slot] = True
                off = row * v + c0      # rows[off:off + n], built directly when in range
                yield DataCopyPad(buf_n, GlobalSlice(rows, off, n) if off + n <= rows_numel else rows[off:off + n], n)
                ctx.emit_set("MTE2", "VECTOR", ev_in[slot])
                ctx.emit_wait("MTE2", "VECTOR", ev_in[slot])
                if ms:
                    yield AddsRef(buf, buf, ScalarRef(max_t, i, negate=True), n)
                    yield Exp(buf, buf, count=n)
                    yield DivRef(buf, buf, ScalarRef(sum_t, i), n)
                yield TargetUpdate(buf, n, c0, v, target, mask, row)
                yield MulsRef(buf, buf, ScalarRef(grad_t, i), n)
                yield Cast(out_n, buf_n, "rint", n)
                ctx.emit_set("VECTOR", "MTE3", ev_out[slot])
                ctx.emit_wait("VECTOR", "MTE3", ev_out[slot])
                # the L2 model sees the batch's NZ blocks with its last row (one run per column block)
                yield CopyUbToNz(ops.s_nz, row, c0, out, n, l2_rows=nb if i == nb - 1 else 0)
                ctx.emit_set("MTE3", "MTE2", ev_free[slot])
                slot ^= 1
        meta_q.free(meta)
    return [ev_free[s] for s in (0, 1) if used[s]]


class _L0PingPong:
    """L0A and L0B as one ping-pong pool, as the Matmul API's MDL scheduler runs them
    (docs/sources.md#flce-l0-pingpong): slot i is the i-th L0A buffer and the i-th L0B buffer,
    handed from MTE1 to the cube by one flag pair. Per K step: ``alloc`` waits for the slot's
    CUBE→MTE1 flag (the Mmad that last read it is done), both LoadData fill it, ``enque`` sets
    MTE1→CUBE once for the two, ``deque`` waits for it, the Mmad reads both, ``free`` sets
    CUBE→MTE1; the slots alternate. Two queues, one per operand, spent two flags a step more in
    the pipes' instruction queues (``scalar.queue_depth`` counts flags too)."""

    def __init__(self, ctx: KernelContext, a: LocalBuffers, b: LocalBuffers) -> None:
        assert a.depth == b.depth and (a.memory, b.memory) == ("L0A", "L0B")
        self.ctx, self.depth = ctx, a.depth
        core = ctx.core
        self.a_region, self.b_region = core.memory(a.memory), core.memory(b.memory)
        self.region = self.a_region                     # what the sanitizer names an unfreed slot by
        self.a_bytes = align_up(a.nbytes, self.a_region.alignment)
        self.b_bytes = align_up(b.nbytes, self.b_region.alignment)
        # the buffers the plan checked (cube_buffers), named as the two queues named them
        self.a_addr = [ctx.allocate(self.a_region, self.a_bytes, f"{a.name}[{i}]") for i in range(a.depth)]
        self.b_addr = [ctx.allocate(self.b_region, self.b_bytes, f"{b.name}[{i}]") for i in range(b.depth)]
        self.event_ids = [ctx.next_event_id("MTE1", "CUBE") for _ in range(a.depth)]
        self._slot = 0                                  # the slot alloc() hands out next
        self._used = [False] * a.depth                  # handed out before: alloc() waits for its free
        self._out: int | None = None                    # the slot allocated and not freed
        self._tensors: dict[tuple[int, Any], tuple[LocalTensor, LocalTensor]] = {}
        ctx.queues.append(self)                         # the sanitizer's unfreed() check

    def alloc(self, dt: Any) -> tuple[LocalTensor, LocalTensor]:
        """The next slot's (L0A, L0B) tensors; waits on its free flag when it was used before."""
        if self._out is not None:
            raise QueueError(f"L0 ping-pong: alloc() with slot {self._out} not freed", core=self.ctx.core.name)
        i = self._slot
        if self._used[i]:
            self.ctx.emit_wait("CUBE", "MTE1", self.event_ids[i])
        self._used[i] = True
        self._out = i
        pair = self._tensors.get((i, dt))
        if pair is None:
            pair = self._tensors[(i, dt)] = (
                LocalTensor(self.ctx.core, self.a_region, self.a_addr[i], dt, self.a_bytes // dt.itemsize),
                LocalTensor(self.ctx.core, self.b_region, self.b_addr[i], dt, self.b_bytes // dt.itemsize))
        return pair

    def enque(self) -> None:
        """Both LoadData of the slot issued: MTE1 hands it to the cube."""
        assert self._out is not None
        self.ctx.emit_set("MTE1", "CUBE", self.event_ids[self._out])

    def deque(self) -> None:
        assert self._out is not None
        self.ctx.emit_wait("MTE1", "CUBE", self.event_ids[self._out])

    def free(self) -> None:
        """The Mmad of the slot issued: the cube hands both halves back to MTE1."""
        i = self._out
        assert i is not None
        # one flag releases the slot; it names its L0A half for the sanitizer's use-after-free
        # check (a QueueFreeFlag names one buffer), the L0B half is ordered by the same flag
        self.ctx.emit(QueueFreeFlag("CUBE", "MTE1", self.event_ids[i],
                                    (self.a_region.name, self.a_addr[i], self.a_bytes, f"L0 ping-pong slot {i}")))
        self._out = None
        self._slot = (i + 1) % self.depth

    def unfreed(self) -> list[tuple[str, int, int, str | None, str]]:
        """(what, address, bytes, source line, the call) of the L0A half of a slot not freed."""
        i = self._out
        return [] if i is None else [(f"L0 ping-pong slot {i}", self.a_addr[i], self.a_bytes, None, "alloc")]

    def destroy(self) -> None:
        """TPipe.Destroy(): MTE1 waits for each used slot's free flag, the buffers go back."""
        if self._out is not None:
            raise QueueError("L0 ping-pong: destroyed with a slot still allocated", core=self.ctx.core.name)
        for i, used in enumerate(self._used):
            if used:
                self.ctx.emit_wait("CUBE", "MTE1", self.event_ids[i])
        for addr in self.a_addr:
            self.a_region.free(addr)
        for addr in self.b_addr:
            self.b_region.free(addr)
        self.a_addr, self.b_addr, self._used = [], [], []


class _CubeQueues:
    """The cube core's L1 queues, its L0 ping-pong pool and its L0C queue (one set serves every
    matmul of the launch)."""

    def __init__(self, ctx: KernelContext, tiling: FlceTiling) -> None:
        # the buffers the plan checked against the memories (cube_buffers)
        item = nx.dtype(tiling.dtype).itemsize
        a1, b1, a2, b2, co1 = cube_buffers(tiling.matmuls, item, tiling.l0c_depth)
        self.a1, self.b1, self.co1 = (ctx.queue(b.name, b.depth, b.nbytes) for b in (a1, b1, co1))
        self.l0 = _L0PingPong(ctx, a2, b2)


def _aic_program(ctx: KernelContext, tiling: FlceTiling, ops: FlceOperands) -> Iterator[Any]:
    """A cube core: (memory-saving) its logits tiles; then its input_grad / weight_grad tiles.

    One base tile of C: the K loop through L1 (stepK tiles per copy) and L0 (base-K tiles),
    accumulated in L0C, written out by Fixpipe. ``a_t``/``b_t``: the operand is stored
    transposed (K x M / N x K). ``coarse`` > 1 (timing only): one set of instructions per
    ``coarse`` L1 chunks. The tiles run in this generator's own loop: a tile as a
    sub-generator cost a generator resumption more for every instruction of the cube core."""
    qs = _CubeQueues(ctx, tiling)
    coarse = tiling.coarsen if (not ctx.functional and tiling.coarsen > 1) else 1
    mine = tiling.assignment[ctx.block_idx] if ctx.block_idx < len(tiling.assignment) else ()
    dt = nx.dtype(tiling.dtype)
    # the base tiles in the order they run: (matmul, A, A transposed, B, B transposed, C, tm, tn)
    jobs: list[tuple[MatmulTiling, GmMatrix, bool, GmMatrix, bool, GmMatrix, int, int]] = []
    if tiling.mode == MEMORY_SAVING:
        assert ops.logits is not None       # the memory-saving mode keeps the logits in the workspace
        # logits = input · Wᵀ: A = input (M = BT, K = H), B = Wᵀ (W stored N x K)
        jobs += [(tiling.matmuls[0], ops.input, False, ops.weight, True, ops.logits, tm, tn)
                 for i, tm, tn in mine if i == 0]
    barrier = len(jobs)   # the cross-core hand-offs come before this job (or at the end)
    first_mm = 1 if tiling.mode == MEMORY_SAVING else 0
    for i, tm, tn in mine:
        if i == first_mm:        # input_grad = S · W: A = S (NZ, M = BT, K = V), B = W (K = V, N = H)
            jobs.append((tiling.matmuls[i], ops.s_nz, False, ops.weight, False, ops.input_grad, tm, tn))
        elif i == first_mm + 1:  # weight_grad = Sᵀ · input: A = Sᵀ (S stored K x M), B = input (K = BT)
            jobs.append((tiling.matmuls[i], ops.s_nz, True, ops.input, False, ops.weight_grad, tm, tn))
    qa1, qb1, l0, qco1 = qs.a1, qs.b1, qs.l0, qs.co1   # locals: the loop runs per L1 chunk
    core = ctx.core
    for j in range(len(jobs) + 1):
        if j == barrier:
            if tiling.mode == MEMORY_SAVING:
                # every cube core done (mode 0), then release this group's vector cores (mode 2)
                yield CrossCoreSetFlag(FLAG_LOGITS_ALL, mode=0, pipe="FIXP")
                yield CrossCoreWaitFlag(FLAG_LOGITS_ALL, mode=0, pipe="FIXP")
                yield CrossCoreSetFlag(FLAG_LOGITS_READY, mode=2, pipe="FIXP")
            yield CrossCoreWaitFlag(FLAG_S_READY, mode=2, pipe="MTE2")   # S complete in the workspace
        if j == len(jobs):
            break
        # --- one base tile ---
        mm, a, a_t, b, b_t, c, tm, tn = jobs[j]
        m0, n0 = tm * mm.base_m, tn * mm.base_n
        ml, nl = mm.m - m0, mm.n - n0
        if ml > mm.base_m:
            ml = mm.base_m
        if nl > mm.base_n:
            nl = mm.base_n
        base_k, step_k = mm.base_k, mm.step_k
        chunk_k = base_k * step_k
        core.tile = tm * mm.tiles_n + tn
        acc = qco1.alloc(nx.FP32)
        first = True
        k0 = 0
        for kk in coarse_chunks(mm.k, chunk_k, coarse):
            reps = -(-kk // chunk_k)
            a1 = qa1.alloc(dt)
            if a_t:
                yield CopyGmToL1(a1, a, k0, kk, m0, ml, repeat=reps, repeat_axis="rows")
            else:
                yield CopyGmToL1(a1, a, m0, ml, k0, kk, repeat=reps, repeat_axis="cols")
            qa1.enque(a1)
            b1 = qb1.alloc(dt)
            if b_t:
                yield CopyGmToL1(b1, b, n0, nl, k0, kk, repeat=reps, repeat_axis="cols")
            else:
                yield CopyGmToL1(b1, b, k0, kk, n0, nl, repeat=reps, repeat_axis="rows")
            qb1.enque(b1)
            a1 = qa1.deque()
            b1 = qb1.deque()
            # per L0 step, in ComputeKDB's order: one slot for both operands, A loaded then B
            # (docs/sources.md#flce-l0-pingpong)
            for s, ks, rep in _l0_steps(kk, base_k, step_k):   # the same few shapes every chunk
                a2, b2 = l0.alloc(dt)
                if a_t:
                    yield LoadData(a2, a1, kk, ml, s, ks, 0, ml, transpose=True, repeat=rep)
                else:
                    yield LoadData(a2, a1, ml, kk, 0, ml, s, ks, repeat=rep)
                if b_t:
                    yield LoadData(b2, b1, nl, kk, 0, nl, s, ks, transpose=True, repeat=rep)
                else:
                    yield LoadData(b2, b1, kk, nl, s, ks, 0, nl, repeat=rep)
                l0.enque()
                l0.deque()
                yield Mmad(acc, a2, b2, ml, ks, nl, accumulate=not first, repeat=rep)
                first = False
                l0.free()
            qa1.free(a1)
            qb1.free(b1)
            k0 += kk
        qco1.enque(acc)
        acc = qco1.deque()
        yield Fixpipe(c, m0, n0, acc, ml, nl)
        qco1.free(acc)


@functools.lru_cache(maxsize=256)
def coarse_chunks(k: int, chunk_k: int, coarse: int) -> tuple[int, ...]:
    """The K extents, in order, of the L1 chunks of a K loop of ``k`` through chunks of
    ``chunk_k``, ``coarse`` of them at a time (timing mode; exact: 1): its n chunks in
    ceil(n / coarse) coarse chunks as equal as n allows, the longer ones first, the last one
    short by what the last exact chunk is. A remainder chunk (16 chunks by 12: 12 + 4) is a
    step the exact schedule does not take: its short copy and compute moved the coarse run by
    up to 7 % (H = 4096, V = 8000, memory-saving); in equal chunks a coarse tile is a
    time-scaled image of the exact one."""
    n = ceil_div(k, chunk_k)
    q = ceil_div(n, coarse)
    size, longer = divmod(n, q)
    out = [(size + 1) * chunk_k] * longer + [size * chunk_k] * (q - longer)
    out[-1] -= n * chunk_k - k
    return tuple(out)


def l0_steps(kk: int, base_k: int, step_k: int) -> list[tuple[int, int, int]]:
    """(K offset, K extent, base-K slices) of the L0 steps of an L1 chunk (see :func:`_l0_steps`)."""
    return list(_l0_steps(kk, base_k, step_k))


@functools.lru_cache(maxsize=256)
def _l0_steps(kk: int, base_k: int, step_k: int) -> tuple[tuple[int, int, int], ...]:
    """(K offset, K extent, base-K slices) of the L0 steps of an L1 chunk of ``kk`` columns.

    An exact chunk (kk <= base_k·step_k) has one step per base-K slice. A coarse chunk (timing
    mode: several L1 chunks in one) keeps the same number of steps, each standing for several
    slices (``repeat``), so that it puts the same instructions and flags into the MTE1 and CUBE
    queues as one exact chunk and the dispatcher stalls at the same point of it: with in-order
    issue, the next chunk's MTE2 copy can only be queued once the queues have taken this chunk's
    MTE1/CUBE instructions (the vendor's MTE2-preload note describes this queue blocking). A
    coarse chunk is then a time-scaled image of an exact one. One step per coarse chunk would
    let its copy issue at once and overlap all of the compute, which the exact schedule does not.
    """
    slices = ceil_div(kk, base_k)
    # a coarse step stands for >= 2 slices (its L1 block is then read as repeats of one buffer)
    n = slices if slices <= step_k else min(step_k, slices // 2)
    steps = []
    for j in range(n):
        lo, hi = j * slices // n, (j + 1) * slices // n
        steps.append((lo * base_k, min(hi * base_k, kk) - lo * base_k, hi - lo))
    return tuple(steps)


def launch(device: Any, stream: Any, tensors: Mapping[str, GlobalTensor], tiling: FlceTiling,
           attrs: Mapping[str, Any]) -> list:
    bt, v = tiling.bt, tiling.v
    dt = nx.dtype(tiling.dtype)
    ws = tensors["workspace"]
    s_nz = GmMatrix.nz(device, ws.addr + ws.offset + tiling.ws_s_offset, dt, bt, v)
    logits = None
    if tiling.mode == MEMORY_SAVING:
        lg = GlobalTensor.contiguous(device, ws.addr + ws.offset + tiling.ws_logits_offset, nx.FP32, (bt, v))
        logits = GmMatrix.nd(lg)
        rows = lg
    else:
        rows = tensors["softmax"]
    tm = tensors["target_mask"]
    saving = tiling.mode == MEMORY_SAVING       # only this mode reads logitsMax and sumExpLogits
    ops = FlceOperands(tensors["grad"], tm, tensors["masked_target"],
                       tensors.get("logits_max") if saving else None,
                       tensors.get("sum_exp_logits") if saving else None, rows, GmMatrix.nd(tensors["input"]),
                       GmMatrix.nd(tensors["weight"]), s_nz, logits, GmMatrix.nd(tensors["input_grad"]),
                       GmMatrix.nd(tensors["weight_grad"]), tm.dtype == nx.UINT8)
    kernel = MixKernel(aic=_aic_program, aiv=_aiv_program, name="FusedLinearCrossEntropyLossGrad")
    sample = COARSE_L2_PERIOD * tiling.coarsen if (tiling.coarsen > 1 and not device.functional) else None
    return [device.launch(stream, kernel, tiling.block_dim, tiling, ops, unit="mix", core_mask=tiling.core_mask,
                          name="FusedLinearCrossEntropyLossGrad", l2_sample=sample)]


def workspace_size(tiling: FlceTiling) -> int:
    return tiling.workspace


# ---------------------------------------------------------------------------------------------
# golden: plain numpy in the reference golden's order, independent of the simulator
# ---------------------------------------------------------------------------------------------

def unpack_mask(mask: np.ndarray, bt: int) -> np.ndarray:
    """targetMask as bool [BT]: BOOL as is, UINT8 bit-packed LSB first (np.packbits little)."""
    m = np.asarray(mask)
    if m.dtype == np.bool_:
        return m.reshape(-1)[:bt]
    return np.unpackbits(m.reshape(-1).astype(np.uint8), bitorder="little")[:bt].astype(bool)


def golden(a: Mapping[str, np.ndarray], attrs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """fp32 logit gradient (softmax given, or exp(x·Wᵀ − max) / sum in fp32), the target update
    and the grad scale in fp32, cast once to the weight dtype; both matmuls in fp32 from the
    cast values; one rounding to the output dtype."""
    x, w = np.asarray(a["input"]), np.asarray(a["weight"])
    dt = x.dtype
    bt, v = x.shape[0], w.shape[0]
    grad = np.asarray(a["grad"]).astype(np.float32)
    mask = unpack_mask(a["target_mask"], bt)
    target = np.asarray(a["masked_target"]).astype(np.int64).reshape(-1)
    x32, w32 = x.astype(np.float32), w.astype(np.float32)
    if a.get("softmax") is not None:
        s = np.array(a["softmax"], dtype=np.float32)
    else:
        logits = x32 @ w32.T
        s = np.exp(logits - np.asarray(a["logits_max"], dtype=np.float32)[:, None])
        s = s / np.asarray(a["sum_exp_logits"], dtype=np.float32)[:, None]
    update = (np.float32(1.0) - mask.astype(np.float32))
    live = update != 0
    if np.any(live & ((target < 0) | (target >= v))):
        raise ValueError("maskedTarget outside [0, V) on a row whose targetMask is 0")
    rows = np.arange(bt)[live]
    s[rows, target[live]] = s[rows, target[live]] - update[live]
    s = s * grad[:, None]
    g = s.astype(w.dtype).astype(np.float32)      # cast to the weight dtype before both matmuls
    return {"input_grad": (g @ w32).astype(dt), "weight_grad": (g.T @ x32).astype(dt)}


def truth(a: Mapping[str, np.ndarray], attrs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The same formula in fp64 with no intermediate rounding (the precision-standard truth)."""
    x, w = np.asarray(a["input"]).astype(np.float64), np.asarray(a["weight"]).astype(np.float64)
    bt = x.shape[0]
    grad = np.asarray(a["grad"]).astype(np.float64)
    mask = unpack_mask(a["target_mask"], bt)
    target = np.asarray(a["masked_target"]).astype(np.int64).reshape(-1)
    if a.get("softmax") is not None:
        s = np.asarray(a["softmax"]).astype(np.float64)
    else:
        s = np.exp(x @ w.T - np.asarray(a["logits_max"], np.float64)[:, None])
        s = s / np.asarray(a["sum_exp_logits"], np.float64)[:, None]
    live = ~mask
    s[np.arange(bt)[live], target[live]] -= 1.0
    s = s * grad[:, None]
    return {"input_grad": s @ w, "weight_grad": s.T @ x}


# ---------------------------------------------------------------------------------------------
# example operands (Megatron-consistent: one vocabulary partition of a global softmax)
# ---------------------------------------------------------------------------------------------

def example(rng: np.random.Generator, spec: DeviceSpec, dtype: str = "bf16",
            shape: tuple[int, int, int] = (17, 64, 1000), mode: str = MEMORY_SAVING,
            packed_mask: bool = False) -> dict[str, Any]:
    """Operands of one call for BT, H, V = ``shape``: the partition is the whole vocabulary,
    ~20 % of the rows have their target elsewhere (targetMask 1, maskedTarget 0)."""
    bt, h, v = _bt_h_v(shape, mode)
    dt = nx.dtype(dtype).np_dtype
    x = (rng.standard_normal((bt, h)) * 0.5).astype(np.float32).astype(dt)
    w = (rng.standard_normal((v, h)) / math.sqrt(max(h, 1))).astype(np.float32).astype(dt)
    logits = x.astype(np.float64) @ w.astype(np.float64).T
    lmax = logits.max(axis=1)
    sexp = np.exp(logits - lmax[:, None]).sum(axis=1)
    target = rng.integers(0, v, size=bt)
    mask = rng.random(bt) < 0.2
    out: dict[str, Any] = {
        "grad": rng.uniform(0.5, 1.5, size=bt).astype(np.float32),
        "input": x, "weight": w,
        "target_mask": np.packbits(mask, bitorder="little") if packed_mask else mask,
        "masked_target": np.where(mask, 0, target).astype(np.int64),
        "label_smoothing": 0.0,
    }
    if mode == HIGH_PERFORMANCE:
        out["softmax"] = (np.exp(logits - lmax[:, None]) / sexp[:, None]).astype(np.float32)
    else:
        out["logits_max"] = lmax.astype(np.float32)
        out["sum_exp_logits"] = sexp.astype(np.float32)
    return out


def _bt_h_v(shape: Any, mode: str) -> tuple[int, int, int]:
    if mode not in (MEMORY_SAVING, HIGH_PERFORMANCE):
        raise ValueError(f"{NAME}: example mode {mode!r} is not one of {MEMORY_SAVING}, {HIGH_PERFORMANCE}")
    shape = tuple(shape)
    if len(shape) != 3:
        raise ValueError(f"{NAME}: the example shape is BT x H x V (tokens, hidden size, vocabulary "
                         f"partition), 3 dimensions, got {len(shape)}: {'x'.join(map(str, shape))}")
    bt, h, v = (int(s) for s in shape)
    return bt, h, v


def example_shapes(spec: DeviceSpec, dtype: str = "bf16", shape: tuple[int, int, int] = (17, 64, 1000),
                   mode: str = MEMORY_SAVING, packed_mask: bool = False) -> dict[str, Any]:
    """``example`` without data: input BTxH and weight VxH in ``dtype``; grad, the target mask
    (bool, or bit-packed uint8), int64 masked targets and the softmax statistics in fp32 —
    logits_max and sum_exp_logits (memory_saving) or the BTxV softmax (high_performance)."""
    bt, h, v = _bt_h_v(shape, mode)
    out: dict[str, Any] = {
        "grad": ((bt,), "fp32"), "input": ((bt, h), dtype), "weight": ((v, h), dtype),
        "target_mask": (((bt + 7) // 8,), "uint8") if packed_mask else ((bt,), "bool"),
        "masked_target": ((bt,), "int64"), "label_smoothing": 0.0,
    }
    if mode == HIGH_PERFORMANCE:
        out["softmax"] = ((bt, v), "fp32")
    else:
        out["logits_max"] = ((bt,), "fp32")
        out["sum_exp_logits"] = ((bt,), "fp32")
    return out


def supported_dtypes(spec: DeviceSpec) -> tuple[str, ...]:
    return ("fp16", "bf16")


def estimate(spec: DeviceSpec, descs: Mapping[str, TensorDesc | None], attrs: Mapping[str, Any],
             tiling: FlceTiling) -> Any:
    """Closed-form estimate (kernels/ascend/flce_estimate.py replays the cube programs)."""
    from opsim.kernels.ascend.flce_estimate import estimate as replay  # that module imports this one
    return replay(spec, descs, attrs, tiling)


OP = OpDef(
    name=NAME,
    inputs=("grad", "input", "weight", "target_mask", "masked_target"),
    optional=("logits_max", "sum_exp_logits", "softmax"),
    outputs=("input_grad", "weight_grad"),
    attrs={"label_smoothing": 0.0},
    products=PRODUCTS,
    validate=validate,
    plan=plan,
    launch=launch,
    golden=golden,
    example=example,
    infer=infer,
    dtypes=supported_dtypes,
    workspace=workspace_size,
    summary="vocabulary-parallel linear + cross-entropy gradient: input_grad = S·W, weight_grad = Sᵀ·input",
    estimate=estimate,
    example_shapes=example_shapes,
    tiling_keys=OVERRIDE_KEYS,
)
