"""opsim.run and friends: modes, overrides, errors, the RunResult contract."""
from __future__ import annotations

import numpy as np
import pytest

import opsim


def _xyz(n=4096, dt=np.float32):
    rng = np.random.default_rng(0)
    return {k: rng.standard_normal(n).astype(dt) for k in ("grad_output", "self", "target")}


def test_devices_and_specs():
    names = opsim.devices()
    for n in ("atlas-training", "atlas-inference", "atlas-a2", "atlas-a3", "atlas-200i-500-a2", "ft78ne", "mt7004"):
        assert n in names
    spec = opsim.device_spec("atlas-a2", {"ub.size": 262144})
    assert spec.ub.size == 262144 and spec.provenance["ub.size"].kind == "override"


def test_result_carries_outputs_cycles_stats_and_trace():
    res = opsim.run("mse_loss_backward", **_xyz(), reduction="mean")
    assert res.outputs["out"].dtype == np.float32 and res.cycles > 0
    assert res.time_us == pytest.approx(res.cycles / 1.8e3)
    for key in ("block_dim", "tile_length", "bytes_read", "bytes_written", "bandwidth_GBps", "pipe_busy",
                "ub_peak_bytes", "bound", "bound_reason"):
        assert key in res.stats
    assert res.stats["bytes_read"] == 3 * 4096 * 4 and res.stats["bytes_written"] == 4096 * 4
    assert len(res.trace) > 0 and "core0.veccore0" in res.trace.processes


def test_timing_mode_takes_shapes_only_and_gives_the_same_cycles_as_full():
    full = opsim.run("mse_loss_backward", **_xyz(50000), reduction="sum", trace="off")
    spec = opsim.TensorSpec((50000,), "fp32")
    timing = opsim.run("mse_loss_backward", mode="timing", grad_output=spec, self=spec, target=spec,
                       reduction="sum", trace="off")
    assert timing.outputs == {} and timing.cycles == full.cycles


def test_numeric_mode_returns_the_golden_without_timing():
    res = opsim.run("mse_loss_backward", mode="numeric", **_xyz(), reduction="none")
    assert res.cycles == 0 and res.outputs["out"].shape == (4096,)


def test_full_mode_refuses_shape_only_operands():
    spec = opsim.TensorSpec((16,), "fp32")
    with pytest.raises(TypeError, match="timing"):
        opsim.run("mse_loss_backward", grad_output=spec, self=spec, target=spec)


def test_unknown_operator_argument_and_mode_are_named():
    with pytest.raises(KeyError, match="mse_loss_backward"):
        opsim.run("mse_loss_backwards", **_xyz())
    with pytest.raises(TypeError, match="'wieght'"):
        opsim.run("mse_loss_backward", **_xyz(), wieght=1)
    with pytest.raises(ValueError, match="mode"):
        opsim.run("mse_loss_backward", mode="fast", **_xyz())


def test_device_overrides_change_the_timing():
    base = opsim.run("mse_loss_backward", **_xyz(1 << 18), trace="off")
    fast = opsim.run("mse_loss_backward", **_xyz(1 << 18), trace="off",
                     device_overrides={"mte2.base": 2 * 9.9074, "mte2.shared": 2 * 15.896})
    assert fast.cycles < base.cycles
    assert np.array_equal(fast.outputs["out"], base.outputs["out"])


def test_tiling_overrides_are_honoured():
    res = opsim.run("mse_loss_backward", **_xyz(100000), trace="off",
                    tiling={"block_dim": 3, "tile_length": 1024, "buffer_num": 1})
    assert (res.stats["block_dim"], res.stats["tile_length"], res.stats["buffer_num"]) == (3, 1024, 1)
    with pytest.raises(opsim.OpError, match="blockdim"):
        opsim.run("mse_loss_backward", **_xyz(), tiling={"blockdim": 3})


def test_full_mode_keeps_the_callers_operands_and_returns_outputs_of_its_own():
    ops = _xyz(5000)
    before = {k: v.copy() for k, v in ops.items()}
    res = opsim.run("mse_loss_backward", **ops, reduction="none", trace="off")
    out = res.outputs["out"]
    for k, v in ops.items():
        np.testing.assert_array_equal(v, before[k])
        assert not np.shares_memory(out, v)
    assert out.flags.writeable and out.shape == (5000,)
    np.testing.assert_array_equal(out, (before["self"] - before["target"]) * np.float32(2.0) * before["grad_output"])
    out[:] = 0                                   # the caller may overwrite its result
    np.testing.assert_array_equal(ops["self"], before["self"])


def test_dsp_private_storage_outputs_are_returned_as_arrays_of_their_own():
    rng = np.random.default_rng(3)
    x, y, d = (rng.random(300).astype(np.float32) for _ in range(3))
    keep = [a.copy() for a in (x, y, d)]
    res = opsim.run("binarycrossentropygrad", device="mt7004", input_x=x, input_y=y, dloss=d, reduction="none",
                    storage="private", trace="off")
    ref = opsim.run("binarycrossentropygrad", device="mt7004", input_x=x, input_y=y, dloss=d, reduction="none",
                    trace="off")
    np.testing.assert_array_equal(res.outputs["dx"], ref.outputs["dx"])
    assert res.outputs["dx"].flags.writeable
    for a, k in zip((x, y, d), keep):
        np.testing.assert_array_equal(a, k)
