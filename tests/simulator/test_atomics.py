"""Atomic-add DMA commits: applied at completion, simultaneous ones in a seeded order.

The values are chosen so that fp32 addition order is visible: adding {2^24, 1, -2^24} to 0
gives 1 only when the 1 is added after both big terms (2^24 + 1 rounds back to 2^24), else 0.
"""
from __future__ import annotations

import numpy as np
import pytest

from opsim import devices
from opsim.simulator import numerics as nx
from opsim.simulator.atomics import AtomicCommitter
from opsim.simulator.device import Device
from opsim.simulator.isa import DataCopyPad, Duplicate, SetAtomicAdd, SetAtomicNone
from opsim.simulator.tile import GlobalTensor

BIG = float(2 ** 24)
VALUES = (BIG, 1.0, -BIG)


def _run(seed: int, fill_lengths: tuple[int, ...], values=VALUES, dtype=nx.FP32, trace=None):
    """Block b fills a UB buffer (Duplicate of fill_lengths[b] elements, which sets when its
    DMA starts) and atomically adds its first 8 elements into the same 8 GM elements."""
    spec = devices.load("atlas-a2")
    dev = Device(spec, seed=seed, trace=trace)
    out = GlobalTensor.contiguous(dev, dev.malloc(8 * dtype.itemsize), dtype, (8,))
    dev.write(out.addr, np.zeros(8, dtype.np_dtype))

    def kernel(ctx):
        q = ctx.queue("VECOUT", 1, max(fill_lengths) * dtype.itemsize)
        buf = q.alloc(dtype)
        yield Duplicate(buf, values[ctx.block_idx], count=fill_lengths[ctx.block_idx])
        q.enque(buf)
        buf = q.deque()
        yield SetAtomicAdd(dtype)
        yield DataCopyPad(out[0:8], buf, 8)
        yield SetAtomicNone()
        q.free(buf)

    stream = dev.create_stream()
    dev.launch(stream, kernel, len(values), name="atomic_test")
    dev.synchronize(stream)
    return dev.read(out.addr, 8 * dtype.itemsize).view(dtype.np_dtype).copy(), dev


def test_simultaneous_commits_are_ordered_by_the_seed():
    results = {float(_run(seed, (8, 8, 8))[0][0]) for seed in range(12)}
    # both orders occur over a dozen seeds, and nothing else does
    assert results == {0.0, 1.0}


def test_same_seed_gives_identical_bits():
    a, _ = _run(5, (8, 8, 8))
    b, _ = _run(5, (8, 8, 8))
    assert a.tobytes() == b.tobytes()


def test_identical_transfers_complete_in_the_same_cycle_and_are_counted_as_simultaneous():
    _, dev = _run(0, (8, 8, 8))
    assert dev.atomics.commits == 3
    assert dev.atomics.batches == 1
    assert dev.atomics.simultaneous == 3
    assert dev.atomics.pending == 0


def test_commits_in_different_cycles_apply_in_time_order_for_every_seed():
    # fills of 8, 4096 and 8192 elements make the three DMAs start (and finish) at different
    # cycles in block order: 0 + 2^24 + 1 - 2^24 = 0 in fp32, whatever the seed
    outs = [_run(seed, (8, 4096, 8192)) for seed in range(6)]
    assert all(float(o[0][0]) == 0.0 for o in outs)
    assert all(dev.atomics.simultaneous == 0 for _, dev in outs)
    # the reverse time order gives the other sum: -2^24 + 1 = -16777215 is exact, + 2^24 = 1
    rev, _ = _run(0, (8192, 4096, 8))
    assert float(rev[0]) == 1.0


def test_fp16_atomic_add_rounds_each_commit_to_fp16():
    # fp16: 2048 + 1 = 2049 is not representable (ties to even 2048); -2048 + 1 = -2047 is.
    vals = (2048.0, 1.0, -2048.0)
    seen = {float(_run(seed, (16, 16, 16), values=vals, dtype=nx.FP16)[0][0]) for seed in range(12)}
    assert seen <= {0.0, 1.0} and len(seen) == 2


def test_atomic_flush_is_marked_in_the_trace():
    from opsim.traces.trace import Trace
    tr = Trace("instruction", 1.8e9)
    _run(0, (8, 8, 8), trace=tr)
    stores = [s for s in tr.slices(thread="MTE3") if s.name == "DataCopyPad"]
    assert len(stores) == 3 and all(s.detail.endswith("atomic add") for s in stores)
    assert len({s.process for s in stores}) == 3


def test_committer_applies_a_lone_commit_without_drawing_from_the_generator():
    import simpy

    class Target:
        def __init__(self):
            self.got = []

        def atomic_add(self, values):
            self.got.append(values.copy())

    env = simpy.Environment()
    rng = np.random.default_rng(1)
    state = rng.bit_generator.state
    c = AtomicCommitter(env, rng)
    t = Target()
    buf = np.ones(4, np.float32)

    def proc():
        c.commit(t, buf)
        buf[:] = 7  # the source buffer is reused in the same cycle: the commit keeps its copy
        yield env.timeout(1)

    env.process(proc())
    env.run()
    assert len(t.got) == 1 and t.got[0].tolist() == [1, 1, 1, 1]
    assert rng.bit_generator.state == state


@pytest.mark.parametrize("seed", [0, 1])
def test_all_commits_land_before_synchronize_returns(seed):
    out, dev = _run(seed, (8, 8, 8), values=(1.0, 2.0, 4.0))
    assert out.tolist() == [7.0] * 8


def test_an_atomic_store_of_another_dtype_than_set_is_a_fault():
    spec = devices.load("atlas-a2")
    dev = Device(spec)
    out = GlobalTensor.contiguous(dev, dev.malloc(16 * 2), nx.FP16, (16,))

    def kernel(ctx):
        buf = ctx.tbuf(16 * 2, nx.FP16)
        yield SetAtomicAdd(nx.FP32)
        yield DataCopyPad(out[0:16], buf, 16)

    dev.launch(dev.create_stream(), kernel, 1)
    with pytest.raises(Exception, match=r"stores fp16 while SetAtomicAdd<fp32> is in effect"):
        dev.synchronize()
    assert dev.read(out.addr, 32).tobytes() == bytes(32)      # nothing was written
