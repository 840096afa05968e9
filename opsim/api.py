"""The public Python API: ``opsim.run``, ``opsim.devices``, ``opsim.device_spec``.

(docs/sources.md#design-public-api-s9.)

``run`` validates the call, plans a tiling, builds a fresh simulated device, copies the operands
in, launches the operator's kernels on a stream, runs simulated time to completion and returns
the outputs (in the emulated dtype), the cycles, statistics and the trace.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from opsim import devices as _devices
from opsim.devices.spec import DeviceSpec
from opsim.arguments import check_choice, check_device, check_dims, check_mapping, check_operand, check_seed
from opsim.kernels import registry
from opsim.kernels.common import TensorDesc, desc_of
from opsim.limits import check_host_memory
from opsim.simulator import numerics as nx
from opsim.simulator.device import Device
from opsim.stats import LinkStats, RunStats, local_memory_name
from opsim.simulator.errors import CapacityError, SimulatorError, name_kernel_line
from opsim.simulator.memory import align_up
from opsim.simulator.profile import Profiler, launch_records
from opsim.simulator.tile import GlobalTensor
from opsim.traces.bounds import cap_text, core_kind
from opsim.traces.summary import classify_bound
from opsim.traces.tables import launch_metadata
from opsim.traces.trace import LEVELS, Trace

MODES = ("full", "timing", "numeric", "estimate")


@dataclass(frozen=True)
class TensorSpec:
    """A shape-only operand for timing/estimate mode: no data, just shape and dtype."""

    shape: tuple[int, ...]
    dtype: Any = "fp32"

    def __post_init__(self) -> None:
        # no coercion: 2.5, -1, None or NaN as a dimension is an error, not a truncated shape
        object.__setattr__(self, "shape", check_dims("TensorSpec shape", self.shape))
        object.__setattr__(self, "dtype", nx.dtype(self.dtype))

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass(frozen=True)
class RunResult:
    """What one operator run produced."""

    op: str
    device: str
    mode: str
    outputs: dict[str, np.ndarray]
    cycles: int
    time_us: float
    stats: RunStats
    trace: Trace | None = field(default=None, repr=False)
    tiling: Any = None
    # what each kernel launch did (traces.tables.LaunchRecord), in launch order
    launch_records: tuple = field(default=(), repr=False)
    sanitizer: Any = None      # the SanitizerReport of a run with sanitize=True
    # the DeviceSpec the run used, what-if overrides and device files included (the HTML report
    # shows its provenance; the name in `device` alone finds only the catalogue entry)
    spec: Any = field(default=None, repr=False, compare=False)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.outputs[name]

    def tables(self) -> dict[str, tuple[list[str], list[list[Any]]]]:
        """The profiler tables of this run as {name: (header, rows)}: ``op_summary`` (one row per
        launch), ``pipe_utilization`` (per core), ``instr_exe`` and ``code_exe`` (hot spots per
        instruction kind and kernel source line); see docs/profiling.md. Write them with
        ``opsim.traces.tables.write_tables(res.launch_records, path)``."""
        from opsim.traces.tables import TABLES, op_summary
        recs = list(self.launch_records)
        return {name: (op_summary(recs, self.stats.get("gm_link", "HBM")) if name == "op_summary"
                       else fn(recs)) for name, fn in TABLES.items()}


def devices() -> list[str]:
    """Names of the devices in the catalogue."""
    return _devices.catalogue()


def device_spec(name: str | DeviceSpec, overrides: Mapping[str, Any] | None = None) -> DeviceSpec:
    """A catalogue device (or a device file path), optionally with what-if field overrides."""
    spec = name if isinstance(name, DeviceSpec) else _devices.load(name)
    return spec.replace_many(overrides) if overrides else spec


def operators() -> list[str]:
    return registry.names()


def _split_kwargs(op: Any, kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    operands: dict[str, Any] = {}
    attrs: dict[str, Any] = dict(op.attrs)
    tensor_names = set(op.inputs) | set(op.optional) | set(op.outputs)
    for k, v in kwargs.items():
        if k in tensor_names:
            operands[k] = v
        elif k in op.attrs:
            attrs[k] = v
        else:
            allowed = list(op.inputs) + list(op.optional) + list(op.attrs)
            raise TypeError(f"{op.name}: unexpected argument {k!r}; arguments are {', '.join(allowed)}")
    return operands, attrs


def run(op: str, device: str | DeviceSpec = "atlas-a2", mode: str = "full", trace: str = "instruction",
        tiling: Mapping[str, Any] | None = None, seed: int = 0,
        device_overrides: Mapping[str, Any] | None = None, source_lines: bool = False,
        sanitize: bool = False, fast_forward: bool = False,
        progress: Callable[[int], None] | None = None,
        **operands_and_attrs: Any) -> RunResult:
    """Run operator ``op`` on a simulated ``device``.

    Operands are numpy arrays (``ml_dtypes.bfloat16`` for bf16) or, in timing and estimate mode,
    :class:`TensorSpec` shapes. ``tiling`` forces tiling choices (block_dim, tile_length,
    buffer_num, core_mask, …); ``device_overrides`` changes device fields by dotted key
    (``{"ub.size": 262144}``); ``source_lines`` stamps every instruction with its kernel source
    line for the code_exe hot-spot table (``res.tables()``). Raises :class:`OpError` (with the
    aclnn status code) for a
    rejected call and a simulator error (``MemoryFault``, ``CapacityError`` …) for a fault.

    ``fast_forward=True`` lets the engine skip tile rounds it proves repeat
    (simulator/fastforward.py), with identical results; ``res.stats["fast_forward"]`` says what
    it skipped or why not. It is off by default: where it skips, a jump still replays the L2 and
    draws the program ahead, and measured no faster than stepping (benchmarks/run.py, figure 5).

    ``progress`` (full and timing mode, without ``fast_forward``) is called with the simulated
    cycle reached, about every quarter second of wall time while the device simulates (a long
    run: the exact FLCE schedule, 2^30 elements in timing mode); it does not change results.
    ``opsim run`` shows it on a terminal with the estimate mode's total (opsim/progress.py).

    ``sanitize=True`` (full and timing mode) runs the sanitizer (racecheck, memcheck, synccheck;
    docs/sanitizer.md) alongside: ``res.sanitizer`` is its report. Results and cycles are the
    same as without it. A fault still raises; the exception then carries the report as its
    ``sanitizer`` attribute (and as a note in the traceback).
    """
    if not isinstance(op, str):   # an unknown name is registry.get's KeyError, listing the operators
        raise TypeError(f"op must be an operator name such as 'mse_loss_backward'; got {type(op).__name__}")
    check_choice("mode", mode, MODES)
    check_choice("trace level", trace, LEVELS)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable taking the simulated cycle, or None; "
                        f"got {type(progress).__name__}")
    check_device(device)
    seed = check_seed(seed)
    tiling = check_mapping("tiling", tiling, "{'block_dim': 1, 'tile_length': 4096}")
    device_overrides = check_mapping("device_overrides", device_overrides, "{'ub.size': 262144}")
    if fast_forward and mode not in ("full", "timing"):
        raise ValueError(f"fast_forward=True needs mode 'full' or 'timing' (it skips rounds of the "
                         f"simulated machine), got mode {mode!r}")
    if sanitize and mode not in ("full", "timing"):
        raise ValueError(f"sanitize=True needs mode 'full' or 'timing' (the sanitizer watches the "
                         f"simulated machine), got mode {mode!r}")
    opdef = registry.get(op)
    spec = device_spec(device, device_overrides)
    operands, attrs = _split_kwargs(opdef, operands_and_attrs)
    for name, v in operands.items():
        if v is not None:
            # numeric mode reads no output operand: a shape-only out only declares shape and dtype
            shape_only_ok = mode in ("timing", "estimate") or (mode == "numeric" and name in opdef.outputs)
            check_operand(op, name, v, shape_only_ok=shape_only_ok, mode=mode)
    if opdef.prepare is not None:
        operands, attrs = opdef.prepare(spec, operands, attrs, mode)
    descs: dict[str, TensorDesc | None] = {
        n: (desc_of(operands[n]) if operands.get(n) is not None else None)
        for n in (*opdef.inputs, *opdef.optional)}
    given_outputs: dict[str, TensorDesc | None] = {
        n: desc_of(operands[n]) for n in opdef.outputs if operands.get(n) is not None}
    if len(given_outputs) < len(opdef.outputs) and opdef.infer is not None:
        inferred = opdef.infer(spec, descs, attrs)
        for n in opdef.outputs:
            if n not in given_outputs:
                given_outputs[n] = inferred.get(n)
    descs.update(given_outputs)
    out_descs = opdef.validate(spec, descs, attrs)

    if mode == "numeric" and opdef.empty(descs):
        # an empty call skips the shape checks (as the vendor code does) and has no work: its
        # outputs are the empty/zero outputs of full mode, not a golden of mismatched shapes
        return RunResult(op, spec.name, mode, {n: _zeros(d) for n, d in out_descs.items()}, 0, 0.0,
                         RunStats(mode="numeric", empty=True), spec=spec)
    if mode == "numeric":
        check_host_memory(op, mode, descs, out_descs)
        # the golden needs no tiling, but the call is planned all the same: a tiling (or a what-if
        # device) that the other modes refuse with 561002 is refused here too, not answered
        opdef.plan(spec, descs, attrs, tiling)
        arrays = {n: operands.get(n) for n in (*opdef.inputs, *opdef.optional)}
        # a golden of 0-d operands may produce numpy scalars: outputs are always arrays
        outs = {n: np.asarray(v) for n, v in opdef.golden(arrays, attrs).items()}
        for n, od in out_descs.items():
            # an out of another dtype gets the library's final l0op::Cast, as in full mode: the
            # result widened to fp32 (exact for fp16/bf16/fp32) and rounded once (RNE) to out's dtype
            if n in outs and outs[n].dtype != od.dtype.np_dtype:
                outs[n] = outs[n].astype(np.float32).astype(od.dtype.np_dtype)
        return RunResult(op, spec.name, mode, outs, 0, 0.0, RunStats(mode="numeric"), spec=spec)

    if opdef.empty(descs):
        outs = {n: _zeros(d) for n, d in out_descs.items()} if mode == "full" else {}
        # nothing is launched, so the sanitizer watched nothing and found nothing: an empty
        # report, so that `res.sanitizer.ok` holds for every sanitized run
        report = None
        if sanitize:
            from opsim.simulator.sanitizer import SanitizerReport
            report = SanitizerReport()
        return RunResult(op, spec.name, mode, outs, 0, 0.0, RunStats(empty=True, block_dim=0), sanitizer=report,
                         spec=spec)

    tiling_obj = opdef.plan(spec, descs, attrs, tiling)

    if mode == "estimate":
        from opsim.estimate import estimate
        return estimate(opdef, spec, descs, attrs, tiling_obj, op=op)

    if mode == "full":
        check_host_memory(op, mode, descs, out_descs, opdef.workspace(tiling_obj))
    tr = None
    if trace != "off":
        tr = Trace(trace, spec.clock_hz, metadata={
            "device": spec.name, "product": spec.product, "operator": op, "mode": mode,
            "shapes": {n: list(d.shape) for n, d in descs.items() if d is not None},
            "dtypes": {n: d.dtype.name for n, d in descs.items() if d is not None},
            "tiling": _tiling_dict(tiling_obj), "opsim_version": _version()})
    dev = Device(spec, trace=tr, functional=(mode == "full"), seed=seed, fast_forward=fast_forward)
    # the machine is taken apart when the call ends (Device.close): its host memory -- GM,
    # local memories, L2 state, link histories -- goes back now, not at the interpreter's
    # next full garbage collection; the result holds only copies and handed-over outputs
    try:
        profiler = Profiler()
        dev.observers.append(profiler)
        dev.source_lines = source_lines
        dev.progress = progress
        san = None
        if sanitize:
            from opsim.simulator.sanitizer import Sanitizer
            san = Sanitizer(dev)
        stream = dev.create_stream()
        tensors: dict[str, GlobalTensor] = {}
        placed = dict(opdef.place(dev, descs, attrs)) if opdef.place is not None else {}
        ws = opdef.workspace(tiling_obj)
        _check_gm_capacity(op, spec, {n: d.nbytes for n, d in descs.items() if d is not None and n not in placed}, ws)
        memory_of: dict[str, Any] = {}
        for name, d in descs.items():
            if d is None:
                continue
            addr, memory_of[name] = placed[name] if name in placed else (dev.malloc(d.nbytes, name=name), dev)
            tensors[name] = GlobalTensor.contiguous(dev, addr, d.dtype, d.shape)
            if mode == "full" and name not in opdef.outputs:
                # the device keeps the caller's array as the operand's bytes (copied only if a
                # kernel writes into it): a 2^24 fp32 copy-in into fresh host pages costs more
                # than the whole operator in numpy
                memory_of[name].write(addr, np.ascontiguousarray(operands[name]), share=True)
        if ws:
            tensors["workspace"] = GlobalTensor.contiguous(dev, dev.malloc(ws, name="workspace"), nx.UINT8, (ws,))
        launches = opdef.launch(dev, stream, tensors, tiling_obj, attrs)
        try:
            dev.synchronize(stream)
        except SimulatorError as exc:
            # a fault names the kernel line of its instruction, as a kernel's own launch does
            # (a built-in kernel's instructions carry one only with source_lines)
            name_kernel_line(exc)
            if san is None:
                raise
            raise attach_report(exc, san.finish()) from None
        outs = {}
        if mode == "full":
            for n, d in out_descs.items():
                t = tensors[n]
                # the device is dropped after this call: hand over its output bytes without a copy;
                # copied only when they are read-only (never written) or share a host array with
                # other device memory that the result would keep alive (a DSP region's segment)
                raw = memory_of[n].read(t.addr, d.nbytes, copy=False)
                owner = raw.base if raw.base is not None else raw
                if not raw.flags.writeable or owner.nbytes > raw.nbytes:
                    raw = raw.copy()
                outs[n] = raw.view(d.dtype.np_dtype).reshape(d.shape)
        stats = collect_stats(dev, launches, tiling_obj, ws)
        records = tuple(launch_records(dev, profiler))     # every launch the call made, in order
        if tr is not None:
            record_run_facts(tr, dev, stats, records)
        return RunResult(op, spec.name, mode, outs, stats["cycles"], stats["time_us"], stats, tr, tiling_obj,
                         records, san.finish() if san is not None else None, spec=spec)
    finally:
        dev.close()


def record_run_facts(tr: Trace, dev: Device, stats: Mapping[str, Any], records: Any) -> None:
    """What a finished run counted exactly that its trace may not show at every level, into the
    trace's metadata (the summary, the report and the tables read it back): each launch, the
    bytes each link carried within the run and its highest rate, each core's peak of local memory (a launch-level
    trace has no occupancy counters)."""
    tr.metadata["launches"] = launch_metadata(records)
    tr.metadata["link_bytes_carried"] = {n: l["window_bytes"] for n, l in stats["links"].items()}
    # the highest carried rate (the trace's counter shows it too, when the level records counters)
    tr.metadata["link_max_GBps"] = {n: l["max_rate_GBps"] for n, l in stats["links"].items()}
    tr.metadata["local_peak_bytes"] = local_peaks(dev)


def local_peaks(dev: Device) -> dict[str, int]:
    """Peak bytes allocated in the local memory (UB, or a DSP's private memory) of each core that
    ran a block: ``stats["ub_peak_bytes"]`` is the largest."""
    out: dict[str, int] = {}
    for c in dev.all_cores():
        local = c.memories.get("UB") or c.memories.get("PRIVATE")
        if c.blocks_run and local is not None:
            out[c.name] = int(local.peak_allocated_bytes)
    return out


def attach_report(exc: SimulatorError, report: Any) -> SimulatorError:
    """``exc`` carrying the sanitizer's ``report`` (attribute ``sanitizer``, and a traceback note)."""
    exc.sanitizer = report
    if hasattr(exc, "add_note"):
        exc.add_note(str(report))
    return exc


def _check_gm_capacity(op: str, spec: DeviceSpec, buffers: Mapping[str, int], workspace: int) -> None:
    """Refuse, with the numbers, a call whose GM buffers (operands, outputs, workspace) exceed
    the device memory, before anything is allocated."""
    align = spec.gm.alignment
    sizes = dict(buffers)
    if workspace:
        sizes["workspace"] = workspace
    need = sum(align_up(max(int(n), 1), align) for n in sizes.values())
    if need > spec.gm.capacity:
        parts = ", ".join(f"{n} {b} B" for n, b in sizes.items())
        raise CapacityError(f"{op} needs {need} B of {spec.gm.kind} ({parts}); {spec.name} has "
                            f"{spec.gm.capacity} B", buffer=spec.gm.kind, needed=need,
                            available=spec.gm.capacity)


def _zeros(d: TensorDesc | None) -> np.ndarray:
    return np.zeros(d.shape, dtype=d.dtype.np_dtype) if d is not None else np.zeros(0)


def _tiling_dict(tiling: Any) -> dict[str, Any]:
    if hasattr(tiling, "__dataclass_fields__"):
        return {k: getattr(tiling, k) for k in tiling.__dataclass_fields__
                if isinstance(getattr(tiling, k), (int, float, str, type(None)))}
    return {}


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("opsim")
    except Exception:  # pragma: no cover - running from a source tree
        return "0+source"




def _bytes_within(link: Any, t0: int, t1: int) -> float:
    """Bytes ``link`` carried between cycles ``t0`` and ``t1`` (its carried-rate step function)."""
    times, rates = link.bandwidth_series()
    if not len(times) or t1 <= t0:
        return 0.0
    if times[0] >= t0 and times[-1] <= t1 and rates[-1] == 0:
        return float(link.bytes_carried)      # all of its traffic is inside: the exact count
    edges = np.append(times, max(int(times[-1]), t1)).astype(np.float64)
    lo = np.clip(edges[:-1], t0, t1)
    hi = np.clip(edges[1:], t0, t1)
    return float(np.sum(rates * (hi - lo)))


def collect_stats(dev: Device, launches: list, tiling: Any, workspace: int = 0) -> RunStats:
    """Cycles, bytes, bandwidth, per-pipe busy cycles, UB peak and the bound of a finished run."""
    spec = dev.spec
    if launches:
        t0 = min(l.issue for l in launches)
        t1 = max(l.end for l in launches)
    else:
        t0 = t1 = 0
    cycles = int(t1 - t0)
    time_us = spec.cycles_to_us(cycles)
    seconds = cycles / spec.clock_hz if cycles else 0.0
    per_core: dict[str, dict[str, int]] = {}
    pipe_max: dict[str, int] = {}
    pipe_total: dict[str, int] = {}
    busiest: dict[str, str] = {}
    ub_peak = max(local_peaks(dev).values(), default=0)
    instructions = 0
    stall: dict[str, tuple[int, str]] = {}
    for c in dev.all_cores():
        busy = c.pipe_busy()
        if c.blocks_run == 0:
            continue
        for p, w in c.issue_starved.items():
            if w > stall.get(p, (-1, ""))[0]:
                stall[p] = (w, c.name)
        instructions += sum(p.instructions for p in c.pipes.values())
        per_core[c.name] = busy
        for p, b in busy.items():
            pipe_total[p] = pipe_total.get(p, 0) + b
            if b > pipe_max.get(p, -1):
                pipe_max[p] = b
                busiest[p] = c.name
    gm_peak = spec.gm.bandwidth
    links: dict[str, LinkStats] = {}
    for name, link in dev.net.links.items():
        cap = link.capacity * spec.clock_hz
        # the rate over the run counts the bytes carried within the run's window: a link that
        # also carried work outside it (host copies before the launches) is not credited with it
        inside = _bytes_within(link, t0, t1)
        achieved = inside / seconds if seconds else 0.0
        links[name] = {"bytes": int(round(link.bytes_carried)), "window_bytes": inside,
                       "achieved_GBps": achieved / 1e9,
                       "peak_GBps": cap / 1e9, "utilisation": achieved / cap if cap else 0.0,
                       "max_rate_GBps": link.peak_rate() * spec.clock_hz / 1e9}
    gm_name = dev.gm_link.name
    gm_use: Mapping[str, Any] = links.get(gm_name, {})
    launch_overhead = spec.launch.overhead * len(launches)
    tail = ""
    if stall and cycles:
        # in-order issue: a pipe idle while the dispatcher waits for room in another pipe's queue
        # (e.g. MTE2 with the next copy held back behind a chunk's MTE1/CUBE work)
        p, (w, core) = max(stall.items(), key=lambda kv: kv[1][0])
        if w * 20 >= cycles:
            tail += (f"; {p} idle {w} cycles ({100 * w / cycles:.0f}%) on {core} with its next instruction "
                     f"held back by a full queue (scalar.queue_depth {spec.scalar.queue_depth})")
    used: dict[str, int] = {}
    for name in per_core:
        used[core_kind(name)] = used.get(core_kind(name), 0) + 1
    facts = dev.trace_facts()
    link_use = {n: (l["achieved_GBps"], l["peak_GBps"]) for n, l in links.items()}

    def pipe_cap(pipe: str, core: str) -> str:
        kind = core_kind(core)
        total = len(dev.cores.get("cube" if kind == "cube" else "dsp" if kind == "dsp" else "vector") or [])
        return cap_text(pipe, kind, used.get(kind, 0), max(total, used.get(kind, 0)), facts, link_use,
                        spec.clock_hz)
    bound, reason = classify_bound(
        {p: (b, busiest[p]) for p, b in pipe_max.items()}, cycles, launch_overhead, tail, pipe_cap)
    profiler = next((o for o in dev.observers if isinstance(o, Profiler)), None)
    stats: RunStats = {
        "cycles": cycles, "time_us": time_us, "clock_hz": spec.clock_hz,
        "block_dim": getattr(tiling, "block_dim", None),
        "tile_length": getattr(tiling, "tile_length", None),
        "buffer_num": getattr(tiling, "buffer_num", None),
        # bytes_read/bytes_written: GM-addressed bytes, L2 hits included; link_bytes splits them by
        # the link that carried them; bandwidth_GBps is the GM link's (HBM/DDR) achieved rate
        "bytes_read": int(dev.bytes_read), "bytes_written": int(dev.bytes_written),
        "link_bytes": dict(sorted(dev.link_bytes.items())),
        "on_chip_bytes": dict(sorted(profiler.on_chip.items())) if profiler is not None else {},
        "gm_link": gm_name,
        "bandwidth_GBps": gm_use.get("achieved_GBps", 0.0),
        "peak_bandwidth_GBps": gm_peak / 1e9,
        "l2_bandwidth_GBps": links["L2"]["achieved_GBps"] if "L2" in links else None,
        "links": links,
        "pipe_busy": pipe_max, "pipe_busy_total": pipe_total,
        "pipe_utilisation": {p: b / cycles for p, b in pipe_max.items()} if cycles else {},
        "per_core": per_core,
        "ub_peak_bytes": int(ub_peak),
        "local_memory": local_memory_name(spec),
        "workspace_bytes": int(workspace),
        # bytes allocated in GM at the peak: operands, outputs and workspace
        "gm_footprint_bytes": int(dev.gm.peak_allocated_bytes),
        "launches": len(launches), "launch_overhead_cycles": launch_overhead,
        "launch_gap_cycles": sum(int(getattr(l, "gap", 0)) for l in launches),
        "instructions": instructions,
        # per pipe: the most cycles it sat idle on one core, its queue empty, while the in-order
        # dispatcher waited for room in another pipe's queue
        "issue_starved": {p: w for p, (w, _) in sorted(stall.items())},
        "bound": bound, "bound_reason": reason,
    }
    if dev.l2 is not None:
        stats["l2_hit_rate"] = dev.l2.hit_rate
    # what the steady-state fast-forward skipped, or why it did not (simulator/fastforward.py)
    stats["fast_forward"] = dev.ff.summary() if dev.ff is not None else {"enabled": False}
    return stats
