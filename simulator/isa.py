"""The instruction set of the kernel language, in Ascend C's vocabulary.

Every instruction knows its pipe, its cost on the current device (``cycles = k·N + b`` from the
spec's vector cost table, or a transfer through the memory links), the bytes it moves and its
numeric effect. ``issue`` runs when the pipe starts the instruction and returns the cycles to
spend (or an event to wait for); ``complete`` applies the numeric effect when it ends, so data
becomes visible at the simulated moment the instruction finishes. In timing mode (no data) the
numeric effect is skipped but every address is still checked.

Arithmetic follows docs/sources.md#design-numerics-s4: operands are widened to fp32, the operation is done once in fp32,
and the result is rounded once (RNE) to the destination dtype. An arithmetic instruction in a
dtype the product's vector unit does not compute in (bf16 on Atlas A2/A3) raises
:class:`UnsupportedInstruction` — kernels must cast first, as the real ones do.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, ClassVar, cast

import numpy as np
import simpy

from opsim.simulator import numerics as nx
from opsim.simulator.errors import MemoryFault, SimulatorError, UnsupportedInstruction
from opsim.simulator.tile import GlobalSlice, LocalTensor

if TYPE_CHECKING:  # pragma: no cover
    from opsim.devices.spec import DeviceSpec
    from opsim.simulator.core import Pipe


# the functions marked by _inline_sync, by identity (id -> (function, kind)): a wrapper
# (functools.wraps copies a function's attributes, so a mark on the function would pass to it)
# is never one of them, and any callable may be looked up (an unhashable one too)
_INLINE_SYNC: dict[int, tuple[Callable, int]] = {}


def _inline_kind(fn: object) -> int:
    entry = _INLINE_SYNC.get(id(fn))
    return entry[1] if entry is not None and entry[0] is fn else 0


# the ``complete`` methods marked by data_only (id -> function), by identity as above
_DATA_ONLY: dict[int, Callable] = {}


def data_only(fn: Callable) -> Callable:
    """Marks a ``complete`` that does nothing unless the device is functional (it returns at once
    when ``pipe.core.device.functional`` is false): Pipe._run does not call it in timing mode
    (``Instruction.steps``). A method assigned in its place carries no mark and is called."""
    _DATA_ONLY[id(fn)] = fn
    return fn


# bits of ``Instruction.steps``: what Pipe._run does for an instruction of the class, read in
# one class-attribute lookup per completion instead of four (inline_sync, issues, completes,
# busy: each a lookup through the instance, several times the cost of a slot)
STEP_SET_FLAG = 1      # inline_sync == 1
STEP_WAIT_FLAG = 2     # inline_sync == 2
STEP_ISSUES = 4        # issues
STEP_COMPLETES = 8     # completes
STEP_TIMING = 16       # completes, and its complete is not data_only (called in timing mode too)
STEP_BUSY = 32         # busy
STEP_OWN_BUSY = 64     # busy is read from the instruction: a property, or instances with a
                       # __dict__ (no __slots__) that may set their own


class _InstructionType(type):
    """Keeps ``issues`` / ``completes`` / ``inline_sync`` / ``steps`` true to the class when
    ``issue``, ``complete`` or ``busy`` is assigned after the class statement (a monkeypatch),
    for the class and its subclasses."""

    def __setattr__(cls, name: str, value: object) -> None:
        super().__setattr__(name, value)
        if name in ("issue", "complete", "busy"):
            cls._reflag()

    def __delattr__(cls, name: str) -> None:
        super().__delattr__(name)
        if name in ("issue", "complete", "busy"):
            cls._reflag()

    def _reflag(cls) -> None:
        # every class of this type is Instruction or a subclass of it
        todo: list[Any] = [cls]
        while todo:
            c = todo.pop()
            c._flags()
            todo.extend(c.__subclasses__())


class Instruction(metaclass=_InstructionType):
    """Base class. Subclasses set ``pipe`` and ``name`` and override issue/complete."""

    # ``origin``: "file.py:line" of the kernel source that issued it, stamped by the dispatcher
    # when the device records source lines (sanitizer, hot-spot tables) or set by a front-end
    # such as opsim.asc; read it with ``getattr(instr, "origin", None)``.
    # ``program_index``: the instruction's position in its block's program, stamped by a
    # front-end that knows it (opsim.asc); unset otherwise -- read it with getattr too.
    __slots__ = ("tile", "origin", "program_index")
    # the pipe that executes the instruction; classes whose pipe follows the operands override it
    # with a property (each with an ignore[override]: mypy rejects a property over a ClassVar)
    pipe: ClassVar[str] = "SCALAR"
    name: ClassVar[str] = "Nop"
    busy: ClassVar[bool] = True      # counts towards the pipe's busy cycles and is traced
    # whether the class overrides issue / complete (set for each class by __init_subclass__):
    # Pipe._run does not call the base class's no-ops -- most completions that would are flags
    issues: ClassVar[bool] = False
    completes: ClassVar[bool] = False
    # 1: the class's complete is SetFlag's and its issue the base no-op; 2: its issue is
    # WaitFlag's and its complete the base no-op; else 0 (set by _flags). Pipe._run does the
    # flag's effect inline for 1 and 2: flags are most completions of a cube schedule
    inline_sync: ClassVar[int] = 0
    # the STEP_* bits of the class (set by _flags; ``busy`` is watched too): Pipe._run's one read
    steps: ClassVar[int] = STEP_BUSY

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls._flags()

    @classmethod
    def _flags(cls) -> None:
        # type.__setattr__, not cls.x = ...: the metaclass watches assignments to issue/complete
        issues = cls.issue is not Instruction.issue
        completes = cls.complete is not Instruction.complete
        type.__setattr__(cls, "issues", issues)
        type.__setattr__(cls, "completes", completes)
        # a method assigned later (a monkeypatch) or overridden carries no mark: back to 0
        sync = 0
        if completes and not issues and _inline_kind(cls.complete) == 1:
            sync = 1
        elif issues and not completes and _inline_kind(cls.issue) == 2:
            sync = 2
        type.__setattr__(cls, "inline_sync", sync)
        complete = cls.complete
        busy = cls.busy
        steps = (sync | (STEP_ISSUES if issues else 0) | (STEP_COMPLETES if completes else 0)
                 | (STEP_BUSY if busy else 0))
        if type(busy) is not bool or cls.__dictoffset__:
            steps |= STEP_OWN_BUSY
        if completes and not (id(complete) in _DATA_ONLY and _DATA_ONLY[id(complete)] is complete):
            steps |= STEP_TIMING
        type.__setattr__(cls, "steps", steps)

    def __init__(self) -> None:
        self.tile = -1
        # set, not left unset: getattr(instr, "origin", None) on an empty slot raises and
        # catches an AttributeError, and the profiler asks it of every busy instruction
        self.origin: str | None = None

    def issue(self, pipe: "Pipe") -> int | simpy.Event | None:
        return 0

    def complete(self, pipe: "Pipe") -> None:
        pass

    def describe(self) -> str:
        return self.name

    def trace_args(self) -> tuple[int, int, int, str]:
        """(elements, bytes, address, detail) for the trace."""
        return 0, 0, -1, ""

    def trace_sync(self, pipe: "Pipe") -> None:
        pass

    def accesses(self, pipe: "Pipe") -> tuple[tuple[str, int, int, bool], ...]:
        """Memory this instruction touches, for observers such as the sanitizer.

        Each entry is ``(memory, address, nbytes, write)``; ``memory`` is ``"GM"`` (or the DSP's
        global region name) for device memory and ``"<core>/<region>"`` (e.g.
        ``"core0.veccore0/UB"``) for a core's local memory. Instructions that touch no memory
        return ``()``.
        """
        return ()


class BlockEnd(Instruction):
    """Internal fence: succeeds its event when every earlier instruction of the pipe is done."""

    __slots__ = ("event",)
    busy = False
    name = "BlockEnd"

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__()
        self.event = env.event()

    def complete(self, pipe: "Pipe") -> None:
        self.event.succeed()


# ---------------------------------------------------------------------------------------------
# Synchronisation
# ---------------------------------------------------------------------------------------------

def _inline_sync(kind: int) -> Callable[[Callable], Callable]:
    """Marks SetFlag.complete (1) and WaitFlag.issue (2): Pipe._run does what they do inline
    (``Instruction.inline_sync``); keep the two in step."""
    def mark(fn: Callable) -> Callable:
        _INLINE_SYNC[id(fn)] = (fn, kind)
        return fn
    return mark


class SetFlag(Instruction):
    """``SetFlag<src_dst>(event_id)``: runs on the source pipe once its earlier work is done."""

    # ``pipe`` is a slot (the source pipe), not a property: the dispatcher reads it for every flag
    __slots__ = ("src", "dst", "event_id", "pipe")
    busy = False
    name = "SET_FLAG"

    def __init__(self, src: str, dst: str, event_id: int) -> None:
        # Instruction.__init__'s two fields, set here: one call less per flag
        self.tile = -1
        self.origin = None
        self.src, self.dst, self.event_id = src, dst, event_id
        self.pipe = src     # type: ignore[misc]

    @_inline_sync(1)
    def complete(self, pipe: "Pipe") -> None:
        core = pipe.core
        core.set_flag((self.src, self.dst, self.event_id))
        # the producer of this hand-off is the last slice recorded on the source pipe (traced
        # runs only: last_slice stays -1 without a trace)
        if pipe.last_slice >= 0 and self.dst in core.pipes:
            core._flag_slices[(self.src, self.dst, self.event_id)] = pipe.last_slice
            pipe._tile_slice = -1   # tile level: later work starts a new slice (Core.record)

    def describe(self) -> str:
        return f"SetFlag<{self.src}_{self.dst}>({self.event_id})"


class QueueFreeFlag(SetFlag):
    """The SetFlag of ``TQue.free`` (FreeTensor), the consumer telling the producer a buffer is
    free again. The last ones of a kernel are never waited for; the model assumes the queue
    framework takes them back when its queues are torn down, so one still set at the end of a
    block is no bug (the sanitizer reports any other flag left set).

    ``buffer`` is the buffer it releases, (memory, address, bytes, name) with memory the core's
    region name ("UB"), set by the queue that emits it: the sanitizer reports any access of
    those bytes ordered after the release and not after the buffer's next allocation.
    ``realloc_index`` is the program index of that next allocation, set by a queue that knows
    it (opsim.asc): an access issued after it in the program uses the new allocation, whatever
    the flags order."""

    __slots__ = ("buffer", "realloc_index")

    def __init__(self, src: str, dst: str, event_id: int,
                 buffer: tuple[str, int, int, str] | None = None) -> None:
        super().__init__(src, dst, event_id)
        self.buffer = buffer
        self.realloc_index: int | None = None


class WaitFlag(Instruction):
    """``WaitFlag<src_dst>(event_id)``: runs on the destination pipe and blocks it until set."""

    # ``pipe`` is a slot (the destination pipe), not a property, as in SetFlag
    __slots__ = ("src", "dst", "event_id", "pipe")
    busy = False
    name = "WAIT_FLAG"

    def __init__(self, src: str, dst: str, event_id: int) -> None:
        self.tile = -1
        self.origin = None
        self.src, self.dst, self.event_id = src, dst, event_id
        self.pipe = dst     # type: ignore[misc]

    @_inline_sync(2)
    def issue(self, pipe: "Pipe") -> simpy.Event | None:
        return pipe.core.wait_flag((self.src, self.dst, self.event_id))

    def trace_sync(self, pipe: "Pipe") -> None:
        src_slice = pipe.core._flag_slices.pop((self.src, self.dst, self.event_id), -1)
        if src_slice >= 0:
            pipe.flow_from = src_slice

    def describe(self) -> str:
        return f"WaitFlag<{self.src}_{self.dst}>({self.event_id})"


class SetAtomicAdd(Instruction):
    """Subsequent GM writes of this core's store pipe add into GM (as ``dtype``, which must be
    the stored tensor's dtype) instead of overwriting."""

    __slots__ = ("dtype", "_pipe")
    busy = False
    name = "SetAtomicAdd"

    def __init__(self, dtype: nx.DType, pipe: str = "MTE3") -> None:
        super().__init__()
        self.dtype = dtype
        self._pipe = pipe

    @property
    def pipe(self) -> str:  # type: ignore[override]
        return self._pipe

    def complete(self, pipe: "Pipe") -> None:
        pipe.core.atomic = self.dtype


class SetAtomicNone(SetAtomicAdd):
    name = "SetAtomicNone"

    def __init__(self, pipe: str = "MTE3") -> None:
        super().__init__(nx.FP32, pipe)

    def complete(self, pipe: "Pipe") -> None:
        pipe.core.atomic = None


class ScalarOp(Instruction):
    """Scalar-unit work (address arithmetic, loop control) costed in SCALAR cycles."""

    __slots__ = ("ops", "label")
    pipe = "SCALAR"
    name = "SCALAR"

    def __init__(self, ops: int = 1, label: str = "") -> None:
        super().__init__()
        self.ops, self.label = ops, label

    def issue(self, pipe: "Pipe") -> int:
        return max(1, math.ceil(self.ops * pipe.core.device.spec.scalar.cycles_per_op))

    def describe(self) -> str:
        return f"SCALAR({self.label or self.ops})"


class ScalarCompute(Instruction):
    """Scalar-unit arithmetic on one value in local memory: load ``src[0]``, widen it to fp32,
    apply ``op`` (``"div"``, ``"mul"``, ``"add"``, or None for a plain conversion) with the
    constant ``operand`` (rounded to fp32, as C converts an int to float), round once to
    ``dst``'s dtype and store it in ``dst[0]``. Costs the load, the operation and the store in
    SCALAR cycles. A DSP computes a kernel's scalars (e.g. ``dloss[0] / N``) this way before the
    vector unit uses them."""

    __slots__ = ("dst", "src", "op", "operand")
    pipe = "SCALAR"
    name = "ScalarCompute"
    _FNS: ClassVar[dict[str, Callable[..., np.ndarray]]] = {"div": np.divide, "mul": np.multiply, "add": np.add}

    def __init__(self, dst: LocalTensor, src: LocalTensor, op: str | None = None, operand: float = 0.0) -> None:
        super().__init__()
        if op is not None and op not in self._FNS:
            raise SimulatorError(f"ScalarCompute op {op!r} is not one of {', '.join(self._FNS)} or None")
        self.dst, self.src, self.op, self.operand = dst, src, op, operand

    def issue(self, pipe: "Pipe") -> int:
        self.dst.check(1, write=True)
        self.src.check(1, write=False)
        ops = 2 + (self.op is not None)
        return max(1, math.ceil(ops * pipe.core.device.spec.scalar.cycles_per_op))

    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        v = nx.to_f32(self.src.array(1)).astype(np.float32, copy=True)
        if self.op is not None:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                v = self._FNS[self.op](v, np.float32(nx.const(self.operand, nx.FP32))).astype(np.float32)
        self.dst.array(1)[...] = v if self.dst.dtype == nx.FP32 else nx.round_to(v, self.dst.dtype)

    def accesses(self, pipe: "Pipe") -> tuple[tuple[str, int, int, bool], ...]:
        return self.src.access(1, False), self.dst.access(1, True)

    def describe(self) -> str:
        return f"ScalarCompute({self.src.dtype}->{self.dst.dtype}{f' {self.op} {self.operand:g}' if self.op else ''})"

    def trace_args(self) -> tuple[int, int, int, str]:
        return 1, 0, self.dst.addr, f"{self.op or 'convert'} {self.operand:g}" if self.op else "convert"


# ---------------------------------------------------------------------------------------------
# Data movement
# ---------------------------------------------------------------------------------------------

class DataCopy(Instruction):
    """GM↔local copy. Direction and pipe follow the operands: GM→UB on MTE2, UB→GM on MTE3
    (DMA on a DSP). ``DataCopy`` requires lengths in whole 32-byte blocks; ``DataCopyPad`` takes
    any length. With atomic add set, a GM write adds (fp32 compute, one rounding) at completion.
    """

    # ``pipe`` is a slot (set with ``_pipe``, which the fast-forward reads), not a property:
    # the dispatcher reads it for every copy, as for the flags
    __slots__ = ("dst", "src", "count", "_to_gm", "_pipe", "pipe", "_nbytes", "_atomic")
    name: ClassVar[str] = "DataCopy"
    pad: ClassVar[bool] = False

    def __init__(self, dst: LocalTensor | GlobalSlice, src: LocalTensor | GlobalSlice,
                 count: int | None = None) -> None:
        # Instruction.__init__ and the ``local`` property inline: one DataCopy per tile and operand
        self.tile, self.origin = -1, None
        # the exact types first (what kernels pass), isinstance only for anything else
        tdst, tsrc = type(dst), type(src)
        to_gm = self._to_gm = tdst is GlobalSlice or (tdst is not LocalTensor and isinstance(dst, GlobalSlice))
        from_gm = tsrc is GlobalSlice or (tsrc is not LocalTensor and isinstance(src, GlobalSlice))
        if to_gm == from_gm:
            raise SimulatorError(f"{self.name} needs one global and one local operand, got "
                                 f"{type(dst).__name__} <- {type(src).__name__}")
        if count is None:
            count = src.count if from_gm else dst.count
        self.dst, self.src, self.count = dst, src, int(count)
        # the local operand (typing.cast would be a call per copy; checked just above)
        local: LocalTensor = src if to_gm else dst   # type: ignore[assignment]
        self._pipe = self.pipe = local.core.store_pipe if to_gm else local.core.load_pipe  # type: ignore[misc]
        self._nbytes = self.count * local.dtype.itemsize
        self._atomic = False   # set at issue: a GM write while SetAtomicAdd is in effect

    def describe(self) -> str:
        d = "GM->local" if not self._to_gm else "local->GM"
        return f"{self.name}({d}, {self.count} x {self.local.dtype})"

    @property
    def local(self) -> LocalTensor:
        return cast(LocalTensor, self.src if self._to_gm else self.dst)   # one of each (__init__)

    @property
    def atomic(self) -> bool:
        """Whether this GM write adds atomically (SetAtomicAdd was in effect at issue)."""
        return self._atomic

    def accesses(self, pipe: "Pipe") -> tuple[tuple[str, int, int, bool], ...]:
        glob = self.glob
        name = glob.memory_name()
        out = [self.local.access(self.count, not self._to_gm)]
        out.extend((name, a, n, self._to_gm) for a, n in glob.byte_runs(self.count))
        return tuple(out)

    @property
    def glob(self) -> GlobalSlice:
        return cast(GlobalSlice, self.dst if self._to_gm else self.src)

    def issue(self, pipe: "Pipe") -> simpy.Event | int:
        if not self.pad and self._nbytes % 32:
            raise MemoryFault(f"{self.name} of {self._nbytes} B is not a whole number of 32 B blocks; "
                              f"use DataCopyPad", address=self.glob.byte_range()[0])
        # the operands directly, not through the local/glob properties (a call each per copy);
        # one is local and one global (__init__ checked which)
        local: LocalTensor
        glob: GlobalSlice
        to_gm = self._to_gm
        if to_gm:
            local, glob = self.src, self.dst  # type: ignore[assignment]
        else:
            glob, local = self.src, self.dst  # type: ignore[assignment]
        if local.dtype.itemsize != glob.tensor.dtype.itemsize:    # (GlobalSlice.dtype, without the call)
            raise SimulatorError(f"{self.name} between {glob.dtype} and {local.dtype}: DMA does not "
                                 f"convert; Cast in the vector unit")
        n = self.count
        if n > local.count:
            raise MemoryFault(f"{self.name} of {n} elements overruns the local buffer of "
                              f"{local.count}", address=local.addr)
        # LocalTensor.check, inline where it would pass (as the cube instructions do): whatever
        # it would refuse -- and every allocation-backed region -- takes the call, which raises
        reg, addr, nb = local.region, local.addr, self._nbytes
        if (reg.backing == "allocation" or addr % reg.alignment or nb < 0 or addr < reg.base
                or addr + nb > reg.end or (not to_gm and reg.read_only)):
            local.check(n, write=not to_gm)
        core = pipe.core
        lo, hi = glob.check(self.count, write=to_gm)
        nbytes = self._nbytes
        if hi - lo < nbytes:    # min(), without the call: GlobalSlice.span_bytes, from the range just checked
            nbytes = hi - lo
        atomic = core.atomic if to_gm else None
        if atomic is not None and atomic != glob.dtype:
            # SetAtomicAdd<T> makes the store pipe add as T; a store of another dtype is a bug
            raise SimulatorError(f"{self.name} stores {glob.dtype} while SetAtomicAdd<{atomic}> is in effect; "
                                 f"the atomic dtype must match the GM tensor (or SetAtomicNone first)")
        self._atomic = atomic is not None
        # Pipe.head_cycles only while the head is pending (it returns 0 after): a call fewer;
        # the bytes of a load may raise MTE2's head to its large-load form (A-10)
        return core.device.gm_transfer(pipe, lo, nbytes, write=to_gm,
                                       startup_extra=pipe.head_cycles(nbytes) if pipe.head_pending else 0)

    @data_only
    def complete(self, pipe: "Pipe") -> None:
        core = pipe.core
        if not core.device.functional:
            return
        n = self.count
        # the operands directly, not through the local/glob properties nor typing.cast (a call
        # each per copy); one is local and one global (__init__ checked which), so the narrowing
        # below is known to hold though mypy cannot see it
        local: LocalTensor
        glob: GlobalSlice
        if self._to_gm:
            local, glob = self.src, self.dst  # type: ignore[assignment]
            values = local.array(n)
            if self._atomic:
                # applied at this cycle; simultaneous commits in a seeded order (simulator/atomics.py)
                core.device.atomics.commit(glob, values)
            else:
                glob.write(values)
        else:
            glob, local = self.src, self.dst  # type: ignore[assignment]
            local.array(n)[...] = glob.read(n)

    def trace_args(self) -> tuple[int, int, int, str]:
        # the detail is the dtype, as for vector instructions (an atomic store says so instead);
        # the operands directly, not through the glob/local properties (as in issue), and a
        # contiguous slice's start inline, as GlobalSlice.byte_range computes it
        local: LocalTensor
        glob: GlobalSlice
        if self._to_gm:
            local, glob = self.src, self.dst  # type: ignore[assignment]
        else:
            glob, local = self.src, self.dst  # type: ignore[assignment]
        t = glob.tensor
        lo = t.addr + (t.offset + glob.start) * t.dtype.itemsize if t.is_contiguous else glob.byte_range()[0]
        return self.count, self._nbytes, lo, "atomic add" if self._atomic else str(local.dtype)


class DataCopyPad(DataCopy):
    __slots__ = ()
    name = "DataCopyPad"
    pad = True


# ---------------------------------------------------------------------------------------------
# Vector arithmetic
# ---------------------------------------------------------------------------------------------

def vector_cost(spec: "DeviceSpec", op: str, dtype: str, n: int) -> int:
    """``ceil(k·n + b)`` cycles of one vector instruction from the spec's calibrated cost table."""
    cost = spec.vector.cost.get(op)
    if cost is None or dtype not in cost:
        raise UnsupportedInstruction(f"no vector cost entry for {op} in {dtype} on {spec.name}", dtype=dtype)
    k, b = cost[dtype]
    return math.ceil(k * n + b)


def _vector_cycles(pipe: "Pipe", op: str, dtype: str, n: int) -> int:
    return vector_cost(pipe.core.device.spec, op, dtype, n) + (pipe.head_cycles() if pipe.head_pending else 0)


def compute_refusal(spec: "DeviceSpec", op: str, dt: nx.DType) -> str | None:
    """Why ``op`` in ``dt`` cannot run on ``spec``'s vector unit, or None if it can.

    A float dtype outside ``vector.compute_dtypes`` is one the unit has no arithmetic for
    (bf16 on 910B/910_93: docs/sources.md#peak-compute). Integer arithmetic the real
    unit has, but opsim does not model it (no integer numerics or cost entries beyond a few
    casts), so the message says which of the two it is instead of blaming the hardware."""
    allowed = spec.vector.compute_dtypes
    if dt.name in allowed:
        return None
    if not dt.is_float:
        return (f"{op} in {dt.name}: integer vector arithmetic is not modelled by opsim (the "
                f"{spec.name} vector unit has it); opsim computes in {', '.join(allowed)}: Cast first")
    return (f"{op} in {dt.name} is not an instruction of the {spec.name} vector unit "
            f"(it computes in {', '.join(allowed)}); Cast to fp32 first")


def _require_compute(pipe: "Pipe", op: str, dt: nx.DType) -> None:
    why = compute_refusal(pipe.core.device.spec, op, dt)
    if why is not None:
        raise UnsupportedInstruction(why, dtype=dt.name)


class VectorOp(Instruction):
    """Base of element-wise vector instructions on local tensors of one dtype.

    ``scalar`` is a constant, or a LocalTensor whose element 0 is read when the instruction
    executes (a scalar register loaded from local memory: a DSP scalar load, ``GetValue`` in
    Ascend C), for a scalar that only exists on the device, such as ``dloss[0] / N``.
    """

    __slots__ = ("dst", "srcs", "scalar", "count")
    pipe = "VECTOR"
    fn: ClassVar[Callable[..., np.ndarray]]

    def __init__(self, dst: LocalTensor, *srcs: LocalTensor, scalar: float | LocalTensor | None = None,
                 count: int | None = None) -> None:
        self.tile, self.origin = -1, None          # Instruction.__init__ inline
        self.dst, self.srcs, self.scalar = dst, srcs, scalar
        self.count = int(dst.count if count is None else count)

    def issue(self, pipe: "Pipe") -> int:
        # the checks in the order they always ran; _require_compute and vector_cost are called
        # only where they raise (their verdicts inline: a vector instruction per tile), dtypes
        # compared by identity first (DType.__eq__ is a Python call)
        dst = self.dst
        dt = dst.dtype
        srcs = self.srcs
        for s in srcs:
            if s.dtype is not dt and s.dtype != dt:
                raise SimulatorError(f"{self.name} mixes {s.dtype} and {dt}; Cast first")
        vector = pipe.core.device.spec.vector
        dtn = dt.name
        if dtn not in vector.compute_dtypes:
            _require_compute(pipe, self.name, dt)    # raises
        n = self.count
        # LocalTensor.check of each operand, inline where it would pass (as the cube
        # instructions do): whatever it would refuse -- and every allocation-backed region --
        # takes the call, which raises (or checks the allocation) as before, in the same order
        nb = n * dt.itemsize
        reg, addr = dst.region, dst.addr
        if (n > dst.count or reg.backing == "allocation" or addr % reg.alignment or nb < 0 or addr < reg.base
                or addr + nb > reg.end or reg.read_only):
            dst.check(n, write=True)
        for s in srcs:
            reg, addr = s.region, s.addr
            if (n > s.count or reg.backing == "allocation" or addr % reg.alignment or nb < 0 or addr < reg.base
                    or addr + nb > reg.end):
                s.check(n, write=False)
        scalar = self.scalar
        if scalar is not None and type(scalar) is not float and isinstance(scalar, LocalTensor):
            if scalar.dtype != dt:
                raise SimulatorError(f"{self.name} scalar operand is {scalar.dtype}, the tensors "
                                     f"are {dt}; Cast first")
            scalar.check_scalar()
        costs = vector.cost
        name = self.name
        if name in costs and dtn in costs[name]:
            k, b = costs[name][dtn]
            cycles = math.ceil(k * n + b)     # vector_cost
        else:
            cycles = vector_cost(pipe.core.device.spec, name, dtn, n)    # raises
        return cycles + (pipe.head_cycles() if pipe.head_pending else 0)

    @data_only
    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        n = self.count
        dt = self.dst.dtype
        fp32 = dt is nx.FP32 or dt == nx.FP32
        scalar = self.scalar
        if fp32 and not isinstance(scalar, LocalTensor):
            # the common cases, one call each with the operands spelled out (a call with *args
            # costs numpy twice as much): two tensors (Sub, Mul), a tensor and a constant
            # (Muls, Adds), one tensor (Exp, Abs); the same ufunc on the same views as below
            srcs = self.srcs
            fn = type(self).fn
            if len(srcs) == 2 and scalar is None:
                s0, s1 = srcs
                fn(s0.array(n), s1.array(n), out=self.dst.array(n))
                return
            if len(srcs) == 1:
                a = srcs[0].array(n)
                if scalar is None:
                    fn(a, out=self.dst.array(n))
                else:
                    fn(a, _scalar_f32(scalar, dt), out=self.dst.array(n))
                return
        # fp32 operands need no widening: the views themselves go into the one ufunc call
        args: list[np.ndarray | np.float32] = ([s.array(n) for s in self.srcs] if fp32 else
                                               [nx.to_f32(s.array(n)) for s in self.srcs])
        if isinstance(scalar, LocalTensor):
            args.append(np.float32(nx.to_f32(scalar.array(1))[0]))
        elif scalar is not None:
            # Ascend C scalar operands have the tensor's type: round the constant to it first.
            args.append(_scalar_f32(scalar, dt))
        out = self.dst.array(n)
        if fp32:
            type(self).fn(*args, out=out)
            return
        first = args[0] if args else None
        if type(first) is np.ndarray and first.base is None and first.dtype == np.float32:
            # the fp32 result into the widened copy of the first operand (fresh, owned here): an
            # element-wise fp32 ufunc gives the same bits in place, without another temporary
            type(self).fn(*args, out=first)
            result = first
        else:
            result = type(self).fn(*args).astype(np.float32, copy=False)
        # the one rounding to the destination dtype (round_to), converted straight into it
        nx.cast_into(out, result, dt, "rint")

    def accesses(self, pipe: "Pipe") -> tuple[tuple[str, int, int, bool], ...]:
        n = self.count
        out = [s.access(n, False) for s in self.srcs]
        if isinstance(self.scalar, LocalTensor):
            out.append(self.scalar.access(1, False))
        out.append(self.dst.access(n, True))
        return tuple(out)

    def describe(self) -> str:
        return f"{self.name}({self.count} x {self.dst.dtype})"

    def trace_args(self) -> tuple[int, int, int, str]:
        return self.count, 0, self.dst.addr, str(self.dst.dtype)


# (float value, dtype name) -> the scalar operand as the vector unit sees it, widened to fp32:
# a kernel passes the same few constants to thousands of instructions, and nx.const costs more
# than a tile's arithmetic. Equal keys have equal bits except for the zeros (-0.0 == 0.0), which
# are not cached; cleared when full, so NaN keys (never equal) cannot grow it.
_SCALARS: dict[tuple[float, str], np.float32] = {}


def _scalar_f32(value: float, dt: nx.DType) -> np.float32:
    if type(value) is not float or value == 0.0:     # ints, numpy scalars, 0-d arrays, signed zeros
        return np.float32(nx.const(value, dt))
    key = (value, dt.name)
    hit = _SCALARS.get(key)
    if hit is None:
        if len(_SCALARS) >= 1024:
            _SCALARS.clear()
        hit = _SCALARS[key] = np.float32(nx.const(value, dt))
    return hit


# (float value, its sign, dtype name) -> nx.const(value, dtype), for Duplicate: the same fill
# value for every tile (ones, a zeroed accumulator), and nx.const costs more than filling the
# tile. The sign tells 0.0 from -0.0 (equal keys otherwise); cleared when full (NaN keys).
_CONSTS: dict[tuple[float, float, str], np.generic] = {}


def _const(value: float, dt: nx.DType) -> np.generic:
    if type(value) is not float:     # ints, numpy scalars, 0-d arrays
        return nx.const(value, dt)
    key = (value, math.copysign(1.0, value), dt.name)
    hit = _CONSTS.get(key)
    if hit is None:
        if len(_CONSTS) >= 1024:
            _CONSTS.clear()
        hit = _CONSTS[key] = nx.const(value, dt)
    return hit


def _op(name: str, fn: Callable[..., np.ndarray], doc: str) -> type[VectorOp]:
    cls = type(name, (VectorOp,), {"__slots__": (), "name": name, "fn": staticmethod(fn), "__doc__": doc})
    return cls


def _maxs(a, s, out=None):
    return np.maximum(a, s, out=out)


def _mins(a, s, out=None):
    return np.minimum(a, s, out=out)


def _reciprocal(a, out=None):
    return np.divide(np.float32(1.0), a, out=out)


def _ln(a, out=None):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(a, out=out)


def _div(a, b, out=None):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(a, b, out=out)


Add = _op("Add", np.add, "dst = src0 + src1")
Sub = _op("Sub", np.subtract, "dst = src0 - src1")
Mul = _op("Mul", np.multiply, "dst = src0 * src1")
Div = _op("Div", _div, "dst = src0 / src1 (true divide)")
Max = _op("Max", np.maximum, "dst = max(src0, src1)")
Min = _op("Min", np.minimum, "dst = min(src0, src1)")
Adds = _op("Adds", np.add, "dst = src + scalar")
Muls = _op("Muls", np.multiply, "dst = src * scalar")
Maxs = _op("Maxs", _maxs, "dst = max(src, scalar)")
Mins = _op("Mins", _mins, "dst = min(src, scalar)")
Exp = _op("Exp", np.exp, "dst = exp(src)")
Ln = _op("Ln", _ln, "dst = ln(src)")
Abs = _op("Abs", np.abs, "dst = |src|")
Sqrt = _op("Sqrt", np.sqrt, "dst = sqrt(src)")
Reciprocal = _op("Reciprocal", _reciprocal, "dst = 1 / src")


class Duplicate(VectorOp):
    """dst[:n] = scalar (in dst's dtype). The scalar is a constant, or a LocalTensor of dst's
    dtype whose element 0 is read when the instruction executes (``Duplicate(dst,
    t.GetValue(0), n)`` in Ascend C: a value only the device has, broadcast)."""

    __slots__ = ()
    name = "Duplicate"

    def __init__(self, dst: LocalTensor, scalar: float | LocalTensor, count: int | None = None) -> None:
        super().__init__(dst, scalar=scalar, count=count)

    def issue(self, pipe: "Pipe") -> int:
        self.dst.check(self.count, write=True)
        scalar = self.scalar
        if isinstance(scalar, LocalTensor):
            if scalar.dtype != self.dst.dtype:
                raise SimulatorError(f"Duplicate scalar operand is {scalar.dtype}, the tensor is "
                                     f"{self.dst.dtype}; Cast first")
            scalar.check_scalar()
        return _vector_cycles(pipe, "Duplicate", _cost_dtype(self.dst.dtype), self.count)

    def complete(self, pipe: "Pipe") -> None:
        if pipe.core.device.functional:
            scalar = self.scalar
            if isinstance(scalar, LocalTensor):    # the element's bits, as the scalar register holds them
                self.dst.array(self.count)[...] = scalar.array(1)[0]
                return
            self.dst.array(self.count)[...] = _const(cast(float, scalar), self.dst.dtype)  # set in __init__

    def accesses(self, pipe: "Pipe") -> tuple[tuple[str, int, int, bool], ...]:
        if isinstance(self.scalar, LocalTensor):
            return self.scalar.access(1, False), self.dst.access(self.count, True)
        return (self.dst.access(self.count, True),)


def _cost_dtype(dt: nx.DType) -> str:
    # moves and fills cost the same per element for 16-bit types; price bf16 like fp16
    return "fp16" if dt.itemsize == 2 and dt.is_float else ("fp32" if dt.itemsize == 4 else dt.name)


class Copy(Duplicate):
    """UB→UB vector copy (no arithmetic, any dtype)."""

    __slots__ = ("src",)
    name = "Copy"

    def __init__(self, dst: LocalTensor, src: LocalTensor, count: int | None = None) -> None:
        super().__init__(dst, 0.0, count)
        self.src = src

    def issue(self, pipe: "Pipe") -> int:
        self.dst.check(self.count, write=True)
        self.src.check(self.count, write=False)
        return _vector_cycles(pipe, "Copy", _cost_dtype(self.dst.dtype), self.count)

    def complete(self, pipe: "Pipe") -> None:
        if pipe.core.device.functional:
            self.dst.array(self.count)[...] = self.src.array(self.count)

    def accesses(self, pipe: "Pipe") -> tuple[tuple[str, int, int, bool], ...]:
        return self.src.access(self.count, False), self.dst.access(self.count, True)


class Cast(Instruction):
    """``Cast(dst, src, round_mode, count)``: dtype conversion with an Ascend round mode."""

    __slots__ = ("dst", "src", "mode", "count")
    pipe = "VECTOR"
    name = "Cast"

    def __init__(self, dst: LocalTensor, src: LocalTensor, mode: str = "rint",
                 count: int | None = None) -> None:
        self.tile, self.origin = -1, None          # Instruction.__init__ inline
        if mode not in nx.ROUND_MODES:
            raise SimulatorError(f"Cast round mode {mode!r} is not one of {', '.join(nx.ROUND_MODES)}")
        self.dst, self.src, self.mode = dst, src, mode
        self.count = int(dst.count if count is None else count)

    def issue(self, pipe: "Pipe") -> int:
        n = self.count
        self.dst.check(n, write=True)
        self.src.check(n, write=False)
        if self.src.dtype == self.dst.dtype:
            return pipe.head_cycles() if pipe.head_pending else 0   # same-type cast costs nothing (GE-PERF table)
        key = f"Cast_{self.src.dtype.name}_{self.dst.dtype.name}"
        return _vector_cycles(pipe, key, self.src.dtype.name, n)

    def complete(self, pipe: "Pipe") -> None:
        if pipe.core.device.functional:
            n = self.count
            nx.cast_into(self.dst.array(n), self.src.array(n), self.dst.dtype, self.mode)

    def accesses(self, pipe: "Pipe") -> tuple[tuple[str, int, int, bool], ...]:
        return self.src.access(self.count, False), self.dst.access(self.count, True)

    def describe(self) -> str:
        return f"Cast({self.src.dtype}->{self.dst.dtype}, {self.mode}, {self.count})"

    def trace_args(self) -> tuple[int, int, int, str]:
        return self.count, 0, self.dst.addr, f"{self.src.dtype}->{self.dst.dtype} {self.mode}"


# ---------------------------------------------------------------------------------------------
# Sorting (the AI-Core Sort step of aclnnEmbeddingDenseBackward, docs/sources.md#embedding-paths)
# ---------------------------------------------------------------------------------------------

def sort_passes(n: int) -> int:
    """MrgSort passes (4 queues each) that turn ceil(n/32) Sort32 groups into one sorted list."""
    groups, passes = max(1, -(-n // 32)), 0
    while groups > 1:
        groups = -(-groups // 4)
        passes += 1
    return passes


def _check_sort_operands(name: str, keys: LocalTensor, pos: LocalTensor, n: int, *, write: bool) -> None:
    if keys.dtype != nx.FP32:
        raise SimulatorError(f"{name} keys are {keys.dtype}; sort keys are fp32 (reinterpret int32 "
                             f"keys as fp32 first)")
    if pos.dtype.itemsize != 4 or pos.dtype.is_float:
        raise SimulatorError(f"{name} positions are {pos.dtype}; they are 32-bit integers")
    keys.check(n, write=write)
    pos.check(n, write=write)


class Sort(Instruction):
    """Ascending, stable sort of ``count`` fp32 keys in local memory, with their positions.

    Models the AI-Core Sort of one UB tile: ``Sort32`` over 32-element groups, then ``MrgSort``
    passes of 4 queues inside UB, priced as ``Sort32(N) + ceil(log4(N/32)) x MrgSort(N)`` from the
    vector cost table. Positions are ``first_position, first_position + 1, ...`` (the index
    vector Ascend C builds with CreateVecIndex, fused in). Equal keys keep position order, so
    non-negative int32 keys below 0x7F800000 reinterpreted as fp32 sort like the integers
    (docs/sources.md#embedding-paths). ``tmp`` is the scratch of the 8 B (score, index) structures, double
    buffered: 16 B per element. Ascend C sorts descending; the ascending order here is the
    operator's (docs/sources.md#embedding-paths), the cost is the same.
    """

    __slots__ = ("dst_keys", "dst_pos", "src", "tmp", "count", "first")
    pipe = "VECTOR"
    name = "Sort"

    def __init__(self, dst_keys: LocalTensor, dst_pos: LocalTensor, src: LocalTensor, tmp: LocalTensor,
                 count: int, first_position: int = 0) -> None:
        super().__init__()
        self.dst_keys, self.dst_pos, self.src, self.tmp = dst_keys, dst_pos, src, tmp
        self.count, self.first = int(count), int(first_position)

    def issue(self, pipe: "Pipe") -> int:
        n = self.count
        _check_sort_operands(self.name, self.dst_keys, self.dst_pos, n, write=True)
        if self.src.dtype != nx.FP32:
            raise SimulatorError(f"Sort source is {self.src.dtype}; reinterpret int32 keys as fp32 first")
        self.src.check(n, write=False)
        need = 16 * n
        if self.tmp.count * self.tmp.dtype.itemsize < need:
            raise MemoryFault(f"Sort of {n} elements needs {need} B of scratch, tmp has "
                              f"{self.tmp.count * self.tmp.dtype.itemsize} B", address=self.tmp.addr)
        self.tmp.check(self.tmp.count, write=True)
        cycles = _vector_cycles(pipe, "Sort32", "fp32", n)   # pays the pipe head, if due
        passes = sort_passes(n)
        if passes:
            cycles += passes * _vector_cycles(pipe, "MrgSort", "fp32", n)
        return cycles

    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        n = self.count
        keys = self.src.array(n).copy()
        order = np.argsort(keys, kind="stable")
        self.dst_keys.array(n)[...] = keys[order]
        self.dst_pos.array(n)[...] = (order + self.first).astype(self.dst_pos.dtype.np_dtype)

    def accesses(self, pipe: "Pipe") -> tuple[tuple[str, int, int, bool], ...]:
        n = self.count
        # tmp is scratch the instruction writes before it reads it: a write
        return (self.src.access(n, False), self.tmp.access(None, True),
                self.dst_keys.access(n, True), self.dst_pos.access(n, True))

    def describe(self) -> str:
        return f"Sort({self.count} x fp32)"

    def trace_args(self) -> tuple[int, int, int, str]:
        return self.count, 0, self.dst_keys.addr, f"fp32 ascending, {sort_passes(self.count)} merge passes"


class MrgSort(Instruction):
    """Merge up to 4 sorted (key, position) queues in local memory into one, ascending by
    (key, position): ``MrgSort(dst_keys, dst_pos, [(keys, pos, count), ...])``. Costed by the
    ``MrgSort`` entry over the merged length."""

    __slots__ = ("dst_keys", "dst_pos", "srcs", "count")
    pipe = "VECTOR"
    name = "MrgSort"

    def __init__(self, dst_keys: LocalTensor, dst_pos: LocalTensor,
                 srcs: "list[tuple[LocalTensor, LocalTensor, int]]") -> None:
        super().__init__()
        if not 1 <= len(srcs) <= 4:
            raise SimulatorError(f"MrgSort merges 1 to 4 queues, got {len(srcs)}")
        self.dst_keys, self.dst_pos = dst_keys, dst_pos
        self.srcs = tuple((k, p, int(c)) for k, p, c in srcs)
        self.count = sum(c for _, _, c in self.srcs)

    def issue(self, pipe: "Pipe") -> int:
        _check_sort_operands(self.name, self.dst_keys, self.dst_pos, self.count, write=True)
        for k, p, c in self.srcs:
            _check_sort_operands(self.name, k, p, c, write=False)
        return _vector_cycles(pipe, "MrgSort", "fp32", self.count)

    def complete(self, pipe: "Pipe") -> None:
        if not pipe.core.device.functional:
            return
        keys = np.concatenate([k.array(c) for k, _, c in self.srcs if c])
        pos = np.concatenate([p.array(c) for _, p, c in self.srcs if c])
        order = np.lexsort((pos, keys))
        n = self.count
        self.dst_keys.array(n)[...] = keys[order]
        self.dst_pos.array(n)[...] = pos[order]

    def accesses(self, pipe: "Pipe") -> tuple[tuple[str, int, int, bool], ...]:
        out = []
        for k, p, c in self.srcs:
            out += [k.access(c, False), p.access(c, False)]
        out += [self.dst_keys.access(self.count, True), self.dst_pos.access(self.count, True)]
        return tuple(out)

    def describe(self) -> str:
        return f"MrgSort({len(self.srcs)} queues, {self.count} x fp32)"

    def trace_args(self) -> tuple[int, int, int, str]:
        return self.count, 0, self.dst_keys.addr, f"fp32 {len(self.srcs)} queues"
