"""The machine: launches on cores, core masks, streams, faults, deadlock, the vector unit's dtypes."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from opsim import devices
from opsim.kernels.ascend import mse_backward as mse
from opsim.kernels.common import TensorDesc
from opsim.simulator import numerics as nx
from opsim.simulator.device import Device
from opsim.simulator.errors import (CapacityError, DeadlockError, MemoryFault, QueueError, SimulatorError,
                                   UnsupportedInstruction)
from opsim.simulator.isa import Add, Cast, DataCopy, DataCopyPad, Duplicate, ScalarOp, SetFlag, WaitFlag
from opsim.simulator.tile import GlobalTensor
from opsim.traces.trace import Trace

A2 = devices.load("atlas-a2")


def _gm(dev, arr):
    addr = dev.malloc(arr.nbytes)
    dev.write(addr, arr)
    return GlobalTensor.contiguous(dev, addr, nx.dtype(arr.dtype), arr.shape)


def test_more_blocks_than_allowed_cores_wait_for_a_free_core():
    def busy(ctx):
        yield ScalarOp(1000)
    dev = Device(A2, trace=Trace("launch", A2.clock_hz))
    s = dev.create_stream()
    launch = dev.launch(s, busy, 6, core_mask=0b11)
    dev.synchronize(s)
    starts = sorted(b[2] for b in launch.blocks)
    assert len({b[1] for b in launch.blocks}) == 2            # only two cores used
    assert starts[0] == starts[1] and starts[2] >= starts[0] + 1000 and starts[4] >= starts[0] + 2000
    assert launch.cycles >= 3000 + A2.launch.overhead


def test_core_mask_beyond_the_cores_is_refused():
    dev = Device(A2)
    with pytest.raises(Exception, match="core_mask"):
        dev.launch(dev.create_stream(), lambda ctx: iter(()), 1, core_mask=1 << 48)


def _mse_on(dev, stream, n, block_dim, offset_mask=None):
    x = np.ones(n, np.float32)
    t = {k: _gm(dev, x) for k in ("grad_output", "self", "target")}
    t["out"] = GlobalTensor.contiguous(dev, dev.malloc(x.nbytes), nx.FP32, x.shape)
    d = TensorDesc(x.shape, nx.FP32)
    ov = {"block_dim": block_dim}
    if offset_mask is not None:
        ov["core_mask"] = offset_mask
    tiling = mse.plan(A2, {"self": d, "out": d}, {"reduction": 0}, ov)
    return mse.launch(dev, stream, t, tiling, {"reduction": 0})[0]


def test_two_streams_run_concurrently_and_contend_for_bandwidth():
    n = 1 << 20
    lo, hi = (1 << 24) - 1, ((1 << 48) - 1) ^ ((1 << 24) - 1)
    alone = Device(A2, functional=False)
    s = alone.create_stream()
    l_alone = _mse_on(alone, s, n, 24, lo)
    alone.synchronize(s)

    both = Device(A2, functional=False)
    s1, s2 = both.create_stream(), both.create_stream()
    l1 = _mse_on(both, s1, n, 24, lo)
    l2 = _mse_on(both, s2, n, 24, hi)
    both.synchronize()
    assert l1.start == l2.start                              # concurrent, on disjoint cores
    assert l1.cycles > l_alone.cycles and l2.cycles > l_alone.cycles   # each slower than alone
    together = max(l1.end, l2.end) - min(l1.issue, l2.issue)
    assert together < 2 * l_alone.cycles                     # faster than one after the other


def test_same_stream_runs_launches_in_order():
    dev = Device(A2, functional=False)
    s = dev.create_stream()
    a = _mse_on(dev, s, 4096, 2)
    b = _mse_on(dev, s, 4096, 2)
    dev.synchronize(s)
    assert b.issue >= a.end


def test_a_launch_queued_behind_another_pays_the_launch_gap_and_one_on_an_idle_stream_does_not():
    dev = Device(A2, functional=False)
    s = dev.create_stream()
    a = _mse_on(dev, s, 4096, 2)
    b = _mse_on(dev, s, 4096, 2)
    dev.synchronize(s)
    assert A2.launch.gap > 0
    assert (a.gap, b.gap) == (0, A2.launch.gap)
    assert b.start - a.end == A2.launch.overhead + A2.launch.gap
    dev.env.run(until=dev.env.now + 1000)  # the stream has been idle for a while
    c = _mse_on(dev, s, 4096, 2)
    dev.synchronize(s)
    assert c.gap == 0 and c.start - c.issue == A2.launch.overhead


def _add_refusal(dtype: nx.DType) -> str:
    """The message of an A2 vector Add in ``dtype`` (a refused instruction)."""
    def kernel(ctx):
        buf = ctx.tbuf(256, dtype)
        n = 256 // dtype.itemsize // 4
        yield Add(buf[0:n], buf[0:n], buf[n:2 * n], count=n)
    dev = Device(A2)
    s = dev.create_stream()
    dev.launch(s, kernel, 1)
    with pytest.raises(UnsupportedInstruction) as ei:
        dev.synchronize(s)
    return str(ei.value)


def test_bf16_arithmetic_raises_unsupported_instruction_on_a2():
    msg = _add_refusal(nx.BF16)
    assert "bf16" in msg and "Cast" in msg and "core0.veccore0" in msg and "VECTOR" in msg


def test_integer_arithmetic_is_refused_as_unmodelled_not_as_missing_hardware():
    # the A2 vector unit has int32 Add (docs/sources.md#peak-compute: "fp16/fp32/int"); opsim has
    # no integer numerics, and the message must say it is the model, not the device, that lacks it
    msg = _add_refusal(nx.INT32)
    assert "int32" in msg and "not modelled by opsim" in msg and "not an instruction" not in msg


def test_bf16_cast_is_allowed_and_rounds_once():
    x = np.array([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -3.0e38], np.float32)

    def kernel(ctx, src, dst):
        f = ctx.tbuf(32, nx.FP32)
        b = ctx.tbuf(32, nx.BF16)
        q = ctx.queue("VECIN", 1, 32)
        t = q.alloc(nx.FP32)
        yield DataCopyPad(t[0:4], src[0:4], 4)
        q.enque(t)
        t = q.deque()
        yield Cast(b[0:4], t[0:4], "rint", 4)
        yield Cast(f[0:4], b[0:4], "none", 4)
        o = ctx.queue("VECOUT", 1, 32)
        ot = o.alloc(nx.FP32)
        from opsim.simulator.isa import Copy
        yield Copy(ot[0:4], f[0:4], 4)
        o.enque(ot)
        ot = o.deque()
        yield DataCopyPad(dst[0:4], ot[0:4], 4)
        q.free(t)
        o.free(ot)
    dev = Device(A2)
    s = dev.create_stream()
    src = _gm(dev, x)
    dst = GlobalTensor.contiguous(dev, dev.malloc(16), nx.FP32, (4,))
    dev.launch(s, kernel, 1, src, dst)
    dev.synchronize(s)
    got = dev.read(dst.addr, 16).view(np.float32)
    assert np.array_equal(got, x.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_datacopy_length_must_be_whole_32_byte_blocks():
    def kernel(ctx, src):
        q = ctx.queue("VECIN", 1, 64)
        t = q.alloc(nx.FP32)
        yield DataCopy(t[0:3], src[0:3], 3)
    dev = Device(A2)
    s = dev.create_stream()
    dev.launch(s, kernel, 1, _gm(dev, np.ones(8, np.float32)))
    with pytest.raises(MemoryFault, match="DataCopyPad"):
        dev.synchronize(s)


def test_out_of_bounds_gm_read_faults_with_core_pipe_instruction_and_address():
    def kernel(ctx, src):
        q = ctx.queue("VECIN", 1, 256)
        t = q.alloc(nx.FP32)
        yield DataCopyPad(t[0:16], src.tensor[4:], 16)
    dev = Device(A2)
    s = dev.create_stream()
    src = _gm(dev, np.ones(8, np.float32))
    dev.launch(s, kernel, 1, src[0:8])
    with pytest.raises(MemoryFault) as ei:
        dev.synchronize(s)
    msg = str(ei.value)
    assert "core0.veccore0" in msg and "MTE2" in msg and "DataCopyPad" in msg and hex(src.addr)[:6] in msg


def test_faulting_store_leaves_memory_outside_outputs_untouched():
    def kernel(ctx, src, dst):
        q = ctx.queue("VECOUT", 1, 256)
        t = q.alloc(nx.FP32)
        yield DataCopyPad(t[0:16], src[0:16], 16)
        q.enque(t)
        t = q.deque()
        yield DataCopyPad(dst, t[0:16], 16)   # dst is 8 elements: the store would overrun
    dev = Device(A2)
    s = dev.create_stream()
    src = _gm(dev, np.arange(16, dtype=np.float32))
    dst_t = _gm(dev, np.zeros(8, np.float32))
    neighbour = _gm(dev, np.full(64, 7, np.float32))
    before = dev.space.snapshot_digest()
    dev.launch(s, kernel, 1, src, GlobalTensor.contiguous(dev, dst_t.addr, nx.FP32, (16,))[0:16])
    with pytest.raises(MemoryFault):
        dev.synchronize(s)
    assert dev.space.snapshot_digest() == before
    assert np.all(dev.read(neighbour.addr, 256).view(np.float32) == 7)


def test_queue_larger_than_ub_raises_capacity_error_naming_ub():
    def kernel(ctx):
        ctx.queue("VECIN", 2, 128 * 1024)
        yield ScalarOp()
    dev = Device(A2)
    s = dev.create_stream()
    dev.launch(s, kernel, 1)
    with pytest.raises(CapacityError, match="UB"):
        dev.synchronize(s)


def test_wait_on_a_flag_nobody_sets_is_reported_as_deadlock():
    def kernel(ctx):
        yield WaitFlag("MTE2", "VECTOR", 3)
    dev = Device(A2)
    s = dev.create_stream()
    dev.launch(s, kernel, 1)
    with pytest.raises(DeadlockError) as ei:
        dev.synchronize(s)
    assert "VECTOR" in str(ei.value) and "WaitFlag<MTE2_VECTOR>(3)" in str(ei.value)


def test_flags_order_pipes_and_count_sets():
    order = []

    class Mark(ScalarOp):
        def __init__(self, pipe, label):
            super().__init__(10, label)
            self._p = pipe

        @property
        def pipe(self):
            return self._p

        def complete(self, p):
            order.append((self.label, p.core.env.now))

    def kernel(ctx):
        yield Mark("MTE2", "load")
        yield SetFlag("MTE2", "VECTOR", 0)
        yield WaitFlag("MTE2", "VECTOR", 0)
        yield Mark("VECTOR", "compute")
    dev = Device(A2)
    s = dev.create_stream()
    dev.launch(s, kernel, 1)
    dev.synchronize(s)
    (l, tl), (c, tc) = order
    assert l == "load" and c == "compute" and tc >= tl + 10


def test_simulated_gm_bandwidth_never_exceeds_the_link_capacity():
    dev = Device(A2, functional=False)
    s = dev.create_stream()
    _mse_on(dev, s, 1 << 21, 48)
    dev.synchronize(s)
    link = dev.gm_link
    assert link.peak_rate() <= link.capacity * (1 + 1e-9)
    times, rates = link.bandwidth_series()
    assert np.all(rates <= link.capacity * (1 + 1e-9))
    # write-back L2 (the A2 file's l2.write_policy): HBM carries the read misses and the dirty
    # lines evicted; the stores themselves go to the L2 (everything here fits: none evicted)
    assert A2.l2.write_policy == "write-back"
    assert link.bytes_carried == pytest.approx(dev.bytes_read - _l2_hits(dev) + dev.l2.writeback_bytes)
    assert dev.l2.writeback_bytes == 0
    assert dev.l2_link.bytes_carried == pytest.approx(_l2_hits(dev) + dev.bytes_written)


def _l2_hits(dev):
    return dev.l2.hit_bytes if dev.l2 is not None else 0


def test_same_inputs_and_seed_give_identical_outputs_and_traces():
    import opsim
    rng = np.random.default_rng(9)
    x, y, g = (rng.standard_normal(30000).astype(np.float16) for _ in range(3))
    a = opsim.run("mse_loss_backward", grad_output=g, self=x, target=y, reduction="mean", seed=3)
    b = opsim.run("mse_loss_backward", grad_output=g, self=x, target=y, reduction="mean", seed=3)
    assert np.array_equal(a.outputs["out"].view(np.uint16), b.outputs["out"].view(np.uint16))
    assert a.cycles == b.cycles
    import json
    assert json.dumps(a.trace.to_chrome_json()) == json.dumps(b.trace.to_chrome_json())


def test_coupled_cores_are_one_pool_for_vector_and_cube_launches():
    spec = devices.load("atlas-training")

    def busy(ctx):
        yield ScalarOp(1000)
    dev = Device(spec)
    s1, s2 = dev.create_stream(), dev.create_stream()
    a = dev.launch(s1, busy, 1, unit="vector", core_mask=0b1)
    b = dev.launch(s2, busy, 1, unit="cube", core_mask=0b1)
    dev.synchronize()
    (_, core_a, start_a, end_a), (_, core_b, start_b, end_b) = a.blocks[0], b.blocks[0]
    assert core_a == core_b == "core0.veccore0"
    assert start_b >= end_a or start_a >= end_b          # never on the same core at once


def test_a_bug_in_a_kernel_program_is_a_fault_not_a_traceback_through_acl():
    from opsim.simulator.acl import ACL_ERROR_RT_AICORE_EXCEPTION, AclRuntime
    from opsim.simulator.errors import SimulatorError

    def broken(ctx):
        yield ScalarOp(1)
        raise ValueError("kernel bug")
    rt = AclRuntime("atlas-a2")
    rt.aclInit(), rt.aclrtSetDevice(0)
    stream, _ = rt.aclrtCreateStream()
    rt.device.launch(stream.stream, broken, 1)
    assert rt.aclrtSynchronizeStream(stream) == ACL_ERROR_RT_AICORE_EXCEPTION
    assert "kernel bug" in rt.aclGetRecentErrMsg()
    with pytest.raises(SimulatorError, match="kernel bug"):       # and it stays reported
        rt.device.synchronize()


# ---------------------------------------------------------------------------------------------
# in-order issue: the queue depth
# ---------------------------------------------------------------------------------------------

def _held_back_copy(depth: int):
    """A vector core: a copy, 24 independent vector ops, a second copy. Returns the start of
    the second copy, the end of the first, and the run's issue_starved counts."""
    spec = A2.replace_many({"scalar.queue_depth": depth})
    dev = Device(spec, functional=False, trace=Trace("instruction", spec.clock_hz))
    src = GlobalTensor.contiguous(dev, dev.malloc(1024 * 4), nx.FP32, (1024,))

    def kernel(ctx):
        a, b = ctx.tbuf(512 * 4), ctx.tbuf(512 * 4)
        work = ctx.tbuf(4096 * 4)
        yield DataCopy(a, src[0:512])
        for _ in range(24):                       # ~107 cycles each, far longer than a copy
            yield Add(work, work, work)
        yield DataCopy(b, src[512:1024])

    dev.launch(dev.create_stream(), kernel, 1)
    dev.synchronize()
    copies = sorted(dev.trace.slices(thread="MTE2"), key=lambda s: s.start)
    return copies[1].start, copies[0].end, dev.all_cores()[0].issue_starved


def test_a_full_queue_holds_back_later_instructions_for_other_pipes():
    # depth 8: the second copy is issued only when the VECTOR queue has taken the 24 adds,
    # i.e. once 16 of them have run
    k, b = A2.vector.cost["Add"]["fp32"]
    late, first_end, starved = _held_back_copy(8)
    assert late >= 15 * (k * 4096 + b) > first_end
    assert starved["MTE2"] >= late - first_end - 1
    # depth 32: every instruction finds a place at once; the copies run back to back
    early, first_end, starved = _held_back_copy(32)
    assert early == first_end and starved == {}


def test_a_released_stream_refuses_new_work_and_one_with_work_left_is_kept():
    dev = Device(A2, functional=False)
    s = dev.create_stream()
    launch = _mse_on(dev, s, 4096, 2)
    dev.release_stream(s)                     # its launch has not run yet: kept
    assert dev.streams == [s] and dev.launches == [launch]
    dev.synchronize(s)
    dev.release_stream(s)
    assert dev.streams == [] and dev.launches == [] and launch.end > 0
    with pytest.raises(SimulatorError, match="stream0 was released"):
        _mse_on(dev, s, 4096, 2)
    assert dev.create_stream().name == "stream1"


def test_an_l2_hit_on_a_spec_whose_l2_rate_is_refused_names_the_bad_rate():
    # the device checks its DMA routes once; a route it refused (l2_read 0.0) must not turn an L2
    # hit into an AssertionError: the hit goes the long way, whose check names the value
    import dataclasses

    import opsim
    from opsim import devices
    from opsim.kernels import registry

    spec = devices.load("atlas-a2")
    bad = dataclasses.replace(spec, rates=dataclasses.replace(spec.rates, l2_read=0.0))
    kw = registry.get("embedding_dense_backward").example(np.random.default_rng(1), spec, "fp32")
    with pytest.raises(Exception, match=r"base_rate must be finite and > 0, got 0\.0"):
        opsim.run("embedding_dense_backward", device=bad, mode="full", trace="off", **kw)


def test_destroy_pipe_gives_the_whole_ub_back_for_a_second_stage_and_refuses_a_tensor_in_use():
    ub = A2.ub.size
    big = ub // 2 + 4096              # two of these never fit the UB at once

    def two_stages(ctx, dst):
        q = ctx.queue("VECOUT", 1, big)
        t = q.alloc(nx.FP32)
        yield Duplicate(t[0:8], 1.0, count=8)
        q.enque(t)
        t = q.deque()
        yield DataCopyPad(dst[0:8], t[0:8], 8)
        q.free(t)
        ctx.tbuf(big // 2)
        ctx.destroy_pipe()            # TPipe.Destroy(): the next stage plans an empty UB
        q2 = ctx.queue("VECOUT", 1, big)
        t2 = q2.alloc(nx.FP32)
        yield Duplicate(t2[0:8], 2.0, count=8)
        q2.enque(t2)
        t2 = q2.deque()
        yield DataCopyPad(dst[8:16], t2[0:8], 8)
        q2.free(t2)

    dev = Device(A2)
    s = dev.create_stream()
    dst = GlobalTensor.contiguous(dev, dev.malloc(64), nx.FP32, (16,))
    dev.launch(s, two_stages, 1, dst)
    dev.synchronize(s)
    assert np.array_equal(dev.read(dst.addr, 64).view(np.float32), np.repeat([1.0, 2.0], 8).astype(np.float32))

    def in_use(ctx):
        q = ctx.queue("VECIN", 1, 64)
        q.alloc(nx.FP32)
        ctx.destroy_pipe()
        yield ScalarOp(1)
    dev = Device(A2)
    s = dev.create_stream()
    with pytest.raises(QueueError, match="still allocated"):
        dev.launch(s, in_use, 1)
        dev.synchronize(s)
