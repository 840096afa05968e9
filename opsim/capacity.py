"""``opsim capacity OP --device D``: what fits, evaluated from the device spec.

Three sections, each row carrying the numbers it came from:

- **on-chip**: the largest tile per core the operator's tiling accepts in the UB (binary search
  on the ``tile_length`` override, for single and double buffering), and for matrix operators
  the largest fractal-aligned cube tiles that fit L0A/L0B/L0C and L1;
- **device memory**: the largest shapes whose operands, outputs and workspace fit GM, found by
  scaling the leading dimension of the operands of the operator's example call (and each integer
  attribute that sizes an output, e.g. the embedding's ``num_weights``: the largest vocabulary);
- **documented limits**: the seeds' limits evaluated from this spec (e.g. the embedding
  ``scaleGradByFreq`` limit on the Atlas training series), with the constant each one
  assumes.

Every operator in the registry gets the first two generically; documented limits come from a
hook ``OpDef.documented_limits(spec, dtype)`` when the operator declares one, or from the seed
formulas below.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from opsim.devices.spec import DeviceSpec

__all__ = ["CapacityRow", "capacity", "format_table", "embedding_scale_limit"]

INT32_MAX = 2147483647
INT32_INF = 2139095040          # the seed's "INT32_INF" (0x7F800000, the fp32 +inf bit pattern)
# RESERVE_SIZE 16 KiB + one 32 B block (docs/sources.md#embedding-ub-limit: 196608 - 16416 = 180192)
EMBEDDING_RESERVE = 16384 + 32


@dataclass(frozen=True)
class CapacityRow:
    section: str     # "on-chip" | "device memory" | "documented limit"
    item: str
    value: Any
    detail: str = ""


# ---------------------------------------------------------------------------------------------
# the embedding limit (seed aclnnEmbeddingDenseBackward, docs/sources.md#embedding-ub-limit)
# ---------------------------------------------------------------------------------------------

def embedding_budget(spec: DeviceSpec) -> tuple[int, str]:
    """The UB bytes the V1 (TIK) kernel plans with: the device file's budget or the UB size."""
    table = spec.kernels.get("embedding_dense_backward", {}) if spec.kernels else {}
    if "ub_budget" in table:
        return int(table["ub_budget"]), "kernels.embedding_dense_backward.ub_budget"
    assert spec.ub is not None              # an Ascend (training) spec: the UB is required
    return int(spec.ub.size), "ub.size"


def embedding_counts_size(num_weights: int, core_num: int) -> int:
    """The seed's ``countsSize = numWeights / coreNum + numWeights % coreNum`` (integer division)."""
    return num_weights // core_num + num_weights % core_num


def embedding_scale_limit(spec: DeviceSpec, num_weights: int, index_dtype: str) -> dict[str, Any]:
    """The largest embeddingDim with scaleGradByFreq on (Atlas training series).

    Seed: ``embeddingDim < (180192 − countsSize·4)/36`` (int32 indices) and
    ``(180192 − countsSize·8)/20`` (int64); 180192 = budget − 16416 with the 192 KiB budget
    (docs/sources.md#embedding-ub-limit). Uses ``kernels.ascend.embedding_backward.scale_limit`` when the operator
    module provides it, else evaluates the seed formula here from the spec.
    """
    budget, budget_key = embedding_budget(spec)
    idx_bytes = 8 if index_dtype in ("int64", "INT64") else 4
    divisor = 4 * (32 // idx_bytes) + 4          # 36 for int32, 20 for int64
    core_num = spec.cores.aic
    counts = embedding_counts_size(num_weights, core_num)
    constant = budget - EMBEDDING_RESERVE
    bound = (constant - counts * idx_bytes) / divisor
    largest = math.ceil(bound) - 1 if bound > 0 else 0   # embeddingDim < bound (strict)
    out: dict[str, Any] = {"constant": constant, "divisor": divisor, "counts_size": counts, "core_num": core_num,
           "bound": bound, "max_embedding_dim": max(largest, 0), "budget": budget, "budget_key": budget_key,
           "index_bytes": idx_bytes, "source": "seed formula (opsim.capacity)"}
    from opsim.kernels.ascend.embedding_backward import scale_limit
    try:
        theirs = scale_limit(spec, num_weights, index_dtype)
    except Exception as exc:  # keep the seed formula, say why the operator's was not used
        out["source"] += f"; kernels.ascend.embedding_backward.scale_limit failed: {exc}"
        return out
    if isinstance(theirs, (int, np.integer)):
        out["max_embedding_dim"] = int(theirs)
        out["source"] = "opsim.kernels.ascend.embedding_backward.scale_limit"
    elif isinstance(theirs, Mapping):
        out.update({k: v for k, v in theirs.items()})
        out["source"] = "opsim.kernels.ascend.embedding_backward.scale_limit"
    return out


EMBEDDING_NUM_WEIGHTS = (1000, 32000, 50257, 128000, 250000)


def _embedding_limits(spec: DeviceSpec, dtype: str | None) -> list[CapacityRow]:
    rows: list[CapacityRow] = []
    if spec.series == "training":
        budget, key = embedding_budget(spec)
        assert spec.ub is not None          # training series: an Ascend spec
        note = (f"budget {budget} B from {key}" + (f" (the UB is {spec.ub.size} B; the documented "
                f"constant assumes 192 KiB)" if budget != spec.ub.size else ""))
        for idx, div, ib in (("int32", 36, 4), ("int64", 20, 8)):
            rows.append(CapacityRow(
                "documented limit", f"scaleGradByFreq, {idx} indices",
                f"embeddingDim < ({budget - EMBEDDING_RESERVE} - countsSize*{ib})/{div}",
                f"countsSize = numWeights/coreNum + numWeights%coreNum, coreNum = {spec.cores.aic}; {note}"))
        for nw in EMBEDDING_NUM_WEIGHTS:
            for idx in ("int32", "int64"):
                lim = embedding_scale_limit(spec, nw, idx)
                rows.append(CapacityRow(
                    "documented limit", f"max embeddingDim, numWeights={nw}, {idx}",
                    lim["max_embedding_dim"],
                    f"countsSize {lim['counts_size']}: < {lim['bound']:.2f}; {lim['source']}"))
    elif spec.series in ("a2", "a3"):
        rows += [
            CapacityRow("documented limit", "grad last dim (embeddingDim) for high precision", 14336,
                        "seed: beyond 14336 precision (and deterministic performance) is not guaranteed"),
            CapacityRow("documented limit", "grad rows after flattening to 2-D", INT32_MAX, "INT32_MAX (seed)"),
            CapacityRow("documented limit", "numWeights", INT32_MAX, "INT32_MAX (seed)"),
            CapacityRow("documented limit", "indices elements for high performance", INT32_INF,
                        "INT32_INF = 2139095040 (seed)"),
        ]
    return rows


def _elementwise_limits(spec: DeviceSpec, dtype: str | None) -> list[CapacityRow]:
    return [CapacityRow("documented limit", "tensor dimensions", 8, "0-8 dimensions (seed)")]


def _flce_limits(spec: DeviceSpec, dtype: str | None) -> list[CapacityRow]:
    return [CapacityRow("documented limit", "vocabulary V with softmax given", ">= 128",
                        "V < 128 is rejected with 161002 (docs/sources.md#flce-checks)"),
            CapacityRow("documented limit", "products", "Atlas A2, A3", "361001 elsewhere (seed)")]


def _dsp_limits(spec: DeviceSpec, dtype: str | None) -> list[CapacityRow]:
    rows = []
    if spec.private is not None:
        dt = dtype or "fp32"
        for weight in (False, True):
            for reduction, red_label in ((0, "reduction none"), (2, "reduction mean/sum")):
                label = f"{'with' if weight else 'no'} weight, {red_label}"
                dloss = "dloss (one per element)" if reduction == 0 else "dloss[0]"
                rows.append(CapacityRow("derived limit", f"private-storage (_p) elements, {label}",
                                        _dsp_private_limit(spec, dt, weight, reduction),
                                        f"x, y, {dloss}, dx{', w' if weight else ''} and the library's "
                                        f"working buffers in {spec.private.capacity} B of private memory "
                                        f"per core"))
    return rows


def _dsp_private_limit(spec: DeviceSpec, dtype: str, weight: bool, reduction: int) -> int:
    """The largest input_size a _p call accepts: bisected over the library's own plan, which
    counts the working area (it grows with the tile, so with the size) beside the operands."""
    from opsim.kernels import dsp
    from opsim.kernels.common import OpError, TensorDesc
    from opsim.simulator import numerics as nx
    dt = nx.dtype(dtype)

    def fits(n: int) -> bool:
        t = {"input_x": TensorDesc((n,), dt), "input_y": TensorDesc((n,), dt),
             "dloss": TensorDesc((n if reduction == 0 else 1,), dt), "dx": TensorDesc((n,), dt)}
        if weight:
            t["weight"] = TensorDesc((n,), dt)
        try:
            dsp.plan(spec, t, {"storage": "private", "reduction": reduction})
        except OpError:
            return False
        return True

    assert spec.private is not None
    lo, hi = 0, spec.private.capacity // dt.itemsize + 1    # fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


LIMITS: dict[str, Callable[[DeviceSpec, str | None], list[CapacityRow]]] = {
    "embedding_dense_backward": _embedding_limits,
    "mse_loss_backward": _elementwise_limits,
    "binary_cross_entropy_backward": _elementwise_limits,
    "fused_linear_cross_entropy_loss_grad": _flce_limits,
    "binarycrossentropygrad": _dsp_limits,
}


# ---------------------------------------------------------------------------------------------
# generic: UB tile and device memory
# ---------------------------------------------------------------------------------------------

def _example_call(opdef: Any, spec: DeviceSpec, dtype: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    from opsim.kernels.common import desc_of
    rng = np.random.default_rng(0)
    try:
        ex = opdef.example(rng, spec, dtype) if dtype else opdef.example(rng, spec)
    except TypeError:
        ex = opdef.example(rng, spec)
    names = set(opdef.inputs) | set(opdef.optional) | set(opdef.outputs)
    descs = {k: desc_of(v) for k, v in ex.items() if k in names and v is not None}
    attrs = dict(opdef.attrs)
    attrs.update({k: v for k, v in ex.items() if k not in names})
    return descs, attrs


def _full_descs(opdef: Any, spec: DeviceSpec, descs: Mapping[str, Any], attrs: Mapping[str, Any]) -> dict[str, Any]:
    full = {n: descs.get(n) for n in (*opdef.inputs, *opdef.optional)}
    outs = {n: descs[n] for n in opdef.outputs if n in descs}
    if len(outs) < len(opdef.outputs) and opdef.infer is not None:
        inferred = opdef.infer(spec, full, attrs)
        for n in opdef.outputs:
            outs.setdefault(n, inferred.get(n))
    full.update(outs)
    return full


def _fits_tile(opdef: Any, spec: DeviceSpec, descs: Mapping[str, Any], attrs: Mapping[str, Any],
               tile: int, buffer_num: int) -> bool | None:
    from opsim.kernels.common import OpError
    try:
        opdef.plan(spec, descs, attrs, {"tile_length": tile, "buffer_num": buffer_num})
        return True
    except OpError as exc:
        if exc.code == 561002:
            return False
        return None          # the operator does not take these overrides
    except Exception:
        return None


def _ub_rows(opdef: Any, spec: DeviceSpec, descs: Mapping[str, Any], attrs: Mapping[str, Any]) -> list[CapacityRow]:
    rows: list[CapacityRow] = []
    local = spec.ub.size if spec.ub is not None else (spec.private.capacity if spec.private else 0)
    mem = "UB" if spec.ub is not None else "private memory"
    for bn in (1, 2):
        if _fits_tile(opdef, spec, descs, attrs, 32, bn) is None:
            return rows
        lo, hi = 0, max(32, local)
        while lo < hi:                       # largest tile_length the plan accepts
            mid = (lo + hi + 1) // 2
            if _fits_tile(opdef, spec, descs, attrs, mid, bn):
                lo = mid
            else:
                hi = mid - 1
        tiling = opdef.plan(spec, descs, attrs, {"tile_length": lo, "buffer_num": bn}) if lo else None
        used = getattr(tiling, "ub_bytes", None)
        rows.append(CapacityRow("on-chip", f"largest tile per core, buffer_num={bn}",
                                f"{lo} elements",
                                f"{used} of {local} B of {mem}" if used is not None else f"{mem} {local} B"))
    return rows


def _cube_rows(spec: DeviceSpec, dtype: str | None) -> list[CapacityRow]:
    if spec.cube is None or spec.l0a is None:
        return []
    item = 2 if dtype in (None, "fp16", "bf16") else 4
    frac = spec.cube.m
    rows = []
    for name, buf, per in (("L0A (baseM x baseK)", spec.l0a, item), ("L0B (baseK x baseN)", spec.l0b, item),
                           ("L0C (baseM x baseN, fp32)", spec.l0c, 4)):
        if buf is None:
            continue
        elems = buf.size // per
        half = elems // 2                   # ping-pong halves
        side = int(math.isqrt(half)) // frac * frac
        rows.append(CapacityRow("on-chip", f"largest square {name} tile, double-buffered",
                                f"{side} x {side}", f"{buf.size} B = {elems} elements of {per} B"))
    if spec.l1 is not None:
        rows.append(CapacityRow("on-chip", "L1 elements (A1 + B1 stages)", spec.l1.size // item,
                                f"{spec.l1.size} B of L1"))
    return rows


# wall-clock budget of the exact search for one memory row: a plan on a huge shape can be slow
# (a matmul tiling walks its tiles), so past it the row reports the verified lower bound
SEARCH_BUDGET_S = 3.0


def _memory_rows(opdef: Any, spec: DeviceSpec, descs: Mapping[str, Any], attrs: Mapping[str, Any]) -> list[CapacityRow]:
    """For each group of operands sharing a leading dimension (rows, vocabulary, ...) the largest
    value of that dimension whose operands, outputs and workspace fit GM, the others as in the
    operator's example call; the same for each integer attribute that sizes an output."""
    from opsim.kernels.common import TensorDesc
    cap = spec.gm.capacity
    rows: list[CapacityRow] = []
    inputs = {n: d for n, d in descs.items() if d is not None and n not in opdef.outputs}

    def total_bytes(d: Mapping[str, Any], a: Mapping[str, Any]) -> int:
        full = _full_descs(opdef, spec, d, a)
        nbytes = sum(x.nbytes for x in full.values() if x is not None)
        try:
            ws = int(opdef.workspace(opdef.plan(spec, full, a, None)) or 0)
        except Exception:
            ws = 0
        return nbytes + ws

    def scaled(group: int, s: int) -> dict[str, Any]:
        return {n: TensorDesc((s, *d.shape[1:]), d.dtype) if d.ndim and d.shape[0] == group else d
                for n, d in inputs.items()}

    def search(fits: Callable[[int], bool], lo_known: int, guess: int) -> tuple[int, bool]:
        return _largest(fits, max(lo_known, 2 * guess), lo_known, time.monotonic() + SEARCH_BUDGET_S)

    groups = sorted({d.shape[0] for d in inputs.values() if d.ndim and d.shape[0] > 1})
    for g in groups:
        names = [n for n, d in inputs.items() if d.ndim and d.shape[0] == g]
        try:
            b1, b2 = total_bytes(scaled(g, g), attrs), total_bytes(scaled(g, 2 * g), attrs)
        except Exception as exc:
            rows.append(CapacityRow("device memory", f"largest {'/'.join(names)} rows", "n/a",
                                    f"example call failed: {exc}"))
            continue
        per = (b2 - b1) / g
        if per <= 0:
            continue
        guess = int((cap - (b1 - per * g)) // per)
        def rows_fit(k: int, g: int = g) -> bool:
            return total_bytes(scaled(g, k), attrs) <= cap
        best, exact = search(rows_fit, g, guess)
        shapes = ", ".join(f"{n} {[best, *inputs[n].shape[1:]]}" for n in names)
        others = [n for n in inputs if n not in names]
        rows.append(CapacityRow(
            "device memory", f"largest leading dimension of {'/'.join(names)}",
            shapes if exact else f">= {best} rows ({shapes})",
            (f"{total_bytes(scaled(g, best), attrs)} of {cap} B of {spec.gm.kind}; " if exact else
             f"search stopped after {SEARCH_BUDGET_S:.0f} s (slow plan on huge shapes); ")
            + f"{per:.0f} B per row" + (f"; other operands as the example: "
                                         f"{', '.join(f'{n} {list(inputs[n].shape)}' for n in others)}"
                                         if others else "")))
    for name, value in attrs.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            continue
        try:
            a1 = total_bytes(inputs, {**attrs, name: value})
            a2 = total_bytes(inputs, {**attrs, name: 2 * value})
        except Exception:
            continue
        if a2 > a1:
            per_unit = (a2 - a1) / value
            guess = int((cap - (a1 - per_unit * value)) // per_unit)
            def attr_fits(v: int, name: str = name) -> bool:
                return total_bytes(inputs, {**attrs, name: v}) <= cap
            largest, exact = search(attr_fits, value, guess)
            rows.append(CapacityRow("device memory", f"largest {name}", largest if exact else f">= {largest}",
                                    f"with the other operands of the example call "
                                    f"({', '.join(f'{n} {list(d.shape)}' for n, d in inputs.items())}); "
                                    f"{per_unit:.0f} B per unit of {name}"))
    return rows


def _largest(fits: Callable[[int], bool], hi: int, lo: int = 0, deadline: float | None = None) -> tuple[int, bool]:
    """(largest k in [lo, hi] with fits(k), exact?) for a monotone ``fits`` with fits(lo) true;
    stops at ``deadline`` with the largest k verified so far.

    The search first gallops up from ``lo`` (each probe at most doubles the size), then bisects:
    a plan whose cost grows with the size (FLCE walks its vocabulary) then never starts a call
    many times longer than the last one, so the deadline holds -- a first probe at ``hi`` took
    minutes where the budget is seconds."""
    def ok_at(k: int) -> bool:
        try:
            return fits(k)
        except Exception:    # a plan that refuses the size (index overflow, ...) does not fit
            return False
    while lo < hi:
        if deadline is not None and time.monotonic() > deadline:
            return lo, False
        probe = max(2 * lo, lo + 1)
        if probe >= hi:
            break
        if ok_at(probe):
            lo = probe
        else:
            hi = probe - 1
            break
    while lo < hi:
        if deadline is not None and time.monotonic() > deadline:
            return lo, False
        mid = (lo + hi + 1) // 2
        if ok_at(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo, True


def capacity(op: str, device: str | DeviceSpec, dtype: str | None = None,
             overrides: Mapping[str, Any] | None = None) -> list[CapacityRow]:
    """The capacity table of ``op`` on ``device`` (optionally with what-if overrides)."""
    from opsim.kernels import registry
    from opsim.api import device_spec
    spec = device_spec(device, overrides)
    rows: list[CapacityRow] = []
    try:
        opdef = registry.get(op)
    except KeyError as exc:
        opdef = None
        missing = exc.args[0]
    if opdef is not None:
        if opdef.products and spec.series not in opdef.products:
            # as the call itself would be refused (check_product): no capacity to speak of
            raise ValueError(f"{op} is not supported on {spec.name} (series {spec.series}); supported "
                             f"products: {', '.join(opdef.products)}")
        if dtype is not None and dtype not in opdef.dtypes(spec):
            raise ValueError(f"{op} on {spec.name} supports dtypes {', '.join(opdef.dtypes(spec))}, "
                             f"not {dtype}")
        descs, attrs = _example_call(opdef, spec, dtype)
        descs = _full_descs(opdef, spec, descs, attrs)
        rows += _ub_rows(opdef, spec, descs, attrs)
        if op == "fused_linear_cross_entropy_loss_grad":
            rows += _cube_rows(spec, dtype)
        rows += _memory_rows(opdef, spec, descs, attrs)
        if opdef.documented_limits is not None:
            rows += list(opdef.documented_limits(spec, dtype))
    else:
        rows.append(CapacityRow("note", "operator", "not registered",
                                f"{missing}; on-chip and device-memory rows need the operator"))
    if opdef is None or opdef.documented_limits is None:
        provider = LIMITS.get(op)
        if provider is not None:
            rows += provider(spec, dtype)
    if opdef is None and op not in LIMITS:
        raise KeyError(missing)
    return rows


def format_table(rows: Sequence[CapacityRow], title: str = "") -> str:
    """A plain-text table: section, item, value, detail."""
    head = ("section", "item", "value", "detail")
    body = [(r.section, r.item, str(r.value), r.detail) for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head[:3])]
    lines = [title] if title else []
    lines.append("  ".join(h.ljust(w) for h, w in zip(head[:3], widths)) + "  " + head[3])
    lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 6)
    for b in body:
        lines.append("  ".join(c.ljust(w) for c, w in zip(b[:3], widths)) + "  " + b[3])
    return "\n".join(lines)
