"""A finished machine goes away when its call returns (Device.close), not at the interpreter's
next full garbage collection; what the caller took (outputs, stats, traces) is kept whole.

The tests that watch a device go run with the cyclic collector off, so that only reference
counting can free it: a cycle left behind keeps the device alive and fails the test."""
from __future__ import annotations

import contextlib
import gc
import importlib
import weakref

import numpy as np
import pytest

import opsim
import opsim.api as api
import opsim.asc as asc
from opsim.simulator.acl import AclRuntime
from opsim.simulator.device import Device
from opsim.simulator.errors import MemoryFault, SimulatorError
from opsim.simulator.hthread import HT_SUCCESS, HThread


@contextlib.contextmanager
def _no_cycle_collection():
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _watch(monkeypatch, module):
    """Make ``module`` build its devices through a subclass that hands out weak references."""
    made: list[weakref.ref] = []

    class Watched(Device):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(weakref.ref(self))
    monkeypatch.setattr(module, "Device", Watched)
    return made


@pytest.mark.parametrize("mode, trace, ff", [("full", "off", False), ("timing", "instruction", False),
                                             ("timing", "off", True)])
def test_the_machine_is_freed_when_run_returns_and_its_output_is_intact(monkeypatch, mode, trace, ff):
    made = _watch(monkeypatch, api)
    n = 48 * 4096 + 1000
    rng = np.random.default_rng(3)
    x, y, dout = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    with _no_cycle_collection():
        r = opsim.run("mse_loss_backward", device="atlas-a2", mode=mode, trace=trace, fast_forward=ff,
                      grad_output=dout, self=x, target=y, reduction="none")
        assert len(made) == 1 and made[0]() is None          # freed by reference counting alone
    assert r.cycles > 0 and r.stats["instructions"] > 0
    if mode == "full":
        out = r.outputs["out"]
        # the kernel's op order (docs/sources.md#mse-tiling): Sub, Muls(cof = 2), Mul(dout), all fp32
        assert np.array_equal(out, ((x - y) * np.float32(2.0)) * dout)
        out[0] = 7.0                                           # the caller owns it: writable
    if trace != "off":
        assert next(iter(r.trace.slices()), None) is not None          # the trace is whole


def test_a_sweep_of_full_mode_calls_holds_one_machine_at_a_time(monkeypatch):
    made = _watch(monkeypatch, api)
    x = np.ones(1 << 16, np.float32)
    with _no_cycle_collection():
        for _ in range(4):
            opsim.run("mse_loss_backward", device="atlas-a2", grad_output=x, self=x, target=x,
                      reduction="mean", trace="off")
        assert [ref() for ref in made] == [None] * 4


@asc.jit
def _oob_kernel(x: asc.GlobalAddress, z: asc.GlobalAddress, n: int):
    xg, zg = asc.GlobalTensor(), asc.GlobalTensor()
    xg.set_global_buffer(x)
    zg.set_global_buffer(z)
    pipe = asc.TPipe()
    q = asc.TQue(asc.TPosition.VECIN, 1)
    pipe.init_buffer(q, 1, n * 4)
    t = q.alloc_tensor(asc.float32)
    asc.data_copy(t, xg, 4 * n)                  # four times what the buffer holds
    q.enque(t)
    t = q.deque(asc.float32)
    asc.data_copy(zg, t, n)
    q.free_tensor(t)


def test_a_failed_kernel_launch_still_closes_its_machine(monkeypatch):
    made = _watch(monkeypatch, importlib.import_module("opsim.asc.jit"))   # (opsim.asc.jit is also a function)
    x = np.ones(256, np.float32)
    z = np.zeros_like(x)
    with pytest.raises(MemoryFault, match=r"core0\.veccore0 pipe MTE2 .* overruns the local buffer of 64"):
        _oob_kernel[1, None](x, z, 64)
    dev = made[0]()
    # the exception's frames may still hold the device: closed all the same, its memory gone
    assert dev is None or (dev.closed and dev.gm.backed_bytes == 0 and dev.gm.allocated_bytes == 0)
    assert np.array_equal(x, np.ones(256, np.float32)) and not z.any()   # the caller's arrays untouched


def test_a_closed_device_refuses_work_and_closing_again_does_nothing():
    dev = Device(opsim.devices.load("atlas-a2"))
    stream = dev.create_stream()
    dev.close()
    dev.close()
    with pytest.raises(SimulatorError, match="closed"):
        dev.launch(stream, lambda ctx: iter(()), 1)
    with pytest.raises(SimulatorError, match="closed"):
        dev.synchronize()
    with pytest.raises(SimulatorError, match="closed"):
        dev.run_until(10)


def test_resetting_the_runtimes_device_frees_it():
    with _no_cycle_collection():
        rt = AclRuntime("atlas-a2", trace_level="off")
        assert rt.aclInit() == 0 and rt.aclrtSetDevice(0) == 0
        ref = weakref.ref(rt.device)
        assert rt.aclrtResetDevice(0) == 0 and ref() is None
        assert rt.aclrtSetDevice(0) == 0
        ref = weakref.ref(rt.device)
        assert rt.aclFinalize() == 0 and ref() is None
        ht = HThread("ft78ne", trace_level="off")
        assert ht.hthread_dev_open(0) == HT_SUCCESS
        ref = weakref.ref(ht.device)
        assert ht.hthread_dev_close(0) == HT_SUCCESS and ref() is None
