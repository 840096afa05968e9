"""Why an L2 what-if of a write-heavy streaming kernel is not monotone in time (README, known
limits): the traffic follows the L2 size, and only when the write-backs fall does not.

MSE backward streams three inputs and one output once; at 2^22 fp32 elements (64 MiB touched) an
L2 below 64 MiB evicts dirty output lines. These tests pin the mechanism, not the cycles."""
from __future__ import annotations

import collections

import pytest

import opsim
from opsim.simulator.device import Device

SIZES_MIB = (1, 2, 4, 8, 16, 32, 64)


def _run(l2_mib: int) -> opsim.RunResult:
    spec = opsim.TensorSpec((1 << 22,), "fp32")
    return opsim.run("mse_loss_backward", mode="timing", trace="off", reduction="none",
                     device_overrides={"l2.size": l2_mib << 20}, grad_output=spec, self=spec, target=spec)


def _non_increasing(xs: list[int]) -> bool:
    return all(b <= a for a, b in zip(xs, xs[1:]))


def test_the_traffic_follows_the_l2_size():
    """An LRU cache holds what a smaller one holds: a larger L2 hits no less, and misses and
    writes back no more."""
    runs = [_run(m).stats["link_bytes"] for m in SIZES_MIB]
    written = [lb.get("HBM write", 0) for lb in runs]
    assert written[0] > 0 and written[-1] == 0
    assert _non_increasing(written)
    assert _non_increasing([lb.get("HBM read", 0) for lb in runs])
    assert _non_increasing([-lb.get("L2 read", 0) for lb in runs])


def test_without_the_write_backs_timed_the_cycles_follow_the_l2_size(monkeypatch: pytest.MonkeyPatch):
    """The write-backs' HBM transfers are the only part of the run whose timing the L2 size can
    make worse: with them left out (the dirty bytes still counted), a larger L2 is never slower."""
    def untimed(self, event, tag, launch):
        if self.l2 is not None and self.l2.pending_writeback:
            self._count_bytes(launch, self._gm_write_key, self.l2.take_writeback())
        return event
    monkeypatch.setattr(Device, "_with_writeback", untimed)
    cycles = [_run(m).cycles for m in SIZES_MIB]
    assert _non_increasing(cycles), dict(zip(SIZES_MIB, cycles))


def test_the_cores_evict_dirty_lines_together_each_with_its_own_write_back(monkeypatch: pytest.MonkeyPatch):
    """On equal slices the cores run in lockstep, so with a small L2 most of them evict dirty
    lines within the same few cycles, and each evicting access carries its own write-back to HBM:
    a burst of write-back transfers, not one stream."""
    seen: list[tuple[int, str]] = []
    real = Device._with_writeback

    def spy(self, event, tag, launch):
        if self.l2 is not None and self.l2.pending_writeback:
            seen.append((int(self.env.now), tag))
        return real(self, event, tag, launch)
    monkeypatch.setattr(Device, "_with_writeback", spy)
    res = _run(2)
    cores = res.stats["block_dim"]
    by_window: dict[int, set[str]] = collections.defaultdict(set)
    for cycle, core in seen:
        by_window[cycle // 64].add(core)
    assert max(len(c) for c in by_window.values()) > cores // 2
    assert res.stats["link_bytes"]["HBM write"] > 0
