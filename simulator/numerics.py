"""Numeric formats, rounding casts and precision checks for the opsim functional model.

The contract (see docs/sources.md#half-emulation, #precision-standards) is the one an Ascend vector
unit implements: an instruction computes in fp32 and rounds *once* to its
destination dtype with round-to-nearest-even (RNE).  numpy's fp32→fp16 and
ml_dtypes' fp32→bf16 conversions are RNE, so the hot path (:func:`round_to`) is
a plain ``astype``.  Everything slower (directed rounding modes, round-to-odd,
float→int, int→float) lives in :func:`cast` and is exact for every input.

Two traps this module exists to close:

* **Double rounding from fp64.**  ml_dtypes converts fp64→bf16 *via fp32*, so
  ``1 + 2**-8 + 2**-30`` becomes 1.0 instead of ``1 + 2**-7``.  :func:`cast`
  narrows fp64 through a round-to-odd fp32 intermediate, which is provably
  innocuous (fp32 has ≥ p+2 bits for both half formats).
* **Silent promotion.**  ``bf16_array * 0.1`` is fp32 in numpy 2.  Kernels use
  :func:`const` to build constants of the right dtype explicitly.

Assumptions (not publicly documented for the hardware, chosen here):

* ``CAST_NONE`` behaves as ``CAST_RINT`` for every lossy conversion, including
  float→int (Ascend C documents NONE as "RINT when lossy" for float narrowing;
  we extend that to float→int rather than assuming truncation).
* float→int saturates to the integer range, and NaN converts to 0.
* int→int narrowing saturates (numpy would wrap).
* float→bool is ``x != 0`` (so NaN → True, as in numpy/C); bool→number is 0/1.
* No flush-to-zero: subnormals of every format are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import ml_dtypes
import numpy as np

__all__ = [
    "AclDataType",
    "DType",
    "FP32",
    "FP16",
    "BF16",
    "FP64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "UINT8",
    "BOOL",
    "ALL_DTYPES",
    "FLOAT_DTYPES",
    "ROUND_MODES",
    "THRESHOLDS",
    "dtype",
    "from_acl",
    "cast",
    "cast_into",
    "round_to",
    "to_f32",
    "const",
    "ulp_distance",
    "relative_errors",
    "ecosystem_check",
    "mixed_tolerance_check",
]


# ---------------------------------------------------------------------------
# Data types
# ---------------------------------------------------------------------------


class AclDataType(IntEnum):
    """``aclDataType`` codes from CANN ``acl_base.h`` (docs/sources.md#acl-enums)."""

    ACL_DT_UNDEFINED = -1
    ACL_FLOAT = 0
    ACL_FLOAT16 = 1
    ACL_INT8 = 2
    ACL_INT32 = 3
    ACL_UINT8 = 4
    ACL_INT16 = 6
    ACL_UINT16 = 7
    ACL_UINT32 = 8
    ACL_INT64 = 9
    ACL_UINT64 = 10
    ACL_DOUBLE = 11
    ACL_BOOL = 12
    ACL_BF16 = 27


@dataclass(frozen=True)
class DType:
    """A tensor element type as the simulator sees it.

    ``np_dtype`` is the numpy storage dtype (ml_dtypes' bfloat16 for bf16),
    ``acl`` the ``aclDataType`` code used on the host API boundary.
    """

    name: str
    np_dtype: np.dtype
    acl: int
    itemsize: int
    is_float: bool

    def __str__(self) -> str:
        return self.name


def _mk(name: str, np_type: Any, acl: AclDataType, is_float: bool) -> DType:
    npd = np.dtype(np_type)
    return DType(name=name, np_dtype=npd, acl=int(acl), itemsize=npd.itemsize, is_float=is_float)


FP32 = _mk("fp32", np.float32, AclDataType.ACL_FLOAT, True)
FP16 = _mk("fp16", np.float16, AclDataType.ACL_FLOAT16, True)
BF16 = _mk("bf16", ml_dtypes.bfloat16, AclDataType.ACL_BF16, True)
FP64 = _mk("fp64", np.float64, AclDataType.ACL_DOUBLE, True)
INT8 = _mk("int8", np.int8, AclDataType.ACL_INT8, False)
INT16 = _mk("int16", np.int16, AclDataType.ACL_INT16, False)
INT32 = _mk("int32", np.int32, AclDataType.ACL_INT32, False)
INT64 = _mk("int64", np.int64, AclDataType.ACL_INT64, False)
UINT8 = _mk("uint8", np.uint8, AclDataType.ACL_UINT8, False)
BOOL = _mk("bool", np.bool_, AclDataType.ACL_BOOL, False)

ALL_DTYPES: tuple[DType, ...] = (FP32, FP16, BF16, FP64, INT8, INT16, INT32, INT64, UINT8, BOOL)
FLOAT_DTYPES: tuple[DType, ...] = (FP32, FP16, BF16, FP64)

_ALIASES: dict[str, DType] = {
    "fp32": FP32, "float32": FP32, "float": FP32,
    "fp16": FP16, "float16": FP16, "half": FP16,
    "bf16": BF16, "bfloat16": BF16,
    "fp64": FP64, "float64": FP64, "double": FP64,
    "int8": INT8, "int16": INT16, "int32": INT32, "int64": INT64,
    "uint8": UINT8, "bool": BOOL,
}
_BY_ACL: dict[int, DType] = {d.acl: d for d in ALL_DTYPES}
_BY_NP: dict[np.dtype, DType] = {d.np_dtype: d for d in ALL_DTYPES}


def _allowed_names() -> str:
    return ", ".join(_ALIASES)


def from_acl(code: int) -> DType:
    """Map an ``aclDataType`` code to a :class:`DType`.

    Raises ``ValueError`` for codes the simulator does not model (e.g.
    ``ACL_UINT16``), naming the code and listing the supported ones.
    """
    try:
        return _BY_ACL[int(code)]
    except (KeyError, TypeError, ValueError):
        supported = ", ".join(f"{AclDataType(d.acl).name}={d.acl}" for d in ALL_DTYPES)
        raise ValueError(f"unsupported aclDataType {code!r}; supported codes: {supported}") from None


def dtype(x: Any) -> DType:
    """Normalise anything that names a dtype to a :class:`DType`.

    Accepts a :class:`DType`; a name or alias (case-insensitive; note that
    ``"float"`` means fp32 as in ACL/torch, while the Python type ``float`` is
    numpy's float64); a numpy dtype, numpy scalar type or ``ml_dtypes.bfloat16``;
    an ndarray (its dtype); or an integer ``aclDataType`` code.
    """
    if isinstance(x, DType):
        return x
    if x is None:  # np.dtype(None) would silently mean float64
        raise ValueError(f"unknown dtype None; allowed names: {_allowed_names()}")
    if isinstance(x, str):
        key = x.strip().lower()
        if key in _ALIASES:
            return _ALIASES[key]
        raise ValueError(f"unknown dtype {x!r}; allowed names: {_allowed_names()}")
    # bool is an int subclass: True would silently mean ACL_FLOAT16.
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        return from_acl(int(x))
    if isinstance(x, np.ndarray):
        x = x.dtype
    try:
        npd = np.dtype(x)
    except TypeError:
        npd = None
    if npd is not None and npd in _BY_NP:
        return _BY_NP[npd]
    raise ValueError(f"unknown dtype {x!r}; allowed names: {_allowed_names()}")


# ---------------------------------------------------------------------------
# Float-format geometry used by the rounding code
# ---------------------------------------------------------------------------

# Unsigned integer views of the narrow float formats (same width as the float).
_UINT_VIEW: dict[np.dtype, type] = {
    FP16.np_dtype: np.uint16,
    BF16.np_dtype: np.uint16,
    FP32.np_dtype: np.uint32,
    FP64.np_dtype: np.uint64,
}

ROUND_MODES: tuple[str, ...] = ("none", "rint", "round", "floor", "ceil", "trunc", "odd")


def _check_mode(mode: str) -> str:
    if mode not in ROUND_MODES:
        raise ValueError(f"unknown round mode {mode!r}; allowed modes: {', '.join(ROUND_MODES)}")
    # CAST_NONE = CAST_RINT whenever the conversion is lossy; for an exact
    # conversion every mode agrees, so NONE can be treated as RINT everywhere.
    return "rint" if mode == "none" else mode


def _src_kind(npd: np.dtype) -> str:
    """Classify a source dtype: 'float', 'int' or 'bool' (bf16's numpy kind is 'V')."""
    if npd in (FP16.np_dtype, BF16.np_dtype, FP32.np_dtype, FP64.np_dtype):
        return "float"
    if npd == np.bool_:
        return "bool"
    if np.issubdtype(npd, np.integer):
        return "int"
    raise TypeError(f"cannot cast from dtype {npd}")


def _float_widens(src: np.dtype, dst: np.dtype) -> bool:
    """True if every value of float dtype ``src`` is exactly representable in ``dst``.

    fp16 and bf16 are incomparable (fp16 has more precision, bf16 more range),
    so neither widens to the other.
    """
    if src == dst:
        return True
    order = {FP16.np_dtype: 1, BF16.np_dtype: 1, FP32.np_dtype: 2, FP64.np_dtype: 3}
    return order[dst] > order[src]


def _step(r: np.ndarray, away: np.ndarray) -> np.ndarray:
    """The representable neighbour of ``r`` one step away from (or toward) zero.

    Sign-magnitude encodings of adjacent same-sign values differ by exactly 1,
    so this is ±1 on the bit pattern — including the max-finite↔inf step,
    which is what lets the mode rules below decide overflow per IEEE.  Where
    ``r`` is ±0 and ``away`` is false the result wraps to junk; callers only
    use it where the conversion was inexact, which excludes that case.
    """
    uint_t = _UINT_VIEW[r.dtype]
    rb: np.ndarray = r.view(uint_t)
    one = uint_t(1)
    return np.where(away, rb + one, rb - one).astype(uint_t, copy=False).view(r.dtype)


def _select(
    r: np.ndarray,
    other: np.ndarray,
    inexact: np.ndarray,
    away: np.ndarray,
    tie: np.ndarray | None,
    negative: np.ndarray,
    mode: str,
) -> np.ndarray:
    """Pick a mode's result from the RNE result ``r`` and the other neighbour.

    For an inexact value the exact result lies strictly between two adjacent
    target values: ``r`` and ``other``; ``away`` says whether ``other`` is
    the one farther from zero.  Exact values keep ``r``.
    """
    uint_t = _UINT_VIEW[r.dtype]
    rb: np.ndarray = r.view(uint_t)
    ob: np.ndarray = other.view(uint_t)
    tz = np.where(away, rb, ob)  # neighbour toward zero
    az = np.where(away, ob, rb)  # neighbour away from zero
    if mode == "trunc":
        chosen = tz
    elif mode == "floor":
        chosen = np.where(negative, az, tz)
    elif mode == "ceil":
        chosen = np.where(negative, tz, az)
    elif mode == "odd":
        # Adjacent encodings alternate parity; max-finite is odd and inf even,
        # so round-to-odd saturates on overflow.
        chosen = np.where((tz & uint_t(1)).astype(bool), tz, az)
    elif mode == "round":
        assert tie is not None
        chosen = np.where(tie, az, rb)
    else:  # pragma: no cover - guarded by callers
        raise AssertionError(mode)
    out: np.ndarray = np.where(inexact, chosen, rb).astype(uint_t, copy=False)
    return out.view(r.dtype)


def _round_float(xw: np.ndarray, dst: np.dtype, mode: str) -> np.ndarray:
    """Round a float array ``xw`` into the narrower float dtype ``dst`` with ``mode``.

    Precondition: ``xw.astype(dst)`` is correctly rounded RNE (true for
    fp32→fp16, fp32→bf16 and fp64→fp32; *not* for fp64→bf16, which callers
    route through a round-to-odd fp32 first).
    """
    # Overflow to inf is intended; "invalid" fires on signalling-NaN payloads.
    with np.errstate(over="ignore", invalid="ignore"):
        return _round_float_impl(xw, dst, mode)


def _round_float_impl(xw: np.ndarray, dst: np.dtype, mode: str) -> np.ndarray:
    r = xw.astype(dst)
    if mode == "rint":
        return r
    back = r.astype(xw.dtype)  # exact widening
    inexact = (back != xw) & ~np.isnan(xw)
    ax = np.abs(xw)
    away = ax > np.abs(back)
    other = _step(r, away)
    tie = None
    if mode == "round":
        # Tie iff |x| is exactly the midpoint of its two neighbours; every term
        # is exact in fp64 (sum of two adjacent narrow values, 2|x| a
        # power-of-two scaling).  At the overflow tie (fp16 65520) one
        # neighbour is inf, the test fails, and RNE's inf is kept — which is
        # already the away-from-zero answer IEEE prescribes.
        pair = np.abs(r.astype(np.float64)) + np.abs(other.astype(np.float64))
        tie = inexact & (2.0 * ax.astype(np.float64) == pair)
    return _select(r, other, inexact, away, tie, np.signbit(xw), mode)


def _int_to_f64_odd(x: np.ndarray) -> np.ndarray:
    """Convert an integer array to fp64 with round-to-odd (exact when representable).

    Round-to-odd into 53 bits loses nothing a later rounding to fp32/fp16/bf16
    (≤ 24 bits) needs, for every mode, so int64 → narrow float is exact.
    """
    if x.dtype.itemsize < 8:
        return x.astype(np.float64)  # ≤ 32-bit ints are exact in fp64
    # Split x = hi + lo with lo in [0, 2**32): both parts are exact in fp64 and
    # |hi| ≥ 2**32 > lo whenever hi ≠ 0, so Fast2Sum gives the exact error.
    lo_i = x & x.dtype.type(0xFFFFFFFF)
    hi_i = x - lo_i
    hi = hi_i.astype(np.float64)
    lo = lo_i.astype(np.float64)
    s = hi + lo
    e = lo - (s - hi)
    fix = (e != 0) & ((s.view(np.uint64) & np.uint64(1)) == 0)
    toward = np.where(e > 0, np.inf, -np.inf)
    return np.where(fix, np.nextafter(s, toward), s)


def _float_to_int(xf: np.ndarray, dst: np.dtype, mode: str) -> np.ndarray:
    """Round floats to integers with ``mode``, saturating; NaN → 0 (assumption)."""
    with np.errstate(invalid="ignore"):  # signalling-NaN payloads warn spuriously
        x = xf.astype(np.float64)  # exact for every float source; integer rounding in fp64 is exact
    if mode == "rint":
        y = np.rint(x)
    elif mode == "floor":
        y = np.floor(x)
    elif mode == "ceil":
        y = np.ceil(x)
    elif mode == "trunc":
        y = np.trunc(x)
    elif mode == "round":
        # trunc + exact fractional part: avoids the (x + 0.5) rounding trap.
        t = np.trunc(x)
        with np.errstate(invalid="ignore"):
            y = t + np.where(np.abs(x - t) >= 0.5, np.sign(x), 0.0)
    elif mode == "odd":
        # Integer results are exact; otherwise take whichever of floor/ceil is odd.
        f = np.floor(x)
        with np.errstate(invalid="ignore"):
            y = np.where(x == f, x, np.where(np.fmod(f, 2.0) != 0, f, f + 1.0))
    else:  # pragma: no cover
        raise AssertionError(mode)
    info = np.iinfo(dst)
    nan = np.isnan(y)
    # float(info.max) may round up (int64: 2**63), so test with >= and patch
    # the saturated lanes after an in-range conversion.
    over = y >= float(info.max)
    under = y <= float(info.min)
    safe = np.where(over | under | nan, 0.0, y).astype(dst)
    out = np.where(over, info.max, np.where(under, info.min, safe))
    return out.astype(dst, copy=False)


def _int_to_int(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    """Saturating integer conversion (assumption: the hardware saturates)."""
    src_info, dst_info = np.iinfo(x.dtype), np.iinfo(dst)
    lo = max(dst_info.min, src_info.min)
    hi = min(dst_info.max, src_info.max)
    # Bounds are clamped into the source range so they are valid source scalars.
    return np.clip(x, x.dtype.type(lo), x.dtype.type(hi)).astype(dst)


def cast(x: np.ndarray, to: DType | str, mode: str = "rint") -> np.ndarray:
    """Convert ``x`` to dtype ``to`` with an Ascend C ``CAST_*`` rounding mode.

    Modes (``ROUND_MODES``): ``rint`` round half to even; ``round`` half away
    from zero; ``floor`` toward −inf; ``ceil`` toward +inf; ``trunc`` toward
    zero; ``odd`` round-to-odd (if inexact, the neighbour whose last
    significand bit is 1); ``none`` = ``rint`` when lossy, exact otherwise.

    * float → wider/same float: exact ``astype`` (mode irrelevant).
    * float → narrower float: correctly rounded for every input, with IEEE
      overflow (rint/round: inf from the midpoint between max-finite and
      2**(emax+1) on; trunc and odd saturate to ±max-finite; floor/ceil reach
      inf only in their own direction: ceil(70000) = inf, floor(70000) = 65504
      for fp16), subnormals kept, NaN preserved, signed zero preserved.  fp16↔bf16 go via
      fp32 (exact); fp64 → fp16/bf16 go via a round-to-odd fp32 (no double
      rounding).
    * float → int: rounded with ``mode`` (``none`` = ``rint``), saturating,
      NaN → 0 (assumptions).
    * int → float: exact where representable, otherwise correctly rounded with
      ``mode`` (int64 goes through a round-to-odd fp64).
    * int → int: saturating.  bool ↔ number: 0/1, number → bool is ``!= 0``.
    """
    dst = dtype(to)
    mode = _check_mode(mode)
    x = np.asarray(x)
    src = x.dtype
    kind = _src_kind(src)
    dnp = dst.np_dtype

    if dst is BOOL:
        return x != 0
    if kind == "bool":
        return x.astype(dnp)

    if kind == "float":
        if not dst.is_float:
            return _float_to_int(x, dnp, mode)
        if _float_widens(src, dnp):
            return x.astype(dnp)
        if src == FP64.np_dtype:
            if dnp == FP32.np_dtype:
                return _round_float(x, dnp, mode)
            # fp64 → half: round-to-odd into fp32 keeps enough information for
            # a single correct rounding afterwards (fp32 has ≥ p+2 bits).
            x = _round_float(x, FP32.np_dtype, "odd")
        elif src != FP32.np_dtype:
            x = x.astype(np.float32)  # fp16/bf16 → fp32 is exact
        return _round_float(x, dnp, mode)

    # Integer source.
    if not dst.is_float:
        if np.can_cast(src, dnp, casting="safe"):
            return x.astype(dnp)
        return _int_to_int(x, dnp)
    if dnp == FP64.np_dtype:
        if x.dtype.itemsize < 8:
            return x.astype(np.float64)  # ≤ 32-bit ints are exact in fp64
        return _int64_to_f64_mode(x, mode)
    xd = _int_to_f64_odd(x)
    if dnp == FP32.np_dtype:
        return _round_float(xd, dnp, mode)
    # fp64(odd) → fp32(odd) → half: two odd roundings with ≥ p+2 bits each stay exact-informative.
    return _round_float(_round_float(xd, FP32.np_dtype, "odd"), dnp, mode)


def _int64_to_f64_mode(x: np.ndarray, mode: str) -> np.ndarray:
    """int64/uint64 → fp64 with ``mode``: exact below 2**53, correctly rounded above."""
    lo_i = x & x.dtype.type(0xFFFFFFFF)
    hi = (x - lo_i).astype(np.float64)
    lo = lo_i.astype(np.float64)
    s = hi + lo  # RNE result
    if mode == "rint":
        return s
    e = lo - (s - hi)  # exact: true value = s + e
    inexact = e != 0
    negative = s < 0
    # s and the true value share a sign (|true| > 2**53 whenever inexact).
    away = np.where(negative, e < 0, e > 0)
    other = np.nextafter(s, np.where(e > 0, np.inf, -np.inf))
    tie = None
    if mode == "round":
        # Tie iff the exact error is half the gap between the neighbours (all exact in fp64).
        tie = np.abs(e) * 2 == np.abs(other - s)
    return _select(s, other, inexact, away, tie, negative, mode)


# ---------------------------------------------------------------------------
# Hot-path helpers used by every vector instruction
# ---------------------------------------------------------------------------


def round_to(x_f32: np.ndarray, to: DType) -> np.ndarray:
    """RNE-round an fp32 array into ``to`` — the single rounding of a vector instruction.

    Returns ``x_f32`` itself (no copy) when ``to`` is FP32.  Requires fp32
    input: rounding fp64 to bf16 through ml_dtypes would double-round, so
    that mistake is rejected here instead of silently producing wrong bits.
    """
    x = np.asarray(x_f32)
    if x.dtype != np.float32:
        raise TypeError(f"round_to expects an fp32 array, got {x.dtype}; use cast() for other sources")
    dst = dtype(to)
    if dst is FP32:
        return x_f32 if isinstance(x_f32, np.ndarray) else x
    if dst.is_float:
        if dst is FP16:
            x = _f16_subnormals_exact(x)    # the same bits, ~100x faster for tiny values
        with np.errstate(over="ignore", invalid="ignore"):
            return x.astype(dst.np_dtype)  # numpy fp16 / ml_dtypes bf16: RNE from fp32
    return cast(x, dst, "rint")


# (source, destination) numpy dtypes whose plain numpy conversion *is* the cast: exact float
# widening, and fp32 -> fp16/bf16 round-to-nearest-even (see round_to)
_WIDEN_DIRECT = frozenset({(FP16.np_dtype, FP32.np_dtype), (BF16.np_dtype, FP32.np_dtype)})
_NARROW_RNE = frozenset({(FP32.np_dtype, FP16.np_dtype), (FP32.np_dtype, BF16.np_dtype)})


def cast_into(out: np.ndarray, x: np.ndarray, to: DType | str, mode: str = "rint") -> None:
    """``out[...] = cast(x, to, mode)``, converting straight into ``out`` (no intermediate array)
    where numpy's own conversion is that cast: fp16/bf16 -> fp32 and RNE fp32 -> fp16/bf16, the
    casts of a vector instruction.  Every other case, and an ``out`` of another dtype than
    ``to``, takes :func:`cast` (identical bits either way)."""
    x = np.asarray(x)
    key = (x.dtype, out.dtype)
    if out.dtype == dtype(to).np_dtype:
        if key in _WIDEN_DIRECT:
            np.copyto(out, x, casting="unsafe")
            return
        if key in _NARROW_RNE and _check_mode(mode) == "rint":
            if out.dtype == _F16:
                x = _f16_subnormals_exact(x)
            with np.errstate(over="ignore", invalid="ignore"):   # overflow to inf is intended
                np.copyto(out, x, casting="unsafe")
            return
    out[...] = cast(x, to, mode)


_F16 = FP16.np_dtype
_F16_MIN_NORMAL = np.float32(2.0 ** -14)
_F16_STEPS = np.float32(2.0 ** 24)      # fp16 subnormals are the multiples of 2^-24
_F16_STEP = np.float32(2.0 ** -24)


def _f16_subnormals_exact(x: np.ndarray) -> np.ndarray:
    """``x`` (fp32), or a copy whose non-zero values below fp16's normal range are rounded to
    fp16's subnormal grid (the multiples of 2^-24) with RNE, in fp32, exactly: the values
    numpy's fp32 -> fp16 conversion rounds them to, so converting the copy gives the same bits.

    Why: numpy's conversion raises the underflow flag for every inexact fp16 subnormal, which
    costs it about 100x (~1 ms for 6,144 elements), and the gradients of a mean over millions
    of elements are that small. Converting values that are already on the grid raises nothing.
    Exact: |x| * 2^24 and k * 2^-24 (k <= 1024) are power-of-two scalings without overflow or
    underflow, and rint rounds half to even. NaN and inf are not below the range; zeros skip it.
    """
    mag = np.abs(x)
    small = mag < _F16_MIN_NORMAL
    small &= mag > 0
    if not small.any():
        return x
    y = x.copy()
    np.multiply(x, _F16_STEPS, out=y, where=small)
    np.rint(y, out=y, where=small)
    np.multiply(y, _F16_STEP, out=y, where=small)
    return y


_EXACT_IN_F32 = (FP16.np_dtype, BF16.np_dtype, np.dtype(np.int8), np.dtype(np.uint8),
                 np.dtype(np.int16), np.dtype(np.bool_))


def to_f32(x: np.ndarray) -> np.ndarray:
    """Widen fp16/bf16 (or small ints/bool) to fp32 exactly; fp32 input is returned as is.

    Sources that fp32 cannot hold exactly (fp64, int32, int64) raise
    ``TypeError``: use :func:`cast` and choose a rounding mode deliberately.
    """
    a = np.asarray(x)
    if a.dtype == np.float32:
        return x if isinstance(x, np.ndarray) else a
    if a.dtype in _EXACT_IN_F32:
        with np.errstate(invalid="ignore"):  # signalling-NaN payloads warn spuriously
            return a.astype(np.float32)
    raise TypeError(f"to_f32: {a.dtype} does not widen exactly to fp32; use cast(x, FP32, mode)")


def const(value: float, to: DType | str) -> np.generic:
    """A scalar constant of dtype ``to``, rounded as the hardware would see it.

    Floats are rounded first to fp32 (the scalar unit's width) and then RNE
    to ``to``; the result is a numpy scalar of that dtype so that
    ``bf16_array * const(0.1, BF16)`` stays bf16 instead of promoting.
    Exceptions: an FP64 target keeps the full fp64 value (fp64 is a golden
    type, not a device type), and integer targets take integer values
    exactly (out-of-range → ``OverflowError``) and round floats with ``rint``,
    saturating like :func:`cast`.
    """
    dst = dtype(to)
    typ = dst.np_dtype.type
    if dst is FP64:
        return np.float64(value)
    if dst is BOOL:
        return np.bool_(value != 0)
    if not dst.is_float and isinstance(value, (int, np.integer)):
        info = np.iinfo(dst.np_dtype)
        if not info.min <= int(value) <= info.max:
            raise OverflowError(f"{value} does not fit in {dst}")
        return typ(int(value))
    with np.errstate(over="ignore", invalid="ignore"):
        v32 = np.float32(value)
    if dst is FP32:
        return v32
    # indexing a 0-d array with () gives a numpy scalar; numpy's stubs type it as an array
    return cast(np.asarray(v32), dst, "rint")[()]  # type: ignore[return-value]


# ---------------------------------------------------------------------------
# Error measures and Ascend precision standards
# ---------------------------------------------------------------------------


def _ordered(bits: np.ndarray, sign_bit: int) -> np.ndarray:
    """Map sign-magnitude float bits to integers ordered like the float values (±0 → 0)."""
    b = bits.astype(np.int64)
    mag = b & (sign_bit - 1)
    return np.where((b & sign_bit) != 0, -mag, mag)


def ulp_distance(a: np.ndarray, b: np.ndarray, dt: DType | str) -> np.ndarray:
    """Distance in units in the last place of ``dt`` (fp16, bf16 or fp32), as int64.

    Uses the ordered-integer mapping of the bit patterns, so ±0 are 0 apart,
    adjacent values (including max-finite and inf) are 1 apart, and the
    distance counts representable values in between.  NaN vs NaN is 0; NaN
    vs a number is ``iinfo(int64).max``.  Inputs not already of dtype ``dt``
    are first rounded to it with RNE (:func:`cast`), the usual way to compare
    an output against a wider golden.
    """
    d = dtype(dt)
    if d not in (FP16, BF16, FP32):
        raise ValueError(f"ulp_distance supports fp16, bf16, fp32; got {d}")
    a = np.asarray(a)
    b = np.asarray(b)
    a = a if a.dtype == d.np_dtype else cast(a, d, "rint")
    b = b if b.dtype == d.np_dtype else cast(b, d, "rint")
    uint_t = _UINT_VIEW[d.np_dtype]
    sign_bit = 1 << (8 * d.itemsize - 1)
    oa = _ordered(a.view(uint_t), sign_bit)
    ob = _ordered(b.view(uint_t), sign_bit)
    dist = np.abs(oa - ob)
    na, nb = np.isnan(a), np.isnan(b)
    dist = np.where(na & nb, 0, dist)
    dist = np.where(na ^ nb, np.iinfo(np.int64).max, dist)
    return dist.astype(np.int64, copy=False)


# Ecosystem-standard thresholds T per dtype (docs/sources.md#precision-standards, ecosystem standard).
THRESHOLDS: dict[str, float] = {"fp16": 2.0**-10, "bf16": 2.0**-7, "fp32": 2.0**-13}
# Mixed-tolerance max-abs-error limits (docs/sources.md#precision-standards, mixed tolerance).
_MAX_ABS_LIMIT: dict[str, float] = {"fp16": 1e-1, "bf16": 1e-1, "fp32": 1e-2}
MIXED_MIN_MATCHED = 0.99   # the share of elements within tolerance the mixed standard needs


def _threshold(dt: DType | str) -> tuple[str, float]:
    d = dtype(dt)
    if d.name not in THRESHOLDS:
        raise ValueError(f"no precision threshold for {d}; supported: {', '.join(THRESHOLDS)}")
    return d.name, THRESHOLDS[d.name]


def _as_f64_pair(actual: Any, golden: Any) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(actual)
    g = np.asarray(golden)
    if a.shape != g.shape:
        # Broadcasting would silently compare the wrong elements.
        raise ValueError(f"shape mismatch: actual {a.shape} vs golden {g.shape}")
    with np.errstate(invalid="ignore"):  # signalling-NaN payloads warn spuriously
        return a.astype(np.float64), g.astype(np.float64)


def relative_errors(actual: np.ndarray, golden: np.ndarray) -> np.ndarray:
    """Per-element ``RE = |a − g| / (|g| + 1e-7)`` in fp64 (ecosystem-standard definition).

    Never NaN: equal values (including equal infinities) and NaN-vs-NaN give
    0; any other case the formula cannot express (NaN on one side, inf vs a
    different value) gives +inf, i.e. a failed element.
    """
    a, g = _as_f64_pair(actual, golden)
    with np.errstate(invalid="ignore", over="ignore"):
        re = np.abs(a - g) / (np.abs(g) + 1e-7)
    same = (a == g) | (np.isnan(a) & np.isnan(g))
    re = np.where(same, 0.0, re)
    return np.where(np.isnan(re), np.inf, re)


def ecosystem_check(actual: np.ndarray, truth_fp64: np.ndarray, dt: DType | str) -> tuple[bool, dict]:
    """Ecosystem standard (docs/sources.md#precision-standards): pass iff MERE < T and MARE < 10·T.

    Returns ``(passed, {"mere", "mare", "threshold", "dtype", "count"})``.
    An empty comparison passes trivially.
    """
    name, t = _threshold(dt)
    re = relative_errors(actual, truth_fp64)
    mere = float(re.mean()) if re.size else 0.0
    mare = float(re.max()) if re.size else 0.0
    passed = mere < t and mare < 10.0 * t
    return passed, {"mere": mere, "mare": mare, "threshold": t, "dtype": name, "count": int(re.size)}


def mixed_tolerance_check(actual: np.ndarray, golden: np.ndarray, dt: DType | str) -> tuple[bool, dict]:
    """Mixed-tolerance standard (docs/sources.md#precision-standards).

    Element matches iff ``|a − g| ≤ atol + rtol·|g|`` with rtol = atol = T(dt);
    NaN in both matches, NaN in one only fails that element (and is left out
    of ``max_abs_err``, where its error is undefined); equal infinities match.
    Pass iff ``matched_ratio ≥ 0.99`` and ``max_abs_err ≤ 0.1`` (fp16/bf16)
    or ``≤ 1e-2`` (fp32).  The standard's alternative "or 32·ULP" bound is
    not applied.
    """
    name, t = _threshold(dt)
    a, g = _as_f64_pair(actual, golden)
    na, ng = np.isnan(a), np.isnan(g)
    with np.errstate(invalid="ignore"):
        err = np.where(a == g, 0.0, np.abs(a - g))  # a == g also covers inf == inf
    err = np.where(na | ng, np.nan, err)
    with np.errstate(invalid="ignore"):
        ok = err <= t + t * np.abs(g)
    ok = (ok & ~(na | ng)) | (na & ng)
    n = int(ok.size)
    matched_ratio = float(ok.sum()) / n if n else 1.0
    finite_err = err[~(na | ng)]
    max_abs_err = float(finite_err.max()) if finite_err.size else 0.0
    limit = _MAX_ABS_LIMIT[name]
    passed = matched_ratio >= MIXED_MIN_MATCHED and max_abs_err <= limit
    return passed, {
        "matched_ratio": matched_ratio,
        "max_abs_err": max_abs_err,
        "rtol": t,
        "atol": t,
        "max_abs_limit": limit,
        "mismatched": n - int(ok.sum()),
        "dtype": name,
    }
