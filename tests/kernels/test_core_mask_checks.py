"""Every core_mask check agrees: a numpy integer is an integer, a bool or a float is not, and a
refusal names core_mask, the value and the allowed masks of that device's cores, with each
caller's own status code (561002 for an aclnn tiling, the DSP status for a DSP call, a
SimulatorError from Device.launch for a user kernel)."""
from __future__ import annotations

import json
from typing import Any, Callable

import ml_dtypes
import numpy as np
import pytest

import opsim
import opsim.asc as asc
from opsim.kernels.common import ACLNN_ERR_INNER_TILING_ERROR, ACLNN_ERR_PARAM_INVALID
from opsim.kernels.dsp import DspStatus

F32 = np.zeros(64, np.float32)


def _mse(mask: Any, trace: str = "off") -> opsim.RunResult:
    return opsim.run("mse_loss_backward", grad_output=F32, self=F32, target=F32, tiling={"core_mask": mask},
                     trace=trace)


def _bce(mask: Any, trace: str = "off") -> opsim.RunResult:
    return opsim.run("binary_cross_entropy_backward", grad_output=F32, self=F32 + 0.5, target=F32, reduction=0,
                     tiling={"core_mask": mask}, trace=trace)


def _flce(mask: Any, trace: str = "off") -> opsim.RunResult:
    bt, h, v, bf16 = 4, 16, 32, ml_dtypes.bfloat16
    rng = np.random.default_rng(0)
    return opsim.run("fused_linear_cross_entropy_loss_grad", grad=np.ones(bt, np.float32),
                     input=rng.standard_normal((bt, h)).astype(bf16), weight=rng.standard_normal((v, h)).astype(bf16),
                     target_mask=np.zeros(bt, bool), masked_target=np.arange(bt, dtype=np.int64),
                     logits_max=np.zeros(bt, np.float32), sum_exp_logits=np.full(bt, 64.0, np.float32),
                     tiling={"core_mask": mask}, trace=trace)


def _dsp(mask: Any, trace: str = "off") -> opsim.RunResult:
    return opsim.run("binarycrossentropygrad", device="mt7004", input_x=F32 + 0.5, input_y=F32, weight=None,
                     dloss=np.ones(1, np.float32), reduction=1, core_mask=mask, trace=trace)


@asc.jit
def _fill(z: asc.GlobalAddress):
    zg = asc.GlobalTensor()
    zg.set_global_buffer(z)
    a = asc.LocalTensor(asc.float32, asc.TPosition.VECIN, 0, 64)
    asc.duplicate(a, 2.0, 64)
    asc.set_flag(asc.HardEvent.V_MTE3, 0)
    asc.wait_flag(asc.HardEvent.V_MTE3, 0)
    asc.data_copy(zg, a, 64)


def _user(mask: Any, trace: str = "off") -> Any:
    return asc.jit(core_mask=mask, trace=trace)(_fill.fn)[1, None](np.zeros(64, np.float32))


# (run, error type, status code or None, core count, core kind, device)
OPS: dict[str, tuple[Callable[..., Any], type, int | None, int, str, str]] = {
    "mse": (_mse, opsim.OpError, ACLNN_ERR_INNER_TILING_ERROR, 48, "vector", "atlas-a2"),
    "bce": (_bce, opsim.OpError, ACLNN_ERR_INNER_TILING_ERROR, 48, "vector", "atlas-a2"),
    "flce": (_flce, opsim.OpError, ACLNN_ERR_INNER_TILING_ERROR, 24, "cube", "atlas-a2"),
    "dsp": (_dsp, opsim.OpError, int(DspStatus.ERR_CORE_MASK), 4, "DSP", "mt7004"),
    "asc": (_user, opsim.SimulatorError, None, 48, "vector", "atlas-a2"),
}


def _trace_doc(res: Any) -> str:
    return json.dumps(res.trace.to_chrome_json(), sort_keys=True)


@pytest.mark.parametrize("op", OPS)
def test_a_numpy_integer_mask_runs_as_the_same_python_int(op: str) -> None:
    # the element-wise plan (MSE, BCE) refused np.int64 as "must be an integer", FLCE's as "must
    # select between 1 and 24" while Device.launch and the DSP library took it
    run = OPS[op][0]
    want = run(0b101, trace="launch")
    got = run(np.int64(0b101), trace="launch")
    for name, out in want.outputs.items():
        assert got.outputs[name].tobytes() == out.tobytes(), name
    assert _trace_doc(got) == _trace_doc(want)            # no numpy scalar leaks into the record


def _refusal(op: str, mask: Any) -> str:
    run, error, code, *_ = OPS[op]
    with pytest.raises(error) as err:
        run(mask)
    if code is not None:
        assert err.value.code == code, str(err.value)
    return str(err.value)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("mask", [True, np.bool_(True), 1.5, 3.0, "3"], ids=repr)
def test_a_mask_that_is_not_an_integer_is_refused_alike(op: str, mask: Any) -> None:
    _, _, _, cores, kind, device = OPS[op]
    msg = _refusal(op, mask)
    assert f"core_mask {mask!r} is not an integer; allowed: 0x1..{(1 << cores) - 1:#x} (bit i = core i of " \
           f"the {cores} {kind} cores of {device})" in msg, msg


@pytest.mark.parametrize("op", OPS)
def test_a_mask_beyond_the_cores_is_refused_alike(op: str) -> None:
    _, _, _, cores, kind, device = OPS[op]
    msg = _refusal(op, 1 << cores)
    assert f"core_mask {1 << cores:#x} selects cores beyond the {cores} {kind} cores of {device}; " \
           f"allowed: 0x1..{(1 << cores) - 1:#x} (bit i = core i)" in msg, msg
    msg = _refusal(op, np.int64(-1))
    assert f"core_mask -0x1 selects cores beyond the {cores} {kind} cores of {device}" in msg, msg


@pytest.mark.parametrize("op", OPS)
def test_a_mask_of_no_core_is_refused_alike(op: str) -> None:
    _, _, _, cores, kind, device = OPS[op]
    msg = _refusal(op, np.int64(0))
    assert f"core_mask 0x0 selects no core; allowed: 0x1..{(1 << cores) - 1:#x} (bit i = core i of the {cores} " \
           f"{kind} cores of {device})" in msg, msg


@pytest.mark.parametrize("mask", [np.int64(1), True, 1.5, 1 << 48], ids=repr)
def test_embedding_takes_no_core_mask_whatever_its_value(mask: Any) -> None:
    # embedding_dense_backward has no core_mask override: every value is refused the same way,
    # none of them as a badly typed mask
    with pytest.raises(opsim.OpError) as err:
        opsim.run("embedding_dense_backward", grad=np.zeros((4, 8), np.float32), indices=np.zeros(4, np.int64),
                  num_weights=8, tiling={"core_mask": mask}, trace="off")
    assert err.value.code == ACLNN_ERR_PARAM_INVALID
    assert err.value.message == "unknown tiling override(s) ['core_mask']; allowed: block_dim, e_chunk, cast_grad"
