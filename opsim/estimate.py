"""``mode="estimate"``: cycles derived from the kernel program itself (docs/sources.md#design-modes-s7).

Every operator -- built in or registered by a user -- is estimated by replaying its kernel
program (opsim/replay_estimate.py, simulator/replay.py): the same generators and per-instruction
costs as the simulator, without the event loop. A closed form (``OpDef.estimate``, or one kept
here in ``MODELS``) is used instead only for the operators in ``CLOSED_FORM_KEPT``, where it is
measurably better than the replay on the example studies (docs/estimate.md has both errors).
The statistics use the simulator's keys where they mean the same thing (cycles, bytes,
bandwidth, pipe busy and utilisation, UB bytes, bound) so studies can mix both modes.
"""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from opsim.devices.spec import DeviceSpec
from opsim.kernels.analytic import Estimate, TileWork, cast_work, stores_to_l2, with_writebacks
from opsim.kernels.common import OpDef, TensorDesc
from opsim.replay_estimate import replay_estimate
from opsim.traces.bounds import cap_text, copy_rate_facts
from opsim.stats import LinkStats, RunStats, local_memory_name
from opsim.traces.summary import classify_bound



# "replay" | "closed-form" | None (the default per operator: CLOSED_FORM_KEPT); set with prefer()
_PREFERRED: str | None = None

# Operators whose closed form is measurably better than the replay (docs/estimate.md, both rows):
# - binarycrossentropygrad: the DSP's eight cores drift apart on the one DDR link; the replay's
#   lockstep fair share overestimates by up to 3.3 % (0.90 % mean), the closed form 0.02 % mean.
# - embedding_dense_backward: kept for speed (the replay is as close: 0.36 % mean against 0.45 %),
#   500x faster -- its kernels loop over rows and index blocks without KernelContext.tiles, so
#   the replay cannot skip a steady state (1-1.5 s a point). It does not model blocks in waves
#   (a block_dim override above the vector cores): there it returns None and the replay
#   estimates (atlas-training, grad 512x64, block_dim 33/96/200: closed form -5.3/+4.2/+18.4 %
#   against timing, replay +0.9/-0.2/+1.9 %).
# - fused_linear_cross_entropy_loss_grad: the closed form models the L2 sharing of matmul panels
#   between cores wave by wave; the replay's sampled blocks see another L2 order (+20 % mean).
# Under what-if links (device_overrides of gm.* and l2.*) they stay: each prices the links in its
# program as the simulator routes them (docs/estimate.md, "Error under what-if links"), where the
# replay is further off (FLCE) or as far (the embedding's small-dim kernel).
CLOSED_FORM_KEPT: frozenset[str] = frozenset({
    "binarycrossentropygrad", "embedding_dense_backward", "fused_linear_cross_entropy_loss_grad"})


@contextmanager
def prefer(model: str | None) -> Iterator[None]:
    """Within the block, estimate with ``model`` ("replay", or "closed-form" where an operator
    still has one) instead of the default -- for benchmarks/estimate_error.py, which measures both."""
    global _PREFERRED
    if model not in (None, "replay", "closed-form"):
        raise ValueError(f"estimate model {model!r} is not one of 'replay', 'closed-form' or None")
    saved, _PREFERRED = _PREFERRED, model
    try:
        yield
    finally:
        _PREFERRED = saved


def closed_form(opdef: OpDef) -> Any:
    """The operator's closed-form model, if it still has one (None: the replay is its only model)."""
    return opdef.estimate or MODELS.get(opdef.name)


def estimate(opdef: OpDef, spec: DeviceSpec, descs: Mapping[str, TensorDesc | None],
             attrs: Mapping[str, Any], tiling: Any, op: str | None = None) -> Any:
    """The RunResult of an analytical estimate of ``opdef`` with this tiling on ``spec``.
    ``op`` is the name the caller gave (``path/file.py:name`` for an operator from a file), which
    the result and its errors carry as the other modes' do; default: the operator's own name."""
    from opsim.api import RunResult, _check_gm_capacity  # api imports this module lazily
    name = op if op is not None else opdef.name
    if opdef.place is None:
        # a call whose operands, outputs and workspace exceed device memory is refused with the
        # numbers, as the simulator refuses it (capacity studies find the limit in either mode)
        _check_gm_capacity(name, spec, {n: d.nbytes for n, d in descs.items() if d is not None},
                           int(opdef.workspace(tiling) or 0))
    # the operator's own model, else one kept here for operators whose module has none
    hook = closed_form(opdef)
    use_closed = hook is not None and (_PREFERRED == "closed-form" or (
        _PREFERRED is None and opdef.name in CLOSED_FORM_KEPT))
    est: Estimate | None = hook(spec, descs, attrs, tiling) if use_closed else None
    if est is not None:
        est = _with_writeback(spec, est)
    else:
        # no closed form, or one that does not model this call (it returned None)
        est = replay_estimate(opdef, spec, descs, attrs, tiling)
    if est.launches > 1 and spec.launch.gap:
        # the launches of one call are queued back to back: each after the first starts
        # launch.gap cycles after the previous one ends, as in the simulator (simulator/device.py)
        est = dataclasses.replace(est, cycles=int(est.cycles) + spec.launch.gap * (est.launches - 1))
    stats = stats_of(spec, est, tiling)
    return RunResult(name, spec.name, "estimate", {}, stats["cycles"], stats["time_us"], stats,
                     None, tiling, spec=spec)


def _gm_written(spec: DeviceSpec, est: Estimate) -> int:
    """Bytes of ``est``'s stores the GM link carries: every one without a write-back L2; with one,
    those written back within the call -- the model's own count where it has one (the replay's,
    which its cycles price), else at least what does not fit the L2."""
    written = int(est.bytes_written)
    if not stores_to_l2(spec):
        return written
    assert spec.l2 is not None
    if est.gm_bytes_written is not None:
        return min(written, int(est.gm_bytes_written))
    return max(0, written - int(spec.l2.size))


def _with_writeback(spec: DeviceSpec, est: Estimate) -> Estimate:
    """A closed form with the dirty lines a write-back L2 evicts to HBM, which its program does
    not move (``analytic.with_writebacks``; a model with launches of its own prices them per
    launch and says how many bytes): a call that stores more than the L2 holds takes at least
    the HBM link's time for them and its HBM reads (embedding 4096 x 2048 rows into 32000 on
    atlas-a2 with a 69 GB/s what-if HBM: -81 % and 4.9x the link's peak without them)."""
    if est.gm_bytes_written is not None or not stores_to_l2(spec):
        return est
    return with_writebacks(spec, [est])[0]


def stats_of(spec: DeviceSpec, est: Estimate, tiling: Any) -> RunStats:
    """Simulator-compatible statistics of an estimate (see opsim.api.collect_stats)."""
    cycles = int(est.cycles)
    seconds = cycles / spec.clock_hz if cycles else 0.0
    gm = spec.gm.kind
    # bytes by link: the estimate's L2-served loads ride the L2, the rest the GM link (HBM/DDR).
    # Stores into a write-back L2 are taken by the L2 (write-allocate), as the simulator counts
    # them (Device.gm_transfer: "L2 write"); the GM link carries only the dirty lines evicted
    # (_gm_written). Counting every store on HBM put an HBM-bound estimate above the link's peak
    # (MSE with gm.bandwidth = 100e9: 124 "GB/s" of 100).
    written = int(est.bytes_written)
    if stores_to_l2(spec):
        l2_written = written
        gm_written = _gm_written(spec, est)
    else:
        l2_written, gm_written = 0, written
    link_bytes = {f"{gm} read": int(est.bytes_read - est.l2_bytes_read), f"{gm} write": gm_written}
    if est.l2_bytes_read:
        link_bytes["L2 read"] = int(est.l2_bytes_read)
    if l2_written:
        link_bytes["L2 write"] = l2_written
    gm_bytes = link_bytes[f"{gm} read"] + link_bytes[f"{gm} write"]
    gm_rate = gm_bytes / seconds / 1e9 if seconds else 0.0
    l2_rate = (est.l2_bytes_read + l2_written) / seconds / 1e9 if seconds else 0.0
    links = {gm: (gm_rate, spec.gm.bandwidth / 1e9)}
    carried = {gm: gm_bytes}
    if spec.l2 is not None:
        links["L2"] = (l2_rate, spec.l2.bandwidth / 1e9)
        carried["L2"] = int(est.l2_bytes_read) + l2_written
    # every link the device has, as the simulator reports them (no highest rate: the estimate
    # has no rate history)
    link_stats: dict[str, LinkStats] = {
        n: {"bytes": carried[n], "window_bytes": float(carried[n]), "achieved_GBps": rate, "peak_GBps": peak,
            "utilisation": rate / peak if peak else 0.0}
        for n, (rate, peak) in links.items()}
    launch_overhead = spec.launch.overhead * est.launches
    kind = "dsp" if spec.family == "dsp" else "cube" if "CUBE" in est.pipe_busy else "vector"
    total = spec.cores.dsp if kind == "dsp" else spec.cores.aic if kind == "cube" else spec.vector_cores
    used = max(1, min(int(getattr(tiling, "block_dim", est.block_dim) or est.block_dim or 1), total))
    facts = {"gm_link": gm, "copy_rates": copy_rate_facts(spec)}

    def cap(pipe: str, _core: str) -> str:
        k = "cube" if kind == "cube" and pipe in ("MTE1", "CUBE", "FIXP", "MTE2") else (
            "vector" if kind == "cube" else kind)
        n = used if k == kind else min(used * max(1, spec.cores.aiv // max(1, spec.cores.aic)), spec.vector_cores)
        t = total if k == kind else spec.vector_cores
        return cap_text(pipe, k, n, t, facts, links, spec.clock_hz)
    bound, reason = classify_bound({p: (b, "") for p, b in est.pipe_busy.items()}, cycles,
                                   launch_overhead, " (estimate)", cap)
    return {
        "cycles": cycles, "time_us": spec.cycles_to_us(cycles), "clock_hz": spec.clock_hz,
        "block_dim": getattr(tiling, "block_dim", est.block_dim),
        "tile_length": getattr(tiling, "tile_length", None),
        "buffer_num": getattr(tiling, "buffer_num", None),
        "bytes_read": int(est.bytes_read), "bytes_written": int(est.bytes_written),
        "link_bytes": link_bytes, "gm_link": gm, "links": link_stats,
        "bandwidth_GBps": gm_rate,
        "peak_bandwidth_GBps": spec.gm.bandwidth / 1e9,
        "l2_bandwidth_GBps": l2_rate if spec.l2 is not None else None,
        "pipe_busy": dict(est.pipe_busy),
        "pipe_utilisation": {p: b / cycles for p, b in est.pipe_busy.items()} if cycles else {},
        "ub_peak_bytes": int(est.ub_bytes),
        "local_memory": local_memory_name(spec),
        "workspace_bytes": int(est.workspace_bytes),
        "launches": est.launches, "launch_overhead_cycles": launch_overhead,
        "launch_gap_cycles": spec.launch.gap * max(0, est.launches - 1),
        "bound": bound, "bound_reason": reason,
        # est.extra adds the operator's own keys, which RunStats cannot list
        "estimate_model": est.model, "estimate_notes": est.notes, **dict(est.extra),  # type: ignore[typeddict-item]
    }


# ---------------------------------------------------------------------------------------------
# closed forms of operators whose module has no estimate hook, kept here, keyed by name
# ---------------------------------------------------------------------------------------------

def _dsp_bce_estimate(spec: DeviceSpec, t: Mapping[str, TensorDesc | None], attrs: Mapping[str, Any],
                      tiling: Any) -> Estimate:
    """DSP binarycrossentropygrad (kernels/dsp.py): shared storage streams x, y (+w) (+dloss)
    through each thread's working area on the one DMA pipe; private storage is vector work
    only. A thread first reads dloss[0] when the reduction is not none."""
    from opsim.kernels.analytic import _model, pipeline_estimate, copy_rates
    dt = tiling.dtype
    half = dt == "fp16"
    item = 2 if half else 4
    w_def, per_elem = tiling.weight_defined, tiling.reduction == 0

    def vector(n: int) -> tuple:
        if not half:
            return (("Muls", "fp32", n), ("Adds", "fp32", n), ("Mul", "fp32", n), ("Adds", "fp32", n),
                    ("Sub", "fp32", n), *((("Mul", "fp32", n),) if w_def else ()), ("Div", "fp32", n),
                    ("Mul", "fp32", n) if per_elem else ("Muls", "fp32", n))
        return (*cast_work(dt, "fp32", n), ("Muls", "fp32", n), ("Adds", "fp32", n), ("Mul", "fp32", n),
                ("Adds", "fp32", n), *cast_work(dt, "fp32", n), ("Sub", "fp32", n),
                *((*cast_work(dt, "fp32", n), ("Mul", "fp32", n)) if w_def else ()), ("Div", "fp32", n),
                *((*cast_work(dt, "fp32", n), ("Mul", "fp32", n)) if per_elem else (("Muls", "fp32", n),)),
                *cast_work("fp32", dt, n))

    shared = tiling.storage == "shared"

    def work(n: int) -> TileWork:
        if not shared:
            return TileWork(loads=(), vector=vector(n), stores=())
        return TileWork(loads=(n * item,) * tiling.n_inputs, vector=vector(n), stores=(n * item,))

    bd = tiling.block_dim
    last = max(0, tiling.total - (bd - 1) * tiling.chunk) if shared else tiling.total
    # the private memory holds the working area and, for _p, the operands (each reserved in
    # whole alignment units, as the simulator's allocator places them)
    resident = 0
    if not shared and spec.private is not None:
        from opsim.kernels.dsp import POINTERS
        from opsim.simulator.memory import align_up
        resident = sum(align_up(max(d.nbytes, 1), spec.private.alignment)
                       for k in POINTERS if (d := t.get(k)) is not None)
    est = pipeline_estimate(spec, block_dim=bd, per_core=tiling.chunk if shared else tiling.total,
                            last_core=last, tile_length=tiling.tile_length, buffer_num=tiling.buffer_num,
                            work=work, cores=bd, ub_bytes=tiling.work_used + resident)
    extra: float = 0
    if tiling.reduction != 0 and shared:
        # every thread reads dloss[0] on its DMA pipe before its first tile
        rate, _ = copy_rates(spec, bd, 0)
        extra = _model(spec, "DMA").startup + -(-item // 1) / rate
    return Estimate(**{**est.__dict__, "cycles": int(est.cycles + extra),
                       "bytes_read": est.bytes_read + (item * bd if tiling.reduction != 0 and shared else 0)})


MODELS = {"binarycrossentropygrad": _dsp_bce_estimate}
