"""Per-L1-chunk costs of the exact FLCE schedule on a scaled-down shape (the full size takes minutes).

The exact schedule (``tiling={"coarsen": 1}``) of fused_linear_cross_entropy_loss_grad, high-performance
mode, bf16 on atlas-a2, at BT x H x V (default 1024 x 4096 x 8192: the same base tiles, L1 chunks and
per-chunk instruction mix as the 4096 x 4096 x 32000 target, 8,192 chunks instead of 128,000). Prints
what the engine did per cube L1 chunk -- instructions and flags each pipe completed, SimPy events, link
recomputes, L2 accesses and L2 line touches -- and the CPU seconds (``time.process_time``, this process
only: the machine may be shared), and extrapolates the CPU time to the target by its chunk count.
``--profile N`` prints the N functions with the most own time (cProfile; slows the run ~4x).

    python benchmarks/flce_exact_profile.py [--shape 1024 4096 8192] [--profile 30]

The counters wrap engine methods for this run only (simpy.Environment.step,
LinkNetwork._recompute, L2Cache.access_runs) and an observer counts the completed instructions.
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import time
from typing import Any

import simpy

import opsim
from opsim import api
from opsim.kernels.ascend.flce_grad import BASE_K, BASE_M, BASE_N, STEP_K
from opsim.simulator.cube import ceil_div
from opsim.simulator import l2 as l2_module
from opsim.simulator import links

TARGET = (4096, 4096, 32000)


def chunks(bt: int, h: int, v: int) -> int:
    """Cube L1 chunks of the exact high-performance schedule: input_grad (BT x H, K = V) and
    weight_grad (V x H, K = BT) in base tiles, ceil(K / (base_k * step_k)) chunks per tile."""
    kc = BASE_K * STEP_K
    return (ceil_div(bt, BASE_M) * ceil_div(h, BASE_N) * ceil_div(v, kc)
            + ceil_div(v, BASE_M) * ceil_div(h, BASE_N) * ceil_div(bt, kc))


def run(bt: int, h: int, v: int) -> Any:
    ts = opsim.TensorSpec
    ops = {"grad": ts((bt,), "fp32"), "input": ts((bt, h), "bf16"), "weight": ts((v, h), "bf16"),
           "target_mask": ts((bt,), "bool"), "masked_target": ts((bt,), "int64"), "softmax": ts((bt, v), "fp32")}
    return opsim.run("fused_linear_cross_entropy_loss_grad", device="atlas-a2", mode="timing", trace="off",
                     tiling={"coarsen": 1}, **ops)


class _Counter:
    """Observer: instructions and flags completed, by class."""

    def __init__(self, counts: collections.Counter) -> None:
        self.counts = counts

    def on_instruction(self, core: Any, pipe: Any, instr: Any, start: int, end: int) -> None:
        self.counts["completed (instructions + flags)"] += 1
        if instr.busy:
            self.counts["busy instructions"] += 1
        self.counts[f"  {type(instr).__name__}"] += 1


def counted_run(bt: int, h: int, v: int) -> tuple[Any, collections.Counter]:
    counts: collections.Counter = collections.Counter()
    step, recompute, access = simpy.Environment.step, links.LinkNetwork._recompute, l2_module.L2Cache.access_runs
    real_device = api.Device

    def counting_step(self: Any) -> None:
        counts["SimPy events"] += 1
        step(self)

    def counting_recompute(self: Any, *a: Any, **kw: Any) -> Any:
        counts["link recomputes"] += 1
        return recompute(self, *a, **kw)

    def counting_access(self: Any, runs: Any, *, write: bool) -> int:
        c = self.chunk
        counts["L2 accesses"] += 1
        counts["L2 line touches"] += sum((a + n - 1) // c - a // c + 1 for a, n in runs if n > 0)
        return access(self, runs, write=write)

    def device(*a: Any, **kw: Any) -> Any:
        dev = real_device(*a, **kw)
        dev.observers.append(_Counter(counts))
        return dev

    simpy.Environment.step = counting_step                 # type: ignore[method-assign]
    links.LinkNetwork._recompute = counting_recompute      # type: ignore[method-assign]
    l2_module.L2Cache.access_runs = counting_access        # type: ignore[method-assign]
    api.Device = device                              # type: ignore[misc]
    try:
        res = run(bt, h, v)
    finally:
        simpy.Environment.step = step                      # type: ignore[method-assign]
        links.LinkNetwork._recompute = recompute           # type: ignore[method-assign]
        l2_module.L2Cache.access_runs = access             # type: ignore[method-assign]
        api.Device = real_device                     # type: ignore[misc]
    return res, counts


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", type=int, nargs=3, default=(1024, 4096, 8192), metavar=("BT", "H", "V"))
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="also print the N top own-time functions")
    args = ap.parse_args(argv)
    bt, h, v = args.shape
    n = chunks(bt, h, v)
    t0 = time.process_time()
    res = run(bt, h, v)
    cpu = time.process_time() - t0
    _, counts = counted_run(bt, h, v)
    scale = chunks(*TARGET) / n
    print(f"FLCE exact, BT {bt} / H {h} / V {v} bf16 on atlas-a2: {res.cycles} cycles, {n} L1 chunks")
    print(f"  CPU {cpu:.2f} s = {cpu / n * 1e6:.0f} us per chunk; x{scale:.2f} chunks -> "
          f"{cpu * scale:.0f} s CPU at BT {TARGET[0]} / H {TARGET[1]} / V {TARGET[2]}")
    for key in sorted(counts, key=lambda k: (k.startswith("  "), k)):
        print(f"  {key:36s} {counts[key]:10d}  {counts[key] / n:8.2f} per chunk")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        run(bt, h, v)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.profile)
    return {"cpu_s": cpu, "chunks": n, "cycles": res.cycles, "extrapolated_cpu_s": cpu * scale,
            **{k.strip(): c for k, c in counts.items()}}


if __name__ == "__main__":
    main()
