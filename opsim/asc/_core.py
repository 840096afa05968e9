"""The bridge between an imperative pyasc kernel and the simulator's instruction stream.

A pyasc kernel is a plain function that calls API functions one after another; the simulator's
dispatcher (``Core.dispatch``) pulls instructions from a generator. Each block of a launch runs
the kernel function in its own greenlet: every API call appends the instruction(s) it stands
for to the block's buffer, and once :data:`BATCH` instructions are buffered the greenlet
switches back to the generator, which yields them to the dispatcher in program order. Run-ahead
(and host memory) therefore stays bounded, and the per-instruction overhead is one list append
plus a greenlet switch per batch.

Every instruction is stamped with ``origin`` = "file.py:line" of the user's call site (the
first stack frame outside this package), so the sanitizer and hot-spot tables name the line of
the kernel source, not of opsim.
"""
from __future__ import annotations

import os
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, Iterator

from greenlet import greenlet, getcurrent

from opsim.simulator.errors import (KERNEL_LINE_NOTE, SimulatorError, UnsupportedInstruction,
                                    kernel_line_note)

if TYPE_CHECKING:  # pragma: no cover
    from opsim.simulator.tile import KernelContext

BATCH = 64                        # instructions handed to the dispatcher per greenlet switch
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


class KernelExit(Exception):
    """Raised inside a kernel greenlet to end the block early (a cube core that served its
    Matmul clients leaves the kernel, as REGIST_MATMUL_OBJ does on the AIC)."""


def call_site() -> str:
    """"file.py:line" of the innermost stack frame outside opsim.asc (the kernel's source)."""
    f: FrameType | None = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_PKG_DIR):
            return f"{fn}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>:0"


def _kernel_line(exc: BaseException) -> str | None:
    """"file.py:line" of the innermost frame of ``exc``'s traceback in the kernel's source,
    outside opsim.asc and the simulator."""
    import traceback

    from opsim import simulator
    sim_dir = os.path.dirname(os.path.abspath(simulator.__file__))
    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        fn = os.path.abspath(frame.f_code.co_filename)
        if not fn.startswith(_PKG_DIR) and not fn.startswith(sim_dir):
            line = f"{frame.f_code.co_filename}:{lineno}"
    return line


def unsupported(what: str, hint: str = "") -> UnsupportedInstruction:
    """An :class:`UnsupportedInstruction` naming the API and the kernel line that called it."""
    return UnsupportedInstruction(f"{what} is not supported by opsim.asc (called at {call_site()})"
                                  + (f"; {hint}" if hint else ""))


class BlockState:
    """What one block (one core) of a launch sees while its kernel function runs."""

    def __init__(self, ctx: "KernelContext", launch: Any, role: str, group: Any = None) -> None:
        self.ctx = ctx
        self.core = ctx.core
        self.launch = launch            # opsim.asc.jit.LaunchPlan
        self.role = role                # "aiv" | "aic" | "aicore"
        self.group = group              # mixed launches: the block's AIC/AIV message group
        self.buffer: list = []
        self.emitted = 0                # instructions emitted so far: the next one's program index
        self._event_ids: dict[tuple[str, str], int] = {}
        self.matmuls: list = []
        self.on_finish: list[Callable[[], None]] = []   # run when the kernel function returns
        # insert_sync kernels (LocalTensorAuto): the flags pyasc's compiler would insert
        # (opsim.asc.autosync), and the pool of LocalTensorAuto buffers (size -> free addresses)
        self.autosync: Any = None
        self.auto_pool: dict[int, list[int]] = {}

    def finish(self) -> None:
        for cb in self.on_finish:
            cb()

    # -- instruction stream ----------------------------------------------------------------------
    def emit(self, instr: Any, origin: str | None = None) -> None:
        origin = origin or call_site()
        instr.origin = origin
        instr.tile = self.core.tile
        # program order, which the sanitizer cannot read off the pipes (they run in parallel):
        # it tells a use of a re-allocated queue buffer from a use after free (QueueFreeFlag)
        instr.program_index = self.emitted
        self.emitted += 1
        buf = self.buffer
        if self.autosync is not None:
            for flag in self.autosync.before(instr):
                flag.origin, flag.tile = origin, instr.tile
                buf.append(flag)
        buf.append(instr)
        if len(buf) >= BATCH:
            self.flush()

    def flush(self) -> None:
        """Hand the buffered instructions to the dispatcher now."""
        if self.buffer:
            buf, self.buffer = self.buffer, []
            parent = getcurrent().parent
            assert parent is not None   # flush runs inside the block's greenlet, never the root
            parent.switch(buf)

    # -- flags reserved by the framework (queues, barriers, matmul hand-offs) ---------------------
    def reserved_event(self, src: str, dst: str) -> int:
        """An event id of the pipe pair that user code (ids 0..7, HardEvent) does not use."""
        k = (src, dst)
        i = self._event_ids.get(k, 0)
        self._event_ids[k] = i + 1
        return 16 + i


class _KernelGreenlet(greenlet):
    state: BlockState


def current() -> BlockState:
    """The block whose kernel is running (raises outside a kernel launch)."""
    g = getcurrent()
    state = getattr(g, "state", None)
    if state is None:
        raise SimulatorError("an opsim.asc kernel API was called outside a kernel launch "
                             f"(at {call_site()}); launch the kernel as kernel[block_dim, stream](...)")
    return state


def in_kernel() -> bool:
    return getattr(getcurrent(), "state", None) is not None


def run_block(state: BlockState, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Iterator[Any]:
    """A generator of the block's instructions: runs ``fn(*args, **kwargs)`` in a greenlet."""

    def body() -> list | None:
        try:
            fn(*args, **kwargs)
        except KernelExit:
            pass
        except SimulatorError as exc:
            # raised by the front-end or the machine while the kernel's Python ran (a TPipe
            # buffer that does not fit the UB, a queue misuse): name the kernel's line, as a
            # faulting instruction's origin does, not the opsim frame that raised it
            if getattr(exc, "origin", None) is None:
                exc.origin = _kernel_line(exc)
            raise
        except Exception as exc:
            # a bug in the kernel's Python: it comes back through the simulator's processes,
            # which leave the kernel's frames out of its traceback, so it says where it arose
            line = _kernel_line(exc)
            if line is not None and kernel_line_note(exc) is None:
                exc.add_note(f"{KERNEL_LINE_NOTE}{line}")
            raise
        state.finish()
        if state.buffer:
            buf, state.buffer = state.buffer, []
            return buf
        return None

    g = _KernelGreenlet(body)
    g.state = state
    batch = g.switch()
    while batch is not None:
        yield from batch
        if g.dead:
            return
        batch = g.switch()
