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
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import simpy

from devices.spec import DeviceSpec
from simulator.core import (COUPLED_CORE_PIPES, CUBE_CORE_PIPES, DSP_CORE_PIPES, VECTOR_CORE_PIPES,
                            Core)
from simulator.errors import DeadlockError, MemoryFault, SimulatorError
from simulator.l2 import L2Cache
from simulator.links import LinkNetwork
from simulator.memory import AddressSpace, Region
from simulator.tile import KernelContext
from traces.trace import Trace

Kernel = Callable[..., Iterator[Any]]


@dataclass
class Launch:
    """One kernel launch and what happened to it."""

    name: str
    kernel: Kernel
    block_dim: int
    unit: str                         # "vector" | "cube" | "dsp"
    core_mask: int | None
    args: tuple = ()
    stream: "Stream | None" = None
    issue: int = -1                   # cycle the stream reached the launch
    start: int = -1                   # first block may start (after launch overhead)
    end: int = -1                     # last block finished
    blocks: list[tuple[int, str, int, int]] = field(default_factory=list)  # (block, core, start, end)

    @property
    def cycles(self) -> int:
        return self.end - self.issue


class Stream:
    """An in-order queue of device work (launches, event records/waits)."""

    def __init__(self, device: "Device", index: int) -> None:
        self.device = device
        self.index = index
        self.name = f"stream{index}"
        self.tasks: deque[Callable[[], Iterator[Any]]] = deque()
        self._wake: simpy.Event | None = None
        self.launches: list[Launch] = []
        self.proc = device.env.process(self._run())
        self.destroyed = False

    def enqueue(self, body: Callable[[], Iterator[Any]]) -> None:
        self.tasks.append(body)
        if self._wake is not None:
            ev, self._wake = self._wake, None
            ev.succeed()

    def _run(self) -> Iterator[simpy.Event]:
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

        def body() -> Iterator[Any]:
            ev.succeed()
            return
            yield  # pragma: no cover  (makes this a generator)
        self.enqueue(body)
        return ev

    @property
    def idle(self) -> bool:
        return not self.tasks and self._wake is not None


class Device:
    """One simulated NPU or DSP."""

    def __init__(self, spec: DeviceSpec, *, trace: Trace | None = None, functional: bool = True,
                 seed: int = 0) -> None:
        self.spec = spec
        self.env = simpy.Environment()
        self.trace = trace
        self.functional = functional
        self.seed = seed
        self.rng = np.random.default_rng(seed)
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
        clk = spec.clock_hz
        self.gm_link = self.net.add_link(gm.kind, spec.bytes_per_cycle(gm.bandwidth))
        self.l2 = L2Cache(spec.l2.size, spec.l2.chunk) if spec.l2 is not None else None
        self.l2_link = (self.net.add_link("L2", spec.bytes_per_cycle(spec.l2.bandwidth))
                        if spec.l2 is not None else None)
        self.pools = {}
        for name, model in (("MTE2", spec.mte2), ("MTE3", spec.mte3), ("DMA", spec.dma)):
            if model is not None and model.shared > 0:
                self.pools[name] = self.net.add_pool(name, model.shared)
        if trace is not None and trace.records("tile"):
            self.net.on_change = self._record_bandwidth
        self.bytes_read = 0
        self.bytes_written = 0
        self.cores: dict[str, list[Core]] = {}
        self._build_cores()
        self._free: dict[str, simpy.FilterStore] = {}
        for unit, cores in self.cores.items():
            store = simpy.FilterStore(self.env)
            store.items.extend(cores)
            self._free[unit] = store
        self.streams: list[Stream] = []
        self.launches: list[Launch] = []
        self.faulted: SimulatorError | None = None

    # -- construction --------------------------------------------------------------------------
    def _local(self, name: str, size: int, alignment: int, backing: str = "flat", base: int = 0,
               capacity: int | None = None) -> Region:
        return Region(name, kind="local", base=base, size=size, capacity=capacity or size,
                      alignment=alignment, backing=backing)

    def _build_cores(self) -> None:
        spec = self.spec
        arch = spec.cores.architecture
        if arch == "dsp":
            p = spec.private
            self.cores["dsp"] = [
                Core(self, "dsp", i, f"dsp.core{i}", DSP_CORE_PIPES,
                     {"PRIVATE": self._local("PRIVATE", p.window, p.alignment, "sparse", p.base, p.capacity)},
                     load_pipe="DMA", store_pipe="DMA", local_memory="PRIVATE")
                for i in range(spec.cores.dsp)]
            return

        def cube_memories() -> dict[str, Region]:
            return {n.upper(): self._local(n.upper(), getattr(spec, n).size, getattr(spec, n).alignment)
                    for n in ("l1", "l0a", "l0b", "l0c") if getattr(spec, n) is not None}

        if arch == "coupled":
            cores = []
            for i in range(spec.cores.aic):
                mems = {"UB": self._local("UB", spec.ub.size, spec.ub.alignment), **cube_memories()}
                cores.append(Core(self, "aicore", i, f"core{i}.veccore0", COUPLED_CORE_PIPES, mems,
                                  load_pipe="MTE2", store_pipe="MTE3", local_memory="UB"))
            self.cores["vector"] = cores
            self.cores["cube"] = cores
            return
        ratio = max(1, spec.cores.aiv // spec.cores.aic)
        self.cores["vector"] = [
            Core(self, "aiv", i, f"core{i // ratio}.veccore{i % ratio}", VECTOR_CORE_PIPES,
                 {"UB": self._local("UB", spec.ub.size, spec.ub.alignment)},
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
        alloc = self.gm.allocation_at(addr) if hasattr(self.gm, "allocation_at") else None
        self.gm.free(addr)
        if self.l2 is not None and alloc is not None:
            self.l2.invalidate(alloc.addr, alloc.nbytes)

    def write(self, addr: int, data: Any) -> None:
        """Host → device copy (not timed; host copies are outside the operator's time)."""
        buf = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        self.space.write(addr, buf)
        if self.l2 is not None:
            self.l2.invalidate(addr, buf.size)

    def read(self, addr: int, nbytes: int) -> np.ndarray:
        return self.space.read(addr, nbytes)

    def check_global(self, addr: int, nbytes: int, *, write: bool) -> None:
        self.space.check(addr, nbytes, write=write)

    def global_view(self, addr: int, nbytes: int, *, write: bool = False) -> np.ndarray:
        return self.space.view(addr, nbytes, write=write)

    # -- DMA timing ----------------------------------------------------------------------------
    def gm_transfer(self, pipe: Any, addr: int, nbytes: int, *, write: bool,
                    startup_extra: int = 0) -> simpy.Event:
        """Move ``nbytes`` between GM at ``addr`` and a core; returns the completion event.

        Ascend loads use the calibrated MTE2 model (per-transfer ``base`` plus a share of the
        ``shared`` pool) on the HBM link for L2 misses, and the L2 rate on the L2 link for hits;
        stores use the MTE3 model on the HBM link and allocate in L2. DSP transfers use the
        core's DMA engine rate on the DDR link.
        """
        spec = self.spec
        net = self.net
        if write:
            self.bytes_written += nbytes
        else:
            self.bytes_read += nbytes
        tag = pipe.core.name
        if spec.family == "dsp":
            m = spec.dma
            return net.transfer(nbytes, base_rate=m.base, links=(self.gm_link,),
                                pool=self.pools.get("DMA"), startup=m.startup + startup_extra, tag=tag)
        if write:
            m = spec.mte3
            if self.l2 is not None:
                self.l2.access(addr, nbytes, write=True)
            return net.transfer(nbytes, base_rate=m.base, links=(self.gm_link,),
                                pool=self.pools.get("MTE3"), startup=m.startup + startup_extra, tag=tag)
        m = spec.mte2
        hit = self.l2.access(addr, nbytes, write=False) if self.l2 is not None else 0
        miss = nbytes - hit
        startup = m.startup + startup_extra
        if hit == 0:
            return net.transfer(miss, base_rate=m.base, links=(self.gm_link,),
                                pool=self.pools.get("MTE2"), startup=startup, tag=tag)
        events = [net.transfer(hit, base_rate=spec.rates.l2_read, links=(self.l2_link,),
                               startup=startup, tag=tag)]
        if miss:
            events.append(net.transfer(miss, base_rate=m.base, links=(self.gm_link,),
                                       pool=self.pools.get("MTE2"), startup=startup, tag=tag))
        return events[0] if len(events) == 1 else simpy.AllOf(self.env, events)

    def _record_bandwidth(self, now: int, rates: dict[str, float]) -> None:
        clk = self.spec.clock_hz
        for name, rate in rates.items():
            self.trace.add_counter("memory", f"{name} GB/s", now, rate * clk / 1e9)

    # -- streams and launches ------------------------------------------------------------------
    def create_stream(self) -> Stream:
        s = Stream(self, len(self.streams))
        self.streams.append(s)
        return s

    def launch(self, stream: Stream, kernel: Kernel, block_dim: int, *args: Any, unit: str = "vector",
               core_mask: int | None = None, name: str | None = None) -> Launch:
        """Queue ``block_dim`` blocks of ``kernel`` on ``stream``; returns the Launch record."""
        cores = self.units(unit)
        if block_dim < 1:
            raise SimulatorError(f"block_dim must be >= 1, got {block_dim}")
        if core_mask is not None:
            if core_mask <= 0 or core_mask >> len(cores):
                raise SimulatorError(f"core_mask {core_mask:#x} selects no core or cores beyond the "
                                     f"{len(cores)} {unit} cores of {self.spec.name} "
                                     f"(allowed: 0x1..{(1 << len(cores)) - 1:#x})")
        launch = Launch(name or getattr(kernel, "__name__", "kernel"), kernel, block_dim, unit,
                        core_mask, args, stream)
        stream.launches.append(launch)
        self.launches.append(launch)
        stream.enqueue(lambda: self._run_launch(launch))
        return launch

    def _run_launch(self, launch: Launch) -> Iterator[simpy.Event]:
        env = self.env
        launch.issue = env.now
        overhead = self.spec.launch.overhead
        if overhead:
            yield env.timeout(overhead)
        launch.start = env.now
        blocks = [env.process(self._run_block(launch, b)) for b in range(launch.block_dim)]
        yield simpy.AllOf(env, blocks)
        launch.end = env.now
        if self.trace is not None and self.trace.enabled:
            t = self.trace.track("host", launch.stream.name if launch.stream else "stream")
            self.trace.add_slice(t, launch.name, launch.issue, launch.end,
                                 detail=f"block_dim={launch.block_dim}")

    def _run_block(self, launch: Launch, b: int) -> Iterator[simpy.Event]:
        mask = launch.core_mask
        store = self._free[launch.unit]
        if mask is None:
            core = yield store.get()
        else:
            core = yield store.get(lambda c: (mask >> c.index) & 1)
        core.begin_block(launch, b)
        ctx = KernelContext(core, b, launch.block_dim)
        t0 = self.env.now
        yield from core.dispatch(launch.kernel(ctx, *launch.args), ctx.pending)
        launch.blocks.append((b, core.name, t0, self.env.now))
        if self.trace is not None and self.trace.enabled:
            self.trace.add_slice(self.trace.track(core.name, "BLOCK"), f"{launch.name} block {b}",
                                 t0, self.env.now, tile=b)
        store.put(core)

    def synchronize(self, stream: Stream | None = None) -> None:
        """Run simulated time until ``stream`` (or every stream) has finished its work."""
        if self.faulted is not None:
            raise self.faulted
        streams = [stream] if stream is not None else self.streams
        if not streams:
            return
        markers = [s.marker() for s in streams]
        until = markers[0] if len(markers) == 1 else simpy.AllOf(self.env, markers)
        try:
            self.env.run(until=until)
        except SimulatorError as exc:
            # SimPy re-raises a copy of a process's exception; the original keeps the context
            original = exc.__cause__ if isinstance(exc.__cause__, SimulatorError) else exc
            self.faulted = original
            raise original from None
        except RuntimeError as exc:
            if "No scheduled events left" not in str(exc):
                raise
            waiting = [f"{c.name}.{p.name}: {p.waiting_on}" for c in self.all_cores()
                       for p in c.pipes.values() if p.waiting_on]
            err = DeadlockError("no event can make progress" +
                                (f"; waiting: {'; '.join(waiting[:8])}" if waiting else ""),
                                waiting=waiting)
            self.faulted = err
            raise err from None

    @property
    def now(self) -> int:
        return int(self.env.now)
