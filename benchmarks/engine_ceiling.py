"""How fast can a SimPy engine with one process per pipe go, with no machine model at all?

Issue #12 asks for simulated instructions per second >= 0.25x raw SimPy timeouts per second
(benchmarks/run.py, figure 3). This script measures the ceiling of opsim's engine *design* for
that figure: a skeleton with the structure of opsim's engine (simulator/core.py) and nothing else.

* the launch shape of full-mode MSE backward fp32 2^24 on atlas-a2: 48 cores, 57 tiles each;
* per core a dispatcher process and three pipe processes (MTE2, VECTOR, MTE3), each popping an
  in-order queue of bounded depth (``scalar.queue_depth`` of atlas-a2);
* per tile 7 busy instructions with fixed costs (3 loads, 3 vector ops, 1 store: the 19,152
  instructions opsim counts for this launch) and the 8 flags of a double-buffered queue
  (set/wait pairs MTE2->VECTOR, VECTOR->MTE3 and the two buffer-free hand-offs back);
* no links, no L2, no memory checks, no numerics, no observers, no trace, no instruction objects.

Whatever opsim adds to this (a memory model, numerics, profiling) can only make it slower, so the
ratio printed here bounds figure 3 from above for any engine that keeps a SimPy process step per
instruction. Both rates are measured in the same run; repeat it when the machine is quiet.

    python benchmarks/engine_ceiling.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time
from collections import deque
from typing import Any, Generator

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import simpy  # noqa: E402

import opsim  # noqa: E402

BUSY, SET, WAIT = 0, 1, 2


class _Flag:
    """A counting flag: a set before its wait is remembered, a wait before its set blocks."""

    __slots__ = ("env", "count", "waiter")

    def __init__(self, env: simpy.Environment, count: int = 0) -> None:
        self.env, self.count, self.waiter = env, count, None

    def set(self) -> None:
        if self.waiter is not None:
            ev, self.waiter = self.waiter, None
            ev.succeed()
        else:
            self.count += 1

    def wait(self) -> simpy.Event | None:
        if self.count:
            self.count -= 1
            return None
        self.waiter = self.env.event()
        return self.waiter


class _Pipe:
    """An in-order pipe: one SimPy process popping a bounded queue, as opsim's Pipe._run does."""

    __slots__ = ("env", "queue", "item", "space", "done")

    def __init__(self, env: simpy.Environment, done: list[int]) -> None:
        self.env, self.queue, self.item, self.space, self.done = env, deque(), None, None, done
        env.process(self.run())

    def push(self, instr: tuple[int, Any]) -> None:
        self.queue.append(instr)
        if self.item is not None:
            ev, self.item = self.item, None
            ev.succeed()

    def run(self) -> Generator[simpy.Event, Any, None]:
        env, queue = self.env, self.queue
        while True:
            if not queue:
                self.item = env.event()
                yield self.item
            kind, arg = queue.popleft()
            if self.space is not None:
                ev, self.space = self.space, None
                ev.succeed()
            if kind == BUSY:
                yield env.timeout(arg)
                self.done[0] += 1
            elif kind == SET:
                arg.set()
            else:
                ev = arg.wait()
                if ev is not None:
                    yield ev


def skeleton(cores: int, tiles: int, depth: int) -> tuple[int, float]:
    """Run the skeleton; return (busy instructions completed, wall seconds of env.run)."""
    env = simpy.Environment()
    done = [0]
    for _ in range(cores):
        mte2, vec, mte3 = (_Pipe(env, done) for _ in range(3))
        loaded, computed = _Flag(env), _Flag(env)
        in_free, out_free = _Flag(env, 2), _Flag(env, 2)     # double buffering
        tile = [(mte2, (WAIT, in_free)), (mte2, (BUSY, 300)), (mte2, (BUSY, 300)), (mte2, (BUSY, 300)),
                (mte2, (SET, loaded)),
                (vec, (WAIT, loaded)), (vec, (WAIT, out_free)),
                (vec, (BUSY, 100)), (vec, (BUSY, 100)), (vec, (BUSY, 100)),
                (vec, (SET, in_free)), (vec, (SET, computed)),
                (mte3, (WAIT, computed)), (mte3, (BUSY, 300)), (mte3, (SET, out_free))]

        def dispatch(tile: list = tile) -> Generator[simpy.Event, Any, None]:
            for _ in range(tiles):
                for pipe, instr in tile:
                    while len(pipe.queue) >= depth:
                        pipe.space = env.event()
                        yield pipe.space
                    pipe.push(instr)
        env.process(dispatch())
    t0 = time.perf_counter()
    env.run()
    return done[0], time.perf_counter() - t0


def raw_simpy(n: int = 1_000_000) -> float:
    """Raw SimPy timeouts per second: one process yielding env.timeout(1) in a loop."""
    env = simpy.Environment()

    def proc() -> Generator[simpy.Event, Any, None]:
        for _ in range(n):
            yield env.timeout(1)
    env.process(proc())
    t0 = time.perf_counter()
    env.run()
    return n / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=48)
    ap.add_argument("--tiles", type=int, default=57, help="tiles per core (57: MSE 2^24 on atlas-a2)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    depth = opsim.device_spec("atlas-a2").scalar.queue_depth
    best = float("inf")
    n = 0
    for _ in range(args.repeat):
        n, wall = skeleton(args.cores, args.tiles, depth)
        best = min(best, wall)
    sps = raw_simpy()
    ips = n / best
    print(f"skeleton: {args.cores} cores x {args.tiles} tiles, queue depth {depth}: {n} busy instructions "
          f"in {best * 1e3:.1f} ms = {ips:.0f} instructions/s")
    print(f"raw SimPy: {sps:.0f} timeouts/s")
    print(f"ceiling of figure 3 for a process-per-pipe engine: {ips / sps:.3f} x raw SimPy (target >= 0.25)")
    return {"instructions": n, "skeleton_s": best, "instructions_per_s": ips, "simpy_timeouts_per_s": sps,
            "ratio": ips / sps}


if __name__ == "__main__":
    main()
