"""The per-instruction issue path and the profiler's per-copy bookkeeping: what the fast paths
read from an instruction's slots is what ``trace_args`` says, and the checks an issue takes
inline still fail with the same errors, in the same order."""
from __future__ import annotations

from array import array
from typing import Any

import numpy as np
import pytest

import opsim
from opsim import api, devices
from opsim.simulator import numerics as nx
from opsim.simulator.cube import Fixpipe, GmMatrix
from opsim.simulator.device import Device
from opsim.simulator.errors import MemoryFault, SimulatorError
from opsim.simulator.isa import Add, DataCopy
from opsim.simulator.profile import COPY_PIPES, STORE_PIPES, Profiler
from opsim.simulator.tile import GlobalTensor


class TraceArgsProfile:
    """The profiler's byte and store bookkeeping done the long way: every copy's bytes and GM
    address from its ``trace_args``, as the profiler did before its fast path."""

    busy_only = True

    def __init__(self) -> None:
        self.bytes: dict[tuple, int] = {}
        self.stores: dict[int, array] = {}

    def on_instruction(self, core: Any, pipe: Any, instr: Any, start: int, end: int) -> None:
        pname = pipe.name
        if not (pname in COPY_PIPES or instr.name == "Copy"):
            return
        _, nbytes, addr, _ = instr.trace_args()
        key = (id(core.launch), core.name, pname, instr.name)
        self.bytes[key] = self.bytes.get(key, 0) + nbytes
        if (pname != "MTE1" and instr.name != "Copy" and addr >= 0
                and (pname in STORE_PIPES or (pname == "DMA" and getattr(instr, "_to_gm", False)))):
            self.stores.setdefault(id(core.launch), array("q")).append(addr)


def _observe(monkeypatch: pytest.MonkeyPatch, op: str, **kw: Any) -> tuple[Profiler, TraceArgsProfile]:
    prof, ref = Profiler(), TraceArgsProfile()
    real = api.Device

    def device(*a: Any, **k: Any) -> Any:
        dev = real(*a, **k)
        dev.observers.extend((prof, ref))
        return dev

    with monkeypatch.context() as m:
        m.setattr(api, "Device", device)
        opsim.run(op, device="atlas-a2", **kw)
    return prof, ref


def _profiled_bytes(prof: Profiler) -> dict[tuple, int]:
    out: dict[tuple, int] = {}
    for (lid, core, pipe, name, _), (_, _, nbytes) in prof.rows.items():
        if pipe in COPY_PIPES or name == "Copy":
            out[(lid, core, pipe, name)] = out.get((lid, core, pipe, name), 0) + nbytes
    return out


def test_the_profiler_counts_the_bytes_and_store_addresses_trace_args_gives_vector_copies(monkeypatch):
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal(70_000).astype(np.float32) for _ in range(2))
    prof, ref = _observe(monkeypatch, "mse_loss_backward", grad_output=np.float32(1.0), self=x, target=y,
                         reduction="none", trace="off")
    assert ref.bytes and _profiled_bytes(prof) == ref.bytes
    assert ref.stores and prof.stores == ref.stores


def test_the_profiler_counts_the_bytes_and_store_addresses_trace_args_gives_cube_copies(monkeypatch):
    ts = opsim.TensorSpec
    bt, h, v = 64, 256, 256
    prof, ref = _observe(monkeypatch, "fused_linear_cross_entropy_loss_grad", mode="timing", trace="off",
                         tiling={"coarsen": 1}, grad=ts((bt,), "fp32"), input=ts((bt, h), "bf16"),
                         weight=ts((v, h), "bf16"), target_mask=ts((bt,), "bool"),
                         masked_target=ts((bt,), "int64"), softmax=ts((bt, v), "fp32"))
    assert {"DataCopy", "LoadData", "Fixpipe"} <= {k[3] for k in ref.bytes}
    assert {"MTE1", "MTE2", "MTE3", "FIXP"} <= {k[2] for k in ref.bytes}
    assert _profiled_bytes(prof) == ref.bytes
    assert ref.stores and prof.stores == ref.stores
    # the on-chip moves are the LoadData bytes
    assert sum(prof.on_chip.values()) == sum(n for k, n in ref.bytes.items() if k[2] == "MTE1")


# ---------------------------------------------------------------------------------------------
# checks taken inline: the same errors, in the same order
# ---------------------------------------------------------------------------------------------

SPEC = devices.load("atlas-a2")


def _launch(kernel: Any, unit: str = "vector") -> None:
    dev = Device(SPEC, trace=None, functional=False)
    kernel.dev = dev
    dev.launch(dev.create_stream(), kernel, 1, unit=unit)
    dev.synchronize()


def _gm(dev: Device, n: int, dtype: Any = nx.FP32) -> GlobalTensor:
    dt = nx.dtype(dtype)
    return GlobalTensor.contiguous(dev, dev.malloc(n * dt.itemsize), dt, (n,))


def test_a_vector_op_over_its_tensors_faults_naming_the_overrun():
    def kernel(ctx):
        a = ctx.queue("VECIN", 1, 1024).alloc(nx.FP32)     # 256 elements
        b = ctx.queue("VECIN", 1, 1024).alloc(nx.FP32)
        yield Add(a, a, b, count=300)

    with pytest.raises(MemoryFault, match="300 elements overrun"):
        _launch(kernel)


def test_a_vector_op_mixing_dtypes_is_refused_before_its_bounds():
    def kernel(ctx):
        a = ctx.queue("VECIN", 1, 1024).alloc(nx.FP32)
        b = ctx.queue("VECIN", 1, 1024).alloc(nx.FP16)
        yield Add(a, a, b, count=300)     # also over a's 256 elements: the dtype is checked first

    with pytest.raises(SimulatorError, match="mixes"):
        _launch(kernel)


def test_a_datacopy_outside_its_gm_allocation_faults():
    def kernel(ctx):
        g = _gm(kernel.dev, 64)
        a = ctx.queue("VECIN", 1, 1024).alloc(nx.FP32)
        yield DataCopy(a, g[0:64], count=256)     # 256 elements of a 64-element allocation

    with pytest.raises(MemoryFault, match="out of bounds"):
        _launch(kernel)


def test_a_datacopy_past_the_end_of_the_gm_window_faults_as_unmapped():
    def kernel(ctx):
        dev = kernel.dev
        end = dev.gm.end
        g = GlobalTensor.contiguous(dev, end - 64, nx.FP32, (64,))
        a = ctx.queue("VECIN", 1, 1024).alloc(nx.FP32)
        yield DataCopy(a, g[0:64], count=64)      # 256 B from 64 B before the end of GM

    with pytest.raises(MemoryFault):
        _launch(kernel)


def _fixpipe_kernel(src_queue: str, m: int, n: int, rows: int, cols: int, r0: int = 0) -> Any:
    def kernel(ctx):
        out = GmMatrix.nd(GlobalTensor.contiguous(kernel.dev, kernel.dev.malloc(rows * cols * 4), nx.FP32,
                                                  (rows, cols)))
        c = ctx.queue(src_queue, 1, 4096).alloc(nx.FP32)    # 1024 fp32: a 32 x 32 tile
        yield Fixpipe(out, r0, 0, c, m, n)
    return kernel


def test_fixpipe_from_outside_l0c_is_refused_first():
    with pytest.raises(SimulatorError, match="Fixpipe source must be in L0C"):
        _launch(_fixpipe_kernel("A1", 64, 64, 16, 16), unit="cube")    # also too big and outside


def test_fixpipe_of_a_tile_larger_than_its_buffer_overruns_it_before_the_matrix_is_checked():
    with pytest.raises(MemoryFault, match="L0C buffer"):
        _launch(_fixpipe_kernel("CO1", 64, 64, 16, 16), unit="cube")


def test_fixpipe_of_a_block_outside_the_matrix_faults():
    with pytest.raises(MemoryFault, match="outside the 32 x 32 ND matrix"):
        _launch(_fixpipe_kernel("CO1", 32, 32, 32, 32, r0=16), unit="cube")


def test_fixpipe_with_a_negative_shape_fails_as_before():
    # a negative tile has a negative NZ size: LocalTensor.check refuses it (negative length)
    with pytest.raises(MemoryFault, match="negative"):
        _launch(_fixpipe_kernel("CO1", -32, 16, 32, 32), unit="cube")
