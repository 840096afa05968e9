"""Tensors and queues of the kernel language (Ascend C's GlobalTensor, LocalTensor, TQue, TBuf).

A :class:`GlobalTensor` is a typed view of device memory (view shape, strides and offset in
elements, as ``aclCreateTensor`` describes it; a stride of 0 broadcasts). Slicing it with a flat
element range gives a :class:`GlobalSlice`, the GM side of a DMA. A :class:`LocalTensor` is a typed
range of a core's on-chip memory (UB, L1, L0*, a DSP's private memory).

``ctx.queue(position, depth, nbytes)`` gives a :class:`TQue`: ``alloc`` / ``enque`` / ``deque`` /
``free`` insert the SetFlag/WaitFlag pairs between producer and consumer pipes that Ascend C's
compiler inserts, so a kernel reads like Ascend C and double buffering falls out of ``depth=2``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Iterator, Sequence

import numpy as np

from opsim.simulator import numerics as nx
from opsim.simulator.errors import CapacityError, MemoryFault, QueueError, SimulatorError
from opsim.simulator.memory import NO_WINDOW, align_up

if TYPE_CHECKING:  # pragma: no cover
    from opsim.simulator.core import Core
    from opsim.simulator.device import Device
    from opsim.simulator.memory import Region, TypedWindow

_ISA: Any = None
# object.__new__: the queues make their flag instructions with it (see TQue.alloc)
_new = object.__new__


def _isa() -> Any:
    """The instruction module, imported on first use (it imports this one). A function-level
    ``from ... import`` costs microseconds a call, and queues and copies make an instruction
    each: that was ~8% of an estimate-mode replay."""
    global _ISA
    if _ISA is None:
        from opsim.simulator import isa
        _ISA = isa
    return _ISA


# ---------------------------------------------------------------------------------------------
# Global memory views
# ---------------------------------------------------------------------------------------------

# GlobalTensor._win's window of a view that never has one (strided, or not in an allocation):
# valid for good, without array
_NO_WINDOW = NO_WINDOW


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class GlobalTensor:
    """A typed, possibly strided or broadcast view of device memory."""

    device: "Device"
    addr: int                 # address of element 0 of the storage
    dtype: nx.DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # elements
    offset: int = 0           # elements from addr to the first view element
    _win: ClassVar[list[Any]]  # set per instance by __post_init__

    @staticmethod
    def contiguous(device: "Device", addr: int, dtype: nx.DType, shape: Sequence[int]) -> "GlobalTensor":
        shape = tuple(int(s) for s in shape)
        return GlobalTensor(device, addr, dtype, shape, contiguous_strides(shape), 0)

    @functools.cached_property
    def numel(self) -> int:
        # cached (the view never changes): every slice a kernel takes asks for it
        n = 1
        for s in self.shape:
            n *= s
        return n

    @functools.cached_property
    def is_contiguous(self) -> bool:
        return self.strides == contiguous_strides(self.shape) or self.numel <= 1

    def __post_init__(self) -> None:
        # [this view's TypedWindow, or None before the first ask]: a one-element list whose slot
        # is rewritten in place (the dataclass is frozen); a plain instance attribute, not a
        # cached_property, whose lookup through the class descriptor costs more than a slice
        object.__setattr__(self, "_win", [None])

    def window(self) -> "TypedWindow | None":
        """A valid :class:`~opsim.simulator.memory.TypedWindow` with an array on this view's
        elements, kept for the next call; None when there is none (a strided or broadcast view,
        memory not backed yet, not an allocation of device memory, ...): the caller then takes
        the general path."""
        w = self._window_entry()
        return w if w is not None and w.array is not None else None

    def _window_entry(self) -> "TypedWindow | None":
        # the slot's window when still valid, else a new one (or None while there is none; a
        # window without array when there never will be: _NO_WINDOW stays valid for good)
        slot = self._win
        w = slot[0]
        if w is not None and w.alloc._store is w.store and w.seg.data is w.data:
            return w
        if not self.is_contiguous:
            slot[0] = _NO_WINDOW
            return _NO_WINDOW
        item = self.dtype.itemsize
        lo, nbytes = self.addr + self.offset * item, self.numel * item
        dev = self.device
        region = dev.gm
        if not (nbytes > 0 and region.base <= lo and lo + nbytes <= region.end):
            try:
                region = dev.space.region_of(lo, nbytes)
            except MemoryFault:
                return None
        if region.backing != "allocation":
            slot[0] = _NO_WINDOW      # a DSP's flat or sparse memory: Region.typed_view serves it
            return _NO_WINDOW
        w = slot[0] = region.window(lo, nbytes, self.dtype.np_dtype)
        return w

    def broadcast_to(self, shape: Sequence[int]) -> "GlobalTensor":
        """NumPy-style broadcast view (stride 0 on the expanded axes)."""
        shape = tuple(int(s) for s in shape)
        pad = len(shape) - len(self.shape)
        if pad < 0:
            raise SimulatorError(f"cannot broadcast shape {self.shape} to {shape}")
        src_shape = (1,) * pad + self.shape
        src_strides = (0,) * pad + self.strides
        strides = []
        for s, d, st in zip(src_shape, shape, src_strides):
            if s == d:
                strides.append(st)
            elif s == 1:
                strides.append(0)
            else:
                raise SimulatorError(f"cannot broadcast shape {self.shape} to {shape}")
        return GlobalTensor(self.device, self.addr, self.dtype, shape, tuple(strides), self.offset)

    def reshape(self, shape: Sequence[int]) -> "GlobalTensor":
        if not self.is_contiguous:
            raise SimulatorError("reshape of a non-contiguous GlobalTensor")
        return GlobalTensor.contiguous(self.device, self.addr + self.offset * self.dtype.itemsize,
                                       self.dtype, shape)

    def __getitem__(self, s: slice) -> "GlobalSlice":
        start, stop, step = s.indices(self.numel)
        if step != 1:
            raise SimulatorError("GlobalTensor slices are flat element ranges with step 1")
        return GlobalSlice(self, start, stop - start if stop > start else 0)

    def element_offsets(self, start: int, count: int) -> np.ndarray:
        """Storage offsets (in elements, from addr) of flat view elements [start, start+count)."""
        flat = np.arange(start, start + count, dtype=np.int64)
        if not self.shape:
            return np.full(count, self.offset, dtype=np.int64)
        idx = np.unravel_index(flat, self.shape)
        off = np.full(count, self.offset, dtype=np.int64)
        for i, st in zip(idx, self.strides):
            if st:
                off += i.astype(np.int64) * st
        return off


@dataclass(frozen=True)
class GlobalSlice:
    """A flat element range of a GlobalTensor: the GM operand of a DataCopy.

    ``limit``, when a front-end knows it, is what the kernel may touch through this view, for
    the sanitizer: (end of the kernel argument the view points into, end of the view's declared
    length or None), byte addresses. The machine itself only faults outside every allocation:
    a copy that starts in the tensor after the argument's does not fault.
    """

    tensor: GlobalTensor
    start: int
    count: int
    limit: tuple[int, int | None] | None = field(default=None, compare=False, repr=False)

    @property
    def dtype(self) -> nx.DType:
        return self.tensor.dtype

    def _offsets(self, count: int) -> np.ndarray | None:
        """None when contiguous (fast path), else per-element storage offsets."""
        t = self.tensor
        if t.is_contiguous:
            return None
        return t.element_offsets(self.start, count)

    def byte_range(self, count: int | None = None) -> tuple[int, int]:
        count = self.count if count is None else count
        t = self.tensor
        item = t.dtype.itemsize
        offs = self._offsets(count)
        if offs is None:
            lo = t.addr + (t.offset + self.start) * item
            return lo, lo + count * item
        if count == 0:
            return t.addr, t.addr
        return t.addr + int(offs.min()) * item, t.addr + (int(offs.max()) + 1) * item

    def byte_runs(self, count: int | None = None) -> list[tuple[int, int]]:
        """The contiguous (address, bytes) runs the first ``count`` elements occupy, in address
        order; a strided view gives one run per gap, a broadcast view each byte once."""
        count = self.count if count is None else count
        offs = self._offsets(count)
        if offs is None or count <= 1:
            lo, hi = self.byte_range(count)
            return [(lo, hi - lo)] if hi > lo else []
        t = self.tensor
        item = t.dtype.itemsize
        offs = np.unique(offs)
        breaks = np.flatnonzero(np.diff(offs) != 1) + 1
        firsts = np.concatenate(([0], breaks))
        lasts = np.concatenate((breaks, [offs.size]))
        return [(t.addr + int(offs[a]) * item, int(b - a) * item) for a, b in zip(firsts, lasts)]

    def memory_name(self) -> str:
        """The memory of this slice as ``Instruction.accesses`` names it: "GM" on Ascend, the
        global region's name ("DDR", "SMC") on a DSP."""
        t = self.tensor
        if t.device.spec.family != "dsp":
            return "GM"
        lo, hi = self.byte_range(min(self.count, 1))
        try:
            return t.device.space.region_of(lo, max(1, hi - lo)).name
        except MemoryFault:
            return t.device.gm.name

    def span_bytes(self, count: int) -> int:
        """Bytes a DMA moves: the elements, or fewer when a broadcast view repeats them."""
        lo, hi = self.byte_range(count)
        return min(count * self.tensor.dtype.itemsize, hi - lo)

    def check(self, count: int, *, write: bool) -> tuple[int, int]:
        t = self.tensor
        if t.is_contiguous:     # byte_range without _offsets (every DataCopy checks its slice)
            item = t.dtype.itemsize
            lo = t.addr + (t.offset + self.start) * item
            hi = lo + count * item
        else:
            lo, hi = self.byte_range(count)
        if hi > lo:
            dev = t.device
            gm = dev.gm
            if gm.base <= lo and hi <= gm.end:
                # Device.check_global's verdict, in one call: a range inside the GM region is
                # in no other (regions do not overlap), so AddressSpace.region_of would pick
                # it and Region.check would _locate it (alignment 1): same checks, same faults
                gm._locate(lo, hi - lo, write, 1)
            else:
                dev.check_global(lo, hi - lo, write=write)
        return lo, hi

    def read(self, count: int) -> np.ndarray:
        t = self.tensor
        # the common case: a slice of the tensor's window (its allocation's bytes, typed), valid
        # while the allocation lives and its array is the same; no data read while a program is
        # drawn (Device.global_view notes such a read for the fast-forward)
        w = t._win[0]
        if w is None or not (w.alloc._store is w.store and w.seg.data is w.data):
            w = t._window_entry()
        if w is not None:
            array, start = w.array, self.start
            if array is not None and 0 <= start and 0 <= count and start + count <= w.count \
                    and t.device.drawing is None:
                return array[start:start + count]
        if t.is_contiguous:     # in one call: byte_range without _offsets
            dt = t.dtype
            item = dt.itemsize
            return t.device.global_view(t.addr + (t.offset + self.start) * item, count * item,
                                        np_dtype=dt.np_dtype)
        lo, hi = self.byte_range(count)
        offs = self._offsets(count)
        raw = t.device.global_view(lo, hi - lo, np_dtype=t.dtype.np_dtype)
        if offs is None:
            return raw
        base = (lo - t.addr) // t.dtype.itemsize
        return raw[offs - base]

    def write(self, values: np.ndarray) -> None:
        t = self.tensor
        count = len(values)
        # the common case: straight into a slice of the tensor's window (as read); a window that
        # may not be written (a host array lent to the device, read-only memory) goes the long
        # way, which copies the lent bytes first or faults
        w = t._win[0]
        if w is None or not (w.alloc._store is w.store and w.seg.data is w.data):
            w = t._window_entry()
        if w is not None and w.writable:     # never without array
            start = self.start
            if 0 <= start and start + count <= w.count and t.device.drawing is None:
                w.array[start:start + count] = values
                return
        if t.is_contiguous:     # straight into the destination's bytes
            dt = t.dtype
            item = dt.itemsize
            t.device.global_view(t.addr + (t.offset + self.start) * item, count * item, write=True,
                                 np_dtype=dt.np_dtype)[...] = values
            return
        lo, hi = self.byte_range(count)
        offs = self._offsets(count)
        raw = t.device.global_view(lo, hi - lo, write=True, np_dtype=t.dtype.np_dtype)
        if offs is None:
            raw[...] = values
        else:
            raw[offs - (lo - t.addr) // t.dtype.itemsize] = values

    def atomic_add(self, values: np.ndarray) -> None:
        """GM += values, computed in fp32 and rounded once (the atomic-add DMA)."""
        t = self.tensor
        count = len(values)
        lo, hi = self.byte_range(count)
        offs = self._offsets(count)
        raw = t.device.global_view(lo, hi - lo, write=True, np_dtype=t.dtype.np_dtype)
        sel = slice(None) if offs is None else offs - (lo - t.addr) // t.dtype.itemsize
        if t.dtype == nx.FP32:
            if offs is None:
                np.add(raw, values, out=raw)
            else:
                raw[sel] = raw[sel] + values
        else:
            raw[sel] = nx.round_to(nx.to_f32(raw[sel]) + nx.to_f32(values), t.dtype)


# ---------------------------------------------------------------------------------------------
# Local memory
# ---------------------------------------------------------------------------------------------

class LocalTensor:
    """A typed range of a core's on-chip memory."""

    __slots__ = ("core", "region", "addr", "dtype", "count")

    def __init__(self, core: "Core", region: "Region", addr: int, dtype: nx.DType, count: int) -> None:
        self.core, self.region, self.addr, self.dtype, self.count = core, region, addr, dtype, count

    def __repr__(self) -> str:
        return f"LocalTensor({self.region.name}@{self.addr:#x}, {self.count} x {self.dtype})"

    def __getitem__(self, s: slice) -> "LocalTensor":
        start, stop, step = s.indices(self.count)
        if step != 1:
            raise SimulatorError("LocalTensor slices have step 1")
        return LocalTensor(self.core, self.region, self.addr + start * self.dtype.itemsize, self.dtype,
                           stop - start if stop > start else 0)

    @property
    def memory_name(self) -> str:
        """``"<core>/<region>"``, the memory name of ``Instruction.accesses``."""
        return f"{self.core.name}/{self.region.name}"

    def access(self, count: int | None, write: bool) -> tuple[str, int, int, bool]:
        """The ``Instruction.accesses`` entry of the first ``count`` elements (all if None)."""
        n = self.count if count is None else count
        return (f"{self.core.name}/{self.region.name}", self.addr, n * self.dtype.itemsize, write)

    def reinterpret(self, dtype: Any) -> "LocalTensor":
        dt = nx.dtype(dtype)
        return LocalTensor(self.core, self.region, self.addr, dt,
                           self.count * self.dtype.itemsize // dt.itemsize)

    def check(self, count: int, *, write: bool) -> None:
        if count > self.count:
            raise MemoryFault(f"{count} elements overrun {self!r}", address=self.addr)
        align = self.region.alignment
        if self.addr % align:
            raise MemoryFault(f"{self.region.name} tensor start {self.addr:#x} is not {align} B aligned",
                              address=self.addr)
        region, addr, nbytes = self.region, self.addr, count * self.dtype.itemsize
        # Region.check's verdict for a flat or sparse region (any local memory), inline: the cube
        # instructions check three or four operands each when they issue. Whatever it would
        # refuse -- and every allocation-backed region -- goes to Region.check, which raises.
        if (region.backing == "allocation" or nbytes < 0 or addr < region.base or addr + nbytes > region.end
                or (write and region.read_only)):
            region.check(addr, nbytes, write=write)

    def check_scalar(self) -> None:
        """A scalar read of element 0 (``GetValue``: the scalar unit loads one element of local
        memory): any element of the tensor's memory, aligned to its size -- not a vector
        operand, so not 32 B aligned."""
        item = self.dtype.itemsize
        if self.count < 1:
            raise MemoryFault(f"a scalar read of {self!r}, which has no elements", address=self.addr)
        if self.addr % item:
            raise MemoryFault(f"scalar read at {self.addr:#x} is not aligned to its {item} B element",
                              address=self.addr)
        region = self.region
        if region.backing == "allocation" or self.addr < region.base or self.addr + item > region.end:
            region.check(self.addr, item, write=False)

    def array(self, count: int | None = None) -> np.ndarray:
        n = self.count if count is None else count
        dt = self.dtype
        region = self.region
        # the region's view cache first: a buffer of the last tile again, one call fewer
        hit = region.views.get((self.addr, n * dt.itemsize, dt.np_dtype))
        if hit is not None:
            return hit
        return region.typed_view(self.addr, n * dt.itemsize, dt.np_dtype, write=True)


# ---------------------------------------------------------------------------------------------
# Queues (TQue) and calculation buffers (TBuf)
# ---------------------------------------------------------------------------------------------

class TQue:
    """A TQue with ``depth`` buffers between a producer and a consumer pipe."""

    def __init__(self, ctx: "KernelContext", position: str, depth: int, nbytes: int) -> None:
        core = ctx.core
        try:
            memory, producer, consumer = POSITIONS[position]
        except KeyError:
            raise SimulatorError(f"unknown queue position {position!r}; known: {', '.join(POSITIONS)}") from None
        if memory == "LOCAL":
            memory = core.local_memory
        producer = {"LOAD": core.load_pipe, "STORE": core.store_pipe}.get(producer, producer)
        consumer = {"LOAD": core.load_pipe, "STORE": core.store_pipe}.get(consumer, consumer)
        if depth < 1:
            raise SimulatorError(f"queue depth must be >= 1, got {depth}")
        self.ctx, self.position, self.depth = ctx, position, depth
        self.region = core.memory(memory)
        self.producer, self.consumer = producer, consumer
        self.nbytes = align_up(int(nbytes), self.region.alignment)
        self.buffers = [ctx.allocate(self.region, self.nbytes, f"{position}[{i}]") for i in range(depth)]
        self.event_ids = [ctx.next_event_id(producer, consumer) for _ in range(depth)]
        # free buffer indices, the next to allocate first, and the enqueued (index, tensor) pairs,
        # oldest first: lists taken from the front by index and ``del`` (a queue holds a few
        # buffers; a deque's popleft is a call per queue operation, four per buffer moved)
        self._free: list[int] = list(range(depth))
        self._fifo: list[tuple[int, LocalTensor]] = []
        self._out: dict[int, int] = {}  # buffer start address -> buffer index (allocated, not freed)
        # the tensor alloc() last returned for each buffer: returned again for the same dtype
        # (a LocalTensor is a value that nothing modifies; one object fewer per alloc); None
        # until the buffer's first alloc, after which each alloc waits for its free flag
        self._tensors: list[LocalTensor | None] = [None] * depth
        self._alloc_origin: dict[int, str | None] = {}   # address -> source line of its alloc()
        self._released: dict[int, tuple[str, int, int, str]] = {}   # address -> QueueFreeFlag.buffer
        isa = _isa()
        self._set_flag, self._wait_flag, self._free_flag = isa.SetFlag, isa.WaitFlag, isa.QueueFreeFlag
        # the block's pending list (never rebound: the stream drains it in place) and device,
        # read by the four queue calls without going through the context
        self._pending: list = ctx.pending
        self._device = ctx.device
        ctx.queues.append(self)

    def alloc(self, dtype: Any = nx.FP32) -> LocalTensor:
        """AllocTensor: the next free buffer (waits on the consumer's free flag if reused)."""
        free = self._free
        if not free:
            raise QueueError(f"{self.position} queue: alloc() with all {self.depth} buffers in use "
                             f"(free() one first)", core=self.ctx.core.name)
        i = free[0]
        del free[0]
        # the queue's flags are built and queued here, not through ctx.emit_wait: a kernel runs
        # the four queue calls for every buffer it moves, and FLCE's cube side moves ten buffers
        # per L1 chunk (three fewer calls per flag). Each is made by object.__new__ with the
        # fields its class's __init__ sets (keep the four in step with SetFlag.__init__ and
        # WaitFlag.__init__): no Python __init__ frame for the flags, 3/4 of FLCE's completions
        lines = self._device.source_lines
        t = self._tensors[i]
        if t is not None:                      # handed out before: wait for its free flag
            flag = _new(self._wait_flag)       # WaitFlag(consumer, producer, event id)
            flag.tile = -1
            flag.origin = _caller_line() if lines else None
            flag.src = self.consumer
            flag.dst = flag.pipe = self.producer
            flag.event_id = self.event_ids[i]
            self._pending.append(flag)
        dt = dtype if type(dtype) is nx.DType else nx.dtype(dtype)
        if t is None or t.dtype is not dt:
            t = self._tensors[i] = LocalTensor(self.ctx.core, self.region, self.buffers[i], dt,
                                               self.nbytes // dt.itemsize)
        self._out[t.addr] = i
        if lines:
            self._alloc_origin[t.addr] = _caller_line()
        return t

    def unfreed(self) -> list[tuple[str, int, int, str | None, str]]:
        """(what, address, bytes, source line of the alloc, the call) of each tensor allocated and
        not freed."""
        return [(f"{self.position} queue buffer {i}", addr, self.nbytes, self._alloc_origin.get(addr),
                 "TQue.alloc") for addr, i in self._out.items()]

    def _index(self, t: LocalTensor) -> int:
        i = self._out.get(t.addr)
        if i is None:
            raise QueueError(f"{self.position} queue: tensor {t!r} does not belong to this queue")
        return i

    def enque(self, t: LocalTensor) -> None:
        try:
            i = self._out[t.addr]
        except KeyError:
            i = self._index(t)           # raises
        flag = _new(self._set_flag)            # SetFlag(producer, consumer, event id), as in alloc
        flag.tile = -1
        flag.origin = _caller_line() if self._device.source_lines else None
        flag.src = flag.pipe = self.producer
        flag.dst = self.consumer
        flag.event_id = self.event_ids[i]
        self._pending.append(flag)
        self._fifo.append((i, t))

    def deque(self) -> LocalTensor:
        fifo = self._fifo
        if not fifo:
            raise QueueError(f"{self.position} queue: deque() on an empty queue")
        i, t = fifo[0]
        del fifo[0]
        flag = _new(self._wait_flag)           # WaitFlag(producer, consumer, event id), as in alloc
        flag.tile = -1
        flag.origin = _caller_line() if self._device.source_lines else None
        flag.src = self.producer
        flag.dst = flag.pipe = self.consumer
        flag.event_id = self.event_ids[i]
        self._pending.append(flag)
        return t

    def free(self, t: LocalTensor) -> None:
        out = self._out
        addr = t.addr
        try:
            i = out[addr]
        except KeyError:
            raise QueueError(f"{self.position} queue: free() of a tensor not allocated here") from None
        del out[addr]
        flag = _new(self._free_flag)           # QueueFreeFlag(consumer, producer, event id), as in alloc
        flag.tile = -1
        flag.origin = _caller_line() if self._device.source_lines else None
        flag.src = flag.pipe = self.consumer
        flag.dst = self.producer
        flag.event_id = self.event_ids[i]
        # the buffer's (memory, address, bytes, name), made once per buffer (the same tuple for
        # every free of it: a value nothing modifies)
        try:
            flag.buffer = self._released[addr]
        except KeyError:
            flag.buffer = self._released[addr] = (self.region.name, addr, self.nbytes,
                                                  f"{self.position} queue buffer {i}")
        flag.realloc_index = None              # this queue does not stamp program order (opsim.asc does)
        self._pending.append(flag)
        self._free.append(i)

    def destroy(self) -> None:
        """The queue's part of ``TPipe.Destroy()``: the producer waits for the free flag of each
        buffer freed and not allocated again (the consumer's last use of it is done), then the
        buffers go back to their memory. A buffer still allocated (not freed) is an error."""
        if self._out:
            raise QueueError(f"{self.position} queue: destroyed with {len(self._out)} tensor(s) still "
                             f"allocated (free() them first)", core=self.ctx.core.name)
        for i in self._free:
            if self._tensors[i] is not None:          # its free flag is set and not yet waited
                self.ctx.emit_wait(self.consumer, self.producer, self.event_ids[i])
        if self.ctx._work_area is None or self.region is not self.ctx._work_area[0]:
            for addr in self.buffers:
                self.region.free(addr)
        self.buffers, self._free, self._tensors = [], [], []


# position -> (memory, producer pipe, consumer pipe); LOAD/STORE resolve per core kind
POSITIONS: dict[str, tuple[str, str, str]] = {
    "VECIN": ("LOCAL", "LOAD", "VECTOR"),
    "VECOUT": ("LOCAL", "VECTOR", "STORE"),
    "A1": ("L1", "MTE2", "MTE1"),
    "B1": ("L1", "MTE2", "MTE1"),
    "A2": ("L0A", "MTE1", "CUBE"),
    "B2": ("L0B", "MTE1", "CUBE"),
    "CO1": ("L0C", "CUBE", "FIXP"),
}


class KernelContext:
    """What a block's program sees: its core, block index, queues, buffers and GM tensors."""

    def __init__(self, core: "Core", block_idx: int, block_dim: int) -> None:
        self.core = core
        self.device = core.device
        self.block_idx = block_idx
        self.block_dim = block_dim
        self.pending: list = []
        self._event_ids: dict[tuple[str, str], int] = {}
        # mixed AIC/AIV launches: which vector core of its group this is (GetSubBlockIdx) and
        # how many vector cores a group has (GetTaskRation); 0 and 1 everywhere else
        self.sub_block_idx = 0
        self.sub_block_num = 1
        self._work_area: tuple["Region", int, int] | None = None   # (region, base, end)
        self._work_next = 0
        self.queues: list[Any] = []   # this block's TQues (anything with unfreed()), for the sanitizer
        # (memory name, start, end) of the local buffers destroy_pipe gave back: the generator runs
        # ahead of simulated time, so the earlier stage's last accesses may execute when the
        # later stage's buffers already hold those addresses (read by the sanitizer)
        self.retired: list[tuple[str, int, int]] = []
        # the context of the block the core runs now: execution clients (the sanitizer) look at
        # its queues when the block ends
        core.context = self
        # set by a replay (simulator/replay.py): count -> the tile indices to run, which may jump
        # over a run of identical tiles once their timing repeats; None: every tile
        self.tile_loop: Callable[[int], Iterable[int]] | None = None

    # Ascend C spellings
    def get_block_idx(self) -> int:
        return self.block_idx

    def get_block_num(self) -> int:
        return self.block_dim

    def get_sub_block_idx(self) -> int:
        return self.sub_block_idx

    @property
    def tile(self) -> int:
        return self.core.tile

    @tile.setter
    def tile(self, i: int) -> None:
        self.core.tile = i

    @property
    def functional(self) -> bool:
        return self.device.functional

    def tiles(self, count: int) -> Iterable[int]:
        """``range(count)``, the tile loop of a kernel. The simulator runs every tile; the
        estimate's replay may skip identical tiles in the middle once their timing repeats."""
        loop = self.tile_loop
        return range(count) if loop is None else loop(count)

    def next_event_id(self, src: str, dst: str) -> int:
        # Count per unordered pipe pair: on a DSP core loads and stores share the DMA pipe, so
        # VECIN (DMA->VECTOR) and VECOUT (VECTOR->DMA) use the same two flag directions and
        # their ids must not collide. On Ascend the pairs differ and the ids are unchanged.
        k = (src, dst) if src <= dst else (dst, src)
        i = self._event_ids.get(k, 0)
        self._event_ids[k] = i + 1
        return i

    def use_work_area(self, memory: str, base: int, nbytes: int) -> None:
        """Place this block's queues and TBufs of ``memory`` in the fixed range
        [base, base + nbytes) by bump allocation instead of the region's allocator.

        A DSP library owns a fixed working area of each core's private memory: bare-metal
        callers put their data at addresses of their choosing, which the region's allocator
        knows nothing about, so the library must not hand out buffers from it.
        """
        region = self.core.memory(memory)
        region.check(base, nbytes, write=False)
        self._work_area = (region, base, base + nbytes)
        self._work_next = base

    def allocate(self, region: "Region", nbytes: int, name: str) -> int:
        wa = self._work_area
        if wa is None or region is not wa[0]:
            return region.allocate(nbytes, name=name).addr
        area, base, end = wa
        addr = align_up(self._work_next, max(area.alignment, 32))
        if addr + nbytes > end:
            raise CapacityError(
                f"{area.name} work area [{base:#x}, {end:#x}) cannot hold {name} of {nbytes} B "
                f"({addr - base} B already in use)", buffer=f"{area.name} work area",
                needed=addr + nbytes - base, available=end - base, core=self.core.name)
        self._work_next = addr + nbytes
        # the work area's bytes are in use next to whatever the region's allocator holds (the
        # caller's data of a ``_p`` call): the occupancy counter and the run's peak count both
        in_use = area.allocated_bytes + self._work_next - base
        area.peak_allocated_bytes = max(area.peak_allocated_bytes, in_use)
        if area.observer is not None:
            area.observer(in_use)
        return addr

    def work_area_bytes(self, region: "Region") -> int:
        """Bytes this block has bump allocated in ``region``'s work area (0 without one)."""
        wa = self._work_area
        return self._work_next - wa[1] if wa is not None and region is wa[0] else 0

    def queue(self, position: str, depth: int, nbytes: int) -> TQue:
        return TQue(self, position, depth, nbytes)

    def destroy_pipe(self) -> None:
        """``TPipe.Destroy()`` in the middle of a block: every queue waits for its pending free
        flags and gives its buffers back, and every TBuf of the core's local memories is freed,
        so a later stage of the same kernel plans that memory afresh (a new TPipe). Flags that
        order the later stage's first accesses after the earlier stage's last ones are the
        kernel's to emit."""
        for q in self.queues:
            q.destroy()
        self.queues.clear()
        for region in self.core.memories.values():
            if region.backing == "sparse":
                continue                    # not a local memory (Core.begin_block resets the others)
            if self._work_area is not None and region is self._work_area[0]:
                self._work_next = self._work_area[1]
                continue
            for alloc in region.allocations:
                self.retired.append((region.name, alloc.addr, alloc.addr + alloc.nbytes))
                region.free(alloc.addr)

    def tbuf(self, nbytes: int, dtype: Any = nx.FP32, memory: str | None = None) -> LocalTensor:
        """A TBuf (VECCALC) buffer: scratch space of the vector unit, no queue semantics."""
        region = self.core.memory(memory or self.core.local_memory)
        n = align_up(int(nbytes), region.alignment)
        addr = self.allocate(region, n, "TBuf")
        dt = nx.dtype(dtype)
        return LocalTensor(self.core, region, addr, dt, n // dt.itemsize)

    def local_at(self, addr: int, dtype: Any, count: int, memory: str | None = None) -> LocalTensor:
        """A LocalTensor at a fixed address of this core's memory (DSP private data, ``_p``)."""
        region = self.core.memory(memory or self.core.local_memory)
        return LocalTensor(self.core, region, addr, nx.dtype(dtype), count)

    def emit(self, instr: Any) -> None:
        # an emitted flag's source line is the kernel line that emitted it (TQue calls included),
        # not the line of the instruction yielded next
        if self.device.source_lines and getattr(instr, "origin", None) is None:
            instr.origin = _caller_line()
        self.pending.append(instr)

    # emit_set / emit_wait build and queue the flag themselves (as TQue.alloc does, with the
    # fields of SetFlag.__init__ / WaitFlag.__init__): no layer of calls between a kernel's flag
    # and the pending list, the source line found the same way
    def emit_set(self, src: str, dst: str, event_id: int) -> None:
        flag = _new((_ISA or _isa()).SetFlag)  # SetFlag(src, dst, event_id)
        flag.tile = -1
        flag.origin = _caller_line() if self.device.source_lines else None
        flag.src = flag.pipe = src
        flag.dst = dst
        flag.event_id = event_id
        self.pending.append(flag)

    def emit_wait(self, src: str, dst: str, event_id: int) -> None:
        flag = _new((_ISA or _isa()).WaitFlag)  # WaitFlag(src, dst, event_id)
        flag.tile = -1
        flag.origin = _caller_line() if self.device.source_lines else None
        flag.src = src
        flag.dst = flag.pipe = dst
        flag.event_id = event_id
        self.pending.append(flag)


# ---------------------------------------------------------------------------------------------
# The shared element-wise pipeline
# ---------------------------------------------------------------------------------------------

ComputeFn = Callable[[KernelContext, list[LocalTensor], LocalTensor, int], Iterator[Any]]


def elementwise_pipeline(ctx: KernelContext, *, inputs: Sequence[GlobalTensor], output: GlobalTensor,
                         start: int, length: int, tile_length: int, buffer_num: int,
                         compute: ComputeFn, prefetch: bool | None = None) -> Iterator[Any]:
    """CopyIn → Compute → CopyOut over flat elements [start, start+length) of ``output``.

    All inputs of a tile share one VECIN buffer (slots of ``tile_length`` elements, each 32 B
    aligned), the result goes through one VECOUT buffer; both queues have ``buffer_num``
    buffers, so with 2 the load of tile i+1 overlaps the compute of tile i. ``compute(ctx, ins,
    out, n)`` yields the vector instructions of one tile (it may use TBufs it allocated).

    ``prefetch`` issues the CopyIn of tile i+1 before the Compute and CopyOut of tile i. A core
    whose loads and stores share one in-order queue (the DSP's DMA pipe) needs it, or the store
    of tile i, which waits for its compute, holds back the next loads and double buffering
    overlaps nothing. The default switches it on exactly there (with two or more buffers).
    """
    if length <= 0:
        return
    if prefetch is None:
        prefetch = ctx.core.load_pipe == ctx.core.store_pipe
    prefetch = prefetch and buffer_num >= 2
    in_dt = inputs[0].dtype
    slot = align_up(tile_length * in_dt.itemsize, 32) // in_dt.itemsize
    inq = ctx.queue("VECIN", buffer_num, slot * in_dt.itemsize * len(inputs))
    outq = ctx.queue("VECOUT", buffer_num, tile_length * output.dtype.itemsize)
    ntiles = -(-length // tile_length)
    # Per tile this loop runs a few dozen Python operations for a few instructions, so it is
    # written flat: the CopyIn inline (no sub-generator to resume per copy), the core's tile set
    # directly (the ctx.tile setter), and the operand views made without __getitem__ where the
    # slice is known to be in range -- the same views (bounds as slice.indices gives them).
    core = ctx.core
    copy_pad = (_ISA or _isa()).DataCopyPad
    end = start + length
    n_in = len(inputs)
    # the views' element counts, read once (a cached_property lookup per copy otherwise)
    numels = [g.numel for g in inputs]
    out_numel = output.numel
    # (input buffer address, elements) -> the inputs' slots in that buffer: the same few
    # (buffers x {tile, tail}) every tile; compute gets a fresh list of them each time
    slots: dict[tuple[int, int], tuple[LocalTensor, ...]] = {}

    def views(buf: LocalTensor, n: int) -> tuple[LocalTensor, ...]:
        v = slots[buf.addr, n] = tuple(buf[j * slot: j * slot + n] for j in range(n_in))
        return v

    # g[off:off + n] is GlobalSlice(g, off, n) when 0 <= off and off + n <= g.numel (slice.indices
    # changes nothing then); the copies below build it directly there
    if prefetch:
        # the CopyIn of tile 0 (as in the loop below)
        core.tile = 0
        n = tile_length if tile_length < length else length
        buf = inq.alloc(in_dt)
        try:
            v = slots[buf.addr, n]
        except KeyError:
            v = views(buf, n)
        for dst, g, numel in zip(v, inputs, numels):
            yield copy_pad(dst, GlobalSlice(g, start, n) if 0 <= start and start + n <= numel
                           else g[start:start + n], n)
        inq.enque(buf)
    for t in ctx.tiles(ntiles):
        # CopyIn of tile t, or of tile t + 1 with prefetch
        c = t + 1 if prefetch else t
        if not prefetch or c < ntiles:
            core.tile = c
            off = start + c * tile_length
            n = end - off
            if n > tile_length:
                n = tile_length
            buf = inq.alloc(in_dt)
            try:
                v = slots[buf.addr, n]
            except KeyError:
                v = views(buf, n)
            for dst, g, numel in zip(v, inputs, numels):
                yield copy_pad(dst, GlobalSlice(g, off, n) if 0 <= off and off + n <= numel
                               else g[off:off + n], n)
            inq.enque(buf)
        # Compute and CopyOut of tile t
        core.tile = t
        off = start + t * tile_length
        n = end - off
        if n > tile_length:
            n = tile_length
        buf = inq.deque()
        out = outq.alloc(output.dtype)
        try:
            v = slots[buf.addr, n]
        except KeyError:
            v = views(buf, n)
        yield from compute(ctx, list(v), out, n)
        inq.free(buf)
        outq.enque(out)
        out = outq.deque()
        yield copy_pad(GlobalSlice(output, off, n) if 0 <= off and off + n <= out_numel
                       else output[off:off + n], out, n)
        outq.free(out)


def _caller_line() -> str | None:
    """"file.py:line" of the first caller outside this module (the kernel that called alloc)."""
    import sys
    frame: Any = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return None if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"
