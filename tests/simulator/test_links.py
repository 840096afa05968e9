"""Tests for simulator.links: fluid fair-share links in integer-cycle time.

Expected cycle counts are worked out by hand in comments, not by calling the module.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opsim.simulator.links import LinkNetwork, TransferRecord

A_910B = 9.9074
B_910B = 15.896


def issue_at(env: simpy.Environment, net: LinkNetwork, when: int, nbytes: int, **kw) -> list:
    """Call net.transfer at cycle `when`; the returned list receives the TransferRecord."""
    out: list[TransferRecord] = []

    def proc():
        if when:
            yield env.timeout(when)
        rec = yield net.transfer(nbytes, **kw)
        out.append(rec)

    env.process(proc())
    return out


def integral(link) -> float:
    times, rates = link.bandwidth_series()
    if len(times) == 0:
        return 0.0
    return float(np.sum(rates[:-1] * np.diff(times)))


# ---------------------------------------------------------------------------------------------
# single transfer


@pytest.mark.parametrize(
    "nbytes, base, cap, startup",
    [(1000, 32.0, 100.0, 0), (1000, 32.0, 10.0, 5), (1001, 10.0, 10.0, 3), (7, 100.0, 3.0, 0), (1, 0.5, 1.0, 2)],
)
def test_single_transfer_takes_startup_plus_ceil_bytes_over_min_of_demand_and_capacity(nbytes, base, cap, startup):
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("hbm", cap)
    out = issue_at(env, net, 0, nbytes, base_rate=base, links=[hbm], startup=startup, tag="x")
    env.run()
    (rec,) = out
    assert rec == TransferRecord("x", nbytes, 0, startup, startup + math.ceil(nbytes / min(base, cap)))
    assert hbm.bytes_carried == pytest.approx(nbytes)


def test_single_transfer_with_pool_alone_gets_base_plus_whole_pool():
    env = simpy.Environment()
    net = LinkNetwork(env)
    pool = net.add_pool("mte2", 16.0)
    out = issue_at(env, net, 0, 2400, base_rate=8.0, pool=pool, startup=10)
    env.run()
    # 2400 / (8 + 16) = 100 cycles exactly, after 10 cycles of startup.
    assert out[0].end == 110


def test_exact_multiple_of_rate_does_not_gain_an_extra_cycle_from_float_error():
    env = simpy.Environment()
    net = LinkNetwork(env)
    link = net.add_link("l", 30.0)
    # 13 transfers share 30 B/cycle: 30/13 each, so 30 bytes take exactly 13 cycles.  In
    # floats 30 / (30/13) = 13.000000000000002; a naive ceil would give 14.
    outs = [issue_at(env, net, 0, 30, base_rate=100.0, links=[link]) for _ in range(13)]
    env.run()
    assert {o[0].end for o in outs} == {13}
    assert 30 / (30.0 / 13) > 13  # the float trap this test is about is really there


def test_long_transfer_uses_a_constant_number_of_recomputes_not_one_per_cycle():
    env = simpy.Environment()
    net = LinkNetwork(env)
    link = net.add_link("l", 3.0)
    out = issue_at(env, net, 0, 10_000_000, base_rate=3.0, links=[link], startup=4)
    env.run()
    assert out[0].end == 4 + math.ceil(10_000_000 / 3)
    assert net.recompute_count == 2  # one at start, one at completion


# ---------------------------------------------------------------------------------------------
# fair sharing


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_equal_transfers_started_together_share_a_link_equally_and_finish_together(n):
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("hbm", 30.0)
    outs = [issue_at(env, net, 0, 3000, base_rate=100.0, links=[hbm], tag=i) for i in range(n)]
    env.run(until=1)
    # Demand 100 is above the fair share 30/n, so each gets exactly 30/n.
    assert [r for _, r in net.active_rates()] == pytest.approx([30.0 / n] * n)
    env.run()
    ends = {o[0].end for o in outs}
    assert ends == {math.ceil(3000 / (30.0 / n))}


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 24, 48])
@pytest.mark.parametrize("nbytes", [1024, 4096, 16384, 65536])
def test_pool_gives_each_of_n_concurrent_loads_base_plus_pool_over_n(n, nbytes):
    env = simpy.Environment()
    net = LinkNetwork(env)
    pool = net.add_pool("mte2", B_910B)
    startup = 27
    outs = [issue_at(env, net, 0, nbytes, base_rate=A_910B, pool=pool, startup=startup) for _ in range(n)]
    env.run()
    expected = nbytes / (A_910B + B_910B / n) + startup
    for o in outs:
        assert expected <= o[0].end < expected + 1


def test_pool_share_is_bounded_by_a_binding_link():
    env = simpy.Environment()
    net = LinkNetwork(env)
    pool = net.add_pool("mte2", B_910B)
    hbm = net.add_link("hbm", 200.0)
    n = 48  # demand 48 * 10.24 = 491.6 > 200, so the link binds: 200 / 48 each
    outs = [issue_at(env, net, 0, 10_000, base_rate=A_910B, pool=pool, links=[hbm]) for _ in range(n)]
    env.run()
    assert {o[0].end for o in outs} == {math.ceil(10_000 / (200.0 / 48))}
    assert hbm.peak_rate() == pytest.approx(200.0)


def test_transfer_still_in_startup_does_not_count_in_the_pool():
    env = simpy.Environment()
    net = LinkNetwork(env)
    pool = net.add_pool("p", 12.0)
    a = issue_at(env, net, 0, 1000, base_rate=8.0, pool=pool)
    b = issue_at(env, net, 0, 1000, base_rate=8.0, pool=pool, startup=60)
    env.run()
    # A alone at 8+12 = 20 until B starts at 60: 1200 bytes > 1000, so A ends at 50 alone.
    assert a[0].end == 50
    # B starts at 60 with A gone: alone at 20 -> 50 cycles.
    assert b[0] == TransferRecord(None, 1000, 0, 60, 110)


def test_staggered_start_slows_both_then_survivor_speeds_up():
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("hbm", 10.0)
    a = issue_at(env, net, 0, 103, base_rate=10.0, links=[hbm], tag="A")
    b = issue_at(env, net, 4, 100, base_rate=10.0, links=[hbm], tag="B")
    env.run()
    # [0,4):  A alone at 10 -> 40 B moved, 63 left.
    # [4,..): A and B at 5 each. A needs 63/5 = 12.6 -> last byte at 16.6, completes at 17.
    #         A holds its share until 17, so B moves 13 * 5 = 65 by then, 35 left.
    # [17,..): B alone at 10 -> 3.5 cycles -> last byte at 20.5, completes at 21.
    assert a[0] == TransferRecord("A", 103, 0, 0, 17)
    assert b[0] == TransferRecord("B", 100, 4, 4, 21)
    # Carried rates: 10 on [0,4); (63+65)/13 on [4,17); 35/4 on [17,21); idle from 21.
    times, rates = hbm.bandwidth_series()
    assert times.tolist() == [0, 4, 17, 21]
    assert rates.tolist() == pytest.approx([10.0, 128 / 13, 8.75, 0.0])
    assert hbm.bytes_carried == pytest.approx(203.0)


def test_staggered_pool_transfers_follow_a_plus_b_over_n():
    env = simpy.Environment()
    net = LinkNetwork(env)
    pool = net.add_pool("p", 16.0)
    a = issue_at(env, net, 0, 1000, base_rate=4.0, pool=pool)
    b = issue_at(env, net, 10, 500, base_rate=4.0, pool=pool)
    env.run()
    # [0,10): A alone at 4+16 = 20 -> 200 moved, 800 left.
    # [10,..): both at 4+8 = 12. B needs 500/12 = 41.67 -> completes at 10+42 = 52.
    #          A moves 42*12 = 504 by 52 -> 296 left.
    # [52,..): A alone at 20 -> 14.8 -> completes at ceil(66.8) = 67.
    assert b[0].end == 52
    assert a[0].end == 67


# ---------------------------------------------------------------------------------------------
# max-min redistribution


def test_demand_limited_transfer_leaves_its_unused_share_to_others():
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("hbm", 30.0)
    slow = issue_at(env, net, 0, 100, base_rate=5.0, links=[hbm], tag="slow")
    fast = [issue_at(env, net, 0, 100, base_rate=100.0, links=[hbm], tag=i) for i in range(2)]
    env.run(until=1)
    # Fair share would be 10 each; slow only wants 5, so the others get (30-5)/2 = 12.5.
    assert [r for _, r in net.active_rates()] == pytest.approx([5.0, 12.5, 12.5])
    env.run()
    # Fast ones: 100/12.5 = 8 cycles exactly. Slow: 100/5 = 20 (its demand caps it after 8 too).
    assert [f[0].end for f in fast] == [8, 8]
    assert slow[0].end == 20


def test_bottleneck_on_one_link_redistributes_the_other_links_capacity():
    env = simpy.Environment()
    net = LinkNetwork(env)
    l2 = net.add_link("l2", 12.0)  # crossed by A and B only: the bottleneck for them
    hbm = net.add_link("hbm", 40.0)  # crossed by A, B and C
    a = issue_at(env, net, 0, 60, base_rate=100.0, links=[hbm, l2], tag="A")
    b = issue_at(env, net, 0, 60, base_rate=100.0, links=[hbm, l2], tag="B")
    c = issue_at(env, net, 0, 280, base_rate=100.0, links=[hbm], tag="C")
    env.run(until=1)
    # Level rises to min(12/2, 40/3) = 6: l2 saturates, A and B freeze at 6.
    # hbm has 40 - 12 = 28 left, all for C.
    assert [r for _, r in net.active_rates()] == pytest.approx([6.0, 6.0, 28.0])
    assert hbm.rate == pytest.approx(40.0)
    assert l2.rate == pytest.approx(12.0)
    env.run()
    assert (a[0].end, b[0].end, c[0].end) == (10, 10, 10)


def test_transfer_without_links_runs_at_its_demand():
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("hbm", 1.0)
    x = issue_at(env, net, 0, 100, base_rate=10.0)
    y = issue_at(env, net, 0, 10, base_rate=10.0, links=[hbm])
    env.run()
    assert x[0].end == 10
    assert y[0].end == 10


# ---------------------------------------------------------------------------------------------
# hooks and counters


def test_on_change_reports_allocated_link_rates_when_they_change():
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("hbm", 10.0)
    calls: list[tuple[int, dict]] = []
    net.on_change = lambda now, rates: calls.append((now, dict(rates)))
    issue_at(env, net, 0, 100, base_rate=6.0, links=[hbm])
    issue_at(env, net, 5, 50, base_rate=6.0, links=[hbm], startup=2)
    env.run()
    # [0,7): first alone at 6 -> 42 moved. At 7 both at 5 -> 58/5 = 11.6 vs 50/5 = 10:
    # second completes at 17; first has 8 left, alone at 6 -> 1.33 -> completes at 19.
    assert calls == [(0, {"hbm": 6.0}), (7, {"hbm": 10.0}), (17, {"hbm": 6.0}), (19, {"hbm": 0.0})]


def test_active_and_pending_counts_follow_startup_and_completion():
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("hbm", 10.0)
    issue_at(env, net, 0, 100, base_rate=10.0, links=[hbm], startup=5)
    env.run(until=3)
    assert (net.active_count(), net.pending_count(), hbm.active) == (0, 1, 0)
    env.run(until=6)
    assert (net.active_count(), net.pending_count(), hbm.active) == (1, 0, 1)
    env.run()
    assert (net.active_count(), net.completed, hbm.active) == (0, 1, 0)
    assert env.now == 15


# ---------------------------------------------------------------------------------------------
# edge cases and errors


def test_zero_byte_transfer_completes_after_its_startup_without_using_bandwidth():
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("hbm", 10.0)
    z = issue_at(env, net, 3, 0, base_rate=1.0, links=[hbm], startup=4, tag="z")
    z0 = issue_at(env, net, 0, 0, base_rate=1.0, links=[hbm])
    env.run()
    assert z[0] == TransferRecord("z", 0, 3, 7, 7)
    assert z0[0] == TransferRecord(None, 0, 0, 0, 0)
    assert hbm.bytes_carried == 0.0
    assert hbm.rate_segments == []
    assert hbm.peak_rate() == 0.0


@pytest.mark.parametrize("bad", [0, -1.5, float("nan"), float("inf")])
def test_non_positive_or_non_finite_base_rate_is_rejected_naming_the_value(bad):
    net = LinkNetwork(simpy.Environment())
    with pytest.raises(ValueError, match=f"base_rate.*{bad!r}"):
        net.transfer(10, base_rate=bad)


def test_invalid_arguments_are_rejected():
    env = simpy.Environment()
    net = LinkNetwork(env)
    other = LinkNetwork(env)
    hbm = net.add_link("hbm", 10.0)
    foreign = other.add_link("hbm", 10.0)
    foreign_pool = other.add_pool("p", 1.0)
    with pytest.raises(ValueError, match="nbytes"):
        net.transfer(-1, base_rate=1.0)
    with pytest.raises(TypeError, match="nbytes"):
        net.transfer(1.5, base_rate=1.0)
    with pytest.raises(ValueError, match="startup"):
        net.transfer(1, base_rate=1.0, startup=-2)
    with pytest.raises(ValueError, match="not a link of this network"):
        net.transfer(1, base_rate=1.0, links=[foreign])
    with pytest.raises(ValueError, match="once"):
        net.transfer(1, base_rate=1.0, links=[hbm, hbm])
    with pytest.raises(ValueError, match="not a pool of this network"):
        net.transfer(1, base_rate=1.0, pool=foreign_pool)
    with pytest.raises(ValueError, match="already exists"):
        net.add_link("hbm", 5.0)
    with pytest.raises(ValueError, match="capacity"):
        net.add_link("zero", 0.0)
    with pytest.raises(ValueError, match="capacity"):
        net.add_pool("neg", -1.0)
    assert net.pending_count() == 0  # nothing half-registered by the failed calls
    net.add_pool("zero-pool", 0.0)  # a pool may be empty (b = 0 in some load models)


def scenario(seed: int) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("hbm", 50.0)
    l2 = net.add_link("l2", 35.0)
    pool = net.add_pool("p", 15.9)
    outs = []
    for i in range(60):
        paths = [[hbm], [l2], [hbm, l2], []][int(rng.integers(4))]
        outs.append(issue_at(env, net, int(rng.integers(0, 400)), int(rng.integers(0, 5000)),
                             base_rate=float(rng.uniform(1, 30)), links=paths,
                             pool=pool if rng.random() < 0.5 else None,
                             startup=int(rng.integers(0, 30)), tag=i))
    env.run()
    return [o[0] for o in outs], [hbm.rate_segments, l2.rate_segments]


def test_identical_runs_give_identical_records_and_series():
    assert scenario(7) == scenario(7)


# ---------------------------------------------------------------------------------------------
# conservation and capacity (property test)

transfer_st = st.tuples(
    st.integers(0, 200),  # issue cycle
    st.integers(0, 3000),  # nbytes
    st.floats(0.25, 60.0),  # base rate
    st.integers(0, 3),  # path: none, X, Y, X+Y
    st.booleans(),  # uses the pool
    st.integers(0, 20),  # startup
)


def _two_link_network(cap_x, cap_y, pool_cap):
    """The property tests' network: links x and y, one pool; paths index what transfer_st draws."""
    env = simpy.Environment()
    net = LinkNetwork(env)
    x = net.add_link("x", cap_x)
    y = net.add_link("y", cap_y)
    pool = net.add_pool("p", pool_cap)
    return env, net, x, y, pool, [[], [x], [y], [x, y]]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cap_x=st.floats(1.0, 80.0),
    cap_y=st.floats(1.0, 80.0),
    pool_cap=st.floats(0.0, 30.0),
    specs=st.lists(transfer_st, min_size=1, max_size=14),
)
def test_bytes_are_conserved_and_links_never_exceed_capacity(cap_x, cap_y, pool_cap, specs):
    env, net, x, y, pool, paths = _two_link_network(cap_x, cap_y, pool_cap)
    peaks = {"x": 0.0, "y": 0.0}

    def watch(now, rates):
        for name, r in rates.items():
            peaks[name] = max(peaks[name], r)

    net.on_change = watch
    outs = []
    for issue, nbytes, base, p, use_pool, startup in specs:
        outs.append(issue_at(env, net, issue, nbytes, base_rate=base, links=paths[p],
                             pool=pool if use_pool else None, startup=startup))
    env.run()

    assert net.active_count() == 0 and net.pending_count() == 0
    assert net.completed == len(specs)
    for (issue, nbytes, base, p, use_pool, startup), out in zip(specs, outs):
        (rec,) = out
        assert (rec.issue, rec.start) == (issue, issue + startup)
        # Cannot beat its best case: alone, with the whole pool, limited by its links.
        best = min([base + (pool_cap if use_pool else 0.0)] + [l.capacity for l in paths[p]])
        assert rec.end >= rec.start + math.floor(nbytes / best * (1 - 1e-9))
        if nbytes == 0:
            assert rec.end == rec.start
        else:
            assert rec.end > rec.start

    for link in (x, y):
        expected = sum(s[1] for s in specs if link in paths[s[3]])
        assert link.bytes_carried == pytest.approx(expected, rel=1e-9, abs=1e-6)
        assert integral(link) == pytest.approx(link.bytes_carried, rel=1e-6, abs=1e-6)
        seg_sum = sum(r * (e - s) for s, e, r in link.rate_segments)
        assert seg_sum == pytest.approx(link.bytes_carried, rel=1e-6, abs=1e-6)
        assert link.peak_rate() <= link.capacity * (1 + 1e-9)
        assert peaks[link.name] <= link.capacity * (1 + 1e-9)
        times, rates = link.bandwidth_series()
        if len(times):
            assert np.all(np.diff(times) > 0)
            assert rates[-1] == 0.0
            assert np.all(rates >= 0.0)
    pooled = sum(s[1] for s in specs if s[4])
    assert pool.bytes_carried == pytest.approx(pooled, rel=1e-9, abs=1e-6)


def test_many_transfers_over_many_cores_conserve_bytes():
    # 48 cores, each a chain of 100 loads, sharing an HBM link and the MTE2 pool.
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("hbm", 400.0)
    pool = net.add_pool("mte2", B_910B)
    rng = np.random.default_rng(1)
    sizes = rng.integers(1, 64 * 1024, size=(48, 100))

    def core(c):
        for nb in sizes[c]:
            yield net.transfer(int(nb), base_rate=A_910B, links=[hbm], pool=pool, startup=27)

    for c in range(48):
        env.process(core(c))
    env.run()
    assert net.completed == 48 * 100
    assert hbm.bytes_carried == pytest.approx(float(sizes.sum()), rel=1e-9)
    assert integral(hbm) == pytest.approx(float(sizes.sum()), rel=1e-6)
    assert hbm.peak_rate() <= 400.0 * (1 + 1e-9)


def test_bandwidth_series_mid_run_ends_with_the_open_allocated_rate():
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("hbm", 10.0)
    issue_at(env, net, 0, 50, base_rate=4.0, links=[hbm])  # 4 B/cycle -> ends at 13 (12.5)
    issue_at(env, net, 20, 100, base_rate=8.0, links=[hbm])  # 8 B/cycle from 20 -> ends at 33 (32.5)
    env.run(until=25)
    times, rates = hbm.bandwidth_series()
    # [0,13): 50 bytes / 13 cycles; idle [13,20); open segment from 20 at the allocated 8.
    assert times.tolist() == [0, 13, 20]
    assert rates.tolist() == pytest.approx([50 / 13, 0.0, 8.0])
    assert hbm.rate_segments == [(0, 13, pytest.approx(50 / 13)), (20, None, 8.0)]
    assert (hbm.rate, hbm.active) == (8.0, 1)
    env.run()
    times, rates = hbm.bandwidth_series()
    assert times.tolist() == [0, 13, 20, 33]
    assert rates.tolist() == pytest.approx([50 / 13, 0.0, 100 / 13, 0.0])
    assert integral(hbm) == pytest.approx(150.0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cap_x=st.floats(1.0, 80.0),
    cap_y=st.floats(1.0, 80.0),
    pool_cap=st.floats(0.0, 30.0),
    specs=st.lists(transfer_st, min_size=1, max_size=14),
)
def test_link_and_pool_counts_and_rates_follow_the_active_transfers(cap_x, cap_y, pool_cap, specs):
    # The network keeps each link's and pool's ``active`` count up to date as transfers start
    # and finish, and sums rates per link and pool; recount both from the transfers themselves.
    env, net, x, y, pool, paths = _two_link_network(cap_x, cap_y, pool_cap)
    for i, (issue, nbytes, base, p, use_pool, startup) in enumerate(specs):
        issue_at(env, net, issue, nbytes, base_rate=base, links=paths[p],
                 pool=pool if use_pool else None, startup=startup, tag=i)
    checked = []

    def check(now=None, changed=None):
        rates = dict(net.active_rates())
        for link in (x, y):
            mine = [r for i, r in rates.items() if link in paths[specs[i][3]]]
            assert link.active == len(mine)
            assert link.rate <= link.capacity
            assert link.rate == pytest.approx(min(sum(mine), link.capacity), rel=1e-9, abs=1e-12)
        assert pool.active == len([r for i, r in rates.items() if specs[i][4]])
        checked.append(len(rates))

    def probe():                # between recomputes too, every few cycles
        while net.active_count() or net.pending_count() or env.peek() < math.inf:
            check()
            yield env.timeout(37)

    net.on_change = check       # at the end of each recompute that changed a link's rate
    env.process(probe())
    env.run()
    assert net.completed == len(specs)
    assert x.active == y.active == pool.active == 0 and x.rate == y.rate == 0.0
    assert checked
