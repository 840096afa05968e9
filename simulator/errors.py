"""Faults raised by the simulated machine.

Every simulator fault names *where* it happened -- the core, the pipe, the instruction and the
address -- because a fault without that context is useless when a kernel runs on dozens of
simulated cores at once (docs/sources.md#design-errors-s10).

The code that detects a fault is usually the code that knows the least about where it is: the
memory model sees an address and a length, not the core or the instruction that issued the
access.  So faults are raised with whatever context is at hand and the callers up the stack
fill in the rest with :meth:`SimulatorError.at` (or :func:`with_context` /
:class:`error_context`).  Context that is already set is never overwritten: the innermost
raiser knows best (e.g. the exact faulting address).

Example message::

    MemoryFault on core0.veccore1 pipe MTE2 in DataCopyPad at 0x12c000001000: GM: read of 64 B
    runs 64 B beyond allocation 'x' 0x12c000000000+4096
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType
from typing import Any, ClassVar, Literal, Self, TypeVar

__all__ = [
    "SimulatorError",
    "MemoryFault",
    "QueueError",
    "CapacityError",
    "UnsupportedInstruction",
    "DeadlockError",
    "with_context",
    "error_context",
]

_E = TypeVar("_E", bound=BaseException)


class SimulatorError(Exception):
    """Base of every fault raised by the simulated machine.

    Attributes:
        reason: what went wrong, without the location (kept verbatim so callers can match on it).
        core: simulated core, e.g. ``"core0.veccore1"`` or ``"dsp3"``.
        pipe: pipe or unit that executed the instruction, e.g. ``"MTE2"``.
        instruction: instruction or API call, e.g. ``"DataCopyPad"``.
        address: the faulting address, if the fault concerns one.

    ``str(exc)`` is always the message rebuilt from the current fields.
    """

    # Context fields that every fault carries and that `at()` may fill in.
    CONTEXT_FIELDS: ClassVar[tuple[str, ...]] = ("core", "pipe", "instruction", "address")
    # Extra keyword fields of a subclass (part of the message and of pickling).
    EXTRA_FIELDS: ClassVar[tuple[str, ...]] = ()
    # Extra fields that are optional and so may also be filled in later by `at()`.
    FILLABLE_EXTRA_FIELDS: ClassVar[tuple[str, ...]] = ()
    DEFAULT_REASON: ClassVar[str] = "simulator error"
    # The kernel source line of the faulting instruction, filled in by the pipe that ran it, and
    # the sanitizer's report of the run (opsim.api.attach_report); None until then.
    origin: str | None = None
    sanitizer: Any = None
    # the exception a kernel program's own code raised (a Python bug in it: a NameError, ...),
    # which the device wrapped as this fault ("internal error in a kernel"); None for a fault of
    # the machine. Kept as a field: opsim.run re-raises the fault without its cause chain
    kernel_exception: BaseException | None = None

    def __init__(
        self,
        reason: str = "",
        *,
        core: str | None = None,
        pipe: str | None = None,
        instruction: str | None = None,
        address: int | None = None,
    ) -> None:
        self.reason: str = reason or self.DEFAULT_REASON
        self.core = core
        self.pipe = pipe
        self.instruction = instruction
        self.address = address
        super().__init__(self._compose())

    # -- message -----------------------------------------------------------------------------

    @property
    def message(self) -> str:
        """The full message: location header, reason and subclass details."""
        return self._compose()

    def _details(self) -> str:
        """Subclass-specific text appended to the reason (e.g. buffer sizes)."""
        return ""

    def _compose(self) -> str:
        head = [type(self).__name__]
        if self.core is not None:
            head.append(f"on {self.core}")
        if self.pipe is not None:
            head.append(f"pipe {self.pipe}")
        if self.instruction is not None:
            head.append(f"in {self.instruction}")
        if self.address is not None:
            head.append(f"at {_hex(self.address)}")
        return f"{' '.join(head)}: {self.reason}{self._details()}"

    def __str__(self) -> str:
        # Rebuilt on every call so a field set directly (not via at()) still shows.
        return self._compose()

    # -- context filling ---------------------------------------------------------------------

    def at(self, **fields: Any) -> Self:
        """Fill context fields that are still unset and rebuild the message; returns ``self``.

        Fields already set are kept: the code closest to the fault knows them best.  Unknown
        field names raise ``TypeError`` so a typo does not silently drop context.  Typical use::

            try:
                ub.view(addr, nbytes, write=True)
            except SimulatorError as exc:
                raise exc.at(core=core.name, pipe="VECTOR", instruction="Sub")
        """
        allowed = self.CONTEXT_FIELDS + self.FILLABLE_EXTRA_FIELDS
        for key, value in fields.items():
            if key not in allowed:
                raise TypeError(
                    f"{type(self).__name__}.at() got an unknown field {key!r}; "
                    f"allowed: {', '.join(allowed)}"
                )
            if value is not None and getattr(self, key) is None:
                setattr(self, key, value)
        self.args = (self._compose(),)
        return self

    # -- pickling ----------------------------------------------------------------------------

    def _fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.CONTEXT_FIELDS + self.EXTRA_FIELDS}

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's default pickling replays only args (the message), which does not fit the
        # keyword-only constructors; faults must survive process pools (sweeps, dask).
        return (_rebuild, (type(self), self.reason, self._fields()))


def _rebuild(cls: type[SimulatorError], reason: str, fields: dict[str, Any]) -> SimulatorError:
    return cls(reason, **fields)


def _hex(value: int) -> str:
    return f"{value:#x}" if isinstance(value, int) else str(value)


class MemoryFault(SimulatorError):
    """An illegal memory access: out of bounds, misaligned, use after free, unallocated,
    unmapped, write to read-only memory, or an invalid/double free."""

    DEFAULT_REASON = "memory fault"


class QueueError(SimulatorError):
    """A misuse of a TQue: alloc with every buffer in use, deque of an empty queue, free of a
    tensor the queue did not hand out or of one freed already (a double free)."""

    DEFAULT_REASON = "queue misuse"


class CapacityError(SimulatorError):
    """A buffer or memory region cannot hold what was asked of it.

    Attributes (besides the context): ``buffer`` (name of the buffer or region), ``needed``
    and ``available`` (bytes).
    """

    EXTRA_FIELDS = ("buffer", "needed", "available")
    DEFAULT_REASON = "over capacity"

    def __init__(
        self,
        reason: str = "",
        *,
        # defaults so that SimPy, which re-raises a failed process's exception as
        # type(exc)(*exc.args), can rebuild it; Device.synchronize re-raises the original
        buffer: str | None = None,
        needed: int | None = None,
        available: int | None = None,
        core: str | None = None,
        pipe: str | None = None,
        instruction: str | None = None,
        address: int | None = None,
    ) -> None:
        self.buffer = buffer
        self.needed = needed
        self.available = available
        super().__init__(reason, core=core, pipe=pipe, instruction=instruction, address=address)

    def _details(self) -> str:
        return f" (buffer {self.buffer}: needed {self.needed} B, available {self.available} B)"


class UnsupportedInstruction(SimulatorError):
    """An instruction (or an instruction for a data type) the simulated core does not have."""

    EXTRA_FIELDS = ("dtype",)
    FILLABLE_EXTRA_FIELDS = ("dtype",)
    DEFAULT_REASON = "unsupported instruction"

    def __init__(
        self,
        reason: str = "",
        *,
        dtype: str | None = None,
        core: str | None = None,
        pipe: str | None = None,
        instruction: str | None = None,
        address: int | None = None,
    ) -> None:
        self.dtype = dtype
        super().__init__(reason, core=core, pipe=pipe, instruction=instruction, address=address)

    def _details(self) -> str:
        return f" (dtype {self.dtype})" if self.dtype is not None else ""


class DeadlockError(SimulatorError):
    """No pending event can make progress; ``waiting`` lists who waits for what."""

    EXTRA_FIELDS = ("waiting",)
    DEFAULT_REASON = "deadlock: no event can make progress"
    SHOWN = 8           # blocked pipes named in the message (all of them stay in ``waiting``)

    def __init__(
        self,
        reason: str = "",
        *,
        waiting: Iterable[str] = (),
        core: str | None = None,
        pipe: str | None = None,
        instruction: str | None = None,
        address: int | None = None,
    ) -> None:
        self.waiting: list[str] = list(waiting)
        super().__init__(reason, core=core, pipe=pipe, instruction=instruction, address=address)

    def _details(self) -> str:
        if not self.waiting:
            return ""
        shown = self.waiting[:self.SHOWN]
        more = len(self.waiting) - len(shown)
        return f"; waiting: {', '.join(shown)}" + (f" and {more} more" if more else "")


KERNEL_LINE_NOTE = "at kernel line "


def name_kernel_line(exc: SimulatorError) -> SimulatorError:
    """``exc`` with the kernel source line of its faulting instruction (``exc.origin``) at the end
    of its reason, " (kernel line file.py:N)", unless the reason names it already; returns ``exc``.

    A fault's message names the core, pipe, instruction and address, which say *what* failed but
    not *where in the kernel*; the kernel author acts on the line. The sanitizer's finding keeps
    the line in its row and strips this suffix from its message (sanitizer ``_without_line``).
    """
    origin = exc.origin
    if origin and origin not in exc.reason:
        exc.reason = f"{exc.reason} (kernel line {origin})"
    return exc


def kernel_line_note(exc: BaseException) -> str | None:
    """The "at kernel line file.py:N" note a kernel's own exception carries, or None."""
    return next((n for n in getattr(exc, "__notes__", ()) if n.startswith(KERNEL_LINE_NOTE)), None)


def chain_kernel_line_note(exc: BaseException) -> str | None:
    """The kernel-line note on ``exc`` or on any of its causes (or contexts), or None.

    SimPy re-raises a copy of a process's exception at each level of process nesting: the note
    the kernel front-end added is on the first copy only.
    """
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        note = kernel_line_note(cur)
        if note is not None:
            return note
        cur = cur.__cause__ or cur.__context__
    return None


def with_context(exc: _E, **fields: Any) -> _E:
    """Fill missing context of ``exc`` if it is a :class:`SimulatorError`; return ``exc``.

    Other exceptions pass through untouched, so a caller may apply this to whatever it caught.
    """
    if isinstance(exc, SimulatorError):
        exc.at(**fields)
    return exc


class error_context:  # noqa: N801 - used like a function: ``with error_context(core=...):``
    """Context manager that fills missing context of any :class:`SimulatorError` leaving it.

    A plain class rather than ``contextlib.contextmanager`` because it may wrap every simulated
    instruction and a generator-based manager costs noticeably more per entry.
    """

    __slots__ = ("_fields",)

    def __init__(self, **fields: Any) -> None:
        self._fields = fields

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        if isinstance(exc, SimulatorError):
            exc.at(**self._fields)
        return False  # never swallow
