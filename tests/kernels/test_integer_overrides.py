"""Every integer tiling override (and integer device field override) takes a numpy integer as the
plain int it equals: a sweep over ``np.arange`` runs, traces and records exactly as the int call,
while a bool, a float or a string is still refused by name with the operator's status code."""
from __future__ import annotations

import json
import re
from typing import Any, Callable

import ml_dtypes
import numpy as np
import pytest

import opsim
from opsim.devices.spec import SpecError
from opsim.kernels.common import ACLNN_ERR_INNER_TILING_ERROR
from opsim.kernels.dsp import DspStatus

F32 = np.zeros(64, np.float32) + np.linspace(0.1, 0.9, 64, dtype=np.float32)


def _mse(tiling: dict, **kw: Any) -> opsim.RunResult:
    return opsim.run("mse_loss_backward", grad_output=np.ones(64, np.float32), self=F32, target=F32[::-1].copy(),
                     tiling=tiling, **kw)


def _bce(tiling: dict, **kw: Any) -> opsim.RunResult:
    return opsim.run("binary_cross_entropy_backward", grad_output=np.ones(64, np.float32), self=F32,
                     target=F32[::-1].copy(), reduction=0, tiling=tiling, **kw)


def _flce(tiling: dict, **kw: Any) -> opsim.RunResult:
    bt, h, v, bf16 = 4, 32, 64, ml_dtypes.bfloat16
    rng = np.random.default_rng(0)
    return opsim.run("fused_linear_cross_entropy_loss_grad", grad=np.ones(bt, np.float32),
                     input=rng.standard_normal((bt, h)).astype(bf16), weight=rng.standard_normal((v, h)).astype(bf16),
                     target_mask=np.zeros(bt, bool), masked_target=np.arange(bt, dtype=np.int64),
                     logits_max=np.zeros(bt, np.float32), sum_exp_logits=np.full(bt, 64.0, np.float32),
                     tiling=tiling, **kw)


def _embedding(tiling: dict, **kw: Any) -> opsim.RunResult:
    rng = np.random.default_rng(1)
    return opsim.run("embedding_dense_backward", grad=rng.standard_normal((16, 32)).astype(np.float32),
                     indices=(np.arange(16) % 5).astype(np.int64), num_weights=8, tiling=tiling, **kw)


def _dsp(tiling: dict, **kw: Any) -> opsim.RunResult:
    return opsim.run("binarycrossentropygrad", device="mt7004", input_x=F32, input_y=F32[::-1].copy(), weight=None,
                     dloss=np.ones(1, np.float32), reduction=1, tiling=tiling, **kw)


# (run, status code of a refused override, {override: a value the call accepts})
OPS: dict[str, tuple[Callable[..., opsim.RunResult], int, dict[str, int]]] = {
    "mse": (_mse, ACLNN_ERR_INNER_TILING_ERROR, {"block_dim": 2, "tile_length": 32, "buffer_num": 2}),
    "bce": (_bce, ACLNN_ERR_INNER_TILING_ERROR, {"block_dim": 2, "tile_length": 32, "buffer_num": 2}),
    "flce": (_flce, ACLNN_ERR_INNER_TILING_ERROR,
             {"block_dim": 2, "base_m": 16, "base_n": 32, "base_k": 16, "step_k": 2, "l0c_depth": 1,
              "vec_chunk": 32, "coarsen": 2}),
    "embedding": (_embedding, ACLNN_ERR_INNER_TILING_ERROR, {"block_dim": 2, "e_chunk": 16}),
    "dsp": (_dsp, int(DspStatus.ERR_INVALID_ARGUMENT), {"tile_length": 32, "buffer_num": 2, "work_area": 8192}),
}
CASES = [(op, key) for op, (_, _, keys) in OPS.items() for key in keys]


def _trace_doc(res: opsim.RunResult) -> str:
    return json.dumps(res.trace.to_chrome_json(), sort_keys=True)


def _same_run(got: opsim.RunResult, want: opsim.RunResult) -> None:
    assert got.cycles == want.cycles
    for name, out in want.outputs.items():
        assert got.outputs[name].tobytes() == out.tobytes(), name
    assert _trace_doc(got) == _trace_doc(want)          # no numpy scalar leaks into the record
    assert repr(got.tiling) == repr(want.tiling)


@pytest.mark.parametrize("op,key", CASES)
def test_a_numpy_integer_override_runs_as_the_same_python_int(op: str, key: str) -> None:
    # MSE/BCE refused it as "tiling override block_dim = np.int64(2) must be an integer", FLCE as
    # "must be a positive integer", embedding and the DSP library by their own messages
    run, _, keys = OPS[op]
    want = run({key: keys[key]}, trace="launch")
    got = run({key: np.int64(keys[key])}, trace="launch")
    _same_run(got, want)


@pytest.mark.parametrize("op", OPS)
def test_every_override_at_once_as_numpy_integers_of_any_width(op: str) -> None:
    run, _, keys = OPS[op]
    kinds = (np.int64, np.int32, np.uint16, np.int16)
    want = run(dict(keys), trace="launch")
    got = run({k: kinds[i % len(kinds)](v) for i, (k, v) in enumerate(keys.items())}, trace="launch")
    _same_run(got, want)


@pytest.mark.parametrize("op,key", CASES)
@pytest.mark.parametrize("value", [True, np.bool_(True), 2.0, "2"], ids=repr)
def test_a_non_integer_override_is_still_refused(op: str, key: str, value: Any) -> None:
    run, code, _ = OPS[op]
    with pytest.raises(opsim.OpError) as err:
        run({key: value}, trace="off")
    assert err.value.code == code, str(err.value)
    # the existing message shapes: "tiling override KEY = VALUE must be ..." or "KEY VALUE must be ..."
    assert re.search(rf"\b{key} (= )?{re.escape(repr(value))} must be\b", err.value.message), err.value.message


def test_a_numpy_integer_out_of_range_is_refused_as_its_value() -> None:
    with pytest.raises(opsim.OpError) as err:
        _mse({"block_dim": np.int64(0)}, trace="off")
    assert err.value.code == ACLNN_ERR_INNER_TILING_ERROR
    assert err.value.message == "block_dim 0 must be a positive integer"


@pytest.mark.parametrize("field,value", [("ub.size", 131072), ("cores.aiv", 24), ("l2.size", 1 << 24)])
def test_a_numpy_integer_device_field_runs_as_the_same_python_int(field: str, value: int) -> None:
    # devices/spec.py refused it as "field 'ub.size' must be an integer, got np.int64(131072)"
    want = _mse({}, device_overrides={field: value}, trace="launch")
    got = _mse({}, device_overrides={field: np.int64(value)}, trace="launch")
    _same_run(got, want)
    assert opsim.device_spec("atlas-a2", {field: np.int64(value)}).provenance == \
        opsim.device_spec("atlas-a2", {field: value}).provenance


@pytest.mark.parametrize("value", [True, np.bool_(True), "131072"], ids=repr)
def test_a_non_integer_device_field_is_still_refused(value: Any) -> None:
    with pytest.raises(SpecError) as err:
        opsim.device_spec("atlas-a2", {"ub.size": value})
    assert f"field 'ub.size' must be an integer, got {value!r}" in str(err.value)


# --- numpy floating scalars for float-valued device fields, numpy bools for boolean overrides ---

@pytest.mark.parametrize("field,value", [("clock_hz", 1.5e9), ("hbm.bandwidth", 1.25e12), ("l2.bandwidth", 2.0e12)])
@pytest.mark.parametrize("kind", [np.float32, np.float64], ids=lambda k: k.__name__)
def test_a_numpy_float_device_field_runs_as_the_same_python_float(field: str, value: float, kind: type) -> None:
    # devices/spec.py refused np.float32 as "field 'clock_hz' must be an integer, got
    # np.float32(1.5e+09)" (np.float64, a float subclass, passed but reached the provenance as
    # np.float64(...)); the plain call gets the value the numpy scalar holds
    plain = float(kind(value))
    want = _mse({}, device_overrides={field: plain}, trace="launch")
    got = _mse({}, device_overrides={field: kind(value)}, trace="launch")
    _same_run(got, want)
    assert opsim.device_spec("atlas-a2", {field: kind(value)}).provenance == \
        opsim.device_spec("atlas-a2", {field: plain}).provenance


@pytest.mark.parametrize("field,value,message", [
    ("hbm.bandwidth", np.float32("nan"), "field 'gm.bandwidth' must be a finite number, got nan"),
    ("hbm.bandwidth", np.float64("inf"), "field 'gm.bandwidth' must be a finite number, got inf"),
    ("hbm.bandwidth", np.float32(-1.0), "field 'gm.bandwidth' must be >= 0, got -1.0"),
    ("clock_hz", np.float32(1.25), "field 'clock_hz' must be an integer, got 1.25"),
    ("hbm.bandwidth", np.array([1.0e12], np.float32), "field 'gm.bandwidth' must be a finite number, got array("),
    ("hbm.bandwidth", np.array(1.0e12), "field 'gm.bandwidth' must be a finite number, got array("),
    ("hbm.bandwidth", np.bool_(True), "field 'gm.bandwidth' must be a finite number, got np.True_"),
    ("hbm.bandwidth", "1e12", "field 'gm.bandwidth' must be a finite number, got '1e12'"),
], ids=repr)
def test_a_numpy_float_device_field_is_judged_as_its_value(field: str, value: Any, message: str) -> None:
    with pytest.raises(SpecError) as err:
        opsim.device_spec("atlas-a2", {field: value})
    assert message in str(err.value)


def test_a_numpy_bool_cast_grad_runs_as_the_same_python_bool() -> None:
    # embedding's cast_grad override refused np.bool_(False) as "cast_grad np.False_ must be True or False"
    rng = np.random.default_rng(2)
    ops = dict(grad=rng.standard_normal((16, 32)).astype(np.float16), indices=(np.arange(16) % 5).astype(np.int64),
               num_weights=8)
    for flag in (True, False):
        want = opsim.run("embedding_dense_backward", tiling={"cast_grad": flag}, trace="launch", **ops)
        got = opsim.run("embedding_dense_backward", tiling={"cast_grad": np.bool_(flag)}, trace="launch", **ops)
        _same_run(got, want)
        assert got.tiling.cast_grad is flag
    with pytest.raises(opsim.OpError) as err:
        opsim.run("embedding_dense_backward", tiling={"cast_grad": np.array([True])}, trace="off", **ops)
    assert err.value.code == ACLNN_ERR_INNER_TILING_ERROR
    assert err.value.message == "cast_grad array([ True]) must be True or False"
