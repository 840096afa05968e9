"""The bound reason names the binding resource with its number: the per-core copy rate
(a + b/n at n cores), a full link, a pipe, or too few cores."""
from __future__ import annotations

import ml_dtypes
import numpy as np

import opsim
from opsim.traces.bounds import cap_text, copy_rate_facts


def _mse(block_dim=None, mode="full"):
    rng = np.random.default_rng(0)
    x, y, g = (rng.standard_normal((64, 4096)).astype(ml_dtypes.bfloat16) for _ in range(3))
    if mode == "estimate":
        x, y, g = (opsim.TensorSpec(a.shape, "bf16") for a in (x, y, g))
    return opsim.run("mse_loss_backward", device="atlas-a2", mode=mode, grad_output=g, self=x, target=y,
                     reduction="mean", tiling={"block_dim": block_dim} if block_dim else None)


def test_mse_at_64x4096_names_the_per_core_mte2_rate_not_the_hbm_link():
    res = _mse()
    spec = opsim.device_spec("atlas-a2")
    a, b = spec.mte2.base, spec.mte2.shared               # GE-PERF t = a + b/blockDim
    n = res.stats["block_dim"]
    assert n == 32 < spec.cores.aiv
    per_core = a + b / n
    total = per_core * n * spec.clock_hz / 1e9
    hbm = res.stats["links"]["HBM"]["utilisation"]
    want = (f"MTE2 of {n} vector cores at {per_core:.1f} B/cycle each = {total:.0f} GB/s; "
            f"HBM {100 * hbm:.0f}% used: more blocks would help")
    assert res.stats["bound"] == "memory"
    assert want in res.stats["bound_reason"]
    # the stores stay in the write-back L2, so HBM carries only the loads: 25% of its peak
    assert "MTE2 of 32 vector cores at 10.4 B/cycle each = 599 GB/s; HBM 25% used" in want
    # the trace summary says the same from the trace alone
    assert want in res.trace.summary().bound_reason


def test_all_cores_used_drops_the_advice_and_the_estimate_names_the_same_cap():
    full = _mse(block_dim=48)
    assert "MTE2 of 48 vector cores" in full.stats["bound_reason"]
    assert "more blocks would help" not in full.stats["bound_reason"]
    est = _mse(mode="estimate")
    assert "B/cycle each" in est.stats["bound_reason"] and "HBM" in est.stats["bound_reason"]


def test_a_full_link_is_named_as_the_cap():
    facts = {"gm_link": "HBM", "copy_rates": {"MTE2": [9.9, 15.9]}}
    text = cap_text("MTE2", "vector", 48, 48, facts, {"HBM": (1300.0, 1382.4)}, 1.8e9)
    assert text.startswith("HBM link full: 1300.0 of 1382.4 GB/s (94%)")
    text = cap_text("MTE2", "cube", 24, 24, {"gm_link": "HBM"}, {"HBM": (100.0, 1382.4), "L2": (4500.0, 4752.0)},
                    1.8e9)
    assert text.startswith("L2 link full")


def test_a_compute_pipe_is_named_with_the_cores_it_used():
    text = cap_text("VECTOR", "vector", 8, 48, {"gm_link": "HBM"}, {"HBM": (10.0, 1382.4)}, 1.8e9)
    assert text == "VECTOR pipe is the cap (HBM 1% used); only 8 of 48 vector cores used: more blocks would help"


def test_copy_rates_come_from_the_device_file():
    spec = opsim.device_spec("atlas-a2")
    rates = copy_rate_facts(spec)
    assert rates["MTE2"] == [spec.mte2.base, spec.mte2.shared]
    assert rates["cube MTE2"] == [float(spec.rates.gm_read), 0.0]
    dsp = copy_rate_facts(opsim.device_spec("mt7004"))
    assert dsp["DMA"][0] == opsim.device_spec("mt7004").dma.base


def _rates(text: str) -> list[float]:
    import re
    return [float(v) for v in re.findall(r"([0-9.]+) GB/s", text)]


def test_copy_rates_that_add_up_past_the_link_name_its_peak_not_their_sum():
    # 2 cores at 9.9 + 15.9/2 = 17.85 B/cycle each at 1.8 GHz ask for 64 GB/s of a 50 GB/s HBM
    facts = {"gm_link": "HBM", "copy_rates": {"MTE2": [9.9, 15.9]}}
    text = cap_text("MTE2", "vector", 2, 48, facts, {"HBM": (29.0, 50.0)}, 1.8e9)
    assert text.startswith("MTE2 of 2 vector cores at 17.9 B/cycle each, more than the HBM link's 50 GB/s peak; "
                           "HBM 58% used")
    assert max(_rates(text)) <= 50.0
    # within the peak, the sum is named as before
    assert "= 64 GB/s" in cap_text("MTE2", "vector", 2, 48, facts, {"HBM": (29.0, 1382.4)}, 1.8e9)


def test_a_narrow_what_if_hbm_gets_no_bound_reason_above_its_peak():
    # MSE's example on atlas-a2 with a 50 GB/s HBM: the reason said "MTE2 of 2 vector cores at
    # 17.9 B/cycle each = 64 GB/s"
    from opsim import TensorSpec
    shape = TensorSpec((64, 256), "fp32")
    for mode in ("timing", "estimate"):
        res = opsim.run("mse_loss_backward", device="atlas-a2", mode=mode, trace="off",
                        device_overrides={"gm.bandwidth": 50e9}, grad_output=shape, self=shape, target=shape)
        reason = res.stats["bound_reason"]
        assert "B/cycle each" in reason and max(_rates(reason)) <= 50.0, reason
