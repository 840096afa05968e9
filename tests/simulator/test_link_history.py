"""Link.forget_history: a device that keeps running (AclRuntime) folds its closed link history
into totals and peaks; what remains is the same step function from history_start on, and no
cycle, byte count or peak changes.

Expected values are worked out by hand in comments, not by calling the module.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from opsim.simulator.links import LinkNetwork, TransferRecord


def issue_at(env: simpy.Environment, net: LinkNetwork, when: int, nbytes: int, out: list, **kw) -> None:
    def proc():
        if when:
            yield env.timeout(when)
        out.append((yield net.transfer(nbytes, **kw)))

    env.process(proc())


def test_folding_keeps_totals_and_peak_and_the_series_from_history_start():
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("hbm", 10.0)
    out: list[TransferRecord] = []
    issue_at(env, net, 0, 50, out, base_rate=4.0, links=[hbm])     # [0, 13): 50 B
    issue_at(env, net, 20, 100, out, base_rate=8.0, links=[hbm])   # idle [13, 20), then [20, 33): 100 B
    env.run()
    hbm.forget_history(15)          # only the step [0, 13) ends by cycle 15
    assert (hbm.history_start, hbm.bytes_forgotten) == (13, 50.0)
    times, rates = hbm.bandwidth_series()
    assert times.tolist() == [13, 20, 33]
    assert rates.tolist() == pytest.approx([0.0, 100 / 13, 0.0])
    hbm.forget_history(env.now)     # the idle step goes too; the last closed step always stays
    assert (hbm.history_start, hbm.bytes_forgotten) == (20, 50.0)
    times, rates = hbm.bandwidth_series()
    assert times.tolist() == [20, 33]
    assert rates.tolist() == pytest.approx([100 / 13, 0.0])
    assert hbm.rate_segments == [(20, 33, pytest.approx(100 / 13))]
    assert hbm.bytes_carried == pytest.approx(150.0)
    assert hbm.peak_rate() == pytest.approx(100 / 13)
    hbm.forget_history(env.now)     # nothing more to fold
    assert (hbm.history_start, len(hbm.bandwidth_series()[0])) == (20, 2)


def test_a_folded_peak_is_still_the_peak():
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm = net.add_link("hbm", 10.0)
    out: list[TransferRecord] = []
    issue_at(env, net, 0, 90, out, base_rate=9.0, links=[hbm])     # [0, 10) at 9 B/cycle
    issue_at(env, net, 20, 20, out, base_rate=2.0, links=[hbm])    # [20, 30) at 2 B/cycle
    issue_at(env, net, 40, 20, out, base_rate=1.0, links=[hbm])    # [40, 60) at 1 B/cycle
    env.run()
    hbm.forget_history(env.now)
    assert hbm.history_start == 40 and hbm.bytes_forgotten == 110.0
    assert hbm.peak_rate() == 9.0


def _run(seed: int, fold: bool) -> tuple[list, list]:
    """Three phases of random transfers from four cores over HBM and L2 (an L2 hit crosses
    only L2, a miss both); with ``fold`` the history is folded between phases."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    net = LinkNetwork(env)
    hbm, l2 = net.add_link("hbm", 24.0), net.add_link("l2", 40.0)
    pool = net.add_pool("mte2", 16.0)
    out: list[TransferRecord] = []
    t = 0
    for _ in range(3):
        for core in range(4):
            for k in range(int(rng.integers(3, 9))):
                links = [l2] if rng.random() < 0.4 else [hbm, l2]
                issue_at(env, net, t + int(rng.integers(0, 400)), int(rng.integers(1, 5000)), out,
                         base_rate=float(rng.uniform(2, 12)), links=links, pool=pool,
                         startup=int(rng.integers(0, 30)), tag=(core, k))
        t += 2000
        env.run(until=t)
        if fold:
            for link in (hbm, l2):
                link.forget_history(env.now)
    env.run()
    return out, [hbm, l2]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_folding_between_phases_changes_no_cycle_byte_or_peak(seed):
    plain_out, plain = _run(seed, fold=False)
    fold_out, folded = _run(seed, fold=True)
    assert fold_out == plain_out                       # every transfer ends on the same cycle
    for a, b in zip(plain, folded):
        assert b.history_start > 0                     # something was folded
        assert b.bytes_carried == a.bytes_carried
        assert b.peak_rate() == a.peak_rate()
        ta, ra = a.bandwidth_series()
        tb, rb = b.bandwidth_series()
        i = int(np.searchsorted(ta, b.history_start))
        assert ta[i] == b.history_start                # folding cuts at a step boundary
        assert tb.tolist() == ta[i:].tolist() and rb.tolist() == ra[i:].tolist()
        kept = float(np.sum(rb[:-1] * np.diff(tb)))
        assert kept + b.bytes_forgotten == pytest.approx(b.bytes_carried, rel=1e-9)
