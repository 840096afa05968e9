"""The seed's CANN calling sequence runs against the simulated device and gets the golden."""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

from opsim.kernels.ascend import mse_backward as mse

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("device", ["atlas-a2", "atlas-training", "atlas-inference", "atlas-a3"])
def test_acl_mse_example_prints_the_golden(device, capsys):
    result = _load("acl_mse_loss_backward").main(["--device", device])
    shape = (2, 4)
    g = np.arange(8, dtype=np.float32).reshape(shape) * 0.5
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(shape)
    y = np.ones(shape, dtype=np.float32)
    gold = mse.golden({"grad_output": g, "self": x, "target": y}, {"reduction": 1})["out"]
    assert np.array_equal(result["out"], gold)
    out = capsys.readouterr().out
    assert "result[7] is:" in out and "cycles" in out and result["cycles"] > 0
    # end to end: the four H2D copies, the kernel and the D2H copy on the host link
    assert "end to end" in out and result["host_copy_cycles"] > 0
    assert result["end_to_end_cycles"] >= result["cycles"] + result["host_copy_cycles"]
