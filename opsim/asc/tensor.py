"""``asc.GlobalAddress``, ``asc.GlobalTensor`` and ``asc.LocalTensor`` over the simulator's
GM views and local tensors."""
from __future__ import annotations

from typing import Any

import numpy as np

from opsim.asc import _core
from opsim.asc.dtype import DataType, of, sim_dtype
from opsim.asc.enums import TPosition
from opsim.simulator import numerics as nx
from opsim.simulator.errors import MemoryFault, SimulatorError
from opsim.simulator.tile import GlobalSlice, GlobalTensor as SimGlobalTensor, LocalTensor as SimLocal


class GlobalAddress:
    """A typed pointer into device memory: a kernel parameter that received a host array.

    ``x + offset`` moves it by ``offset`` elements; ``x.dtype`` is the element type.
    """

    __slots__ = ("device", "addr", "dtype", "numel")

    def __init__(self, device: Any, addr: int, dtype: Any, numel: int) -> None:
        self.device, self.addr, self.dtype, self.numel = device, int(addr), of(dtype), int(numel)

    def __add__(self, offset: int) -> "GlobalAddress":
        off = int(offset)
        return GlobalAddress(self.device, self.addr + off * self.dtype.sizeof(), self.dtype, self.numel - off)

    __radd__ = __add__

    def __repr__(self) -> str:
        return f"GlobalAddress({self.addr:#x}, {self.dtype}, {self.numel} elements)"


class GlobalTensor:
    """``asc.GlobalTensor()`` then ``set_global_buffer(addr[, length])``; ``g[off:]`` views it
    from element ``off``. The length is what the kernel declared; the memory checks are those
    of the device (an access outside the allocation faults, as on the hardware)."""

    __slots__ = ("_base", "_offset", "_length")

    def __init__(self, dtype: Any = None) -> None:
        self._base: GlobalAddress | None = None
        self._offset = 0
        self._length: int | None = None

    def set_global_buffer(self, buffer: GlobalAddress, buffer_size: int | None = None) -> None:
        if not isinstance(buffer, GlobalAddress):
            raise TypeError(f"set_global_buffer takes a GlobalAddress (a kernel parameter, optionally "
                            f"plus an offset), got {type(buffer).__name__}")
        self._base, self._offset = buffer, 0
        self._length = None if buffer_size is None else int(buffer_size)

    @property
    def _addr(self) -> GlobalAddress:
        if self._base is None:
            raise SimulatorError(f"GlobalTensor used before set_global_buffer (at {_core.call_site()})")
        return self._base

    @property
    def dtype(self) -> DataType:
        return self._addr.dtype

    @property
    def address(self) -> int:
        """Byte address of element 0 of this view."""
        a = self._addr
        return a.addr + self._offset * a.dtype.sizeof()

    def get_size(self) -> int:
        a = self._addr
        return self._length - self._offset if self._length is not None else a.numel - self._offset

    def __getitem__(self, s: Any) -> "GlobalTensor":
        if isinstance(s, (int, np.integer)) and not isinstance(s, bool):
            s = slice(int(s), None)        # pyasc's g[i] (Ascend C operator[]): the view from element i
        if not isinstance(s, slice):
            raise TypeError(f"GlobalTensor index must be an int or a slice, got {type(s).__name__} "
                            f"(at {_core.call_site()})")
        if s.step not in (None, 1):
            raise SimulatorError(f"GlobalTensor slices have step 1, got {s.step}")
        start = int(s.start or 0)
        g = GlobalTensor()
        g._base, g._offset = self._addr, self._offset + start
        if s.stop is not None:
            g._length = self._offset + int(s.stop)
        else:
            g._length = self._length
        return g

    def get_value(self, offset: int) -> Any:
        raise _core.unsupported("GlobalTensor.get_value (a scalar read of GM)",
                                "copy the element into local memory with data_copy and use LocalTensor.get_value")

    def set_value(self, offset: int, value: Any) -> None:
        raise _core.unsupported("GlobalTensor.set_value (a scalar write to GM)",
                                "write it through local memory with data_copy_pad")

    def sim_slice(self, count: int) -> GlobalSlice:
        """The GM operand of a DMA of ``count`` elements from this view."""
        a = self._addr
        dt = a.dtype.sim
        t = SimGlobalTensor(a.device, self.address, dt, (max(int(count), 1),), (1,), 0)
        # what the kernel may touch through this view, for the sanitizer: its argument's end
        # and the length set_global_buffer declared
        item = dt.itemsize
        view_end = None if self._length is None else a.addr + self._length * item
        return GlobalSlice(t, 0, int(count), limit=(a.addr + a.numel * item, view_end))

    def __repr__(self) -> str:
        return f"GlobalTensor({self.address:#x}, {self.dtype})" if self._base is not None else "GlobalTensor()"


_LOCAL_MEMORY = {TPosition.A1: "L1", TPosition.B1: "L1", TPosition.C1: "L1", TPosition.A2: "L0A",
                 TPosition.B2: "L0B", TPosition.CO1: "L0C"}


def memory_of(position: TPosition, core: Any) -> str:
    """The on-chip memory a TPosition lives in on ``core``."""
    pos = TPosition(position)
    if pos in (TPosition.VECIN, TPosition.VECOUT, TPosition.VECCALC):
        return core.local_memory if core.kind != "aic" else "UB"
    name = _LOCAL_MEMORY.get(pos)
    if name is None:
        raise _core.unsupported(f"a LocalTensor at TPosition.{pos.name}")
    return name


class DeferredScalar:
    """``t.get_value(i)``: element ``i`` of local memory, read by the vector instruction that uses
    it when that instruction executes (the scalar register load a kernel does after a V->S
    sync), since its value does not exist before the device computes it."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: SimLocal) -> None:
        self.tensor = tensor

    def _host_use(self, *_: Any) -> Any:
        raise _core.unsupported("using a get_value() result in host Python arithmetic",
                                "pass it straight to a vector instruction's scalar operand")

    __float__ = __int__ = __index__ = __bool__ = _host_use
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _host_use
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _host_use
    __pow__ = __rpow__ = __neg__ = __pos__ = __abs__ = _host_use
    __lt__ = __le__ = __gt__ = __ge__ = _host_use


class LocalTensor:
    """``asc.LocalTensor(dtype, pos, addr, length)``: ``length`` elements at byte ``addr`` of the
    memory of ``pos`` on the running core; slicing ``t[off:]`` gives a view."""

    # owner: the LocalTensorAuto a view was taken from, kept alive while the view is (its
    # buffer goes back to the pool when the last reference to it goes)
    __slots__ = ("sim", "position", "owner")

    def __init__(self, dtype: Any = None, pos: TPosition = TPosition.VECCALC, addr: int = 0,
                 tile_size: int = 0, *, _sim: SimLocal | None = None, _owner: Any = None) -> None:
        self.position = TPosition(pos)
        self.owner = _owner
        if _sim is not None:
            self.sim = _sim
            return
        state = _core.current()
        core = state.core
        region = core.memory(memory_of(self.position, core))
        dt = sim_dtype(dtype)
        addr, n = int(addr), int(tile_size)
        if addr < 0 or n < 0 or addr + n * dt.itemsize > region.size or addr % region.alignment:
            raise MemoryFault(f"LocalTensor of {n} x {dt} at {region.name} offset {addr:#x}: {region.name} holds "
                              f"{region.size} B and tensors start {region.alignment} B aligned "
                              f"(at {_core.call_site()})", address=addr)
        self.sim = SimLocal(core, region, addr, dt, n)
        # a tensor at a fixed address bypasses the allocator; its bytes are in use all the same,
        # so the run's local-memory peak (stats["ub_peak_bytes"]) covers them
        region.peak_allocated_bytes = max(region.peak_allocated_bytes, addr + n * dt.itemsize)

    @classmethod
    def wrap(cls, sim: SimLocal, pos: TPosition, owner: Any = None) -> "LocalTensor":
        return LocalTensor(pos=pos, _sim=sim, _owner=owner)

    def _view_owner(self) -> Any:
        return self.owner if self.owner is not None else (self if isinstance(self, LocalTensorAuto) else None)

    @property
    def dtype(self) -> DataType:
        return DataType(self.sim.dtype)

    def get_size(self) -> int:
        return self.sim.count

    get_length = get_size

    @property
    def address(self) -> int:
        return self.sim.addr

    def __getitem__(self, s: Any) -> "LocalTensor":
        if isinstance(s, (int, np.integer)) and not isinstance(s, bool):
            s = slice(int(s), None)        # pyasc's t[i] (Ascend C operator[]): the view from element i
        if not isinstance(s, slice):
            raise TypeError(f"LocalTensor index must be an int or a slice, got {type(s).__name__} "
                            f"(at {_core.call_site()})")
        start = int(s.start or 0)
        if start < 0 or start > self.sim.count:
            raise MemoryFault(f"LocalTensor slice from element {start} is outside {self.sim!r} "
                              f"(at {_core.call_site()})", address=self.sim.addr)
        stop = self.sim.count if s.stop is None else int(s.stop)
        return LocalTensor.wrap(self.sim[start:stop], self.position, self._view_owner())

    def get_value(self, index: int) -> DeferredScalar:
        i = int(index)
        return DeferredScalar(self.sim[i:i + 1])

    def reinterpret_cast(self, dtype: Any) -> "LocalTensor":
        return LocalTensor.wrap(self.sim.reinterpret(sim_dtype(dtype)), self.position, self._view_owner())

    def set_value(self, index: int, value: Any) -> None:
        raise _core.unsupported("LocalTensor.set_value (a scalar store into local memory)",
                                "use duplicate(t[index:], value, 1)")

    def __repr__(self) -> str:
        return f"asc.LocalTensor({self.position.name}, {self.sim!r})"


class LocalTensorAuto(LocalTensor):
    """``asc.LocalTensorAuto(dtype, shape)``: a local tensor whose buffer the compiler places,
    in a kernel whose synchronisation the compiler inserts (pyasc's third style, beside manual
    flags and TQue). A UB buffer of the tensor's size (32 B aligned) is taken from the block's
    pool, or allocated when the pool has none of that size, and goes back to the pool when the
    last reference to the tensor (or to a view of it) goes, so a loop that creates its tensors
    afresh in every iteration cycles through a few buffers. A kernel that uses it gets the
    flags of ``insert_sync`` (opsim.asc.autosync), which also order a buffer's reuse after the
    reads of its previous contents."""

    __slots__ = ("_pool", "_addr")

    def __init__(self, dtype: Any, shape: Any, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            raise _core.unsupported("LocalTensorAuto with arguments beyond (dtype, shape)")
        state = _core.current()
        dims = list(shape) if isinstance(shape, (list, tuple)) else [shape]
        n = 1
        for d in dims:
            if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
                raise ValueError(f"LocalTensorAuto shape must be positive integers, got {shape!r} "
                                 f"(at {_core.call_site()})")
            n *= int(d)
        dt = sim_dtype(dtype)
        core = state.core
        region = core.memory(memory_of(TPosition.VECCALC, core))
        nbytes = -(-n * dt.itemsize // region.alignment) * region.alignment
        pool = state.auto_pool.setdefault(nbytes, [])
        addr = pool.pop() if pool else state.ctx.allocate(region, nbytes, f"LocalTensorAuto({n} x {dt})")
        self._pool, self._addr = pool, addr
        super().__init__(pos=TPosition.VECCALC, _sim=SimLocal(core, region, addr, dt, n))

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.append(self._addr)


def as_sim_dtype(x: Any) -> nx.DType:
    return sim_dtype(x)
