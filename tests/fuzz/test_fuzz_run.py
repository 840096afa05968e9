"""Fuzzing opsim.run and opsim.TensorSpec: every call either runs or raises a documented
exception on purpose (OpError with its code, TypeError / ValueError / KeyError naming the
problem, or a simulator fault such as MemoryFault), and no call changes the caller's arrays.

Each example starts from a valid call of one operator (its own example operands, small) and
breaks it in up to three ways: an operand replaced, reshaped, retyped or left out; an attribute,
the tiling, the device overrides, the seed, the mode, the trace level, the device or the
operator name set to something wrong.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import opsim
from opsim.kernels import registry
from opsim.simulator import numerics as nx
from opsim.simulator.errors import (CapacityError, DeadlockError, MemoryFault, SimulatorError,
                                    UnsupportedInstruction)

from fuzz_harness import COUNTS, digest_arrays, fuzz_settings, garbage, raised_on_purpose, record

# small calls, so that a valid one simulates in milliseconds
OPS = {"mse_loss_backward": ("atlas-a2", (4, 40)), "binary_cross_entropy_backward": ("atlas-a2", (4, 40)),
       "embedding_dense_backward": ("atlas-a2", (8, 16)),
       "fused_linear_cross_entropy_loss_grad": ("atlas-a2", (4, 16, 32)),
       "binarycrossentropygrad": ("mt7004", 64)}
MODES = ("full", "timing", "numeric", "estimate")
DOCUMENTED = (opsim.OpError, TypeError, ValueError, KeyError, MemoryFault, CapacityError, UnsupportedInstruction,
              DeadlockError)
TILING_KEYS = ("block_dim", "tile_length", "buffer_num", "core_mask", "e_chunk", "cast_grad", "base_m", "base_n",
               "base_k", "step_k", "l0c_depth", "vec_chunk", "coarsen", "work_area", "x")
DEVICE_FIELDS = ("ub.size", "gm.bandwidth", "launch.overhead", "cores.aiv", "mte2.base", "x.y")
DTYPES = (np.float32, np.float16, nx.BF16.np_dtype, np.int32, np.int64, np.int8, np.uint8, np.bool_,
          np.float64, np.complex64, object)


def _not_big(v: Any) -> bool:
    """Leave out integers that would make a valid-looking call huge (host memory is the edges'
    concern, not this suite's)."""
    return not (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and abs(int(v)) > 4096)


def small_array(draw: Any) -> Any:
    dtype = draw(st.sampled_from(DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=4)))
    rng = np.random.default_rng(draw(st.integers(0, 9)))
    if dtype is object:
        return np.zeros(shape, dtype=object)
    if np.dtype(dtype).kind in "iub":
        return rng.integers(-2, 10, size=shape).astype(dtype)
    return rng.uniform(0.01, 0.99, size=shape).astype(np.float32).astype(dtype)


def tensor_spec(draw: Any) -> Any:
    """A TensorSpec (its construction is an entry point too: it may refuse the dims)."""
    dims = draw(st.lists(st.one_of(st.integers(-2, 9), garbage().filter(_not_big)), max_size=4))
    if draw(st.booleans()):
        dims = draw(st.one_of(garbage().filter(_not_big), st.just(dims)))
    dtype = draw(st.one_of(st.sampled_from(("fp32", "fp16", "bf16", "int32", "int64", "bool")), garbage()))
    return _call("TensorSpec", lambda: opsim.TensorSpec(dims, dtype), ())


@st.composite
def run_calls(draw: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    op = draw(st.sampled_from(sorted(OPS)))
    dev, shape = OPS[op]
    opdef = registry.get(op)
    spec = opsim.device_spec(dev)
    dt = draw(st.sampled_from(opdef.dtypes(spec)))
    kw = opdef.example(np.random.default_rng(draw(st.integers(0, 3))), spec, dt, shape)
    call: dict[str, Any] = {"device": dev, "mode": draw(st.sampled_from(MODES)), "trace": "off"}
    if call["mode"] in ("timing", "estimate") and draw(st.booleans()):
        kw = {k: opsim.TensorSpec(v.shape, v.dtype) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    tensors = [*opdef.inputs, *opdef.optional, *opdef.outputs]
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(("operand", "operand", "reshape", "attr", "attr", "missing", "extra", "tiling",
                                     "overrides", "seed", "mode", "trace", "device", "op")))
        if kind == "operand":
            how = draw(st.sampled_from(("garbage", "array", "spec")))
            value = draw(garbage()) if how == "garbage" else small_array(draw) if how == "array" else tensor_spec(draw)
            if isinstance(value, Exception):
                continue
            kw[draw(st.sampled_from(tensors))] = value
        elif kind == "reshape":
            name = draw(st.sampled_from([k for k in tensors if isinstance(kw.get(k), np.ndarray)] or tensors))
            if isinstance(kw.get(name), np.ndarray):
                old = kw[name]
                new_shape = tuple(draw(st.lists(st.integers(0, 6), max_size=4)))
                kw[name] = np.resize(old, new_shape) if old.size else np.zeros(new_shape, old.dtype)
        elif kind == "attr" and opdef.attrs:
            name = draw(st.sampled_from(sorted(opdef.attrs)))
            value = draw(st.one_of(garbage(), st.integers(-3, 40),
                                   st.sampled_from(("none", "mean", "sum", "shared", "private", 0.1))))
            if name == "num_weights" and not _not_big(value):
                continue
            kw[name] = value
        elif kind == "missing":
            kw.pop(draw(st.sampled_from(tensors)), None)
        elif kind == "extra":
            kw[draw(st.sampled_from(("wieght", "reduction_", "self_")))] = 1
        elif kind == "tiling":
            call["tiling"] = draw(st.one_of(
                garbage(), st.dictionaries(st.sampled_from(TILING_KEYS),
                                           st.one_of(garbage().filter(_not_big), st.integers(-2, 5000)),
                                           max_size=2)))
        elif kind == "overrides":
            wrong = st.one_of(st.none(), st.text(max_size=2), st.just([1]), st.just(float("nan")))
            call["device_overrides"] = draw(st.one_of(garbage(), st.dictionaries(st.sampled_from(DEVICE_FIELDS), wrong,
                                                                                 max_size=1)))
        elif kind == "seed":
            call["seed"] = draw(st.one_of(garbage(), st.integers(-5, 2 ** 70)))
        elif kind == "mode":
            call["mode"] = draw(garbage())
        elif kind == "trace":
            call["trace"] = draw(st.one_of(garbage(), st.sampled_from(("launch", "tile", "instruction"))))
        elif kind == "device":
            call["device"] = draw(st.one_of(st.sampled_from(opsim.devices()), garbage().filter(
                lambda v: not isinstance(v, str) or not v.strip() or v.isalnum())))
        elif kind == "op":
            return draw(st.one_of(garbage(), st.just("mse_loss_backwards"))), call, kw
    return op, call, kw


def _call(surface: str, fn: Any, arrays: Any) -> Any:
    """Run one entry-point call; count it; fail on an undocumented exception or a changed input."""
    COUNTS[f"python.calls.{surface}"] += 1
    before = digest_arrays(arrays)
    try:
        out = fn()
        COUNTS[f"python.ok.{surface}"] += 1
        return out
    except Exception as exc:  # noqa: BLE001 - classifying is the point
        documented = (isinstance(exc, DOCUMENTED) and type(exc) is not SimulatorError and raised_on_purpose(exc)
                      and "internal error" not in str(exc))
        if not documented:
            record("python.undocumented_exceptions", f"{surface}: {type(exc).__name__}: {exc}")
            raise AssertionError(f"{surface} leaked {type(exc).__name__}: {exc}") from exc
        COUNTS[f"python.raised.{type(exc).__name__}"] += 1
        return exc
    finally:
        if digest_arrays(arrays) != before:
            record("python.inputs_changed", surface)
            raise AssertionError(f"{surface} changed a caller's array")


def _run_one(op: Any, call: dict[str, Any], kw: dict[str, Any]) -> None:
    res = _call("opsim.run", lambda: opsim.run(op, **call, **kw), kw.values())
    if isinstance(res, opsim.RunResult):
        assert isinstance(res.cycles, int) and res.cycles >= 0
        assert all(isinstance(v, np.ndarray) for v in res.outputs.values())


@given(run_calls())
@fuzz_settings(150)
def test_run_answers_or_raises_a_documented_error_quick(case):
    _run_one(*case)


@pytest.mark.slow
@given(run_calls())
@fuzz_settings(10_500)
def test_run_answers_or_raises_a_documented_error_ci(case):
    _run_one(*case)
