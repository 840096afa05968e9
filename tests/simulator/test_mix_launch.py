"""Mixed AIC/AIV launches: a cube program and two vector programs per block, cross-core flags."""
from __future__ import annotations

import pytest

from opsim import devices
from opsim.simulator.cube import CrossCoreSetFlag, CrossCoreWaitFlag
from opsim.simulator.device import Device, MixKernel
from opsim.simulator.errors import DeadlockError, SimulatorError
from opsim.simulator.isa import ScalarOp
from opsim.traces.trace import Trace

SPEC = devices.load("atlas-a2")


def _run(kernel, block_dim: int = 1, spec=SPEC) -> tuple[Device, Trace, object]:
    tr = Trace("instruction", spec.clock_hz)
    dev = Device(spec, trace=tr, functional=False)
    s = dev.create_stream()
    launch = dev.launch(s, kernel, block_dim, unit="mix", name="mix")
    dev.synchronize()
    return dev, tr, launch


def test_each_block_runs_one_cube_program_and_two_vector_programs_of_the_same_ai_core():
    seen = []

    def aic(ctx):
        seen.append(("aic", ctx.core.name, ctx.block_idx, ctx.block_dim, ctx.sub_block_idx))
        yield ScalarOp(10)

    def aiv(ctx):
        seen.append(("aiv", ctx.core.name, ctx.block_idx, ctx.block_dim, ctx.sub_block_idx))
        yield ScalarOp(10)

    _, tr, launch = _run(MixKernel(aic, aiv), block_dim=3)
    assert sorted(seen) == sorted(
        [("aic", f"core{b}.cubecore0", b, 3, 0) for b in range(3)] +
        [("aiv", f"core{b}.veccore{s}", 2 * b + s, 6, s) for b in range(3) for s in range(2)])
    assert {"core0.cubecore0", "core0.veccore0", "core0.veccore1", "core2.veccore1"} <= set(tr.processes)
    assert sorted(core for _, core, _, _ in launch.blocks) == sorted(
        [f"core{b}.cubecore0" for b in range(3)] + [f"core{b}.veccore{s}" for b in range(3) for s in range(2)])


def test_the_cube_core_waits_for_both_of_its_vector_cores():
    def aic(ctx):
        yield CrossCoreWaitFlag(3, mode=2, pipe="SCALAR")
        yield ScalarOp(5, label="after")

    def aiv(ctx):
        yield ScalarOp(100 if ctx.sub_block_idx == 0 else 700)
        yield CrossCoreSetFlag(3, mode=2, pipe="SCALAR")

    _, tr, _ = _run(MixKernel(aic, aiv))
    (after,) = [s for s in tr.slices(process="core0.cubecore0", thread="SCALAR")]
    ends = sorted(s.end for p in ("core0.veccore0", "core0.veccore1") for s in tr.slices(process=p, thread="SCALAR"))
    assert ends[0] < ends[1] <= after.start          # released by the slower vector core, not the first


def test_one_set_by_the_cube_core_releases_each_vector_core():
    def aic(ctx):
        yield ScalarOp(400)
        yield CrossCoreSetFlag(1, mode=2, pipe="SCALAR")

    def aiv(ctx):
        yield CrossCoreWaitFlag(1, mode=2, pipe="SCALAR")
        yield ScalarOp(5)

    _, tr, _ = _run(MixKernel(aic, aiv))
    (work,) = list(tr.slices(process="core0.cubecore0", thread="SCALAR"))
    for p in ("core0.veccore0", "core0.veccore1"):
        (s,) = list(tr.slices(process=p, thread="SCALAR"))
        assert s.start >= work.end


def test_mode_0_is_a_barrier_over_every_core_of_the_kind_in_the_launch():
    def aic(ctx):
        yield ScalarOp(1)

    def aiv(ctx):
        yield ScalarOp(100 * (ctx.block_idx + 1))
        yield CrossCoreSetFlag(2, mode=0, pipe="SCALAR")
        yield CrossCoreWaitFlag(2, mode=0, pipe="SCALAR")
        yield ScalarOp(3, label="after")

    _, tr, _ = _run(MixKernel(aic, aiv), block_dim=2)
    slices = [s for p in tr.processes if "veccore" in p for s in tr.slices(process=p, thread="SCALAR")]
    work = [s for s in slices if s.end - s.start >= 100]
    afters = [s for s in slices if s.end - s.start == 3]
    assert sorted(s.end - s.start for s in work) == [100, 200, 300, 400]
    assert len(afters) == 4 and all(s.start >= max(w.end for w in work) for s in afters)


def test_a_flag_used_twice_needs_two_sets():
    def aic(ctx):
        for _ in range(2):
            yield CrossCoreWaitFlag(0, mode=2, pipe="SCALAR")
            yield ScalarOp(2)

    def aiv(ctx):
        yield ScalarOp(50)
        yield CrossCoreSetFlag(0, mode=2, pipe="SCALAR")
        yield ScalarOp(300)
        yield CrossCoreSetFlag(0, mode=2, pipe="SCALAR")

    _, tr, _ = _run(MixKernel(aic, aiv))
    first, second = list(tr.slices(process="core0.cubecore0", thread="SCALAR"))
    w50, w300 = list(tr.slices(process="core0.veccore1", thread="SCALAR"))
    assert w50.end <= first.start < w300.end <= second.start


def test_a_wait_that_is_never_set_is_reported_as_a_deadlock():
    def aic(ctx):
        yield CrossCoreWaitFlag(5, mode=2, pipe="MTE2")

    def aiv(ctx):
        yield ScalarOp(1)

    with pytest.raises(DeadlockError, match="CrossCoreWaitFlag"):
        _run(MixKernel(aic, aiv))


def test_mixed_launches_need_a_split_part_and_a_mix_kernel():
    tr = Trace("off")
    dev = Device(SPEC, trace=tr, functional=False)
    with pytest.raises(SimulatorError, match="MixKernel"):
        dev.launch(dev.create_stream(), lambda ctx: iter(()), 1, unit="mix")
    coupled = Device(devices.load("atlas-training"), functional=False)
    with pytest.raises(SimulatorError, match="separate cube and vector cores"):
        coupled.launch(coupled.create_stream(), MixKernel(lambda c: iter(()), lambda c: iter(())), 1, unit="mix")


def test_group_flags_outside_a_mixed_launch_are_refused():
    dev = Device(SPEC, functional=False)

    def kernel(ctx):
        yield CrossCoreSetFlag(0, mode=2, pipe="SCALAR")

    dev.launch(dev.create_stream(), kernel, 1, unit="vector")
    with pytest.raises(SimulatorError, match="mixed AIC/AIV launch"):
        dev.synchronize()


def test_cross_core_flags_are_drawn_as_flow_arrows_between_cube_and_vector_cores():
    import numpy as np
    from opsim import devices
    import opsim
    from opsim.kernels import registry
    op = registry.get("fused_linear_cross_entropy_loss_grad")
    kw = op.example(np.random.default_rng(0), devices.load("atlas-a2"), "bf16")
    res = opsim.run(op.name, device="atlas-a2", **kw)
    tr = res.trace
    cross = [(a, b) for a, b, _ in tr.flows()
             if tr.track_names(tr.s_track[a])[0] != tr.track_names(tr.s_track[b])[0]]
    assert cross
    kinds = {(tr.track_names(tr.s_track[a])[0].split(".")[1][:7], tr.track_names(tr.s_track[b])[0].split(".")[1][:7])
             for a, b in cross}
    assert ("cubecor", "veccore") in kinds
    assert all(tr.s_end[a] <= tr.s_start[b] for a, b in cross)   # the arrow points forward in time
