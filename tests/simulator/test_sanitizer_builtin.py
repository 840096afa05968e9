"""Every built-in operator runs clean under the sanitizer, with the same bits and cycles."""
from __future__ import annotations

import numpy as np
import pytest

import opsim
from opsim import devices
from opsim.demo import demo_cases
from opsim.kernels import registry

CASES = demo_cases()
# the quick lane: one case per operator (the first device and dtype the demo lists for it)
QUICK = list({op: (op, dev, dt) for op, dev, dt in reversed(CASES)}.values())
SLOW = [c for c in CASES if c not in QUICK]


def _param(cases, slow):
    marks = [pytest.mark.slow] if slow else []
    return [pytest.param(*c, id=f"{c[0]}-{c[1]}-{c[2]}", marks=marks) for c in cases]


def _bits(outputs: dict[str, np.ndarray]) -> dict[str, bytes]:
    return {k: np.ascontiguousarray(v).tobytes() for k, v in outputs.items()}


@pytest.mark.parametrize("op,dev,dt", _param(QUICK, False) + _param(SLOW, True))
def test_builtin_operator_is_clean_and_unchanged_under_the_sanitizer(op: str, dev: str, dt: str) -> None:
    opdef = registry.get(op)
    kwargs = opdef.example(np.random.default_rng(0), devices.load(dev), dt)
    plain = opsim.run(op, device=dev, **kwargs)
    checked = opsim.run(op, device=dev, sanitize=True, **kwargs)
    assert checked.sanitizer is not None and plain.sanitizer is None
    assert checked.sanitizer.ok, str(checked.sanitizer)
    assert checked.sanitizer.instructions > 0
    assert checked.cycles == plain.cycles
    assert _bits(checked.outputs) == _bits(plain.outputs)
    assert len(checked.trace) == len(plain.trace)


def test_the_sanitizer_also_runs_in_timing_mode() -> None:
    opdef = registry.get("mse_loss_backward")
    kwargs = opdef.example(np.random.default_rng(0), devices.load("atlas-a2"), "fp16")
    kwargs = {k: (opsim.TensorSpec(v.shape, v.dtype) if isinstance(v, np.ndarray) else v) for k, v in kwargs.items()}
    plain = opsim.run("mse_loss_backward", mode="timing", **kwargs)
    checked = opsim.run("mse_loss_backward", mode="timing", sanitize=True, **kwargs)
    assert checked.sanitizer.ok, str(checked.sanitizer)
    assert checked.cycles == plain.cycles


def test_sanitize_needs_a_simulated_run() -> None:
    opdef = registry.get("mse_loss_backward")
    kwargs = opdef.example(np.random.default_rng(0), devices.load("atlas-a2"), "fp32")
    with pytest.raises(ValueError, match="sanitize=True needs mode 'full' or 'timing'.*numeric"):
        opsim.run("mse_loss_backward", mode="numeric", sanitize=True, **kwargs)


@pytest.mark.parametrize("mode", ["full", "timing"])
def test_an_empty_call_under_the_sanitizer_has_an_empty_report(mode: str) -> None:
    # nothing is launched, so nothing can be wrong: `res.sanitizer.ok` must work (it was None)
    empty = np.zeros((0, 8), np.float32)
    operand = empty if mode == "full" else opsim.TensorSpec(empty.shape, "fp32")
    res = opsim.run("mse_loss_backward", mode=mode, sanitize=True, grad_output=operand, self=operand,
                    target=operand)
    assert res.sanitizer is not None and res.sanitizer.ok and res.sanitizer.instructions == 0
    assert opsim.run("mse_loss_backward", mode=mode, grad_output=operand, self=operand,
                     target=operand).sanitizer is None
