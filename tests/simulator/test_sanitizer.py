"""The sanitizer: racecheck, memcheck and synccheck on small generator kernels with known bugs."""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Iterator

import numpy as np
import pytest

from opsim import devices
from opsim.simulator import numerics as nx
from opsim.simulator.cube import (CopyGmToL1, CrossCoreSetFlag, CrossCoreWaitFlag, Fixpipe, GmMatrix, LoadData,
                                  Mmad, nz_bytes)
from opsim.simulator.device import Device, MixKernel
from opsim.simulator.errors import CapacityError, DeadlockError, MemoryFault
from opsim.simulator.isa import Add, Cast, DataCopy, DataCopyPad, Duplicate, Muls, SetAtomicAdd, SetAtomicNone
from opsim.simulator.sanitizer import Finding, Sanitizer, SanitizerReport
from opsim.simulator.tile import GlobalTensor, KernelContext

sys.path.insert(0, os.path.dirname(__file__))
from sanitizer_kernels import N, run_add  # noqa: E402

SPEC = devices.load("atlas-a2")
HERE = "sanitizer_kernels.py"


def _line_of(text: str) -> int:
    """The line of sanitizer_kernels.py that contains ``text``."""
    with open(os.path.join(os.path.dirname(__file__), HERE)) as f:
        for i, line in enumerate(f, 1):
            if text in line:
                return i
    raise AssertionError(text)


def _device(functional: bool = True) -> tuple[Device, Sanitizer]:
    dev = Device(SPEC, functional=functional)
    return dev, Sanitizer(dev)


def _gm(dev: Device, n: int, dtype=nx.FP32, data: np.ndarray | None = None) -> GlobalTensor:
    addr = dev.malloc(n * dtype.itemsize)
    if data is not None:
        dev.write(addr, data)
    return GlobalTensor.contiguous(dev, addr, dtype, (n,))


def _launch(dev: Device, kernel, block_dim: int = 1, *args: Any, unit: str = "vector") -> Exception | None:
    dev.launch(dev.create_stream(), kernel, block_dim, *args, unit=unit)
    try:
        dev.synchronize()
    except Exception as exc:
        return exc
    return None


# -- the interface -----------------------------------------------------------------------------

def test_the_sanitizer_attaches_itself_and_turns_on_source_lines() -> None:
    dev, san = _device()
    assert san in dev.observers and dev.source_lines
    report = san.finish()
    assert isinstance(report, SanitizerReport) and report.ok and report.findings == ()
    assert "no findings" in str(report)


def test_a_correct_kernel_with_manual_flags_is_clean_and_computes_x_plus_y() -> None:
    dev, san, x, y, z, err = run_add("", tiles=3)
    assert err is None
    assert san.finish().ok, str(san.finish())
    assert np.array_equal(dev.read(z, x.size * 4).view(np.float32), x + y)


# -- racecheck ---------------------------------------------------------------------------------

def test_a_missing_wait_flag_is_a_race_naming_both_source_lines_pipes_and_bytes() -> None:
    _, san, *_, err = run_add("no-wait")
    assert err is None                                   # the machine does not fault on a race
    report = san.finish()
    races = report.by_check("racecheck")
    assert races and not report.ok
    load_line = _line_of("yield DataCopy(xl, x[off:off + N])")
    add_line = _line_of("yield Add(zl, xl, yl)")
    race = next(f for f in races if any(str(load_line) in (ln or "") for ln in f.lines))
    assert race.kind == "race" and race.core == "core0.veccore0"
    assert set(race.pipes) == {"MTE2", "VECTOR"}
    assert {ln.rsplit(":", 1)[1] for ln in race.lines} == {str(load_line), str(add_line)}
    assert all(ln.rsplit(":", 1)[0].endswith(HERE) for ln in race.lines)
    assert any("DataCopy" in i for i in race.instructions) and any("Add" in i for i in race.instructions)
    assert any(r.startswith("core0.veccore0/UB [0x") for r in race.ranges)
    text = str(report)
    assert f"{HERE}:{load_line}" in text and f"{HERE}:{add_line}" in text


def test_without_the_sanitizer_the_race_shows_in_the_trace_and_the_result_is_wrong() -> None:
    dev, san, x, y, z, err = run_add("no-wait", sanitize=False, trace=True)
    assert err is None and san is None
    tr = dev.trace
    loads = tr.slices(process="core0.veccore0", thread="MTE2")
    (add,) = tr.slices(process="core0.veccore0", thread="VECTOR")
    assert any(s.start < add.end and add.start < s.end for s in loads)    # overlapping slices
    assert not np.array_equal(dev.read(z, N * 4).view(np.float32), x + y)


def test_two_cores_writing_the_same_gm_bytes_race_and_atomic_adds_do_not() -> None:
    def kernel(ctx: KernelContext, out: GlobalTensor, atomic: bool) -> Iterator[Any]:
        buf = ctx.tbuf(256, nx.FP32)
        yield Duplicate(buf, 1.0, 64)
        ctx.emit_set("VECTOR", "MTE3", 0)
        ctx.emit_wait("VECTOR", "MTE3", 0)
        if atomic:
            yield SetAtomicAdd(nx.FP32)
        yield DataCopy(out[0:64], buf)
        if atomic:
            yield SetAtomicNone()

    for atomic in (False, True):
        dev, san = _device()
        out = _gm(dev, 64, data=np.zeros(64, np.float32))
        assert _launch(dev, kernel, 2, out, atomic) is None
        races = san.finish().by_check("racecheck")
        if atomic:
            assert races == ()
        else:
            (race,) = races
            assert race.pipes == ("MTE3", "MTE3") and "core0.veccore0" in race.core and "core0.veccore1" in race.core
            assert race.ranges[0].startswith("GM [")


def test_launches_on_one_stream_are_ordered() -> None:
    def write(ctx: KernelContext, out: GlobalTensor) -> Iterator[Any]:
        buf = ctx.tbuf(256, nx.FP32)
        yield Duplicate(buf, 2.0, 64)
        ctx.emit_set("VECTOR", "MTE3", 0)
        ctx.emit_wait("VECTOR", "MTE3", 0)
        yield DataCopy(out[0:64], buf)

    dev, san = _device()
    out = _gm(dev, 64)
    s = dev.create_stream()
    dev.launch(s, write, 1, out)
    dev.launch(s, write, 1, out)        # the second launch may run on another core: ordered by the stream
    dev.synchronize()
    assert san.finish().ok, str(san.finish())


def test_cross_core_flags_order_a_producer_core_and_a_consumer_core() -> None:
    def aic(ctx: KernelContext, ws: GlobalTensor, wait: bool) -> Iterator[Any]:
        if wait:
            yield CrossCoreWaitFlag(1, mode=2, pipe="MTE2")
        yield CopyGmToL1(ctx.tbuf(512, nx.FP16, "L1"), GmMatrix.nd(ws), 0, 16, 0, 16)

    def aiv(ctx: KernelContext, ws: GlobalTensor, wait: bool) -> Iterator[Any]:
        buf = ctx.tbuf(512, nx.FP16)
        yield Duplicate(buf, 1.0, 256)
        ctx.emit_set("VECTOR", "MTE3", 0)
        ctx.emit_wait("VECTOR", "MTE3", 0)
        if ctx.sub_block_idx == 0:     # one of the two vector cores writes the workspace
            yield DataCopy(GlobalTensor.contiguous(ctx.device, ws.addr, nx.FP16, (256,))[0:256], buf)
        yield CrossCoreSetFlag(1, mode=2, pipe="MTE3")

    for wait in (True, False):
        dev, san = _device()
        addr = dev.malloc(512)
        ws = GlobalTensor.contiguous(dev, addr, nx.FP16, (16, 16))
        assert _launch(dev, MixKernel(aic, aiv), 1, ws, wait, unit="mix") is None
        races = san.finish().by_check("racecheck")
        assert bool(races) == (not wait), str(san.finish())
        if races:
            assert {"MTE2", "MTE3"} == set(races[0].pipes)


# -- synccheck ---------------------------------------------------------------------------------

def test_a_wrong_event_id_is_a_deadlock_naming_each_blocked_pipe_and_its_flag() -> None:
    _, san, *_, err = run_add("wrong-event", tiles=2)
    assert isinstance(err, DeadlockError)
    report = san.finish()
    (dead,) = report.by_check("synccheck")
    assert dead.kind == "deadlock" and report.fault is not None
    wait_line = _line_of('ctx.emit_wait("MTE2", "VECTOR", 1 if bug')
    set_line = _line_of('ctx.emit_set("MTE2", "VECTOR", 0)')
    # the culprit first: VECTOR waits on event 1, event 0 was set instead
    assert dead.pipes[0] == "core0.veccore0.VECTOR"
    assert dead.instructions[0] == "WaitFlag<MTE2_VECTOR>(1)"
    assert dead.lines[0].endswith(f"{HERE}:{wait_line}")
    assert "SetFlag<MTE2_VECTOR>(0) was set instead" in dead.message and f"{HERE}:{set_line}" in dead.message
    assert "wrong event id" in dead.message
    # every blocked pipe is named with the flag it waits on
    assert set(dead.pipes) == {"core0.veccore0.VECTOR", "core0.veccore0.MTE2", "core0.veccore0.MTE3"}
    assert "WaitFlag<MTE3_MTE2>(0)" in dead.instructions and "WaitFlag<VECTOR_MTE3>(0)" in dead.instructions


def test_a_deadlock_is_reported_after_a_bounded_amount_of_simulation() -> None:
    dev, san, *_, err = run_add("wrong-event", tiles=64)
    assert isinstance(err, DeadlockError)
    # the engine stops as soon as nothing can move: a handful of instructions, not 64 tiles' worth
    assert san.finish().instructions < 10 and dev.now < 10_000


def test_a_cross_core_wait_nobody_satisfies_is_a_deadlock_naming_the_cube_pipe() -> None:
    def aic(ctx: KernelContext) -> Iterator[Any]:
        yield CrossCoreWaitFlag(5, mode=2, pipe="MTE2")      # the vector cores set flag 4

    def aiv(ctx: KernelContext) -> Iterator[Any]:
        yield Duplicate(ctx.tbuf(32), 0.0, 8)
        yield CrossCoreSetFlag(4, mode=2, pipe="VECTOR")

    dev, san = _device(functional=False)
    assert isinstance(_launch(dev, MixKernel(aic, aiv), 2, unit="mix"), DeadlockError)
    (dead,) = san.finish().findings
    assert dead.kind == "deadlock"
    assert dead.pipes == ("core0.cubecore0.MTE2 (+1 cores)",)
    assert dead.instructions == ("CrossCoreWaitFlag<2, MTE2>(5)",)
    assert dead.lines[0].endswith(f"test_sanitizer.py:{_here('yield CrossCoreWaitFlag(5, mode=2')}")
    assert "set 0 time(s)" in dead.message and "2 cores: core0.cubecore0, core1.cubecore0" in dead.message


def test_a_flag_left_set_at_the_end_of_the_block_is_reported() -> None:
    def kernel(ctx: KernelContext) -> Iterator[Any]:
        buf = ctx.tbuf(256, nx.FP32)
        yield Duplicate(buf, 1.0, 64)
        ctx.emit_set("VECTOR", "MTE3", 3)

    dev, san = _device()
    assert _launch(dev, kernel) is None
    (left,) = san.finish().findings
    assert left.check == "synccheck" and left.kind == "flag-left-set"
    line = _here('ctx.emit_set("VECTOR", "MTE3", 3)')
    assert left.instructions == ("SetFlag<VECTOR_MTE3>(3)",)
    assert left.lines[0].endswith(f"test_sanitizer.py:{line}")


def test_the_last_release_of_a_tque_buffer_is_not_a_flag_left_set() -> None:
    def kernel(ctx: KernelContext, x: GlobalTensor) -> Iterator[Any]:
        q = ctx.queue("VECIN", 2, 256)
        for _ in range(3):
            b = q.alloc(nx.FP32)
            yield DataCopy(b, x[0:64])
            q.enque(b)
            b = q.deque()
            yield Muls(b, b, scalar=2.0, count=64)
            q.free(b)

    dev, san = _device()
    assert _launch(dev, kernel, 1, _gm(dev, 64, data=np.ones(64, np.float32))) is None
    assert san.finish().ok, str(san.finish())


# -- memcheck ----------------------------------------------------------------------------------

def test_an_out_of_bounds_store_is_a_memcheck_finding_naming_the_line_and_the_address() -> None:
    dev, san, x, y, z, err = run_add("oob-store")
    assert isinstance(err, MemoryFault)                  # the run still fails, loudly
    (oob,) = san.finish().findings
    assert oob.check == "memcheck" and oob.kind == "out-of-bounds"
    assert oob.address == z + N * 4 == err.address
    assert oob.lines[0].endswith(f"{HERE}:{_line_of('yield DataCopy(dst, zl)')}")
    assert oob.pipes == ("MTE3",) and oob.core == "core0.veccore0"
    assert f"{z + N * 4:#x}" in str(san.finish())


def test_reading_ub_bytes_nothing_wrote_is_reported() -> None:
    def kernel(ctx: KernelContext, out: GlobalTensor) -> Iterator[Any]:
        a, b = ctx.tbuf(256, nx.FP32), ctx.tbuf(256, nx.FP32)
        yield Duplicate(a, 1.0, 32)                      # only half of a
        yield Add(b, a, a, count=64)
        ctx.emit_set("VECTOR", "MTE3", 0)
        ctx.emit_wait("VECTOR", "MTE3", 0)
        yield DataCopy(out[0:64], b)

    dev, san = _device()
    assert _launch(dev, kernel, 1, _gm(dev, 64)) is None
    (f,) = san.finish().findings
    assert f.kind == "uninitialized-read" and f.pipes == ("VECTOR",)
    assert f.ranges == ("core0.veccore0/UB [0x80, 0x100) read",)
    assert f.lines[0].endswith(f"test_sanitizer.py:{_here('yield Add(b, a, a, count=64)')}")


def test_a_tque_buffer_never_freed_is_reported_with_its_alloc_line() -> None:
    def kernel(ctx: KernelContext, x: GlobalTensor) -> Iterator[Any]:
        q = ctx.queue("VECIN", 1, 256)
        b = q.alloc(nx.FP32)  # never freed
        yield DataCopy(b, x[0:64])
        q.enque(b)
        q.deque()

    dev, san = _device()
    assert _launch(dev, kernel, 1, _gm(dev, 64, data=np.ones(64, np.float32))) is None
    (f,) = san.finish().findings
    assert f.kind == "buffer-not-freed" and f.check == "memcheck"
    (line,) = f.lines
    assert line.endswith(f"test_sanitizer.py:{_here('b = q.alloc(nx.FP32)  # never freed')}")
    assert f.pipes == ("SCALAR",) and f.instructions == ("TQue.alloc",)
    assert f.ranges[0].endswith("/UB [0x0, 0x100)") and line.rpartition(":")[2] in str(f)


def test_ub_over_subscription_names_the_allocating_line() -> None:
    def kernel(ctx: KernelContext) -> Iterator[Any]:
        ctx.tbuf(SPEC.ub.size // 2, nx.FP32)
        ctx.tbuf(SPEC.ub.size, nx.FP32)
        yield Duplicate(ctx.tbuf(32), 0.0, 8)

    dev, san = _device()
    assert isinstance(_launch(dev, kernel), CapacityError)
    (f,) = san.finish().findings
    assert f.kind == "over-capacity" and f.check == "memcheck"
    assert f.lines[0].endswith(f"test_sanitizer.py:{_here('ctx.tbuf(SPEC.ub.size, nx.FP32)')}")


def test_a_misaligned_ub_tensor_is_a_memcheck_finding_and_still_faults() -> None:
    def kernel(ctx: KernelContext) -> Iterator[Any]:
        odd = ctx.local_at(ctx.tbuf(256).addr + 16, nx.FP32, 8)
        yield Duplicate(odd, 1.0, 8)                     # UB operands start 32 B aligned

    dev, san = _device()
    err = _launch(dev, kernel)
    assert isinstance(err, MemoryFault)
    (f,) = san.finish().findings
    assert f.kind == "misaligned" and f.check == "memcheck" and f.address == err.address
    assert f.lines[0].endswith(f"test_sanitizer.py:{_here('yield Duplicate(odd, 1.0, 8)')}")


def test_a_gm_address_not_aligned_to_the_element_is_reported() -> None:
    def kernel(ctx: KernelContext, raw: GlobalTensor) -> Iterator[Any]:
        buf = ctx.tbuf(64, nx.FP32)
        odd = GlobalTensor.contiguous(ctx.device, raw.addr + 2, nx.FP32, (8,))
        yield DataCopyPad(buf, odd[0:8], 8)

    dev, san = _device()
    assert _launch(dev, kernel, 1, _gm(dev, 16, data=np.zeros(16, np.float32))) is None
    (f,) = san.finish().findings
    assert f.kind == "misaligned" and f.address % 4 == 2


def _here(text: str) -> int:
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if text in line and "_here(" not in line:
                return i
    raise AssertionError(text)


# -- accesses ----------------------------------------------------------------------------------

def test_accesses_of_strided_and_broadcast_copies_list_each_run_once() -> None:
    dev = Device(SPEC)
    ctx = KernelContext(dev.cores["vector"][0], 0, 1)
    addr = dev.malloc(4096)
    ub = ctx.tbuf(1024, nx.FP32)
    strided = GlobalTensor(dev, addr, nx.FP32, (4, 2), (8, 1))       # 4 rows of 2, row stride 8
    acc = DataCopyPad(ub, strided[0:8], 8).accesses(None)            # type: ignore[arg-type]
    assert acc[0] == ("core0.veccore0/UB", ub.addr, 32, True)
    assert acc[1:] == tuple(("GM", addr + 32 * r, 8, False) for r in range(4))
    bcast = GlobalTensor.contiguous(dev, addr, nx.FP32, (4,)).broadcast_to((3, 4))
    acc = DataCopyPad(ub, bcast[0:12], 12).accesses(None)            # type: ignore[arg-type]
    assert acc == (("core0.veccore0/UB", ub.addr, 48, True), ("GM", addr, 16, False))
    store = DataCopyPad(GlobalTensor.contiguous(dev, addr, nx.FP32, (64,))[8:24], ub, 16)
    assert store.accesses(None) == (("core0.veccore0/UB", ub.addr, 64, False), ("GM", addr + 32, 64, True))


def test_accesses_of_vector_instructions() -> None:
    dev = Device(SPEC)
    ctx = KernelContext(dev.cores["vector"][0], 0, 1)
    a, b, c = (ctx.tbuf(256, nx.FP32) for _ in range(3))
    h = ctx.tbuf(256, nx.FP16)
    ub = "core0.veccore0/UB"
    assert Add(c, a, b, count=10).accesses(None) == ((ub, a.addr, 40, False), (ub, b.addr, 40, False),
                                                     (ub, c.addr, 40, True))
    assert Muls(c, a, scalar=b, count=4).accesses(None) == ((ub, a.addr, 16, False), (ub, b.addr, 4, False),
                                                            (ub, c.addr, 16, True))
    assert Cast(h, a, "rint", 8).accesses(None) == ((ub, a.addr, 32, False), (ub, h.addr, 16, True))
    assert Duplicate(c, 0.0, 3).accesses(None) == ((ub, c.addr, 12, True),)


def test_accesses_of_the_cube_path() -> None:
    dev = Device(SPEC)
    cube = dev.cores["cube"][0]
    ctx = KernelContext(cube, 0, 1)
    a_gm = GlobalTensor.contiguous(dev, dev.malloc(32 * 64 * 2), nx.FP16, (32, 64))
    c_gm = GlobalTensor.contiguous(dev, dev.malloc(32 * 64 * 4), nx.FP32, (32, 64))
    l1 = ctx.tbuf(16 * 32 * 2, nx.FP16, "L1")
    l0a = ctx.tbuf(16 * 32 * 2, nx.FP16, "L0A")
    l0b = ctx.tbuf(32 * 16 * 2, nx.FP16, "L0B")
    l0c = ctx.tbuf(16 * 16 * 4, nx.FP32, "L0C")
    load = CopyGmToL1(l1, GmMatrix.nd(a_gm), 0, 16, 32, 32)          # 16 rows of 32 of a 64-wide matrix
    acc = load.accesses(None)                                        # type: ignore[arg-type]
    assert acc[:-1] == tuple(("GM", a_gm.addr + (r * 64 + 32) * 2, 64, False) for r in range(16))
    assert acc[-1] == ("core0.cubecore0/L1", l1.addr, nz_bytes(16, 32, 2), True)
    ld = LoadData(l0a, l1, 16, 32, 0, 16, 0, 32)
    assert ld.accesses(None) == (("core0.cubecore0/L1", l1.addr, 1024, False),   # type: ignore[arg-type]
                                 ("core0.cubecore0/L0A", l0a.addr, 1024, True))
    mm = Mmad(l0c, l0a, l0b, 16, 32, 16, accumulate=True)
    assert mm.accesses(None) == (("core0.cubecore0/L0A", l0a.addr, 1024, False),   # type: ignore[arg-type]
                                 ("core0.cubecore0/L0B", l0b.addr, 1024, False),
                                 ("core0.cubecore0/L0C", l0c.addr, 1024, False),
                                 ("core0.cubecore0/L0C", l0c.addr, 1024, True))
    fx = Fixpipe(GmMatrix.nd(c_gm), 16, 0, l0c, 16, 16)
    acc = fx.accesses(None)                                          # type: ignore[arg-type]
    assert acc[0] == ("core0.cubecore0/L0C", l0c.addr, 1024, False)
    assert acc[1:] == tuple(("GM", c_gm.addr + (16 + r) * 64 * 4, 64, True) for r in range(16))


def test_an_atomic_store_says_so() -> None:
    seen: list[bool] = []

    class Spy:
        def on_instruction(self, core, pipe, instr, start, end):
            if isinstance(instr, DataCopy):
                seen.append(instr.atomic)

    def kernel(ctx: KernelContext, out: GlobalTensor) -> Iterator[Any]:
        buf = ctx.tbuf(256, nx.FP32)
        yield Duplicate(buf, 1.0, 64)
        ctx.emit_set("VECTOR", "MTE3", 0)
        ctx.emit_wait("VECTOR", "MTE3", 0)
        yield DataCopy(out[0:64], buf)
        yield SetAtomicAdd(nx.FP32)
        yield DataCopy(out[0:64], buf)
        yield SetAtomicNone()

    dev = Device(SPEC)
    dev.observers.append(Spy())
    assert _launch(dev, kernel, 1, _gm(dev, 64)) is None
    assert seen == [False, True]


def test_findings_and_reports_are_frozen_and_readable() -> None:
    f = Finding("racecheck", "race", "x", core="c", pipes=("MTE2", "VECTOR"), instructions=("a", "b"),
                lines=("k.py:1", None))
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.kind = "y"  # type: ignore[misc]
    text = str(SanitizerReport((f,)))
    assert "1 finding" in text and "k.py:1" in text and "(unknown source line)" in text
