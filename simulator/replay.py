"""Replay: a fast estimate of a launch's cycles from the kernel program itself (mode "estimate").

The replay runs the same kernel generators the simulator runs, through the same instruction
objects: each instruction's cost is what its own ``issue`` returns (vector ``k·N + b`` tables,
L1->L0 rates, Mmad fractals, pipe heads), and a DMA's transfers are the ones
``Device.gm_transfer`` plans (start-up, per-core rate ``base`` + pool share, the GM/L2 link, L2
hits and write-backs) -- only the fluid link network is replaced by :class:`ReplayNet`, which
records each transfer instead of simulating it. Nothing here restates a cost formula.

Timing is a plain list scheduler without SimPy (:func:`replay_block`): per core a dispatcher that
pushes the program in order into per-pipe queues of ``scalar.queue_depth`` entries, in-order
pipes, the kernel's own TQue/intra-core flags (``Core.set_flag``/``wait_flag``) and cross-core
flags (``Device.cross_flags``). A transfer's rate is fixed when it starts: every concurrently
running block is assumed to do the same at the same time (lockstep), so a link or pool is
shared by ``blocks × transfers this block has in flight on it`` (fair share). A rate fixed at
the start can take more of a link than is left of it later on (a store that started alone keeps
the whole share when an L2 hit joins it), which stands in for the simulator's blocks drifting
apart; but the lockstep blocks together never move more over a link than it carries in their
time: a block takes at least ``blocks × its bytes on the link / bandwidth`` (:func:`replay_block`).

Only a sample of blocks is replayed (:func:`sample_blocks`: the first, a middle one and the last,
and the first block of the second wave, which finds its core's pipe heads paid -- all but what
a larger load adds to MTE2's small head (A-10), which it takes from the samples of the blocks
its core ran before it (:func:`replay_launch`); the others take
the duration of the nearest sample below them), and inside a block a steady
state is extrapolated (:class:`_Steady`): once the scheduler's state one period of the
instruction stream later is the same up to a time shift, the remaining identical periods are
counted, not scheduled.
"""
from __future__ import annotations

import heapq
import math
import operator
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import simpy

from opsim.devices.spec import DeviceSpec
from opsim.simulator.core import large_head_from, pay_head
from opsim.simulator.device import CrossCoreFlags, Device, Launch, MixKernel
from opsim.simulator.errors import DeadlockError, SimulatorError, UnsupportedInstruction
from opsim.simulator.isa import Instruction, WaitFlag
from opsim.simulator.l2 import L2Cache
from opsim.simulator.tile import KernelContext


class _Transfer(simpy.Event):
    """A transfer ``Device.gm_transfer`` asked for: priced by the replay, never simulated."""

    def __init__(self, env: simpy.Environment, nbytes: int, base: float, links: tuple, pool: Any,
                 startup: int) -> None:
        super().__init__(env)
        self.nbytes, self.base, self.links, self.pool, self.startup = nbytes, base, links, pool, startup
        self.stored = False     # a store a write-back L2 takes (ReplayDevice.gm_transfer marks it)
        # dirty lines the replayed block's own L2 model evicted (ReplayDevice._with_writeback marks it)
        self.written_back = False


class ReplayNet:
    """Stands in for :class:`~opsim.simulator.links.LinkNetwork` on a replay device: a transfer
    is recorded with its route and rates and returned as an event the replay prices."""

    def __init__(self, env: simpy.Environment, links: dict, pools: dict) -> None:
        self.env = env
        self.links = links
        self.pools = pools
        self.on_change = None

    def transfer(self, nbytes: int, *, base_rate: float, links: Sequence[Any] = (), pool: Any = None,
                 startup: int = 0, tag: object = None) -> simpy.Event:
        return _Transfer(self.env, int(nbytes), float(base_rate), tuple(links), pool, int(startup))


class _ReplayL2(L2Cache):
    """The simulator's L2 model with one addition for the replay: ``adjust`` hit bytes the next
    read's total is corrected by (:meth:`ReplayDevice.gm_transfer`, lines shared with blocks
    not replayed)."""

    adjust = 0

    def access_runs(self, runs: Any, *, write: bool) -> int:
        hit = super().access_runs(runs, write=write)
        if not write and self.adjust:
            hit, self.adjust = max(0, hit + self.adjust), 0
        return hit


def _replay_l2(spec: DeviceSpec) -> _ReplayL2 | None:
    l2 = spec.l2
    return None if l2 is None else _ReplayL2(l2.size, l2.chunk, write_back=l2.write_policy == "write-back")


class ReplayDevice(Device):
    """A timing-only device whose launches are recorded, not run: :func:`replay_launches`
    computes their cycles. Memory, cores, L2 model and instruction checks are the simulator's."""

    def __init__(self, spec: DeviceSpec, *, seed: int = 0) -> None:
        super().__init__(spec, trace=None, functional=False, seed=seed)
        net: Any = vars(self)["net"]   # the LinkNetwork Device built: its links and pools stay
        # a ReplayNet stands in for the LinkNetwork (it records transfers, it does not share links)
        self.net = ReplayNet(self.env, net.links, net.pools)  # type: ignore[assignment]
        # of the bytes a write-back L2 takes, the share written back to HBM within the call: what
        # the replayed blocks' L2 model cannot show (it sees only their lines); replay_estimate sets it
        self.writeback_share = 0.0

        # GM allocations the replayed blocks read / wrote in the current launch: (addr, size) -> write
        self.touched: dict[tuple[int, int], bool] = {}
        # (addr, bytes), write: ranges an earlier launch left in the L2, not yet in the model
        self.assumed: list[tuple[tuple[int, int], bool]] = []
        self.l2 = _replay_l2(spec)
        # while a block is replayed: per allocation read, the lowest and highest byte it read
        # (replay_block), then the lines at those ends that blocks not replayed share: line ->
        # the share of the line's bytes in the allocation that the block reads
        self.footprint: dict[tuple[int, int], list[int]] | None = None
        self.shared_lines: dict[int, float] = {}
        # while a tile loop runs (_Steady): the GM accesses (addr, bytes, write) since its last tile
        self.gm_log: list[tuple[int, int, bool]] | None = None

    def synchronize(self, stream: Any = None) -> None:
        """Launches are replayed by :func:`replay_launches`, not by running simulated time."""

    def recycle(self) -> None:
        """Make the device as new for the next call (building one costs as much as a replay):
        every allocation freed, an empty L2, no launches, streams or flags, statistics cleared."""
        self.gm.reset()
        if self.spec.smc is not None:
            self.smc.reset()
        self.l2 = _replay_l2(self.spec)
        self.touched, self.assumed = {}, []
        self.launches.clear()
        self.streams.clear()
        # the recorded launches queued SimPy work that never runs: drop it with the launches
        self.env._queue.clear()
        self.cross_flags = CrossCoreFlags(self.env)
        self.bytes_read = self.bytes_written = 0
        self.link_bytes.clear()
        self.faulted = None
        for core in self.all_cores():
            if core.launch is None:
                # no block began on it since the last recycle (Core.begin_block sets launch),
                # so it is as that recycle left it: skip the per-region resets (most of a
                # recycle on a device of 72 cores where a replay uses one to three)
                continue
            core.launch, core.blocks_run, core.atomic = None, 0, None
            core.flags.clear()
            core.flag_waiters.clear()      # a deadlocked replay leaves its waiter behind
            for region in core.memories.values():
                region.reset()
                region.peak_allocated_bytes = 0

    def save_replay(self, launch: Launch) -> tuple:
        """What replaying a block of ``launch`` changes on the device -- the L2 model, the
        ranges assumed resident, the tensors touched, the byte counts -- for
        :meth:`restore_replay`: a block replayed again must find the device as before."""
        return (self.l2.save_state() if self.l2 is not None else None, list(self.assumed), dict(self.touched),
                dict(self.link_bytes), dict(launch.link_bytes), self.bytes_read, self.bytes_written)

    def restore_replay(self, launch: Launch, state: tuple) -> None:
        """Put back a state :meth:`save_replay` took."""
        l2, assumed, touched, link_bytes, launch_bytes, self.bytes_read, self.bytes_written = state
        if l2 is not None:
            assert self.l2 is not None
            self.l2.restore_state(l2)
        self.assumed, self.touched = list(assumed), dict(touched)
        self.link_bytes.clear()
        self.link_bytes.update(link_bytes)
        launch.link_bytes.clear()
        launch.link_bytes.update(launch_bytes)

    def gm_transfer(self, pipe: Any, addr: int, nbytes: int, *, write: bool, **kw: Any) -> simpy.Event:
        if self.gm_log is not None:
            self.gm_log.append((addr, nbytes, write))
        alloc = self.gm.allocation_at(addr)
        if alloc is not None:
            key = (alloc.addr, alloc.nbytes)
            self.touched[key] = self.touched.get(key, False) or write
            # (a plain read: one run of bytes, as the L2 model sees it)
            if not write and nbytes > 0 and kw.get("ranges") is None and kw.get("geometry") is None:
                if self.footprint is not None:
                    span = self.footprint.setdefault(key, [addr, addr + nbytes])
                    span[0], span[1] = min(span[0], addr), max(span[1], addr + nbytes)
                if self.shared_lines:
                    self._share_lines(addr, nbytes, pipe)
        if self.assumed and self.l2 is not None:
            self._warm(addr, nbytes)
        ev = super().gm_transfer(pipe, addr, nbytes, write=write, **kw)
        if write and self.l2 is not None and self.l2.write_back:
            for p in _parts(ev) or ():
                if self.l2_link in p.links:
                    p.stored = True
        return ev

    def _with_writeback(self, event: simpy.Event, tag: str, launch: Launch | None) -> simpy.Event:
        """As the simulator joins them, with the write-back part marked: :meth:`_Scheduler.link_bound`
        must not price again the write-backs the replayed block's L2 model already evicted."""
        out = super()._with_writeback(event, tag, launch)
        if out is not event and isinstance(out, simpy.events.Condition):
            wb = out._events[-1]            # Device._with_writeback appends the HBM write last
            if isinstance(wb, _Transfer):
                wb.written_back = True
        return out

    def shared_ends(self, chunk: int) -> dict[int, float]:
        """The lines at the ends of what the replayed block read of each allocation (its
        ``footprint``) that the allocation's bytes beyond the block also fill: line -> the
        block's share of the line's bytes in the allocation. The blocks next to it in the
        tensor (a split into ranges) read the rest of the line (lines of ``chunk`` bytes)."""
        out: dict[int, float] = {}
        c = chunk
        for (a, n), (lo, hi) in (self.footprint or {}).items():
            for line in {lo // c, (hi - 1) // c}:
                first, last = max(line * c, a), min((line + 1) * c, a + n)
                if first < lo or last > hi:
                    out[line] = (min(last, hi) - max(first, lo)) / (last - first)
        return out

    def _share_lines(self, addr: int, nbytes: int, pipe: Any) -> None:
        """A read reaching a line it shares with blocks not replayed (:meth:`shared_ends`) for
        the first time: in the simulator the first block to read a line misses it and the
        others hit, and the blocks next to each other run at the same time, so whichever comes
        first is a matter of drift -- the block misses in its share of the line's bytes
        (the expectation when each sharer is first in proportion to its bytes)."""
        l2 = self.l2
        launch = pipe.core.launch
        if not isinstance(l2, _ReplayL2) or (launch is not None and launch.l2_sample is not None):
            return
        c = l2.chunk
        for line in {addr // c, (addr + nbytes - 1) // c}:
            share = self.shared_lines.pop(line, None)
            if share is None:
                continue
            lo, hi = max(addr, line * c), min(addr + nbytes, (line + 1) * c)
            # touched here first (the transfer touches it again, then as a hit): was it resident?
            if l2.access(lo, hi - lo, write=False, count=False) == 0:
                l2.adjust -= round((hi - lo) * share)

    def settle_l2(self) -> None:
        """After a launch: every tensor the replayed blocks touched counts as touched in full
        (the blocks and tiles not replayed cover the rest of it) -- reads first, then writes --
        so a later launch finds in the L2 what the simulator's would. Kept as ranges assumed
        resident (the last L2-size bytes, LRU), put into the L2 model only when a replayed
        transfer reaches them: a whole tensor line by line would cost more than the replay."""
        l2 = self.l2
        touched, self.touched = self.touched, {}
        if l2 is None:
            return
        ordered = [*self.assumed, *((r, w) for write in (False, True) for r, w in touched.items() if w == write)]
        keep: list[tuple[tuple[int, int], bool]] = []
        room = l2.capacity_chunks * l2.chunk
        for (addr, n), w in reversed(ordered):
            if room <= 0:
                break
            take = min(n, room)
            keep.append(((addr + n - take, take), w))
            room -= take
        self.assumed = keep[::-1]
        # what the L2 holds now is exactly those ranges (the model fills them as they are reached):
        # lines of the replayed blocks outside them were evicted by the tiles not replayed
        self.l2 = _replay_l2(self.spec)

    def _warm(self, addr: int, nbytes: int) -> None:
        """Put the assumed-resident part of [addr, addr + nbytes) into the L2 model, once."""
        end = addr + nbytes
        l2 = self.l2
        assert l2 is not None                   # only a device with an L2 assumes residency
        out: list[tuple[tuple[int, int], bool]] = []
        for (a, n), w in self.assumed:
            lo, hi = max(a, addr), min(a + n, end)
            if lo >= hi:
                out.append(((a, n), w))
                continue
            l2.access(lo, hi - lo, write=w, count=False)
            l2.take_writeback()
            if a < lo:
                out.append(((a, lo - a), w))
            if hi < a + n:
                out.append(((hi, a + n - hi), w))
        self.assumed = out


def _parts(ev: Any) -> list[_Transfer] | None:
    """The transfers behind the event an instruction's issue returned (None: another event)."""
    if isinstance(ev, _Transfer):
        return [ev]
    if isinstance(ev, simpy.events.Condition):
        out: list[_Transfer] = []
        for e in ev._events:
            p = _parts(e)
            if p is None:
                return None
            out.extend(p)
        return out
    return None


class _RPipe:
    """The view of a pipe an instruction's issue/complete needs (see simulator/core.Pipe).

    Duck-typed: instructions declare ``core.Pipe`` and are handed this; the ``arg-type`` /
    ``assignment`` ignores where the scheduler passes it say no more than that."""

    __slots__ = ("core", "name", "head_pending", "head_paid", "last_slice", "flow_from", "queue", "free_at",
                 "current", "blocked", "busy", "instructions")

    def __init__(self, core: Any, name: str) -> None:
        self.core, self.name = core, name
        self.head_pending = True
        self.head_paid = 0
        self.last_slice = self.flow_from = -1
        self.queue: deque = deque()
        self.free_at = 0          # end of the instruction in progress
        self.current: Instruction | None = None
        self.blocked: simpy.Event | None = None
        self.busy = 0
        self.instructions = 0

    def head_cycles(self, load_bytes: int = 0) -> int:
        return pay_head(self, load_bytes)     # as core.Pipe: MTE2's large-load head (A-10)


def _located(exc: SimulatorError, pipe: _RPipe, instr: Instruction) -> SimulatorError:
    """``exc`` placed as the simulator's pipe places a fault (core/Pipe._run): the part of the core
    that did the work, the pipe, the instruction and its kernel source line."""
    if getattr(exc, "origin", None) is None:
        exc.origin = getattr(instr, "origin", None)
    core = pipe.core
    unit = core.unit_name(pipe.name) if hasattr(core, "unit_name") else core.name
    return exc.at(core=unit, pipe=pipe.name, instruction=instr.describe())


def _stream(program: Iterator[Any], pending: list) -> Iterator[Instruction]:
    """The program's instructions in dispatch order (queue flags before the next yielded one)."""
    for item in program:
        if pending:
            yield from pending
            pending.clear()
        if item is None:
            continue
        if not isinstance(item, Instruction):
            raise SimulatorError(f"kernel yielded {item!r}, which is not an instruction")
        yield item
    if pending:
        yield from pending
        pending.clear()


@dataclass
class _Program:
    core: Any
    pipes: dict[str, _RPipe]
    instrs: Iterator[Instruction]
    pending: list = field(default_factory=list)
    next: Instruction | None = None
    done: bool = False
    dispatched: int = 0
    pipe_list: list[_RPipe] = field(default_factory=list)   # pipes.values(), walked at every step

    def __post_init__(self) -> None:
        self.pipe_list = list(self.pipes.values())


@dataclass
class BlockReplay:
    """What replaying one block (or one group of a mixed launch) gave."""

    cycles: int
    pipe_busy: dict[str, int]
    instructions: int
    skipped_tiles: int = 0      # tiles the steady state counted instead of scheduling
    # (core, pipe) -> (head cycles paid, whether a larger load could still add to them) at the
    # block's end, for the pipes with a large-load head that paid one (MTE2, assumption A-10)
    heads: dict[tuple[str, str], tuple[int, bool]] = field(default_factory=dict)


HeadsPaid = dict[tuple[str, str], int]
"""(core, pipe) -> the small head a block's core paid with its earlier blocks of the launch,
which a large load may still raise (A-10); see :func:`replay_launch`."""


STORED = -1          # the key of the stores into a write-back L2 in _Scheduler.moved
WRITTEN_BACK = -2    # ... and of the dirty lines the block's own L2 model evicted (on the GM link too)

_SIGNATURE_FIELDS = ("count", "_nbytes", "event_id", "m", "n", "k", "repeat")
# instruction class -> (the signature fields its instances can have, a getter of them or None):
# every field for a class whose instances carry a __dict__ (no getter: each is read with a
# default), else those the class (its slots) defines -- the others are absent in every instance,
# so leaving them out compares the same
_SIGNATURE_PLANS: dict[type, tuple[tuple[str, ...], Any]] = {}


def _signature_plan(cls: type) -> tuple[tuple[str, ...], Any]:
    if cls.__dictoffset__:
        return _SIGNATURE_FIELDS, None
    names = tuple(f for f in _SIGNATURE_FIELDS if hasattr(cls, f))
    return names, operator.attrgetter(*names) if names else None


def _signature(instr: Instruction) -> tuple:
    """What the cost of an instruction depends on besides addresses (for the steady state)."""
    cls = type(instr)
    plan = _SIGNATURE_PLANS.get(cls)
    if plan is None:
        plan = _SIGNATURE_PLANS[cls] = _signature_plan(cls)
    names, get = plan
    if get is not None:
        try:
            return (cls, instr.pipe, get(instr))
        except AttributeError:      # a slot left unset: absent, as below
            pass
    if not names:
        return (cls, instr.pipe)
    if len(names) == 1:             # the getter's shape: one value, else a tuple of them
        return (cls, instr.pipe, getattr(instr, names[0], None))
    return (cls, instr.pipe, tuple([getattr(instr, f, None) for f in names]))


class _Steady:
    """Steady-state extrapolation of a kernel's tile loop (``KernelContext.tiles``).

    At the start of every tile the scheduler's state relative to the current cycle (each pipe's
    instruction in progress and queue, the flags, the transfers in flight, what the dispatcher
    holds) is compared with the state 1..MAX_PERIOD tiles earlier. Once it repeats, every later
    period of tiles would take the same cycles, so the loop jumps to the last tile and the
    scheduler's clock, busy cycles and pending ends move on by the periods skipped.

    The cost of a GM transfer depends on its address through the L2 model (the lines it
    touches, the bytes of them already resident), which the state leaves out. So the state of a
    tile also holds the GM accesses issued since the previous tile began: each one's address
    within its L2 line and its step from the same access one tile earlier. Two tiles whose
    accesses sit at the same line phase and step alike are followed by tiles at the same
    phases: a 4000 B tile (not a whole number of 512 B lines) repeats only every 16 tiles
    (line / gcd(tile bytes, line)), and a coincidence of the state at a shorter period is not
    taken for one. (The L2 model does not see the skipped tiles: a tile after the jump that
    reads the rest of a line the last skipped tile began misses it where the full replay hits.)"""

    MAX_PERIOD = 32

    def __init__(self, sched: "_Scheduler", prog: "_Program", dev: Any = None) -> None:
        self.sched, self.prog = sched, prog
        self.skipped_tiles = 0
        # the GM accesses of the tiles (ReplayDevice.gm_log), to tell the line phase of each
        self.dev = dev if isinstance(dev, ReplayDevice) else None
        self.chunk = self.dev.l2.chunk if self.dev is not None and self.dev.l2 is not None else 0

    def _accesses(self, prev: list) -> tuple[list, tuple]:
        """The GM accesses logged since the last call and their key: per access its line phase,
        size, direction and step from the same access of the previous tile (None if the tiles
        differ in their accesses)."""
        dev = self.dev
        if dev is None or not self.chunk:
            return [], ()
        log, dev.gm_log = dev.gm_log or [], []
        c = self.chunk
        same = len(prev) == len(log)
        key = tuple([(a % c, n, w, (a - prev[i][0]) if same else None) for i, (a, n, w) in enumerate(log)])
        return log, key

    def loop(self, count: int) -> Iterator[int]:
        sched = self.sched
        dev = self.dev
        if dev is not None:
            dev.gm_log = []
        history: list[tuple[tuple, int, dict[str, int], dict[int, float]]] = []
        log: list = []
        t = 0
        jumped = False
        try:
            while t < count:
                if not jumped:
                    log, key = self._accesses(log)
                    snap = (sched.snapshot(self.prog), key)
                    now = sched.now
                    busy = {n: p.busy for n, p in self.prog.pipes.items()}
                    moved = dict(sched.moved)
                    for period in range(1, min(self.MAX_PERIOD, len(history)) + 1):
                        old, then, obusy, omoved = history[-period]
                        if old != snap:
                            continue
                        repeats = (count - 1 - t) // period
                        if repeats > 0:
                            sched.shift(self.prog, repeats * (now - then),
                                        {n: repeats * (b - obusy[n]) for n, b in busy.items()},
                                        {k: repeats * (b - omoved.get(k, 0.0)) for k, b in moved.items()})
                            t += repeats * period
                            self.skipped_tiles += repeats * period
                            jumped = True
                        break
                    history.append((snap, now, busy, moved))
                    if len(history) > self.MAX_PERIOD:
                        history.pop(0)
                yield t
                t += 1
        finally:
            if dev is not None:
                dev.gm_log = None


class _Scheduler:
    """The list scheduler of one block (one core, or the cores of a mixed group)."""

    def __init__(self, spec: DeviceSpec, share: int, heads: bool = True,
                 raisable: HeadsPaid | None = None) -> None:
        self.spec = spec
        self.depth = spec.scalar.queue_depth
        self.share = max(1, share)               # blocks running at once (lockstep copies)
        self.heads = heads                       # the block is its core's first of the launch
        self.raisable = raisable or {}           # else: the small heads its core paid before it
        self.inflight: dict[int, list[int]] = {}   # id(link or pool) -> end times of transfers
        self.moved: dict[int, float] = {}            # id(link) -> bytes this block moved over it
        self.capacity: dict[int, float] = {}         # id(link) -> its bytes/cycle
        # (under the key STORED in ``moved``: the bytes of its stores a write-back L2 took)
        self.now = 0
        self.programs: list[_Program] = []
        self.events: list[tuple[int, int, _RPipe]] = []
        self._seq = 0

    def add(self, core: Any, program: Iterator[Any], pending: list) -> _Program:
        pipes = {name: _RPipe(core, name) for name in core.pipes}
        for p in pipes.values():
            p.head_pending = self.heads          # a core pays a pipe head once per launch
            paid = self.raisable.get((core.name, p.name), 0) if not self.heads else 0
            if paid:
                # a later block on a core that paid only MTE2's small head: a large load pays
                # the difference (pay_head, as the simulator's Core.begin_block carries it over)
                p.head_paid, p.head_pending = paid, True
        prog = _Program(core, pipes, _stream(program, pending), pending=pending)
        self.programs.append(prog)
        return prog

    # -- steady state ----------------------------------------------------------------------------
    def snapshot(self, prog: _Program) -> tuple:
        """The state of ``prog``'s core relative to now (see :class:`_Steady`)."""
        now = self.now
        sig = _signature
        pipes = tuple([(p.current is not None and (sig(p.current), p.free_at - now, p.blocked is not None),
                        tuple(map(sig, p.queue)), p.head_pending, p.head_paid) for p in prog.pipe_list])
        core = prog.core
        flights = tuple(sorted((k, tuple(sorted(e - now for e in ends if e > now)))
                               for k, ends in self.inflight.items()))
        return (pipes, tuple(sorted(core.flags.items())), tuple(sorted(core.flag_waiters)),
                tuple(map(sig, prog.pending)),
                prog.next is not None and sig(prog.next), flights, core.atomic)

    def shift(self, prog: _Program, cycles: int, busy: dict[str, int], moved: dict[int, float]) -> None:
        """Move the clock on by ``cycles`` skipped (the state repeats, shifted), adding the
        busy cycles and the bytes moved over each link of the skipped periods."""
        self.now += cycles
        for k, b in moved.items():
            self.moved[k] = self.moved.get(k, 0.0) + b
        for p in prog.pipes.values():
            if p.current is not None:
                p.free_at += cycles
            p.busy += busy.get(p.name, 0)
        self.events = [(t + cycles, seq, p) for t, seq, p in self.events]
        heapq.heapify(self.events)
        self.inflight = {k: [e + cycles for e in ends] for k, ends in self.inflight.items()}

    # -- costs -----------------------------------------------------------------------------------
    def _price(self, parts: list[_Transfer]) -> int:
        """Cycles of a DMA's transfers started now: each at its own rate (base + pool share),
        capped by its fair share of every link it crosses; the DMA ends with its last part."""
        now = self.now
        share = self.share
        longest = 0
        for p in parts:
            rate = p.base
            if p.pool is not None:
                rate += p.pool.capacity / (share * self._count(p.pool, now))
            for link in p.links:
                fair = link.capacity / (share * self._count(link, now))
                if fair < rate:
                    rate = fair
            d = p.startup + (math.ceil(p.nbytes / rate) if p.nbytes else 0)
            if d > longest:
                longest = d
        end = now + longest
        inflight = self.inflight
        moved, capacity = self.moved, self.capacity
        for p in parts:
            for r in p.links:
                inflight.setdefault(id(r), []).append(end)
                moved[id(r)] = moved.get(id(r), 0.0) + p.nbytes
                capacity[id(r)] = r.capacity
            if p.stored:
                moved[STORED] = moved.get(STORED, 0.0) + p.nbytes
            elif p.written_back:
                moved[WRITTEN_BACK] = moved.get(WRITTEN_BACK, 0.0) + p.nbytes
            if p.pool is not None:
                inflight.setdefault(id(p.pool), []).append(end)
        return longest

    def _count(self, resource: Any, now: int) -> int:
        ends = self.inflight.get(id(resource))
        if not ends:
            return 1
        live = [e for e in ends if e > now]
        self.inflight[id(resource)] = live
        return 1 + len(live)

    # -- execution -------------------------------------------------------------------------------
    def _start(self, pipe: _RPipe, instr: Instruction) -> None:
        """``pipe`` pops ``instr`` now: issue it (checks and cost, as the simulator does)."""
        try:
            wait = instr.issue(pipe)  # type: ignore[arg-type]
        except SimulatorError as exc:
            raise _located(exc, pipe, instr) from None
        pipe.current = instr
        if wait is None:
            d = 0
        elif isinstance(wait, int):
            d = wait
        else:
            parts = _parts(wait)
            if parts is None:           # a flag: blocked until it is set
                if wait.triggered:
                    d = 0
                else:
                    pipe.blocked = wait
                    return
            else:
                d = self._price(parts)
        self._run_for(pipe, instr, d)

    def _run_for(self, pipe: _RPipe, instr: Instruction, d: int) -> None:
        now = self.now
        d = int(d)
        end = now + d if d > 0 else now
        pipe.free_at = end
        if instr.busy:
            pipe.busy += end - now
            pipe.instructions += 1
        if end > now:
            self._seq += 1
            heapq.heappush(self.events, (end, self._seq, pipe))
        else:
            # _finish, inline (most flags and every zero-cost instruction end here)
            pipe.current = None
            try:
                instr.complete(pipe)  # type: ignore[arg-type]
            except SimulatorError as exc:
                raise _located(exc, pipe, instr) from None

    def _finish(self, pipe: _RPipe) -> None:
        instr = pipe.current
        pipe.current = None
        if instr is not None:
            try:
                instr.complete(pipe)  # type: ignore[arg-type]
            except SimulatorError as exc:
                raise _located(exc, pipe, instr) from None

    def _step(self) -> bool:
        """Do everything possible at ``now``; True if anything happened."""
        progress = False
        depth = self.depth
        for prog in self.programs:
            pipes = prog.pipes
            # pipes: finished instructions, released flags, next pops
            again = True
            while again:
                again = False
                for pipe in prog.pipe_list:
                    blocked = pipe.blocked
                    if blocked is not None:
                        if not blocked.triggered:
                            continue
                        pipe.blocked = None
                        self._run_for(pipe, pipe.current, 0)  # type: ignore[arg-type]
                        again = progress = True
                    if pipe.queue and pipe.current is None and pipe.free_at <= self.now:
                        self._start(pipe, pipe.queue.popleft())
                        again = progress = True
                # dispatcher: push in program order while the target queue has room
                while not prog.done:
                    instr = prog.next
                    if instr is None:
                        instr = prog.next = next(prog.instrs, None)
                        if instr is None:
                            prog.done = True
                            break
                    pipe = pipes.get(instr.pipe)  # type: ignore[assignment]
                    if pipe is None:
                        raise UnsupportedInstruction(
                            f"{instr.name} needs pipe {instr.pipe}, which {prog.core.name} does not have "
                            f"(pipes: {', '.join(pipes)})", core=prog.core.name, instruction=instr.describe())
                    if len(pipe.queue) >= depth:
                        break
                    instr.tile = prog.core.tile
                    pipe.queue.append(instr)
                    prog.next = None
                    prog.dispatched += 1
                    again = progress = True
        return progress

    def run(self) -> int:
        """Replay to the end; the cycles from the block's start to its last instruction's end."""
        end = 0
        # With one program, a step that made progress ended with a round that made none (and
        # the kernel code it ran in that round sets no flag): a second step would find nothing
        # to do. Only the programs of a mixed group can unblock each other across a step.
        single = len(self.programs) == 1
        while True:
            if single:
                self._step()
            else:
                while self._step():
                    pass
            # retire everything that ends at the next event time
            events = self.events       # (a step may replace the list: shift)
            if events:
                t = events[0][0]
                self.now = t
                while events and events[0][0] == t:
                    self._finish(heapq.heappop(events)[2])
                if t > end:
                    end = t
                continue
            if all(p.done for p in self.programs) and not any(
                    pp.queue or pp.current is not None for p in self.programs for pp in p.pipes.values()):
                return max(end, self.now)
            # only flags block. A cross-core wait on blocks that are not replayed (a barrier such
            # as SyncAll across the launch) passes now: identical cores in lockstep reach it
            # together. A core waiting on its own flags can never go on: the kernel deadlocks.
            blocked = [pp for p in self.programs for pp in p.pipes.values() if pp.blocked is not None]
            cross = [pp for pp in blocked if not isinstance(pp.current, WaitFlag)]
            if not cross:
                waiting = [f"{pp.core.name}.{pp.name}: {pp.current.describe()}" for pp in blocked
                           if pp.current is not None]
                raise DeadlockError("no instruction can make progress", waiting=waiting)
            pipe = cross[0]
            pipe.blocked = None
            self._run_for(pipe, pipe.current, 0)  # type: ignore[arg-type]

    def link_bound(self, gm_link: Any = None, writeback_share: float = 0.0) -> int:
        """The fewest cycles in which the lockstep blocks' bytes fit through every link: with
        ``writeback_share`` of their stores into a write-back L2 written back over ``gm_link``.
        The write-backs the block's own L2 model evicted are on the GM link already (all of them
        when the block is the whole call: one core on atlas-200i-500-a2, +8 % counted twice), so
        only what that share asks beyond them is added."""
        moved = dict(self.moved)
        stored = moved.pop(STORED, 0.0)
        seen = moved.pop(WRITTEN_BACK, 0.0)
        capacity = dict(self.capacity)
        extra = stored * writeback_share - seen
        if extra > 0 and gm_link is not None:
            moved[id(gm_link)] = moved.get(id(gm_link), 0.0) + extra
            capacity[id(gm_link)] = gm_link.capacity
        return max((math.ceil(self.share * b / capacity[k] - 1e-9) for k, b in moved.items()), default=0)

    def busy(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.programs:
            for name, pipe in p.pipes.items():
                if pipe.instructions:
                    out[name] = max(out.get(name, 0), pipe.busy)
        return out


def sample_blocks(block_dim: int, cores: int | None = None) -> list[int]:
    """The blocks replayed: the first, a middle one and the last. Work splits put a remainder on
    the first blocks or on the last one; a middle block stands for work that varies across the
    blocks (the embedding's accumulation: dropping it underestimates that operator by 25 %).
    With more blocks than ``cores``, also block ``cores``: the first of the second wave, whose
    core has paid its pipe heads (the blocks after it would otherwise take a first-wave
    sample's time, heads included)."""
    samples = {0, block_dim // 2, block_dim - 1}
    if cores is not None and cores < block_dim:
        samples.add(cores)
    return sorted(samples)


def _cores_for(dev: Device, launch: Launch) -> list[Any]:
    cores = dev.units("cube" if launch.unit == "mix" else launch.unit)
    mask = launch.core_mask
    return [c for c in cores if mask is None or (mask >> c.index) & 1]


def replay_block(dev: Device, launch: Launch, b: int, share: int, heads: bool = True,
                 raisable: HeadsPaid | None = None) -> BlockReplay:
    """Replay block ``b`` of ``launch`` on its own, ``share`` blocks running at once; ``heads``:
    it is its core's first block of the launch, so it pays the pipe heads; else ``raisable``: the
    small MTE2 heads its core paid with its earlier blocks, which a large load raises (A-10).

    A block that reads part of a line other blocks read the rest of (a split into ranges that
    are not whole lines: 48 fp32 elements a block) finds the line in the simulator's L2 when a
    neighbour was there first: the block is replayed once to learn the ends of what it reads
    (the GM addresses only), and again, timed, with those lines shared
    (:meth:`ReplayDevice.shared_ends`).

    Only for a launch with more blocks than the cores it may use: there blocks are small and a
    split line is a large share of what each reads (+11.7 % at 1,000 blocks of 48 elements
    without it). Within one wave it moved the example studies by under 0.1 point and doubled the
    cost of every replayed block (a 1,000-point estimate study 3.6 -> 6.0 s), so it is left out."""
    if (not isinstance(dev, ReplayDevice) or dev.l2 is None or launch.block_dim < 2
            or launch.block_dim <= len(_cores_for(dev, launch))):
        return _replay_block(dev, launch, b, share, heads, raisable)
    # the first pass only reads the addresses: without the L2 model, which it leaves as it was
    # (a copy of the model's state costs more than a replay), and the byte counts put back
    counts = (dict(dev.link_bytes), dict(launch.link_bytes), dev.bytes_read, dev.bytes_written)
    l2, dev.l2 = dev.l2, None
    dev.footprint = {}
    try:
        _replay_block(dev, launch, b, share, heads, raisable)
        shared = dev.shared_ends(l2.chunk)
    finally:
        dev.l2, dev.footprint = l2, None
        link_bytes, launch_bytes, dev.bytes_read, dev.bytes_written = counts
        dev.link_bytes.clear()
        dev.link_bytes.update(link_bytes)
        launch.link_bytes.clear()
        launch.link_bytes.update(launch_bytes)
    dev.shared_lines = shared
    try:
        return _replay_block(dev, launch, b, share, heads, raisable)
    finally:
        dev.shared_lines = {}


def _replay_block(dev: Device, launch: Launch, b: int, share: int, heads: bool,
                  raisable: HeadsPaid | None) -> BlockReplay:
    sched = _Scheduler(dev.spec, share, heads, raisable)
    cores = _cores_for(dev, launch)
    steady = None
    if launch.unit == "mix":
        mix = launch.kernel
        assert isinstance(mix, MixKernel)          # Device.launch takes a MixKernel only with unit "mix"
        aic = cores[0]
        ratio = dev.mix_ratio
        aic.begin_block(launch, b)
        launch.roles[aic.name] = (b, 0)
        ctx = KernelContext(aic, b, launch.block_dim)
        sched.add(aic, mix.aic(ctx, *launch.args), ctx.pending)
        vec = dev.units("vector")
        for sub in range(ratio):
            core = vec[aic.index * ratio + sub]
            core.begin_block(launch, b * ratio + sub)
            launch.roles[core.name] = (b, sub)
            vctx = KernelContext(core, b * ratio + sub, launch.block_dim * ratio)
            vctx.sub_block_idx, vctx.sub_block_num = sub, ratio
            sched.add(core, mix.aiv(vctx, *launch.args), vctx.pending)
    else:
        core = cores[0]
        core.begin_block(launch, b)
        ctx = KernelContext(core, b, launch.block_dim)
        kernel = launch.kernel
        assert not isinstance(kernel, MixKernel)   # a MixKernel runs only with unit "mix"
        prog = sched.add(core, kernel(ctx, *launch.args), ctx.pending)
        steady = _Steady(sched, prog, dev)
        ctx.tile_loop = steady.loop
    try:
        cycles = sched.run()
    except SimulatorError as exc:
        raise exc.at(core=sched.programs[0].core.name) from None
    # the lockstep blocks cannot move more over a link than it carries in the block's time: a
    # rate fixed at a transfer's start may overrun a link that is busy all the time (MSE, 4 Mi
    # fp32 on 48 cores with a 200 GB/s L2: the stores and the L2 hits at 208 GB/s)
    # (with the share of its stores a write-back L2 writes back to HBM within the call)
    cycles = max(cycles, sched.link_bound(dev.gm_link, getattr(dev, "writeback_share", 0.0)))
    busy = sched.busy()
    n = sum(p.dispatched for p in sched.programs)
    paid = {(p.core.name, name): (pipe.head_paid, pipe.head_pending) for p in sched.programs
            for name, pipe in p.pipes.items() if pipe.head_paid and large_head_from(dev.spec, name)}
    return BlockReplay(cycles, busy, n, steady.skipped_tiles if steady is not None else 0, paid)


def _raisable_heads(earlier: Sequence[BlockReplay]) -> HeadsPaid:
    """The small heads a core paid with the blocks it ran before (``earlier``, their replays)
    that a large load may still raise: the pipes where one paid a small head and none the large.
    (A pipe none of them used pays no head in a later block, as before: A-9.)"""
    out: HeadsPaid = {}
    done: set[tuple[str, str]] = set()
    for rep in earlier:
        for key, (paid, pending) in rep.heads.items():
            if not pending:
                done.add(key)
            else:
                out[key] = max(out.get(key, 0), paid)
    return {k: v for k, v in out.items() if k not in done}


@dataclass
class LaunchReplay:
    name: str
    block_dim: int
    cycles: int                   # from the launch's start (after overhead) to its last block's end
    pipe_busy: dict[str, int]     # per pipe, the busiest core's cycles over the blocks it ran
    blocks: dict[int, BlockReplay] = field(default_factory=dict)


def _place(bd: int, ncores: int, cycles: Sequence[int]) -> list[tuple[int, int, int]]:
    """(core, start, end) of each block: the core that frees first takes the next block, the
    lowest index among equals, as the simulator's free-core store hands them out (a heap of
    (free, index) picks the same core as a scan of every core for every block)."""
    ready = [(0, i) for i in range(ncores)]
    out = []
    for b in range(bd):
        t, i = heapq.heappop(ready)
        end = t + cycles[b]
        heapq.heappush(ready, (end, i))
        out.append((i, t, end))
    return out


def _tail_shares(placed: list[tuple[int, int, int]], ncores: int) -> dict[int, int]:
    """The blocks that run while cores fall idle, each with the number of blocks running at the
    middle of its time (itself included): the blocks still running after the last block
    started -- the last one of each core. Before that moment every core is busy (a freed core
    takes the next block at once); after it, a core whose block ends stays idle. (The middle,
    not the mean over its time: a block that starts as the others end spends that overlap in
    its first copies' start-up, which shares no link.)"""
    t_last = placed[-1][1]
    last: dict[int, int] = {}
    for b, (core, _, _) in enumerate(placed):
        last[core] = b
    tail = [b for b in last.values() if placed[b][2] > t_last]
    ends = [placed[b][2] for b in tail]
    out = {}
    for b in tail:
        _, s, e = placed[b]
        mid = (s + e) / 2
        out[b] = ncores if mid < t_last else max(1, sum(x > mid for x in ends))
    return out


def replay_launch(dev: Device, launch: Launch) -> LaunchReplay:
    """The blocks of ``launch`` on its cores: sampled blocks replayed, the rest taking the
    duration of the nearest sample below them, placed on the cores as the simulator places
    them (a core that frees takes the next block).

    With more blocks than cores, the blocks that run while other cores have fallen idle (the
    last blocks of the launch) share the links and pools with fewer blocks: each is replayed
    again with the mean number of blocks running over its time (one block left after 48 on 48
    cores runs alone, at 2.1x the rate of 48 lockstep loads on atlas-a2), and the blocks are
    placed again, until those numbers settle."""
    ncores = len(_cores_for(dev, launch))
    if ncores == 0:
        raise SimulatorError(f"launch {launch.name}: its core mask selects no core")
    bd = launch.block_dim
    share = min(bd, ncores)
    samples = sample_blocks(bd, ncores)
    waves = bd > ncores and isinstance(dev, ReplayDevice)
    # each block takes the duration of a sample: itself, else the nearest one below it
    sample_of = [0] * bd
    for s, nxt in zip(samples, [*samples[1:], bd]):
        sample_of[s:nxt] = [s] * (nxt - s)

    def raisable(b: int) -> HeadsPaid:
        # the MTE2 small heads block b's core paid before it and a large load raises: its
        # core ran blocks b - ncores, b - 2·ncores, ... (the cores take the blocks in turn when
        # they take as long), each standing for the sample it takes its duration from
        earlier = sorted({sample_of[x] for x in range(b - ncores, -1, -ncores)})
        return _raisable_heads([reps[(s, share)] for s in earlier])

    # a sample replayed again at another share must find the device as its first replay did
    before: dict[int, tuple] = {}
    reps: dict[tuple[int, int], BlockReplay] = {}
    for b in samples:
        if waves:
            before[b] = dev.save_replay(launch)   # type: ignore[attr-defined]
        # the first wave (blocks 0 .. ncores-1, one per core) pays the pipe heads, later blocks
        # find them paid on their core (Core.begin_block), all but what a large load adds
        reps[(b, share)] = replay_block(dev, launch, b, share, heads=b < ncores, raisable=raisable(b))
    shares: dict[int, int] = {}
    for _ in range(4):
        keys = [(sample_of[b], shares.get(b, share)) for b in range(bd)]
        for key in set(keys) - reps.keys():
            after = dev.save_replay(launch)       # type: ignore[attr-defined]
            dev.restore_replay(launch, before[key[0]])   # type: ignore[attr-defined]
            reps[key] = replay_block(dev, launch, key[0], key[1], heads=key[0] < ncores,
                                     raisable=raisable(key[0]))
            dev.restore_replay(launch, after)     # type: ignore[attr-defined]
        placed = _place(bd, ncores, [reps[k].cycles for k in keys])
        if not waves:
            break
        tail = {b: k for b, k in _tail_shares(placed, ncores).items() if k < share}
        if tail == shares:
            break
        shares = tail

    per_core: list[dict[str, int]] = [{} for _ in range(ncores)]
    for (i, _, _), key in zip(placed, keys):
        core_busy = per_core[i]
        for p, v in reps[key].pipe_busy.items():
            core_busy[p] = core_busy.get(p, 0) + v
    end = max(e for _, _, e in placed)
    # as the simulator reports it: a core's busy cycles over every block it ran, the busiest core
    # (with more blocks than cores a core runs several blocks)
    busy = {p: max(c.get(p, 0) for c in per_core) for p in {p for c in per_core for p in c}}
    return LaunchReplay(launch.name, bd, end, busy, {b: reps[(b, share)] for b in samples})


@dataclass
class Replay:
    """The replay of every launch of a call, queued on one stream as the simulator queues them."""

    cycles: int
    launches: list[LaunchReplay]
    pipe_busy: dict[str, int]        # per pipe, the busiest core's cycles (as the simulator reports)


def replay_launches(dev: Device, launches: Sequence[Launch]) -> Replay:
    """Cycles of ``launches`` run back to back on one stream, each paying the launch overhead
    (the gap between queued launches is added by the caller, as for every estimate)."""
    spec = dev.spec
    t = 0
    out = []
    busy: dict[str, int] = {}
    for launch in launches:
        t += spec.launch.overhead
        r = replay_launch(dev, launch)
        if isinstance(dev, ReplayDevice) and launch is not launches[-1]:
            dev.settle_l2()
        t += r.cycles
        out.append(r)
        for p, v in r.pipe_busy.items():
            busy[p] = busy.get(p, 0) + v
    return Replay(t, out, busy)
