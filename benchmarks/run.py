"""Performance ratios, measured in one run (never asserted in tests).

1. opsim full-mode MSE backward (fp32, 2^24 elements, atlas-a2) wall time over a plain numpy
   implementation of the same formula, ((x - y) * cof) * grad.
2. Simulated instructions per second over raw SimPy timeouts per second (one process yielding
   env.timeout(1) in a loop): how close the machine model runs to the event engine's speed.
3. Timing-only (shapes, no data) wall time over full mode for the same run.

Run: python benchmarks/run.py [--elements N] [--repeat R]
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import simpy  # noqa: E402

import opsim  # noqa: E402


def best_of(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def numpy_mse(g, x, y, cof):
    return ((x - y) * np.float32(cof)) * g


def simpy_timeouts_per_second(n: int = 1_000_000) -> float:
    env = simpy.Environment()

    def proc(env):
        for _ in range(n):
            yield env.timeout(1)
    env.process(proc(env))
    t0 = time.perf_counter()
    env.run()
    return n / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=1 << 24)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    n = args.elements
    rng = np.random.default_rng(0)
    g, x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    cof = float(np.float32(2.0 / n))

    t_np, ref = best_of(lambda: numpy_mse(g, x, y, cof), args.repeat)
    t_full, res = best_of(lambda: opsim.run("mse_loss_backward", device="atlas-a2", grad_output=g, self=x,
                                            target=y, reduction="mean", trace="off"), args.repeat)
    assert np.array_equal(res.outputs["out"], ref), "opsim result differs from numpy"
    spec = opsim.TensorSpec((n,), "fp32")
    t_timing, tres = best_of(lambda: opsim.run("mse_loss_backward", device="atlas-a2", mode="timing", trace="off",
                                               grad_output=spec, self=spec, target=spec, reduction="mean"),
                             args.repeat)
    instr = res.stats["instructions"]
    ips = instr / t_full
    sps = simpy_timeouts_per_second()
    figures = {
        "elements": n, "numpy_s": t_np, "opsim_full_s": t_full, "opsim_timing_s": t_timing,
        "full_over_numpy": t_full / t_np, "timing_over_full": t_timing / t_full,
        "simulated_cycles": res.cycles, "instructions": instr, "instructions_per_s": ips,
        "simpy_timeouts_per_s": sps, "instructions_over_simpy": ips / sps,
    }
    print(f"MSE backward fp32, {n} elements on atlas-a2 ({res.cycles} simulated cycles, {instr} instructions)")
    print(f"  numpy reference            {t_np * 1e3:9.1f} ms")
    print(f"  opsim full mode            {t_full * 1e3:9.1f} ms   = {t_full / t_np:6.1f} x numpy")
    print(f"  opsim timing mode          {t_timing * 1e3:9.1f} ms   = {t_timing / t_full:6.2f} x full mode")
    print(f"  simulated instructions/s   {ips:11.0f}")
    print(f"  raw SimPy timeouts/s       {sps:11.0f}   (instructions/s = {ips / sps:.3f} x raw SimPy)")
    return figures


if __name__ == "__main__":
    main()
