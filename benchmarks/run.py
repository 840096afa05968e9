"""Performance ratios of issue #12, measured in one run (never asserted in tests).

1. Full-mode MSE backward (fp32, 2^24 elements, atlas-a2) wall time over a plain numpy
   implementation of the same formula, ((x - y) * cof) * grad.           target <= 5x
   Also printed: the kernel's own tile-by-tile numpy work with no engine at all (same tiling,
   same 7 calls per tile), the floor of this figure for any engine that computes tile by tile.
2. Timing-mode MSE backward at 2^30 elements over the full-mode wall at 2^24.  target <= 2x
3. Simulated instructions per second over raw SimPy timeouts per second (one process yielding
   env.timeout(1) in a loop): how close the machine model runs to the event engine's speed;
   from the full-mode run and from a timing-mode run (engine only, no numerics). target >= 0.25x
   benchmarks/engine_ceiling.py measures what a bare engine of the same design (a SimPy process
   per pipe, bounded in-order queues, flags, no machine model) reaches on this launch's shape.
   Figures 1-3 time the default engine (``fast_forward`` off, as ``opsim.run`` runs); one more
   full-mode run at 2^24 with the opt-in steady-state fast-forward (simulator/fastforward.py)
   prints its wall and what it skipped, or why it did not: it is exact, so it only skips rounds of
   a machine whose state repeats (figure 5 shows one that does).
4. With --flce: FusedLinearCrossEntropyLossGrad BT 4096 / H 4096 / V 32000 bf16 on atlas-a2,
   high-performance mode, timing mode with the exact schedule (coarsen 1: no coarse cube
   instructions, no L2 sampling): wall seconds.                           target <= 20 s
   (minutes today, so behind a flag).
5. The fast-forward where the state repeats: timing-mode MSE backward at --elements on one core
   of atlas-a2 (tiling block_dim 1), wall with the fast-forward over wall without (run
   alternately, the best of --repeat each).

Run: python benchmarks/run.py [--elements N] [--timing-elements N] [--repeat R] [--flce] [--no-ff-demo]
"""
from __future__ import annotations

import argparse
import os
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


def tiled_numpy_mse(g, x, y, cof, tiling) -> np.ndarray:
    """The kernel's own data work with no engine: per core slice (the plan's per_core, the last
    core its last_core) and per tile of ``tiling.tile_length`` elements, copy x, y and g into one
    UB-like buffer, Sub, Muls, Mul in place, copy the tile out -- 7 numpy calls per tile, as the
    simulated kernel's 3 loads, 3 vector instructions and 1 store. It bounds figure 1 from below
    for any engine that computes tile by tile."""
    n = g.shape[0]
    tile = tiling.tile_length
    out = np.empty(n, np.float32)
    ub = np.empty(3 * tile, np.float32)
    bx, by, bg = ub[:tile], ub[tile:2 * tile], ub[2 * tile:]
    c = np.float32(cof)
    for core in range(tiling.block_dim):
        lo = core * tiling.per_core
        hi = n if core == tiling.block_dim - 1 else lo + tiling.per_core
        for s in range(lo, hi, tile):
            e = min(hi, s + tile)
            k = e - s
            vx, vy, vg = bx[:k], by[:k], bg[:k]
            vx[...] = x[s:e]
            vy[...] = y[s:e]
            vg[...] = g[s:e]
            np.subtract(vx, vy, out=vx)
            np.multiply(vx, c, out=vx)
            np.multiply(vx, vg, out=vx)
            out[s:e] = vx
    return out


def simpy_timeouts_per_second(n: int = 1_000_000) -> float:
    env = simpy.Environment()

    def proc(env):
        for _ in range(n):
            yield env.timeout(1)
    env.process(proc(env))
    t0 = time.perf_counter()
    env.run()
    return n / (time.perf_counter() - t0)


def mse_timing(n: int, **kw):
    spec = opsim.TensorSpec((n,), "fp32")
    return opsim.run("mse_loss_backward", device="atlas-a2", mode="timing", trace="off",
                     grad_output=spec, self=spec, target=spec, reduction="mean", **kw)


def skipped(res) -> str:
    ff = res.stats.get("fast_forward") or {}
    if not ff.get("enabled"):
        return "fast-forward off"
    if ff.get("skipped_rounds"):
        return (f"fast-forward skipped {ff['skipped_rounds']} rounds, {ff['skipped_cycles']} cycles, "
                f"{ff['skipped_instructions']} instructions")
    return f"fast-forward skipped nothing: {ff.get('reason')}"


def flce_exact() -> object:
    TS = opsim.TensorSpec
    bt, h, v = 4096, 4096, 32000
    ops = {"grad": TS((bt,), "fp32"), "input": TS((bt, h), "bf16"), "weight": TS((v, h), "bf16"),
           "target_mask": TS((bt,), "bool"), "masked_target": TS((bt,), "int64"),
           "softmax": TS((bt, v), "fp32")}
    return opsim.run("fused_linear_cross_entropy_loss_grad", device="atlas-a2", mode="timing",
                     trace="off", tiling={"coarsen": 1}, **ops)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=1 << 24, help="full-mode MSE elements (2^24)")
    ap.add_argument("--timing-elements", type=int, default=1 << 30,
                    help="timing-mode MSE elements (2^30); 0 skips figure 2")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--flce", action="store_true", help="also time the exact FLCE 910B-class schedule")
    ap.add_argument("--no-ff-demo", dest="ff_demo", action="store_false",
                    help="skip figure 5 (the fast-forward on a one-core plan)")
    args = ap.parse_args(argv)
    n = args.elements
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rng = np.random.default_rng(0)
    g, x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    cof = float(np.float32(2.0 / n))

    # warm-up (lazy imports, first-launch caches) so that --repeat 1 times the steady cost
    w = g[:65536]
    numpy_mse(w, w, w, cof)
    opsim.run("mse_loss_backward", device="atlas-a2", grad_output=w, self=w, target=w, reduction="mean",
              trace="off")
    t_np, ref = best_of(lambda: numpy_mse(g, x, y, cof), args.repeat)
    def full(ff: bool):
        return opsim.run("mse_loss_backward", device="atlas-a2", fast_forward=ff, grad_output=g, self=x,
                         target=y, reduction="mean", trace="off")
    t_full, res = best_of(lambda: full(False), args.repeat)
    t_full_ff, res_ff = best_of(lambda: full(True), args.repeat)
    assert res_ff.cycles == res.cycles and np.array_equal(res_ff.outputs["out"], ref)
    assert np.array_equal(res.outputs["out"], ref), "opsim result differs from numpy"
    t_timing, tres = best_of(lambda: mse_timing(n, fast_forward=False), args.repeat)
    t_tiled, tiled = best_of(lambda: tiled_numpy_mse(g, x, y, cof, res.tiling), args.repeat)
    assert np.array_equal(tiled, ref), "the tiled numpy floor differs from numpy"
    instr = res.stats["instructions"]
    ips = instr / t_full
    ips_timing = tres.stats["instructions"] / t_timing
    sps = simpy_timeouts_per_second()
    figures = {
        "elements": n, "load_average": load, "numpy_s": t_np, "opsim_full_s": t_full,
        "opsim_full_ff_s": t_full_ff, "opsim_timing_s": t_timing, "full_over_numpy": t_full / t_np,
        "timing_over_full": t_timing / t_full, "tiled_numpy_s": t_tiled,
        "tiled_numpy_over_numpy": t_tiled / t_np,
        "simulated_cycles": res.cycles, "instructions": instr, "instructions_per_s": ips,
        "timing_instructions_per_s": ips_timing, "simpy_timeouts_per_s": sps,
        "instructions_over_simpy": ips / sps, "timing_instructions_over_simpy": ips_timing / sps,
    }
    from opsim.simulator import native
    engine = native.status()
    figures["engine"] = engine["engine"]
    print(f"load average {load:.2f} at the start; engine {engine['engine']} ({engine['reason']})")
    print(f"MSE backward fp32, {n} elements on atlas-a2 ({res.cycles} simulated cycles, {instr} instructions)")
    print(f"  numpy reference              {t_np * 1e3:9.1f} ms")
    print(f"  opsim full mode              {t_full * 1e3:9.1f} ms   = {t_full / t_np:6.1f} x numpy   (target <= 5)")
    print(f"  the kernel's tiles in numpy  {t_tiled * 1e3:9.1f} ms   = {t_tiled / t_np:6.1f} x numpy   "
          f"(no engine: {res.tiling.block_dim} cores x tiles of {res.tiling.tile_length}; the floor of "
          f"figure 1 for an engine that computes tile by tile)")
    print(f"  opsim timing mode            {t_timing * 1e3:9.1f} ms   = {t_timing / t_full:6.2f} x full mode")
    print(f"  simulated instructions/s     {ips:11.0f}   full mode")
    print(f"                               {ips_timing:11.0f}   timing mode")
    print(f"  raw SimPy timeouts/s         {sps:11.0f}   (instructions/s = {ips / sps:.3f} x raw SimPy full mode, "
          f"{ips_timing / sps:.3f} x timing mode; target >= 0.25)")
    print(f"  full mode, fast-forward on   {t_full_ff * 1e3:9.1f} ms   = {t_full_ff / t_full:6.2f} x the default run; "
          f"{skipped(res_ff)}")
    big = args.timing_elements
    if big:
        t_big, bres = best_of(lambda: mse_timing(big, fast_forward=False), 1)
        figures.update({"timing_elements": big, "opsim_timing_big_s": t_big,
                        "timing_big_over_full": t_big / t_full, "timing_big_instructions": bres.stats["instructions"],
                        "timing_big_cycles": bres.cycles})
        print(f"MSE backward fp32, {big} elements, timing mode ({bres.cycles} simulated cycles, "
              f"{bres.stats['instructions']} instructions)")
        print(f"  wall                         {t_big * 1e3:9.1f} ms   = {t_big / t_full:6.2f} x full mode at "
              f"{n} elements (target <= 2)")
    if args.ff_demo:
        # on and off alternately, the best of --repeat each: the machine of the 2^30 run is
        # cyclic garbage, freed by the next full collection, which the fast-forward's first run
        # triggers (it keeps the program it reads ahead) and pays for (one run each, fast-forward
        # first: 1.56x compiled; alternately 1.15-1.29x compiled, 0.93-1.0x pure; tenth session)
        t_on = t_off = float("inf")
        for _ in range(args.repeat):
            t, on = best_of(lambda: mse_timing(n, tiling={"block_dim": 1}, fast_forward=True), 1)
            t_on = min(t_on, t)
            t, off = best_of(lambda: mse_timing(n, tiling={"block_dim": 1}, fast_forward=False), 1)
            t_off = min(t_off, t)
        assert on.cycles == off.cycles and on.stats["pipe_busy"] == off.stats["pipe_busy"]
        figures.update({"ff_demo_on_s": t_on, "ff_demo_off_s": t_off})
        print(f"MSE backward fp32, {n} elements, timing mode, one core ({on.cycles} simulated cycles, identical "
              f"with and without the fast-forward)")
        print(f"  wall with / without          {t_on * 1e3:9.1f} / {t_off * 1e3:.1f} ms = {t_on / t_off:.2f}")
        print(f"  {skipped(on)}")
    if args.flce:
        t_flce, fres = best_of(flce_exact, 1)
        figures.update({"flce_exact_s": t_flce, "flce_cycles": fres.cycles,
                        "flce_instructions": fres.stats["instructions"]})
        print(f"FLCE grad BT 4096 / H 4096 / V 32000 bf16 on atlas-a2, high-performance, exact schedule "
              f"({fres.cycles} simulated cycles, {fres.stats['instructions']} instructions)")
        print(f"  wall                         {t_flce:9.1f} s    (target <= 20 s)")
    return figures


if __name__ == "__main__":
    main()
