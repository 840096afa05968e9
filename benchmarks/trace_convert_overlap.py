"""Converting a trace whose slices overlap on one thread: cost grows as n log n, not n².

A trace from another tool may put overlapping slices on one thread (async work, several
in-flight DMAs). The exporters split them into sub-lanes ``PIPE#k`` (traces/layout.py
``_lanes``). This measures ``opsim trace convert`` end to end (load the Chrome JSON, lay out,
write Perfetto protobuf) at N and 4N overlapping slices in one run and prints the CPU-time ratio:
a linear-logarithmic conversion gives about 4-5x, a quadratic one 16x.

Times are process CPU time (``time.process_time``): the machine is shared.

Run: python benchmarks/trace_convert_overlap.py [--slices N]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opsim import cli  # noqa: E402


def overlapping_trace(n: int, path: pathlib.Path) -> None:
    """n slices on one thread, each starting 10 ns after the previous and lasting 0.1-5 µs."""
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "core0.veccore0"}},
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "MTE2"}}]
    for i in range(n):
        events.append({"ph": "X", "name": "DataCopy", "pid": 1, "tid": 1, "ts": i * 0.01,
                       "dur": 0.1 + (i * 7919 % 4900) / 1000})
    path.write_text(json.dumps({"traceEvents": events}))


def convert_seconds(n: int, tmp: pathlib.Path) -> float:
    src = tmp / f"overlap{n}.json"
    overlapping_trace(n, src)
    t0 = time.process_time()
    code = cli.main(["trace", "convert", str(src), "-o", str(tmp / f"overlap{n}.pftrace")])
    assert code == 0
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slices", type=int, default=50_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        small = convert_seconds(args.slices, tmp)
        big = convert_seconds(4 * args.slices, tmp)
    print(f"convert {args.slices} overlapping slices: {small:.2f} s CPU")
    print(f"convert {4 * args.slices} overlapping slices: {big:.2f} s CPU")
    print(f"ratio for 4x the slices: {big / small:.1f}x (n log n ~ 4-5x, n^2 = 16x)")


if __name__ == "__main__":
    main()
