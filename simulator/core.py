"""A simulated core: pipes that execute in-order instruction queues, flags, the dispatcher.

Each pipe (MTE2, VECTOR, MTE3, SCALAR on a vector core; MTE2, MTE1, CUBE, FIXP on a cube core;
DMA, VECTOR, SCALAR on a DSP core) is one long-lived SimPy process that pops instructions from
its queue in order. Pipes run concurrently; order between pipes comes only from flags
(``SetFlag`` runs on the source pipe, ``WaitFlag`` on the destination pipe), which the queue API
of the kernel language inserts. The dispatcher walks the kernel generator in program order and
pushes each instruction into its pipe's queue, blocking only when that queue is full
(``scalar.queue_depth`` entries, flags included), so run-ahead (and host memory) stays bounded
and, as on the hardware, an instruction waits to be issued until every earlier one has found a
place: a long run of MTE1/CUBE work can hold back the next MTE2 copy (the vendor's MTE2-preload
note, docs/sources.md#mte2-preload-note).
"""
from __future__ import annotations

from collections import deque
from heapq import heappush
from types import MethodType
from typing import TYPE_CHECKING, Any, Generator, Iterable, Iterator

import simpy
from simpy.events import NORMAL, Event, Timeout

from opsim.simulator.errors import MemoryFault, SimulatorError, UnsupportedInstruction

if TYPE_CHECKING:  # pragma: no cover
    from opsim.devices.spec import DeviceSpec
    from opsim.simulator.device import Device, Launch
    from opsim.simulator.isa import Instruction
    from opsim.simulator.memory import Region
    from opsim.simulator.tile import KernelContext

VECTOR_CORE_PIPES = ("SCALAR", "MTE2", "VECTOR", "MTE3")
CUBE_CORE_PIPES = ("SCALAR", "MTE2", "MTE1", "CUBE", "FIXP")
COUPLED_CORE_PIPES = ("SCALAR", "MTE2", "MTE1", "CUBE", "FIXP", "VECTOR", "MTE3")
DSP_CORE_PIPES = ("SCALAR", "DMA", "VECTOR")
# The pipes of a coupled AI core's cube unit (the rest serve the vector unit or the whole core).
COUPLED_CUBE_UNIT_PIPES = frozenset({"MTE1", "CUBE", "FIXP"})


def pipe_head_cycles(spec: "DeviceSpec", pipe: str, concurrent: int, load_bytes: int = 0) -> int:
    """One-off cycles of a pipe's first busy instruction on a core in a launch (the spec's heads).

    The calibrated heads are once per kernel per pipe (docs/sources.md#mte-load-store), MTE2's
    growing with ``blockDim``: the cores loading at once, so ``concurrent`` is the launch's
    blocks running at once (``Launch.concurrent_blocks``), not its block count (assumption A-9).
    ``load_bytes``: the largest load of the kernel on the pipe; from the model's
    ``head_large_from`` bytes on, MTE2's head takes its large-load form (assumption A-10)."""
    if pipe == "VECTOR":
        return round(spec.vector.head)
    model = {"MTE2": spec.mte2, "MTE3": spec.mte3, "MTE1": spec.mte1, "FIXP": spec.fixp,
             "DMA": spec.dma}.get(pipe)
    if model is None:
        return 0
    if 0 < model.head_large_from <= load_bytes:
        return round(model.head_large + model.head_large_per_block * concurrent)
    return round(model.head + model.head_per_block * concurrent)


def large_head_from(spec: "DeviceSpec", pipe: str) -> int:
    """Bytes of one load from which ``pipe``'s head takes its large-load form; 0 when it has
    none (every pipe but MTE2 of the Ascend parts; assumption A-10)."""
    model = spec.mte2 if pipe == "MTE2" else None
    return model.head_large_from if model is not None else 0


def pay_head(pipe: Any, load_bytes: int) -> int:
    """The head cycles ``pipe`` (a :class:`Pipe` or the estimate's replay view of one) pays on
    an instruction moving ``load_bytes``, and its bookkeeping (assumption A-10).

    A core's head in a launch is the head of its largest load so far: the first busy
    instruction pays the head its own size gives, and a later load that makes the head larger
    (MTE2's first load of ``head_large_from`` bytes or more after small ones) pays the
    difference, so the launch pays in total what the GE model charges for its largest load.
    ``head_paid`` keeps what was paid; ``head_pending`` stays set while a later load could
    still add to it, which is why the callers may skip the call when it is clear."""
    if not pipe.head_pending:
        return 0
    core = pipe.core
    name = pipe.name
    threshold = large_head_from(core.device.spec, name)
    small = load_bytes < threshold or not threshold
    if pipe.head_paid and small:
        return 0            # a small load after the small head: the common case, kept cheap
    due = core.head_cost(name, load_bytes) - pipe.head_paid
    if due > 0:
        pipe.head_paid += due
    # still pending only while a larger load could raise the head (never once a large one paid)
    pipe.head_pending = 0 < threshold and small
    return max(0, due)


# classes of the events a pipe has waited on (none is an int): see Pipe._run
_EVENT_CLASSES: set[type] = set()

# object.__new__: the pipes and the dispatcher make their events as ``_new(Event)`` plus the two
# attributes simpy.Event.__init__ sets (env, callbacks), in its order -- the same object without
# the __init__ frame (a quarter of the cost of each of the ~1 event per completion they make)
_new = object.__new__


def _is_cycles(wait: Any) -> bool:
    """Whether an instruction's wait is cycles (an int) rather than an event (whose class is
    then remembered)."""
    if isinstance(wait, int):
        return True
    _EVENT_CLASSES.add(wait.__class__)
    return False


def _plain_env(env: simpy.Environment) -> bool:
    """Whether SimPy's own ``timeout`` and ``schedule`` serve ``env`` (neither replaced on its
    class nor on it): the pipes and the dispatcher then put their events on SimPy's queue
    themselves, as those would; otherwise they call them (a wrapper sees every event).
    (SimPy itself binds ``timeout`` to every environment, in its ``__dict__``: that one is
    SimPy's own.)"""
    cls, own = type(env), getattr(env, "__dict__", {})
    if cls.timeout is not simpy.Environment.timeout or cls.schedule is not simpy.Environment.schedule \
            or "schedule" in own:
        return False
    t = own.get("timeout")
    return t is None or (type(t) is MethodType and t.__func__ is Timeout and t.__self__ is env)


def _plain_core(core: "Core") -> bool:
    """Whether Core's own ``set_flag`` and ``wait_flag`` serve ``core``: the pipes then do
    them inline; otherwise the flag instructions call them (a patch sees every flag)."""
    cls, own = type(core), getattr(core, "__dict__", {})
    return (cls.set_flag is _SET_FLAG and cls.wait_flag is _WAIT_FLAG
            and "set_flag" not in own and "wait_flag" not in own)


def _flags_quiet(pipe: "Pipe", device: "Device") -> bool:
    """Whether nobody sees ``pipe`` complete a flag but through its effect on the flags: no
    trace track, no fast-forward, no observer shown non-busy instructions (one without
    ``busy_only``). Pipe._run then does a flag that does not block in short."""
    if pipe.track >= 0 or device.ff is not None:
        return False
    for ob in device.observers:
        try:
            if not ob.busy_only:
                return False
        except AttributeError:
            return False
    return True


def source_line(program: Any) -> str | None:
    """"file.py:line" where a kernel generator (or the innermost one it delegates to) is paused."""
    gen = program
    while getattr(gen, "gi_yieldfrom", None) is not None and hasattr(gen.gi_yieldfrom, "gi_frame"):
        gen = gen.gi_yieldfrom
    frame = getattr(gen, "gi_frame", None)
    if frame is None:
        return None
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


class Pipe:
    """One in-order execution pipe of a core."""

    __slots__ = ("core", "name", "queue", "_depth", "_item_ev", "_space_ev", "busy_cycles",
                 "instructions", "head_pending", "head_paid", "track", "last_slice", "flow_from", "_waiting",
                 "env", "_tile_slice", "_tile_index", "proc", "idle_mark", "held", "current", "started",
                 "room", "large_from")

    def __init__(self, core: "Core", name: str, depth: int) -> None:
        self.core = core
        self.name = name
        self.env = core.env
        self.queue: deque = deque()
        self._depth = depth
        # depth - len(queue), kept as the queue changes: the dispatcher asks it for every push
        self.room = depth
        self._item_ev: simpy.Event | None = None
        self._space_ev: simpy.Event | None = None
        self.busy_cycles = 0
        self.instructions = 0
        self.head_pending = True
        self.head_paid = 0          # head cycles paid in the launch so far (see pay_head)
        # bytes of one load from which the head takes its large form (0: it has none); the spec
        # does not change during a run, so head_cycles reads it here instead of the spec
        self.large_from = large_head_from(core.device.spec, name)
        self.track = -1
        self.last_slice = -1
        self.flow_from = -1
        self._waiting: "Instruction | None" = None   # blocked on an event (see waiting_on)
        self.idle_mark: float | None = None     # core.blocked_clock() when it found its queue empty
        self.held = 0                           # idle cycles its next instruction was held back
        self._tile_slice = -1
        self._tile_index = -2
        self.current: "Instruction | None" = None   # issued, not yet complete (fast-forward reads it)
        self.started = 0     # cycle ``current`` was issued (an attribute: the fast-forward shifts it)
        self.proc = self.env.process(self._run())
        # SimPy's Process._resume appends ``self._resume`` to the event the process waits on at
        # every resumption, a new bound method each time; bound once and kept on the process it
        # is found first (an instance attribute shadows the method) and equal to a fresh one
        # (Process.interrupt removes it by equality): no allocation per pipe wake-up
        self.proc._resume = self.proc._resume        # type: ignore[method-assign]

    # -- queue ---------------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        """Entries the queue holds (flags included); ``room`` follows a change."""
        return self._depth

    @depth.setter
    def depth(self, depth: int) -> None:
        self.room += depth - self._depth
        self._depth = depth

    def full(self) -> bool:
        return len(self.queue) >= self.depth

    def space(self) -> simpy.Event:
        if self._space_ev is None:
            self._space_ev = self.env.event()
        return self._space_ev

    def push(self, instr: "Instruction") -> None:
        self.queue.append(instr)
        self.room -= 1
        ev = self._item_ev
        if ev is not None:
            self._item_ev = None
            ev.succeed()

    # -- execution -----------------------------------------------------------------------------
    def _run(self) -> Generator[simpy.Event, Any, None]:
        # SimPy's event calls are inline below (Event.succeed, env.timeout, env.schedule: the
        # queue entries they make, (time, NORMAL, next event id, event), in the same order), as
        # are SetFlag.complete and WaitFlag.issue with Core.set_flag / wait_flag (classes whose
        # ``inline_sync`` says they are theirs): a handful of Python calls per completion fewer,
        # the same events at the same times. Where one of those methods is replaced (a wrapper
        # that counts), it is called instead (_plain_env, _plain_core). env._queue is read each time: the fast-forward
        # replaces the list.
        env = self.env
        core = self.core
        device = core.device
        queue = self.queue
        flags = core.flags
        waiters = core.flag_waiters
        # whether SimPy's calls and the core's flag methods may be done inline (they are unless
        # replaced, see _plain_env / _plain_core): decided by the core for each block it starts,
        # read again whenever the pipe wakes from idle (a patch between launches is seen)
        plain = core.plain_env
        inline_flags = core.inline_flags
        # the STEP_* bits of Instruction.steps, as locals (isa imports this module's types)
        from opsim.simulator.isa import (STEP_BUSY, STEP_COMPLETES, STEP_ISSUES, STEP_OWN_BUSY,
                                         STEP_SET_FLAG, STEP_TIMING, STEP_WAIT_FLAG)
        sync_bits = STEP_SET_FLAG | STEP_WAIT_FLAG
        busy_bits = STEP_BUSY | STEP_OWN_BUSY
        # whether a flag that does not block may be done in short (_flags_quiet): nothing but
        # its effect on the flags is seen of it then. Asked again after every resumption and
        # after every instruction done the long way (an observer or an issue may change it);
        # a run of flags done in short runs no other code, so nothing can change it meanwhile
        quiet = False
        while True:
            if not queue:
                item = self._item_ev = _new(Event)      # Event(env), inline (see _new)
                item.env = env
                item.callbacks = []
                since = core.blocked_since          # core.blocked_clock(), inline
                self.idle_mark = core._blocked_acc + (env._now - since if since is not None else 0.0)
                yield item
                self.idle_mark = None
                plain = core.plain_env
                inline_flags = core.inline_flags
                quiet = inline_flags and _flags_quiet(self, device)
            instr = queue.popleft()
            self.room += 1
            space = self._space_ev
            if space is not None:
                self._space_ev = None
                if plain:
                    space._ok = True            # space.succeed()
                    space._value = None
                    heappush(env._queue, (env._now, NORMAL, next(env._eid), space))
                else:
                    space.succeed()
            if quiet:
                # a flag in short: a SetFlag, or a WaitFlag whose flag is set (one that must
                # wait goes the long way below). As the long way does it, without what it
                # does for nobody here: no trace on this pipe, no observer of flags, no
                # fast-forward (which reads ``current`` and ``started``), nothing held to
                # drop (a flag that does not wait leaves ``held``), no issue/complete to call
                steps = instr.steps
                if steps & sync_bits and not steps & busy_bits:
                    key = (instr.src, instr.dst, instr.event_id)
                    if steps & STEP_SET_FLAG:
                        if key in waiters:
                            ev = waiters[key]
                            del waiters[key]
                            if plain:
                                ev._ok = True       # ev.succeed()
                                ev._value = None
                                heappush(env._queue, (env._now, NORMAL, next(env._eid), ev))
                            else:
                                ev.succeed()
                        else:
                            flags[key] = flags[key] + 1 if key in flags else 1
                        continue
                    if key in flags:
                        n = flags[key]
                        if n > 0:
                            flags[key] = n - 1
                            continue
            self.current = instr
            # env._now, not the property env.now: a Python call, twice per instruction and flag
            # (simulated time is integral: LinkNetwork checks it)
            self.started = env._now    # type: ignore[assignment]
            try:
                # the class's STEP_* bits (Instruction.steps): its inline_sync, issues, completes
                # and busy in one class-attribute lookup (each is several times a slot's cost)
                steps = instr.steps
                sync = steps & sync_bits if inline_flags else 0
                if sync == STEP_WAIT_FLAG:
                    # WaitFlag.issue: Core.wait_flag, inline
                    key = (instr.src, instr.dst, instr.event_id)
                    n = flags[key] if key in flags else 0
                    if n > 0:
                        flags[key] = n - 1
                        wait = None
                    else:
                        if key in waiters:
                            raise SimulatorError(f"two pipes wait on flag {key}", core=core.name)
                        wait = waiters[key] = _new(Event)      # Event(env), inline
                        wait.env = env
                        wait.callbacks = []
                else:
                    # the base class's issue (no cost, no wait) and complete (no effect) are not
                    # called: most instructions that use them are flags (Instruction.issues)
                    wait = instr.issue(self) if steps & STEP_ISSUES else None
                # a wait is cycles (an int) or an event; the classes of events seen are kept,
                # so that telling them apart costs no isinstance call
                if wait is None:
                    timed = False
                else:
                    wcls = wait.__class__
                    timed = wcls is int or (wcls not in _EVENT_CLASSES and _is_cycles(wait))
                # (an instruction whose busy is its own -- a property, an instance attribute --
                # is asked, as Instruction.busy documents)
                busy = instr.busy if steps & STEP_OWN_BUSY else steps & STEP_BUSY
                if self.held:
                    if busy:
                        core.issue_starved[self.name] = core.issue_starved.get(self.name, 0) + self.held
                        self.held = 0
                    elif wait is not None and not timed:
                        self.held = 0            # a flag blocks it: it would have waited anyway
                if wait is not None:
                    if timed:
                        # (timed: an int, which mypy cannot tell from the flag)
                        cycles: int = wait       # type: ignore[assignment]
                        if cycles > 0:
                            if plain:
                                timer = _new(Event)   # env.timeout(cycles): Event(env), inline
                                timer.env = env
                                timer.callbacks = []
                                timer._ok = True
                                timer._value = None
                                heappush(env._queue, (env._now + cycles, NORMAL, next(env._eid), timer))
                                yield timer
                            else:
                                yield env.timeout(cycles)
                    else:
                        self._waiting = instr
                        yield wait
                        self._waiting = None
                if sync == STEP_SET_FLAG:
                    # SetFlag.complete: Core.set_flag, inline
                    key = (instr.src, instr.dst, instr.event_id)
                    if key in waiters:
                        ev = waiters[key]
                        del waiters[key]
                        if plain:
                            ev._ok = True       # ev.succeed()
                            ev._value = None
                            heappush(env._queue, (env._now, NORMAL, next(env._eid), ev))
                        else:
                            ev.succeed()
                    else:
                        flags[key] = flags[key] + 1 if key in flags else 1
                    # the producer of this hand-off is the last slice recorded on the source
                    # pipe (traced runs only: last_slice stays -1 without a trace)
                    if self.last_slice >= 0 and instr.dst in core.pipes:
                        core._flag_slices[key] = self.last_slice
                        # tile level: later work of this pipe starts a new slice, so the hand-off
                        # leaves from a slice that ends before the flag is set
                        self._tile_slice = -1
                elif steps & STEP_COMPLETES and (steps & STEP_TIMING or device.functional):
                    # a data_only complete (STEP_TIMING unset) does nothing
                    # unless the device is functional: not called in timing mode
                    instr.complete(self)
            except SimulatorError as exc:
                if getattr(exc, "origin", None) is None:
                    # the kernel source line of the faulting instruction (sanitizer, messages)
                    exc.origin = getattr(instr, "origin", None)
                raise exc.at(core=core.unit_name(self.name), pipe=self.name,
                             instruction=instr.describe()) from None
            end: int = env._now        # type: ignore[assignment]
            start = self.started
            self.current = None
            if busy:
                self.busy_cycles += end - start
                self.instructions += 1
            if self.track >= 0:
                core.record(self, instr, start, end)
            else:
                # record() without a trace, inline: the observers only (busy_only ones not for
                # flags; in default runs that is the profiler, the only observer)
                observers = device.observers
                if observers:
                    if busy:
                        for ob in observers:
                            ob.on_instruction(core, self, instr, start, end)
                    else:
                        for ob in observers:
                            # getattr(ob, "busy_only", False), without the call
                            try:
                                busy_only = ob.busy_only
                            except AttributeError:
                                busy_only = False
                            if not busy_only:
                                ob.on_instruction(core, self, instr, start, end)
            ff = device.ff
            if ff is not None:
                stream = core.stream
                if stream is not None and not ff._recording and not stream.sigs:
                    # FastForward.on_complete when it records nothing, inline: forget the
                    # instruction's stream index
                    stream.by_index.pop(stream.index.pop(id(instr), -1), None)
                else:
                    ff.on_complete(self, instr, start, end)
            elif inline_flags and self.track < 0:
                # _flags_quiet, the usual cases inline: no observer, or one shown busy ones only
                observers = device.observers
                if not observers:
                    quiet = True
                elif len(observers) == 1:
                    try:
                        quiet = True if observers[0].busy_only else False
                    except AttributeError:
                        quiet = False
                else:
                    quiet = _flags_quiet(self, device)
            else:
                quiet = False

    @property
    def waiting_on(self) -> str | None:
        """The instruction this pipe is blocked on (flag, DMA), described; None when not blocked.

        Described only when asked (deadlock reports): formatting it for every wait cost more
        than the wait itself."""
        instr = self._waiting
        return None if instr is None else instr.describe()

    @property
    def waiting_instr(self) -> "Instruction | None":
        """The instruction this pipe is blocked on (the sanitizer's deadlock report reads it)."""
        return self._waiting

    def head_cycles(self, load_bytes: int = 0) -> int:
        """One-off cost of this pipe's first busy instruction on its core in a launch (spec
        heads; ``load_bytes``: what the instruction loads, for MTE2's large-load head, see
        :func:`pay_head`); the launch remembers what was paid, so later blocks on this core
        pay no more of it than a larger load adds."""
        if not self.head_pending:
            return 0
        if self.head_paid and load_bytes < self.large_from:
            # a small load after the small head was paid (every MTE2 load of a small-load kernel
            # after its first): nothing is due and nothing changes -- pay_head's own early
            # return, without its call and the launch's dict write on the hot path
            return 0
        cycles = pay_head(self, load_bytes)
        core = self.core
        if core.launch is not None:
            core.launch.heads_paid[(core.name, self.name)] = (self.head_paid, self.head_pending)
        return cycles


class Core:
    """A vector core, cube core, coupled AI core or DSP core."""

    def __init__(self, device: "Device", kind: str, index: int, name: str, pipes: Iterable[str],
                 memories: dict[str, "Region"], *, load_pipe: str = "MTE2", store_pipe: str = "MTE3",
                 local_memory: str = "UB") -> None:
        self.device = device
        self.env = device.env
        self.kind = kind           # "aiv" | "aic" | "aicore" | "dsp"
        self.index = index         # index among cores of this kind (core-mask bit)
        self.name = name           # "core3.veccore1", "core3.cubecore0", "dsp.core2"
        self.memories = memories   # "UB", "L1", "L0A", "L0B", "L0C", "PRIVATE"
        self.load_pipe = load_pipe         # pipe that moves GM -> local memory
        self.store_pipe = store_pipe       # pipe that moves local memory -> GM
        self.local_memory = local_memory   # memory the vector unit computes in
        self._flag_slices: dict[tuple[str, str, int], int] = {}
        # whether the pipes may do SimPy's calls and the flag methods inline (Core.dispatch
        # decides again for each block)
        self.plain_env = _plain_env(self.env)
        self.inline_flags = _plain_core(self)
        depth = device.spec.scalar.queue_depth
        self.pipes: dict[str, Pipe] = {p: Pipe(self, p, depth) for p in pipes}
        self.flags: dict[tuple[str, str, int], int] = {}
        self.flag_waiters: dict[tuple[str, str, int], simpy.Event] = {}
        self.atomic: Any = None            # the dtype of SetAtomicAdd<T> while in effect (MTE3/DMA)
        self.launch: "Launch | None" = None
        self.context: "KernelContext | None" = None   # the running block's (KernelContext sets it)
        self.block_idx = -1
        self.tile = -1                     # tile index set by kernels, stamped on instructions
        self.blocks_run = 0
        # pipe -> cycles it sat idle with an empty queue while the dispatcher was blocked on
        # another pipe's full queue (work for it was held back by in-order issue)
        self.issue_starved: dict[str, int] = {}
        self.blocked_since: float | None = None
        self._blocked_acc = 0.0                  # cycles the dispatcher has spent blocked so far
        self.stream: Any = None                  # the running block's ProgramStream (fast-forward)
        trace = device.trace
        if trace is not None and trace.enabled:
            for p in self.pipes.values():
                p.track = trace.track(name, p.name)

    def memory(self, name: str) -> "Region":
        try:
            return self.memories[name]
        except KeyError:
            raise MemoryFault(f"{self.name} has no {name} (has: {', '.join(self.memories)})",
                              core=self.name) from None

    def unit_name(self, pipe: str | None) -> str:
        """The name a fault gives the part of this core whose ``pipe`` did the work.

        A coupled AI core has one trace process, ``core<i>.veccore0``, for all its pipes; the
        work of its cube unit (MTE1, CUBE, FIXP) is named ``core<i>.cube`` so that a cube fault
        does not read as a vector core's. Every other core is its trace name."""
        if self.kind == "aicore" and pipe in COUPLED_CUBE_UNIT_PIPES:
            return f"core{self.index}.cube"
        return self.name

    # -- costs ---------------------------------------------------------------------------------
    def head_cost(self, pipe: str, load_bytes: int = 0) -> int:
        concurrent = self.launch.concurrent_blocks if self.launch is not None else 1
        return pipe_head_cycles(self.device.spec, pipe, concurrent, load_bytes)

    # -- flags ---------------------------------------------------------------------------------
    # (``in`` and subscripts, not dict.get/pop: no Python call on a flag's common path)
    def set_flag(self, key: tuple[str, str, int]) -> None:
        waiters = self.flag_waiters
        if key in waiters:
            ev = waiters[key]
            del waiters[key]
            ev.succeed()
        else:
            flags = self.flags
            flags[key] = flags[key] + 1 if key in flags else 1

    def wait_flag(self, key: tuple[str, str, int]) -> simpy.Event | None:
        flags = self.flags
        n = flags[key] if key in flags else 0
        if n > 0:
            flags[key] = n - 1
            return None
        if key in self.flag_waiters:
            raise SimulatorError(f"two pipes wait on flag {key}", core=self.name)
        ev = self.env.event()
        self.flag_waiters[key] = ev
        return ev

    # -- observers and trace ---------------------------------------------------------------------
    def record(self, pipe: Pipe, instr: "Instruction", start: int, end: int) -> None:
        """Show a completed instruction to the device's observers and trace (Pipe._run calls it
        for every completion; without a trace it does the observer part inline)."""
        observers = self.device.observers
        if observers:
            # an observer whose ``busy_only`` is true is shown busy instructions only (asked per
            # completion: the list and the attribute may change during a run)
            if instr.busy:
                for ob in observers:
                    ob.on_instruction(self, pipe, instr, start, end)
            else:
                for ob in observers:
                    if not getattr(ob, "busy_only", False):
                        ob.on_instruction(self, pipe, instr, start, end)
        trace = self.device.trace
        if trace is None or pipe.track < 0:
            return
        if not instr.busy:
            # flags: remember the producer slice so the next consumer slice gets a flow arrow
            instr.trace_sync(pipe)
            return
        level = trace._level
        if level >= 3:  # instruction
            elements, nbytes, addr, detail = instr.trace_args()
            idx = trace.add_slice(pipe.track, instr.name, start, end, elements=elements,
                                  nbytes=nbytes, tile=instr.tile, addr=addr, detail=detail)
            if pipe.flow_from >= 0:
                trace.add_flow(pipe.flow_from, idx)
                pipe.flow_from = -1
            pipe.last_slice = idx
        elif level == 2:  # tile: merge a tile's instructions on this pipe
            elements, nbytes, _, detail = instr.trace_args()
            # ... between synchronisations: work after a flag wait that has a producer starts a
            # new slice (as does work after a flag set, SetFlag), so every flow arrow runs from
            # a slice that ended to one that starts later, never backwards in time
            if pipe._tile_index == instr.tile and pipe._tile_slice >= 0 and pipe.flow_from < 0:
                trace.extend_slice(pipe._tile_slice, end, elements=elements, nbytes=nbytes)
            else:
                name = f"tile {instr.tile}" if instr.tile >= 0 else instr.name
                pipe._tile_slice = trace.add_slice(pipe.track, name, start, end, elements=elements,
                                                   nbytes=nbytes, tile=instr.tile, detail=detail)
                pipe._tile_index = instr.tile
            ff = pipe.flow_from
            if ff >= 0:
                # one arrow per producer tile -> consumer tile hand-off (skip repeats)
                to = pipe._tile_slice
                if ff != to and not (trace.f_from and trace.f_from[-1] == ff and trace.f_to[-1] == to):
                    trace.add_flow(ff, to)
                pipe.flow_from = -1
            pipe.last_slice = pipe._tile_slice

    # -- running a block -----------------------------------------------------------------------
    def begin_block(self, launch: "Launch", block_idx: int) -> None:
        self.launch = launch
        self.block_idx = block_idx
        self.tile = -1
        self.atomic = None
        self.flags.clear()
        self._flag_slices.clear()
        paid = launch.heads_paid
        name = self.name
        for p in self.pipes.values():
            # the head is once per core and pipe per launch (docs/sources.md#mte-load-store: once
            # per kernel per pipe; assumption A-9): a core's later blocks of the launch do not
            # pay it again, only what a larger load adds to it
            p.head_paid, p.head_pending = paid.get((name, p.name), (0, True))
            p._tile_index = -2
            p.last_slice = p.flow_from = -1      # no trace links across blocks
        for region in self.memories.values():
            if region.backing != "sparse":
                region.reset()

    def blocked_clock(self) -> float:
        """Cycles the dispatcher has spent blocked on a full queue, up to now."""
        since = self.blocked_since
        return self._blocked_acc + (self.env.now - since if since is not None else 0.0)

    def dispatch(self, program: Iterator[Any], pending: list) -> Iterator[simpy.Event]:
        """Push the program's instructions into the pipe queues in order; wait for completion.

        Queue helpers (TQue alloc/enque/deque/free) append flag instructions to ``pending``
        while the generator runs; they precede the next yielded instruction in program order.
        :class:`~opsim.simulator.fastforward.ProgramStream` flattens the two into one numbered
        sequence, stamped with tile and source line as it is drawn (the fast-forward reads ahead
        in it), and the dispatcher holds one instruction at a time (``stream.held``).
        """
        from opsim.simulator.isa import BlockEnd  # local: isa imports core types
        from opsim.simulator.fastforward import ProgramStream
        stream = self.stream = ProgramStream(self, program, pending)
        pipes = self.pipes
        env = self.env
        plain = self.plain_env = _plain_env(env)
        self.inline_flags = _plain_core(self)
        ff = self.device.ff
        if ff is not None:
            ff.streams += 1
        try:
            for instr in stream:
                # push one instruction, waiting while its queue is full (inline, no helper
                # generator: this loop runs for every instruction and flag, and a quarter of
                # them find their queue full in the FLCE schedule)
                try:
                    pipe = pipes[instr.pipe]
                except KeyError:
                    pipe = self._pipe_for(instr)     # raises: this core has no such pipe
                if pipe.room <= 0:             # len(pipe.queue) >= pipe.depth
                    self.blocked_since = env._now
                    while True:
                        space = pipe._space_ev
                        if space is None:
                            space = pipe._space_ev = _new(Event)   # Event(env), inline
                            space.env = env
                            space.callbacks = []
                        yield space
                        if pipe.room > 0:
                            break
                    # (the attribute, not a local: the fast-forward shifts it while blocked)
                    self._blocked_acc += env._now - self.blocked_since
                    self.blocked_since = None
                if pipe.idle_mark is not None:
                    # the pipe waited for this instruction; the part of the wait during which
                    # the dispatcher was blocked on another queue was imposed by in-order issue
                    # -- if the pipe can then go straight to work (Pipe._run drops it if a flag
                    # still blocks)
                    pipe.held = max(0, int(self._blocked_acc - pipe.idle_mark))
                    pipe.idle_mark = None
                pipe.queue.append(instr)
                pipe.room -= 1
                item = pipe._item_ev
                if item is not None:
                    pipe._item_ev = None
                    if plain:
                        item._ok = True             # item.succeed(), inline as in Pipe._run
                        item._value = None
                        heappush(env._queue, (env._now, NORMAL, next(env._eid), item))
                    else:
                        item.succeed()
                stream.held = None
        except SimulatorError as exc:
            raise exc.at(core=self.name) from None
        finally:
            self.stream = None
            if ff is not None:
                ff.streams -= 1
        ends = [BlockEnd(self.env) for _ in self.pipes]
        for p, end in zip(self.pipes.values(), ends):
            while p.full():
                yield p.space()
            p.push(end)
        yield simpy.AllOf(self.env, [d.event for d in ends])
        self.blocks_run += 1

    def _pipe_for(self, instr: "Instruction") -> Pipe:
        pipe = self.pipes.get(instr.pipe)
        if pipe is None:
            raise UnsupportedInstruction(
                f"{instr.name} needs pipe {instr.pipe}, which {self.name} does not have "
                f"(pipes: {', '.join(self.pipes)})", core=self.name, instruction=instr.describe())
        return pipe

    def pipe_busy(self) -> dict[str, int]:
        return {name: p.busy_cycles for name, p in self.pipes.items()}


# Core's own flag methods, as defined above (_plain_core compares with them)
_SET_FLAG = Core.set_flag
_WAIT_FLAG = Core.wait_flag
