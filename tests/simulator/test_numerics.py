"""Tests for simulator.numerics: dtypes, rounding casts, constants, ULPs, precision checks.

The rounding tests compare against two references written here, independent of
the implementation's bit tricks:

* ``_ref_round_vec``: vectorised, exact fp64 arithmetic.  For each input it
  computes the quantum q of the target format at that magnitude (unbounded
  exponent, clamped at emin for subnormals), the two neighbours k·q and
  (k+1)·q, and applies the mode's rule; IEEE overflow is applied afterwards.
  Every step is exact in fp64 for fp32 inputs and 8/11-bit targets.
* ``_ref_round_frac``: scalar, with ``fractions.Fraction``, used with
  hypothesis on inputs fp64 cannot stand in for (fp64 and int64 sources).
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opsim.simulator import numerics as nm
from opsim.simulator.numerics import (
    BF16,
    BOOL,
    FP16,
    FP32,
    FP64,
    INT8,
    INT16,
    INT32,
    INT64,
    UINT8,
    AclDataType,
    cast,
    cast_into,
    const,
    dtype,
    ecosystem_check,
    from_acl,
    mixed_tolerance_check,
    relative_errors,
    round_to,
    to_f32,
    ulp_distance,
)

# (precision incl. implicit bit, emin, emax) per target format.
FORMATS = {"fp16": (11, -14, 15), "bf16": (8, -126, 127), "fp32": (24, -126, 127), "fp64": (53, -1022, 1023)}
DIRECTED_MODES = ("rint", "round", "floor", "ceil", "trunc", "odd")
FAST = settings(max_examples=150, deadline=None)


# ---------------------------------------------------------------------------
# Independent references
# ---------------------------------------------------------------------------


def _magnitude_rule(mode: str, negative: np.ndarray) -> np.ndarray:
    """Translate a signed rounding mode into a magnitude rule per element."""
    rules = {
        "rint": "ne", "round": "na", "trunc": "down", "odd": "odd",
    }
    if mode in rules:
        return np.full(negative.shape, rules[mode], dtype=object)
    if mode == "floor":
        return np.where(negative, "up", "down")
    if mode == "ceil":
        return np.where(negative, "down", "up")
    raise AssertionError(mode)


def _ref_round_vec(x: np.ndarray, fmt: str, mode: str) -> np.ndarray:
    """Round exact fp64 values ``x`` into format ``fmt`` with ``mode``; result in fp64."""
    p, emin, emax = FORMATS[fmt]
    x = np.asarray(x, dtype=np.float64)
    neg = np.signbit(x)
    a = np.abs(x)
    finite = np.isfinite(a)
    af = np.where(finite, a, 1.0)
    _, e = np.frexp(af)  # af = m * 2**e, m in [0.5, 1)
    exp = np.maximum(e - 1, emin)
    q = np.ldexp(1.0, exp - (p - 1))
    scaled = af / q  # exact: power-of-two scaling
    k = np.floor(scaled)
    frac = scaled - k
    k_odd = np.fmod(k, 2.0) == 1.0
    rule = _magnitude_rule(mode, neg)
    take_hi = np.select(
        [rule == "down", rule == "up", rule == "ne", rule == "na", rule == "odd"],
        [
            np.zeros_like(frac, dtype=bool),
            frac > 0,
            (frac > 0.5) | ((frac == 0.5) & k_odd),
            frac >= 0.5,
            (frac > 0) & ~k_odd,
        ],
    )
    m = (k + take_hi) * q
    maxfinite = (2.0 - 2.0 ** (1 - p)) * 2.0**emax
    to_inf = np.isin(rule, ["ne", "na", "up"])
    m = np.where(m > maxfinite, np.where(to_inf, np.inf, maxfinite), m)
    m = np.where(finite, m, a)  # inf and nan pass through
    return np.copysign(m, np.where(neg, -1.0, 1.0))


def _ref_round_frac(v: Fraction, negative_zero: bool, fmt: str, mode: str) -> float:
    """Scalar exact reference with Fractions; returns the rounded value as a Python float."""
    p, emin, emax = FORMATS[fmt]
    if v == 0:
        return -0.0 if negative_zero else 0.0
    neg = v < 0
    a = -v if neg else v
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    q = Fraction(2) ** (max(e, emin) - (p - 1))
    k = math.floor(a / q)
    frac = a / q - k
    rule = {"rint": "ne", "round": "na", "trunc": "down", "odd": "odd",
            "floor": "up" if neg else "down", "ceil": "down" if neg else "up"}[mode]
    if frac == 0:
        hi = False
    elif rule == "down":
        hi = False
    elif rule == "up":
        hi = True
    elif rule == "ne":
        hi = frac > Fraction(1, 2) or (frac == Fraction(1, 2) and k % 2 == 1)
    elif rule == "na":
        hi = frac >= Fraction(1, 2)
    else:  # odd
        hi = k % 2 == 0
    m = (k + hi) * q
    maxfinite = (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** emax
    if m > maxfinite:
        res = math.inf if rule in ("ne", "na", "up") else float(maxfinite)
    else:
        res = float(m)
    return -res if neg else res


def _f64(x: np.ndarray) -> np.ndarray:
    """Exact widening to fp64 (signalling-NaN payloads make numpy warn spuriously)."""
    with np.errstate(invalid="ignore"):
        return np.asarray(x).astype(np.float64)


def _same_values(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Elementwise equality that treats NaN==NaN and distinguishes +0 from -0."""
    a, b = _f64(actual), _f64(expected)
    both_nan = np.isnan(a) & np.isnan(b)
    return both_nan | ((a == b) & (np.signbit(a) == np.signbit(b)))


def _assert_same(actual: np.ndarray, expected: np.ndarray, inputs: np.ndarray) -> None:
    ok = _same_values(actual, expected)
    if not ok.all():
        idx = np.flatnonzero(~ok)[:5]
        details = [(float(inputs.flat[i]), float(np.asarray(actual).flat[i]), float(expected.flat[i])) for i in idx]
        raise AssertionError(f"{(~ok).sum()} mismatches, first (x, got, want): {details}")


def _stress_inputs_f32(fmt: str) -> np.ndarray:
    """Every target value, its fp32 neighbours, every midpoint and the midpoints' fp32 neighbours, plus random bits."""
    target = FP16.np_dtype if fmt == "fp16" else BF16.np_dtype
    allv = np.arange(1 << 16, dtype=np.uint16).view(target).astype(np.float32)
    allv = allv[np.isfinite(allv)]
    allv = np.unique(allv)  # sorted; -0 and +0 collapse, added back below
    mids = ((allv[:-1].astype(np.float64) + allv[1:]) / 2).astype(np.float32)  # exact in fp32
    p, _, emax = FORMATS[fmt]
    top = np.float32(2.0**emax * (2.0 - 2.0**-p))  # midpoint between max finite and 2**(emax+1)
    base = np.concatenate([allv, mids, [top, -top, 0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(np.float32)
    ups = np.nextafter(base, np.float32(np.inf))
    downs = np.nextafter(base, np.float32(-np.inf))
    rng = np.random.default_rng(1234)
    rand = rng.integers(0, 1 << 32, size=150_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    specials = np.array(
        [70000.0, -70000.0, 65519.0, 65520.0, -65520.0, 1e38, -1e38, np.finfo(np.float32).max,
         np.finfo(np.float32).tiny, np.float32(1e-45), -np.float32(1e-45), 2.0**-25, 2.0**-24 * 1.5],
        dtype=np.float32,
    )
    return np.concatenate([base, ups, downs, rand, specials]).astype(np.float32)


_STRESS = {fmt: _stress_inputs_f32(fmt) for fmt in ("fp16", "bf16")}


# ---------------------------------------------------------------------------
# Dtypes
# ---------------------------------------------------------------------------


def test_dtype_constants_carry_acl_codes_itemsize_and_kind():
    expected = {
        FP32: ("fp32", np.float32, 0, 4, True), FP16: ("fp16", np.float16, 1, 2, True),
        BF16: ("bf16", ml_dtypes.bfloat16, 27, 2, True), FP64: ("fp64", np.float64, 11, 8, True),
        INT8: ("int8", np.int8, 2, 1, False), INT16: ("int16", np.int16, 6, 2, False),
        INT32: ("int32", np.int32, 3, 4, False), INT64: ("int64", np.int64, 9, 8, False),
        UINT8: ("uint8", np.uint8, 4, 1, False), BOOL: ("bool", np.bool_, 12, 1, False),
    }
    for d, (name, npt, acl, size, is_float) in expected.items():
        assert (d.name, d.np_dtype, d.acl, d.itemsize, d.is_float) == (name, np.dtype(npt), acl, size, is_float)
        assert str(d) == name


def test_acl_data_type_enum_matches_cann_header_values():
    assert {m.name: int(m) for m in AclDataType} == {
        "ACL_DT_UNDEFINED": -1, "ACL_FLOAT": 0, "ACL_FLOAT16": 1, "ACL_INT8": 2, "ACL_INT32": 3,
        "ACL_UINT8": 4, "ACL_INT16": 6, "ACL_UINT16": 7, "ACL_UINT32": 8, "ACL_INT64": 9,
        "ACL_UINT64": 10, "ACL_DOUBLE": 11, "ACL_BOOL": 12, "ACL_BF16": 27,
    }


@pytest.mark.parametrize(
    "alias, expected",
    [("fp32", FP32), ("float32", FP32), ("float", FP32), ("FP16", FP16), ("float16", FP16), ("half", FP16),
     ("bf16", BF16), ("bfloat16", BF16), ("fp64", FP64), ("float64", FP64), ("double", FP64),
     ("int8", INT8), ("int16", INT16), ("int32", INT32), ("int64", INT64), ("uint8", UINT8), ("bool", BOOL)],
)
def test_dtype_accepts_every_name_alias(alias, expected):
    assert dtype(alias) is expected


def test_dtype_accepts_numpy_dtypes_scalar_types_acl_codes_and_dtype_objects():
    assert dtype(np.float16) is FP16
    assert dtype(np.dtype("float32")) is FP32
    assert dtype(ml_dtypes.bfloat16) is BF16
    assert dtype(np.dtype(ml_dtypes.bfloat16)) is BF16
    assert dtype(np.bool_) is BOOL
    assert dtype(np.zeros(2, np.int16)) is INT16
    assert dtype(27) is BF16
    assert dtype(AclDataType.ACL_FLOAT) is FP32
    assert dtype(np.int64(12)) is BOOL
    assert dtype(FP16) is FP16
    assert from_acl(1) is FP16 and from_acl(11) is FP64


@pytest.mark.parametrize("bad", ["float8", "", "complex64", np.complex64, np.uint16, None, True, 2.5])
def test_dtype_rejects_unknown_values_naming_value_and_allowed_names(bad):
    with pytest.raises(ValueError) as exc:
        dtype(bad)
    msg = str(exc.value)
    assert "fp32" in msg and "bfloat16" in msg
    assert repr(bad) in msg


@pytest.mark.parametrize("code", [7, 8, 10, 13, -1, 99])
def test_from_acl_rejects_codes_the_simulator_does_not_model(code):
    with pytest.raises(ValueError, match=str(code)):
        from_acl(code)


# ---------------------------------------------------------------------------
# Float narrowing casts
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
@pytest.mark.parametrize("mode", DIRECTED_MODES)
def test_every_round_mode_from_fp32_matches_exact_reference_on_stress_set(fmt, mode):
    x = _STRESS[fmt]
    got = cast(x, fmt, mode)
    assert got.dtype == dtype(fmt).np_dtype
    _assert_same(got, _ref_round_vec(_f64(x), fmt, mode), x)


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_rint_cast_matches_numpy_rne_for_half_formats(fmt):
    x = _STRESS[fmt]
    with np.errstate(over="ignore", invalid="ignore"):
        expected = x.astype(dtype(fmt).np_dtype)
    np.testing.assert_array_equal(cast(x, fmt, "rint").view(np.uint16), expected.view(np.uint16))
    np.testing.assert_array_equal(cast(x, fmt, "none").view(np.uint16), expected.view(np.uint16))


@given(st.floats(width=32, allow_nan=True, allow_infinity=True), st.sampled_from(DIRECTED_MODES),
       st.sampled_from(["fp16", "bf16"]))
@FAST
def test_fp32_casts_agree_with_fraction_reference(value, mode, fmt):
    x = np.array([value], np.float32)
    got = float(cast(x, fmt, mode)[0])
    if math.isnan(value):
        assert math.isnan(got)
        return
    if math.isinf(value):
        assert got == value
        return
    want = _ref_round_frac(Fraction(float(x[0])), math.copysign(1, value) < 0, fmt, mode)
    assert got == want and math.copysign(1, got) == math.copysign(1, want), (value, got, want)


def test_documented_overflow_boundaries_for_fp16_and_bf16():
    f = np.array([65519, 65520, -65520, 70000, -70000], np.float32)
    assert cast(f, FP16, "rint").tolist() == [65504, np.inf, -np.inf, np.inf, -np.inf]
    assert cast(f, FP16, "round").tolist() == [65504, np.inf, -np.inf, np.inf, -np.inf]
    assert cast(f, FP16, "trunc").tolist() == [65504, 65504, -65504, 65504, -65504]
    # 65519 > max finite, so rounding toward +inf overflows even though RNE does not.
    assert cast(f, FP16, "ceil").tolist() == [np.inf, np.inf, -65504, np.inf, -65504]
    assert cast(f, FP16, "floor").tolist() == [65504, 65504, -np.inf, 65504, -np.inf]
    assert cast(f, FP16, "odd").tolist() == [65504, 65504, -65504, 65504, -65504]
    assert float(cast(np.float32(65520), BF16)) == 65536.0
    fmax = np.array([np.finfo(np.float32).max], np.float32)
    assert np.isinf(cast(fmax, BF16, "rint")[0])
    assert float(cast(fmax, BF16, "trunc")[0]) == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)


def test_ties_follow_each_mode_rule_in_fp16():
    # 1 + k/2 ulp of fp16 (ulp = 2**-10 at 1.0): exact ties between neighbours.
    u = 2.0**-10
    x = np.array([1 + u / 2, 1 + 3 * u / 2, -(1 + u / 2), -(1 + 3 * u / 2)], np.float32)
    assert cast(x, FP16, "rint").astype(np.float64).tolist() == [1, 1 + 2 * u, -1, -(1 + 2 * u)]
    assert cast(x, FP16, "round").astype(np.float64).tolist() == [1 + u, 1 + 2 * u, -(1 + u), -(1 + 2 * u)]
    assert cast(x, FP16, "odd").astype(np.float64).tolist() == [1 + u, 1 + u, -(1 + u), -(1 + u)]


def test_subnormal_targets_are_kept_and_rounded_per_mode():
    tiny = 2.0**-24  # smallest fp16 subnormal
    x = np.array([tiny * 0.5, tiny * 1.5, tiny * 0.25, -tiny * 0.25], np.float32)
    assert cast(x, FP16, "rint").astype(np.float64).tolist() == [0.0, 2 * tiny, 0.0, -0.0]
    assert cast(x, FP16, "ceil").astype(np.float64).tolist() == [tiny, 2 * tiny, tiny, -0.0]
    assert cast(x, FP16, "floor").astype(np.float64).tolist() == [0.0, tiny, 0.0, -tiny]
    assert cast(x, FP16, "odd").astype(np.float64).tolist() == [tiny, tiny, tiny, -tiny]
    assert np.signbit(cast(x, FP16, "rint")[3])
    bf_tiny = float(ml_dtypes.finfo(ml_dtypes.bfloat16).smallest_subnormal)
    assert float(cast(np.float32(bf_tiny * 0.75), BF16, "rint")) == bf_tiny


@pytest.mark.parametrize("mode", nm.ROUND_MODES)
@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_nan_and_signed_zero_survive_every_mode(mode, fmt):
    x = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf], np.float32)
    got = cast(x, fmt, mode).astype(np.float64)
    assert np.isnan(got[:2]).all()
    assert got[2] == 0 and not np.signbit(got[2])
    assert got[3] == 0 and np.signbit(got[3])
    assert got[4] == np.inf and got[5] == -np.inf


@pytest.mark.parametrize("mode", DIRECTED_MODES)
@pytest.mark.parametrize("src, dst", [("fp16", "bf16"), ("bf16", "fp16")])
def test_half_to_half_casts_go_through_fp32_exactly(src, dst, mode):
    x = np.arange(1 << 16, dtype=np.uint16).view(dtype(src).np_dtype)
    _assert_same(cast(x, dst, mode), _ref_round_vec(_f64(x), dst, mode), x)


def test_widening_float_casts_are_exact():
    x = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16)
    for mode in nm.ROUND_MODES:
        np.testing.assert_array_equal(cast(x, FP32, mode), x.astype(np.float32))
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    np.testing.assert_array_equal(cast(h, FP64, "floor"), h.astype(np.float64))


def test_fp64_to_bf16_avoids_double_rounding():
    x = np.array([1 + 2.0**-8 + 2.0**-30])
    assert float(x.astype(ml_dtypes.bfloat16)[0]) == 1.0  # the ml_dtypes trap
    assert float(cast(x, BF16)[0]) == 1 + 2.0**-7


@given(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(DIRECTED_MODES),
       st.sampled_from(["fp16", "bf16", "fp32"]))
@FAST
def test_fp64_sources_round_correctly_in_every_mode(value, mode, fmt):
    got = float(cast(np.array([value]), fmt, mode)[0])
    want = _ref_round_frac(Fraction(value), math.copysign(1, value) < 0, fmt, mode)
    assert got == want and math.copysign(1, got) == math.copysign(1, want), (value, got, want)


def test_unknown_mode_is_rejected_with_allowed_list():
    with pytest.raises(ValueError) as exc:
        cast(np.zeros(2, np.float32), FP16, "nearest")
    assert "'nearest'" in str(exc.value) and "rint" in str(exc.value) and "odd" in str(exc.value)


# ---------------------------------------------------------------------------
# Integer and bool casts
# ---------------------------------------------------------------------------


def test_float_to_int_modes_round_then_saturate_and_map_nan_to_zero():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.4, -2.6, 1e10, -1e10, np.nan, np.inf, -np.inf], np.float32)
    expected = {
        "rint": [-2, -2, 0, 0, 2, 2, 2, -3, 127, -128, 0, 127, -128],
        "none": [-2, -2, 0, 0, 2, 2, 2, -3, 127, -128, 0, 127, -128],
        "round": [-3, -2, -1, 1, 2, 3, 2, -3, 127, -128, 0, 127, -128],
        "floor": [-3, -2, -1, 0, 1, 2, 2, -3, 127, -128, 0, 127, -128],
        "ceil": [-2, -1, 0, 1, 2, 3, 3, -2, 127, -128, 0, 127, -128],
        "trunc": [-2, -1, 0, 0, 1, 2, 2, -2, 127, -128, 0, 127, -128],
        "odd": [-3, -1, -1, 1, 1, 3, 3, -3, 127, -128, 0, 127, -128],
    }
    for mode, want in expected.items():
        got = cast(x, INT8, mode)
        assert got.dtype == np.int8
        assert got.tolist() == want, mode


@pytest.mark.parametrize("dst", [INT8, INT16, INT32, INT64, UINT8])
def test_float_to_int_saturates_at_the_exact_range_limits(dst):
    info = np.iinfo(dst.np_dtype)
    x = np.array([1e30, -1e30, np.inf, -np.inf, float(info.max) + 0.4, float(info.min) - 0.4])
    got = cast(x, dst, "trunc")
    assert got.dtype == dst.np_dtype
    assert got.tolist() == [info.max, info.min, info.max, info.min, info.max, info.min]


@given(st.floats(min_value=-3e9, max_value=3e9, width=32), st.sampled_from(DIRECTED_MODES))
@FAST
def test_fp32_to_int32_matches_fraction_reference(value, mode):
    v = Fraction(value)
    fl, ce = math.floor(v), math.ceil(v)
    if fl == ce:
        want = fl
    else:
        fr = v - fl
        want = {
            "floor": fl, "ceil": ce, "trunc": fl if v > 0 else ce, "odd": fl if fl % 2 else ce,
            "rint": fl if fr < Fraction(1, 2) or (fr == Fraction(1, 2) and fl % 2 == 0) else ce,
            "round": int(math.copysign(math.floor(abs(v) + Fraction(1, 2)), v)),  # exact in Fraction
        }[mode]
    want = max(min(want, 2**31 - 1), -(2**31))
    assert int(cast(np.array([value], np.float32), INT32, mode)[0]) == want


# Integers made of a few set bits land exactly on (or one bit off) rounding ties,
# which uniformly random int64 values almost never do.
_sparse_int64 = st.builds(
    lambda bits, neg: max(-(2**63), min(2**63 - 1, (-1 if neg else 1) * sum(1 << b for b in set(bits)))),
    st.lists(st.integers(0, 63), min_size=1, max_size=4),
    st.booleans(),
)


@given(st.one_of(st.integers(min_value=-(2**63), max_value=2**63 - 1), _sparse_int64),
       st.sampled_from(DIRECTED_MODES), st.sampled_from(["fp16", "bf16", "fp32", "fp64"]))
@settings(max_examples=400, deadline=None)
def test_int64_to_float_is_correctly_rounded_in_every_mode(value, mode, fmt):
    got = float(cast(np.array([value], np.int64), fmt, mode)[0])
    assert got == _ref_round_frac(Fraction(value), False, fmt, mode), (value, mode, fmt)


def test_int64_above_2_53_rounds_once_not_twice():
    # fp64 RNE would drop the +1 and leave an exact fp32 tie that rounds down.
    x = np.array([2**60 + 2**36 + 1, -(2**60 + 2**36 + 1), 2**53 + 1], np.int64)
    assert cast(x[:2], FP32).tolist() == [2.0**60 + 2.0**37, -(2.0**60 + 2.0**37)]
    assert cast(x[2:], FP64, "rint").tolist() == [2.0**53]
    assert cast(x[2:], FP64, "round").tolist() == [2.0**53 + 2]
    assert cast(x[2:], FP64, "trunc").tolist() == [2.0**53]


@pytest.mark.parametrize("mode", DIRECTED_MODES)
def test_every_int16_value_casts_to_fp16_per_reference(mode):
    x = np.arange(-(2**15), 2**15, dtype=np.int16)
    _assert_same(cast(x, FP16, mode), _ref_round_vec(_f64(x), "fp16", mode), x)


def test_int_to_int_narrowing_saturates_and_widening_is_exact():
    x = np.array([-40000, -129, -1, 0, 255, 256, 70000], np.int32)
    assert cast(x, INT8).tolist() == [-128, -128, -1, 0, 127, 127, 127]
    assert cast(x, UINT8).tolist() == [0, 0, 0, 0, 255, 255, 255]
    assert cast(x, INT16).tolist() == [-32768, -129, -1, 0, 255, 256, 32767]
    assert cast(np.array([-128, 127], np.int8), INT64).tolist() == [-128, 127]
    assert cast(np.array([200], np.uint8), INT8).tolist() == [127]


def test_bool_casts_are_zero_one_both_ways():
    b = np.array([True, False])
    for d in (FP16, BF16, FP32, INT8, INT32, UINT8):
        assert cast(b, d).astype(np.float64).tolist() == [1.0, 0.0]
        assert cast(b, d).dtype == d.np_dtype
    assert cast(np.array([0.0, -0.0, 2.5, np.nan], np.float32), BOOL).tolist() == [False, False, True, True]
    assert cast(np.array([0, 3, -1], np.int32), BOOL).tolist() == [False, True, True]


# ---------------------------------------------------------------------------
# Hot-path helpers and constants
# ---------------------------------------------------------------------------


def test_round_to_is_rne_and_returns_fp32_input_unchanged():
    x = np.array([1 + 2.0**-11, 65520, 1e-8, -3.3], np.float32)
    assert round_to(x, FP32) is x
    np.testing.assert_array_equal(round_to(x, FP16).view(np.uint16), cast(x, FP16, "rint").view(np.uint16))
    np.testing.assert_array_equal(round_to(x, BF16).view(np.uint16), x.astype(ml_dtypes.bfloat16).view(np.uint16))
    assert round_to(x, INT32).tolist() == [1, 65520, 0, -3]


def test_round_to_rejects_non_fp32_input_to_prevent_double_rounding():
    with pytest.raises(TypeError, match="float64"):
        round_to(np.array([1.0]), BF16)


def test_to_f32_widens_exactly_without_copying_fp32():
    x = np.ones(3, np.float32)
    assert to_f32(x) is x
    b = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16)
    _assert_same(to_f32(b), _f64(b), b)
    with pytest.raises(TypeError):
        to_f32(np.ones(2, np.float64))


def test_const_keeps_bf16_arithmetic_in_bf16():
    a = np.ones(4, ml_dtypes.bfloat16)
    assert (a * 0.1).dtype == np.float32  # the promotion trap const() exists for
    c = const(0.1, BF16)
    assert isinstance(c, np.generic) and type(c) is ml_dtypes.bfloat16
    assert (a * c).dtype == np.dtype(ml_dtypes.bfloat16)
    assert float(c) == float(np.float32(0.1).astype(ml_dtypes.bfloat16))


def test_const_rounds_through_fp32_first():
    # fp32 drops the 2**-30 term, leaving an exact bf16 tie that RNE sends to 1.0.
    assert float(const(1 + 2.0**-8 + 2.0**-30, BF16)) == 1.0
    assert type(const(0.1, FP16)) is np.float16 and float(const(0.1, FP16)) == float(np.float16(0.1))
    assert type(const(0.1, FP32)) is np.float32
    assert const(0.1, FP64) == 0.1
    assert const(1e6, FP16) == np.float16(np.inf)
    assert type(const(3, INT32)) is np.int32 and const(3, INT32) == 3
    assert const(2.5, INT8) == 2
    with pytest.raises(OverflowError):
        const(300, INT8)


# ---------------------------------------------------------------------------
# ULP distance and precision standards
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("d", [FP16, BF16, FP32])
def test_ulp_distance_counts_representable_values_between(d):
    uint_t = np.uint16 if d.itemsize == 2 else np.uint32
    one = np.array([1.0], np.float32).astype(d.np_dtype)
    nxt = (one.view(uint_t) + uint_t(5)).view(d.np_dtype)
    assert ulp_distance(one, nxt, d).tolist() == [5]
    pz = np.zeros(1, d.np_dtype)
    nz = (-np.zeros(1, np.float32)).astype(d.np_dtype)
    tiny = np.array([1], uint_t).view(d.np_dtype)
    assert ulp_distance(pz, nz, d).tolist() == [0]
    assert ulp_distance(tiny, -tiny, d).tolist() == [2]
    assert ulp_distance(-tiny, nz, d).tolist() == [1]
    big = np.array([np.inf], np.float32).astype(d.np_dtype)
    mx = (big.view(uint_t) - uint_t(1)).view(d.np_dtype)
    assert ulp_distance(mx, big, d).tolist() == [1]
    nan = np.array([np.nan], np.float32).astype(d.np_dtype)
    assert ulp_distance(nan, nan, d).tolist() == [0]
    assert ulp_distance(nan, one, d).tolist() == [np.iinfo(np.int64).max]
    assert ulp_distance(one, nxt, d).dtype == np.int64


def test_ulp_distance_rounds_wider_goldens_to_the_output_dtype():
    golden = np.array([1 + 2.0**-9], np.float64)  # exact tie in bf16 → 1.0
    assert ulp_distance(np.ones(1, ml_dtypes.bfloat16), golden, BF16).tolist() == [0]
    with pytest.raises(ValueError):
        ulp_distance(np.ones(1), np.ones(1), FP64)


def test_relative_errors_follow_ecosystem_formula_and_never_return_nan():
    a = np.array([1.1, 0.0, np.nan, np.nan, np.inf, np.inf, 1.0])
    g = np.array([1.0, 0.0, np.nan, 1.0, np.inf, 1.0, -np.inf])
    re = relative_errors(a, g)
    assert re[0] == pytest.approx(0.1 / (1.0 + 1e-7))
    assert re.tolist()[1:] == [0.0, 0.0, np.inf, 0.0, np.inf, np.inf]
    with pytest.raises(ValueError, match="shape"):
        relative_errors(np.ones(3), np.ones(4))


def test_ecosystem_check_passes_rne_fp16_output_and_fails_biased_output():
    rng = np.random.default_rng(0)
    truth = rng.uniform(0.5, 2.0, 10_000)
    good = truth.astype(np.float32).astype(np.float16)
    ok, info = ecosystem_check(good, truth, FP16)
    assert ok and info["mere"] < 2.0**-10 and info["mare"] < 10 * 2.0**-10
    assert info["threshold"] == 2.0**-10
    bad = (truth * (1 + 2.0**-9)).astype(np.float32).astype(np.float16)
    ok, info = ecosystem_check(bad, truth, "fp16")
    assert not ok and info["mere"] >= 2.0**-10
    ok, info = ecosystem_check(good.astype(np.float32), truth, FP32)
    assert not ok  # fp16-quality numbers fail the fp32 standard


def test_mixed_tolerance_check_passes_within_tolerance_and_fails_on_ratio_or_max_abs():
    g = np.linspace(-4, 4, 1000)
    t = 2.0**-7
    ok, info = mixed_tolerance_check(g + 0.5 * t, g, BF16)
    assert ok and info["matched_ratio"] == 1.0 and info["max_abs_err"] == pytest.approx(0.5 * t)
    few_bad = g.copy()
    few_bad[:20] += 0.05  # 2 % mismatched → ratio fails
    ok, info = mixed_tolerance_check(few_bad, g, BF16)
    assert not ok and info["matched_ratio"] == pytest.approx(0.98) and info["mismatched"] == 20
    one_huge = g.copy()
    one_huge[0] += 1.0  # ratio 0.999 but max_abs_err 1.0 > 0.1
    ok, info = mixed_tolerance_check(one_huge, g, BF16)
    assert not ok and info["matched_ratio"] == pytest.approx(0.999) and info["max_abs_err"] == pytest.approx(1.0)
    ok, info = mixed_tolerance_check(g.astype(np.float32) + np.float32(0.02), g, FP32)
    assert not ok and info["max_abs_limit"] == 1e-2


def test_precision_checks_match_nan_in_both_and_fail_nan_in_one():
    g = np.ones(200)
    a = np.ones(200)
    g[:2] = np.nan
    a[:2] = np.nan
    ok, info = mixed_tolerance_check(a, g, FP16)
    assert ok and info["matched_ratio"] == 1.0 and info["max_abs_err"] == 0.0
    assert ecosystem_check(a, g, FP16)[0]
    a[5] = np.nan
    ok, info = mixed_tolerance_check(a, g, FP16)
    assert info["mismatched"] == 1 and info["matched_ratio"] == pytest.approx(0.995) and ok
    assert not ecosystem_check(a, g, FP16)[0]
    a[6] = np.nan
    a[7] = np.nan
    ok, info = mixed_tolerance_check(a, g, FP16)
    assert not ok and info["mismatched"] == 3


def test_thresholds_match_the_published_standard():
    assert nm.THRESHOLDS == {"fp16": 2**-10, "bf16": 2**-7, "fp32": 2**-13}
    with pytest.raises(ValueError):
        ecosystem_check(np.ones(2), np.ones(2), INT8)


@pytest.mark.parametrize("src,dst", [("fp16", "fp32"), ("bf16", "fp32"), ("fp32", "fp16"), ("fp32", "bf16"),
                                     ("fp32", "int32"), ("fp16", "bf16")])
@pytest.mark.parametrize("mode", ["rint", "none", "floor", "odd"])
def test_cast_into_writes_the_bits_of_cast(src, dst, mode):
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 1 << 32, 4096, dtype=np.uint64).astype(np.uint32)
    x32 = bits.view(np.float32)                       # every class: NaNs, infs, subnormals, overflow
    x = x32 if src == "fp32" else cast(x32, dtype(src), "rint")
    want = cast(x, dtype(dst), mode)
    out = np.zeros(x.shape, dtype(dst).np_dtype)
    with np.errstate(all="ignore"):
        cast_into(out, x, dtype(dst), mode)
    assert out.tobytes() == np.asarray(want).tobytes()


def _fp16_edge_values() -> np.ndarray:
    """fp32 values around and below fp16's normal range: ties between subnormals, the boundaries
    of the range, fp32 subnormals, zeros, and specials, with both signs."""
    step = 2.0 ** -24
    k = np.arange(0, 1025, dtype=np.float64)
    ties = (k + 0.5) * step                       # exactly halfway: RNE picks the even k
    near = np.concatenate([np.nextafter(ties.astype(np.float32), np.float32(0)),
                           np.nextafter(ties.astype(np.float32), np.float32(1))])
    bounds = np.array([2.0 ** -14, 2.0 ** -25, 2.0 ** -26, 65504, 65519, 65520, 1e-45, 1e-40,
                       0.0, np.inf, np.nan], dtype=np.float32)
    rng = np.random.default_rng(7)
    logs = rng.uniform(-40, 17, 20000)            # log-uniform magnitudes across all ranges
    mags = np.concatenate([ties.astype(np.float32), near, bounds,
                           (2.0 ** logs).astype(np.float32), np.nextafter(bounds, np.float32(0))])
    return np.concatenate([mags, -mags]).astype(np.float32)


def test_fp32_to_fp16_rounding_gives_numpys_bits_for_tiny_values():
    # the fast route for values below the normal range must round exactly as numpy's conversion
    x = _fp16_edge_values()
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    out = np.empty(x.size, np.float16)
    nm.cast_into(out, x, nm.FP16, "rint")
    np.testing.assert_array_equal(out.view(np.uint16), want)
    np.testing.assert_array_equal(nm.round_to(x, nm.FP16).view(np.uint16), want)
    # ties go to the even multiple of 2^-24: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2 steps
    ties = np.array([0.5, 1.5, 2.5], np.float32) * np.float32(2.0 ** -24)
    np.testing.assert_array_equal(nm.round_to(ties, nm.FP16).view(np.uint16), [0, 2, 2])


def test_fp16_rounding_leaves_its_input_alone():
    x = np.array([1e-7, -3e-6, 1.0], np.float32)
    before = x.copy()
    nm.round_to(x, nm.FP16)
    nm.cast_into(np.empty(3, np.float16), x, nm.FP16)
    np.testing.assert_array_equal(x, before)
