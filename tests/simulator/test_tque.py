"""TQue (simulator/tile.py): which buffer each alloc hands out, the flags each queue call queues,
and the errors of a misused queue -- independent of how the queue keeps its bookkeeping."""
from __future__ import annotations

import pytest

from opsim import devices
from opsim.simulator import numerics as nx
from opsim.simulator.device import Device
from opsim.simulator.errors import SimulatorError
from opsim.simulator.isa import QueueFreeFlag, SetFlag, WaitFlag
from opsim.simulator.tile import KernelContext

SPEC = devices.load("atlas-a2")


def _ctx() -> KernelContext:
    dev = Device(SPEC)
    return KernelContext(dev.cores["vector"][0], 0, 1)


def _flags(ctx: KernelContext) -> list[tuple[str, str, str, int]]:
    out = [(type(f).__name__, f.src, f.dst, f.event_id) for f in ctx.pending]
    ctx.pending.clear()
    return out


def test_buffers_are_reused_in_the_order_they_were_freed() -> None:
    ctx = _ctx()
    q = ctx.queue("VECIN", 3, 1024)
    a, b, c = (q.alloc(nx.FP32) for _ in range(3))
    assert [a.addr, b.addr, c.addr] == q.buffers
    assert _flags(ctx) == []                          # first use of each buffer: nothing to wait for
    q.free(c)
    q.free(a)
    assert _flags(ctx) == [("QueueFreeFlag", "VECTOR", "MTE2", q.event_ids[2]),
                           ("QueueFreeFlag", "VECTOR", "MTE2", q.event_ids[0])]
    again = q.alloc(nx.FP32)                          # the first freed buffer, with its free flag awaited
    assert again.addr == c.addr
    assert _flags(ctx) == [("WaitFlag", "VECTOR", "MTE2", q.event_ids[2])]
    assert q.alloc(nx.FP32).addr == a.addr


def test_enque_and_deque_are_first_in_first_out_with_their_flags() -> None:
    ctx = _ctx()
    q = ctx.queue("VECOUT", 2, 512)
    a, b = q.alloc(nx.FP32), q.alloc(nx.FP32)
    q.enque(b)
    q.enque(a)
    assert q.deque() is b
    assert q.deque() is a
    flags = ctx.pending[:]
    assert [type(f) for f in flags] == [SetFlag, SetFlag, WaitFlag, WaitFlag]
    assert [(f.src, f.dst, f.event_id) for f in flags] == [
        ("VECTOR", "MTE3", q.event_ids[1]), ("VECTOR", "MTE3", q.event_ids[0]),
        ("VECTOR", "MTE3", q.event_ids[1]), ("VECTOR", "MTE3", q.event_ids[0])]
    assert all(type(f) is not QueueFreeFlag for f in flags)


def test_alloc_gives_the_buffer_in_the_dtype_asked_for() -> None:
    ctx = _ctx()
    q = ctx.queue("VECIN", 1, 1024)
    t = q.alloc(nx.FP32)
    assert (t.dtype, t.count) == (nx.FP32, 256)
    q.free(t)
    h = q.alloc(nx.FP16)
    assert (h.addr, h.dtype, h.count) == (t.addr, nx.FP16, 512)
    q.free(h)
    assert q.alloc("fp32").dtype == nx.FP32


def test_misuse_is_refused_with_the_queue_named() -> None:
    ctx = _ctx()
    q = ctx.queue("VECIN", 1, 256)
    other = ctx.queue("VECOUT", 1, 256)
    t = q.alloc(nx.FP32)
    with pytest.raises(SimulatorError, match="VECIN queue: alloc"):
        q.alloc(nx.FP32)
    with pytest.raises(SimulatorError, match="does not belong to this queue"):
        q.enque(other.alloc(nx.FP32))
    with pytest.raises(SimulatorError, match="deque\\(\\) on an empty queue"):
        q.deque()
    q.free(t)
    with pytest.raises(SimulatorError, match="free\\(\\) of a tensor not allocated here"):
        q.free(t)
    assert q.unfreed() == []
    assert other.unfreed()[0][1] == other.buffers[0]


def _fields(instr: object) -> dict[str, object]:
    """Every slot of an instruction (its class's and its bases'), by name."""
    names = [n for c in type(instr).__mro__ for n in getattr(c, "__slots__", ())]
    return {n: getattr(instr, n, "<unset>") for n in names}


@pytest.mark.parametrize("lines", [False, True])
def test_a_queue_flag_is_the_instruction_its_class_constructor_makes(lines: bool) -> None:
    # the queue builds its flags without calling their __init__: every field must still be
    # what SetFlag / WaitFlag / QueueFreeFlag(src, dst, event_id) sets (a new field of theirs
    # that the queue does not set fails here), the source line aside when lines are recorded
    ctx = _ctx()
    ctx.device.source_lines = lines
    q = ctx.queue("VECIN", 1, 256)
    t = q.alloc(nx.FP32)
    q.enque(t)
    q.deque()
    q.free(t)
    q.alloc(nx.FP32)
    ctx.emit_set("VECTOR", "MTE3", 5)                 # the context's own flags are made the same way
    ctx.emit_wait("VECTOR", "MTE3", 5)
    made = ctx.pending[:]
    expected = [SetFlag("MTE2", "VECTOR", q.event_ids[0]), WaitFlag("MTE2", "VECTOR", q.event_ids[0]),
                QueueFreeFlag("VECTOR", "MTE2", q.event_ids[0], (q.region.name, t.addr, q.nbytes, "VECIN queue buffer 0")),
                WaitFlag("VECTOR", "MTE2", q.event_ids[0]),
                SetFlag("VECTOR", "MTE3", 5), WaitFlag("VECTOR", "MTE3", 5)]
    assert [type(f) for f in made] == [type(e) for e in expected]
    for f, e in zip(made, expected):
        got, want = _fields(f), _fields(e)
        if lines:
            assert str(got.pop("origin")).startswith(__file__ + ":")
            want.pop("origin")
        assert got == want
