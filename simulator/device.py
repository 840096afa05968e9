"""A simulated device: memories, links, cores, streams and kernel launches on one SimPy clock.

A :class:`Device` is built from a :class:`devices.DeviceSpec` and owns everything a run touches:
the GM address space (lazily backed), the shared links (HBM/DDR, L2) and the calibrated DMA
pools, the cores with their pipes and on-chip memories, and the streams. Nothing is global; a
run creates its own device.

Launches: ``device.launch(stream, kernel, block_dim, ...)`` queues ``block_dim`` blocks on the
stream; when the stream reaches the launch it pays the launch overhead, then each block takes
the lowest-numbered free core its core mask allows (blocks beyond the free cores wait for one)
and runs ``kernel(ctx, *args)`` there. ``device.synchronize()`` advances simulated time until
the stream is idle.

Mixed launches (``unit="mix"``, split AIC/AIV parts only) take a :class:`MixKernel`: block i
runs ``kernel.aic`` on a cube core and ``kernel.aiv`` on each of that core's vector cores
(aivNum = 2 x aicNum on Atlas A2/A3). The programs synchronise through the device-level
:class:`CrossCoreFlags` table (``CrossCoreSetFlag`` / ``CrossCoreWaitFlag`` in simulator/cube.py).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Iterator, Sequence, cast

import numpy as np
import simpy

from opsim.devices.spec import DeviceSpec, DmaModel
from opsim.simulator.atomics import AtomicCommitter
from opsim.simulator.cargs import core_mask_problem
from opsim.simulator.core import (COUPLED_CORE_PIPES, CUBE_CORE_PIPES, DSP_CORE_PIPES, VECTOR_CORE_PIPES,
                            Core)
from opsim.simulator.errors import DeadlockError, SimulatorError, chain_kernel_line_note
from opsim.simulator.fastforward import FastForward
from opsim.simulator.l2 import L2Cache
from opsim.simulator.link_counters import LinkCounters
from opsim.simulator.links import LinkNetwork, _Completion, _checked as checked_transfer
from opsim.simulator.memory import AddressSpace, Backing, Region
from opsim.simulator import simloop
from opsim.simulator.tile import KernelContext
from opsim.simulator.l2 import StridedRuns   # a line of its own: other branches edit the imports above
from opsim.simulator.progress import ProgressTicker
from opsim.traces.bounds import copy_rate_facts
from opsim.traces.trace import Trace

Kernel = Callable[..., Iterator[Any]]
# what env.process() runs: a generator of simpy events (it is sent their values back)
Process = Generator[simpy.Event, Any, None]


@dataclass(frozen=True)
class MixKernel:
    """A mixed AIC/AIV kernel: per block, ``aic(ctx, *args)`` runs on a cube core and
    ``aiv(ctx, *args)`` on each of its vector cores. On the AIVs ``ctx.block_idx`` is the AIV
    index (block x ratio + sub-block), ``ctx.block_dim`` the AIV count and
    ``ctx.sub_block_idx`` / ``ctx.sub_block_num`` are GetSubBlockIdx / GetTaskRation."""

    aic: Kernel
    aiv: Kernel
    name: str = "mix_kernel"


class CrossCoreFlags:
    """The device-level table of cross-core flags of mixed launches.

    A flag is a counter per key; ``set`` adds to it and ``wait`` passes once the counter has
    reached ``per`` x (number of waits this waiter has made on the key), so a flag set by
    several cores works as a barrier and repeated use of one flag id needs no reset. The keys
    (built by the instructions in simulator/cube.py) carry the launch, so launches never see
    each other's flags.
    """

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._count: dict[tuple, int] = {}
        self._done: dict[tuple, int] = {}
        self._waiters: dict[tuple, list[tuple[int, simpy.Event]]] = {}
        self._setter_slice: dict[tuple, int] = {}   # trace slice before the latest set, for flows

    def set(self, key: tuple, slice_index: int = -1) -> None:
        if slice_index >= 0:
            self._setter_slice[key] = slice_index
        n = self._count.get(key, 0) + 1
        self._count[key] = n
        waiters = self._waiters.get(key)
        if waiters:
            ready = [w for w in waiters if w[0] <= n]
            if ready:
                self._waiters[key] = [w for w in waiters if w[0] > n]
                for _, ev in ready:
                    ev.succeed()

    def wait(self, key: tuple, waiter: str, per: int) -> simpy.Event | None:
        done = self._done.get((key, waiter), 0) + 1
        self._done[(key, waiter)] = done
        need = done * per
        if self._count.get(key, 0) >= need:
            return None
        ev = self.env.event()
        self._waiters.setdefault(key, []).append((need, ev))
        return ev

    def count(self, key: tuple) -> int:
        return self._count.get(key, 0)

    def setter_slice(self, key: tuple) -> int:
        """The trace slice the latest set of ``key`` followed (-1 if none was recorded)."""
        return self._setter_slice.get(key, -1)


@dataclass
class Launch:
    """One kernel launch and what happened to it."""

    name: str
    kernel: "Kernel | MixKernel"      # a MixKernel exactly when unit == "mix"
    block_dim: int
    unit: str                         # "vector" | "cube" | "dsp" | "mix"
    core_mask: int | None
    args: tuple = ()
    stream: "Stream | None" = None
    issue: int = -1                   # cycle the stream reached the launch
    start: int = -1                   # first block may start (after launch overhead)
    end: int = -1                     # last block finished
    blocks: list[tuple[int, str, int, int]] = field(default_factory=list)  # (block, core, start, end)
    roles: dict[str, tuple[int, int]] = field(default_factory=dict)  # mix: core -> (block, sub-block)
    l2_sample: int | None = None      # timing-only L2 set sampling period (simulator/l2.py)
    # bytes by the link that carried them: "HBM read", "HBM write", "L2 read" (DDR on a DSP)
    link_bytes: dict[str, int] = field(default_factory=dict)
    gap: int = 0                      # launch.gap cycles paid: queued behind the previous task
    core_count: int = 0               # cores the launch may use (its unit's, under its core mask)
    # (core, pipe) -> (head cycles paid, whether a larger load may still add to them) for the
    # pairs that paid a pipe head in this launch: a head is paid once per core and pipe per
    # launch, by the first busy instruction of the first block the core runs (A-9), and MTE2's
    # grows to its large-load form with the core's first large load
    heads_paid: dict[tuple[str, str], tuple[int, bool]] = field(default_factory=dict)

    @property
    def cycles(self) -> int:
        return self.end - self.issue

    @property
    def concurrent_blocks(self) -> int:
        """Blocks that run at once: the GE model's ``blockDim`` of the MTE2 head
        (docs/sources.md#mte-load-store), which is the cores moving data at once, not the blocks
        queued on them (blocks beyond the cores run in waves; assumption A-9)."""
        return max(1, min(self.block_dim, self.core_count or self.block_dim))


def _waiting_entry(core: Core, pipe: Any) -> str:
    """One blocked pipe of a deadlock: what it waits in and, when known, the kernel line."""
    origin = getattr(pipe.waiting_instr, "origin", None)
    return f"{core.name}.{pipe.name}: {pipe.waiting_on}" + (f" at {origin}" if origin else "")


def _core_with_index(index: int) -> Callable[[Core], bool]:
    """A FilterStore filter taking the core of that index (bound now, not at the call)."""
    return lambda c: c.index == index


def _previous_launch(launch: Launch) -> "Launch | None":
    """The launch queued just before ``launch`` on its stream, if any."""
    stream = launch.stream
    if stream is None:
        return None
    seq = stream.launches
    for i in range(len(seq) - 1, 0, -1):
        if seq[i] is launch:
            return seq[i - 1]
    return None


def _as_geometry(ranges: Sequence[tuple[int, int]]) -> tuple[int, int, int, int] | None:
    """``ranges`` as (first address, stride, bytes per run, runs) if they are equally spaced
    runs of one length (None otherwise: such a transfer is shown to the L2 in full)."""
    if not ranges:
        return None
    a0, run = ranges[0]
    if len(ranges) == 1:
        return a0, 0, run, 1
    stride = ranges[1][0] - a0
    if all(n == run and a == a0 + i * stride for i, (a, n) in enumerate(ranges)):
        return a0, stride, run, len(ranges)
    return None


class Stream:
    """An in-order queue of device work (launches, event records/waits)."""

    def __init__(self, device: "Device", index: int) -> None:
        self.device = device
        self.index = index
        self.name = f"stream{index}"
        self.tasks: deque[Callable[[], Process]] = deque()
        self._wake: simpy.Event | None = None
        self.launches: list[Launch] = []
        self.proc = device.env.process(self._run())
        self.destroyed = False
        self.released = False    # forgotten by the device (Device.release_stream)

    def enqueue(self, body: Callable[[], Process]) -> None:
        self.tasks.append(body)
        if self._wake is not None:
            ev, self._wake = self._wake, None
            ev.succeed()

    def _run(self) -> Process:
        env = self.device.env
        while True:
            if not self.tasks:
                self._wake = env.event()
                yield self._wake
            body = self.tasks.popleft()
            yield env.process(body())

    def marker(self) -> simpy.Event:
        """An event that succeeds once everything enqueued so far has finished."""
        ev = self.device.env.event()

        def body() -> Process:
            ev.succeed()
            return
            yield  # pragma: no cover  (makes this a generator)
        self.enqueue(body)
        return ev

    @property
    def idle(self) -> bool:
        return not self.tasks and self._wake is not None


_CLOSED = "this device was closed (Device.close); make a new one"


class Device:
    """One simulated NPU or DSP."""

    def __init__(self, spec: DeviceSpec, *, trace: Trace | None = None, functional: bool = True,
                 seed: int = 0, fast_forward: bool = False) -> None:
        self.spec = spec
        # steady-state fast-forward (simulator/fastforward.py): exact, skips repeated rounds;
        # False runs every instruction step by step
        self.ff: FastForward | None = FastForward(self) if fast_forward else None
        self.drawing: Any = None    # the ProgramStream whose kernel generator is running
        self.env = simpy.Environment()
        self.trace = trace
        # clients of the execution (sanitizer, profilers): each gets
        # ``on_instruction(core, pipe, instr, start, end)`` for every instruction a pipe completes
        # (one whose ``busy_only`` is true, as the profiler, for the busy ones only: no flags)
        self.observers: list[Any] = []
        # stamp each instruction with the kernel source line that issued it (Instruction.origin)
        self.source_lines = False
        # ``progress(cycle)``, called about every quarter second of wall time while the device
        # simulates (simulator/progress.py; not with the fast-forward, which steps SimPy itself)
        self.progress: Callable[[int], None] | None = None
        self._ticker: ProgressTicker | None = None
        self.functional = functional
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        # atomic-add DMAs commit here; the seed orders commits that complete in the same cycle
        self.atomics = AtomicCommitter(self.env, self.rng)
        self.space = AddressSpace()
        gm = spec.gm
        self.gm = Region(gm.kind, kind="global", base=gm.base, size=gm.window, capacity=gm.capacity,
                         alignment=gm.alignment,
                         backing="sparse" if spec.family == "dsp" else "allocation")
        self.space.add(self.gm)
        if spec.smc is not None:
            self.smc = Region("SMC", kind="shared on-chip", base=spec.smc.base, size=spec.smc.window,
                              capacity=spec.smc.capacity, alignment=spec.smc.alignment, backing="sparse")
            self.space.add(self.smc)
        # links: the shared memory link (HBM/DDR), the L2, and the calibrated DMA pools
        self.net = LinkNetwork(self.env)
        self.gm_link = self.net.add_link(gm.kind, spec.bytes_per_cycle(gm.bandwidth))
        self.l2 = (L2Cache(spec.l2.size, spec.l2.chunk, write_back=spec.l2.write_policy == "write-back")
                   if spec.l2 is not None else None)
        self.l2_link = (self.net.add_link("L2", spec.bytes_per_cycle(spec.l2.bandwidth))
                        if spec.l2 is not None else None)
        self.pools = {}
        for name, model in (("MTE2", spec.mte2), ("MTE3", spec.mte3), ("DMA", spec.dma)):
            if model is not None and model.shared > 0:
                self.pools[name] = self.net.add_pool(name, model.shared)
        # the link bandwidth counters, written from the carried rates when the host stops the
        # device (simulator/link_counters.py), not from the allocations while it runs
        self.link_counters = (LinkCounters(trace, spec.clock_hz)
                              if trace is not None and trace.records("tile") else None)
        self._trace_l2 = trace is not None and trace.records("tile") and self.l2 is not None
        self._init_dma_routes()
        self.bytes_read = 0
        self.bytes_written = 0
        # GM-addressed bytes by the link that carried them ("HBM read", "L2 read", ...), also
        # per launch (Launch.link_bytes): bytes_read/bytes_written count L2 hits as GM bytes
        self.link_bytes: dict[str, int] = {}
        self.cores: dict[str, list[Core]] = {}
        self._build_cores()
        if trace is not None:
            # what a summary needs to judge the run from the trace alone (capacities, peaks)
            trace.metadata.update(self.trace_facts())
            if trace.records("tile"):
                for core in self.all_cores():
                    for region in core.memories.values():
                        region.observer = self._occupancy_counter(core.name, region.name)
        self._free: dict[str, simpy.FilterStore] = {}
        by_list: dict[int, simpy.FilterStore] = {}
        for unit, cores in self.cores.items():
            # coupled parts list the same AI cores as vector and cube units: one pool of free
            # cores, so a vector and a cube launch never run on one core at once
            store = by_list.get(id(cores))
            if store is None:
                store = by_list[id(cores)] = simpy.FilterStore(self.env)
                store.items.extend(cores)
            self._free[unit] = store
        self.streams: list[Stream] = []
        self._streams_made = 0
        self.launches: list[Launch] = []
        self.cross_flags = CrossCoreFlags(self.env)
        self.faulted: SimulatorError | None = None
        self.closed = False             # see close()

    # -- construction --------------------------------------------------------------------------
    def _local(self, name: str, size: int, alignment: int, backing: Backing = "flat", base: int = 0,
               capacity: int | None = None) -> Region:
        return Region(name, kind="local", base=base, size=size, capacity=capacity or size,
                      alignment=alignment, backing=backing)

    def _build_cores(self) -> None:
        spec = self.spec
        arch = spec.cores.architecture
        if arch == "dsp":
            p = spec.private
            assert p is not None        # the DSP catalogue entries all describe the private window
            self.cores["dsp"] = [
                Core(self, "dsp", i, f"dsp.core{i}", DSP_CORE_PIPES,
                     {"PRIVATE": self._local("PRIVATE", p.window, p.alignment, "sparse", p.base, p.capacity)},
                     load_pipe="DMA", store_pipe="DMA", local_memory="PRIVATE")
                for i in range(spec.cores.dsp)]
            return

        def cube_memories() -> dict[str, Region]:
            return {n.upper(): self._local(n.upper(), getattr(spec, n).size, getattr(spec, n).alignment)
                    for n in ("l1", "l0a", "l0b", "l0c") if getattr(spec, n) is not None}

        ub = spec.ub
        assert ub is not None           # required of every Ascend spec (devices/spec.py)
        if arch == "coupled":
            cores = []
            for i in range(spec.cores.aic):
                mems = {"UB": self._local("UB", ub.size, ub.alignment), **cube_memories()}
                cores.append(Core(self, "aicore", i, f"core{i}.veccore0", COUPLED_CORE_PIPES, mems,
                                  load_pipe="MTE2", store_pipe="MTE3", local_memory="UB"))
            self.cores["vector"] = cores
            self.cores["cube"] = cores
            return
        ratio = max(1, spec.cores.aiv // spec.cores.aic)
        self.cores["vector"] = [
            Core(self, "aiv", i, f"core{i // ratio}.veccore{i % ratio}", VECTOR_CORE_PIPES,
                 {"UB": self._local("UB", ub.size, ub.alignment)},
                 load_pipe="MTE2", store_pipe="MTE3", local_memory="UB")
            for i in range(spec.cores.aiv)]
        self.cores["cube"] = [
            Core(self, "aic", i, f"core{i}.cubecore0", CUBE_CORE_PIPES, cube_memories(),
                 load_pipe="MTE2", store_pipe="FIXP", local_memory="L1")
            for i in range(spec.cores.aic)]

    def units(self, unit: str) -> list[Core]:
        try:
            return self.cores[unit]
        except KeyError:
            raise SimulatorError(f"{self.spec.name} has no {unit} cores (has: {', '.join(self.cores)})") from None

    def all_cores(self) -> list[Core]:
        seen: dict[int, Core] = {}
        for cores in self.cores.values():
            for c in cores:
                seen.setdefault(id(c), c)
        return list(seen.values())

    # -- host-side memory ----------------------------------------------------------------------
    def malloc(self, nbytes: int, name: str = "") -> int:
        """Allocate device memory in GM (aclrtMalloc); returns the device address."""
        return self.gm.allocate(max(int(nbytes), 1), name=name).addr

    def free(self, addr: int) -> None:
        alloc = self.gm.allocation_at(addr)
        self.gm.free(addr)
        if self.l2 is not None and alloc is not None:
            self.l2.invalidate(alloc.addr, alloc.nbytes)

    def write(self, addr: int, data: Any, *, share: bool = False) -> None:
        """Host → device copy (not timed; host copies are outside the operator's time).
        ``share=True``: keep ``data`` itself when it fills a whole fresh allocation (copied on
        the device's first write into it; Region.write)."""
        buf = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        self.space.write(addr, buf, share=share)
        if self.l2 is not None:
            self.l2.invalidate(addr, buf.size)

    def read(self, addr: int, nbytes: int, *, copy: bool = True) -> np.ndarray:
        """Device → host copy; ``copy=False`` may return a (possibly read-only) view of the
        device memory itself, for a host that is done with the device (Region.read)."""
        return self.space.read(addr, nbytes, copy=copy)

    def check_global(self, addr: int, nbytes: int, *, write: bool) -> None:
        self.space.check(addr, nbytes, write=write)

    def global_view(self, addr: int, nbytes: int, *, write: bool = False,
                    np_dtype: np.dtype | None = None) -> np.ndarray:
        """A view of device memory (Region.view); typed as ``np_dtype`` when given, in one call
        (Region.typed_view: the DMA numerics take one per instruction)."""
        if self.drawing is not None:
            # a kernel program reads device data while it runs: its instructions may depend on
            # it, so the fast-forward never reads that program ahead
            self.drawing.reads_data = True
            if self.ff is not None:
                self.ff.reason = f"{self.drawing.core.name}'s program reads device data while it runs (data-dependent)"
        if np_dtype is not None:
            region = self.gm     # nearly every access; the address space finds any other region
            if not (nbytes > 0 and region.base <= addr and addr + nbytes <= region.end):
                region = self.space.region_of(addr, nbytes)
            return region.typed_view(addr, nbytes, np_dtype, write=write)
        return self.space.view(addr, nbytes, write=write)

    # -- DMA timing ----------------------------------------------------------------------------
    def gm_transfer(self, pipe: Any, addr: int, nbytes: int, *, write: bool,
                    startup_extra: int = 0, model: DmaModel | None = None,
                    ranges: Sequence[tuple[int, int]] | None = None,
                    geometry: tuple[int, int, int, int] | None = None, rehit: int = 0) -> simpy.Event:
        """:meth:`_gm_transfer`, noting for the fast-forward what the L2 answered."""
        ff, l2 = self.ff, self.l2
        if ff is None or not ff._recording:        # (on_gm notes nothing then)
            if model is None and ranges is None and geometry is None:   # (a DataCopy: fewer keywords to pass)
                return self._gm_transfer(pipe, addr, nbytes, write=write, startup_extra=startup_extra)
            return self._gm_transfer(pipe, addr, nbytes, write=write, startup_extra=startup_extra,
                                     model=model, ranges=ranges, geometry=geometry, rehit=rehit)
        h0, wb0 = (l2.hit_bytes, l2.writeback_bytes) if l2 is not None else (0, 0)
        ev = self._gm_transfer(pipe, addr, nbytes, write=write, startup_extra=startup_extra,
                               model=model, ranges=ranges, geometry=geometry, rehit=rehit)
        launch = pipe.core.launch
        plain = ranges is None and geometry is None and model is None and (
            launch is None or launch.l2_sample is None)
        h1, wb1 = (l2.hit_bytes, l2.writeback_bytes) if l2 is not None else (0, 0)
        ff.on_gm(pipe, addr, nbytes, write, plain, h1 - h0, wb1 - wb0)
        return ev

    def _init_dma_routes(self) -> None:
        """The checked rate-class keys (LinkNetwork._route) of the Ascend DMA routes that do not
        change during a run -- MTE2 loads (L2 misses on the GM link, hits on the L2 link), MTE3
        stores and write-backs -- so that _gm_transfer starts their transfers with
        LinkNetwork._start, without the checks and look-ups of LinkNetwork.transfer, and the
        byte-counter keys of the GM link.  A route whose rate would be refused stays None: its
        transfers go through LinkNetwork.transfer, which names the bad value."""
        spec, net = self.spec, self.net
        self._gm_read_key = f"{self.gm_link.name} read"
        self._gm_write_key = f"{self.gm_link.name} write"

        def route(base: float, link: Any, pool: Any) -> tuple | None:
            try:
                _, rate, _ = checked_transfer(0, base, 0)
            except (TypeError, ValueError):
                return None
            return net._route(rate, (link,), pool)

        self._route_load: tuple | None = None
        # id(model) -> (model, its route): loads with a model of their own (_model_load_route)
        self._model_routes: dict[int, tuple[DmaModel, tuple | None]] = {}
        self._route_hit: tuple | None = None
        self._route_store: tuple | None = None
        self._route_writeback: tuple | None = None
        if spec.family == "dsp" or spec.mte2 is None or spec.mte3 is None:
            return
        gm, l2 = self.gm_link, self.l2_link
        self._route_load = route(spec.mte2.base, gm, self.pools.get("MTE2"))
        write_back = self.l2 is not None and self.l2.write_back
        self._route_store = route(spec.mte3.base, l2 if write_back else gm, self.pools.get("MTE3"))
        self._route_writeback = route(spec.bytes_per_cycle(spec.gm.bandwidth), gm, None)
        if l2 is not None:
            self._route_hit = route(spec.rates.l2_read, l2, None)

    def _gm_transfer(self, pipe: Any, addr: int, nbytes: int, *, write: bool,
                     startup_extra: int = 0, model: DmaModel | None = None,
                     ranges: Sequence[tuple[int, int]] | None = None,
                     geometry: tuple[int, int, int, int] | None = None, rehit: int = 0) -> simpy.Event:
        """Move ``nbytes`` between GM at ``addr`` and a core; returns the completion event.

        Ascend loads use the calibrated MTE2 model (per-transfer ``base`` plus a share of the
        ``shared`` pool) on the HBM link for L2 misses, and the L2 rate on the L2 link for hits;
        stores use the MTE3 model on the HBM link and allocate in L2. DSP transfers use the
        core's DMA engine rate on the DDR link.

        ``model`` replaces the MTE2/MTE3 model for a path with its own rate (a cube core's
        GM->L1 load, Fixpipe's L0C->GM store): its ``base`` is the per-transfer rate, with no
        pool share. ``ranges`` lists the (address, bytes) runs a strided transfer touches, for
        the L2 model (default: the one run [addr, addr + nbytes)); if they cover fewer bytes
        than ``nbytes`` (merged runs, or a sample), their hit fraction applies to all
        ``nbytes``. ``geometry`` = (first address, stride, bytes per run, runs) gives equally
        spaced runs in place of ``ranges``. In a launch with ``l2_sample`` = P the L2 sees only
        the sampled lines of the runs (L2Cache.sample), each occupying P lines of capacity. The
        L2 hit/miss totals count the transfer's bytes (the fraction applied).

        ``rehit`` (a coarse load, simulator/cube.py): bytes of the transfer that the exact
        pieces it stands for would read from a line the piece before brought in, a hit in the
        exact schedule whatever the line's state before; as many of the transfer's miss bytes,
        in proportion, become hits.
        """
        spec = self.spec
        net = self.net
        if write:
            self.bytes_written += nbytes
        else:
            self.bytes_read += nbytes
        core = pipe.core
        tag = core.name
        launch = core.launch
        # the usual DMA starts its transfers on the routes checked once (_init_dma_routes)
        fast = model is None and type(net) is LinkNetwork and type(nbytes) is int and nbytes >= 0
        if spec.family == "dsp" or (write and not (self.l2 is not None and self.l2.write_back)):
            self._count_bytes(launch, self._gm_write_key if write else self._gm_read_key, nbytes)
        elif write:
            # a write-back L2 takes the store; HBM sees only the dirty lines it evicts later
            # (counted as HBM writes in _with_writeback)
            self._count_bytes(launch, "L2 write", nbytes)
        if spec.family == "dsp":
            m = spec.dma
            assert m is not None        # required of every DSP spec (devices/spec.py)
            return net.transfer(nbytes, base_rate=m.base, links=(self.gm_link,),
                                pool=self.pools.get("DMA"), startup=m.startup + startup_extra, tag=tag)
        l2 = self.l2
        period = launch.l2_sample if launch is not None else None
        lines = None
        if l2 is not None and period is not None:
            if geometry is None:
                geometry = (addr, 0, nbytes, 1) if ranges is None else _as_geometry(ranges)
            lines = l2.sample(geometry, period) if geometry is not None else None
            if lines is not None and lines.size == 0:
                lines = None                # touches no sampled line: shown in full
        run_bytes = None                    # bytes the runs cover, when known without a sum
        if lines is None and geometry is not None and ranges is None:
            a0, stride, run, count = geometry
            ranges = StridedRuns(a0, stride, run, count)   # the L2 walks these rows' lines directly
            run_bytes = run * count
        runs = ranges if ranges is not None else ((addr, nbytes),)
        if write:
            m = model or spec.mte3
            assert m is not None        # required of every Ascend spec (devices/spec.py)
            if lines is not None:
                assert l2 is not None and period is not None   # lines are sampled only then
                l2.access_lines(lines.tolist(), weight=period, write=True)
            elif l2 is not None:
                l2.access_runs(runs, write=True)
            startup = m.startup + startup_extra
            route = self._route_store if fast and type(startup) is int and startup >= 0 else None
            pool = self.pools.get("MTE3") if model is None else None
            if l2 is None or not l2.write_back:
                if route is not None:
                    return net._start(nbytes, route, startup, tag)
                return net.transfer(nbytes, base_rate=m.base, links=(self.gm_link,), pool=pool,
                                    startup=startup, tag=tag)
            # write-back L2: the store is taken by the L2 (at the store path's own rate); the dirty
            # lines it evicted go to HBM on the HBM link, and the store completes when both have
            assert self.l2_link is not None
            return self._with_writeback(net._start(nbytes, route, startup, tag) if route is not None else
                                        net.transfer(nbytes, base_rate=m.base, links=(self.l2_link,), pool=pool,
                                                     startup=startup, tag=tag), tag, launch)
        m = model or spec.mte2
        assert m is not None            # required of every Ascend spec (devices/spec.py)
        if lines is not None:
            assert l2 is not None and period is not None   # lines are sampled only then
            # the sample's hit fraction stands for the whole transfer
            hit = l2.access_lines(lines.tolist(), weight=period) * l2.chunk
            covered = int(lines.size) * l2.chunk
        else:
            hit = l2.access_runs(runs, write=False) if l2 is not None else 0
            covered = (nbytes if ranges is None else run_bytes if run_bytes is not None
                       else sum(n for _, n in runs))
        if covered and covered != nbytes:
            hit = min(nbytes, round(hit * nbytes / covered))
        if rehit and nbytes and l2 is not None:
            # the exact pieces' second touches of the lines they share with the piece before: in
            # one run they are missed with the rest of the line, piece by piece the later piece
            # hits them (a line the walk found resident is a hit either way)
            hit += round(min(rehit, nbytes) * (nbytes - hit) / nbytes)
        if l2 is not None and covered:
            l2.count(hit, nbytes - hit)
        if self._trace_l2:
            assert self.trace is not None and self.l2 is not None   # _trace_l2 says so
            self.trace.add_counter("memory", "L2 hit rate %", int(self.env.now), 100.0 * self.l2.hit_rate)
        miss = nbytes - hit
        self._count_bytes(launch, self._gm_read_key, miss)
        if hit:                         # (a load that hits nothing has nothing to count here)
            self._count_bytes(launch, "L2 read", hit)
        startup = m.startup + startup_extra
        route_hit = self._route_hit
        # a load with its own model (a cube core's GM->L1 copy) starts on its model's route,
        # checked once too (_model_load_route): the transfers transfer() would start, whose
        # TransferRecord value nothing waiting on a DMA reads
        route_load = self._route_load if model is None else (
            self._model_load_route(model) if type(net) is LinkNetwork and type(nbytes) is int and nbytes >= 0
            else None)
        if (fast or model is not None) and type(startup) is int and startup >= 0 and type(hit) is int \
                and 0 <= hit <= nbytes and route_load is not None and (hit == 0 or route_hit is not None):
            # the routes checked once; a part of no bytes is a transfer only if it is the whole
            # DMA (a route the checks refused, e.g. a spec's L2 rate of 0, goes the long way
            # below, whose transfer() names the bad value)
            if hit == 0:
                return self._with_writeback(net._start(miss, route_load, startup, tag), tag, launch)
            assert route_hit is not None
            part = net._start(hit, route_hit, startup, tag)
            if miss:
                part = net._join(part, net._start(miss, route_load, startup, tag))
            return self._with_writeback(part, tag, launch)
        pool = self.pools.get("MTE2") if model is None else None
        if hit == 0:
            return self._with_writeback(net.transfer(miss, base_rate=m.base, links=(self.gm_link,),
                                                     pool=pool, startup=startup, tag=tag), tag, launch)
        assert self.l2_link is not None  # a hit needs an L2
        events = [net.transfer(hit, base_rate=spec.rates.l2_read, links=(self.l2_link,),
                               startup=startup, tag=tag)]
        if miss:
            events.append(net.transfer(miss, base_rate=m.base, links=(self.gm_link,),
                                       pool=pool, startup=startup, tag=tag))
        event = events[0] if len(events) == 1 else self._all_of(events)
        return self._with_writeback(event, tag, launch)

    def _model_load_route(self, model: DmaModel) -> tuple | None:
        """The checked rate-class key of the L2 misses of a load with its own ``model`` (on the
        GM link, no pool: what _gm_transfer's transfer() of them uses), found once per model;
        None if its rate would be refused (the load then goes through transfer(), which names
        the bad value)."""
        known = self._model_routes.get(id(model))
        if known is not None and known[0] is model:
            return known[1]
        try:
            _, rate, _ = checked_transfer(0, model.base, 0)
            route: tuple | None = self.net._route(rate, (self.gm_link,), None)
        except (TypeError, ValueError):
            route = None
        self._model_routes[id(model)] = (model, route)
        return route

    def _with_writeback(self, event: simpy.Event, tag: str, launch: Launch | None) -> simpy.Event:
        """``event`` joined with the HBM write of the dirty L2 lines the access evicted (a
        write-back L2), which the transfer waits for: the line it fills must be free."""
        l2 = self.l2
        # nothing owed (no dirty line evicted): take_writeback would change nothing
        wb = l2.take_writeback() if l2 is not None and l2.pending_writeback else 0
        if not wb:
            return event
        self._count_bytes(launch, self._gm_write_key, wb)
        net = self.net
        if type(net) is LinkNetwork and self._route_writeback is not None and type(wb) is int and wb > 0 \
                and isinstance(event, _Completion) and event.parent is None and not event.callbacks:
            # a DMA just started (not waited on yet) and the route checked once: joined as all_of does
            return net._join(event, net._start(wb, self._route_writeback, 0, tag))
        hbm = net.transfer(wb, base_rate=self.spec.bytes_per_cycle(self.spec.gm.bandwidth),
                           links=(self.gm_link,), startup=0, tag=tag)
        return self._all_of([event, hbm])

    def _all_of(self, events: list[simpy.Event]) -> simpy.Event:
        """``simpy.AllOf`` of a DMA's transfers, joined in the link network where it can (fewer
        SimPy events, the same order: LinkNetwork.all_of); a stand-in network gets the AllOf."""
        net = self.net
        return net.all_of(events) if type(net) is LinkNetwork else simpy.AllOf(self.env, events)

    def _count_bytes(self, launch: Launch | None, key: str, nbytes: int) -> None:
        if nbytes:
            self.link_bytes[key] = self.link_bytes.get(key, 0) + nbytes
            if launch is not None:
                launch.link_bytes[key] = launch.link_bytes.get(key, 0) + nbytes

    def trace_facts(self) -> dict[str, Any]:
        """Device facts a trace carries in its metadata: link capacities, peaks, core counts."""
        spec = self.spec
        clk = spec.clock_hz
        peak: dict[str, float] = {}
        for op, by_dtype in spec.vector.cost.items():
            if op.startswith("Cast"):
                continue
            for dt, (k, _) in by_dtype.items():
                if k > 0:   # elements per cycle per core of the cheapest op in this dtype
                    peak[dt] = max(peak.get(dt, 0.0), 1.0 / k)
        vector_cores = self.cores.get("vector") or self.cores.get("dsp") or []
        return {
            "gm_link": spec.gm.kind,
            "architecture": spec.cores.architecture,
            "gm_peak_GBps": spec.gm.bandwidth / 1e9,
            "link_capacity_GBps": {n: l.capacity * clk / 1e9 for n, l in self.net.links.items()},
            "launch_overhead_cycles": int(spec.launch.overhead),
            "vector_cores": len(vector_cores),
            "cube_cores": len(self.cores.get("cube") or []),
            "vector_peak_elements_per_cycle": peak,
            "cube_macs_per_cycle": dict(spec.cube.macs_per_cycle) if spec.cube is not None else {},
            "local_memory_bytes": (spec.ub.size if spec.ub is not None else
                                   spec.private.capacity if spec.private is not None else 0),
            # per-core copy rates (bytes/cycle: base + shared/n of n concurrent copies) that a
            # bound reason names (traces/bounds.py)
            "copy_rates": copy_rate_facts(spec),
        }

    def _occupancy_counter(self, core: str, memory: str) -> Callable[[int], None]:
        trace, env, series = self.trace, self.env, f"{memory} bytes"
        assert trace is not None        # installed only on a traced device

        def record(nbytes: int) -> None:
            trace.add_counter(core, series, int(env.now), nbytes)
        return record

    # -- streams and launches ------------------------------------------------------------------
    def create_stream(self) -> Stream:
        # numbered by a counter, not by len(self.streams): released streams leave the list
        s = Stream(self, self._streams_made)
        self._streams_made += 1
        self.streams.append(s)
        return s

    def release_stream(self, stream: Stream) -> None:
        """Forget a synchronized stream and its finished launches, so a long-lived runtime that
        makes a stream per call keeps constant memory (call it after ``synchronize(stream)``).
        Its launches stay readable through the handles that hold them; a stream with work
        still queued or a launch still running is kept."""
        if stream.tasks or any(ln.end < 0 for ln in stream.launches):
            return
        if stream in self.streams:
            self.streams.remove(stream)
        stream.released = True           # no more work: a launch on it is refused
        self.launches[:] = [ln for ln in self.launches if ln.stream is not stream or ln.end < 0]

    def forget_link_history(self) -> None:
        """Fold every link's closed rate history into its totals and peaks (``Link.forget_history``),
        for a long-lived runtime that reports no bandwidth series: bytes and peaks are kept."""
        now = int(self.env.now)
        for link in self.net.links.values():
            link.forget_history(now)

    def launch(self, stream: Stream, kernel: Kernel | MixKernel, block_dim: int, *args: Any, unit: str = "vector",
               core_mask: int | None = None, name: str | None = None, l2_sample: int | None = None) -> Launch:
        """Queue ``block_dim`` blocks of ``kernel`` on ``stream``; returns the Launch record.

        ``l2_sample`` = P > 1 (timing mode only): the launch's GM transfers show the L2 model
        only the lines of a fixed address sample, one line in P, each standing for P lines
        (simulator/l2.py, set sampling) -- for huge timing runs whose coarse instructions move
        megabytes each."""
        if self.closed:
            raise SimulatorError(_CLOSED)
        if stream.released:
            raise SimulatorError(f"{stream.name} was released (Device.release_stream); create a new stream")
        if l2_sample is not None and l2_sample > 1 and self.functional:
            raise SimulatorError("L2 sampling (l2_sample > 1) is for timing-only runs")
        if unit == "mix":
            if self.spec.cores.architecture != "split":
                raise SimulatorError(f"a mixed AIC/AIV launch needs separate cube and vector cores; "
                                     f"{self.spec.name} is {self.spec.cores.architecture}")
            if not isinstance(kernel, MixKernel):
                raise SimulatorError(f"unit='mix' takes a MixKernel(aic=..., aiv=...), got "
                                     f"{type(kernel).__name__}")
        cores = self.units("cube" if unit == "mix" else unit)
        if block_dim < 1:
            raise SimulatorError(f"block_dim must be >= 1, got {block_dim}")
        if core_mask is not None:
            # a float or a string failed a comparison as a bare TypeError, and True ran as mask 1:
            # a mask is an integer, bit i for core i
            kind = {"mix": "cube", "dsp": "DSP"}.get(unit, unit)
            problem = core_mask_problem(core_mask, len(cores), kind, self.spec.name)
            if problem:
                raise SimulatorError(problem)
            core_mask = int(core_mask)      # a numpy integer as the int the launch record holds
        launch = Launch(str(name or getattr(kernel, "__name__", None) or getattr(kernel, "name", "kernel")),
                        kernel, block_dim, unit, core_mask, args, stream,
                        l2_sample=l2_sample if l2_sample is not None and l2_sample > 1 else None,
                        core_count=len(cores) if core_mask is None else bin(core_mask).count("1"))
        stream.launches.append(launch)
        self.launches.append(launch)
        stream.enqueue(lambda: self._run_launch(launch))
        return launch

    def _run_launch(self, launch: Launch) -> Process:
        env = self.env
        launch.issue = cast(int, env.now)      # simulated time is integral (LinkNetwork checks it)
        overhead = self.spec.launch.overhead
        # a task queued behind the previous one of its stream starts launch.gap cycles after it
        # ends (the gap between the launches of one aclnn call); one reached on an idle stream
        # pays only the launch overhead
        prev = _previous_launch(launch)
        if prev is not None and prev.end == env.now:
            launch.gap = self.spec.launch.gap
        if overhead + launch.gap:
            yield env.timeout(overhead + launch.gap)
        launch.start = cast(int, env.now)
        run_block = self._run_mix_block if launch.unit == "mix" else self._run_block
        blocks = [env.process(run_block(launch, b)) for b in range(launch.block_dim)]
        yield simpy.AllOf(env, blocks)
        launch.end = cast(int, env.now)
        if self.trace is not None and self.trace.enabled:
            t = self.trace.track("host", launch.stream.name if launch.stream else "stream")
            # the task's row begins after the gap behind the previous task of its stream: the
            # timeline shows the gap between the tasks, as msprof's task rows do
            self.trace.add_slice(t, launch.name, launch.issue + launch.gap, launch.end,
                                 detail=f"block_dim={launch.block_dim}")

    def _run_block(self, launch: Launch, b: int) -> Process:
        mask = launch.core_mask
        store = self._free[launch.unit]
        if mask is None:
            core = yield store.get()
        else:
            core = yield store.get(lambda c: (mask >> c.index) & 1)
        kernel = launch.kernel
        assert not isinstance(kernel, MixKernel)   # launch() takes a MixKernel only with unit "mix"
        yield from self._execute_block(launch, core, b, kernel, KernelContext(core, b, launch.block_dim))
        store.put(core)

    @property
    def mix_ratio(self) -> int:
        """Vector cores per cube core (GetTaskRation of a mixed launch; 2 on Atlas A2/A3)."""
        return max(1, self.spec.cores.aiv // max(1, self.spec.cores.aic))

    def _run_mix_block(self, launch: Launch, b: int) -> Process:
        """Block ``b`` of a mixed launch: a cube core and its vector cores, one program each."""
        mask = launch.core_mask
        cube_store, vec_store = self._free["cube"], self._free["vector"]
        if mask is None:
            aic = yield cube_store.get()
        else:
            aic = yield cube_store.get(lambda c: (mask >> c.index) & 1)
        ratio = self.mix_ratio
        mix = launch.kernel
        assert isinstance(mix, MixKernel)          # launch() checked it
        aivs: list[Core] = []
        for sub in range(ratio):   # the vector cores of the same AI core (coreN.veccore0/1)
            aivs.append((yield vec_store.get(_core_with_index(aic.index * ratio + sub))))
        parts = []
        launch.roles[aic.name] = (b, 0)
        ctx = KernelContext(aic, b, launch.block_dim)
        parts.append(self.env.process(self._execute_block(launch, aic, b, mix.aic, ctx)))
        for sub, core in enumerate(aivs):
            launch.roles[core.name] = (b, sub)
            ctx = KernelContext(core, b * ratio + sub, launch.block_dim * ratio)
            ctx.sub_block_idx, ctx.sub_block_num = sub, ratio
            parts.append(self.env.process(
                self._execute_block(launch, core, b * ratio + sub, mix.aiv, ctx)))
        yield simpy.AllOf(self.env, parts)
        cube_store.put(aic)
        for core in aivs:
            vec_store.put(core)

    def _execute_block(self, launch: Launch, core: Core, b: int, kernel: Kernel,
                       ctx: KernelContext) -> Process:
        core.begin_block(launch, b)
        t0 = cast(int, self.env.now)
        yield from core.dispatch(kernel(ctx, *launch.args), ctx.pending)
        # the block is over: its queues point back at their context, so drop the list (and the
        # core's link to it) rather than leave the pair to the cyclic garbage collector
        ctx.queues.clear()
        if core.context is ctx:
            core.context = None
        t1 = cast(int, self.env.now)
        launch.blocks.append((b, core.name, t0, t1))
        if self.trace is not None and self.trace.enabled:
            self.trace.add_slice(self.trace.track(core.name, "BLOCK"), f"{launch.name} block {b}",
                                 t0, t1, tile=b)
            for region in core.memories.values():
                # the block's buffers die with it: all of a region reset at each block (UB, L1,
                # ...), the work area of one that is not (a DSP's private memory, whose caller's
                # data stays)
                if region.observer is not None:
                    left = region.allocated_bytes if region.backing == "sparse" else 0
                    if region.allocated_bytes + ctx.work_area_bytes(region) != left:
                        region.observer(left)

    def synchronize(self, stream: Stream | None = None) -> None:
        """Run simulated time until ``stream`` (or every stream) has finished its work."""
        if self.closed:
            raise SimulatorError(_CLOSED)
        if self.faulted is not None:
            raise self.faulted
        streams = [stream] if stream is not None else self.streams
        if not streams:
            return
        markers = [s.marker() for s in streams]
        self._advance(markers[0] if len(markers) == 1 else simpy.AllOf(self.env, markers))

    def run_until(self, cycle: int) -> None:
        """Run simulated time up to ``cycle`` (a host-side wait: work queued on the streams runs
        meanwhile), with the fault handling of :meth:`synchronize`."""
        if self.faulted is not None:
            raise self.faulted
        self._advance(cycle)

    def _advance(self, until: simpy.Event | int) -> None:
        """``env.run(until=until)``; a fault of the device's work is kept in ``faulted`` and raised
        as the original SimulatorError (a deadlock or a bug in a kernel as one, too)."""
        if self.closed:
            raise SimulatorError(_CLOSED)
        try:
            # the device computes IEEE results (inf - inf is a NaN) without raising flags anywhere:
            # numpy's floating-point warnings are off for every instruction's numerics at once
            with np.errstate(all="ignore"):
                if self.ff is None or not isinstance(until, simpy.Event):
                    ticker = self._ticker
                    if self.progress is not None and self.ff is None:
                        if ticker is None or ticker.report is not self.progress:
                            ticker = self._ticker = ProgressTicker(self.env, self.progress)
                        ticker.arm()
                    try:
                        simloop.run(self.env, until)      # env.run(until=until), step inline
                    finally:
                        if ticker is not None:
                            ticker.disarm()
                else:
                    self._run_fast_forward(until)
        except SimulatorError as exc:
            # SimPy re-raises a copy of a process's exception; the original keeps the context
            # (one copy per level of process nesting: a mixed launch runs a process per core)
            original = exc
            while isinstance(original.__cause__, SimulatorError):
                original = original.__cause__
            self.faulted = original
            raise original from None
        except Exception as exc:
            if isinstance(exc, RuntimeError) and "No scheduled events left" in str(exc):
                waiting = [_waiting_entry(c, p) for c in self.all_cores()
                           for p in c.pipes.values() if p.waiting_on]
                # the waits are listed once, by DeadlockError itself
                err: SimulatorError = DeadlockError("no event can make progress", waiting=waiting)
            else:
                # a bug in a kernel program (any other exception) is still a fault of this run,
                # so the runtimes can return a status code instead of a traceback
                cause = exc.__cause__ if exc.__cause__ is not None else exc
                # where in the kernel's source it arose (an opsim.asc kernel's note): SimPy's
                # copies of the exception leave the kernel's frames out of every traceback
                note = chain_kernel_line_note(exc)
                where = f" ({note})" if note is not None else ""
                err = SimulatorError(f"internal error in a kernel: {type(cause).__name__}: {cause}{where}")
                err.kernel_exception = cause
            self.faulted = err
            raise err from exc
        finally:
            if self.link_counters is not None:
                # what the links carried up to here (a faulted run's too: its trace is shown)
                self.link_counters.record(self.net.links, int(self.env.now))

    def close(self) -> None:
        """End the device's life and hand its host memory back now, not at the interpreter's
        next full garbage collection.

        A machine is a web of reference cycles (cores and their pipes, SimPy processes and the
        events they wait on, regions and their allocations). Left alone after the last call,
        it -- with every byte of simulated memory it backs: GM, the cores' local memories, the
        L2 state, the link histories -- lives on until Python's cyclic collector runs a full
        collection, which a sweep of full-mode calls postpones past hundreds of megabytes (a
        2^22-element MSE backward left 31 MiB a call). ``close`` stops its processes, drops
        its event queue, releases the memory its regions back and its L2 state, and unhooks
        its cores, pipes, streams and launches from one another: that breaks the cycles, so
        reference counting frees the machine (link histories included) at its last reference
        (a traced, fast-forwarded, sanitized or failed call's as well).

        What callers already took is not touched: an output array handed over without a copy
        keeps its own bytes, and stats, launch records and traces are copies. Calling it
        again does nothing; a closed device refuses to launch or to run."""
        if self.closed:
            return
        self.closed = True
        procs = [s.proc for s in self.streams]
        procs += [p.proc for core in self.all_cores() for p in core.pipes.values()]
        self.env._queue.clear()           # events scheduled, their callbacks with them
        for proc in procs:
            gen = getattr(proc, "_generator", None)
            if gen is not None:
                gen.close()               # its frame (the pipe loop's locals) goes
            proc.__dict__.pop("_resume", None)     # the bound method Pipe binds once (a cycle)
            proc.callbacks = None         # type: ignore[assignment]
            proc._target = None           # type: ignore[assignment]
        regions = [r for r in self.space] + [r for core in self.all_cores()
                                             for r in core.memories.values()]
        for region in regions:
            region.observer = None
            region.reset()                # every allocation freed, every backed byte dropped
        self.l2 = None
        for core in self.all_cores():
            for p in core.pipes.values():
                p.queue.clear()
                p.core = p.proc = p.env = None     # type: ignore[assignment]
                p._item_ev = p._space_ev = p.current = p._waiting = None
            core.pipes = {}
            core.flags.clear()
            core.flag_waiters.clear()
            core.memories = {}
            core.device = core.launch = core.context = core.stream = None   # type: ignore[assignment]
        for store in self._free.values():
            store.items.clear()           # (a SimPy store binds its methods: a cycle of its own)
        for s in self.streams:
            s.tasks.clear()
            s.launches = []               # a launch and its stream refer to each other
            s._wake = s.proc = None       # type: ignore[assignment]
        self.cores = {}
        self._free = {}
        self.streams = []
        self.launches = []
        self.observers = []
        self.drawing = None
        self.ff = None

    def _run_fast_forward(self, until: simpy.Event) -> None:
        """``env.run(until=until)``, stepping SimPy here so that the fast-forward sees each clean
        boundary: the moment every event of the current cycle has been processed."""
        ff = self.ff
        assert ff is not None
        ff.run(until)

    @property
    def now(self) -> int:
        return int(self.env.now)
