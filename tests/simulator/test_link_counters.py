"""The trace's link bandwidth counters integrate to the bytes each link carried, never to its
allocation: a transfer that delivers its last byte part-way through a cycle holds its share
until the whole cycle, but carries nothing more (simulator/links.py, *Accounting*).

Expected step functions are worked out by hand in comments, not by calling the module; the
whole-run goldens are the links' own byte counts and highest carried rates (``res.stats``).
"""
from __future__ import annotations

import numpy as np
import pytest
import simpy

import opsim
from opsim.kernels import registry
from opsim.simulator import acl
from opsim.simulator.acl import AclRuntime
from opsim.simulator.link_counters import LinkCounters
from opsim.simulator.links import LinkNetwork
from opsim.traces.trace import Trace


def issue_at(env: simpy.Environment, net: LinkNetwork, when: int, nbytes: int, **kw) -> None:
    def proc():
        if when:
            yield env.timeout(when)
        yield net.transfer(nbytes, **kw)

    env.process(proc())


def points(trace: Trace, link: str) -> list[tuple[int, float]]:
    return [(t, v) for p, s, t, v in trace.counters() if p == "memory" and s == f"{link} GB/s"]


def integral_bytes(trace: Trace, link: str) -> float:
    """∫ of the counter (GB/s, a step function that ends at 0) in bytes."""
    pts = points(trace, link)
    assert pts and pts[-1][1] == 0.0, "the counter ends with the link idle"
    t = np.array([p[0] for p in pts], dtype=np.float64)
    v = np.array([p[1] for p in pts])
    return float(np.sum(v[:-1] * np.diff(t))) * 1e9 / trace.clock_hz


def test_a_transfer_ending_mid_cycle_is_counted_at_its_carried_rate():
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("HBM", 10.0)
    trace = Trace("tile", 1e9)                  # 1 GHz: GB/s = bytes per cycle
    counters = LinkCounters(trace, 1e9)
    # 100 B at 6 B/cycle: the last byte arrives at 16.67, the transfer completes at 17 and
    # holds 6 B/cycle until then (102 B of allocation), but the link carried 100 B
    issue_at(env, net, 0, 100, base_rate=6.0, links=[hbm])
    env.run()
    counters.record(net.links, int(env.now))
    assert points(trace, "HBM") == [(0, pytest.approx(100 / 17)), (17, 0.0)]
    assert integral_bytes(trace, "HBM") == pytest.approx(100.0, rel=1e-12)


def test_recording_in_phases_with_folded_history_writes_the_same_counter():
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("HBM", 10.0)
    trace = Trace("tile", 1e9)
    counters = LinkCounters(trace, 1e9)
    issue_at(env, net, 0, 100, base_rate=6.0, links=[hbm])     # [0, 17): 100 B
    issue_at(env, net, 20, 50, base_rate=4.0, links=[hbm])     # idle [17, 20), [20, 33): 50 B
    env.run(until=10)
    counters.record(net.links, int(env.now))
    assert points(trace, "HBM") == []                          # in flight: not known yet
    env.run(until=25)
    counters.record(net.links, int(env.now))
    assert points(trace, "HBM") == [(0, pytest.approx(100 / 17)), (17, 0.0)]
    hbm.forget_history(env.now)                                # as a long-lived runtime does
    env.run()
    counters.record(net.links, int(env.now))
    counters.record(net.links, int(env.now))                   # again: nothing new
    assert points(trace, "HBM") == [(0, pytest.approx(100 / 17)), (17, 0.0),
                                    (20, pytest.approx(50 / 13)), (33, 0.0)]
    assert integral_bytes(trace, "HBM") == pytest.approx(150.0, rel=1e-12)


def test_a_segment_that_merges_after_a_recording_keeps_its_counter_on():
    # two back-to-back transfers at the same rate on one link: their carried steps merge into
    # one; recorded between them (at 10, the first completes at 10 and the second starts then)
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("HBM", 10.0)
    trace = Trace("tile", 1e9)
    counters = LinkCounters(trace, 1e9)
    issue_at(env, net, 0, 50, base_rate=5.0, links=[hbm])      # [0, 10)
    issue_at(env, net, 10, 50, base_rate=5.0, links=[hbm])     # [10, 20)
    env.run(until=11)
    counters.record(net.links, int(env.now))
    env.run()
    counters.record(net.links, int(env.now))
    pts = points(trace, "HBM")
    assert pts[-1] == (20, 0.0) and all(v == pytest.approx(5.0) for _, v in pts[:-1])
    assert integral_bytes(trace, "HBM") == pytest.approx(100.0, rel=1e-12)


CASES = [("fused_linear_cross_entropy_loss_grad", "atlas-a2", "bf16"),
         ("embedding_dense_backward", "atlas-a2", "fp32"),
         ("mse_loss_backward", "atlas-a2", "bf16")]


@pytest.mark.parametrize("op_name,dev,dt", CASES, ids=[c[0] for c in CASES])
def test_each_link_counter_integrates_to_the_bytes_the_link_carried(op_name, dev, dt):
    # before: FLCE's L2 counter integrated to 533,082 B for 521,825 carried (+2.2%), with a
    # highest point of 3366 GB/s for a highest carried rate of 3308
    op = registry.get(op_name)
    res = opsim.run(op_name, device=dev, **op.example(np.random.default_rng(0), opsim.device_spec(dev), dt))
    for name, link in res.stats["links"].items():
        if not link["bytes"]:
            continue
        assert integral_bytes(res.trace, name) == pytest.approx(link["window_bytes"], rel=1e-9), name
        top = max(v for _, v in points(res.trace, name))
        assert top == pytest.approx(link["max_rate_GBps"], rel=1e-12) and top <= link["peak_GBps"], name


def test_a_runtime_trace_counts_every_launch_once_across_synchronizes():
    # AclRuntime folds the link history after each synchronize; a kernel also runs while a host
    # copy holds the host (run_until), so the counters are written in several pieces
    from opsim.kernels import aclnn
    rt = AclRuntime("atlas-a2", trace_level="tile")
    assert rt.aclInit() == 0 and rt.aclrtSetDevice(0) == 0
    shape = [64, 256]
    rng = np.random.default_rng(1)

    def tensor():
        host = rng.standard_normal(shape).astype(np.float32)
        ptr, _ = rt.aclrtMalloc(host.nbytes)
        assert rt.aclrtMemcpy(ptr, host.nbytes, host, host.nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE) == 0
        return rt.aclCreateTensor(shape, acl.ACL_FLOAT, None, 0, 2, shape, ptr)
    g, x, y, out = tensor(), tensor(), tensor(), tensor()
    stream, _ = rt.aclrtCreateStream()
    for _ in range(2):
        ws, ex, ret = aclnn.aclnnMseLossBackwardGetWorkspaceSize(g, x, y, 0, out)
        assert ret == 0 and aclnn.aclnnMseLossBackward(0, ws, ex, stream) == 0
        tensor()                                               # a host copy while it runs
        assert rt.aclrtSynchronizeStream(stream) == 0
    dev = rt.device
    assert dev is not None and rt.trace is not None
    for name, link in dev.net.links.items():
        assert link.bytes_carried > 0
        assert integral_bytes(rt.trace, name) == pytest.approx(link.bytes_carried, rel=1e-9), name
