"""The program stream (simulator/fastforward.py ProgramStream): a block's flags and instructions
reach the pipes in program order, stamped with the tile and kernel source line they were made
at, and a kernel's error surfaces where the dispatcher reaches it -- the same with and without
the fast-forward (which reads programs through a different path)."""
from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pytest

from opsim import devices
from opsim.simulator import numerics as nx
from opsim.simulator.device import Device
from opsim.simulator.errors import SimulatorError
from opsim.simulator.isa import Adds, DataCopyPad, SetFlag, WaitFlag
from opsim.simulator.tile import GlobalTensor

HERE = pathlib.Path(__file__).resolve()
TILES, TILE = 6, 256


class Log:
    """Every completed instruction: core, pipe, class, tile, source line, start and end."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def on_instruction(self, core: Any, pipe: Any, instr: Any, start: int, end: int) -> None:
        self.rows.append((core.name, pipe.name, type(instr).__name__, instr.tile, instr.origin, start, end))


def _lines() -> dict[str, int]:
    """Line numbers of the marked kernel lines below (``# <- name``)."""
    out = {}
    for no, text in enumerate(HERE.read_text().splitlines(), 1):
        if "# <- " in text and "out[" not in text:
            out[text.split("# <- ")[1].strip()] = no
    return out


def _run(ff: bool, bad: Any = None, source_lines: bool = True) -> tuple[Device, Log, str]:
    dev = Device(devices.load("atlas-a2"), fast_forward=ff)
    dev.source_lines = source_lines
    log = Log()
    dev.observers.append(log)
    n = TILES * TILE
    x = GlobalTensor.contiguous(dev, dev.malloc(n * 4), nx.FP32, (n,))
    y = GlobalTensor.contiguous(dev, dev.malloc(n * 4), nx.FP32, (n,))
    dev.write(x.addr, np.arange(n, dtype=np.float32))

    def kernel(ctx: Any) -> Any:
        inq = ctx.queue("VECIN", 2, TILE * 4)
        outq = ctx.queue("VECOUT", 2, TILE * 4)
        for t in range(TILES):
            ctx.tile = t
            a = inq.alloc()                                          # <- alloc
            yield DataCopyPad(a, x[t * TILE:(t + 1) * TILE], TILE)  # <- copy in
            inq.enque(a)                                             # <- enque
            a = inq.deque()                                          # <- deque
            b = outq.alloc()
            if bad is not None and t == 3:
                yield bad                                            # <- bad
            yield Adds(b, a, scalar=1.0, count=TILE)                # <- adds
            inq.free(a)                                              # <- free
            outq.enque(b)
            b = outq.deque()
            yield DataCopyPad(y[t * TILE:(t + 1) * TILE], b, TILE)
            outq.free(b)
        ctx.emit_set("MTE3", "MTE2", 7)                             # <- emit_set
        ctx.emit_wait("MTE3", "MTE2", 7)                            # <- emit_wait

    stream = dev.create_stream()
    dev.launch(stream, kernel, 1)
    try:
        dev.synchronize(stream)
    except SimulatorError as exc:
        return dev, log, f"{type(exc).__name__}: {exc}"
    return dev, log, dev.read(y.addr, n * 4).view(np.float32).tobytes().hex()


@pytest.mark.parametrize("source_lines", [True, False])
def test_the_same_instructions_stamps_and_times_with_and_without_the_fast_forward(source_lines: bool) -> None:
    _, off, out_off = _run(False, source_lines=source_lines)
    _, on, out_on = _run(True, source_lines=source_lines)
    assert off.rows == on.rows
    assert out_off == out_on
    assert len(off.rows) > 10 * TILES


def test_each_flag_carries_the_kernel_line_of_the_queue_call_that_made_it() -> None:
    _, log, _ = _run(False)
    ln = _lines()
    here = str(HERE)
    rows = [r for r in log.rows if r[2] != "BlockEnd"]
    origins = {(r[2], r[4]) for r in rows}
    # the WaitFlag of a reused buffer comes from alloc, the SetFlag from enque, the consumer's
    # WaitFlag from deque, the QueueFreeFlag from free; the instructions from their yields
    assert ("WaitFlag", f"{here}:{ln['alloc']}") in origins
    assert ("SetFlag", f"{here}:{ln['enque']}") in origins
    assert ("WaitFlag", f"{here}:{ln['deque']}") in origins
    assert ("QueueFreeFlag", f"{here}:{ln['free']}") in origins
    assert ("SetFlag", f"{here}:{ln['emit_set']}") in origins
    assert ("WaitFlag", f"{here}:{ln['emit_wait']}") in origins
    assert ("DataCopyPad", f"{here}:{ln['copy in']}") in origins
    assert ("AddsRef", f"{here}:{ln['adds']}") in origins or ("Adds", f"{here}:{ln['adds']}") in origins
    # every instruction and flag of tile t was stamped with tile t (the kernel sets it first)
    for t in range(TILES):
        assert any(r[3] == t and r[2] == "QueueFreeFlag" for r in rows)
    assert all(r[4] is not None and r[4].startswith(here) for r in rows)


def test_without_source_lines_nothing_is_stamped_with_a_line() -> None:
    _, log, _ = _run(False, source_lines=False)
    assert all(r[4] is None for r in log.rows)


@pytest.mark.parametrize("ff", [False, True])
def test_a_yielded_non_instruction_is_refused_naming_it_and_the_core(ff: bool) -> None:
    _, _, msg = _run(ff, bad="not an op")
    assert msg == ("SimulatorError: SimulatorError on core0.veccore0: kernel yielded 'not an op', "
                   "which is not an instruction")


@pytest.mark.parametrize("ff", [False, True])
def test_an_error_of_the_queue_framework_stops_the_block_at_its_point(ff: bool) -> None:
    dev = Device(devices.load("atlas-a2"), fast_forward=ff)

    def kernel(ctx: Any) -> Any:
        q = ctx.queue("VECIN", 1, 1024)
        a = q.alloc()
        yield Adds(a, a, scalar=1.0, count=8)
        q.alloc()                                # second alloc of a depth-1 queue

    stream = dev.create_stream()
    dev.launch(stream, kernel, 1)
    with pytest.raises(SimulatorError, match=r"VECIN queue: alloc\(\) with all 1 buffers in use"):
        dev.synchronize(stream)


def test_flags_are_plain_instructions_of_their_pipes() -> None:
    s, w = SetFlag("MTE2", "VECTOR", 3), WaitFlag("MTE2", "VECTOR", 3)
    assert (s.pipe, w.pipe, s.tile, w.tile, s.origin, w.origin) == ("MTE2", "VECTOR", -1, -1, None, None)


@pytest.mark.parametrize("ff", [False, True])
def test_a_bare_yield_is_skipped_and_the_program_goes_on(ff: bool) -> None:
    # ``yield`` / ``yield None`` with no flag pending (first thing, and right after an instruction)
    # is not the end of the program: everything after it still runs
    dev = Device(devices.load("atlas-a2"), fast_forward=ff)
    n = TILE
    x = GlobalTensor.contiguous(dev, dev.malloc(n * 4), nx.FP32, (n,))
    y = GlobalTensor.contiguous(dev, dev.malloc(n * 4), nx.FP32, (n,))
    dev.write(x.addr, np.arange(n, dtype=np.float32))

    def kernel(ctx: Any) -> Any:
        inq = ctx.queue("VECIN", 1, n * 4)
        outq = ctx.queue("VECOUT", 1, n * 4)
        yield None
        a = inq.alloc()
        yield DataCopyPad(a, x[0:n], n)
        yield
        inq.enque(a)
        a = inq.deque()
        b = outq.alloc()
        yield Adds(b, a, scalar=1.0, count=n)
        inq.free(a)
        outq.enque(b)
        b = outq.deque()
        yield DataCopyPad(y[0:n], b, n)
        outq.free(b)

    stream = dev.create_stream()
    dev.launch(stream, kernel, 1)
    dev.synchronize(stream)
    assert np.array_equal(dev.read(y.addr, n * 4).view(np.float32), np.arange(n, dtype=np.float32) + 1)
