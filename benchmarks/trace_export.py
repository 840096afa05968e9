"""Trace costs, measured in one run (never asserted in tests).

1. Recording: wall time per ``Trace.add_slice`` call (the simulator's hot-path cost per event),
   and the whole-run overhead of ``trace="instruction"`` over ``trace="off"`` per recorded slice
   on a real operator run (MSE backward, fp32, atlas-a2).
2. Memory: host bytes per slice held by the columns at 10^6 slices (``Trace.memory_bytes``) and
   the interpreter's own view (tracemalloc) of building that trace.
3. Export: events per second for Chrome JSON (streamed to a file) and Perfetto protobuf
   (``TraceProtoBuilder``) at 10^6 slices, plus the file sizes.

The synthetic trace looks like a real one: 48 vector cores x 3 pipes (MTE2, VECTOR, MTE3) of
back-to-back instructions with dtype, elements, bytes, tile and address, a flow for every fourth
slice and a bandwidth counter point for every tenth.

Times are process CPU time (``time.process_time``), not wall time: on a shared 2-core machine
other processes stretch wall time by several times while the CPU time of this one barely moves.

Run: python benchmarks/trace_export.py [--events N] [--skip-run]
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time
import tracemalloc

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from opsim.traces.trace import Trace  # noqa: E402

PIPES = ("MTE2", "VECTOR", "MTE3")
NAMES = {"MTE2": "DataCopyPad", "VECTOR": "Mul", "MTE3": "DataCopyPad"}


def synthetic(n: int) -> tuple[Trace, float]:
    """A trace of ``n`` slices built through the recording API; returns it and seconds spent."""
    tr = Trace("instruction", 1.8e9, metadata={"device": "atlas-a2", "operator": "synthetic",
                                                "link_capacity_GBps": {"HBM": 1382.4}})
    tracks = [tr.track(f"core{c // 2}.veccore{c % 2}", p) for c in range(48) for p in PIPES]
    host = tr.track("host", "stream0")
    per_track = n // len(tracks)
    now = [0] * len(tracks)
    t0 = time.process_time()
    add_slice, add_flow, add_counter = tr.add_slice, tr.add_flow, tr.add_counter
    k = 0
    for i in range(per_track):
        for t, track in enumerate(tracks):
            start = now[t]
            end = start + 100 + (i * 7 + t) % 50
            now[t] = end
            pipe = PIPES[t % 3]
            idx = add_slice(track, NAMES[pipe], start, end, elements=4096,
                            nbytes=16384 if pipe != "VECTOR" else 0, tile=i,
                            addr=0x124000000000 + 16384 * i, detail="fp32")
            k += 1
            if k % 4 == 0 and idx > 0:
                add_flow(idx - 1, idx)
            if k % 10 == 0:
                add_counter("memory", "HBM GB/s", start, float(k % 800))
    spent = time.process_time() - t0
    tr.add_slice(host, "synthetic", 0, max(now), detail=f"block_dim={48}")
    return tr, spent


def run_overhead(repeat: int = 5) -> tuple[float, int, float, float]:
    """(ns per recorded event, events, best seconds with trace off, best at instruction level).

    The two levels alternate so that a change in machine load hits both alike."""
    import opsim
    rng = np.random.default_rng(0)
    n = 1 << 21
    x, y, g = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    kw = dict(grad_output=g, self=x, target=y, reduction="mean", tiling={"tile_length": 1024})
    best = {"off": float("inf"), "instruction": float("inf")}
    res = None
    for _ in range(repeat):
        for level in best:
            t0 = time.process_time()
            out = opsim.run("mse_loss_backward", trace=level, **kw)
            best[level] = min(best[level], time.process_time() - t0)
            if level == "instruction":
                res = out
    events = len(res.trace) + len(res.trace.c_track) + len(res.trace.f_from)
    t_off, t_on = best["off"], best["instruction"]
    return (t_on - t_off) / events * 1e9, events, t_off, t_on


def add_slice_cost(n: int = 200_000, repeat: int = 5) -> float:
    """Best-of ns per bare ``add_slice`` call with realistic arguments."""
    best = float("inf")
    for _ in range(repeat):
        tr = Trace("instruction", 1.8e9)
        track = tr.track("core0.veccore0", "MTE2")
        add = tr.add_slice
        t0 = time.process_time()
        for i in range(n):
            add(track, "DataCopyPad", i, i + 1, elements=4096, nbytes=16384, tile=3, addr=0x1240, detail="fp32")
        best = min(best, (time.process_time() - t0) / n * 1e9)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--skip-run", action="store_true", help="skip the operator-run overhead figure")
    args = ap.parse_args()

    print(f"machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"record  add_slice alone: {add_slice_cost():.0f} ns per call (best of 5 x 200k)")
    tr, spent = synthetic(args.events)
    n = len(tr)
    events = n + len(tr.c_track) + len(tr.f_from)
    print(f"synthetic trace: {n} slices, {len(tr.f_from)} flows, {len(tr.c_track)} counter points")
    print(f"record  building it (generator loop included): {spent / n * 1e9:.0f} ns per slice")
    print(f"memory  columns {tr.memory_bytes() / n:.1f} B per slice "
          f"({tr.memory_bytes() / events:.1f} B per event with flows and counters)")
    tracemalloc.start()
    small, _ = synthetic(100_000)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"memory  tracemalloc peak building a 10^5-slice trace: {peak / len(small):.1f} B per slice")
    if not args.skip_run:
        ns, ev, t_off, t_on = run_overhead()
        print(f"record  MSE backward 2^21 fp32 (tile 1024, 48 cores): {ev} trace events; best run "
              f"{t_off:.2f} s CPU with trace off, {t_on:.2f} s at instruction level -> {ns:.0f} ns per "
              f"event ({100 * (t_on - t_off) / t_off:+.1f}% of the run)")

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.json")
        t0 = time.process_time()
        tr.to_chrome_json(path)
        dt = time.process_time() - t0
        json_events = n + 2 * len(tr.f_from) + len(tr.c_track)   # X + s/f + C (metadata aside)
        print(f"export  Chrome JSON: {dt:.2f} s, {json_events / dt:,.0f} events/s, "
              f"{os.path.getsize(path) / 1e6:.1f} MB ({os.path.getsize(path) / json_events:.0f} B/event)")
        t0 = time.process_time()
        from opsim.traces.loader import load_chrome
        back = load_chrome(path)
        dt_load = time.process_time() - t0
        print(f"load    Chrome JSON: {dt_load:.2f} s, {json_events / dt_load:,.0f} events/s "
              f"({len(back)} slices back)")
        try:
            import perfetto  # noqa: F401
        except ImportError:
            print("export  Perfetto protobuf: skipped (pip install 'opsim[perfetto]')")
            return
        path = os.path.join(tmp, "t.pftrace")
        t0 = time.process_time()
        tr.to_perfetto(path)
        dt = time.process_time() - t0
        pb_events = 2 * n + len(tr.c_track)   # a slice is a begin and an end packet
        print(f"export  Perfetto protobuf: {dt:.2f} s, {events / dt:,.0f} trace events/s "
              f"({pb_events / dt:,.0f} packets/s), {os.path.getsize(path) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
