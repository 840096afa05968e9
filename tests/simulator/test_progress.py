"""Progress reports from the event loop: they come while the device simulates, in order, and the
run's results are those of a run without them."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import opsim
from opsim import devices
from opsim.simulator import progress as progress_module
from opsim.simulator.device import Device
from opsim.simulator.errors import DeadlockError
from opsim.simulator.isa import WaitFlag

A2 = devices.load("atlas-a2")


@pytest.fixture
def fast_clock(monkeypatch):
    """A wall clock that moves one second per reading: every tick reports."""
    now = [0.0]

    def tick() -> float:
        now[0] += 1.0
        return now[0]
    monkeypatch.setattr(progress_module.time, "perf_counter", tick)


def _mse(n: int, **kw):
    rng = np.random.default_rng(3)
    g, x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    return opsim.run("mse_loss_backward", device="atlas-a2", grad_output=g, self=x, target=y,
                     reduction="mean", **kw)


def _digest(res) -> tuple:
    trace = json.dumps(res.trace.to_chrome_json(), sort_keys=True) if res.trace is not None else ""
    outs = {n: a.tobytes() for n, a in res.outputs.items()}
    return res.cycles, json.dumps(res.stats, sort_keys=True, default=str), trace, outs


def test_reports_come_in_order_and_change_nothing(fast_clock):
    seen: list[int] = []
    with_progress = _mse(1 << 16, progress=seen.append)
    plain = _mse(1 << 16)
    assert _digest(with_progress) == _digest(plain)
    # a tick comes at least every time the queue's horizon is reached: several reports
    assert len(seen) >= 3
    assert seen == sorted(seen) and seen[-1] <= plain.cycles


def test_a_multi_launch_timing_run_is_unchanged(fast_clock):
    ts = opsim.TensorSpec
    ops = {"grad": ts((64,), "fp32"), "input": ts((64, 256), "bf16"), "weight": ts((512, 256), "bf16"),
           "target_mask": ts((64,), "bool"), "masked_target": ts((64,), "int64"),
           "softmax": ts((64, 512), "fp32")}
    seen: list[int] = []
    a = opsim.run("fused_linear_cross_entropy_loss_grad", mode="timing", progress=seen.append, **ops)
    b = opsim.run("fused_linear_cross_entropy_loss_grad", mode="timing", **ops)
    assert _digest(a) == _digest(b)
    assert seen


def test_a_deadlock_is_still_reported_as_one(fast_clock):
    def kernel(ctx):
        yield WaitFlag("MTE2", "VECTOR", 3)
    dev = Device(A2)
    seen: list[int] = []
    dev.progress = seen.append
    s = dev.create_stream()
    dev.launch(s, kernel, 1)
    with pytest.raises(DeadlockError, match="no event can make progress"):
        dev.synchronize(s)


def test_a_failing_callback_is_warned_about_and_the_run_goes_on(fast_clock):
    def broken(cycle: int) -> None:
        raise ValueError("display gone")
    with pytest.warns(RuntimeWarning, match="progress callback raised ValueError: display gone"):
        res = _mse(1 << 14, progress=broken)
    assert _digest(res) == _digest(_mse(1 << 14))


def test_no_report_without_wall_time_passing():
    seen: list[int] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _mse(1 << 10, progress=seen.append)
    assert seen == []         # a run shorter than a quarter second reports nothing


def test_progress_must_be_callable():
    with pytest.raises(TypeError, match="progress must be a callable.*got int"):
        _mse(1 << 10, progress=5)


def test_a_deadlocked_machine_stops_at_the_same_cycle(fast_clock):
    def kernel(ctx):
        yield WaitFlag("MTE2", "VECTOR", 3)

    def stopped_at(progress) -> int:
        dev = Device(A2)
        dev.progress = progress
        s = dev.create_stream()
        dev.launch(s, kernel, 1)
        with pytest.raises(DeadlockError):
            dev.synchronize(s)
        return dev.now
    seen: list[int] = []
    assert stopped_at(seen.append) == stopped_at(None)
    assert all(c <= stopped_at(None) for c in seen)


def test_a_tick_does_not_outlive_its_run_nor_a_failed_callback(fast_clock):
    from opsim.simulator.isa import ScalarOp

    def kernel(ctx):
        for _ in range(50):
            yield ScalarOp(1000)
    dev = Device(A2)
    first: list[int] = []
    dev.progress = first.append
    s = dev.create_stream()
    dev.launch(s, kernel, 1)
    dev.synchronize(s)
    ticker = dev._ticker
    assert first and not any(entry[3].callbacks == [ticker._tick] for entry in dev.env._queue)
    calls = len(first)
    dev.progress = None                   # a later run without progress: the old callback is quiet
    dev.launch(s, kernel, 1)
    dev.synchronize(s)
    assert len(first) == calls

    failures: list[int] = []

    def broken(cycle: int) -> None:
        failures.append(cycle)
        raise ValueError("display gone")
    dev.progress = broken
    with pytest.warns(RuntimeWarning):
        for _ in range(3):
            dev.launch(s, kernel, 1)
            dev.synchronize(s)
    assert len(failures) == 1             # called once, then never again on this device
