"""aclnnEmbeddingDenseBackward: out[k] = sum of the grad rows i with indices[i] = k (k != paddingIdx),
times 1/count[k] when scaleGradByFreq is set.

Seed: seeds/aclnnEmbeddingDenseBackward.txt. Checks, paths and kernels:
docs/sources.md#embedding-checks, #embedding-paths,
#embedding-v2-kernel, #embedding-determinism, #embedding-ub-limit.
Numerics and determinism: docs/sources.md#ref-embedding, #scatter-add-order.

Atlas A2 (the V2 Ascend C path, docs/sources.md#embedding-paths, #embedding-a2-call-chain,
#embedding-a2-determinist, #embedding-a2-uncast-half) follows the aclnn's call chain launch by
launch, as the public ops-nn sources write it (hicann/ops-nn index/embedding_dense_grad_v2: op_api
aclnn_embedding_dense_backward.cpp and embedding_dense_grad.cpp, op_host
embedding_dense_grad_v2_tiling.cpp / _def.cpp, op_kernel embedding_dense_grad_v2.cpp / .h /
_determinist.h / _small_dim.h; the Sort of ops-math math/sort/op_api/sort.cpp and its TIK
kernel): ``CastGrad`` (fp16/bf16 grad -> fp32 when (numel(grad) + numel(out)) x 2 B < 100 MiB,
gradRow < 512 or scaleGradByFreq; the determinism setting plays no part), ``CastIndices``
(indices other than int32), ``Sort`` (the TIK Sort of the indices seen as fp32, on one core),
``ZerosLike``, ``MemSet`` (the InitValue(0) clean of the kernel's output),
``EmbeddingDenseGradV2`` and ``CastOut`` (the small-dim branch: no Sort, no ZerosLike); see
:func:`_launch_v2` for each launch and its citation. EmbeddingDenseGradV2 runs the kernel of its
tiling key: :func:`_row_kernel` (fp32 rows, determinism off), :func:`_det_kernel` (fp32 rows,
determinism on), :func:`_half_kernel` (uncast fp16/bf16 rows, determinism on or off),
:func:`_small_dim_kernel` (the small-dim branch, fp32 or uncast fp16/bf16 rows); with
scaleGradByFreq the counts and the scale run inside the same launch, the scale stage on a UB the
first stage has given back (docs/sources.md#embedding-a2-scale-stage).

Determinism (docs/sources.md#embedding-determinism): by default partial sums of one index from several cores meet in GM
through atomic adds, and the order of adds that complete in the same cycle is drawn from the
seed (simulator/atomics.py). With ``deterministic`` (fp32 rows) each core walks its slice
backwards, leaves the rows that share the previous core's last index to that core, and continues
past its own end while the index is unchanged (ContinueCompute): every output row is summed by
one core in a fixed order, whatever the seed. Uncast fp16/bf16 rows off the small-dim branch
(ProcessForHalf) write out without atomic adds, so they are deterministic either way.

Atlas training series: the real kernel is the V1 TIK ``EmbeddingDenseGrad`` whose UB plan is in
docs/sources.md#embedding-ub-limit; its loop structure is not published, so the kernels here are opsim's model of it,
sized by that plan: ``ZerosLike``, ``CastGrad`` (fp16 grad is always cast there), ``CastIndices``
(indices other than int32/int64 -> int32), ``EmbeddingDenseGrad`` (each core a contiguous range
of positions: a block of ub_indices indices and their grad rows in UB, each row atomically added
into out[index]; deterministic: each core owns a range of out rows and adds its rows in position
order), ``EmbeddingDenseGradScale`` (counts in UB, row x fp32(1/count)), ``CastOut``. The Atlas
training series has no Sort32/MrgSort (Ascend C API docs), so this path does not sort.

Data-dependent control flow: on hardware the scalar unit reads the sorted indices (or the counts)
from UB and decides which row to gather and when to flush. A kernel here is a generator that runs
ahead of simulated time, so it reads those values from GM when its block starts — an earlier
launch on the stream wrote them — and still issues the DataCopyPads that bring them to UB and the
SCALAR work that scans them, so timing and trace are those of the real kernel. In timing mode (no
data) the kernels assume row i has index i mod numWeights (every index distinct when gradRow <=
numWeights).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Generator, Iterator, Mapping, Sequence

import numpy as np

from opsim.devices.spec import DeviceSpec
from opsim.kernels.analytic import (Estimate, TileWork, cast_work, dma_cycles, drain_cycles, fresh_placement,
                              head_cycles, l2_read_rate, lockstep_copy_cycles, sequence, shared_rates,
                              vector_cycles, with_writebacks)
from opsim.kernels.ascend.elementwise import ElementwiseTiling, estimate_elementwise, plan_elementwise
from opsim.kernels.common import (ACLNN_ERR_PARAM_INVALID, OpDef, OpError, TensorDesc, check_dtype_in,
                            check_format_not_private, check_max_dims, check_not_null,
                            check_product, check_same_dtype, plain_overrides, tiling_error)
from opsim.simulator import numerics as nx
from opsim.simulator.errors import MemoryFault
from opsim.simulator.cube import CrossCoreSetFlag, CrossCoreWaitFlag
from opsim.simulator.isa import (Add, Cast, Copy, DataCopyPad, Duplicate, MrgSort, Muls, ScalarOp, sort_passes,
                           SetAtomicAdd, SetAtomicNone, Sort)
from opsim.simulator.tile import GlobalTensor, KernelContext, LocalTensor, elementwise_pipeline

NAME = "embedding_dense_backward"
API = "aclnnEmbeddingDenseBackward"
PRODUCTS = ("training", "a2")
INDEX_DTYPES = ("fp32", "fp16", "fp64", "int32", "int64", "int16", "int8", "uint8", "bool")

LIMIT_COUNT_NUM = 10               # rows summed per accumulator before a flush (docs/sources.md#embedding-v2-kernel)
INT32_MAX = 2 ** 31 - 1
INT32_INF = 2139095040             # 0x7F800000, +inf as an fp32 bit pattern (docs/sources.md#embedding-paths)
CAST_BYTES_LIMIT = 100 * 1024 * 1024   # DAV_2201 casts fp16/bf16 grad below this (docs/sources.md#embedding-paths)
CAST_ROW_LIMIT = 512                   # ... or when gradRow is below this
V2_INDEX_RESERVE = 20480           # UB the V2 kernel keeps out of maxFormerNum (docs/sources.md#embedding-v2-kernel)
V2_UB_SPARE = 96
INDEX_BATCH = V2_INDEX_RESERVE // 8    # sorted rows per UB batch: int32 key + int32 position (D)
V1_RESERVE = 16384                 # RESERVE_SIZE of the V1 UB plan (docs/sources.md#embedding-ub-limit)
V1_GRAD_BYTES = 4                  # the V1 kernel computes in fp32 (docs/sources.md#embedding-ub-limit)
# The TIK Sort that aclnnEmbeddingDenseBackward calls on Atlas A2 (l0op::Sort -> SortAiCore:
# ops-math math/sort/op_api/sort.cpp, IsAiCoreSupport: fp32 with a sort axis > 1 runs on the AI
# core on 910B). Its kernel is the TBE dynamic "Sort" TIK class (impl/dynamic/sort.py of the CANN
# built-in op library, functions sort_mini_num_new / sort_large_num_new / sort_in_ub_new /
# sort_in_gm_new / moveout_*_new / tune, "for 910B & 310B"): num_block = 4096 elements per batch.
TIK_SORT_BATCH = 4096
TIK_SORT_ALIGN = 32                # sort_size: vsort32 sorts 32 elements per repeat
SMALL_DIM_THRESH = 512             # aclnn CheckIsSmallDimMode: embeddingDim <= 512 ...
CAST_MAX_NUM = 16777216            # ... and numWeights <= 2^24 (op_api aclnn_embedding_dense_backward.cpp)
SMALL_DIM_SORT_PART = 10           # UB_SORT_PART of Tiling4SmallDim (op_host embedding_dense_grad_v2_tiling.cpp)
ZERO_BUF_BYTES = 32768             # UB zero buffer of ZerosLike (assumption)
WS_ALIGN = 512                     # alignment of workspace regions
OVERRIDE_KEYS = ("block_dim", "e_chunk", "cast_grad")


def _align(x: int, a: int) -> int:
    return -(-int(x) // a) * a


def _pad8(n: int) -> int:
    """fp32/int32 elements rounded up to a whole 32 B block."""
    return _align(n, 8)


def _slot(n: int, itemsize: int) -> int:
    return _align(max(n, 1) * itemsize, 32)


def supported_dtypes(spec: DeviceSpec) -> tuple[str, ...]:
    """grad/out: FLOAT16, FLOAT; BFLOAT16 on DAV_2201 (A2, and 910_93) (seed, docs/sources.md#embedding-checks)."""
    return ("fp32", "fp16", "bf16") if spec.series in ("a2", "a3") else ("fp32", "fp16")


# ---------------------------------------------------------------------------------------------
# attributes
# ---------------------------------------------------------------------------------------------

def _num_weights(attrs: Mapping[str, Any]) -> int:
    v = attrs.get("num_weights")
    if v is None:
        raise OpError(ACLNN_ERR_PARAM_INVALID, "numWeights is required: the first dimension of out")
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise OpError(ACLNN_ERR_PARAM_INVALID, f"numWeights is {v!r}; it must be an integer (uint64)")
    if not 0 <= v < 2 ** 64:
        raise OpError(ACLNN_ERR_PARAM_INVALID, f"numWeights is {int(v)}; it is a uint64 and must be 0..{2 ** 64 - 1}")
    return int(v)


def _padding_idx(attrs: Mapping[str, Any]) -> int:
    """paddingIdx as the kernel sees it; any negative value (or its uint64 image) means none."""
    v = attrs.get("padding_idx", -1)
    if v is None:
        return -1
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise OpError(ACLNN_ERR_PARAM_INVALID, f"paddingIdx is {v!r}; it must be an integer")
    v = int(v)
    if not -2 ** 63 <= v < 2 ** 64:
        # no C caller can pass it: wrapping it modulo 2^64 would pick a padding row silently
        raise OpError(ACLNN_ERR_PARAM_INVALID,
                      f"paddingIdx is {v}; it is a uint64, 0..{2 ** 64 - 1} (a negative int64, down to "
                      f"{-2 ** 63}, or its uint64 image means no padding row)")
    if v >= 2 ** 63:           # a negative int64 passed through the uint64 parameter
        v -= 2 ** 64
    return -1 if v < 0 else v


FLAG_PARAMS = {"scale_grad_by_freq": "scaleGradByFreq", "deterministic": "deterministic"}


def _flag(attrs: Mapping[str, Any], key: str) -> bool:
    """A C bool attribute: True/False (or 1/0); None (unset) is False. Anything else is refused
    rather than taken by its truth value ("no" would be True)."""
    v = attrs.get(key)
    if v is None:
        return False
    if isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, np.integer)) and v in (0, 1)):
        return bool(v)
    raise OpError(ACLNN_ERR_PARAM_INVALID, f"{FLAG_PARAMS.get(key, key)} is {v!r}; it must be True or False")


# ---------------------------------------------------------------------------------------------
# the UB-derived limit of the Atlas training series (docs/sources.md#embedding-ub-limit)
# ---------------------------------------------------------------------------------------------

def ub_budget(spec: DeviceSpec) -> int:
    """UB bytes this operator's kernel plans with: ``[kernels.embedding_dense_backward] ub_budget``
    of the device file (the V1 kernel's 192 KiB on the Atlas training series), else the UB size."""
    table = spec.kernels.get(NAME, {})
    assert spec.ub is not None          # an Ascend spec: the UB is required (devices/spec.py)
    return int(table.get("ub_budget", spec.ub.size))


def counts_size(num_weights: int, core_num: int) -> int:
    """countsSize = numWeights / coreNum + numWeights % coreNum (seed, integer division).

    The V1 source computes it from core_used = ceil(numWeights / ceil(numWeights / coreNum))
    instead (docs/sources.md#embedding-ub-limit), which can be smaller; the seed's formula is the documented contract
    and is the one used here.
    """
    return num_weights // core_num + num_weights % core_num


def _index_bytes(index_dtype: Any) -> int:
    # V1 keeps int64 indices and casts every other dtype to int32 (docs/sources.md#embedding-paths)
    return 8 if nx.dtype(index_dtype) == nx.INT64 else 4


def scale_limit(spec: DeviceSpec, num_weights: int, index_dtype: Any) -> int:
    """The largest embeddingDim the scaleGradByFreq path accepts (it must be strictly below the
    bound): ``E < (budget - 16416 - countsSize*b) / (4n + 4)`` with b = index bytes (4 or 8),
    n = 32/b indices per 32 B block, budget = :func:`ub_budget`, coreNum = AI cores.

    16416 = RESERVE_SIZE 16384 + one 32 B block of indices; 4n + 4 = one fp32 grad row per index
    of the block plus the extra row buffer (docs/sources.md#embedding-ub-limit). With the 196608 B budget this is the
    seed's ``(180192 - countsSize*4)/36`` (int32) and ``(180192 - countsSize*8)/20`` (int64).
    validate() enforces it on the Atlas training series only (where the seed documents it); on
    other devices the function evaluates the same formula with their numbers, for what-if studies.

    int64 indices admit a larger E than int32 (8609 against 4894 at countsSize 1000) although
    they are twice as wide: the smallest plan is one 32 B block of indices with a row for each,
    and that block holds 4 int64 indices but 8 int32 ones. This is the real kernel's sizing and
    its documented limits (docs/sources.md#embedding-ub-limit), not a model error; from
    countsSize ~13861 on the wider counts make int32's bound the larger.
    """
    b = _index_bytes(index_dtype)
    avail = ub_budget(spec) - V1_RESERVE - 32 - counts_size(num_weights, spec.cores.aic) * b
    per_e = V1_GRAD_BYTES * (32 // b) + V1_GRAD_BYTES
    return -(-avail // per_e) - 1      # largest E with E * per_e < avail


# ---------------------------------------------------------------------------------------------
# validate
# ---------------------------------------------------------------------------------------------

def validate(spec: DeviceSpec, t: Mapping[str, TensorDesc | None], attrs: Mapping[str, Any]) -> dict[str, TensorDesc]:
    """The documented checks in the documented order (docs/sources.md#embedding-checks), product support, then the
    Atlas training series' scaleGradByFreq limit (seed)."""
    g, idx, out = t.get("grad"), t.get("indices"), t.get("out")
    check_not_null(grad=g, indices=idx, out=out)
    assert g is not None and idx is not None and out is not None   # checked just above
    nw = _num_weights(attrs)
    _padding_idx(attrs)
    _flag(attrs, "scale_grad_by_freq")
    _flag(attrs, "deterministic")
    check_dtype_in(supported_dtypes(spec), spec.product, grad=g)
    check_dtype_in(INDEX_DTYPES, spec.product, indices=idx)
    check_dtype_in(supported_dtypes(spec), spec.product, out=out)
    check_max_dims(grad=g, indices=idx, out=out)
    if g.ndim < 2:
        raise OpError(ACLNN_ERR_PARAM_INVALID,
                      f"grad has {g.ndim} dimension(s) (shape {list(g.shape)}); it must have 2 to 8")
    if idx.ndim < 1:
        raise OpError(ACLNN_ERR_PARAM_INVALID, "indices has 0 dimensions; it must have 1 to 8")
    emb = int(g.shape[-1])
    rows = int(np.prod(g.shape[:-1], dtype=np.int64))
    if emb != 0 and rows != idx.numel:
        raise OpError(ACLNN_ERR_PARAM_INVALID,
                      f"grad shape {list(g.shape)} is not match with indices shape {list(idx.shape)}: "
                      f"grad has {rows} rows once its dimensions except the last are merged, indices "
                      f"has {idx.numel} elements")
    if out.ndim != 2 or tuple(out.shape) != (nw, emb):
        raise OpError(ACLNN_ERR_PARAM_INVALID,
                      f"out shape {list(out.shape)} must be 2-D [numWeights, embeddingDim] = [{nw}, {emb}]")
    check_same_dtype("grad", g, out=out)
    # private formats only: the plain ones torch_npu tags 3-D/4-D/5-D tensors with (NCL, NCHW,
    # NCDHW) are row-major like ND (docs/sources.md#embedding-checks)
    check_format_not_private(grad=g, indices=idx, out=out)
    check_product(spec, API, PRODUCTS)
    if spec.series == "training" and _flag(attrs, "scale_grad_by_freq") and emb > 0:
        limit = scale_limit(spec, nw, idx.dtype)
        if emb > limit:
            b = _index_bytes(idx.dtype)
            cores = spec.cores.aic
            cs = counts_size(nw, cores)
            budget = ub_budget(spec)
            avail = budget - V1_RESERVE - 32 - cs * b
            per_e = V1_GRAD_BYTES * (32 // b) + V1_GRAD_BYTES
            raise OpError(ACLNN_ERR_PARAM_INVALID,
                          f"embeddingDim (grad's last dimension) {emb} is out of range for scaleGradByFreq on "
                          f"{spec.product} with {'int64' if b == 8 else 'int32'} indices: it must be < "
                          f"({budget - V1_RESERVE - 32} - countsSize * {b}) / {per_e} = {avail}/{per_e} = "
                          f"{avail / per_e:.3f} (UB budget {budget} B, countsSize = numWeights/coreNum + "
                          f"numWeights%coreNum = {nw}//{cores} + {nw}%{cores} = {cs}); the largest allowed "
                          f"is {max(limit, 0)}")
    return {"out": TensorDesc((nw, emb), g.dtype)}


def is_empty(t: Mapping[str, TensorDesc | None]) -> bool:
    """Never short-cut: an empty grad or indices still zero-fills out (docs/sources.md#embedding-checks), which the
    launch does."""
    return False


# ---------------------------------------------------------------------------------------------
# plan
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EmbeddingTiling:
    """The launches of one call and their sizes (a pure function of spec, shapes and attributes)."""

    path: str                 # "v2" (Atlas A2), "v1" (Atlas training series), "empty"
    n_rows: int               # gradRow = numel(indices)
    emb_dim: int              # embeddingDim = grad's last dimension
    num_weights: int
    padding_idx: int          # -1: none
    scale: bool
    deterministic: bool
    grad_dtype: str
    index_dtype: str
    cast_grad: bool           # the kernel reads an fp32 copy of grad from the workspace
    acc_dtype: str            # dtype the rows are summed into in GM
    block_dim: int            # blocks of the accumulation kernel
    e_chunk: int              # embeddingDim elements per UB pass (maxFormerNum on V2)
    ub_bytes: int             # UB the accumulation kernel allocates per core
    ub_budget: int
    zero_block_dim: int = 1
    # V2 sort
    sort_tile: int = 0        # indices sorted per UB tile
    sort_runs: int = 0        # V2: batches of the TIK Sort (TIK_SORT_BATCH indices each)
    merge_passes: int = 0     # V2: vmrgsort steps of the TIK Sort's sort_in_gm (B(B-1)/2 for B batches)
    merge_block: int = 0      # merged elements per MrgSort
    row_kernel: bool = False  # V2 fp32 non-deterministic: the ops-nn per-row kernel (embedding_dense_grad_v2.h)
    small_dim: bool = False   # aclnn's small-dim branch runs (CheckIsSmallDimMode)
    small_dim_kernel: bool = False   # ... the small-dim kernel (fp32 or uncast fp16/bf16 rows): see _launch_v2
    det_kernel: bool = False  # V2 fp32 rows, determinism on: EmbeddingDenseGradV2DeterministKernel
    half_kernel: bool = False  # V2 uncast fp16/bf16 rows off the small-dim branch: ProcessForHalf
    tiling_key: int = -1      # V2: the kernel's tiling key (0/1, 10/11, 100/101)
    sd_max_rows: int = 0      # small-dim maxRowInUb (rows per UB tile)
    index_cast: bool = False  # V2: l0op::Cast of the indices to int32 before the Sort
    # V1
    ub_indices: int = 0       # indices (and grad rows) per UB block
    counts_size: int = 0
    rows_per_owner: int = 0   # index_not_last_core = ceil(numWeights / coreNum)
    owners: int = 0           # core_used
    scale_block_dim: int = 0
    workspace: int = 0
    layout: tuple[tuple[str, int, int], ...] = ()      # (region, byte offset, bytes)
    cast_grad_tiling: ElementwiseTiling | None = None
    cast_index_tiling: ElementwiseTiling | None = None
    cast_out_tiling: ElementwiseTiling | None = None

    def region(self, name: str) -> tuple[int, int] | None:
        for n, off, nbytes in self.layout:
            if n == name:
                return off, nbytes
        return None


def _check_overrides(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    ov = plain_overrides(overrides)
    unknown = set(ov) - set(OVERRIDE_KEYS)
    if unknown:
        raise OpError(ACLNN_ERR_PARAM_INVALID,
                      f"unknown tiling override(s) {sorted(unknown)}; allowed: {', '.join(OVERRIDE_KEYS)}")
    for key in ("block_dim", "e_chunk"):
        if key in ov and (isinstance(ov[key], bool) or not isinstance(ov[key], int) or ov[key] < 1):
            raise tiling_error(f"{key} {ov[key]!r} must be a positive integer")
    if "cast_grad" in ov:
        if not isinstance(ov["cast_grad"], (bool, np.bool_)):
            raise tiling_error(f"cast_grad {ov['cast_grad']!r} must be True or False")
        # a numpy bool (a mask's element) as the bool it equals, in the tiling and the record alike
        ov["cast_grad"] = bool(ov["cast_grad"])
    return ov


def _layout(parts: Sequence[tuple[str, int]]) -> tuple[tuple[tuple[str, int, int], ...], int]:
    out, off = [], 0
    for name, nbytes in parts:
        if nbytes > 0:
            out.append((name, off, int(nbytes)))
            off = _align(off + nbytes, WS_ALIGN)
    return tuple(out), off


def _zero_block_dim(spec: DeviceSpec, nbytes: int) -> int:
    return max(1, min(spec.vector_cores, -(-nbytes // ZERO_BUF_BYTES)))


def _tik_sort_ub(batch: int) -> int:
    """UB the TIK Sort's sort_in_gm step holds: two ping-pong buffers of two batches of
    (key, position) = 2 x 2 x batch x 8 B (sort_in_gm_new's input_ub of num_per_batch x 2 x 2 words,
    doubled); the in-UB sort of one batch needs less (keys, scratch, output)."""
    return 2 * 2 * batch * 8 + batch * 4


def plan(spec: DeviceSpec, t: Mapping[str, TensorDesc], attrs: Mapping[str, Any],
         overrides: Mapping[str, Any] | None = None) -> EmbeddingTiling:
    """Tiling of the whole call. Overrides: ``block_dim`` (accumulation kernel), ``e_chunk``
    (embeddingDim elements per UB pass), ``cast_grad`` (A2, fp16/bf16 grad: force the fp32 copy
    on or off). A tiling that does not fit the UB is refused with 561002 and the numbers."""
    ov = _check_overrides(overrides)
    g, idx = t["grad"], t["indices"]
    nw = _num_weights(attrs)
    pad = _padding_idx(attrs)
    scale = _flag(attrs, "scale_grad_by_freq")
    det = _flag(attrs, "deterministic")
    emb = int(g.shape[-1])
    n_rows = int(idx.numel)
    common: dict[str, Any] = dict(n_rows=n_rows, emb_dim=emb, num_weights=nw, padding_idx=pad, scale=scale,
                  deterministic=det, grad_dtype=g.dtype.name, index_dtype=idx.dtype.name,
                  ub_budget=ub_budget(spec))
    out_bytes = nw * emb * g.dtype.itemsize
    if n_rows == 0 or emb == 0 or nw == 0:
        return EmbeddingTiling(path="empty", cast_grad=False, acc_dtype=g.dtype.name, block_dim=0,
                               e_chunk=0, ub_bytes=0, zero_block_dim=_zero_block_dim(spec, out_bytes),
                               **common)
    if spec.series == "training":
        return _fits_ub(spec, _plan_v1(spec, g, idx, nw, scale, det, ov, common))
    return _plan_v2(spec, g, idx, nw, scale, det, ov, common)


def _plan_v2(spec: DeviceSpec, g: TensorDesc, idx: TensorDesc, nw: int, scale: bool, det: bool,
             ov: Mapping[str, Any], common: dict) -> EmbeddingTiling:
    n_rows, emb = common["n_rows"], common["emb_dim"]
    if nw > INT32_INF or n_rows > INT32_INF:
        raise tiling_error(
            f"numWeights {nw} / gradRow {n_rows} exceeds INT32_INF {INT32_INF} (0x7F800000, +inf as a float32 "
            f"bit pattern): the V2 kernel sorts int32 indices as float32 bit patterns, which orders them "
            f"correctly only below that value; opsim models only that path")
    half = g.dtype in (nx.FP16, nx.BF16)
    # IsNeedCast of the op_api: the determinism setting plays no part (docs/sources.md#embedding-a2-uncast-half)
    cast = half and ((g.numel + nw * emb) * 2 < CAST_BYTES_LIMIT or n_rows < CAST_ROW_LIMIT or scale)
    if "cast_grad" in ov:
        if not half:
            raise tiling_error(f"cast_grad applies to fp16/bf16 grad; grad is {g.dtype}")
        if scale and not ov["cast_grad"]:
            raise tiling_error("cast_grad False with scaleGradByFreq: the aclnn always casts fp16/bf16 grad "
                               "to fp32 with scaleGradByFreq (IsNeedCast, docs/sources.md#embedding-paths)")
        cast = ov["cast_grad"]
    kdt = nx.FP32 if (cast or not half) else g.dtype
    k = 3 if kdt == nx.FP32 else 4
    assert spec.ub is not None          # an Ascend spec: the UB is required (devices/spec.py)
    ub = spec.ub.size
    max_former = ((ub - V2_INDEX_RESERVE - V2_UB_SPARE) // (64 * k)) * 16
    e_chunk = ov.get("e_chunk", min(emb, max_former))
    if e_chunk > max_former:
        raise tiling_error(f"e_chunk {e_chunk} does not fit the UB: maxFormerNum = ((UB {ub} - 20480 - 96) "
                           f"/ (64 x {k})) x 16 = {max_former} elements for {kdt} rows")
    e_chunk = min(e_chunk, emb)
    if scale and scale_ub_bytes(e_chunk) > ub:
        # the published scale kernel (a fresh TPipe after the accumulation kernel) asks InitBuffer
        # for more than the UB: opsim refuses the call up front rather than fail mid-run or run a
        # kernel the vendor does not have (docs/sources.md#embedding-a2-scale-stage)
        fit = scale_chunk_limit(ub)
        raise tiling_error(
            f"scaleGradByFreq with grad's embedding dim {emb}: the scale stage "
            f"(EmbeddingDenseGradV2ScaleKernel) holds 4 buffers of formerEmbeddingDim = {e_chunk} fp32 "
            f"aligned to 32 B plus 64 B = {scale_ub_bytes(e_chunk)} B of UB, the UB has {ub} B on {spec.name}; "
            f"allowed: embedding dim at most {fit} (or tiling override e_chunk at most {fit})")
    cores = spec.vector_cores
    block_dim = min(cores, n_rows)
    if scale:
        block_dim = min(block_dim, nw)
    block_dim = max(1, min(ov.get("block_dim", block_dim), n_rows))
    if kdt == nx.FP32:
        ub_bytes = V2_INDEX_RESERVE + 3 * _slot(e_chunk, 4)
    else:
        ub_bytes = V2_INDEX_RESERVE + 2 * _slot(e_chunk, kdt.itemsize) + 3 * _slot(e_chunk, 4)
    # the TIK Sort (TIK_SORT_BATCH): one batch sorted in UB when gradRow <= 4096, else B batches
    # sorted in UB and merged pairwise through GM (sort_in_gm_new: B(B-1)/2 vmrgsort steps)
    sort_tile = _align(n_rows, TIK_SORT_ALIGN) if n_rows <= TIK_SORT_BATCH else TIK_SORT_BATCH
    runs = -(-n_rows // TIK_SORT_BATCH)
    passes = runs * (runs - 1) // 2
    if _tik_sort_ub(sort_tile) > ub:
        raise tiling_error(f"the TIK Sort of the indices needs {_tik_sort_ub(sort_tile)} B of UB for a batch of "
                           f"{sort_tile} elements; the UB has {ub} B")
    merge_block = TIK_SORT_BATCH
    acc_is_ws = cast and g.dtype != nx.FP32
    acc_dtype = "fp32" if (cast or not half) else g.dtype.name
    # the kernel the tiling key selects (docs/sources.md#embedding-a2-determinist,
    # #embedding-a2-uncast-half): isDeterministMode_ = determinism on AND 4-byte rows, so uncast
    # fp16/bf16 rows never take the deterministic kernel; the small-dim branch (CheckIsSmallDimMode
    # in the op_api, CheckIsSmallDim in the tiling) needs determinism off, for any row dtype;
    # key = scaleGradByFreq + 10 x deterministic + 100 x small-dim
    det_kernel = det and kdt == nx.FP32
    small_dim = (not det) and emb <= SMALL_DIM_THRESH and nw <= CAST_MAX_NUM
    sd_kernel = small_dim
    row_kernel = kdt == nx.FP32 and not det_kernel and not sd_kernel
    half_kernel = kdt != nx.FP32 and not sd_kernel
    tiling_key = (100 if sd_kernel else 10 if det_kernel else 0) + (1 if scale else 0)
    # SyncAll (in the small-dim and uncast-half kernels, and ProcessAndScale with
    # scaleGradByFreq) waits for every block of the launch, so the blocks must all be resident:
    # more blocks than vector cores would wait for a core forever (a deadlock on the device too).
    # The default plan never asks for more; a block_dim override may. The fp32 row and
    # deterministic kernels without scale have no SyncAll: their blocks may run in waves.
    sync_all = sd_kernel or half_kernel or scale
    if sync_all and block_dim > cores:
        raise tiling_error(f"block_dim {block_dim} exceeds the {cores} vector cores of {spec.name}: this "
                           f"kernel (tiling key {tiling_key}) synchronises all its blocks (SyncAll), so every "
                           f"block must run at once; block_dim must be at most {cores}")
    sd_rows = small_dim_max_rows(ub, emb, kdt.itemsize) if sd_kernel else 0
    if sd_kernel and sd_rows < 1:
        raise tiling_error(f"the small-dim kernel fits no row of embeddingDim {emb} in the UB ({ub} B)")
    index_cast = idx.dtype != nx.INT32
    span = runs * TIK_SORT_BATCH if runs > 1 else sort_tile
    srt = 0 if sd_kernel else 1                           # the small-dim branch has no Sort launch
    layout, ws = _layout([
        ("grad32", n_rows * emb * 4 if cast else 0),
        ("acc32", nw * emb * 4 if acc_is_ws else 0),
        ("idx32", n_rows * 4 if index_cast else 0),
        ("keys0", n_rows * 4 * srt), ("pos0", n_rows * 4 * srt),
        # TIK Sort workspaces: sorted batches (tmp_workspace), data_a_list, the aligned outputs
        ("sws_k", span * 4 * srt if runs > 1 else 0), ("sws_p", span * 4 * srt if runs > 1 else 0),
        ("alist", sort_tile * 8 * srt), ("algk", span * 4 * srt), ("algp", span * 4 * srt),
        ("counts", nw * 4 if scale else 0),
        # uncast fp16/bf16 rows (CalcWorkSpaceSize): the small-dim kernel's fp32 outCasted copy of
        # out; ProcessForHalf's outIndex (2 per core) and outStage (2 fp32 rows per core)
        ("outcast", nw * emb * 4 if sd_kernel and kdt != nx.FP32 else 0),
        ("stage_idx", block_dim * 2 * 4 if half_kernel else 0),
        ("stage", _pad8(e_chunk * block_dim * 2) * 4 if half_kernel else 0),
    ])
    # the counts of scaleGradByFreq are zeroed inside the kernel's launch (InitWorkspace)
    zero_bytes = nw * emb * nx.dtype(acc_dtype).itemsize
    if det_kernel:      # InitBuffers: index, position, tmp (32 B each), grad row and two accumulators
        ub_bytes = 3 * 32 + 3 * _slot(e_chunk, 4)
    elif half_kernel:   # the same queues with fp32 rows 64 B aligned, and the UB cache
        ub_bytes = 3 * 32 + 32 + 4 * _slot(_align(e_chunk, 16), 4)
    if sd_kernel:                                         # InitBuffers of the small-dim kernel
        rows = min(sd_rows, max(n_rows // block_dim, n_rows - (n_rows // block_dim) * (block_dim - 1)))
        ia, ga = _align(rows, 32), _align(_align(emb, 32 // kdt.itemsize) * rows, 16)
        ub_bytes = ia * 4 * 3 + ia * 12 * 2 + _slot(ga, 4) + _slot(emb, 4)
    return _fits_ub(spec, EmbeddingTiling(
        path="v2", cast_grad=cast, acc_dtype=acc_dtype, block_dim=block_dim, e_chunk=e_chunk,
        ub_bytes=ub_bytes, zero_block_dim=_zero_block_dim(spec, zero_bytes), sort_tile=sort_tile,
        sort_runs=runs, merge_passes=passes, merge_block=merge_block,
        scale_block_dim=block_dim, workspace=ws,
        layout=layout, row_kernel=row_kernel, small_dim=small_dim, index_cast=index_cast,
        small_dim_kernel=sd_kernel, sd_max_rows=sd_rows, det_kernel=det_kernel, half_kernel=half_kernel,
        tiling_key=tiling_key,
        cast_index_tiling=(plan_elementwise(spec, n_rows, n_inputs=1, in_itemsize=idx.dtype.itemsize,
                                            out_itemsize=4, calc_bytes=0) if index_cast else None),
        cast_grad_tiling=(plan_elementwise(spec, n_rows * emb, n_inputs=1, in_itemsize=2, out_itemsize=4,
                                           calc_bytes=0) if cast else None),
        cast_out_tiling=(plan_elementwise(spec, nw * emb, n_inputs=1, in_itemsize=4, out_itemsize=2,
                                          calc_bytes=0) if acc_is_ws else None),
        **common))


def _fits_ub(spec: DeviceSpec, tiling: EmbeddingTiling) -> EmbeddingTiling:
    """Refuse a plan whose UB buffers exceed the core's UB (e.g. a what-if budget above it)."""
    assert spec.ub is not None          # an Ascend spec: the UB is required (devices/spec.py)
    if tiling.ub_bytes > spec.ub.size:
        raise tiling_error(
            f"the embedding kernel's UB plan needs {tiling.ub_bytes} B (budget {tiling.ub_budget} B from "
            f"kernels.embedding_dense_backward.ub_budget), the UB has {spec.ub.size} B on {spec.name}")
    return tiling

def _plan_v1(spec: DeviceSpec, g: TensorDesc, idx: TensorDesc, nw: int, scale: bool, det: bool,
             ov: Mapping[str, Any], common: dict) -> EmbeddingTiling:
    n_rows, emb = common["n_rows"], common["emb_dim"]
    if "cast_grad" in ov:
        raise tiling_error("cast_grad applies to the Atlas A2 path; the Atlas training series always "
                           "computes in fp32 (docs/sources.md#embedding-paths)")
    cast = g.dtype != nx.FP32               # "on other non-950 platforms grad is always cast"
    b = _index_bytes(idx.dtype)
    n = 32 // b
    budget = ub_budget(spec)
    core_num = spec.cores.aic
    cs = counts_size(nw, core_num) if scale else 0
    if scale:
        e_chunk = emb                       # a whole row stays in UB: hence the documented limit
        if "e_chunk" in ov and ov["e_chunk"] != emb:
            raise tiling_error(f"e_chunk {ov['e_chunk']}: the scaleGradByFreq path keeps whole rows of "
                               f"{emb} elements in UB")
        row = 4 * _pad8(emb)
        ub_indices = (budget - V1_RESERVE - cs * b - row) // (row + b) // n * n
        # validate() accepted E by the seed's formula on unpadded rows; rows padded to 32 B can
        # overshoot it by < 36 x 7 B, which the 16 KiB reserve absorbs
        ub_indices = max(ub_indices, n)
    else:
        ec_max = ((budget - V1_RESERVE) // n - b) // 4 // 8 * 8
        e_chunk = ov.get("e_chunk", min(emb, ec_max))
        if e_chunk > ec_max:
            raise tiling_error(f"e_chunk {e_chunk} does not fit the UB budget: {n} indices of {b} B and "
                               f"their rows need {n} x ({e_chunk} x 4 + {b}) B of {budget} - {V1_RESERVE} B; "
                               f"at most {ec_max}")
        e_chunk = min(e_chunk, emb)
        ub_indices = (budget - V1_RESERVE) // (4 * _pad8(e_chunk) + b) // n * n
    ub_indices = max(n, min(ub_indices, _align(n_rows, n)))
    ub_bytes = ub_indices * (4 * _pad8(e_chunk) + b) + (cs * b + 4 * _pad8(emb) if scale else 0)
    per_owner = -(-nw // core_num)
    owners = -(-nw // per_owner)
    if det:
        # owner-computes: each block sums the rows of its own range of output rows, so the block
        # count is the owner count; a block_dim override asking for another was ignored in silence
        if "block_dim" in ov and ov["block_dim"] != owners:
            raise tiling_error(f"block_dim {ov['block_dim']}: the deterministic kernel of {spec.name} runs one "
                               f"block per owner of output rows, ceil(num_weights {nw} / {per_owner} rows per "
                               f"owner) = {owners}; allowed: block_dim {owners} (or no block_dim override)")
        block_dim = owners
    else:
        block_dim = max(1, min(ov.get("block_dim", min(spec.vector_cores, n_rows)), n_rows))
    index_cast = idx.dtype not in (nx.INT32, nx.INT64)
    acc_is_ws = cast
    layout, ws = _layout([
        ("grad32", n_rows * emb * 4 if cast else 0),
        ("acc32", nw * emb * 4 if acc_is_ws else 0),
        ("idx32", n_rows * 4 if index_cast else 0),
    ])
    return EmbeddingTiling(
        path="v1", cast_grad=cast, acc_dtype="fp32", block_dim=block_dim, e_chunk=e_chunk,
        ub_bytes=ub_bytes, zero_block_dim=_zero_block_dim(spec, nw * emb * 4),
        ub_indices=ub_indices, counts_size=cs, rows_per_owner=per_owner, owners=owners,
        scale_block_dim=owners, workspace=ws, layout=layout,
        cast_grad_tiling=(plan_elementwise(spec, n_rows * emb, n_inputs=1, in_itemsize=2, out_itemsize=4,
                                           calc_bytes=0) if cast else None),
        cast_index_tiling=(plan_elementwise(spec, n_rows, n_inputs=1, in_itemsize=idx.dtype.itemsize,
                                            out_itemsize=4, calc_bytes=0) if index_cast else None),
        cast_out_tiling=(plan_elementwise(spec, nw * emb, n_inputs=1, in_itemsize=4, out_itemsize=2,
                                          calc_bytes=0) if acc_is_ws else None),
        **common)


# ---------------------------------------------------------------------------------------------
# index checks (what would make the real kernel write outside out)
# ---------------------------------------------------------------------------------------------

def index_values(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int64 row each index selects, mask of indices that select a row at all).

    Float indices are cast to int32 by truncation (assumption: CANN's float -> int32 Cast rounds
    toward zero, as C and torch do); NaN and ±inf select nothing sensible and are flagged. Bool
    indices are 0/1.
    """
    a = np.asarray(indices).reshape(-1)
    if a.dtype.kind == "f" or a.dtype == nx.BF16.np_dtype:
        f = a.astype(np.float64)
        ok = np.isfinite(f)
        with np.errstate(invalid="ignore"):
            v = np.where(ok, np.trunc(np.where(ok, f, 0.0)), 0.0)
        big = np.abs(v) > 2.0 ** 62
        return np.where(big, -1, v).astype(np.int64), ok & ~big
    return a.astype(np.int64), np.ones(a.shape, dtype=bool)


def first_bad_index(indices: np.ndarray, num_weights: int, padding_idx: int) -> int:
    """Flat position of the first index outside [0, numWeights) that is not paddingIdx, or -1."""
    v, ok = index_values(indices)
    # an index equal to paddingIdx is skipped by the kernel, provided it survives the int32 cast
    is_pad = (v == padding_idx) if 0 <= padding_idx <= INT32_MAX else np.zeros(v.shape, bool)
    bad = ~ok | (((v < 0) | (v >= num_weights)) & ~is_pad)
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else -1


def _bad_index_fault(indices: np.ndarray, shape: Sequence[int], pos: int, num_weights: int,
                     padding_idx: int, out_addr: int, row_bytes: int) -> MemoryFault:
    raw = np.asarray(indices).reshape(-1)[pos].item()
    v, ok = index_values(np.asarray([raw]))
    where = np.unravel_index(pos, tuple(shape)) if len(shape) else ()
    pad = f"paddingIdx {padding_idx}" if padding_idx >= 0 else "no paddingIdx"
    if ok[0]:
        row = int(v[0])
        addr = out_addr + row * row_bytes
        what = (f"the kernel would add grad row {pos} into out row {row}, "
                f"{'before' if row < 0 else 'beyond'} out")
    else:
        addr, what = None, "it selects no row"
    return MemoryFault(f"indices[{', '.join(str(int(i)) for i in where)}] (flat position {pos}) = {raw!r} is "
                       f"outside [0, numWeights={num_weights}) and is not the padding index ({pad}): {what}; "
                       f"nothing was written", address=addr, instruction=API)


def check_data(device: Any, tensors: Mapping[str, GlobalTensor], attrs: Mapping[str, Any]) -> None:
    """Refuse a call whose indices would make the kernel write outside out, naming the first
    offending position (MemoryFault; 361001 through aclnn), before anything is launched."""
    idx, out = tensors.get("indices"), tensors.get("out")
    if idx is None or out is None or idx.numel == 0 or not device.functional:
        return
    nw, pad = _num_weights(attrs), _padding_idx(attrs)
    values = idx[0:idx.numel].read(idx.numel)
    pos = first_bad_index(values, nw, pad)
    if pos >= 0:
        emb = out.shape[-1] if out.shape else 0
        raise _bad_index_fault(values, idx.shape, pos, nw, pad, out.addr, emb * out.dtype.itemsize)


# ---------------------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------------------

def _load_and_scan_indices(ctx: KernelContext, ibuf: LocalTensor, idx: GlobalTensor, s: int, bn: int,
                           to_scalar: int, scanned: int, owe_scan: bool, label: str) -> Iterator[Any]:
    """MTE2 loads indices [s, s+bn) into UB and the scalar unit scans them; the next load into
    the same buffer waits for the scan (``owe_scan``: a previous scan is still pending)."""
    if owe_scan:
        ctx.emit_wait("SCALAR", "MTE2", scanned)
    yield DataCopyPad(ibuf[0:bn], idx[s:s + bn], bn)
    ctx.emit_set("MTE2", "SCALAR", to_scalar)
    ctx.emit_wait("MTE2", "SCALAR", to_scalar)
    yield ScalarOp(bn, label)
    ctx.emit_set("SCALAR", "MTE2", scanned)


def _slice(total: int, parts: int, i: int) -> tuple[int, int]:
    """Contiguous share i of ``total``: total/parts each, one more for the first total%parts."""
    q, r = divmod(total, parts)
    lo = i * q + min(i, r)
    return lo, lo + q + (1 if i < r else 0)


def _peek(t: GlobalTensor, start: int, count: int) -> np.ndarray:
    """Values an earlier launch left in GM, as the scalar unit reads them (functional runs)."""
    if count <= 0:
        return np.zeros(0, t.dtype.np_dtype)
    return np.array(t[start:start + count].read(count), copy=True)


def _assumed_indices(n_rows: int, num_weights: int) -> np.ndarray:
    """Timing mode has no data: row i is assumed to have index i mod numWeights."""
    return np.arange(n_rows, dtype=np.int64) % max(num_weights, 1)


@lru_cache(maxsize=4)
def _assumed_sorted(n_rows: int, num_weights: int) -> tuple[np.ndarray, np.ndarray]:
    # shared by the blocks of a timing run (read-only arrays; a pure function of its arguments)
    v = _assumed_indices(n_rows, num_weights)
    order = np.argsort(v, kind="stable")
    keys = v[order]
    keys.flags.writeable = False
    order.flags.writeable = False
    return keys, order


def _sorted_rows(ctx: KernelContext, tiling: EmbeddingTiling, keys: GlobalTensor, pos: GlobalTensor,
                 lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted keys and positions [lo, hi): from GM, or the assumed pattern in timing mode."""
    if ctx.functional:
        return _peek(keys, lo, hi - lo).astype(np.int64), _peek(pos, lo, hi - lo).astype(np.int64)
    k, p = _assumed_sorted(tiling.n_rows, tiling.num_weights)
    return k[lo:hi], p[lo:hi]


class _ScalarFeed:
    """Brings rows [lo, hi) of GM arrays (sorted keys and positions, or counts) to UB in batches
    of INDEX_BATCH, handing each batch to the SCALAR pipe, which scans it (MTE2 -> SCALAR flag)
    and releases the buffer for the next batch (SCALAR -> MTE2 flag)."""

    def __init__(self, ctx: KernelContext, gms: Sequence[GlobalTensor], lo: int, hi: int,
                 label: str, batch: int = INDEX_BATCH) -> None:
        self.ctx, self.gms, self.lo, self.hi, self.label, self.batch = ctx, gms, lo, hi, label, batch
        self.bufs = [ctx.tbuf(batch * g.dtype.itemsize, g.dtype) for g in gms]
        self.to_scalar = ctx.next_event_id("MTE2", "SCALAR")
        self.released = ctx.next_event_id("SCALAR", "MTE2")
        self.loaded = -1
        self.owe = False

    def reset(self) -> None:
        self.loaded = -1

    def need(self, j: int) -> Iterator[Any]:
        """Make row j's batch resident (yields its loads and scan when it is not)."""
        b = (j - self.lo) // self.batch
        if b == self.loaded:
            return
        ctx = self.ctx
        if self.owe:
            ctx.emit_wait("SCALAR", "MTE2", self.released)
        s = self.lo + b * self.batch
        n = min(self.batch, self.hi - s)
        for buf, g in zip(self.bufs, self.gms):
            yield DataCopyPad(buf, g[s:s + n], n)
        ctx.emit_set("MTE2", "SCALAR", self.to_scalar)
        ctx.emit_wait("MTE2", "SCALAR", self.to_scalar)
        yield ScalarOp(n, self.label)
        ctx.emit_set("SCALAR", "MTE2", self.released)
        self.owe = True
        self.loaded = b

    def drain(self) -> None:
        """Wait for the last release at the end of the kernel, so no flag is left set."""
        if self.owe:
            self.ctx.emit_wait("SCALAR", "MTE2", self.released)
            self.owe = False


def _zero_kernel(ctx: KernelContext, targets: Sequence[GlobalTensor]) -> Iterator[Any]:
    """ZerosLike: one UB buffer of zeros, copied over this block's share of every target."""
    ub = ctx.core.memory(ctx.core.local_memory).capacity
    q = ctx.queue("VECOUT", 1, min(ZERO_BUF_BYTES, ub // 2 // 32 * 32))
    buf = q.alloc(nx.FP32)
    yield Duplicate(buf, 0.0)
    q.enque(buf)
    buf = q.deque()
    for t in targets:
        zeros = buf.reinterpret(t.dtype)       # all-zero bits are 0 in every dtype used here
        lo, hi = _slice(t.numel, ctx.block_dim, ctx.block_idx)
        for off in range(lo, hi, zeros.count):
            n = min(zeros.count, hi - off)
            yield DataCopyPad(t[off:off + n], zeros, n)
    q.free(buf)


def _cast_kernel(ctx: KernelContext, tiling: ElementwiseTiling, src: GlobalTensor, dst: GlobalTensor,
                 mode: str) -> Iterator[Any]:
    start, length = tiling.core_range(ctx.block_idx)

    def compute(ctx: KernelContext, ins: list[LocalTensor], o: LocalTensor, n: int) -> Iterator[Any]:
        yield Cast(o, ins[0], mode, n)

    yield from elementwise_pipeline(ctx, inputs=[src], output=dst, start=start, length=length,
                                    tile_length=tiling.tile_length, buffer_num=tiling.buffer_num,
                                    compute=compute)


def _row_syncs(ctx: KernelContext) -> Any:
    """The same-core flags of the per-row kernels: ``sync(a, b)`` sets and waits one event, the
    way PIPE_MTE2_S / PIPE_V_S / EnQue-DeQue pairs of the ops-nn kernels do."""
    ev = {k: ctx.next_event_id(*k) for k in (("MTE2", "SCALAR"), ("SCALAR", "MTE2"), ("MTE2", "VECTOR"),
                                              ("VECTOR", "SCALAR"), ("SCALAR", "MTE3"), ("MTE3", "SCALAR"),
                                              ("SCALAR", "VECTOR"), ("VECTOR", "MTE3"), ("VECTOR", "MTE2"),
                                              ("MTE3", "VECTOR"))}

    def sync(a: str, b: str) -> None:
        ctx.emit_set(a, b, ev[(a, b)])
        ctx.emit_wait(a, b, ev[(a, b)])
    return ev, sync


def _add_count(sync: Callable[[str, str], None], counts: GlobalTensor, cnt_buf: Any, key: int,
               count: float) -> Iterator[Any]:
    """scaleGradByFreq's count of one index: tmpLocal.SetValue(count), then a 4 B atomic add into
    counts[key] (the scalar store written as an 8-lane Duplicate)."""
    yield ScalarOp(1, "SetValue count")
    sync("SCALAR", "VECTOR")
    yield Duplicate(cnt_buf, float(count), count=8)
    sync("VECTOR", "MTE3")
    yield SetAtomicAdd(nx.FP32)
    yield DataCopyPad(counts[key:key + 1], cnt_buf[0:1], 1)
    yield SetAtomicNone()


def _det_kernel(ctx: KernelContext, tiling: EmbeddingTiling, skeys: GlobalTensor, spos: GlobalTensor,
                grad: GlobalTensor, acc: GlobalTensor, counts: GlobalTensor | None) -> Iterator[Any]:
    """EmbeddingDenseGradV2 on Atlas A2, fp32 rows, determinism on (tiling key 10; 11 with
    scaleGradByFreq): ops-nn op_kernel/embedding_dense_grad_v2_determinist.h,
    EmbeddingDenseGradV2DeterministKernel<float>::Process (docs/sources.md#embedding-a2-determinist).

    The core's slice of the sorted rows is the Tiling4Deterministic split (formerRowNum =
    gradRow/coreNum + 1 for the first gradRow % coreNum cores). Per embedding chunk
    (formerEmbeddingDim, then the tail): a core other than the first reads the previous core's
    last index (InitStandIndice: a 4 B DataCopyPad, PIPE_MTE2_S, GetValue); SubProcess walks its
    slice BACKWARDS; per row CopyIn loads the index (4 B, PIPE_MTE2_S) and stops at the first row
    (from the end) whose index is the previous core's last (those rows belong to that core); else
    it loads the position (4 B, PIPE_MTE2_S) and the grad row (DataCopyPad). ComputeAndCopyOut
    switches to the other of two fp32 UB accumulators when the index changes, Adds the row, and
    flushes (CopyOut: SetAtomicAdd, DataCopyPad into out, SetAtomicNone, the count with scale,
    PipeBarrier<PIPE_ALL>, Duplicate 0) when the accumulator holds LIMIT_COUNT_NUM rows after
    the Add, at the slice's first row, for the previous accumulator on a switch, and at a padding
    row. If the walk did not stop at its last row, ContinueCompute reads this core's last index
    and goes FORWARD past the slice end, through the next cores' rows, while the index is
    unchanged (flushing at the index change or at gradRow's last row). So every out row is summed
    by one core, in a fixed order: its rows inside the owner's slice from the last to the first
    in chunks of 10, then the rows past the slice in order in chunks of 10, each chunk summed in
    UB from 0 and atomically added into the zeroed out row. The accumulator state (which buffer,
    the last index) carries over from one embedding chunk to the next, as in the source.

    Queues are single-buffered: the next row's position and grad loads wait for this row's Add
    (gradQue_.AllocTensor after its FreeTensor), the index load only for the scalar (in-order
    issue); there is no PIPE_V_S after the Add, so the next index load overlaps this row's Add."""
    n_rows, emb, ec = tiling.n_rows, tiling.emb_dim, tiling.e_chunk
    lo, hi = _slice(n_rows, ctx.block_dim, ctx.block_idx)
    if counts is not None:   # scale. ProcessAndScale<false, true>: InitWorkspace zeroes the counts, SyncAll
        yield from _zero_counts(ctx, tiling, counts)
    if lo < hi:
        keys, pos = _sorted_rows(ctx, tiling, skeys, spos, 0, n_rows)
        ibuf, pbuf = ctx.tbuf(32, nx.INT32), ctx.tbuf(32, nx.INT32)
        cnt_buf = ctx.tbuf(32, nx.FP32)
        row = ctx.tbuf(_slot(ec, 4), nx.FP32)
        accs = [ctx.tbuf(_slot(ec, 4), nx.FP32), ctx.tbuf(_slot(ec, 4), nx.FP32)]
        ev, sync = _row_syncs(ctx)
        pad = tiling.padding_idx
        st = {"sw": 0, "last": -1, "stand": -1, "issued": False, "owe_free": False}
        cnt = [0, 0]
        yield SetAtomicNone()
        for a in accs:                                      # InitAddQue: ResetAddQue of both
            yield Duplicate(a, 0.0)

        def load_index(j: int, label: str) -> Iterator[Any]:
            if st["issued"]:
                sync("SCALAR", "MTE2")                      # in-order issue after the scalar's last step
            st["issued"] = True
            yield DataCopyPad(ibuf[0:1], skeys[j:j + 1], 1)
            sync("MTE2", "SCALAR")                          # PIPE_MTE2_S
            yield ScalarOp(1, label)

        def copy_out(a: int, key: int, c0: int, n: int) -> Iterator[Any]:
            sync("VECTOR", "MTE3")                          # addResQue_ DeQue
            yield SetAtomicAdd(nx.FP32)
            yield DataCopyPad(acc[key * emb + c0:key * emb + c0 + n], accs[a][0:n], n)
            yield SetAtomicNone()
            if counts is not None and c0 == 0:      # tmpLocal.SetValue(count), 4 B atomic add
                yield from _add_count(sync, counts, cnt_buf, key, cnt[a])
            sync("MTE3", "SCALAR")                          # PipeBarrier<PIPE_ALL>
            sync("SCALAR", "VECTOR")
            yield Duplicate(accs[a], 0.0)                   # ResetAddQue
            cnt[a] = 0

        def copy_in(j: int, same_stops: bool, c0: int, n: int) -> Generator[Any, None, bool]:
            """CopyIn(progress, flag): False when (index == standIdice) == flag."""
            yield from load_index(j, "index GetValue, compare")
            if (int(keys[j]) == st["stand"]) == same_stops:
                return False
            sync("SCALAR", "MTE2")
            if st["owe_free"]:                              # gradQue_.AllocTensor: the last row's Add is done
                ctx.emit_wait("VECTOR", "MTE2", ev[("VECTOR", "MTE2")])
                st["owe_free"] = False
            yield DataCopyPad(pbuf[0:1], spos[j:j + 1], 1)
            sync("MTE2", "SCALAR")                          # PIPE_MTE2_S
            yield ScalarOp(2, "posIdx GetValue, grad address")
            sync("SCALAR", "MTE2")
            p = int(pos[j])
            yield DataCopyPad(row[0:n], grad[p * emb + c0:p * emb + c0 + n], n)
            sync("MTE2", "VECTOR")                          # gradQue_ EnQue / DeQue
            return True

        def compute(j: int, limit: int, c0: int, n: int) -> Iterator[Any]:
            """ComputeAndCopyOut(progress, loopLimit)."""
            yield ScalarOp(2, "index GetValue, switch, count")
            key = int(keys[j])
            if key != pad:
                switch = st["last"] != -1 and key != st["last"]
                if switch:
                    st["sw"] ^= 1
                    cnt[st["sw"]] = 0
                sw = st["sw"]
                yield Add(accs[sw][0:n], accs[sw][0:n], row[0:n], count=n)    # AtomicAddInUb
                ctx.emit_set("VECTOR", "MTE2", ev[("VECTOR", "MTE2")])
                st["owe_free"] = True
                cnt[sw] += 1
                if cnt[sw] == LIMIT_COUNT_NUM or j == limit:
                    yield from copy_out(sw, key, c0, n)
                if switch:
                    yield from copy_out(1 - sw, st["last"], c0, n)
                st["last"] = key
            elif st["last"] != -1:
                yield from copy_out(st["sw"], st["last"], c0, n)
                st["last"] = -1

        t = 0
        for c0 in range(0, emb, ec):
            n = min(ec, emb - c0)
            st["stand"] = -1
            if lo > 0:                                      # InitStandIndice(0): the previous core's last index
                yield from load_index(lo - 1, "standIdice GetValue")
                st["stand"] = int(keys[lo - 1])
            cont = True
            for j in range(hi - 1, lo - 1, -1):             # SubProcess: backwards
                ctx.tile = t
                t += 1
                ok = yield from copy_in(j, True, c0, n)
                if not ok:
                    cont = j != hi - 1
                    if st["last"] != -1:
                        yield from copy_out(st["sw"], st["last"], c0, n)
                    break
                yield from compute(j, lo, c0, n)
            if cont:                                        # ContinueCompute: forwards past the slice
                st["last"] = -1
                yield from load_index(hi - 1, "standIdice GetValue")
                st["stand"] = int(keys[hi - 1])
                for j in range(hi, n_rows):
                    ctx.tile = t
                    t += 1
                    ok = yield from copy_in(j, False, c0, n)
                    if not ok:
                        if st["last"] != -1:
                            yield from copy_out(st["sw"], st["last"], c0, n)
                        break
                    yield from compute(j, n_rows - 1, c0, n)
        if st["owe_free"]:
            ctx.emit_wait("VECTOR", "MTE2", ev[("VECTOR", "MTE2")])
    if counts is not None:   # scale. ProcessAndScale: SyncAll, tpipe.Destroy(), the scale kernel
        yield from _sync_all(1)
        _destroy_pipe(ctx)
        slo, shi = _slice(tiling.num_weights, ctx.block_dim, ctx.block_idx)
        if shi > slo:
            cvals = None
            if ctx.functional:
                allk, _ = _sorted_rows(ctx, tiling, skeys, spos, 0, n_rows)
                allk = allk[allk != tiling.padding_idx]
                cvals = np.bincount(allk, minlength=tiling.num_weights)[slo:shi].astype(np.float32)
            yield from _scale_kernel(ctx, tiling, counts, acc, cvals)


def half_stage_groups(first_end: Sequence[int], cores: int) -> list[tuple[int, int, int, int]]:
    """ProcessGmData of ProcessForHalf: the outIndex list (first, end index of every core, in core
    order) cut into groups of consecutive equal indices, each given to a core round-robin starting
    at core 1 (GetFreeCore advances before each group). Returns (core, start slot, end slot, index)."""
    out = []
    pre, core, pre_idx = 0, 0, int(first_end[0])
    n = len(first_end)
    for i in range(1, n):
        cur = int(first_end[i])
        if cur != pre_idx:
            core = (core + 1) % cores
            out.append((core, pre, i, pre_idx))
            pre, pre_idx = i, cur
        if i == n - 1:
            core = (core + 1) % cores
            out.append((core, pre, i + 1, pre_idx))
    return out


def _half_kernel(ctx: KernelContext, tiling: EmbeddingTiling, skeys: GlobalTensor, spos: GlobalTensor,
                 grad: GlobalTensor, out: GlobalTensor, stage_idx: GlobalTensor,
                 stage: GlobalTensor) -> Iterator[Any]:
    """EmbeddingDenseGradV2 on Atlas A2 for uncast fp16/bf16 rows off the small-dim branch (tiling
    key 0, determinism on or off: isDeterministMode_ needs 4-byte rows): ops-nn
    op_kernel/embedding_dense_grad_v2.h, EmbeddingDenseGradV2Kernel<half|bf16, float>::ProcessForHalf
    (docs/sources.md#embedding-a2-uncast-half).

    Per embedding chunk, per row of the core's slice (BaseTiling split): CopyIn loads the position
    and the index (4 B each, PIPE_MTE2_S), the row in grad's dtype into the upper half of an fp32
    buffer (PIPE_MTE2_V) and Casts it to fp32 (CAST_NONE). ComputeUbCache adds the row into one of
    two fp32 accumulators (PIPE_V_S); an accumulator is added into a third fp32 buffer, the UB
    cache (CopyToUbCache: Add, PipeBarrier<PIPE_ALL>, Duplicate 0), when it already held
    LIMIT_COUNT_NUM rows before the Add, for the previous index on a switch, at a padding row and
    at the slice's last row. When an index's run ends (CopyUbCacheOut), its sum in the cache goes
    out: the slice's first and last index to the workspace (outStage fp32 rows and outIndex, two
    slots per core), any other index straight to out, Cast to grad's dtype (CAST_RINT) and a plain
    DataCopyPad (no atomics: the run is the core's alone). Then PIPE_MTE3_S, SyncAll, and
    ProcessGmData: every core reads the 2 x coreNum outIndex values, cuts them into groups of
    equal index and takes its groups round-robin (:func:`half_stage_groups`); a group's stage rows
    are summed like rows (11 per accumulator before the cache) and written to out with a RINT cast;
    SyncAll. The sums are fp32, and out is written without atomic adds, so the result does not
    depend on timing (deterministic with or without the setting).

    Source quirks kept: a paddingIdx equal to the slice's first (last) index makes every row store
    the cache into stage slot 0 (1) under the padding index before it is added."""
    n_rows, emb, ec = tiling.n_rows, tiling.emb_dim, tiling.e_chunk
    bd, me = ctx.block_dim, ctx.block_idx
    lo, hi = _slice(n_rows, bd, me)
    if lo >= hi:
        return
    kdt = grad.dtype
    pad = tiling.padding_idx
    keys, pos = _sorted_rows(ctx, tiling, skeys, spos, lo, hi)
    first_end: list[int] = []
    for b in range(bd):                                     # the outIndex values every core writes
        blo, bhi = _slice(n_rows, bd, b)
        fe, _ = _sorted_rows(ctx, tiling, skeys, spos, blo, blo + 1)
        ee, _ = _sorted_rows(ctx, tiling, skeys, spos, bhi - 1, bhi)
        first_end += [int(fe[0]), int(ee[0])]
    groups = [g for g in half_stage_groups(first_end, bd) if g[0] == me]
    first, end = first_end[2 * me], first_end[2 * me + 1]
    ea = _align(ec, 16)                                     # BLOCK_SIZE_GRAD / sizeof(float)
    pbuf, ibuf, tmp = ctx.tbuf(32, nx.INT32), ctx.tbuf(32, nx.INT32), ctx.tbuf(32, nx.INT32)
    row = ctx.tbuf(ea * 4, nx.FP32)
    row_half = row.reinterpret(kdt)[ea:2 * ea]              # gradLocalCasted[GetSize() / 2]
    accs = [ctx.tbuf(ea * 4, nx.FP32), ctx.tbuf(ea * 4, nx.FP32)]
    cache = ctx.tbuf(ea * 4, nx.FP32)
    cache_half = cache.reinterpret(kdt)
    ev, sync = _row_syncs(ctx)
    st = {"sw": 0, "last": -1, "issued": False, "owe_free": False}
    cnt = [0, 0]

    def reset(buf: LocalTensor) -> Iterator[Any]:           # ResetQue: Duplicate 0, PIPE_V_S
        yield Duplicate(buf, 0.0)
        sync("VECTOR", "SCALAR")

    def to_cache(a: int, n: int) -> Iterator[Any]:          # CopyToUbCache
        yield Add(cache[0:n], cache[0:n], accs[a][0:n], count=n)
        sync("VECTOR", "SCALAR")                            # PipeBarrier<PIPE_ALL>
        yield from reset(accs[a])
        cnt[a] = 0

    def to_stage(key: int, is_end: bool, n: int) -> Iterator[Any]:     # CopyToOutStage
        yield ScalarOp(1, "SetValue index")
        sync("SCALAR", "VECTOR")
        yield Duplicate(tmp, key, count=8)                  # the scalar store of tmpLocal, as a write
        sync("VECTOR", "MTE3")                              # PIPE_S_MTE3 (and the cache's DeQue)
        slot = 2 * me + int(is_end)
        yield DataCopyPad(stage[slot * ec:slot * ec + n], cache[0:n], n)
        yield DataCopyPad(stage_idx[slot:slot + 1], tmp[0:1], 1)
        sync("MTE3", "SCALAR")                              # PIPE_MTE3_S
        sync("SCALAR", "VECTOR")
        yield from reset(cache)

    def to_out(key: int, c0: int, n: int) -> Iterator[Any]:            # CopyToOutPut
        yield Cast(cache_half[0:n], cache[0:n], "rint", n)
        sync("VECTOR", "MTE3")                              # PIPE_V_MTE3
        yield DataCopyPad(out[key * emb + c0:key * emb + c0 + n], cache_half[0:n], n)
        sync("MTE3", "SCALAR")                              # PIPE_MTE3_S
        sync("SCALAR", "VECTOR")
        yield from reset(cache)

    def cache_out(key: int, c0: int, n: int) -> Iterator[Any]:         # CopyUbCacheOut
        if key == pad:
            yield from reset(cache)
        elif first == end:
            yield from to_stage(key, False, n)
            yield from to_stage(key, key == end, n)
        elif key in (first, end):
            yield from to_stage(key, key == end, n)
        else:
            yield from to_out(key, c0, n)

    def add_row(n: int) -> Iterator[Any]:                   # AtomicAddInUb
        sw = st["sw"]
        yield Add(accs[sw][0:n], accs[sw][0:n], row[0:n], count=n)
        ctx.emit_set("VECTOR", "MTE2", ev[("VECTOR", "MTE2")])
        st["owe_free"] = True
        sync("VECTOR", "SCALAR")                            # PIPE_V_S
        cnt[sw] += 1

    def free_wait() -> None:
        if st["owe_free"]:                                  # gradQue_: the last row's Add is done
            ctx.emit_wait("VECTOR", "MTE2", ev[("VECTOR", "MTE2")])
            st["owe_free"] = False

    yield SetAtomicNone()
    for buf in (*accs, cache):                              # InitQue: ResetQue of the three buffers
        yield from reset(buf)
    yield ScalarOp(2, "firstIndex, endIndex GetValue")      # Process: two scalar reads of GM
    t = 0
    for c0 in range(0, emb, ec):
        n = min(ec, emb - c0)
        for j in range(hi - lo):
            ctx.tile = t
            t += 1
            if st["issued"]:
                sync("SCALAR", "MTE2")                      # in-order issue after the scalar's last step
            st["issued"] = True
            free_wait()                                     # CopyIn: gradQue_.AllocTensor
            yield DataCopyPad(pbuf[0:1], spos[lo + j:lo + j + 1], 1)
            yield DataCopyPad(ibuf[0:1], skeys[lo + j:lo + j + 1], 1)
            sync("MTE2", "SCALAR")                          # PIPE_MTE2_S
            yield ScalarOp(2, "posIdx GetValue, grad address")
            sync("SCALAR", "MTE2")
            p = int(pos[j])
            yield DataCopyPad(row_half[0:n], grad[p * emb + c0:p * emb + c0 + n], n)
            sync("MTE2", "VECTOR")                          # PIPE_MTE2_V
            yield Cast(row[0:n], row_half[0:n], "none", n)
            if pad == first:
                yield from to_stage(pad, False, n)
            if pad == end:
                yield from to_stage(pad, True, n)
            yield ScalarOp(3, "index GetValue, switch, limit")   # ComputeUbCache
            key = int(keys[j])
            last_row = j == hi - lo - 1
            if key != pad:
                switch = st["last"] != -1 and key != st["last"]
                if switch:
                    st["sw"] ^= 1
                    cnt[st["sw"]] = 0
                sw = st["sw"]
                limit = cnt[sw] == LIMIT_COUNT_NUM
                yield from add_row(n)
                if limit:
                    yield from to_cache(sw, n)
                if switch:
                    yield from to_cache(1 - sw, n)
                    yield from cache_out(st["last"], c0, n)
                if last_row:
                    yield from to_cache(sw, n)
                st["last"] = key
            elif st["last"] != -1:
                yield from to_cache(st["sw"], n)
                yield from cache_out(st["last"], c0, n)
                st["last"] = -1
            if last_row:
                yield from cache_out(key, c0, n)
        sync("MTE3", "SCALAR")                              # PIPE_MTE3_S
        yield from _sync_all(3)                             # SyncAll
        yield ScalarOp(2 * bd, "outIndex GetValue")         # ProcessGmData
        for _core, s0, s1, key in groups:
            for i in range(s0, s1):
                sync("SCALAR", "MTE2")
                free_wait()
                yield DataCopyPad(row[0:n], stage[i * ec:i * ec + n], n)    # CopyStageIn
                sync("MTE2", "VECTOR")
                sw = st["sw"]
                limit = cnt[sw] == LIMIT_COUNT_NUM
                yield from add_row(n)                       # ComputeStage
                if limit:
                    yield from to_cache(sw, n)
                if i == s1 - 1:
                    yield from to_cache(sw, n)
                    yield from to_out(key, c0, n)
        sync("MTE3", "SCALAR")
        yield from _sync_all(4)                             # SyncAll
    free_wait()


def scale_passes(emb: int, e_chunk: int) -> list[tuple[int, int]]:
    """The (start, length) row chunks of the scale stage: formerDimRepTime = embeddingDim /
    formerEmbeddingDim chunks of formerEmbeddingDim, then the tail. ``Process`` runs dimJ from 0
    through formerDimRepTime inclusive, so the tail pass runs even when the tail is 0 elements
    (docs/sources.md#embedding-a2-scale-stage)."""
    reps = emb // e_chunk
    return [(j * e_chunk, e_chunk) for j in range(reps)] + [(reps * e_chunk, emb - reps * e_chunk)]


def scale_ub_bytes(e_chunk: int) -> int:
    """UB of the scale stage's InitBuffers: gradInQue_ and gradOutQue_, two buffers each of
    formerEmbeddingDim fp32 aligned to 32 B, and scaleQue_, two buffers of 32 B."""
    return 2 * 2 * _pad8(e_chunk) * 4 + 2 * 32


def scale_chunk_limit(ub: int) -> int:
    """The widest formerEmbeddingDim whose scale stage (:func:`scale_ub_bytes`) fits ``ub`` B."""
    return (ub - 2 * 32) // (2 * 2 * 4) // 8 * 8


def _scale_kernel(ctx: KernelContext, tiling: EmbeddingTiling, counts: GlobalTensor,
                  acc: GlobalTensor, cvals: np.ndarray | None = None) -> Iterator[Any]:
    """EmbeddingDenseGradV2ScaleKernel (A2, docs/sources.md#embedding-a2-scale-stage): this
    core's rows of the Tiling4Scale split (numWeights / coreNum each, one more for the first
    numWeights % coreNum) x fp32(1/count), count 0 treated as 1. For each row chunk pass
    (:func:`scale_passes`) and each row: CopyIn (the chunk and the row's 4 B count, each in its
    double-buffered queue), Compute (the scalar reads the count, GetValue, and forms the
    reciprocal; Muls of the whole 64-element repeats, then one of the rest), CopyOut (the chunk
    back in place). ``cvals``: the counts of rows [lo, hi) when the caller knows them (the counts
    are added in the same launch, so they are not in GM when the kernel is generated)."""
    emb = tiling.emb_dim
    lo, hi = _slice(tiling.num_weights, ctx.block_dim, ctx.block_idx)
    if lo >= hi:
        return
    if cvals is None:
        cvals = _peek(counts, lo, hi - lo) if ctx.functional else np.ones(hi - lo, np.float32)
    chunk = tiling.e_chunk
    inq = ctx.queue("VECIN", 2, _pad8(chunk) * 4)                  # gradInQue_
    sq = ctx.queue("VECIN", 2, 32)                                 # scaleQue_
    outq = ctx.queue("VECOUT", 2, _pad8(chunk) * 4)                # gradOutQue_
    to_scalar = ctx.next_event_id("MTE2", "SCALAR")
    scalar_vec = ctx.next_event_id("SCALAR", "VECTOR")
    scalar_mte2 = ctx.next_event_id("SCALAR", "MTE2")
    mask = 256 // 4                                                # VEC_PROCESS_SIZE / sizeof(float)
    tile, issued = 0, False
    for c0, n in scale_passes(emb, chunk):
        former = n // mask * mask
        for r in range(lo, hi):
            ctx.tile = tile
            tile += 1
            if issued:          # in-order issue: this row's copies follow the scalar's last GetValue
                ctx.emit_wait("SCALAR", "MTE2", scalar_mte2)
            issued = True
            ib, sb = inq.alloc(nx.FP32), sq.alloc(nx.FP32)        # CopyIn
            yield DataCopyPad(ib[0:n], acc[r * emb + c0:r * emb + c0 + n], n)
            yield DataCopyPad(sb[0:1], counts[r:r + 1], 1)
            inq.enque(ib)
            sq.enque(sb)
            ib, sb = inq.deque(), sq.deque()                       # Compute
            ob = outq.alloc(nx.FP32)
            ctx.emit_set("MTE2", "SCALAR", to_scalar)              # the count in UB before GetValue
            ctx.emit_wait("MTE2", "SCALAR", to_scalar)
            yield ScalarOp(2, "count GetValue, 1/count")
            ctx.emit_set("SCALAR", "MTE2", scalar_mte2)
            c = float(cvals[r - lo])
            rcp = float(np.float32(1.0) if c == 0.0 else np.float32(1.0) / np.float32(c))
            if n:
                ctx.emit_set("SCALAR", "VECTOR", scalar_vec)       # Muls takes the scalar as its operand
                ctx.emit_wait("SCALAR", "VECTOR", scalar_vec)
            if former:
                yield Muls(ob[0:former], ib[0:former], scalar=rcp, count=former)
            if n > former:
                yield Muls(ob[former:n], ib[former:n], scalar=rcp, count=n - former)
            inq.free(ib)
            sq.free(sb)
            outq.enque(ob)
            ob = outq.deque()                                      # CopyOut
            yield DataCopyPad(acc[r * emb + c0:r * emb + c0 + n], ob[0:n], n)
            outq.free(ob)
    ctx.emit_wait("SCALAR", "MTE2", scalar_mte2)


# ---------------------------------------------------------------------------------------------
# Atlas A2: the TIK Sort and the ops-nn per-row kernel
# ---------------------------------------------------------------------------------------------

def _tik_sort_kernel(ctx: KernelContext, tiling: EmbeddingTiling, idx: GlobalTensor, keys: GlobalTensor,
                     pos: GlobalTensor, ws: Mapping[str, GlobalTensor]) -> Iterator[Any]:
    """The TIK Sort of the int32 indices seen as fp32 (aclnn PorcessIndices -> l0op::Sort, stable,
    ascending), as the TBE dynamic Sort class runs it on 910B (TIK_SORT_BATCH above): the one
    row of gradRow elements is one task, so block 0 does all the work.

    - sort_mini_num_new (gradRow <= 4096): a scalar loop writes the position list, one load,
      vsort32 + vms4 in UB, then moveout_mini_num_new: the proposals go out to data_a_list and
      back, vreducev2 extracts the values, a scalar loop reverses keys and positions into
      ascending order (3 scalar UB accesses per element), stores to the aligned outputs;
    - sort_large_num_new: per batch of 4096 (sort_in_ub_new) the same position loop, load, sort,
      store of the proposals to the workspace; sort_in_gm_new merges them pairwise through GM
      (for tail in B-1..1: carry batch 0 through batches 1..B-1-tail, one vmrgsort of two
      batches each, storing one batch back: B(B-1)/2 merges); moveout_large_num_new per batch;
    - tune(): the aligned outputs are copied to y1/y2 (load + store of values and indices).
    Modelled choices: the sorted runs are kept here as keys and positions in two arrays (the
    same bytes as the 8 B proposals); the ascending order is produced directly (the TIK kernel
    sorts descending and reverses in the scalar loop, which is charged); vreducev2 is priced as
    a Copy of the proposals (its cost is not published). The Sort launch runs on every AI core
    (block_num = core count) but only block 0 has a task; the other blocks' tune() copies of the
    result are not modelled (off the critical path)."""
    if ctx.block_idx != 0:
        return
    n, nb = tiling.n_rows, tiling.sort_tile
    batches = tiling.sort_runs
    # UB: two ping-pong buffers of two batches of (key, position); Sort scratch in the second
    # (the second doubles as the Sort scratch of 16 B per element) and the raw keys of a batch
    buf = [ctx.tbuf(2 * nb * 8, nx.INT32), ctx.tbuf(2 * nb * 8, nx.INT32)]
    raw_buf = ctx.tbuf(nb * 4, nx.INT32)
    ev = {k: ctx.next_event_id(*k) for k in (("MTE2", "VECTOR"), ("VECTOR", "MTE3"), ("MTE3", "MTE2"),
                                              ("SCALAR", "MTE2"), ("SCALAR", "MTE3"), ("VECTOR", "SCALAR"),
                                              ("MTE2", "MTE3"))}

    def sync(a: str, b: str) -> None:
        ctx.emit_set(a, b, ev[(a, b)])
        ctx.emit_wait(a, b, ev[(a, b)])

    def kp(b: LocalTensor, half: int, count: int) -> tuple[LocalTensor, LocalTensor]:
        """keys and positions of half ``half`` (0, 1) of a ping-pong buffer."""
        k0 = half * nb
        return b[k0:k0 + count], b[2 * nb + k0:2 * nb + k0 + count]

    def sort_batch(b0: int, count: int, dst: LocalTensor) -> Iterator[Any]:
        # idx_ub[i2].set_as(i2 + batch_idx * num_per_batch): a scalar loop over the batch
        yield ScalarOp(nb, "TIK sort: position list")
        sync("SCALAR", "MTE2")
        raw = raw_buf
        yield DataCopyPad(raw[0:count], idx[b0:b0 + count], count)
        if count < nb:                                     # padding with +max (set_as + vec_dup)
            yield ScalarOp((nb - count) % 8, "TIK sort: pad")
        sync("MTE2", "VECTOR")
        k, p = kp(dst, 0, count)
        yield Sort(k.reinterpret(nx.FP32), p, raw.reinterpret(nx.FP32), buf[1].reinterpret(nx.FP32), count,
                   first_position=b0)

    def store_run(src: LocalTensor, half: int, count: int, slot: int) -> Iterator[Any]:
        k, p = kp(src, half, count)
        o = slot * nb
        yield DataCopyPad(ws["sws_k"][o:o + count], k, count)
        yield DataCopyPad(ws["sws_p"][o:o + count], p, count)

    def load_run(dst: LocalTensor, half: int, count: int, slot: int) -> Iterator[Any]:
        k, p = kp(dst, half, count)
        o = slot * nb
        yield DataCopyPad(k, ws["sws_k"][o:o + count], count)
        yield DataCopyPad(p, ws["sws_p"][o:o + count], count)

    def moveout(src: LocalTensor, count: int, out_off: int, after: str) -> Iterator[Any]:
        # proposals out to data_a_list and back (uint32 view), vreducev2, scalar reversal
        k, p = kp(src, 0, count)
        al = ws["alist"]
        sync(after, "MTE3")
        yield DataCopyPad(al[0:count], k, count)
        yield DataCopyPad(al[nb:nb + count], p, count)
        sync("MTE3", "MTE2")
        yield DataCopyPad(k, al[0:count], count)
        yield DataCopyPad(p, al[nb:nb + count], count)
        sync("MTE2", "VECTOR")
        ext = buf[1]                                       # vreducev2: values and indices extracted
        yield Copy(ext[0:count].reinterpret(nx.FP32), k.reinterpret(nx.FP32), count)
        yield Copy(ext[nb:nb + count], p, count)
        sync("VECTOR", "SCALAR")
        yield ScalarOp(3 * count, "TIK sort: reverse to ascending")
        sync("SCALAR", "MTE3")
        yield DataCopyPad(ws["algk"][out_off:out_off + count], k, count)
        yield DataCopyPad(ws["algp"][out_off:out_off + count], p, count)
        sync("MTE3", "MTE2")

    if batches == 1:
        yield from sort_batch(0, n, buf[0])
        yield from moveout(buf[0], n, 0, "VECTOR")
    else:
        sizes = [min(nb, n - b * nb) for b in range(batches)]
        for b in range(batches):                            # sort_in_ub_new
            yield from sort_batch(b * nb, sizes[b], buf[0])
            sync("VECTOR", "MTE3")
            yield from store_run(buf[0], 0, sizes[b], b)
            sync("MTE3", "MTE2")
        for tail in range(batches - 1):                     # sort_in_gm_new
            cur = 0
            yield from load_run(buf[cur], 1, sizes[0], 0)   # the carry: upper half
            carry = sizes[0]
            for i in range(1, batches - tail):
                yield from load_run(buf[cur], 0, sizes[i], i)
                sync("MTE2", "VECTOR")
                ck, cp = kp(buf[cur], 1, carry)
                nk, np_ = kp(buf[cur], 0, sizes[i])
                total = carry + sizes[i]
                out = buf[1 - cur]
                dk, dp = out[0:total], out[2 * nb:2 * nb + total]
                yield MrgSort(dk.reinterpret(nx.FP32), dp,
                              [(ck.reinterpret(nx.FP32), cp, carry), (nk.reinterpret(nx.FP32), np_, sizes[i])])
                # the lower batch goes back to slot i-1; the upper part is carried on: it is
                # moved to the upper half of the buffer (the TIK kernel swaps UB pointers)
                low = sizes[i - 1]
                sync("VECTOR", "MTE3")
                yield from store_run(out, 0, low, i - 1)
                carry = total - low
                if carry and low != nb:
                    yield Copy(out[nb:nb + carry], out[low:low + carry], carry)
                    yield Copy(out[3 * nb:3 * nb + carry], out[2 * nb + low:2 * nb + low + carry], carry)
                sync("MTE3", "MTE2")
                cur = 1 - cur
            sync("VECTOR", "MTE3")
            yield from store_run(buf[cur], 1, carry, batches - 1 - tail)
            sync("MTE3", "MTE2")
        for b in range(batches):                            # moveout_large_num_new
            yield from load_run(buf[0], 0, sizes[b], b)
            yield from moveout(buf[0], sizes[b], b * nb, "MTE2")
    # tune(): copy the aligned outputs to y1 (sorted keys) and y2 (positions)
    for b0 in range(0, n, nb):
        count = min(nb, n - b0)
        for src, dst in ((ws["algk"], keys), (ws["algp"], pos)):
            t = buf[1][0:count]
            yield DataCopyPad(t, src[b0:b0 + count], count)
            sync("MTE2", "VECTOR")
            sync("VECTOR", "MTE3")
            yield DataCopyPad(dst[b0:b0 + count], t, count)
            sync("MTE3", "MTE2")


def _sync_all(flag_id: int) -> Iterator[Any]:
    """SyncAll of every core of the launch: set once this core's stores are done (MTE3), wait
    before its next loads (MTE2)."""
    yield CrossCoreSetFlag(flag_id, mode=0, pipe="MTE3")
    yield CrossCoreWaitFlag(flag_id, mode=0, pipe="MTE2")


def _zero_counts(ctx: KernelContext, tiling: EmbeddingTiling, counts: GlobalTensor) -> Iterator[Any]:
    """InitWorkspace of the scaleGradByFreq kernels: this core's share of the counts (the
    Tiling4Scale split of numWeights) set to 0 from a zeroed UB buffer, in pieces, then SyncAll."""
    clo, chi = _slice(tiling.num_weights, ctx.block_dim, ctx.block_idx)
    zn = min(max(chi - clo, 1), ZERO_BUF_BYTES // 4)
    zq = ctx.queue("VECOUT", 1, _slot(zn, 4))
    if chi > clo:
        z = zq.alloc(nx.FP32)
        yield Duplicate(z, 0.0, count=zn)
        zq.enque(z)
        z = zq.deque()
        for o in range(clo, chi, zn):
            k = min(zn, chi - o)
            yield DataCopyPad(counts[o:o + k], z[0:k], k)
        zq.free(z)
    yield from _sync_all(0)


def _destroy_pipe(ctx: KernelContext, sync: Callable[[str, str], None] | None = None) -> None:
    """``tpipe.Destroy()`` of ProcessAndScale (docs/sources.md#embedding-a2-scale-stage): after the
    second SyncAll the accumulation kernel's TPipe gives back every queue and buffer it holds in
    UB (the counts' zero buffer included), and the scale kernel plans its own in a new TPipe, so
    the two stages never hold UB at once. The scale stage's first loads may land on bytes the
    last ResetQue (a VECTOR Duplicate) or the zero buffer's release still use: they wait for
    the vector pipe (V -> MTE2, through ``sync`` when the kernel has that flag, else its own)."""
    ctx.destroy_pipe()
    if sync is None:
        ev = ctx.next_event_id("VECTOR", "MTE2")
        ctx.emit_set("VECTOR", "MTE2", ev)
        ctx.emit_wait("VECTOR", "MTE2", ev)
    else:
        sync("VECTOR", "MTE2")


def _row_kernel(ctx: KernelContext, tiling: EmbeddingTiling, skeys: GlobalTensor, spos: GlobalTensor,
                grad: GlobalTensor, acc: GlobalTensor, counts: GlobalTensor | None) -> Iterator[Any]:
    """EmbeddingDenseGradV2 on Atlas A2 for fp32 rows, determinism off: ops-nn
    index/embedding_dense_grad_v2/op_kernel/embedding_dense_grad_v2.h (EmbeddingDenseGradV2Kernel,
    ProcessForFp32) and, with scaleGradByFreq, embedding_dense_grad_v2.cpp (ProcessAndScale:
    InitWorkspace zeroes the counts, SyncAll, the row loop, SyncAll, tpipe.Destroy(), the scale
    kernel on a new TPipe: :func:`_destroy_pipe`), one launch.

    Per sorted row of this core's slice (SetGmAddr: formerRow/tailRow rows), for each embedding
    chunk (formerEmbeddingDim, then the tail):
    CopyIn: two 4 B DataCopyPads (posIdx, sorted index), PIPE_MTE2_S, the scalar reads posIdx
    (GetValue) and issues the grad row's DataCopyPad; ComputeAndCopyOut: the scalar reads the
    index; a row equal to paddingIdx is loaded but not added; the index changing switches to the
    other of two fp32 accumulators (addResQue_[2]); Add into the accumulator, PIPE_V_S. A flush
    (CopyOut: SetAtomicAdd + DataCopyPad into out, AddFreq: the run length atomically added to
    the counts with scale, PipeBarrier<PIPE_ALL>, Duplicate 0 to reset, PIPE_V_S) happens when the
    accumulator already held LIMIT_COUNT_NUM rows before this Add (so every 11th row of a run),
    at the slice's last row, for the previous accumulator when the index changed, and at a
    padding row. All queues are single-buffered (BUFFER_NUM = DOUBLE_BUFFER = 1), and each
    cross-pipe step waits for the previous one, so a core's rows run one after the other."""
    n_rows, emb, ec = tiling.n_rows, tiling.emb_dim, tiling.e_chunk
    lo, hi = _slice(n_rows, ctx.block_dim, ctx.block_idx)
    if counts is not None:   # scale: InitWorkspace, this core's share of the counts (Tiling4Scale) to 0, SyncAll
        yield from _zero_counts(ctx, tiling, counts)
    if lo < hi:
        keys, pos = _sorted_rows(ctx, tiling, skeys, spos, lo, hi)
        pbuf, ibuf = ctx.tbuf(32, nx.INT32), ctx.tbuf(32, nx.INT32)
        row = ctx.tbuf(_slot(ec, 4), nx.FP32)
        accs = [ctx.tbuf(_slot(ec, 4), nx.FP32), ctx.tbuf(_slot(ec, 4), nx.FP32)]
        cnt_buf = ctx.tbuf(32, nx.FP32)
        ev = {k: ctx.next_event_id(*k) for k in (("MTE2", "SCALAR"), ("SCALAR", "MTE2"), ("MTE2", "VECTOR"),
                                                  ("VECTOR", "SCALAR"), ("SCALAR", "MTE3"), ("MTE3", "SCALAR"),
                                                  ("SCALAR", "VECTOR"), ("VECTOR", "MTE3"))}

        def sync(a: str, b: str) -> None:
            ctx.emit_set(a, b, ev[(a, b)])
            ctx.emit_wait(a, b, ev[(a, b)])

        for a in accs:                                      # InitQue: ResetQue of both accumulators
            yield Duplicate(a, 0.0)
        sync("VECTOR", "SCALAR")
        state = {"sw": 0, "last": -1, "flushes": 0}
        cnt = [0, 0]
        pad = tiling.padding_idx

        def flush(a: int, key: int, c0: int, n: int) -> Iterator[Any]:
            sync("SCALAR", "MTE3")
            yield SetAtomicAdd(nx.FP32)
            yield DataCopyPad(acc[key * emb + c0:key * emb + c0 + n], accs[a][0:n], n)
            yield SetAtomicNone()
            if counts is not None and c0 == 0:             # scale, AddFreq: tmpLocal.SetValue(count), 4 B atomic add
                yield from _add_count(sync, counts, cnt_buf, key, cnt[a])
            sync("MTE3", "SCALAR")                          # PipeBarrier<PIPE_ALL>
            sync("SCALAR", "VECTOR")
            yield Duplicate(accs[a], 0.0)                   # ResetQue
            sync("VECTOR", "SCALAR")                        # PIPE_V_S
            cnt[a] = 0
            state["flushes"] += 1

        yield SetAtomicNone()
        first = True
        for c0 in range(0, emb, ec):
            n = min(ec, emb - c0)
            for t in range(hi - lo):
                ctx.tile = t
                key, p = int(keys[t]), int(pos[t])
                if not first:
                    sync("SCALAR", "MTE2")                  # in-order issue: the scalar is done with the last row
                first = False
                yield DataCopyPad(pbuf[0:1], spos[lo + t:lo + t + 1], 1)
                yield DataCopyPad(ibuf[0:1], skeys[lo + t:lo + t + 1], 1)
                sync("MTE2", "SCALAR")                      # PIPE_MTE2_S
                yield ScalarOp(2, "posIdx GetValue, grad address")
                sync("SCALAR", "MTE2")
                yield DataCopyPad(row[0:n], grad[p * emb + c0:p * emb + c0 + n], n)
                sync("MTE2", "VECTOR")                      # gradQue_ EnQue/DeQue
                yield ScalarOp(3, "index GetValue, switch, limit")
                last_row = t == hi - lo - 1
                if key != pad:
                    switch = state["last"] != -1 and key != state["last"]
                    if switch:
                        state["sw"] ^= 1
                        cnt[state["sw"]] = 0
                    sw = state["sw"]
                    limit = cnt[sw] == LIMIT_COUNT_NUM
                    yield Add(accs[sw][0:n], accs[sw][0:n], row[0:n], count=n)
                    sync("VECTOR", "SCALAR")                # PIPE_V_S in AtomicAddInUb
                    cnt[sw] += 1
                    if limit or last_row:
                        yield from flush(sw, key, c0, n)
                    if switch:
                        yield from flush(1 - sw, state["last"], c0, n)
                    state["last"] = key
                elif state["last"] != -1:
                    yield from flush(state["sw"], state["last"], c0, n)
                    state["last"] = -1
    if counts is not None:   # scale. ProcessAndScale: SyncAll, tpipe.Destroy(), the scale kernel (counts: sorted keys)
        yield from _sync_all(1)
        _destroy_pipe(ctx)
        cvals = None
        slo, shi = _slice(tiling.num_weights, ctx.block_dim, ctx.block_idx)
        if shi > slo:
            if ctx.functional:
                allk, _ = _sorted_rows(ctx, tiling, skeys, spos, 0, n_rows)
                allk = allk[allk != tiling.padding_idx]
                cvals = np.bincount(allk, minlength=tiling.num_weights)[slo:shi].astype(np.float32)
            yield from _scale_kernel(ctx, tiling, counts, acc, cvals)


def _index_host(ctx: KernelContext, tiling: EmbeddingTiling, idx: GlobalTensor) -> np.ndarray:
    if ctx.functional:
        return _peek(idx, 0, tiling.n_rows).astype(np.int64)
    return _assumed_indices(tiling.n_rows, tiling.num_weights)


def _v1_kernel(ctx: KernelContext, tiling: EmbeddingTiling, idx: GlobalTensor, grad: GlobalTensor,
               acc: GlobalTensor) -> Iterator[Any]:
    """EmbeddingDenseGrad (Atlas training series, opsim's model of V1): blocks of ub_indices
    indices and their grad rows in UB; each row atomically added into acc[index]."""
    n_rows, emb, nb = tiling.n_rows, tiling.emb_dim, tiling.ub_indices
    ec = tiling.e_chunk
    ecp = _pad8(ec)
    vals = _index_host(ctx, tiling, idx)
    if tiling.deterministic:        # each core owns a range of out rows and scans every index
        o_lo = ctx.block_idx * tiling.rows_per_owner
        o_hi = min(tiling.num_weights, o_lo + tiling.rows_per_owner)
        lo, hi = 0, n_rows
        mine = (vals >= o_lo) & (vals < o_hi)
    else:                           # each core takes a contiguous range of positions
        lo, hi = _slice(n_rows, ctx.block_dim, ctx.block_idx)
        mine = np.ones(n_rows, dtype=bool)
    mine &= vals != tiling.padding_idx
    if lo >= hi:
        return
    ibuf = ctx.tbuf(nb * idx.dtype.itemsize, idx.dtype)
    rows = ctx.tbuf(nb * ecp * 4, nx.FP32)
    to_scalar = ctx.next_event_id("MTE2", "SCALAR")
    scanned = ctx.next_event_id("SCALAR", "MTE2")
    loaded = ctx.next_event_id("MTE2", "MTE3")
    stored = ctx.next_event_id("MTE3", "MTE2")
    owe_scan = owe_store = False
    block_dma = not tiling.deterministic and ec == emb and emb % 8 == 0
    yield SetAtomicAdd(acc.dtype)
    for c0 in range(0, emb, ec):
        n = min(ec, emb - c0)
        for bi, s in enumerate(range(lo, hi, nb)):
            ctx.tile = bi
            bn = min(nb, hi - s)
            sel = s + np.flatnonzero(mine[s:s + bn])
            if owe_store:
                ctx.emit_wait("MTE3", "MTE2", stored)
                owe_store = False
            yield from _load_and_scan_indices(ctx, ibuf, idx, s, bn, to_scalar, scanned, owe_scan, "index scan")
            owe_scan = True
            if sel.size == 0:
                continue
            if block_dma:
                yield DataCopyPad(rows[0:bn * emb], grad[s * emb:(s + bn) * emb], bn * emb)
                slots = [rows[(q - s) * emb:(q - s) * emb + n] for q in sel]
            else:
                slots = []
                for k, q in enumerate(sel):
                    slot = rows[k * ecp:k * ecp + n]
                    yield DataCopyPad(slot, grad[q * emb + c0:q * emb + c0 + n], n)
                    slots.append(slot)
            ctx.emit_set("MTE2", "MTE3", loaded)
            ctx.emit_wait("MTE2", "MTE3", loaded)
            for q, slot in zip(sel, slots):
                v = int(vals[q])
                yield DataCopyPad(acc[v * emb + c0:v * emb + c0 + n], slot, n)
            ctx.emit_set("MTE3", "MTE2", stored)
            owe_store = True
    yield SetAtomicNone()
    _drain(ctx, owe_scan, scanned, owe_store, stored)


def _v1_scale_kernel(ctx: KernelContext, tiling: EmbeddingTiling, idx: GlobalTensor,
                     acc: GlobalTensor) -> Iterator[Any]:
    """EmbeddingDenseGradScale (V1 model): count this core's out rows over all indices in UB,
    then each row x fp32(1/count) in the extra row buffer."""
    n_rows, emb, nb = tiling.n_rows, tiling.emb_dim, tiling.ub_indices
    o_lo = ctx.block_idx * tiling.rows_per_owner
    o_hi = min(tiling.num_weights, o_lo + tiling.rows_per_owner)
    if o_lo >= o_hi:
        return
    vals = _index_host(ctx, tiling, idx)
    inside = vals[(vals >= o_lo) & (vals < o_hi)]
    counts = np.bincount(inside - o_lo, minlength=o_hi - o_lo)
    ibuf = ctx.tbuf(nb * idx.dtype.itemsize, idx.dtype)
    ctx.tbuf(max(tiling.counts_size, 1) * idx.dtype.itemsize, idx.dtype)   # the counts in UB
    row = ctx.tbuf(_pad8(emb) * 4, nx.FP32)
    to_scalar = ctx.next_event_id("MTE2", "SCALAR")
    scanned = ctx.next_event_id("SCALAR", "MTE2")
    loaded = ctx.next_event_id("MTE2", "VECTOR")
    scaled = ctx.next_event_id("VECTOR", "MTE3")
    stored = ctx.next_event_id("MTE3", "MTE2")
    owe_scan = owe_store = False
    for bi, s in enumerate(range(0, n_rows, nb)):
        ctx.tile = bi
        bn = min(nb, n_rows - s)
        yield from _load_and_scan_indices(ctx, ibuf, idx, s, bn, to_scalar, scanned, owe_scan, "count")
        owe_scan = True
    for r in range(o_lo, o_hi):
        if owe_store:
            ctx.emit_wait("MTE3", "MTE2", stored)
        yield DataCopyPad(row[0:emb], acc[r * emb:(r + 1) * emb], emb)
        ctx.emit_set("MTE2", "VECTOR", loaded)
        ctx.emit_wait("MTE2", "VECTOR", loaded)
        c = int(counts[r - o_lo])
        rcp = np.float32(1.0) / np.float32(c if c else 1)
        yield Muls(row[0:emb], row[0:emb], scalar=float(rcp), count=emb)
        ctx.emit_set("VECTOR", "MTE3", scaled)
        ctx.emit_wait("VECTOR", "MTE3", scaled)
        yield DataCopyPad(acc[r * emb:(r + 1) * emb], row[0:emb], emb)
        ctx.emit_set("MTE3", "MTE2", stored)
        owe_store = True
    _drain(ctx, owe_scan, scanned, owe_store, stored)


def _drain(ctx: KernelContext, owe_scan: bool, scanned: int, owe_store: bool, stored: int) -> None:
    """The waits for the last scan and store releases, so no flag is left set at the end."""
    if owe_scan:
        ctx.emit_wait("SCALAR", "MTE2", scanned)
    if owe_store:
        ctx.emit_wait("MTE3", "MTE2", stored)


# ---------------------------------------------------------------------------------------------
# launch
# ---------------------------------------------------------------------------------------------

def launch(device: Any, stream: Any, tensors: Mapping[str, GlobalTensor], tiling: EmbeddingTiling,
           attrs: Mapping[str, Any]) -> list:
    """Queue the launches of one call (module docstring). Indices that would make the kernel
    write outside out are refused first, before anything is queued."""
    grad, idx, out = tensors["grad"], tensors["indices"], tensors["out"]
    check_data(device, tensors, attrs)
    ws = tensors.get("workspace")
    launches: list = []

    def region(name: str, dtype: nx.DType, count: int) -> GlobalTensor:
        span = tiling.region(name)
        assert span is not None and ws is not None   # asked only for the regions the tiling planned
        return GlobalTensor.contiguous(device, ws.addr + span[0], dtype, (count,))

    def go(kernel: Any, block_dim: int, *args: Any, name: str) -> None:
        launches.append(device.launch(stream, kernel, block_dim, *args, unit="vector", name=name))

    n_rows, emb, nw = tiling.n_rows, tiling.emb_dim, tiling.num_weights
    if tiling.path == "empty":
        if out.numel:
            go(_zero_kernel, tiling.zero_block_dim, [out], name="ZerosLike")
        return launches
    acc = region("acc32", nx.FP32, nw * emb) if tiling.region("acc32") else out
    counts = region("counts", nx.FP32, nw) if tiling.region("counts") else None
    if tiling.path == "v2":
        _launch_v2(device, go, region, tiling, grad, idx, out, acc, counts)
        return launches
    go(_zero_kernel, tiling.zero_block_dim, [acc] + ([counts] if counts is not None else []), name="ZerosLike")
    g_src = grad
    if tiling.cast_grad:
        g_src = region("grad32", nx.FP32, n_rows * emb)
        ct = _planned(tiling.cast_grad_tiling)
        go(_cast_kernel, ct.block_dim, ct, grad, g_src, "none", name="CastGrad")
    i_src = idx
    if tiling.cast_index_tiling is not None:
        i_src = region("idx32", nx.INT32, n_rows)
        ct = _planned(tiling.cast_index_tiling)
        go(_cast_kernel, ct.block_dim, ct, idx, i_src, "trunc", name="CastIndices")
    go(_v1_kernel, tiling.block_dim, tiling, i_src, g_src, acc, name="EmbeddingDenseGrad")
    if tiling.scale:
        go(_v1_scale_kernel, tiling.scale_block_dim, tiling, i_src, acc, name="EmbeddingDenseGradScale")
    if acc is not out:
        ct = _planned(tiling.cast_out_tiling)
        go(_cast_kernel, ct.block_dim, ct, acc, out, "rint", name="CastOut")
    return launches


def _planned(ct: ElementwiseTiling | None) -> ElementwiseTiling:
    """The tiling of a cast the call's path launches (planned whenever the path has the cast)."""
    assert ct is not None
    return ct


def _launch_v2(device: Any, go: Any, region: Any, tiling: EmbeddingTiling, grad: GlobalTensor,
               idx: GlobalTensor, out: GlobalTensor, acc: GlobalTensor, counts: GlobalTensor | None) -> None:
    """The launches of aclnnEmbeddingDenseBackward on Atlas A2, in the order the executor adds
    them (ops-nn index/embedding_dense_grad_v2/op_api/aclnn_embedding_dense_backward.cpp,
    aclnnEmbeddingDenseBackwardGetWorkspaceSize):

    1. ``CastGrad``: l0op::Cast of fp16/bf16 grad to fp32 when IsNeedCast (l0op::Contiguous of a
       contiguous grad or indices launches nothing: assumption, opbase returns the view);
    2. ``CastIndices``: l0op::Cast of indices other than int32 to int32 (IsComputeByV2 branch);
    3. ``Sort``: PorcessIndices -> l0op::Sort (ops-math math/sort/op_api/sort.cpp: one AI-core
       launch on 910B), the TIK kernel of :func:`_tik_sort_kernel`;
    4. ``ZerosLike``: l0op::ZerosLike of the kernel's output tensor;
    5. ``MemSet``: the output y of EmbeddingDenseGradV2 is declared ``.InitValue(0)`` with
       SetNeedAtomic(true) (op_host embedding_dense_grad_v2_def.cpp, embedding_dense_grad_v2_tiling.cpp);
       the framework clears its GM before the kernel runs (Ascend C OpParamDef::InitValue docs:
       "clear the GM space of the operator output before implementation"). Modelled as a zero-fill
       launch like ZerosLike (assumption: the clean kernel's tiling is not public);
    6. ``EmbeddingDenseGradV2`` (op_api embedding_dense_grad.cpp: one ADD_TO_LAUNCHER_LIST_AICORE,
       block_dim = coreNum of the tiling), the kernel its tiling key selects
       (docs/sources.md#embedding-a2-determinist, #embedding-a2-uncast-half): :func:`_row_kernel`
       for fp32 rows with determinism off (key 0/1), :func:`_det_kernel` for fp32 rows with
       determinism on (key 10/11), :func:`_half_kernel` for uncast fp16/bf16 rows with
       determinism on or off (key 0: the tiling's deterministic mode needs 4-byte rows);
       scaleGradByFreq runs inside the same launch (ProcessAndScale);
    7. ``CastOut``: l0op::Cast to out's dtype when it differs (a same-dtype Cast launches
       nothing: assumption); l0op::ViewCopy into a contiguous out launches nothing (assumption:
       the executor writes the last result into out; a non-contiguous out is not modelled).

    The small-dim branch (determinism off, embeddingDim <= 512, numWeights <= 2^24:
    CheckIsSmallDimMode) skips launches 3 and 4: CastGrad, CastIndices, MemSet, the small-dim
    EmbeddingDenseGradV2 (:func:`_small_dim_kernel`, embedding_dense_grad_v2_small_dim.h: each
    core sorts its UB tiles of indices itself; scaleGradByFreq inside the launch; uncast
    fp16/bf16 rows sum into the fp32 outCasted workspace and the same launch casts it into out),
    CastOut."""
    n_rows, emb = tiling.n_rows, tiling.emb_dim
    g_src = grad
    if tiling.cast_grad:
        g_src = region("grad32", nx.FP32, n_rows * emb)
        ct = _planned(tiling.cast_grad_tiling)
        go(_cast_kernel, ct.block_dim, ct, grad, g_src, "none", name="CastGrad")
    i_src = idx
    if tiling.index_cast:
        i_src = region("idx32", nx.INT32, n_rows)
        ct = _planned(tiling.cast_index_tiling)
        go(_cast_kernel, ct.block_dim, ct, idx, i_src, "trunc", name="CastIndices")
    if tiling.small_dim_kernel:
        # CheckIsSmallDimMode: no PorcessIndices (Sort) and no ZerosLike; EmbeddingDenseGradV2 gets
        # the unsorted int32 indices and writes the AllocTensor'd output, which the InitValue(0)
        # MemSet clears (op_api aclnn_embedding_dense_backward.cpp, the else branch of
        # `is950 || !CheckIsSmallDimMode`); tiling key 100 (Tiling4SmallDim), block_dim = coreNum
        go(_zero_kernel, tiling.zero_block_dim, [acc], name="MemSet")
        if tiling.region("outcast"):        # uncast fp16/bf16 rows: sums in the fp32 outCasted workspace
            outcast = region("outcast", nx.FP32, tiling.num_weights * emb)
            go(_small_dim_kernel, tiling.block_dim, tiling, i_src, g_src, outcast, counts, acc,
               name="EmbeddingDenseGradV2")
        else:
            go(_small_dim_kernel, tiling.block_dim, tiling, i_src, g_src, acc, counts, name="EmbeddingDenseGradV2")
        if acc is not out:
            ct = _planned(tiling.cast_out_tiling)
            go(_cast_kernel, ct.block_dim, ct, acc, out, "rint", name="CastOut")
        return
    keys, pos = region("keys0", nx.INT32, n_rows), region("pos0", nx.INT32, n_rows)
    ws = {name: region(name, nx.INT32, span[1] // 4)        # the sort's planned workspace regions
          for name in ("sws_k", "sws_p", "alist", "algk", "algp") if (span := tiling.region(name))}
    go(_tik_sort_kernel, 1, tiling, i_src, keys, pos, ws, name="Sort")
    go(_zero_kernel, tiling.zero_block_dim, [acc], name="ZerosLike")
    go(_zero_kernel, tiling.zero_block_dim, [acc], name="MemSet")
    if tiling.det_kernel:
        go(_det_kernel, tiling.block_dim, tiling, keys, pos, g_src, acc, counts, name="EmbeddingDenseGradV2")
    elif tiling.half_kernel:
        stage_idx = region("stage_idx", nx.INT32, tiling.block_dim * 2)
        stage_span = tiling.region("stage")
        assert stage_span is not None   # the half kernel's plan has a stage region
        stage = region("stage", nx.FP32, stage_span[1] // 4)
        go(_half_kernel, tiling.block_dim, tiling, keys, pos, g_src, acc, stage_idx, stage,
           name="EmbeddingDenseGradV2")
    else:
        go(_row_kernel, tiling.block_dim, tiling, keys, pos, g_src, acc, counts, name="EmbeddingDenseGradV2")
    if acc is not out:
        ct = _planned(tiling.cast_out_tiling)
        go(_cast_kernel, ct.block_dim, ct, acc, out, "rint", name="CastOut")


# ---------------------------------------------------------------------------------------------
# the small-dim branch (aclnn CheckIsSmallDimMode): no Sort launch, each core sorts its UB tiles
# ---------------------------------------------------------------------------------------------

def small_dim_max_rows(ub_size: int, emb: int, itemsize: int = 4) -> int:
    """maxRowInUb of the small-dim tiling (ops-nn op_host embedding_dense_grad_v2_tiling.cpp,
    Tiling4SmallDim): ((UB - RESERVED_UB_SIZE) / 4 - embeddingDim - 256) / (UB_SORT_PART +
    embeddingDim aligned to 8), halved when the kernel's grad is 2-byte."""
    per_row = SMALL_DIM_SORT_PART + _align(emb, 8)
    rows = ((ub_size - V2_INDEX_RESERVE) // 4 - emb - 256) // per_row
    return rows if itemsize == 4 else rows // 2


def small_dim_rows(n_rows: int, block_dim: int, i: int) -> tuple[int, int]:
    """Rows [lo, hi) of core i (Tiling4SmallDim / SetGmAddr): formerCopyRow = gradRow / coreNum
    for every core but the last, which takes the rest (tailCopyRow)."""
    former = n_rows // block_dim
    lo = former * i
    return lo, (lo + former if i < block_dim - 1 else n_rows)


def _small_dim_kernel(ctx: KernelContext, tiling: EmbeddingTiling, idx: GlobalTensor, grad: GlobalTensor,
                      acc: GlobalTensor, counts: GlobalTensor | None = None,
                      out: GlobalTensor | None = None) -> Iterator[Any]:
    """EmbeddingDenseGradV2 small-dim kernel, fp32 rows (ops-nn index/embedding_dense_grad_v2/
    op_kernel/embedding_dense_grad_v2_small_dim.h, EmbeddingDenseGradV2SmallDimKernel::Process).

    The core takes its rows of the UNSORTED indices (SetGmAddr: formerCopyRow x coreIdx) in tiles
    of copyRowNum = min(maxRowInUb, rows); per tile, one after the other (single-buffered queues):
    CopyIn: DataCopyPad of the tile's int32 indices and of its grad rows (one copy of copyRow
    blocks of embeddingDim, each padded to embeddingDimAlign in UB; opsim issues one copy per
    row when embeddingDim is not a multiple of 8, so such tiles pay a start-up per row);
    SortIndices: Duplicate -1 over the 32-aligned tile, Cast int32 -> fp32 (CAST_ROUND, exact
    below 2^24 = CAST_MAX_NUM), CreateVecIndex, Sort<float, true> + Extract (opsim's Sort
    instruction fuses the position vector and the extraction; Extract is priced as a Copy of the
    keys), Cast back to int32; ComputeAndCopyOut: Duplicate 0 into the accumulator, then the
    scalar walks the sorted tile (GetValue of position and index), skips paddingIdx rows, Adds
    every row of a run of equal indices into the one fp32 accumulator (AtomicAddInUb, no
    LIMIT_COUNT_NUM flush here) and at the run's end CopyOut: SetAtomicAdd, DataCopyPad of the
    row into out[index], SetAtomicNone, Duplicate 0 (ResetAddQue). At the end PIPE_MTE3_S and
    SyncAll. Runs of one index from different tiles or cores meet in GM through atomic adds.

    Ascend C's Sort orders descending (the -1 padding ends up past the tile); opsim walks the
    runs in ascending index order with positions ascending inside a run (assumption: the order
    of equal keys is not published). Within a run the sum order is the walk order, so results
    are bitwise those of a golden summing each tile's run in position order, then adding the
    runs of the tiles in GM (in an order that depends on the atomics).

    With scaleGradByFreq (tiling key 101, embedding_dense_grad_v2.cpp ProcessAndScale<true,
    false>): InitWorkspace zeroes this core's share of the counts, SyncAll, the kernel above, whose
    CopyOut also adds the run length (scaleCount_, SetValue + PIPE_S_MTE3) atomically into the
    counts, SyncAll, tpipe.Destroy(), then the scale kernel (:func:`_scale_kernel`) on a new TPipe,
    in the same launch.

    Uncast fp16/bf16 rows (``out`` given; isDifferentDtype_, docs/sources.md#embedding-a2-uncast-half):
    ``acc`` is the fp32 outCasted workspace. SetGmAddr zeroes this core's share of it
    (InitOutput: numWeights x embeddingDim / coreNum elements, the remainder on core 0; opsim
    fills it from a zeroed UB buffer, the API's own loop is not public), PIPE_S_MTE3, SyncAll;
    CopyIn loads the rows in grad's dtype (rows aligned to 16 elements) into the upper half of
    the fp32 tile buffer and Casts the whole buffer to fp32 (CAST_NONE); the runs are summed in
    fp32 and atomically added into outCasted; after the SyncAll each core casts its contiguous
    share of outCasted (SplitOutCasted) to grad's dtype in pieces of the tile buffer
    (CopyCastedOut: DataCopyPad in, PIPE_MTE2_V, Cast CAST_RINT, PIPE_V_MTE3, DataCopyPad to out,
    PIPE_MTE3_S). The partial sums of one index meet in outCasted through fp32 atomics, so the
    bits depend on their order (determinism off: this branch never runs with it on)."""
    scale = counts is not None
    half = out is not None
    if counts is not None:   # scale: InitWorkspace (Tiling4Scale split of numWeights), as in _row_kernel
        yield from _zero_counts(ctx, tiling, counts)
    lo, hi = small_dim_rows(tiling.n_rows, ctx.block_dim, ctx.block_idx)
    emb, pad = tiling.emb_dim, tiling.padding_idx
    ea = _align(emb, 32 // grad.dtype.itemsize)             # embeddingDimAlign: rows padded to 32 B in UB
    rows = hi - lo
    copy_rows = min(tiling.sd_max_rows, rows)
    ia = _align(max(copy_rows, 1), 32)
    ibuf, pbuf, tmp2 = ctx.tbuf(ia * 4, nx.INT32), ctx.tbuf(ia * 4, nx.INT32), ctx.tbuf(ia * 4, nx.FP32)
    scratch = ctx.tbuf(ia * 12 * 2, nx.FP32)              # tmpQue_ + sortIndicesQue_
    g_elems = _align(ea * max(copy_rows, 1), 16)            # gradAlignNum_ (fp32 elements)
    gbuf = ctx.tbuf(_slot(g_elems, 4), nx.FP32)
    g_half = gbuf.reinterpret(grad.dtype)[g_elems:2 * g_elems] if half else gbuf   # gradLocalCasted[GetSize()/2]
    accb = ctx.tbuf(_slot(emb, 4), nx.FP32)
    cnt_buf = ctx.tbuf(32, nx.FP32) if scale else None
    ev = {k: ctx.next_event_id(*k) for k in (("MTE2", "VECTOR"), ("VECTOR", "SCALAR"), ("SCALAR", "VECTOR"),
                                              ("VECTOR", "MTE3"), ("MTE3", "VECTOR"), ("SCALAR", "MTE2"),
                                              ("VECTOR", "MTE2"), ("MTE3", "SCALAR"))}

    def sync(a: str, b: str) -> None:
        ctx.emit_set(a, b, ev[(a, b)])
        ctx.emit_wait(a, b, ev[(a, b)])

    if half:    # SetGmAddr: InitOutput of this core's share of outCasted, PIPE_S_MTE3, SyncAll
        total = tiling.num_weights * emb
        blen = total // ctx.block_dim
        spans = [(blen * ctx.block_idx, blen)]
        if ctx.block_idx == 0 and total % ctx.block_dim:
            spans.append((blen * ctx.block_dim, total % ctx.block_dim))
        zn = min(max(max(k for _, k in spans), 1), ZERO_BUF_BYTES // 4)
        z = ctx.tbuf(_slot(zn, 4), nx.FP32)
        yield Duplicate(z, 0.0, count=zn)
        sync("VECTOR", "MTE3")
        for o0, k0 in spans:
            for o in range(o0, o0 + k0, zn):
                k = min(zn, o0 + k0 - o)
                yield DataCopyPad(acc[o:o + k], z[0:k], k)
        sync("MTE3", "SCALAR")
        yield from _sync_all(5)
        ctx.core.memory(ctx.core.local_memory).free(z.addr)
    if ctx.functional and rows > 0:
        vals = _peek(idx, lo, rows).astype(np.int64)
    else:
        vals = _assumed_indices(tiling.n_rows, tiling.num_weights)[lo:hi]
    yield SetAtomicNone()
    for t, s in enumerate(range(lo, hi, max(copy_rows, 1))):
        ctx.tile = t
        n = min(copy_rows, hi - s)
        if t:
            sync("VECTOR", "MTE2")                          # the queues' FreeTensor -> next AllocTensor
            sync("SCALAR", "MTE2")
        yield DataCopyPad(ibuf[0:n], idx[s:s + n], n)       # CopyIn
        if ea == emb:                                   # rows already 32 B: one contiguous copy
            yield DataCopyPad(g_half[0:n * emb], grad[s * emb:(s + n) * emb], n * emb)
        else:   # the real copy is one DataCopyPad of copyRow blocks padded to embeddingDimAlign;
            for r in range(n):                          # opsim's DataCopyPad has no block count
                yield DataCopyPad(g_half[r * ea:r * ea + emb], grad[(s + r) * emb:(s + r + 1) * emb], emb)
        sync("MTE2", "VECTOR")                              # EnQue / DeQue (PIPE_MTE2_V for 2-byte rows)
        if half:                                            # Cast of the whole buffer, CAST_NONE
            yield Cast(gbuf[0:g_elems], g_half[0:g_elems], "none", g_elems)
        na = _align(n, 32)
        yield Duplicate(tmp2, -1.0, count=na)               # SortIndices
        yield Cast(tmp2, ibuf, "round", count=n)
        yield Sort(ibuf.reinterpret(nx.FP32)[0:na], pbuf[0:na], tmp2[0:na], scratch, na, first_position=0)
        yield Copy(tmp2[0:na], ibuf.reinterpret(nx.FP32)[0:na], na)   # Extract of the keys
        yield Cast(ibuf, tmp2, "round", count=n)
        yield Duplicate(accb, 0.0)                          # ResetAddQue
        sync("VECTOR", "SCALAR")                            # the scalar reads the sorted tile
        tv = vals[s - lo:s - lo + n]
        order = np.argsort(tv, kind="stable")
        i = 0
        while i < n:
            key = int(tv[order[i]])
            yield ScalarOp(2, "posIdx, index GetValue")
            if key == pad:
                i += 1
                continue
            j = i
            while j < n and int(tv[order[j]]) == key:
                p = int(order[j])
                if j > i:
                    yield ScalarOp(2, "nextId, nextPos GetValue")
                sync("SCALAR", "VECTOR")
                yield Add(accb[0:emb], accb[0:emb], gbuf[p * ea:p * ea + emb], count=emb)   # AtomicAddInUb
                j += 1
            if j < n:
                yield ScalarOp(1, "nextId GetValue (run end)")
            sync("VECTOR", "MTE3")                          # CopyOut: addResQue_ DeQue
            yield SetAtomicAdd(nx.FP32)
            yield DataCopyPad(acc[key * emb:(key + 1) * emb], accb[0:emb], emb)
            yield SetAtomicNone()
            if counts is not None and cnt_buf is not None:   # scale: tmpLocal.SetValue(0, scaleCount_), 4 B atomic add
                yield from _add_count(sync, counts, cnt_buf, key, j - i)
            sync("MTE3", "VECTOR")                          # FreeTensor -> ResetAddQue
            yield Duplicate(accb, 0.0)
            sync("VECTOR", "SCALAR")
            i = j
    sync("MTE3", "SCALAR")                                  # PIPE_MTE3_S
    yield from _sync_all(2)                                 # SyncAll
    if out is not None:     # SplitOutCasted + CopyCastedOut: this core's share of outCasted cast into out
        total = tiling.num_weights * emb
        tail, form_blocks = divmod(total, ctx.block_dim)
        me = ctx.block_idx
        length = tail + 1 if me < form_blocks else tail
        start = me * (tail + 1) if me < form_blocks else form_blocks * (tail + 1) + (me - form_blocks) * tail
        o_half = gbuf.reinterpret(out.dtype)
        sync("VECTOR", "MTE2")
        for o in range(start, start + length, g_elems):
            k = min(g_elems, start + length - o)
            sync("SCALAR", "MTE2")
            yield DataCopyPad(gbuf[0:k], acc[o:o + k], k)
            sync("MTE2", "VECTOR")                          # PIPE_MTE2_V
            yield Cast(o_half[0:k], gbuf[0:k], "rint", k)
            sync("VECTOR", "MTE3")                          # PIPE_V_MTE3
            yield DataCopyPad(out[o:o + k], o_half[0:k], k)
            sync("MTE3", "SCALAR")                          # PIPE_MTE3_S
    if counts is not None and cnt_buf is not None:   # scale. ProcessAndScale: SyncAll, tpipe.Destroy(), scale kernel
        yield from _sync_all(1)
        _destroy_pipe(ctx, sync)            # the counts' zero buffer too: not only the kernel's buffers
        cvals = None
        slo, shi = _slice(tiling.num_weights, ctx.block_dim, ctx.block_idx)
        if shi > slo:
            if ctx.functional:
                allk = _peek(idx, 0, tiling.n_rows).astype(np.int64)
                allk = allk[allk != tiling.padding_idx]
                cvals = np.bincount(allk, minlength=tiling.num_weights)[slo:shi].astype(np.float32)
            yield from _scale_kernel(ctx, tiling, counts, acc, cvals)


# ---------------------------------------------------------------------------------------------
# golden: plain numpy in the documented op order, independent of the simulator
# ---------------------------------------------------------------------------------------------

def _golden_inputs(a: Mapping[str, np.ndarray], attrs: Mapping[str, Any]):
    g = np.asarray(a["grad"])
    idx = np.asarray(a["indices"])
    nw, pad = _num_weights(attrs), _padding_idx(attrs)
    emb = g.shape[-1]
    pos = first_bad_index(idx, nw, pad)
    if pos >= 0:
        raise _bad_index_fault(idx, idx.shape, pos, nw, pad, 0, emb * g.dtype.itemsize)
    v, _ = index_values(idx)
    keep = (v >= 0) & (v < nw) & (v != pad)
    return g.reshape(-1, emb) if emb else g.reshape(v.size, 0), v, keep, nw, emb


def golden(a: Mapping[str, np.ndarray], attrs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Sequential fp32 accumulation in (index, position) order, padding rows skipped, then
    x fp32(1/count) (counts over all indices, 0 -> 1), one rounding to grad's dtype
    (docs/sources.md#scatter-add-order)."""
    g2, v, keep, nw, emb = _golden_inputs(a, attrs)
    acc = np.zeros((nw, emb), np.float32)
    rows = np.flatnonzero(keep)
    rows = rows[np.argsort(v[rows], kind="stable")]
    np.add.at(acc, v[rows], g2[rows].astype(np.float32))    # unbuffered: one fp32 add at a time
    if _flag(attrs, "scale_grad_by_freq"):
        inside = v[(v >= 0) & (v < nw)]
        counts = np.bincount(inside, minlength=nw).astype(np.float32)
        counts[counts == 0] = 1.0
        acc *= (np.float32(1.0) / counts)[:, None]
    return {"out": acc.astype(np.asarray(a["grad"]).dtype)}


def truth(a: Mapping[str, np.ndarray], attrs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """fp64 reference for the precision standard: exact-ish sums, scaled by 1/count in fp64."""
    g2, v, keep, nw, emb = _golden_inputs(a, attrs)
    acc = np.zeros((nw, emb), np.float64)
    np.add.at(acc, v[keep], g2[keep].astype(np.float64))
    if _flag(attrs, "scale_grad_by_freq"):
        counts = np.bincount(v[(v >= 0) & (v < nw)], minlength=nw).astype(np.float64)
        acc /= np.maximum(counts, 1.0)[:, None]
    return {"out": acc}


def infer(spec: DeviceSpec, t: Mapping[str, TensorDesc | None],
          attrs: Mapping[str, Any]) -> dict[str, TensorDesc | None]:
    """The out opsim.run allocates when the caller gives none: [numWeights, embeddingDim], grad's dtype."""
    g = t.get("grad")
    nw = attrs.get("num_weights")
    if g is None or g.ndim < 1:
        return {"out": None}
    if isinstance(nw, (bool, np.bool_)) or not isinstance(nw, (int, np.integer)) or nw < 0:
        # a placeholder, so that validate reports the bad numWeights itself (not "out is null")
        return {"out": TensorDesc((0, int(g.shape[-1])), g.dtype)}
    return {"out": TensorDesc((int(nw), int(g.shape[-1])), g.dtype)}


def example(rng: np.random.Generator, spec: DeviceSpec, dtype: str = "fp32",
            shape: tuple[int, ...] = (512, 64)) -> dict[str, Any]:
    """A heavy-duplicate (Zipf) index set over numWeights = rows/8 rows."""
    rows = int(np.prod(shape[:-1]))
    nw = max(8, rows // 8)
    dt = nx.dtype(dtype).np_dtype
    idx = ((rng.zipf(1.3, rows) - 1) % nw).astype(np.int32).reshape(shape[:-1])
    return {"grad": rng.standard_normal(shape).astype(np.float32).astype(dt), "indices": idx,
            "num_weights": nw, "padding_idx": -1, "scale_grad_by_freq": False}


def example_shapes(spec: DeviceSpec, dtype: str = "fp32", shape: tuple[int, ...] = (512, 64)) -> dict[str, Any]:
    """``example`` without data: grad of ``shape`` (rows..., embedding dim), int32 indices of
    ``shape[:-1]``, numWeights = rows / 8 (at least 8)."""
    shape = tuple(shape)
    if not shape:
        raise ValueError(f"{NAME}: the shape is (rows..., embedding dim), at least one dimension")
    rows = 1
    for s in shape[:-1]:
        rows *= int(s)
    return {"grad": (shape, dtype), "indices": (shape[:-1], "int32"), "num_weights": max(8, rows // 8),
            "padding_idx": -1, "scale_grad_by_freq": False}


# ---------------------------------------------------------------------------------------------
# estimate (mode="estimate", docs/sources.md#design-modes-s7): every launch of the call in closed form
#
# The launches are the ones launch() queues, costed from the same tiling and the same cost
# tables the simulator spends (kernels/analytic.py): ZerosLike, MemSet, the casts, the Sort and the
# merge passes, the accumulation kernel (with the counts and the scale inside it on Atlas A2), the
# Atlas training series' scale kernel, CastOut, each paying
# the launch overhead. What the real work takes from the index values is taken from the
# data-independent pattern timing mode assumes (_assumed_indices: row i has index
# i mod numWeights), so the estimate and a timing run price the same work: every index is
# distinct when gradRow <= numWeights (one atomic flush per row, the worst case of the V2
# kernel), otherwise the sorted rows come in runs of gradRow / numWeights equal indices, and a
# run flushes at its end and every LIMIT_COUNT_NUM rows. The L2: a tensor that an earlier launch
# of the call wrote is read from the L2 when it and what was touched after it fit in the L2,
# otherwise from HBM (the launches stream it in the same order, so under LRU nothing of a tensor
# larger than the L2 survives); operands the host wrote are read from HBM.
# ---------------------------------------------------------------------------------------------

def _fits_l2(spec: DeviceSpec, nbytes: int) -> bool:
    return spec.l2 is not None and nbytes <= spec.l2.size


def _assumed_flushes(tiling: EmbeddingTiling) -> float:
    """Accumulator flushes of the whole call (one e-chunk pass) under the assumed indices: the
    ``gradRow mod numWeights`` first indices occur q + 1 times, the others q = gradRow //
    numWeights times; a run of r rows flushes ceil(r / LIMIT_COUNT_NUM) times."""
    n, nw = tiling.n_rows, max(tiling.num_weights, 1)
    q, rem = divmod(n, nw)
    if q == 0:
        return float(n)
    per = lambda r: -(-r // LIMIT_COUNT_NUM)   # noqa: E731
    return float(rem * per(q + 1) + (nw - rem) * per(q))


def _est_launch(spec: DeviceSpec, body: float, busy: Mapping[str, float], read: int, written: int,
                block_dim: int, ub: int, name: str) -> Any:
    return Estimate(cycles=int(math.ceil(body)) + spec.launch.overhead,
                    pipe_busy={p: int(round(b)) for p, b in busy.items()}, bytes_read=int(read),
                    bytes_written=int(written), block_dim=block_dim, ub_bytes=int(ub), model="embedding",
                    notes=name)


def _est_zero(spec: DeviceSpec, block_dim: int, targets: Sequence[tuple[int, int]]) -> Any:
    """ZerosLike: one Duplicate of the zero buffer, then this block's share of every target in
    copies of the buffer, back to back on MTE3 (all blocks store at once)."""
    assert spec.ub is not None          # an Ascend spec: the UB is required (devices/spec.py)
    assert spec.mte3 is not None
    buf = min(ZERO_BUF_BYTES, spec.ub.size // 2 // 32 * 32)
    _, rs = shared_rates(spec, 0, block_dim)
    st = spec.mte3.startup
    vec = head_cycles(spec, "VECTOR", block_dim) + vector_cycles(spec, "Duplicate", "fp32", buf // 4)
    store = float(head_cycles(spec, "MTE3", block_dim))
    written = 0
    for numel, item in targets:
        longest = -(-numel // block_dim)
        per = buf // item
        full, rem = divmod(longest, per)
        store += full * dma_cycles(st, per * item, rs) + (dma_cycles(st, rem * item, rs) if rem else 0)
        written += numel * item
    return _est_launch(spec, vec + store, {"VECTOR": vec, "MTE3": store}, 0, written, block_dim, buf, "ZerosLike")


def _est_cast(spec: DeviceSpec, ct: ElementwiseTiling, src: str, dst: str, from_l2: bool, name: str) -> Any:
    """A cast launch: the element-wise pipeline model (kernels.ascend.elementwise)."""
    si, di = nx.dtype(src).itemsize, nx.dtype(dst).itemsize

    def work(n: int) -> TileWork:
        load = (n * si,)
        return TileWork(loads=() if from_l2 else load, vector=cast_work(src, dst, n), stores=(n * di,),
                        l2_loads=load if from_l2 else ())
    e = estimate_elementwise(spec, ct, work)
    return Estimate(**{**e.__dict__, "model": "embedding", "notes": name})


def _run_end(p: int, n_rows: int, num_weights: int) -> int:
    """End (exclusive) of the run of equal assumed indices that sorted row ``p`` belongs to."""
    q, rem = divmod(n_rows, max(num_weights, 1))
    if q == 0:
        return p + 1
    a = q + 1
    if p < rem * a:
        return (p // a + 1) * a
    return rem * a + ((p - rem * a) // q + 1) * q


def _det_rows(tiling: EmbeddingTiling) -> int:
    """Rows of the busiest core in deterministic mode (_owned_range on the assumed indices)."""
    best = 0
    for b in range(tiling.block_dim):
        lo, hi = _slice(tiling.n_rows, tiling.block_dim, b)
        if lo >= hi:
            continue
        olo = min(hi, _run_end(lo - 1, tiling.n_rows, tiling.num_weights)) if lo > 0 else lo
        if olo < hi:
            best = max(best, max(hi, _run_end(hi - 1, tiling.n_rows, tiling.num_weights)) - olo)
    return best


def _run_start(p: int, n_rows: int, num_weights: int) -> int:
    """Start of the run of equal assumed indices that sorted row ``p`` belongs to."""
    q, rem = divmod(n_rows, max(num_weights, 1))
    if q == 0:
        return p
    a = q + 1
    if p < rem * a:
        return p // a * a
    return rem * a + (p - rem * a) // q * q


def _run_key(p: int, n_rows: int, num_weights: int) -> int:
    """Assumed index of sorted row ``p`` (the runs are the indices 0, 1, ... in order)."""
    q, rem = divmod(n_rows, max(num_weights, 1))
    if q == 0:
        return p
    a = q + 1
    return p // a if p < rem * a else rem + (p - rem * a) // q


def _det_piece_flushes(a: int, b: int, tiling: EmbeddingTiling) -> tuple[int, int]:
    """(flushes, padding rows) of the deterministic kernel walking sorted rows [a, b) as one
    stretch: each run piece inside it flushes after every LIMIT_COUNT_NUM rows and once more at
    its end (the switch to the next index, the stop at the previous core's index, the slice end;
    an accumulator of 0 rows is stored too); a padding run adds nothing and flushes nothing."""
    n, nw, pad = tiling.n_rows, tiling.num_weights, tiling.padding_idx
    flushes = pad_rows = 0
    q, rem = divmod(n, max(nw, 1))
    p = a
    while p < b:
        e = min(b, _run_end(p, n, nw))
        length, key = e - p, _run_key(p, n, nw)
        if e < b and p == _run_start(p, n, nw) and q > 0:   # whole runs of one length at once
            size = q + 1 if p < rem * (q + 1) else q
            stop = min(b, rem * (q + 1)) if p < rem * (q + 1) else b
            k = (stop - p) // size
            if k > 1:
                keys = range(key, key + k)
                pads = 1 if pad in keys else 0
                flushes += (k - pads) * (size // LIMIT_COUNT_NUM + 1)
                pad_rows += pads * size
                p += k * size
                continue
        if key == pad:
            pad_rows += length
        else:
            flushes += length // LIMIT_COUNT_NUM + 1
        p = e
    return flushes, pad_rows


def _det_walk(tiling: EmbeddingTiling, b: int) -> tuple[int, int, int] | None:
    """(olo, hi, ohi) of block ``b`` of :func:`_det_kernel` on the assumed indices, None when it
    owns no row: it walks the sorted rows [olo, hi) backwards (from hi - 1), then [hi, ohi)
    forwards (the rest of its last index's run)."""
    n, nw = tiling.n_rows, tiling.num_weights
    lo, hi = _slice(n, tiling.block_dim, b)
    if lo >= hi:
        return None
    olo = min(hi, _run_end(lo - 1, n, nw)) if lo > 0 else lo
    if olo >= hi:
        return None
    return olo, hi, max(hi, _run_end(hi - 1, n, nw))


def _det_core_work(tiling: EmbeddingTiling, b: int) -> tuple[int, int, int, int] | None:
    """(rows, flushes, padding rows, lone index loads) of block ``b`` in one e-chunk pass of
    :func:`_det_kernel` on the assumed indices, None when it owns no row. Lone index loads: the
    previous core's last index (InitStandIndice), the row the backward walk stops at, this
    core's last index (ContinueCompute) and the row the forward walk stops at."""
    n = tiling.n_rows
    walk = _det_walk(tiling, b)
    if walk is None:
        return None
    olo, hi, ohi = walk
    lo = _slice(n, tiling.block_dim, b)[0]
    back, bpad = _det_piece_flushes(olo, hi, tiling)
    fwd, fpad = _det_piece_flushes(hi, ohi, tiling)
    lone = (1 if lo > 0 else 0) + (1 if olo > lo else 0) + 1 + (1 if ohi < n else 0)
    return ohi - olo, back + fwd, bpad + fpad, lone


def _det_sorted_rows(tiling: EmbeddingTiling, b: int) -> np.ndarray:
    """The sorted rows block ``b`` of :func:`_det_kernel` walks, in its order (:func:`_det_walk`;
    none when it owns no row)."""
    walk = _det_walk(tiling, b)
    if walk is None:
        return np.zeros(0, np.int64)
    olo, hi, ohi = walk
    return np.concatenate([np.arange(hi - 1, olo - 1, -1), np.arange(hi, ohi)])


def _assumed_positions(s: np.ndarray, n_rows: int, num_weights: int) -> np.ndarray:
    """The grad row of each sorted row in ``s`` under the assumed indices (:func:`_assumed_sorted`
    in closed form): the m-th row of index k's run is row k + m * numWeights."""
    nw = max(num_weights, 1)
    q, rem = divmod(n_rows, nw)
    if q == 0:
        return s.copy()
    a, edge = q + 1, rem * (q + 1)
    key = np.where(s < edge, s // a, rem + (s - edge) // q)
    start = np.where(s < edge, key * a, edge + (key - rem) * q)
    return key + (s - start) * nw


def _grad_line_hits(spec: DeviceSpec, tiling: EmbeddingTiling, grad_at: int,
                    walks: Mapping[int, np.ndarray]) -> list[dict[int, dict[int, int]]] | None:
    """Per e-chunk pass, per block: {bytes of a grad row's load that hit the L2: rows}, the
    blocks walking the sorted rows ``walks[b]`` (in order, one row a step, all blocks in step)
    over the caller's grad at byte address ``grad_at``; None when no two loads share an L2 line.
    The L2 holds lines (``l2.chunk``): a row (chunk) that does not fill its lines shares the
    first and last of them with its neighbours in memory, the rows of the neighbouring indices
    under the assumed pattern -- the rows an index's run neighbours in the sorted order, so the
    same core walks them one run apart. The first load to touch a line misses and brings it in;
    the others hit it (atlas-a2, 4096 x 64 fp32 rows: every other run of 8 rows hits, ~30
    cycles a 256 B row, not ~51). The lines of earlier passes stay in the L2 when grad fits."""
    l2 = spec.l2
    if l2 is None or not walks:
        return None
    line, item, emb = l2.chunk, 4, tiling.emb_dim     # fp32 rows (the caller's or CastGrad's)
    pitch = emb * item
    passes = [(c0, min(tiling.e_chunk, emb - c0)) for c0 in range(0, emb, tiling.e_chunk)]
    if grad_at % line == 0 and pitch % line == 0 and all(c0 * item % line == 0 and n * item % line == 0
                                                         for c0, n in passes):
        return None         # every row chunk fills whole lines of its own
    cores = list(walks)
    rows = np.concatenate([walks[b] for b in cores])
    pos = _assumed_positions(rows, tiling.n_rows, tiling.num_weights)
    step = np.concatenate([np.arange(len(walks[b])) for b in cores])
    core = np.repeat(np.arange(len(cores)), [len(walks[b]) for b in cores])
    keep = tiling.n_rows * pitch <= l2.size
    resident = np.zeros(0, np.int64)
    out = []
    for c0, n in passes:
        a = grad_at + pos * pitch + c0 * item
        e = a + n * item
        first, last = a // line, (e - 1) // line
        two = last != first
        lines = np.concatenate([first, last[two]])
        order = np.lexsort((np.concatenate([core, core[two]]), np.concatenate([step, step[two]]), lines))
        seen = lines[order]
        new = np.ones(len(seen), dtype=bool)
        new[1:] = seen[1:] != seen[:-1]
        if resident.size:
            new &= ~np.isin(seen, resident)
        hit = np.empty(len(seen), dtype=bool)
        hit[order] = ~new
        n_first = len(a)
        in_first = np.minimum(e, (first + 1) * line) - a
        h = np.where(hit[:n_first], in_first, 0)
        h[two] += np.where(hit[n_first:], e[two] - last[two] * line, 0)
        per: dict[int, dict[int, int]] = {}
        for i, b in enumerate(cores):
            vals, counts = np.unique(h[core == i], return_counts=True)
            per[b] = {int(v): int(c) for v, c in zip(vals, counts)}
        out.append(per)
        if keep:
            resident = np.union1d(resident, lines)
    return out


def _e_passes(emb: int, e_chunk: int) -> list[int]:
    """The elements of each e-chunk pass over a row of ``emb`` (the last one shorter)."""
    return [e_chunk] * (emb // e_chunk) + ([emb % e_chunk] if emb % e_chunk else [])


def _in_flight_step(spec: DeviceSpec, need: float, rs: float, in_flight: float, grad_from_l2: bool,
                    loaders: float, rg: float) -> tuple[bool, float]:
    """One step of the row kernels' fixed point on the transfers in flight: whether the store
    pool carries the ``need`` stores in flight at their rate ``rs`` and (rows read back from the
    L2) the L2 serves ``loaders`` loads at ``rg``; else the stores in flight to price next."""
    stores_fit = shared_rates(spec, 0, need)[1] >= rs * (1 - 1e-9)
    if stores_fit and (not grad_from_l2 or l2_read_rate(spec, loaders) == rg):
        return True, in_flight
    return False, in_flight if stores_fit else max(need, in_flight * 1.01)


def _est_det(spec: DeviceSpec, tiling: EmbeddingTiling, grad_from_l2: bool, grad_at: int = 0) -> Any:
    """:func:`_det_kernel` on its slowest core, every step in the order the kernel issues it. A
    row: the 4 B position load and the scalar's read of it, the grad row's load, then its Add
    beside the next row's 4 B index load and compare (the next position load waits for the Add:
    gradQue_'s one buffer). A flush (CopyOut): the atomic store of the accumulator, then
    PipeBarrier<PIPE_ALL> -- nothing else moves while it stores, and the next index load waits
    for the store instead of overlapping the Add (the 4 B count add with scale); its Duplicate
    overlaps the next loads. The lone index loads of the stand indices and the rows the walks
    stop at. Loads: every core has its row's load in flight at about the same time (their
    pool's rate among ``block_dim`` copies, or the L2's); stores: their pool's share among the
    stores the cores keep in flight on average (the cores drift apart: a flush is about one
    row in nine into 512 rows, atlas-a2 4096 x 2048: ~800 cycles a 8 KiB store, not the 817
    beside a load nor the 1,295 of 48 at once). The MTE2 head comes with the first index load,
    the MTE3 head with the first store (A-10).

    A grad row from HBM (at ``grad_at``) that shares an L2 line with a row loaded before it
    (:func:`_grad_line_hits`) reads those bytes from the L2: its load ends when both parts have
    (the simulator splits it into a miss on the GM link and a hit on the L2 link); the cores
    whose rows hit are off the GM link meanwhile, so the misses share it among fewer loads."""
    bd, emb, ec = tiling.block_dim, tiling.emb_dim, tiling.e_chunk
    assert spec.mte2 is not None and spec.mte3 is not None   # required of every Ascend spec
    st2, st3 = spec.mte2.startup, spec.mte3.startup
    cpo = spec.scalar.cycles_per_op
    passes = _e_passes(emb, ec)
    work = {b: w for b in range(bd) if (w := _det_core_work(tiling, b)) is not None}
    hits = None
    if not grad_from_l2:
        hits = _grad_line_hits(spec, tiling, grad_at, {b: _det_sorted_rows(tiling, b) for b in work})
    # the loads on the GM link at once: every core's, less those whose rows hit the L2
    on_gm = [float(bd)] * len(passes)
    if hits is not None:
        for i, per in enumerate(hits):
            rows = sum(sum(h.values()) for h in per.values())
            missing = sum(c for h in per.values() for v, c in h.items() if v < passes[i] * 4)
            on_gm[i] = bd * missing / max(rows, 1)
    small = dma_cycles(st2, 4, shared_rates(spec, bd, 0)[0])
    s1, s2 = math.ceil(cpo), math.ceil(2 * cpo)
    count = (math.ceil(cpo) + vector_cycles(spec, "Duplicate", "fp32", 8)) if tiling.scale else 0
    head = float(head_cycles(spec, "MTE2", bd, max(passes) * 4) + head_cycles(spec, "MTE3", bd)) if work else 0.0
    in_flight, loaders = 1.0, float(bd)
    from_l2 = grad_from_l2 or hits is not None
    # the stores (and L2 loads) in flight on average, from their share of the time: grad rows
    # CastGrad left in the L2 are hits on the L2 link, which the flushes' barriers spread apart
    # in time (as _est_row_kernel)
    for _ in range(8):
        rs = shared_rates(spec, 0, in_flight)[1]
        rg = l2_read_rate(spec, loaders) if from_l2 else 0.0
        total, busy, storing = head, {"MTE2": 0.0, "VECTOR": 0.0, "MTE3": 0.0, "SCALAR": 0.0}, 0.0
        loading = 0.0
        for b, (rows, flushes, pads, lone) in work.items():
            cyc, b_busy, b_store = head, {"MTE2": 0.0, "VECTOR": 0.0, "MTE3": 0.0, "SCALAR": 0.0}, 0.0
            b_load = 0.0
            for i, n in enumerate(passes):
                if grad_from_l2:
                    loads = float(rows * (st2 + math.ceil(n * 4 / rg)))
                    b_load += loads - rows * st2
                elif hits is None:
                    loads = float(rows * (st2 + lockstep_copy_cycles(spec, n * 4, 0, bd, False)[2]))
                else:           # each row: its miss on the GM link beside its hit on the L2 link
                    rl = shared_rates(spec, on_gm[i], 0)[0]
                    loads = 0.0
                    for h, k in hits[i][b].items():
                        miss, hit = n * 4 - h, math.ceil(h / rg) if h else 0
                        loads += k * (st2 + max(math.ceil(miss / rl) if miss else 0, hit))
                        b_load += k * hit
                add = vector_cycles(spec, "Add", "fp32", n)
                dup = vector_cycles(spec, "Duplicate", "fp32", n)
                store = dma_cycles(st3, n * 4, rs)
                if tiling.scale and n == passes[0]:
                    store += max(0, count - store) + dma_cycles(st3, 4, rs)
                added = rows - pads
                cyc += (rows * (small + s2) + loads + added * max(small + s1, add) + pads * (small + s1)
                        + flushes * (store + min(add, small + s1)) + lone * (small + s1) + dup)
                b_busy["MTE2"] += (rows + lone) * small + loads
                b_busy["VECTOR"] += added * add + flushes * dup
                b_busy["MTE3"] += flushes * store
                b_busy["SCALAR"] += rows * (s1 + 2 * s2) + lone * s1
                b_store += flushes * n * 4 / rs
            if cyc > total:
                total, busy, storing, loading = cyc, b_busy, b_store, b_load
        need = bd * storing / max(total, 1.0)
        loaders = max(1.0, bd * loading / max(total, 1.0))
        settled, in_flight = _in_flight_step(spec, need, rs, in_flight, from_l2, loaders, rg)
        if settled:
            break           # the links carry what the cores move at these rates
    read = tiling.n_rows * (emb * 4 + 8)
    written = int(_assumed_flushes(tiling) * emb * 4)
    return _est_launch(spec, total, busy, read, written, bd, tiling.ub_bytes, "EmbeddingDenseGradV2")


def _half_core_work(tiling: EmbeddingTiling, b: int) -> tuple[int, int, int, int, int, int] | None:
    """(rows, padding rows, accumulator-to-cache adds, stores to out, stores to the stage, cache
    resets of a padding run) of block ``b`` in one e-chunk pass of :func:`_half_kernel`'s row
    phase on the assumed indices, None when its slice is empty. Each run piece of the slice not
    under the padding index adds its rows, moves its accumulator to the cache after every
    LIMIT_COUNT_NUM + 1 rows and once at its end (the switch, the padding row or the slice end),
    then stores its cache: the slice's first and last index to the stage (both there when the
    slice is one index), the others to out; a padding index equal to the slice's first (last)
    index stores the cache to the stage at every row (the source quirk :func:`_half_kernel`
    keeps)."""
    n, nw, pad = tiling.n_rows, max(tiling.num_weights, 1), tiling.padding_idx
    lo, hi = _slice(n, tiling.block_dim, b)
    if lo >= hi:
        return None
    q, rem = divmod(n, nw)
    length = lambda k: q + 1 if k < rem else q      # noqa: E731 - rows of index k's run
    first, end = _run_key(lo, n, nw), _run_key(hi - 1, n, nw)
    rows = hi - lo
    pieces = [(first, min(hi, _run_end(lo, n, nw)) - lo)]
    if end != first:
        pieces.append((end, hi - max(lo, _run_start(hi - 1, n, nw))))
    caches = outs = pad_rows = resets = 0
    stages = rows * ((pad == first) + (pad == end))
    for i, (key, size) in enumerate(pieces):
        if key == pad:
            pad_rows += size
            resets += int(i == len(pieces) - 1)       # the slice ends in the padding run
        else:
            caches += size // (LIMIT_COUNT_NUM + 1) + 1
            stages += 2 if first == end else 1
    # the whole runs between: keys first + 1 .. end - 1, rem of them or fewer one row longer
    mid = max(0, end - first - 1)
    longer = max(0, min(end, rem) - (first + 1))
    caches += longer * ((q + 1) // (LIMIT_COUNT_NUM + 1) + 1) + (mid - longer) * (q // (LIMIT_COUNT_NUM + 1) + 1)
    outs += mid
    if first < pad < end:                             # the padding run is one of them
        pad_rows += length(pad)
        caches -= length(pad) // (LIMIT_COUNT_NUM + 1) + 1
        outs -= 1
    return rows, pad_rows, caches, outs, stages, resets


_PIPES = ("MTE2", "VECTOR", "MTE3", "SCALAR")


def _phase_cycles(pipes: Mapping[str, float]) -> float:
    """A core's cycles on its pipes (:func:`_half_row_phase`): its steps run in turn."""
    return sum(pipes[p] for p in _PIPES)


def _half_row_phase(spec: DeviceSpec, tiling: EmbeddingTiling, work: tuple[int, int, int, int, int, int], n: int,
                    rates: tuple[float, float], at_once: tuple[float, float], dirty: float) -> dict[str, float]:
    """One e-chunk pass of ``n`` elements of :func:`_half_kernel`'s row phase on a core with
    ``work`` (:func:`_half_core_work`), its loads and stores at ``rates`` (B/cycle): the cycles of
    each pipe (a row's steps, see :func:`_est_half`) and ("load", "store") the cycles its row
    loads and its stores move data. With ``dirty`` (:func:`_est_half`) a load (store) ends no
    sooner than the GM link carries the ``at_once`` loads (stores) of the cores and their
    write-backs."""
    rows, pads, caches, outs, stages, resets = work
    kdt = tiling.acc_dtype
    kitem = nx.dtype(kdt).itemsize
    assert spec.mte2 is not None and spec.mte3 is not None   # required of every Ascend spec
    st2, st3 = spec.mte2.startup, spec.mte3.startup
    (rl, rs), (loads, stores) = rates, at_once
    small = dma_cycles(st2, 4, shared_rates(spec, tiling.block_dim, 0)[0])
    load, out = dma_cycles(st2, n * kitem, rl), dma_cycles(st3, n * kitem, rs)
    stage = dma_cycles(st3, n * 4, rs) + dma_cycles(st3, 4, rs)
    if dirty > 0:
        cap = spec.bytes_per_cycle(spec.gm.bandwidth)
        load = max(load, int(st2) + math.ceil(loads * n * kitem * (1 + dirty) / cap))
        out = max(out, int(st3) + math.ceil(stores * n * kitem * dirty / cap))
        stage = max(stage, 2 * int(st3) + math.ceil(stores * (n * 4 + 4) * dirty / cap))
    add = vector_cycles(spec, "Add", "fp32", n)
    dup = vector_cycles(spec, "Duplicate", "fp32", n)
    dup8 = vector_cycles(spec, "Duplicate", "fp32", 8)     # int32 priced as fp32 (_cost_dtype)
    cast_in = vector_cycles(spec, f"Cast_{kdt}_fp32", kdt, n)
    cast_out = vector_cycles(spec, f"Cast_fp32_{kdt}", "fp32", n)
    cpo = spec.scalar.cycles_per_op
    return {"MTE2": rows * (2 * small + load),
            "VECTOR": (rows * cast_in + (rows - pads) * add + caches * (add + dup) + outs * (cast_out + dup)
                       + stages * (dup8 + dup) + resets * dup),
            "MTE3": outs * out + stages * stage,
            "SCALAR": rows * math.ceil(2 * cpo) + stages * math.ceil(cpo),
            "load": rows * (load - st2), "store": outs * (out - st3) + stages * (stage - 2 * st3)}


def _est_half(spec: DeviceSpec, tiling: EmbeddingTiling, dirty: float = 0.0) -> Any:
    """:func:`_half_kernel` (ProcessForHalf, uncast fp16/bf16 rows) per e-chunk pass: the row
    phase on the slowest core, SyncAll, the stage groups, SyncAll. Nothing in the kernel runs
    beside anything else -- every step waits for the one before through a flag (PIPE_MTE2_S,
    PIPE_MTE2_V, PIPE_V_S, PIPE_ALL, PIPE_V_MTE3, PIPE_MTE3_S) -- so a core's time is the sum of
    its steps (atlas-a2 4096 x 2048 fp16 into 32000, per row: the 4 B position and index loads,
    2 scalar cycles, the 4 KiB row load, its Cast and Add, the accumulator's Add into the cache
    and its Duplicate, the Cast to fp16, the 4 KiB store, the cache's Duplicate: 28 + 28 + 2 +
    428 + 51 + 66 + 66 + 49 + 39 + 421 + 49 = 1227 cycles in the simulator). With every run one
    row long the cores take the same steps at the same time: each load (store) at its pool's
    share among ``block_dim``; longer runs end at different rows on different cores, which then
    drift apart: a load (store) at its share among the loads (stores) the cores keep in flight on
    average (a fixed point, as :func:`_est_det`; atlas-a2 with 7 blocks into 512 rows: ~330
    cycles a 4 KiB row load in timing mode, not the 363 of 7 at once). The cores that finish the
    row phase last read their stage rows from the L2 together; the others have done the
    scalar's 2 x coreNum outIndex reads while they waited at SyncAll. The MTE2 head comes with
    the first load, the MTE3 head with the first store (A-10). The grad rows are the caller's
    fp16/bf16 tensor (no CastGrad): loads from HBM.

    ``dirty``: the dirty bytes each byte the launch allocates in a full write-back L2 evicts (as
    :func:`_est_row_kernel`). A row's load waits for the HBM write of the lines it evicts
    (Device.gm_transfer), so it ends no sooner than the GM link carries the loads in flight
    with their write-backs, a store no sooner than it carries the stores' write-backs
    (atlas-a2, 8192 x 4096 bf16 into 50000 rows, out 410 MB: 1,040 cycles an 8 KiB row load
    in timing mode, the 48 cores in step, not the 827 of the load alone)."""
    bd, emb, ec = tiling.block_dim, tiling.emb_dim, tiling.e_chunk
    kdt = tiling.acc_dtype
    kitem = nx.dtype(kdt).itemsize
    assert spec.mte2 is not None and spec.mte3 is not None   # required of every Ascend spec
    st2, st3 = spec.mte2.startup, spec.mte3.startup
    cpo = spec.scalar.cycles_per_op
    s_all = math.ceil(2 * bd * cpo)
    passes = _e_passes(emb, ec)
    work = {b: w for b in range(bd) if (w := _half_core_work(tiling, b)) is not None}
    # the stage groups of ProcessGmData: the slices' first and last indices, cut into groups
    ends = [_slice(tiling.n_rows, bd, b) for b in work]
    first_end = [_run_key(x, tiling.n_rows, tiling.num_weights) for lo, hi in ends for x in (lo, hi - 1)]
    groups: dict[int, list[int]] = {}
    for core, g0, g1, _key in half_stage_groups(first_end, bd) if first_end else []:
        groups.setdefault(core, []).append(g1 - g0)
    most = max((w[0] for w in work.values()), default=0)
    last = [b for b, w in work.items() if w[0] == most]        # the cores SyncAll waits for
    largest = max([n * kitem for n in passes] + [n * 4 for n in passes if groups]) if work else 0
    head = float(head_cycles(spec, "MTE2", bd, largest) + head_cycles(spec, "MTE3", bd)) if work else 0.0
    # every run one row long: every row of every core takes the same steps (a store each), so
    # the cores stay in step and each load (store) meets every core's; longer runs store at
    # different rows on different cores, which drift apart: a load (store) meets the loads
    # (stores) in flight on average, the fixed point below
    in_step = tiling.n_rows <= max(tiling.num_weights, 1)
    loaders = in_flight = float(bd) if in_step else 1.0
    for _ in range(8):
        rl, rs = shared_rates(spec, loaders, 0)[0], shared_rates(spec, 0, in_flight)[1]
        total, storing, loading = head, 0.0, 0.0
        busy = {"MTE2": 0.0, "VECTOR": 0.0, "MTE3": 0.0, "SCALAR": 0.0}
        for n in passes:
            cast_out = vector_cycles(spec, f"Cast_fp32_{kdt}", "fp32", n)
            add = vector_cycles(spec, "Add", "fp32", n)
            dup = vector_cycles(spec, "Duplicate", "fp32", n)
            out = dma_cycles(st3, n * kitem, rs)
            to_out = cast_out + out + dup
            at = {b: _half_row_phase(spec, tiling, w, n, (rl, rs), (loaders, in_flight), dirty)
                  for b, w in work.items()}
            slowest = max(at, key=lambda b: _phase_cycles(at[b]))
            mine = at[slowest]
            done = _phase_cycles(mine)
            # the other cores may end their rows first (a padding index equal to the slice's first
            # or last index stores the cache to the stage at every row): the slowest core's steps
            # after theirs meet no other core's loads or stores -- of its work, spread evenly over
            # its phase, what is left when they end runs at a copy's rates alone (atlas-a2, 4096 x
            # 1024 fp16 into 512 with paddingIdx 0: block 0's last 39 of 86 rows at ~620 cycles,
            # a 2 KiB load of 107 and a 4 KiB stage store of 310, not ~780)
            others = max((_phase_cycles(v) for b, v in at.items() if b != slowest), default=0.0)
            if 0 < others < done:
                beside = others / done
                alone = _half_row_phase(spec, tiling, work[slowest], n, (shared_rates(spec, 1, 0)[0],
                                        shared_rates(spec, 0, 1)[1]), (1.0, 1.0), dirty)
                mine = at[slowest] = {k: beside * v + (1 - beside) * alone[k] for k, v in mine.items()}
                done = others + (1 - beside) * _phase_cycles(alone)
            for v in at.values():
                storing += v["store"]
                loading += v["load"]
            for p in _PIPES:
                busy[p] += mine[p]
            # ProcessGmData: a group's stage rows loaded from the L2 and added (an accumulator to
            # the cache after LIMIT_COUNT_NUM + 1 of them and at the group's end), then stored to out
            end = done
            for b in work:
                late = b in last
                together = len(last) if late else bd - len(last)
                sload = dma_cycles(st2, n * 4, l2_read_rate(spec, together))
                t = sum(m * (sload + add) + (m // (LIMIT_COUNT_NUM + 1) + 1) * (add + dup) + to_out
                        for m in groups.get(b, []))
                end = max(end, done + (s_all if late else 0) + t)
                storing += len(groups.get(b, [])) * (out - st3)
                if b == slowest:
                    m_all = groups.get(b, [])
                    busy["MTE2"] += sum(m * sload for m in m_all)
                    busy["VECTOR"] += sum(m * add + (m // (LIMIT_COUNT_NUM + 1) + 1) * (add + dup)
                                          + cast_out + dup for m in m_all)
                    busy["MTE3"] += len(m_all) * out
                    busy["SCALAR"] += s_all
            total += end
        if in_step:
            break
        # every core's stores (loads) over the launch: their number in flight on average
        stores_fit, in_flight = _in_flight_step(spec, storing / max(total, 1.0), rs, in_flight, False, 0.0, 0.0)
        need = loading / max(total, 1.0)
        loads_fit = need <= loaders * (1 + 1e-9)
        loaders = loaders if loads_fit else max(need, loaders * 1.01)
        if stores_fit and loads_fit:
            break           # the pools carry what the cores move at these rates
    read = tiling.n_rows * (emb * kitem + 8)
    written = int(_assumed_flushes(tiling) * emb * kitem)
    return _est_launch(spec, total, busy, read, written, bd, tiling.ub_bytes, "EmbeddingDenseGradV2")


def _est_scale_v2(spec: DeviceSpec, tiling: EmbeddingTiling, acc_from_l2: bool) -> Any:
    """EmbeddingDenseGradV2ScaleKernel (A2, :func:`_scale_kernel`) on the busiest core (the
    ceil(numWeights / coreNum) rows of Tiling4Scale's first cores), every core doing the same at
    the same time. Per chunk pass (:func:`scale_passes`, the 0-element tail pass included) and
    row: the chunk load and the 4 B count load, the scalar's GetValue (the next row's loads wait
    for it), the Muls, the store. A row's load waits for a free in buffer (the Muls two rows
    back), its Muls for a free out buffer (the store two rows back), its store for the previous
    store: the max-plus recurrence of those steps, run row by row until its period settles."""
    emb, nw, bd = tiling.emb_dim, tiling.num_weights, tiling.scale_block_dim
    assert spec.mte2 is not None and spec.mte3 is not None   # required of every Ascend spec
    st2, st3 = spec.mte2.startup, spec.mte3.startup
    rows = -(-nw // max(bd, 1))
    scal = math.ceil(2 * spec.scalar.cycles_per_op)          # GetValue, 1/count
    mask = 256 // 4
    rl, _ = shared_rates(spec, bd, 0)
    count = dma_cycles(st2, 4, rl)
    busy = {"MTE2": 0.0, "VECTOR": 0.0, "MTE3": 0.0, "SCALAR": 0.0}
    # the step ends of the last two rows: scalar, Muls, store (-inf: no row yet)
    no = -math.inf
    s_end, m_end, w_end = [no, no], [no, no], [no, no]
    t = 0.0
    first = True
    for _, n in scale_passes(emb, tiling.e_chunk):
        former = n // mask * mask
        muls = (vector_cycles(spec, "Muls", "fp32", former) if former else 0) + \
               (vector_cycles(spec, "Muls", "fp32", n - former) if n > former else 0)
        beside, store, alone = lockstep_copy_cycles(spec, n * 4, n * 4, bd, acc_from_l2)
        ld_first, ld = st2 + alone, st2 + beside           # the first load of the stage moves alone
        wr = st3 + store
        done = 0
        deltas: list[float] = []
        while done < rows:
            load = ld_first if first else ld
            first = False
            # loads in order after the last GetValue, into the in buffer the Muls two rows back freed
            start = max(t, s_end[1], m_end[0])
            se = start + load + count + scal
            me = max(se, m_end[1], w_end[0]) + muls
            we = max(me, w_end[1]) + wr
            deltas.append(we - w_end[1])
            s_end, m_end, w_end = [s_end[1], se], [m_end[1], me], [w_end[1], we]
            done += 1
            # a settled period (the last 4 rows alike): the remaining rows of the pass at that period
            if len(deltas) >= 6 and len(set(deltas[-4:])) == 1 and done < rows:
                shift = (rows - done) * deltas[-1]
                s_end = [x + shift for x in s_end]
                m_end = [x + shift for x in m_end]
                w_end = [x + shift for x in w_end]
                done = rows
        busy["MTE2"] += rows * (ld + count)
        busy["VECTOR"] += rows * muls
        busy["MTE3"] += rows * wr
        busy["SCALAR"] += rows * scal
    passes = len(scale_passes(emb, tiling.e_chunk))
    total = max(w_end[1], 0.0)
    return _est_launch(spec, total, busy, nw * (emb * 4 + 4 * passes), nw * emb * 4, bd,
                       scale_ub_bytes(tiling.e_chunk), "EmbeddingDenseGradV2ScaleKernel")


def _est_v1(spec: DeviceSpec, tiling: EmbeddingTiling, grad_from_l2: bool, idx_item: int) -> Any:
    """EmbeddingDenseGrad (Atlas training series model): per block of ub_indices positions the
    index load, the rows (one copy when whole aligned rows, else one per row), then one atomic
    add per row; the next block waits for those adds. The cores do the same at the same time,
    so loads share the link with the other cores' loads and adds with their adds.
    Deterministic: every core scans every block and moves only the rows of its own out range
    (owner 0 is the busiest under the assumed indices)."""
    bd, nb, emb, ec = tiling.block_dim, tiling.ub_indices, tiling.emb_dim, tiling.e_chunk
    n_rows, nw = tiling.n_rows, max(tiling.num_weights, 1)
    assert spec.mte2 is not None and spec.mte3 is not None   # required of every Ascend spec
    st2, st3 = spec.mte2.startup, spec.mte3.startup
    passes = _e_passes(emb, ec)
    rl, _ = shared_rates(spec, bd, 0)
    _, rs = shared_rates(spec, 0, bd)
    rate = l2_read_rate(spec, bd) if grad_from_l2 else rl
    scan = spec.scalar.cycles_per_op
    if tiling.deterministic:
        blocks = [min(nb, n_rows - s) for s in range(0, n_rows, nb)]
        # owner 0 holds out rows [0, rows_per_owner): under the assumed pattern the positions i
        # with i mod numWeights below that bound, in n_rows // numWeights + 1 stretches
        mine = (n_rows // nw) * min(tiling.rows_per_owner, nw) + min(n_rows % nw, tiling.rows_per_owner)
        busy_blocks = min(len(blocks), -(-mine // nb) + n_rows // nw + 1)
        row_blocks: list[int] = []
    else:
        rows = -(-n_rows // bd)
        blocks = [min(nb, rows - s) for s in range(0, rows, nb)]
        mine, busy_blocks = rows, len(blocks)
        row_blocks = blocks if ec == emb and emb % 8 == 0 else []
    # the largest load (an index block, a block's rows or one row chunk) prices the MTE2 head (A-10)
    largest = max([k * idx_item for k in blocks] + [k * emb * 4 for k in row_blocks]
                  + ([] if row_blocks else [n * 4 for n in passes]), default=0)
    total = float(head_cycles(spec, "MTE2", bd, largest) + head_cycles(spec, "MTE3", bd))
    busy = {"MTE2": 0.0, "MTE3": 0.0, "SCALAR": float(sum(blocks) * scan)}
    for n in passes:
        idx_loads = sum(dma_cycles(st2, k * idx_item, rl) for k in blocks)
        if row_blocks:      # one copy of the block's whole rows
            rows_load = sum(dma_cycles(st2, k * emb * 4, rate) for k in row_blocks)
        else:
            rows_load = mine * dma_cycles(st2, n * 4, rate)
        adds = mine * dma_cycles(st3, n * 4, rs)
        scans = sum(blocks[busy_blocks:]) * scan    # blocks with none of this core's rows
        total += idx_loads + rows_load + adds + scans
        busy["MTE2"] += idx_loads + rows_load
        busy["MTE3"] += adds
    return _est_launch(spec, total, busy, n_rows * (idx_item + emb * 4), n_rows * emb * 4, bd,
                       tiling.ub_bytes, "EmbeddingDenseGrad")


def _est_v1_scale(spec: DeviceSpec, tiling: EmbeddingTiling, acc_from_l2: bool, idx_item: int) -> Any:
    """EmbeddingDenseGradScale (Atlas training series model): each owner core scans every index
    (load, then count on SCALAR, one block after the other), then loads, scales and stores its
    rows one at a time (all cores at the same time)."""
    bd, nb, emb = tiling.scale_block_dim, tiling.ub_indices, tiling.emb_dim
    n_rows = tiling.n_rows
    rows = tiling.rows_per_owner
    assert spec.mte2 is not None and spec.mte3 is not None   # required of every Ascend spec
    st2, st3 = spec.mte2.startup, spec.mte3.startup
    # every core reads the same index blocks at about the same time: one misses, the rest hit
    idx_rate = l2_read_rate(spec, bd) if spec.l2 is not None else shared_rates(spec, bd, 0)[0]
    blocks = [min(nb, n_rows - s) for s in range(0, n_rows, nb)]
    largest = max([k * idx_item for k in blocks] + [emb * 4])     # prices the MTE2 head (A-10)
    count = (head_cycles(spec, "MTE2", bd, largest) + sum(dma_cycles(st2, k * idx_item, idx_rate) for k in blocks)
             + (n_rows - blocks[-1]) * spec.scalar.cycles_per_op)
    muls = vector_cycles(spec, "Muls", "fp32", emb)
    rl, _ = shared_rates(spec, bd, 0)
    _, rs = shared_rates(spec, 0, bd)
    load = dma_cycles(st2, emb * 4, l2_read_rate(spec, bd) if acc_from_l2 else rl)
    store = dma_cycles(st3, emb * 4, rs)
    body = count + head_cycles(spec, "VECTOR", bd) + head_cycles(spec, "MTE3", bd) + rows * (load + muls + store)
    busy = {"MTE2": count + rows * load, "VECTOR": rows * muls, "MTE3": rows * store,
            "SCALAR": n_rows * spec.scalar.cycles_per_op}
    return _est_launch(spec, body, busy, bd * n_rows * idx_item + tiling.num_weights * emb * 4,
                       tiling.num_weights * emb * 4, bd, tiling.ub_bytes, "EmbeddingDenseGradScale")


def _est_tik_sort(spec: DeviceSpec, tiling: EmbeddingTiling) -> Any:
    """The TIK Sort (:func:`_tik_sort_kernel`): one core, every step waiting for the previous one,
    so its cycles are the sum of its instructions' costs at the uncontended single-core rates
    (the workspace it reads back was written just before: L2 rate when the device has one)."""
    n, nb, batches = tiling.n_rows, tiling.sort_tile, tiling.sort_runs
    rl, rs = shared_rates(spec, 1, 1)
    rl2 = l2_read_rate(spec, 1)
    assert spec.mte2 is not None and spec.mte3 is not None   # required of every Ascend spec
    st2, st3 = spec.mte2.startup, spec.mte3.startup
    cpo = spec.scalar.cycles_per_op
    ld = lambda b: dma_cycles(st2, b, rl)          # noqa: E731  (host-written indices: HBM)
    ldw = lambda b: dma_cycles(st2, b, rl2)        # noqa: E731  (workspace written earlier in the launch)
    stw = lambda b: dma_cycles(st3, b, rs)         # noqa: E731
    busy = {"MTE2": 0.0, "MTE3": 0.0, "VECTOR": 0.0, "SCALAR": 0.0}

    def add(pipe: str, c: float) -> float:
        busy[pipe] += c
        return c

    def sort_batch(count: int) -> float:
        v = (vector_cycles(spec, "Sort32", "fp32", count)
             + sort_passes(count) * vector_cycles(spec, "MrgSort", "fp32", count))
        return add("SCALAR", math.ceil(nb * cpo)) + add("MTE2", ld(count * 4)) + add("VECTOR", v)

    def moveout(count: int) -> float:
        return (add("MTE3", 2 * stw(count * 4)) + add("MTE2", 2 * ldw(count * 4))
                + add("VECTOR", 2 * vector_cycles(spec, "Copy", "fp32", count))
                + add("SCALAR", math.ceil(3 * count * cpo)) + add("MTE3", 2 * stw(count * 4)))

    # the largest load (a batch of indices, or a tuning block) prices the MTE2 head (A-10)
    largest = 4 * (n if batches == 1 else min(nb, n))
    total = float(sum(head_cycles(spec, p, 1, largest if p == "MTE2" else 0) for p in ("MTE2", "VECTOR", "MTE3")))
    if batches == 1:
        total += sort_batch(n) + moveout(n)
    else:
        sizes = [min(nb, n - b * nb) for b in range(batches)]
        for c in sizes:
            total += sort_batch(c) + add("MTE3", 2 * stw(c * 4))
        for tail in range(batches - 1):
            total += add("MTE2", 2 * ldw(sizes[0] * 4))
            carry = sizes[0]
            for i in range(1, batches - tail):
                total += add("MTE2", 2 * ldw(sizes[i] * 4))
                total += add("VECTOR", vector_cycles(spec, "MrgSort", "fp32", carry + sizes[i]))
                total += add("MTE3", 2 * stw(sizes[i - 1] * 4))
                carry = carry + sizes[i] - sizes[i - 1]
            total += add("MTE3", 2 * stw(carry * 4))
        for c in sizes:
            total += add("MTE2", 2 * ldw(c * 4)) + moveout(c)
    for b0 in range(0, n, nb):                      # tune()
        c = min(nb, n - b0)
        total += add("MTE2", 2 * ldw(c * 4)) + add("MTE3", 2 * stw(c * 4))
    return _est_launch(spec, total, busy, n * 4, n * 8, 1, _tik_sort_ub(nb), "Sort")


def _est_row_kernel(spec: DeviceSpec, tiling: EmbeddingTiling, dirty: float = 0.0,
                    grad_from_l2: bool = False) -> Any:
    """:func:`_row_kernel`: the busiest core's rows one after the other. A row: two 4 B loads,
    the scalar's reads, the grad row's load, the Add (and the scalar's bookkeeping); a flush:
    the atomic store (and the 4 B count add with scale), the barrier, the Duplicate. All cores
    load at about the same time: each load gets its pool's rate among ``block_dim`` concurrent
    copies; a store gets its pool's and its link's share among the stores the cores keep in
    flight on average (every row flushing, the cores store at once: atlas-a2 4096 x 2048 rows into
    32000, about 10 B/cycle a store in timing mode, not the 13.75 of a store alone).

    The launch takes the longer of that program and the GM link's: the cores' rows start
    together, so the link idles through every row's steps off it (the small loads, the start-ups,
    the scalar, the Add) and then carries every core's row; a core's flush goes to the L2 and
    overlaps the other cores' loads, unless they flush too (the share of rows that flush: all of
    them into 32000 rows, one in eight into 512). atlas-a2, 4096 x 2048 rows into 512 with half
    the HBM: 104k cycles against timing mode's 100k (the cores drift apart a little, so the link
    idles less), where each load at the link's share among all 48 cores, then every flush after
    it, was 112.5k.

    ``dirty``: the dirty bytes each byte a grad row's load allocates in a full write-back L2
    evicts (the launch's write-back over its allocations, from with_writebacks). The simulator
    joins a load to the HBM write of the lines it evicts (Device.gm_transfer), and the cores'
    loads start together, so a row's load ends no sooner than the GM link carries every core's
    row and its write-back (atlas-a2, 4096 x 2048 rows into 32000 after MemSet filled the L2 with
    dirty lines: about 1,050 cycles a row against the load's 828 alone)."""
    bd = tiling.block_dim
    rows = -(-tiling.n_rows // bd)
    flushes = max(1.0, rows * _row_kernel_flushes(tiling) / max(tiling.n_rows, 1))
    assert spec.mte2 is not None and spec.mte3 is not None   # required of every Ascend spec
    # a load's pool rate among the cores' loads (the GM link is priced on its own below)
    rl = spec.mte2.base + spec.mte2.shared / bd
    # grad rows CastGrad left in the L2: hits at the L2's read rate over the L2 link, shared
    # among the loads the cores keep in flight on average -- the flushes (~850 cycles, at
    # different rows on different cores) spread the cores' loads apart, so they rarely meet
    # (atlas-a2 4096 x 2048 rows into 512: ~113 cycles an 8 KiB row, about its rate alone, not
    # the 176 of 48 loads at once)
    assert not grad_from_l2 or spec.l2 is not None      # grad_from_l2 needs an L2 (_fits_l2)
    cap = spec.bytes_per_cycle(spec.l2.bandwidth if grad_from_l2 and spec.l2 is not None else spec.gm.bandwidth)
    loaders = float(bd)
    coincide = min(1.0, flushes / max(rows, 1))   # the other cores flushing beside a core's flush
    st2, st3 = spec.mte2.startup, spec.mte3.startup
    cpo = spec.scalar.cycles_per_op
    passes = _e_passes(tiling.emb_dim, tiling.e_chunk)
    in_flight = 1.0
    for _ in range(8):      # the stores (and L2 loads) in flight on average, from their share of the time
        rs = shared_rates(spec, 0, in_flight)[1]
        rg = l2_read_rate(spec, loaders) if grad_from_l2 else rl
        # the largest load (a grad row chunk) prices the MTE2 head (A-10)
        head = float(sum(head_cycles(spec, p, bd, max(passes) * 4 if p == "MTE2" else 0)
                         for p in ("MTE2", "VECTOR", "MTE3")))
        head += 2 * vector_cycles(spec, "Duplicate", "fp32", passes[0])        # InitQue
        busy = {"MTE2": 0.0, "VECTOR": 0.0, "MTE3": 0.0, "SCALAR": 0.0}
        program = link = head
        storing = off_mte2 = loading = 0.0  # the core's cycles on its other pipes (its steps are serial)
        for j, n in enumerate(passes):
            small = 2 * dma_cycles(st2, 4, rl)
            add = vector_cycles(spec, "Add", "fp32", n)
            scal = math.ceil(5 * cpo)
            flush = dma_cycles(st3, n * 4, rs) + vector_cycles(spec, "Duplicate", "fp32", n)
            if tiling.scale and j == 0:
                flush += math.ceil(cpo) + vector_cycles(spec, "Duplicate", "fp32", 8) + dma_cycles(st3, 4, rs)
            program += rows * (small + dma_cycles(st2, n * 4, rg) + scal + add) + flushes * flush
            off_mte2 += rows * (scal + add) + flushes * flush
            link += (rows * (small + st2 + scal + add) + tiling.n_rows * n * 4 * (1 + dirty) / cap
                     + coincide * flushes * flush)
            busy["VECTOR"] += rows * add + flushes * vector_cycles(spec, "Duplicate", "fp32", n)
            busy["MTE3"] += flushes * dma_cycles(st3, n * 4, rs)
            busy["SCALAR"] += rows * scal
            storing += flushes * n * 4 / rs
            loading += rows * n * 4 / rg
        total = max(program, link)
        busy["MTE2"] = total - head - off_mte2      # the loads take what the other steps leave
        need = bd * storing / total
        loaders = max(1.0, bd * loading / total)
        settled, in_flight = _in_flight_step(spec, need, rs, in_flight, grad_from_l2, loaders, rg)
        if settled:
            break           # the links carry what the cores move at these rates
    est = _est_launch(spec, total, busy, tiling.n_rows * (tiling.emb_dim * 4 + 8),
                      int(_row_kernel_flushes(tiling) * tiling.emb_dim * 4), bd, tiling.ub_bytes,
                      "EmbeddingDenseGradV2")
    return _with_scale(spec, tiling, est)


def _with_scale(spec: DeviceSpec, tiling: EmbeddingTiling, est: Any) -> Any:
    """ProcessAndScale (keys 1, 11): counts zeroed (InitWorkspace), two SyncAlls, then the scale
    kernel's rows, inside the accumulation kernel's launch."""
    if not tiling.scale:
        return est
    bd = tiling.block_dim
    _, rs = shared_rates(spec, 0, 1)
    scale = _est_scale_v2(spec, tiling, _fits_l2(spec, tiling.num_weights * tiling.emb_dim * 4))
    assert spec.mte3 is not None        # required of every Ascend spec (devices/spec.py)
    zero = dma_cycles(spec.mte3.startup, -(-tiling.num_weights // bd) * 4, rs)
    return Estimate(**{**est.__dict__, "cycles": est.cycles + zero + scale.cycles - spec.launch.overhead,
                       "pipe_busy": {p: est.pipe_busy.get(p, 0) + scale.pipe_busy.get(p, 0)
                                     for p in set(est.pipe_busy) | set(scale.pipe_busy)},
                       "bytes_read": est.bytes_read + scale.bytes_read,
                       "bytes_written": est.bytes_written + scale.bytes_written})


def _est_small_dim(spec: DeviceSpec, tiling: EmbeddingTiling, grad_from_l2: bool = False) -> Any:
    """:func:`_small_dim_kernel` on its busiest core (the last: tailCopyRow rows), every step
    waiting for the previous one. A tile: the index and grad loads, Duplicate + Cast + Sort +
    Extract (Copy) + Cast of the indices, the accumulator's Duplicate; a row: the scalar's reads
    and the Add; a run (every index distinct under the timing-mode assumption i mod numWeights,
    so one per row when gradRow <= numWeights): the atomic store and the Duplicate. All cores
    load at about the same time (a tile's copies start together on every core that still has
    rows; grad rows from the L2 when CastGrad just wrote them and they fit): the other cores'
    fewer rows end first and leave the link to the last core (``drain_cycles``); one store in
    flight."""
    bd, emb, nw = tiling.block_dim, tiling.emb_dim, tiling.num_weights
    lo, hi = small_dim_rows(tiling.n_rows, bd, bd - 1)
    rows = hi - lo
    per_core = [b - a for a, b in (small_dim_rows(tiling.n_rows, bd, i) for i in range(bd))]
    keys = _assumed_indices(tiling.n_rows, nw)[lo:hi]
    _, rs = shared_rates(spec, 0, 1)
    assert spec.mte2 is not None and spec.mte3 is not None   # required of every Ascend spec
    st2, st3 = spec.mte2.startup, spec.mte3.startup
    cpo = spec.scalar.cycles_per_op
    # the largest load of this core (a tile's indices, its grad rows in one copy or a row)
    # prices the MTE2 head (A-10)
    most = min(tiling.sd_max_rows, rows)
    largest = max(most * 4, most * emb * 4 if emb % 8 == 0 else emb * 4) if rows > 0 else 0
    total = float(sum(head_cycles(spec, p, bd, largest if p == "MTE2" else 0) for p in ("MTE2", "VECTOR", "MTE3")))
    busy = {"MTE2": 0.0, "VECTOR": 0.0, "MTE3": 0.0, "SCALAR": 0.0}
    runs_total = 0
    for s in range(0, rows, max(min(tiling.sd_max_rows, rows), 1)):
        n = min(tiling.sd_max_rows, rows - s)
        na = _align(n, 32)
        runs = len(np.unique(keys[s:s + n]))
        runs_total += runs
        tile_rows = [min(max(r - s, 0), tiling.sd_max_rows) for r in per_core]

        def rate(active: int, from_l2: bool) -> float:
            return l2_read_rate(spec, active) if from_l2 else shared_rates(spec, active, 0)[0]
        idx_load = int(st2) + math.ceil(drain_cycles([k * 4 for k in tile_rows], lambda a, x: x / rate(a, False)))
        if emb % 8 == 0:        # a tile's rows in one copy
            grad_load = int(st2) + math.ceil(drain_cycles([k * emb * 4 for k in tile_rows],
                                                          lambda a, x: x / rate(a, grad_from_l2)))
        else:                   # a copy per row
            grad_load = math.ceil(drain_cycles(
                tile_rows, lambda a, k: k * dma_cycles(st2, emb * 4, rate(a, grad_from_l2))))
        load = idx_load + grad_load
        srt = vector_cycles(spec, "Sort32", "fp32", na) + sort_passes(na) * vector_cycles(spec, "MrgSort", "fp32", na)
        vec = (vector_cycles(spec, "Duplicate", "fp32", na) + vector_cycles(spec, "Cast_int32_fp32", "int32", n)
               + srt + vector_cycles(spec, "Copy", "fp32", na) + vector_cycles(spec, "Cast_fp32_int32", "fp32", n)
               + vector_cycles(spec, "Duplicate", "fp32", emb))
        add = n * vector_cycles(spec, "Add", "fp32", emb)
        scal = math.ceil((2 * n + 2 * (n - runs) + runs) * cpo)
        store = runs * dma_cycles(st3, emb * 4, rs)
        dup = runs * vector_cycles(spec, "Duplicate", "fp32", emb)
        total += load + vec + add + scal + store + dup
        busy["MTE2"] += load
        busy["VECTOR"] += vec + add + dup
        busy["MTE3"] += store
        busy["SCALAR"] += scal
        if tiling.scale:
            # the run length's 4 B atomic add (_add_count): SetValue and the 8-lane Duplicate run
            # while MTE3 stores the run's row, the 4 B store follows that store on MTE3
            hidden = dma_cycles(st3, emb * 4, rs)
            count = math.ceil(cpo) + vector_cycles(spec, "Duplicate", "fp32", 8)
            total += runs * (max(0, count - hidden) + dma_cycles(st3, 4, rs))
    written = int(tiling.n_rows * emb * 4 * runs_total / max(rows, 1))
    est = _est_launch(spec, total, busy, tiling.n_rows * (emb * 4 + 4), min(written, tiling.n_rows * emb * 4),
                      bd, tiling.ub_bytes, "EmbeddingDenseGradV2")
    if not tiling.scale:
        return est
    # ProcessAndScale<true, false>: counts zeroed, SyncAlls, then the scale kernel (as _est_row_kernel)
    scale = _est_scale_v2(spec, tiling, _fits_l2(spec, nw * emb * 4))
    zero = dma_cycles(st3, -(-nw // bd) * 4, rs)
    return Estimate(**{**est.__dict__, "cycles": est.cycles + zero + scale.cycles - spec.launch.overhead,
                       "pipe_busy": {p: est.pipe_busy.get(p, 0) + scale.pipe_busy.get(p, 0)
                                     for p in set(est.pipe_busy) | set(scale.pipe_busy)},
                       "bytes_read": est.bytes_read + scale.bytes_read,
                       "bytes_written": est.bytes_written + scale.bytes_written})


def _row_kernel_flushes(tiling: EmbeddingTiling) -> float:
    """Flushes of the row kernel under the assumed indices (one e-chunk pass): a run of r rows
    flushes after every 11th row (LIMIT_COUNT_NUM rows held before the Add) and at its end."""
    n, nw = tiling.n_rows, max(tiling.num_weights, 1)
    q, rem = divmod(n, nw)
    if q == 0:
        return float(n)
    per = lambda r: -(-r // (LIMIT_COUNT_NUM + 1))   # noqa: E731
    return float(rem * per(q + 1) + (nw - rem) * per(q))


def estimate(spec: DeviceSpec, t: Mapping[str, TensorDesc | None], attrs: Mapping[str, Any],
             tiling: EmbeddingTiling) -> Any:
    """Closed-form cycles of the call: the launches of :func:`launch` one after another (see the
    section comment for the assumptions on index values and the L2)."""
    if tiling.block_dim > spec.vector_cores:
        # blocks in waves (a block_dim override): not modelled here; None lets the replay of the
        # kernel program estimate it, which places the waves as the simulator does
        return None
    out = t["out"]
    parts: list = []
    nw, emb, n_rows = tiling.num_weights, tiling.emb_dim, tiling.n_rows
    if tiling.path == "empty":
        if out is not None and out.numel:
            parts.append(_est_zero(spec, tiling.zero_block_dim, [(out.numel, out.dtype.itemsize)]))
        return _finish(spec, parts, tiling)
    assert out is not None              # validated (or inferred): out is required
    acc_ws = tiling.region("acc32") is not None
    acc_item = 4 if acc_ws else out.dtype.itemsize
    acc_bytes = nw * emb * acc_item
    if tiling.path == "v2":
        # where opsim.run puts the operands and the workspace: the grad rows' L2 lines
        at = fresh_placement(spec, [(n, d.nbytes) for n, d in t.items() if d is not None]
                             + [("workspace", tiling.workspace)])
        g32 = tiling.region("grad32")
        grad_at = at["workspace"] + g32[0] if tiling.cast_grad and g32 is not None else at["grad"]
        return _estimate_v2(spec, tiling, out, acc_item, acc_bytes, grad_at)
    targets = [(nw * emb, acc_item)] + ([(nw, 4)] if tiling.region("counts") else [])
    parts.append(_into_acc(_est_zero(spec, tiling.zero_block_dim, targets)))
    grad_bytes = n_rows * emb * 4
    if tiling.cast_grad:
        parts.append(_est_cast(spec, _planned(tiling.cast_grad_tiling), tiling.grad_dtype, "fp32", False, "CastGrad"))
    # a tensor written by an earlier launch is read back from L2 if it and what the call
    # touched since fit: grad32 (after it, the sort and the rows the flushes add into); the
    # accumulator (after it, the rows the gathers read)
    flushed = int(_assumed_flushes(tiling)) * emb * acc_item
    grad_l2 = tiling.cast_grad and _fits_l2(spec, grad_bytes + 16 * n_rows + min(flushed, acc_bytes))
    read_bytes = n_rows * emb * (4 if tiling.cast_grad else nx.dtype(tiling.grad_dtype).itemsize)
    acc_l2 = _fits_l2(spec, acc_bytes + read_bytes + (grad_bytes if tiling.cast_grad else 0))
    idx_item = nx.dtype(tiling.index_dtype).itemsize
    if tiling.cast_index_tiling is not None:
        parts.append(_est_cast(spec, tiling.cast_index_tiling, tiling.index_dtype, "int32", False, "CastIndices"))
        idx_item = 4
    parts.append(_into_acc(_est_v1(spec, tiling, grad_l2, idx_item)))
    if tiling.scale:
        parts.append(_into_acc(_est_v1_scale(spec, tiling, acc_l2, idx_item)))
    if tiling.cast_out_tiling is not None:
        parts.append(_est_cast(spec, tiling.cast_out_tiling, "fp32", out.dtype.name, acc_l2, "CastOut"))
    return _finish(spec, parts, tiling)


def _estimate_v2(spec: DeviceSpec, tiling: EmbeddingTiling, out: TensorDesc, acc_item: int, acc_bytes: int,
                 grad_at: int = 0) -> Any:
    """The launches of :func:`_launch_v2` in order; the rows the accumulation kernel gathers
    start at byte address ``grad_at``."""
    nw, emb, n_rows = tiling.num_weights, tiling.emb_dim, tiling.n_rows
    parts: list = []
    grad_bytes = n_rows * emb * 4
    if tiling.cast_grad:
        parts.append(_est_cast(spec, _planned(tiling.cast_grad_tiling), tiling.grad_dtype, "fp32", False, "CastGrad"))
    if tiling.index_cast:
        parts.append(_est_cast(spec, _planned(tiling.cast_index_tiling), tiling.index_dtype, "int32", False,
                                "CastIndices"))
    if tiling.small_dim_kernel:                           # no Sort, no ZerosLike (see _launch_v2)
        parts.append(_into_acc(_est_zero(spec, tiling.zero_block_dim, [(nw * emb, acc_item)])))
        parts[-1] = Estimate(**{**parts[-1].__dict__, "notes": "MemSet"})
        grad_l2 = tiling.cast_grad and _fits_l2(spec, grad_bytes + 4 * n_rows + acc_bytes)
        parts.append(_into_acc(_est_small_dim(spec, tiling, grad_l2)))
        if tiling.cast_out_tiling is not None:
            acc_l2 = _fits_l2(spec, acc_bytes + n_rows * emb * 4 * (2 if tiling.cast_grad else 1))
            parts.append(_est_cast(spec, tiling.cast_out_tiling, "fp32", out.dtype.name, acc_l2, "CastOut"))
        return _finish(spec, parts, tiling)
    parts.append(_est_tik_sort(spec, tiling))
    parts.append(_into_acc(_est_zero(spec, tiling.zero_block_dim, [(nw * emb, acc_item)])))
    parts.append(_into_acc(_est_zero(spec, tiling.zero_block_dim, [(nw * emb, acc_item)])))
    parts[-1] = Estimate(**{**parts[-1].__dict__, "notes": "MemSet"})
    flushed = int(_assumed_flushes(tiling)) * emb * acc_item
    grad_l2 = tiling.cast_grad and _fits_l2(spec, grad_bytes + 16 * n_rows + min(flushed, acc_bytes))
    read_bytes = n_rows * emb * (4 if tiling.cast_grad else nx.dtype(tiling.grad_dtype).itemsize)
    acc_l2 = _fits_l2(spec, acc_bytes + read_bytes + (grad_bytes if tiling.cast_grad else 0))
    loads_evict = None
    if tiling.row_kernel:
        parts.append(_into_acc(_est_row_kernel(spec, tiling, grad_from_l2=grad_l2)))
        if not grad_l2:         # its grad rows' loads allocate in the L2: priced with what they evict
            loads_evict = (len(parts) - 1, lambda dirty: _into_acc(_est_row_kernel(spec, tiling, dirty)))
    elif tiling.det_kernel:     # the deterministic kernel (counts and scale in its launch)
        parts.append(_into_acc(_with_scale(spec, tiling, _est_det(spec, tiling, grad_l2, grad_at))))
    else:                       # ProcessForHalf: its grad rows' loads allocate in the L2, as above
        parts.append(_into_acc(_with_scale(spec, tiling, _est_half(spec, tiling))))
        loads_evict = (len(parts) - 1,
                       lambda dirty: _into_acc(_with_scale(spec, tiling, _est_half(spec, tiling, dirty))))
    if tiling.cast_out_tiling is not None:
        parts.append(_est_cast(spec, tiling.cast_out_tiling, "fp32", out.dtype.name, acc_l2, "CastOut"))
    return _finish(spec, parts, tiling, loads_evict)


def _into_acc(est: Any) -> Any:
    """``est``, a launch storing into the accumulator (the zero fills, the accumulation and scale
    kernels): a later one rewrites the accumulator's lines the L2 still holds (with_writebacks)."""
    return dataclasses.replace(est, stores_into="acc")


def _finish(spec: DeviceSpec, parts: list, tiling: EmbeddingTiling,
            loads_evict: tuple[int, Callable[[float], Any]] | None = None) -> Any:
    # a write-back L2 evicts dirty lines to HBM between and within the launches (the zeroed
    # output of 262 MB, then MemSet's, overflow atlas-a2's 192 MB L2): priced per launch, a
    # launch storing into no more lines than the largest tensor the call writes (the flushes
    # add into the accumulator's rows again and again)
    nw, emb, rows = tiling.num_weights, tiling.emb_dim, tiling.n_rows
    distinct = max(nw * emb * 4, rows * emb * 4 if tiling.cast_grad else 0, rows * 16)
    priced = with_writebacks(spec, parts, distinct=distinct)
    if loads_evict is not None:
        # (the launch at this index, priced given the dirty bytes a byte it allocates evicts):
        # each of its loads waits for the write-back of what it evicts, which the launch's bytes
        # alone do not say -- priced again with the write-back with_writebacks found (its bytes,
        # and so every launch's write-back, do not change). The launch takes the longer of that
        # program and with_writebacks' bound on the whole launch (the HBM link the bottleneck:
        # the loads' share of it is in both, so they are not added)
        at, price = loads_evict
        e = priced[at]
        wb, alloc = e.gm_bytes_written, e.l2_bytes_allocated
        if wb and alloc:
            waiting = price(wb / alloc)
            if waiting.cycles > e.cycles:
                priced = list(priced)
                priced[at] = dataclasses.replace(waiting, gm_bytes_written=wb, l2_bytes_allocated=alloc)
    parts = priced
    est = sequence(parts, "embedding",
                   f"{len(parts)} launch(es); indices assumed i mod numWeights (as timing mode)",
                   launch_cycles=tuple((e.notes, int(e.cycles)) for e in parts))
    return Estimate(**{**est.__dict__, "workspace_bytes": int(tiling.workspace)})


OP = OpDef(
    name=NAME,
    inputs=("grad", "indices"),
    outputs=("out",),
    attrs={"num_weights": None, "padding_idx": -1, "scale_grad_by_freq": False, "deterministic": None},
    products=PRODUCTS,
    validate=validate,
    plan=plan,
    launch=launch,
    golden=golden,
    example=example,
    infer=infer,
    dtypes=supported_dtypes,
    workspace=lambda tiling: tiling.workspace,
    summary="embedding gradient: scatter-add of grad rows by index (sorted, atomic flushes)",
    required=frozenset({"num_weights"}),
    check_data=check_data,
    is_empty=is_empty,
    estimate=estimate,
    example_shapes=example_shapes,
    tiling_keys=OVERRIDE_KEYS,
)
