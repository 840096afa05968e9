"""``asc.TPipe``, ``asc.TQue`` and ``asc.TBuf``: buffers in local memory and the flag hand-offs
between the pipes that produce and consume them (Ascend C's queue framework).

A TQue buffer passes producer -> consumer on ``enque``/``deque`` (SetFlag on the producer pipe,
WaitFlag on the consumer pipe) and back on ``free_tensor``/``alloc_tensor`` (SetFlag on the
consumer, WaitFlag on the producer before the buffer is written again). With ``num=2`` the load
of tile i+1 can run under the compute of tile i; with 1 it cannot.
"""
from __future__ import annotations

from collections import deque
from typing import Any

from opsim.asc import _core
from opsim.asc.dtype import sim_dtype
from opsim.asc.enums import HardEvent, TPosition
from opsim.asc.tensor import LocalTensor, memory_of
from opsim.simulator.errors import MemoryFault, QueueError, SimulatorError
from opsim.simulator.isa import QueueFreeFlag, SetFlag, WaitFlag
from opsim.simulator.memory import align_up
from opsim.simulator.tile import LocalTensor as SimLocal

_USER_EVENT_IDS = 8        # event ids 0..7 of a pipe pair are the kernel's (HardEvent flags)

# position -> (producer pipe, consumer pipe); "LOAD"/"STORE" resolve per core
_QUEUE_PIPES = {
    TPosition.VECIN: ("LOAD", "VECTOR"),
    TPosition.VECOUT: ("VECTOR", "STORE"),
    TPosition.A1: ("MTE2", "MTE1"),
    TPosition.B1: ("MTE2", "MTE1"),
    TPosition.C1: ("MTE2", "MTE1"),
    TPosition.A2: ("MTE1", "CUBE"),
    TPosition.B2: ("MTE1", "CUBE"),
    TPosition.CO1: ("CUBE", "FIXP"),
}


# pyasc methods of the queue framework opsim.asc does not model -> how to do without them
_UNMODELLED: dict[str, dict[str, str]] = {
    "TPipe": {"get_base_addr": "", "init_buf_pool": "TBufPool is not modelled either",
              "destroy_pipe": ""},
    "TQue": {"free_all_event": "free_tensor each buffer", "init_buf_handle": "", "init_start_buf_handle": ""},
    "TBuf": {"free_all_event": "", "init_buf_handle": "", "init_start_buf_handle": ""},
}


def _refuse_method(obj: Any, name: str) -> AttributeError:
    """The error for a missing attribute of a framework object: an UnsupportedAPI naming the
    call and the kernel line for a pyasc method opsim.asc does not model, else Python's own."""
    from opsim.asc.pyasc_names import refuse
    cls = type(obj).__name__
    table = _UNMODELLED.get(cls, {})
    if name in table:
        return refuse(cls, name, table)
    return AttributeError(f"{cls!r} object has no attribute {name!r}")


def _not_in_place(call: str, arg: Any) -> None:
    """pyasc's in-place overloads (``alloc_tensor(tensor)``, ``deque(tensor)``) fill a tensor
    the kernel declared; opsim.asc models the forms that return the tensor."""
    if isinstance(arg, LocalTensor):
        raise _core.unsupported(f"TQue.{call}(tensor) (the in-place form)",
                                f"write t = que.{call}(dtype); docs/writing-kernels.md §3")


def _absent(state: _core.BlockState, pos: TPosition) -> bool:
    """A mixed kernel runs on the cube core too, where the vector buffers it declares do not
    exist (the compiler drops them there): such a buffer is left uninitialised, and using it
    on the cube core is an error."""
    if state.role != "aic" or state.launch.kind != "mix":
        return False
    return memory_of(pos, state.core) not in state.core.memories


class TPipe:
    """``asc.TPipe()``: owns the local-memory buffers of the queues and TBufs it initialises."""

    def __init__(self) -> None:
        self._state = _core.current()

    def init_buffer(self, que: Any = None, num: int = 1, len: int = 0, **kwargs: Any) -> None:  # noqa: A002
        """``init_buffer(que, num, len)`` for a TQue, ``init_buffer(buf, len)`` for a TBuf."""
        if que is None:
            que = kwargs.pop("buf", None)
        if isinstance(que, TBuf):
            nbytes = len if len else num       # init_buffer(buf, len): the length is positional #2
            que._init(self._state, int(nbytes))
        elif isinstance(que, TQue):
            que._init(self._state, int(num), int(len))
        else:
            raise TypeError(f"TPipe.init_buffer takes a TQue or a TBuf, got {type(que).__name__}")

    def destroy(self) -> None:
        pass

    def reset(self) -> None:
        pass

    def init(self) -> None:
        """``TPipe.init()``: nothing to do (the constructor set the pipe up)."""

    # -- event ids for hand-placed flags (Ascend C's AllocEventID / FetchEventID / ReleaseEventID)
    def _event_ids(self, event: HardEvent) -> set[int]:
        held = self.__dict__.setdefault("_held_events", {})
        return held.setdefault(HardEvent(event), set())

    def fetch_event_id(self, event: HardEvent = HardEvent.V_S) -> int:
        """An event id of ``event`` that no ``alloc_event_id`` holds, without taking it."""
        held = self._event_ids(event)
        for i in range(_USER_EVENT_IDS):
            if i not in held:
                return i
        raise SimulatorError(f"TPipe: all {_USER_EVENT_IDS} event ids of {HardEvent(event).name} are allocated; "
                             f"release_event_id one first (at {_core.call_site()})")

    def alloc_event_id(self, event: HardEvent = HardEvent.V_S) -> int:
        """Take an event id of ``event`` until ``release_event_id`` gives it back."""
        i = self.fetch_event_id(event)
        self._event_ids(event).add(i)
        return i

    def release_event_id(self, id: int, event: HardEvent = HardEvent.V_S) -> None:  # noqa: A002 - pyasc's name
        self._event_ids(event).discard(int(id))

    def __getattr__(self, name: str) -> Any:
        raise _refuse_method(self, name)


class TQue:
    """``asc.TQue(position, depth)``: a queue of buffers between two pipes."""

    def __init__(self, pos: TPosition, depth: int = 1, *args: Any) -> None:
        self.position = TPosition(pos)
        if self.position not in _QUEUE_PIPES:
            raise _core.unsupported(f"TQue at TPosition.{self.position.name}")
        self.depth = int(depth)
        self._state: _core.BlockState | None = None
        self._site: str | None = None

    def _init(self, state: _core.BlockState, num: int, nbytes: int) -> None:
        core = state.core
        if num < 1:
            raise SimulatorError(f"TQue init_buffer num must be >= 1, got {num} (at {_core.call_site()})")
        producer, consumer = _QUEUE_PIPES[self.position]
        self.producer = {"LOAD": core.load_pipe, "STORE": core.store_pipe}.get(producer, producer)
        self.consumer = {"LOAD": core.load_pipe, "STORE": core.store_pipe}.get(consumer, consumer)
        self._site = _core.call_site()         # the init_buffer line: named by the teardown waits
        if _absent(state, self.position):
            return
        self._state = state
        self.region = core.memory(memory_of(self.position, core))
        self.nbytes = align_up(nbytes, self.region.alignment)
        self.buffers = [state.ctx.allocate(self.region, self.nbytes, f"{self.position.name}[{i}]")
                        for i in range(num)]
        self.event_ids = [state.reserved_event(self.producer, self.consumer) for _ in range(num)]
        self._free = deque(range(num))
        self._used = [False] * num
        self._pending_free = [False] * num    # free flag set, not yet waited by an alloc
        self._fifo: deque[tuple[int, LocalTensor]] = deque()
        self._out: dict[int, int] = {}
        self._alloc_site: dict[int, str] = {}
        self._freed_site: dict[int, str] = {}   # buffer -> its free_tensor line, until allocated again
        self._free_flags: dict[int, QueueFreeFlag] = {}   # buffer -> its free's flag, until allocated again
        state.on_finish.append(self._drain)
        state.ctx.queues.append(self)          # the sanitizer reports buffers never freed

    def _ready(self) -> _core.BlockState:
        if self._state is None:
            if getattr(self, "_site", None) is not None:
                raise SimulatorError(f"TQue({self.position.name}) used on {_core.current().core.name}, which has "
                                     f"no {self.position.name} memory (at {_core.call_site()}); guard vector "
                                     f"code with asc.ascend_is_aiv()")
            raise SimulatorError(f"TQue used before TPipe.init_buffer (at {_core.call_site()})")
        return self._state

    def alloc_tensor(self, dtype: Any = None) -> LocalTensor:
        _not_in_place("alloc_tensor", dtype)
        state = self._ready()
        if not self._free:
            raise QueueError(f"TQue({self.position.name}).alloc_tensor with all {len(self.buffers)} "
                             f"buffers in use; free_tensor one first (at {_core.call_site()})")
        i = self._free.popleft()
        if self._used[i]:
            freed = self._free_flags.pop(i, None)
            if freed is not None:
                freed.realloc_index = state.emitted   # the WaitFlag's: the sanitizer's program order
            state.emit(WaitFlag(self.consumer, self.producer, self.event_ids[i]))
            self._pending_free[i] = False
        self._used[i] = True
        dt = sim_dtype(dtype if dtype is not None else "fp32")
        t = LocalTensor.wrap(SimLocal(state.core, self.region, self.buffers[i], dt,
                                      self.nbytes // dt.itemsize), self.position)
        self._out[t.sim.addr] = i
        self._alloc_site[t.sim.addr] = _core.call_site()
        self._freed_site.pop(t.sim.addr, None)
        return t

    def unfreed(self) -> list[tuple[str, int, int, str | None, str]]:
        """(what, address, bytes, alloc_tensor line, the call) of each buffer allocated and not freed."""
        return [(f"TQue({self.position.name}) buffer {i}", addr, self.nbytes, self._alloc_site.get(addr),
                 "TQue.alloc_tensor") for addr, i in self._out.items()]

    def _index(self, t: LocalTensor) -> int:
        i = self._out.get(t.sim.addr)
        if i is None:
            raise QueueError(f"TQue({self.position.name}): {t!r} is not a buffer of this queue "
                             f"(at {_core.call_site()})")
        return i

    def enque(self, tensor: LocalTensor) -> bool:
        state = self._ready()
        i = self._index(tensor)
        state.emit(SetFlag(self.producer, self.consumer, self.event_ids[i]))
        self._fifo.append((i, tensor))
        return True

    def deque(self, dtype: Any = None) -> LocalTensor:
        _not_in_place("deque", dtype)
        state = self._ready()
        if not self._fifo:
            raise QueueError(f"TQue({self.position.name}).deque on an empty queue: enque a tensor "
                             f"before each deque (at {_core.call_site()})")
        i, t = self._fifo.popleft()
        state.emit(WaitFlag(self.producer, self.consumer, self.event_ids[i]))
        if dtype is not None and sim_dtype(dtype) != t.sim.dtype:
            t = t.reinterpret_cast(dtype)
        return t

    def free_tensor(self, tensor: LocalTensor) -> None:
        state = self._ready()
        i = self._out.pop(tensor.sim.addr, None)
        if i is None:
            freed = self._freed_site.get(tensor.sim.addr)
            if freed is not None:
                raise QueueError(f"TQue({self.position.name}).free_tensor of a buffer freed already at {freed} "
                                 f"and not allocated since: a double free (at {_core.call_site()})")
            raise QueueError(f"TQue({self.position.name}).free_tensor of a tensor not allocated from "
                             f"this queue (at {_core.call_site()})")
        self._freed_site[tensor.sim.addr] = _core.call_site()
        # a QueueFreeFlag names the bytes it releases: the sanitizer reports a use after free
        released = (self.region.name, self.buffers[i], self.nbytes, f"TQue({self.position.name}) buffer {i}")
        flag = QueueFreeFlag(self.consumer, self.producer, self.event_ids[i], released)
        self._free_flags[i] = flag
        state.emit(flag)
        self._pending_free[i] = True
        self._free.append(i)

    def _drain(self) -> None:
        # TPipe teardown: the producer takes back the free flags no alloc has consumed, so no
        # flag is left set when the block ends
        for i, pending in enumerate(self._pending_free):
            if pending:
                assert self._state is not None   # a queue that took allocations was initialised
                self._state.emit(WaitFlag(self.consumer, self.producer, self.event_ids[i]), origin=self._site)
                self._pending_free[i] = False

    def vacant_in_que(self) -> bool:
        return bool(self._free)

    def has_tensor_in_que(self) -> bool:
        return bool(self._fifo)

    def has_idle_buffer(self) -> bool:
        """Whether ``alloc_tensor`` has a buffer to give (as ``vacant_in_que``)."""
        return bool(self._free)

    def get_tensor_count_in_que(self) -> int:
        """How many tensors are enqueued and not yet dequeued."""
        return len(self._fifo)

    def __getattr__(self, name: str) -> Any:
        raise _refuse_method(self, name)


class TQueBind(TQue):
    def __init__(self, src: TPosition, dst: TPosition, depth: int = 1, *args: Any) -> None:
        raise _core.unsupported("TQueBind", "use two TQues")


class TBuf:
    """``asc.TBuf(position)``: a calculation buffer without queue semantics."""

    def __init__(self, pos: TPosition = TPosition.VECCALC, *args: Any) -> None:
        self.position = TPosition(pos)
        self._state: _core.BlockState | None = None

    def _init(self, state: _core.BlockState, nbytes: int) -> None:
        core = state.core
        if _absent(state, self.position):
            return
        self._state = state
        self.region = core.memory(memory_of(self.position, core))
        self.nbytes = align_up(nbytes, self.region.alignment)
        self.addr = state.ctx.allocate(self.region, self.nbytes, f"TBuf({self.position.name})")

    def get(self, dtype: Any = None, len: int | None = None, shape: Any = None) -> LocalTensor:  # noqa: A002
        """``get(dtype, len=None, shape=None)``, pyasc's signature: ``len`` elements (the whole
        buffer by default); ``shape`` is pyasc's metadata and changes nothing here."""
        if self._state is None:
            raise SimulatorError(f"TBuf.get before TPipe.init_buffer (at {_core.call_site()})")
        dt = sim_dtype(dtype if dtype is not None else "fp32")
        n = self.nbytes // dt.itemsize if not len else int(len)
        self._check_span("get", 0, n, dt)
        return LocalTensor.wrap(SimLocal(self._state.core, self.region, self.addr, dt, n), self.position)

    def _check_span(self, call: str, offset: int, n: int, dt: Any) -> None:
        """A tensor of ``n`` x ``dt`` at byte ``offset`` of the buffer must lie inside it: past its
        end it would overlap whatever the pipe allocated next, which no later access check can
        tell from the kernel's own data."""
        if offset < 0 or n < 0 or offset + n * dt.itemsize > self.nbytes:
            raise MemoryFault(f"TBuf.{call} of {n} x {dt} at byte offset {offset}: the buffer holds "
                              f"{self.nbytes} B (at {_core.call_site()})", address=self.addr + max(offset, 0))

    def alloc_tensor(self, dtype: Any = None) -> LocalTensor:
        """pyasc's TBuf is a TQueBind: ``alloc_tensor`` gives the whole buffer, as ``get`` does
        (a calculation buffer has no producer and consumer pipes, so no flags)."""
        _not_in_place("alloc_tensor", dtype)
        return self.get(dtype)

    def free_tensor(self, tensor: LocalTensor) -> None:
        """Nothing to hand back: the buffer stays the TBuf's."""

    def __getattr__(self, name: str) -> Any:
        raise _refuse_method(self, name)

    def get_with_offset(self, size: int, buf_offset: int, dtype: Any = None) -> LocalTensor:
        if int(buf_offset) % 32:
            # pyasc refuses it here; the tensor would fault only at its first use
            raise ValueError(f"TBuf.get_with_offset: buf_offset must be a multiple of 32 B, got {buf_offset} "
                             f"(at {_core.call_site()})")
        dt = sim_dtype(dtype if dtype is not None else "fp32")
        t = self.get(dt)
        self._check_span("get_with_offset", int(buf_offset), int(size), dt)
        return LocalTensor.wrap(SimLocal(t.sim.core, t.sim.region, t.sim.addr + int(buf_offset), dt, int(size)),
                                self.position)
