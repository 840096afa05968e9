"""The sanitizer: racecheck, memcheck and synccheck of a kernel as it runs on the simulator.

The simulated counterpart of the vendor's mssanitizer. It is an execution client (DESIGN §12):
attached to a :class:`~opsim.simulator.device.Device` as one of its ``observers``, it sees every
instruction a pipe completes, in simulated-time order, with the memory it touched
(``Instruction.accesses``) and the kernel source line that issued it (``Instruction.origin``).
It never changes what the machine does: results and cycles are the same with and without it.

racecheck
    Happens-before, not timing overlap. Each pipe of each core carries a vector clock: program
    order within a pipe; ``SetFlag`` -> ``WaitFlag`` hands the setter's clock to the waiter (the
    n-th wait of a flag pairs with its n-th set, as the hardware counter does); a cross-core
    wait takes the clocks of the sets it needed; a block boundary joins every pipe of the core
    (the block waits for all its pipes), and a launch starts after the launches before it on
    its stream. Two accesses to overlapping bytes of UB (any local memory) or GM, at least one
    a write (two atomic adds do not conflict), neither ordered before the other, are a race.
memcheck
    A fault of the machine (out of bounds, misaligned, use after free, over capacity) becomes a
    finding with the source line and the address; the run still fails. Besides: reads of local
    memory bytes never written in the block (the hardware returns garbage, the simulator
    zeros), GM accesses not aligned to their element size, TQue buffers allocated and never
    freed.
synccheck
    A deadlock (the engine's DeadlockError) is reported naming each blocked pipe, the flag it
    waits on, its source line and the flags that were set instead; flags left set at the end
    of a block (other than the releases of TQue buffers, which the framework reclaims) and
    cross-core flags set but never waited for are reported.

Use::

    san = Sanitizer(device)         # before launching
    ...launch, device.synchronize()...
    report = san.finish()           # also after a fault: the fault becomes a finding
    print(report); report.ok
"""
from __future__ import annotations

import os
import traceback
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opsim.simulator.cube import CrossCoreSetFlag, CrossCoreWaitFlag
from opsim.simulator.errors import (KERNEL_LINE_NOTE, CapacityError, DeadlockError, MemoryFault, QueueError,
                                    SimulatorError, chain_kernel_line_note)
from opsim.simulator.isa import BlockEnd, DataCopy, QueueFreeFlag, SetFlag, WaitFlag

if TYPE_CHECKING:  # pragma: no cover
    from opsim.simulator.core import Core, Pipe
    from opsim.simulator.device import Device
    from opsim.simulator.isa import Instruction

__all__ = ["Finding", "SanitizerReport", "Sanitizer"]

_SIM_DIR = os.path.dirname(os.path.abspath(__file__))
MAX_FINDINGS = 200          # distinct findings kept (repeats of one are counted, not stored)
PAGE_SHIFT = 16             # access histories are kept per 64 KiB page of each memory


@dataclass(frozen=True)
class Finding:
    """One problem the sanitizer found.

    ``check`` is "racecheck", "memcheck" or "synccheck", or "fault" for the machine fault that
    ended the run when it is none of memcheck's (a Python bug in the kernel, an unsupported
    call); ``kind`` says what exactly ("race",
    "out-of-bounds", "uninitialized-read", "deadlock", "flag-left-set", ...). ``pipes``,
    ``instructions`` and ``lines`` run in parallel (one entry per instruction involved; a line
    is None when the kernel source is unknown); ``ranges`` are the bytes involved as
    "memory [lo, hi)"; ``count`` is how many times the same finding occurred (e.g. once per tile).
    """

    check: str
    kind: str
    message: str
    core: str | None = None
    pipes: tuple[str, ...] = ()
    instructions: tuple[str, ...] = ()
    lines: tuple[str | None, ...] = ()
    ranges: tuple[str, ...] = ()
    address: int | None = None
    count: int = 1

    def __str__(self) -> str:
        head = f"{self.check}: {self.kind}"
        if self.core:
            head += f" on {self.core}"
        if self.address is not None:
            head += f" at {self.address:#x}"
        text = [f"{head}: {self.message}" + (f" ({self.count} times)" if self.count > 1 else "")]
        for pipe, instr, line in zip(self.pipes, self.instructions, self.lines):
            text.append(f"    {pipe:7s} {instr}  at {_short(line)}")
        for r in self.ranges:
            text.append(f"    bytes   {r}")
        return "\n".join(text)


@dataclass(frozen=True)
class SanitizerReport:
    """What the sanitizer found in a run; ``ok`` when nothing. ``fault`` is the machine fault
    that ended the run, if any (it is also among the findings)."""

    findings: tuple[Finding, ...] = ()
    fault: str | None = None
    instructions: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings

    def by_check(self, check: str) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.check == check)

    def __str__(self) -> str:
        if self.ok:
            return (f"sanitizer: no findings (racecheck, memcheck, synccheck over "
                    f"{self.instructions} instructions)")
        lines = [f"sanitizer: {len(self.findings)} finding{'s' if len(self.findings) != 1 else ''} "
                 f"over {self.instructions} instructions"]
        lines += [str(f) for f in self.findings]
        return "\n".join(lines)


def _short(line: str | None) -> str:
    if not line:
        return "(unknown source line)"
    path, _, no = line.rpartition(":")
    try:
        rel = os.path.relpath(path)
    except ValueError:  # pragma: no cover - other drive on Windows
        rel = path
    return f"{rel if not rel.startswith('..' + os.sep + '..') else path}:{no}"


def _join(into: dict[int, int], other: dict[int, int]) -> None:
    for k, v in other.items():
        if into.get(k, 0) < v:
            into[k] = v


class _Access:
    """One access of one instruction: who, when (pipe id and its clock), what bytes."""

    __slots__ = ("pid", "clock", "core", "pipe", "instr", "memory", "lo", "hi", "write", "atomic")

    def __init__(self, pid: int, clock: int, core: str, pipe: str, instr: "Instruction", memory: str,
                 lo: int, hi: int, write: bool, atomic: bool) -> None:
        self.pid, self.clock, self.core, self.pipe, self.instr = pid, clock, core, pipe, instr
        self.memory, self.lo, self.hi, self.write, self.atomic = memory, lo, hi, write, atomic

    @property
    def origin(self) -> str | None:
        return getattr(self.instr, "origin", None)

    def verb(self) -> str:
        return "atomic add" if self.atomic else ("write" if self.write else "read")


class _Shadow:
    """The access history of one memory: sorted, disjoint byte ranges, each with its last write,
    the atomic adds and reads since (latest per pipe). A write collapses its range to one cell."""

    __slots__ = ("starts", "cells")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.cells: list[list | None] = []   # cells[i] covers [starts[i], starts[i+1])

    def _split(self, x: int) -> int:
        """Make ``x`` a boundary; return the index of the cell starting at ``x``."""
        starts = self.starts
        i = bisect_right(starts, x) - 1
        if i >= 0 and starts[i] == x:
            return i
        cell = self.cells[i] if i >= 0 else None
        if cell is not None:
            cell = [cell[0], dict(cell[1]) if cell[1] else None, dict(cell[2]) if cell[2] else None]
        starts.insert(i + 1, x)
        self.cells.insert(i + 1, cell)
        return i + 1

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        i = self._split(lo)
        j = self._split(hi)
        return i, j


class Sanitizer:
    """Race, memory and synchronisation checks of everything a device runs (module docstring).

    ``Sanitizer(device)`` appends itself to ``device.observers`` and turns on source lines;
    create it before the launches. ``finish()`` returns the :class:`SanitizerReport`.
    """

    def __init__(self, device: "Device", *, racecheck: bool = True, memcheck: bool = True,
                 synccheck: bool = True) -> None:
        self.device = device
        self.racecheck, self.memcheck, self.synccheck = racecheck, memcheck, synccheck
        device.observers.append(self)
        device.source_lines = True
        self._pid: dict[int, int] = {}                 # id(pipe) -> pipe id
        self._pipes: list["Pipe"] = []
        self._vc: list[dict[int, int]] = []            # pipe id -> vector clock
        self._block: dict[str, tuple[int, int]] = {}   # core -> (id(launch), block) now running
        self._ended: set[str] = set()                  # cores whose current block reached BlockEnd
        self._core_end: dict[str, dict[int, int]] = {}  # core -> join of its pipes at block ends
        self._launch_end: dict[int, dict[int, int]] = {}
        self._launch_base: dict[int, dict[int, int]] = {}
        self._launch_obj: dict[int, Any] = {}
        self._flags: dict[tuple[str, tuple], deque] = {}     # (core, key) -> sets not yet waited
        self._waited: dict[tuple[str, tuple], int] = {}
        self._cross: dict[tuple, list[dict[int, int]]] = {}  # key -> cumulative clocks of its sets
        self._cross_origin: dict[tuple, Any] = {}
        self._shadow: dict[str, dict[int, _Shadow]] = {}   # memory -> page -> history
        self._resettable: dict[str, bool] = {}
        self._found: dict[tuple, list] = {}            # dedup key -> [Finding kwargs, count]
        self._contexts: dict[str, Any] = {}
        self._unfreed: dict[str, list] = {}    # core -> (region, unfreed buffer) at its block's end
        # memory -> queue buffers released by free_tensor: [lo, hi, name, free instr, free pid,
        # free clock, realloc pid, realloc clock] (the realloc is the wait that consumed the
        # release: the buffer's next alloc_tensor)
        self._released: dict[str, list[list]] = {}
        self.instructions = 0
        self._report: SanitizerReport | None = None

    # -- observer ------------------------------------------------------------------------------
    def on_instruction(self, core: "Core", pipe: "Pipe", instr: "Instruction", start: int, end: int) -> None:
        self.instructions += 1
        launch = core.launch
        blk = (id(launch), core.block_idx)
        if self._block.get(core.name) != blk:
            self._begin_block(core, launch, blk)
        pid = self._pid.get(id(pipe))
        if pid is None:
            pid = self._new_pipe(pipe)
        vc = self._vc[pid]
        clock = vc[pid] = vc.get(pid, 0) + 1
        if not instr.busy:
            if isinstance(instr, SetFlag):
                key = (core.name, (instr.src, instr.dst, instr.event_id))
                q = self._flags.get(key)
                if q is None:
                    q = self._flags[key] = deque()
                q.append((dict(vc), instr))
                if self.memcheck and type(instr) is QueueFreeFlag:
                    self._release(core.name, instr, pid, clock)
                return
            if isinstance(instr, WaitFlag):
                key = (core.name, (instr.src, instr.dst, instr.event_id))
                q = self._flags.get(key)
                self._waited[key] = self._waited.get(key, 0) + 1
                if q:
                    snap, setter = q.popleft()
                    _join(vc, snap)
                    if type(setter) is QueueFreeFlag:
                        self._reallocate(core.name, setter, pid, clock)
                return
            if isinstance(instr, BlockEnd):
                self._ended.add(core.name)
                ctx = self._contexts.pop(core.name, None)
                if ctx is not None and self.memcheck:
                    # the program has issued everything by its first BlockEnd, so the queues'
                    # host-side state is final: take what was never freed now (the device drops
                    # the block's context when the block ends)
                    self._unfreed[core.name] = [(q.region.name, item) for q in getattr(ctx, "queues", ())
                                                for item in q.unfreed()]
                ce = self._core_end.setdefault(core.name, {})
                _join(ce, vc)
                le = self._launch_end.setdefault(id(launch), {})
                _join(le, vc)
                self._launch_obj[id(launch)] = launch
                return
            if isinstance(instr, CrossCoreSetFlag):
                for key in instr.sync_keys(pipe):
                    cum = self._cross.setdefault(key, [])
                    snap = dict(cum[-1]) if cum else {}
                    _join(snap, vc)
                    cum.append(snap)
                    self._cross_origin.setdefault(key, instr)
                return
            if isinstance(instr, CrossCoreWaitFlag):
                waited = instr.sync_need(pipe)
                got = self._cross.get(waited[0]) if waited is not None else None
                if got:
                    assert waited is not None
                    _join(vc, got[min(waited[1], len(got)) - 1])
                return
        if not (self.racecheck or self.memcheck):
            return
        accesses = instr.accesses(pipe)
        if not accesses:
            return
        atomic = isinstance(instr, DataCopy) and instr.atomic
        cname, pname = core.name, pipe.name
        for memory, addr, nbytes, write in accesses:
            if nbytes <= 0:
                continue
            acc = _Access(pid, clock, cname, pname, instr, memory, addr, addr + nbytes, write,
                          atomic and write)
            self._access(acc, vc)
            if self.memcheck and memory.startswith(cname + "/"):
                self._local_checks(core, acc, vc)
        if self.memcheck and isinstance(instr, DataCopy):
            glob = instr.glob
            item = glob.dtype.itemsize
            lo = glob.byte_range()[0]
            if glob.limit is not None:
                self._gm_limit(cname, pname, instr, glob.limit)
            if lo % item:
                self._add(("misaligned", getattr(instr, "origin", None)),
                          check="memcheck", kind="misaligned",
                          message=f"GM address {lo:#x} of {instr.describe()} is not aligned to its "
                                  f"{item} B elements", core=cname, pipes=(pname,),
                          instructions=(instr.describe(),), lines=(getattr(instr, "origin", None),),
                          address=lo)

    # -- clocks --------------------------------------------------------------------------------
    def _new_pipe(self, pipe: "Pipe") -> int:
        pid = len(self._pipes)
        self._pid[id(pipe)] = pid
        self._pipes.append(pipe)
        self._vc.append({})
        return pid

    def _begin_block(self, core: "Core", launch: Any, blk: tuple[int, int]) -> None:
        old = self._block.get(core.name)
        if old is not None:
            self._end_block_checks(core.name)
        self._block[core.name] = blk
        self._ended.discard(core.name)
        self._launch_obj[blk[0]] = launch
        base = dict(self._core_end.get(core.name, {}))
        _join(base, self._base_of(launch))
        for p in core.pipes.values():
            pid = self._pid.get(id(p))
            if pid is None:
                pid = self._new_pipe(p)
            _join(self._vc[pid], base)
        # the block's local memories start afresh (Core.begin_block resets them)
        for name, region in core.memories.items():
            mem = f"{core.name}/{name}"
            self._resettable[mem] = region.backing != "sparse"
            if region.backing != "sparse":
                self._shadow.pop(mem, None)
            self._released.pop(mem, None)
        self._contexts[core.name] = getattr(core, "context", None)

    def _base_of(self, launch: Any) -> dict[int, int]:
        """Clocks every block of ``launch`` starts after: the launches before it on its stream
        and any launch on another stream that ended before it was issued."""
        if launch is None:
            return {}
        base = self._launch_base.get(id(launch))
        if base is not None:
            return base
        base = {}
        stream = getattr(launch, "stream", None)
        for other in self.device.launches:
            if other is launch:
                continue
            same = stream is not None and other.stream is stream
            before = (same and stream is not None and stream.launches.index(other) < stream.launches.index(launch)) or (
                not same and 0 <= other.end <= launch.issue)
            if before:
                _join(base, self._launch_end.get(id(other), {}))
        self._launch_base[id(launch)] = base
        return base

    # -- memory --------------------------------------------------------------------------------
    def _gm_limit(self, core: str, pipe: str, instr: DataCopy, limit: tuple[int, int | None]) -> None:
        """A GM copy past the end of the kernel argument its GlobalTensor points into, or past
        the length set_global_buffer gave the GlobalTensor. Neither faults on the machine when
        the bytes belong to another tensor (the next argument, the next block's part), which is
        why the front-end's view of the copy is checked here."""
        arg_end, view_end = limit
        lo, hi = instr.glob.byte_range()
        verb = "writes" if instr._to_gm else "reads"
        origin = getattr(instr, "origin", None)
        gm = self.device.gm
        if hi > arg_end:
            arg = gm.allocation_at(arg_end - 1)
            into = gm.allocation_at(max(lo, arg_end))
            name = f"kernel argument '{arg.name}'" if arg is not None and arg.name else "its kernel argument"
            message = (f"{pipe} {verb} GM [{lo:#x}, {hi:#x}): {hi - max(lo, arg_end)} B past the end of "
                       f"{name} (which ends at {arg_end:#x})"
                       + (f", in {into.describe()}" if into is not None else "")
                       + "; the machine does not fault when the bytes belong to another tensor: check "
                         "the offset and the count of this copy")
            key: tuple = ("gm-arg-overrun", origin)
        elif view_end is not None and hi > view_end:
            message = (f"{pipe} {verb} GM [{lo:#x}, {hi:#x}): {hi - max(lo, view_end)} B past the end "
                       f"of its GlobalTensor (set_global_buffer gave it a length that ends at "
                       f"{view_end:#x}), into memory of the same argument the GlobalTensor does not "
                       f"cover (another block's part?): check the offset and the count of this copy, "
                       f"or the length given to set_global_buffer")
            key = ("gm-view-overrun", origin)
        else:
            return
        self._add(key, check="memcheck", kind="out-of-bounds", message=message, core=core,
                  pipes=(pipe,), instructions=(instr.describe(),), lines=(origin,),
                  ranges=(f"GM [{lo:#x}, {hi:#x}) {'write' if instr._to_gm else 'read'}",), address=lo)

    @staticmethod
    def _in_retired(core: "Core", memory: str, acc: _Access) -> bool:
        """Whether the access lies within a buffer of an earlier TPipe of the block that
        destroy_pipe gave back: the kernel generator runs ahead of simulated time, so the
        earlier stage's last accesses may execute once the later stage's buffers (allocated as
        the generator reached them) already cover those addresses."""
        ctx = getattr(core, "context", None)
        return any(m == memory and lo <= acc.lo and acc.hi <= hi for m, lo, hi in getattr(ctx, "retired", ()))

    def _local_checks(self, core: "Core", acc: _Access, vc: dict[int, int]) -> None:
        """An access of local memory past the end of the TQue/TBuf buffer it starts in (the
        memory is the core's own: nothing faults), and one of a queue buffer after free_tensor
        released it and before alloc_tensor took it again."""
        region = core.memories.get(acc.memory.rpartition("/")[2])
        if region is not None and region.backing != "allocation":
            buf = region.allocation_at(acc.lo)
            if buf is not None and acc.hi > buf.addr + buf.nbytes and not self._in_retired(core, region.name, acc):
                over = acc.hi - (buf.addr + buf.nbytes)
                self._add(("local-overrun", acc.origin, acc.instr.name, buf.name), check="memcheck",
                          kind="out-of-bounds",
                          message=(f"{acc.pipe} {acc.verb()}s {region.name} bytes [{acc.lo:#x}, {acc.hi:#x}): "
                                   f"{over} B past the end of buffer '{buf.name}' [{buf.addr:#x}, "
                                   f"{buf.addr + buf.nbytes:#x}), into the memory after it (local memory does "
                                   f"not fault): check the count, or the length the buffer was given "
                                   f"(init_buffer, TBuf.get)"),
                          core=acc.core, pipes=(acc.pipe,), instructions=(acc.instr.describe(),),
                          lines=(acc.origin,), ranges=(f"{acc.memory} [{acc.lo:#x}, {acc.hi:#x}) {acc.verb()}",),
                          address=acc.lo)
        for rel in self._released.get(acc.memory, ()):
            lo, hi, name, free, fpid, fclock, rpid, rclock = rel
            if acc.lo >= hi or lo >= acc.hi or vc.get(fpid, 0) < fclock:
                continue            # other bytes, or not ordered after the release
            if rpid is not None and vc.get(rpid, 0) >= rclock:
                continue            # after the buffer's next alloc_tensor
            realloc, index = getattr(free, "realloc_index", None), getattr(acc.instr, "program_index", None)
            if realloc is not None and index is not None and index > realloc:
                # issued after that alloc_tensor in the program: a use of the new allocation;
                # what is missing is an order (a deque), which racecheck reports
                continue
            self._add(("use-after-free", acc.origin, acc.instr.name, name), check="memcheck",
                      kind="use-after-free",
                      message=(f"{acc.pipe} {acc.verb()}s {name} ({acc.memory.rpartition('/')[2]} "
                               f"[{lo:#x}, {hi:#x})) after free_tensor released it at "
                               f"{_short(getattr(free, 'origin', None))}: the producer may already be "
                               f"refilling it; free the tensor after its last use"),
                      core=acc.core, pipes=(acc.pipe, free.src),
                      instructions=(acc.instr.describe(), free.describe()),
                      lines=(acc.origin, getattr(free, "origin", None)),
                      ranges=(f"{acc.memory} [{max(lo, acc.lo):#x}, {min(hi, acc.hi):#x}) {acc.verb()}",),
                      address=max(lo, acc.lo))

    def _release(self, core: str, flag: QueueFreeFlag, pid: int, clock: int) -> None:
        buffer = getattr(flag, "buffer", None)
        if buffer is None:
            return
        region, addr, nbytes, name = buffer
        entries = self._released.setdefault(f"{core}/{region}", [])
        entry = [addr, addr + nbytes, name, flag, pid, clock, None, 0]
        for i, old in enumerate(entries):
            if old[0] == addr:
                entries[i] = entry
                return
        entries.append(entry)

    def _reallocate(self, core: str, flag: QueueFreeFlag, pid: int, clock: int) -> None:
        buffer = getattr(flag, "buffer", None)
        if buffer is None:
            return
        for entry in self._released.get(f"{core}/{buffer[0]}", ()):
            if entry[3] is flag:
                entry[6], entry[7] = pid, clock

    def _access(self, acc: _Access, vc: dict[int, int]) -> None:
        # the history of a memory is kept per 64 KiB page, so that a memory touched in many
        # small runs (strided copies, NZ blocks) stays cheap to update
        pages = self._shadow.get(acc.memory)
        if pages is None:
            pages = self._shadow[acc.memory] = {}
        conflicts: dict[int, _Access] = {}
        uninit: list[tuple[int, int]] = []
        lo, end = acc.lo, acc.hi
        while lo < end:
            page = lo >> PAGE_SHIFT
            hi = min(end, (page + 1) << PAGE_SHIFT)
            sh = pages.get(page)
            if sh is None:
                sh = pages[page] = _Shadow()
            self._access_range(sh, lo, hi, acc, vc, conflicts, uninit)
            lo = hi
        for prior in conflicts.values():
            self._race(prior, acc)
        if uninit:
            self._uninit(acc, uninit[0][0], uninit[-1][1])

    def _access_range(self, sh: _Shadow, lo: int, hi: int, acc: _Access, vc: dict[int, int],
                      conflicts: dict[int, _Access], uninit: list[tuple[int, int]]) -> None:
        i, j = sh.span(lo, hi)
        cells = sh.cells
        pid = acc.pid
        race = self.racecheck
        uninit_check = self.memcheck and not acc.write and self._resettable.get(acc.memory, False)
        for k in range(i, j):
            cell = cells[k]
            if cell is None:
                if uninit_check:
                    uninit.append((sh.starts[k], sh.starts[k + 1]))
                if not acc.write:
                    cells[k] = [None, None, {pid: acc}]
                continue
            w, atomics, reads = cell
            if race:
                if w is not None and w.pid != pid and vc.get(w.pid, 0) < w.clock:
                    conflicts[id(w)] = w
                if atomics and not acc.atomic:
                    for a in atomics.values():
                        if a.pid != pid and vc.get(a.pid, 0) < a.clock:
                            conflicts[id(a)] = a
                if acc.write and reads:
                    for r in reads.values():
                        if r.pid != pid and vc.get(r.pid, 0) < r.clock:
                            conflicts[id(r)] = r
            if uninit_check and w is None and not atomics:
                uninit.append((sh.starts[k], sh.starts[k + 1]))
            if not acc.write:
                if reads is None:
                    cell[2] = {pid: acc}
                else:
                    reads[pid] = acc
            elif acc.atomic:
                if atomics is None:
                    cell[1] = {pid: acc}
                else:
                    atomics[pid] = acc
        if acc.write and not acc.atomic:
            # the write is now the range's whole history: one cell
            del sh.starts[i + 1:j]
            sh.cells[i:j] = [[acc, None, None]]
        elif acc.atomic:
            for k in range(i, j):
                if cells[k] is None:
                    cells[k] = [None, {pid: acc}, None]

    def _race(self, first: _Access, second: _Access) -> None:
        lo, hi = max(first.lo, second.lo), min(first.hi, second.hi)
        region = first.memory.rpartition("/")[2]
        a = (first.origin or "", first.pipe, first.instr.name, first.verb())
        b = (second.origin or "", second.pipe, second.instr.name, second.verb())
        key = ("race", region, *sorted((a, b)))       # one finding per pair, whichever ran first
        where = (first.core if first.core == second.core else f"{first.core} and {second.core}")
        self._add(key, check="racecheck", kind="race",
                  message=(f"{first.pipe} {first.verb()} and {second.pipe} {second.verb()} of "
                           f"{region} bytes [{lo:#x}, {hi:#x}) with no flag, barrier or queue "
                           f"hand-off ordering them" + ("" if first.core == second.core else
                                                         f" (cores {where})")),
                  core=first.core if first.core == second.core else where,
                  pipes=(first.pipe, second.pipe),
                  instructions=(first.instr.describe(), second.instr.describe()),
                  lines=(first.origin, second.origin),
                  ranges=(f"{first.memory} [{first.lo:#x}, {first.hi:#x}) {first.verb()}",
                          f"{second.memory} [{second.lo:#x}, {second.hi:#x}) {second.verb()}"),
                  address=lo)

    def _uninit(self, acc: _Access, lo: int, hi: int) -> None:
        key = ("uninit", acc.memory.rpartition("/")[2], acc.origin, acc.instr.name)
        self._add(key, check="memcheck", kind="uninitialized-read",
                  message=(f"{acc.pipe} reads {acc.memory.rpartition('/')[2]} bytes [{lo:#x}, {hi:#x}) "
                           f"that nothing wrote in this block (the hardware returns stale data)"),
                  core=acc.core, pipes=(acc.pipe,), instructions=(acc.instr.describe(),),
                  lines=(acc.origin,), ranges=(f"{acc.memory} [{lo:#x}, {hi:#x}) read",), address=lo)

    def _add(self, key: tuple, **finding: Any) -> None:
        hit = self._found.get(key)
        if hit is not None:
            hit[1] += 1
        elif len(self._found) < MAX_FINDINGS:
            self._found[key] = [finding, 1]

    # -- block end: flags left set, buffers never freed ----------------------------------------
    def _end_block_checks(self, core: str) -> None:
        if self.synccheck:
            for key, q in list(self._flags.items()):
                if key[0] != core:
                    continue
                left = [instr for _, instr in q if not isinstance(instr, QueueFreeFlag)]
                if left:
                    instr = left[0]
                    self._add(("flag-left-set", getattr(instr, "origin", None), key[1], len(left)),
                              check="synccheck", kind="flag-left-set",
                              message=(f"{instr.describe()} was set {len(left)} time(s) more than it was "
                                       f"waited for: still set when the block ended"),
                              core=core, pipes=(instr.src,), instructions=(instr.describe(),),
                              lines=(getattr(instr, "origin", None),))
                del self._flags[key]
            for key in [k for k in self._waited if k[0] == core]:
                del self._waited[key]
        unfreed = self._unfreed.pop(core, None)
        ctx = self._contexts.pop(core, None)
        if unfreed is None and ctx is not None:          # a block that never reached its BlockEnd
            unfreed = [(q.region.name, item) for q in getattr(ctx, "queues", ()) for item in q.unfreed()]
        if self.memcheck:
            for region, (what, addr, nbytes, line, call) in unfreed or ():
                # the line to act on is the allocation's (scalar code, as every queue call)
                self._add(("unfreed", what, line), check="memcheck", kind="buffer-not-freed",
                          message=f"{what} allocated and never freed by the end of the block",
                          core=core, pipes=("SCALAR",), instructions=(call,), lines=(line,),
                          ranges=(f"{core}/{region} [{addr:#x}, {addr + nbytes:#x})",), address=addr)

    # -- the end -------------------------------------------------------------------------------
    def finish(self) -> SanitizerReport:
        """The report of everything run so far; call after ``synchronize`` or after a fault."""
        if self._report is not None:
            return self._report
        fault = self.device.faulted
        if fault is None or not isinstance(fault, DeadlockError):
            for core in list(self._block):
                # a block the fault cut short did not end: the flags it had set and the buffers
                # it held are the fault's doing, not findings of their own
                if fault is None or core in self._ended:
                    self._end_block_checks(core)
        if self.synccheck and fault is None:
            self._cross_left_set()
        if fault is not None:
            self._fault_finding(fault)
        # the fault that ended the run first, then the rest in the order found
        rank = {"racecheck": 0, "memcheck": 1, "synccheck": 2}
        items = sorted(self._found.items(), key=lambda kv: (kv[0][0] not in ("fault", "deadlock"),
                                                            rank.get(kv[1][0]["check"], 3)))
        findings = tuple(Finding(**kw, count=n) for _, (kw, n) in items)
        self._report = SanitizerReport(findings, str(fault) if fault is not None else None, self.instructions)
        return self._report

    def _cross_left_set(self) -> None:
        table = self.device.cross_flags
        waited = {k for (k, _waiter) in table._done}
        for key, n in table._count.items():
            instr = self._cross_origin.get(key)
            # framework hand-offs (subclasses, e.g. the Matmul messages) end with a release
            if key not in waited and n and type(instr) is CrossCoreSetFlag:
                desc = instr.describe() if instr is not None else f"cross-core flag {key[-1]}"
                self._add(("cross-left-set", key[1:]), check="synccheck", kind="flag-left-set",
                          message=f"{desc} was set {n} time(s) and never waited for",
                          pipes=(getattr(instr, "pipe", "?"),), instructions=(desc,),
                          lines=(getattr(instr, "origin", None),))

    def _fault_finding(self, fault: SimulatorError) -> None:
        if isinstance(fault, DeadlockError):
            self._deadlock(fault)
            return
        # a kernel's Python bug reaches here wrapped (Device: "internal error in a kernel"), its
        # traceback ending where the launch waited: the kernel line is the note on its cause
        note = chain_kernel_line_note(fault)
        line = (getattr(fault, "origin", None) or (note[len(KERNEL_LINE_NOTE):] if note else None)
                or _traceback_line(fault))
        if isinstance(fault, MemoryFault):
            reason = fault.reason
            # a DataCopy of a length that is not whole 32 B blocks breaks the DMA's alignment rule
            kind = ("misaligned" if "aligned" in reason or "32 B blocks" in reason
                    else "use-after-free" if "after free" in reason
                    else "invalid-free" if "free" in reason else "out-of-bounds")
        elif isinstance(fault, CapacityError):
            kind = "over-capacity"
        elif isinstance(fault, QueueError):
            kind = "queue-misuse"
        else:
            kind = "fault"
        check = "memcheck" if isinstance(fault, (MemoryFault, CapacityError, QueueError)) else "fault"
        pipe, instruction = fault.pipe, fault.instruction
        if instruction is None:
            # raised by the kernel's own code, not by an instruction a pipe ran (a TQue's
            # bookkeeping, an API call refusing its arguments): scalar code; name the call
            instruction = _call_at(fault, line) or "-"
            pipe = pipe or "SCALAR"
        # the line is the finding's row: not again in its message (the launch or the front-end
        # may have put it into the reason for the bare exception's text)
        self._add(("fault",), check=check, kind=kind,
                  message=f"{type(fault).__name__}: {_without_line(fault.reason, line)}{fault._details()} "
                          f"(the run fails here)",
                  core=fault.core, pipes=(pipe,), instructions=(instruction,),
                  lines=(line,), address=fault.address)

    def _deadlock(self, fault: DeadlockError) -> None:
        # one entry per distinct blocked wait (same pipe, flag, line and reason), with its cores
        groups: dict[tuple, list[str]] = {}
        stalled: dict[str, list[str]] = {}
        for core in self.device.all_cores():
            if core.launch is None:
                continue
            for p in core.pipes.values():
                instr = getattr(p, "waiting_instr", None)
                if not isinstance(instr, (WaitFlag, CrossCoreWaitFlag)):
                    continue
                key = (p.name, instr.describe(), getattr(instr, "origin", None), self._why_blocked(core, p, instr))
                groups.setdefault(key, []).append(core.name)
            if core.blocked_since is not None:
                full = ", ".join(n for n, p in core.pipes.items() if p.full())
                if full:
                    stalled.setdefault(full, []).append(core.name)
        # the likely culprits (a wrong event id) first
        items = sorted(groups.items(), key=lambda kv: not kv[0][3].endswith("?"))
        pipes = tuple(f"{cores[0]}.{k[0]}" + (f" (+{len(cores) - 1} cores)" if len(cores) > 1 else "")
                      for k, cores in items) or ("-",)
        instrs = tuple(k[1] for k, _ in items) or ("-",)
        lines = tuple(k[2] for k, _ in items) or (None,)
        notes = [f"{k[3]} [{_cores(cores)}]" for k, cores in items]
        notes += [f"the dispatcher waits for room in the {q} queue, so the kernel issues nothing more "
                  f"[{_cores(cores)}]" for q, cores in stalled.items()]
        if not items:
            notes.append(fault.reason)
        self._add(("deadlock",), check="synccheck", kind="deadlock",
                  message="no pipe can make progress:\n      " + "\n      ".join(notes),
                  core=None, pipes=pipes, instructions=instrs, lines=lines)

    def _why_blocked(self, core: "Core", pipe: "Pipe", instr: Any) -> str:
        line = _short(getattr(instr, "origin", None))
        if isinstance(instr, WaitFlag):
            text = f"{pipe.name} waits in {instr.describe()} ({line})"
            # sets of the same pipe pair with another event id, never waited for: the likely bug
            same_pair = [q for k, q in self._flags.items() if k[0] == core.name and q
                         and k[1][:2] == (instr.src, instr.dst) and k[1][2] != instr.event_id]
            if same_pair:
                q = same_pair[0]
                return (text + f" but {q[0][1].describe()} was set instead "
                        f"({_short(getattr(q[0][1], 'origin', None))}) and never waited for: "
                        f"a wrong event id?")
            swapped = self._flags.get((core.name, (instr.dst, instr.src, instr.event_id)))
            if swapped:
                setter = swapped[0][1]
                return (text + f" but {setter.describe()} was set instead "
                        f"({_short(getattr(setter, 'origin', None))}) and never waited for: the two pipes "
                        f"of the HardEvent swapped?")
            src_pipe = core.pipes.get(instr.src)
            src_wait = getattr(src_pipe, "waiting_instr", None) if src_pipe is not None else None
            if src_wait is not None:
                return text + f"; its setter {instr.src} is blocked itself, in {src_wait.describe()}"
            return (text + f" for a SetFlag<{instr.src}_{instr.dst}>({instr.event_id}) that nothing "
                    f"left to run will issue")
        key = instr._key
        table = core.device.cross_flags
        have = table.count(key) if key is not None else 0
        return (f"{pipe.name} waits in {instr.describe()} ({line}): the cross-core flag "
                f"was set {have} time(s), not enough for this wait, and no core left running sets it")


def _cores(cores: list[str]) -> str:
    return cores[0] if len(cores) == 1 else f"{len(cores)} cores: {', '.join(cores[:4])}" + (
        ", ..." if len(cores) > 4 else "")


def _without_line(reason: str, line: str | None) -> str:
    """``reason`` without a trailing mention of ``line``: " (kernel line L)", which opsim.asc's
    launch appends to a fault's reason, " (at L)", which the front-end's own checks end with, or
    " (at kernel line L)", which the device gives a kernel's Python bug."""
    if line:
        for suffix in (f" (kernel line {line})", f" (at {line})", f" ({KERNEL_LINE_NOTE}{line})"):
            if reason.endswith(suffix):
                return reason[:-len(suffix)]
    return reason


def _call_at(exc: BaseException, line: str | None) -> str | None:
    """The function the kernel called at ``line`` ("file:line") on the way to raising ``exc``,
    e.g. "TQue.free_tensor" ("LocalTensor" for a constructor): the frame of ``exc``'s traceback
    right after the innermost one at ``line``."""
    if not line:
        return None
    frames = [(frame.f_code, lineno) for frame, lineno in traceback.walk_tb(exc.__traceback__)]
    at = [i for i, (code, lineno) in enumerate(frames) if f"{code.co_filename}:{lineno}" == line]
    if not at or at[-1] + 1 >= len(frames):
        return None
    name = frames[at[-1] + 1][0].co_qualname
    return name.removesuffix(".__init__").replace(".<locals>.", ".")


def _traceback_line(exc: BaseException) -> str | None:
    """The innermost frame of ``exc``'s traceback outside the simulator package: the kernel line
    that raised (e.g. an allocation that over-subscribes the UB)."""
    line = None
    tb = exc.__traceback__
    for frame, lineno in traceback.walk_tb(tb):
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_SIM_DIR) and "simpy" not in path:
            line = f"{frame.f_code.co_filename}:{lineno}"
    return line
